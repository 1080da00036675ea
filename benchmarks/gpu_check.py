"""A first check of this code on a GPU: numerics, MirroredStrategy and speed.

    benchmarks/gpu_check.sh                 # the wrapper: picks the interpreter
    .venv/bin/python benchmarks/gpu_check.py [--layers=12 --seq_length=128 ...]

What it does, meant to take under five minutes on one GPU (it has not yet
run on a GPU):

1. Records the machine: nvidia-smi's view of the GPUs and driver, Python,
   TensorFlow and the CUDA/cuDNN it was built with. Without a GPU visible to
   TensorFlow it stops here, exit status 1, its last line saying so.
2. Builds run_classifier's model and training step on a BERT-Base-shaped
   encoder (random weights, dropout off, so every run is deterministic) and
   trains --check_steps steps on one fixed batch, first on the CPU in float32
   (the reference), then on the GPU in fp32, bf16 and fp16, each without and
   with XLA, every run from the same initial weights. The loss of each step
   must match the CPU's within a relative tolerance (fp32: 1e-3; TensorFloat-32
   is turned off for these runs, so fp32 means fp32). fp16 steps that dynamic
   loss scaling skips are reported, and then only the losses before the first
   skip are compared.
3. Times training steps at --batch_size (by default the comparison's batch,
   so that XLA compiles each configuration once) on the GPU for each
   configuration (sequences/s), and forward passes at batch 8 in fp32
   (TensorFlow's default math: TensorFloat-32 where the GPU has it) and
   fp16, which it prints next to NVIDIA's published single-GPU BERT-Base
   inference figures for the same sequence length (see NVIDIA_SOURCE;
   NVIDIA's TensorFlow BERT READMEs give fine-tuning *training* throughput
   only for BERT-Large, so the training figures are printed on their own).
4. Trains the same model through the scripts' runner (training.make_estimator)
   once on one GPU and once with --distribution_strategy=mirrored on every
   visible GPU, at the same global batch, and compares the trained variables.

Exit status 0 when every comparison passes, 1 otherwise; the last line says
which. --device=cpu runs the same comparisons with the CPU standing in for the
GPU: it checks this script, not a GPU.
"""

import argparse
import datetime
import os
import platform
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

NVIDIA_SOURCE = ("NVIDIA DeepLearningExamples, TensorFlow2/LanguageModeling/BERT/README.md, "
                 "'Fine-tuning inference performance for SQuAD v1.1' (NGC TensorFlow 21.02 "
                 "container): https://github.com/NVIDIA/DeepLearningExamples/tree/master/"
                 "TensorFlow2/LanguageModeling/BERT")
# BERT-Base, batch 8, sentences/s: {sequence length: {GPU: (fp32 or TF32, fp16)}}.
# On the A100 the first figure is TF32, as NVIDIA ran it.
NVIDIA_BASE_INFERENCE_BATCH8 = {
    128: {"V100 16GB": (428.52, 1081.17), "V100 32GB": (454.85, 1030.03),
          "A100 80GB": (1490.68, 1786.25), "T4 16GB": (174.46, 532.56)},
    384: {"V100 16GB": (146.15, 504.24), "V100 32GB": (148.36, 488.45),
          "A100 80GB": (645.88, 846.81), "T4 16GB": (51.33, 192.61)},
}
TOLERANCE = {"fp32": 1e-3, "bf16": 3e-2, "fp16": 1e-2}
CONFIGS = [("fp32", False), ("fp32", True), ("bf16", False), ("bf16", True),
           ("fp16", False), ("fp16", True)]


def say(text=""):
    print(text, flush=True)


def nvidia_smi():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return ["not available (%s)" % e.__class__.__name__]
    lines = out.stdout.strip().splitlines()
    return lines or ["no output (exit status %d)" % out.returncode]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", choices=["gpu", "cpu"], default="gpu",
                   help="cpu: the CPU stands in for the GPU (checks this script only)")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--hidden_size", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--intermediate_size", type=int, default=3072)
    p.add_argument("--vocab_size", type=int, default=30522)
    p.add_argument("--seq_length", type=int, default=128)
    p.add_argument("--check_batch", type=int, default=16, help="batch of the CPU comparison")
    p.add_argument("--check_steps", type=int, default=3)
    p.add_argument("--batch_size", type=int, default=None,
                   help="batch of the timed steps (default: --check_batch)")
    p.add_argument("--timed_steps", type=int, default=20)
    for precision, tol in TOLERANCE.items():
        p.add_argument("--%s_rtol" % precision, type=float, default=tol,
                       help="relative loss tolerance of %s against the CPU" % precision)
    args = p.parse_args(argv)
    if args.batch_size is None:
        args.batch_size = args.check_batch
    return args


class Checker(object):
    """Builds, initialises and trains run_classifier's model in fresh graphs."""

    def __init__(self, args):
        import numpy as np
        import tensorflow.compat.v1 as tf

        import modeling
        self.np, self.tf, self.args = np, tf, args
        self.config = modeling.BertConfig(
            vocab_size=args.vocab_size, hidden_size=args.hidden_size,
            num_hidden_layers=args.layers, num_attention_heads=args.heads,
            intermediate_size=args.intermediate_size, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0, max_position_embeddings=max(512, args.seq_length))
        rng = np.random.RandomState(0)
        self.batches = {}
        for size in {args.check_batch, args.batch_size, 8}:
            seq = args.seq_length
            self.batches[size] = {
                "input_ids": rng.randint(1, args.vocab_size, (size, seq)).astype(np.int32),
                "input_mask": np.ones((size, seq), np.int32),
                "segment_ids": (np.arange(seq)[None, :] >= seq // 2).astype(np.int32)
                .repeat(size, 0),
                "label_ids": rng.randint(0, 2, size).astype(np.int32)}
        self.initial = None

    def build_loss(self, features, precision, is_training=True):
        """run_classifier's classifier (2 labels) on `features`; the loss and logits."""
        from scriptkit import training
        tf = self.tf
        options = training.TrainingOptions(precision=precision)
        model = __import__("modeling").BertModel(
            self.config, is_training=is_training, input_ids=features["input_ids"],
            input_mask=features["input_mask"], token_type_ids=features["segment_ids"],
            **options.model_kwargs())
        pooled = model.get_pooled_output()
        weights = tf.get_variable("output_weights", [2, self.config.hidden_size],
                                  initializer=tf.truncated_normal_initializer(stddev=0.02))
        bias = tf.get_variable("output_bias", [2], initializer=tf.zeros_initializer())
        logits = tf.nn.bias_add(tf.matmul(pooled, weights, transpose_b=True), bias)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=features["label_ids"], logits=logits))
        return loss, logits, options

    def _placeholders(self):
        tf = self.tf
        seq = self.args.seq_length
        return {"input_ids": tf.placeholder(tf.int32, [None, seq]),
                "input_mask": tf.placeholder(tf.int32, [None, seq]),
                "segment_ids": tf.placeholder(tf.int32, [None, seq]),
                "label_ids": tf.placeholder(tf.int32, [None])}

    def _session(self, xla):
        tf = self.tf
        config = tf.ConfigProto(allow_soft_placement=True)
        if xla:
            config.graph_options.optimizer_options.global_jit_level = tf.OptimizerOptions.ON_1
        return tf.Session(config=config)

    def _load(self, sess):
        """Records the first graph's initial weights; sets later graphs' to
        them. Each in one run: a run per variable would build an executor
        per variable."""
        tvars = self.tf.trainable_variables()
        if self.initial is None:
            self.initial = dict(zip([v.op.name for v in tvars], sess.run(tvars)))
        else:
            # What Variable.load does, for all variables at once.
            sess.run([v.initializer for v in tvars],
                     {v.initializer.inputs[1]: self.initial[v.op.name] for v in tvars})

    def train(self, device, precision, xla, timed):
        """Losses of --check_steps steps on the check batch (the step count
        they were taken at, skipped fp16 steps excluded) and, if `timed`,
        training sequences/s at --batch_size."""
        from scriptkit import training
        tf, args = self.tf, self.args
        with tf.Graph().as_default():
            with tf.device(device):
                ph = self._placeholders()
                loss, _, options = self.build_loss(ph, precision)
                train_op = training.create_train_op(loss, 1e-4, 1000, 0, False, options)
                step = tf.train.get_or_create_global_step()
            with self._session(xla) as sess:
                sess.run(tf.global_variables_initializer())
                self._load(sess)
                feed = {ph[k]: v for k, v in self.batches[args.check_batch].items()}
                losses, applied = [], []
                for _ in range(args.check_steps):
                    value, _ = sess.run([loss, train_op], feed)
                    losses.append(float(value))
                    applied.append(int(sess.run(step)))
                speed = None
                if timed:
                    feed = {ph[k]: v for k, v in self.batches[args.batch_size].items()}
                    # The comparison's fetches: at the same batch size the
                    # same executor, so XLA does not compile the step again.
                    fetches = [loss, train_op]
                    sess.run(fetches, feed)  # warm-up: allocation, compilation
                    start = time.perf_counter()
                    for _ in range(args.timed_steps):
                        sess.run(fetches, feed)
                    speed = args.batch_size * args.timed_steps / (time.perf_counter() - start)
        return losses, applied, speed

    def infer(self, device, precision, mixed_math):
        """Forward passes per second at batch 8, in sequences/s."""
        tf = self.tf
        tf.config.experimental.enable_tensor_float_32_execution(mixed_math)
        try:
            with tf.Graph().as_default():
                with tf.device(device):
                    ph = self._placeholders()
                    _, logits, _ = self.build_loss(ph, precision, is_training=False)
                with self._session(False) as sess:
                    sess.run(tf.global_variables_initializer())
                    feed = {ph[k]: v for k, v in self.batches[8].items()}
                    sess.run(logits, feed)
                    start = time.perf_counter()
                    for _ in range(self.args.timed_steps):
                        sess.run(logits, feed)
                    return 8 * self.args.timed_steps / (time.perf_counter() - start)
        finally:
            tf.config.experimental.enable_tensor_float_32_execution(False)

    def mirrored_matches_one_device(self, device, num_gpus):
        """Trains through training.py's runner on one device and with
        MirroredStrategy, from the same checkpoint at the same global batch;
        the largest difference of the trained variables, and the replicas."""
        from scriptkit import checkpoints
        from scriptkit import runtime
        from scriptkit import training
        tf, np, args = self.tf, self.np, self.args
        work = tempfile.mkdtemp(prefix="gpu_check_")
        init = os.path.join(work, "init.ckpt")
        with tf.Graph().as_default():
            self.build_loss(self._placeholders(), "fp32")
            with tf.Session() as sess:
                sess.run(tf.global_variables_initializer())
                self._load(sess)
                tf.train.Saver().save(sess, init)
        global_batch = args.check_batch * max(1, num_gpus)
        data = {k: np.concatenate([v] * max(1, num_gpus))[:global_batch]
                for k, v in self.batches[args.check_batch].items()}
        results = {}
        for strategy in ("none", "mirrored"):
            options = training.TrainingOptions(distribution_strategy=strategy)

            def model_fn(features, labels, mode, params):  # noqa: ARG001 (names required)
                with tf.device(device if strategy == "none" else None):
                    loss, _, _ = self.build_loss(features, "fp32")
                checkpoints.init_from_checkpoint(init, False)
                train_op = training.create_train_op(loss, 1e-4, 1000, 0, False, options)
                return runtime.TPUEstimatorSpec(mode=mode, loss=loss, train_op=train_op)

            def input_fn(params):
                dataset = tf.data.Dataset.from_tensor_slices(data).repeat()
                return dataset.batch(params["batch_size"], drop_remainder=True)

            out = os.path.join(work, strategy)
            run_config = training.make_run_config(out, save_checkpoints_steps=args.check_steps,
                                                  options=options)
            estimator = training.make_estimator(model_fn, run_config, False,
                                                train_batch_size=global_batch)
            estimator.train(input_fn, max_steps=args.check_steps)
            reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(out))
            results[strategy] = {name: reader.get_tensor(name) for name in self.initial}
            results[strategy + "_replicas"] = getattr(estimator, "_replicas", 1)
        worst = max(float(np.max(np.abs(results["none"][n] - results["mirrored"][n])))
                    for n in self.initial)
        return worst, results["mirrored_replicas"]


def compare(name, losses, applied, reference, rtol):
    """Prints one line; returns whether `losses` match `reference`."""
    usable = len(losses)
    for i, count in enumerate(applied):
        if count != i + 1:  # a step skipped by loss scaling
            usable = i + 1  # that step's own loss was computed before the skip
            break
    worst = max(abs(a - b) / max(abs(b), 1e-12)
                for a, b in zip(losses[:usable], reference[:usable]))
    ok = worst <= rtol
    note = ""
    if usable < len(losses):
        note = " (loss scaling skipped a step: %d of %d losses compared)" % (usable, len(losses))
    say("  %-12s losses %s  max rel. diff %.2e (tol %.0e)  %s%s" % (
        name, " ".join("%.6f" % x for x in losses), worst, rtol, "ok" if ok else "MISMATCH",
        note))
    return ok


def main(argv):
    args = parse_args(argv)
    say("gpu_check, %s UTC" % datetime.datetime.now(datetime.timezone.utc)
        .strftime("%Y-%m-%d %H:%M"))
    say("Python %s on %s" % (platform.python_version(), platform.platform()))
    smi = nvidia_smi()
    for line in smi:
        say("nvidia-smi: %s" % line)
    from scriptkit import quiet_tf  # noqa: F401  (TensorFlow as the scripts import it)
    import tensorflow as tf2
    tf2.get_logger().setLevel("WARNING")  # the runner's step-by-step INFO lines
    build = tf2.sysconfig.get_build_info()
    say("TensorFlow %s (built with CUDA %s, cuDNN %s)" % (
        tf2.__version__, build.get("cuda_version", "none"), build.get("cudnn_version", "none")))
    gpus = tf2.config.list_physical_devices("GPU")
    names = []
    for gpu in gpus:
        details = tf2.config.experimental.get_device_details(gpu)
        names.append(details.get("device_name", gpu.name))
        say("GPU %s: %s, compute capability %s" % (
            gpu.name, names[-1], details.get("compute_capability", "?")))
    if args.device == "gpu" and not gpus:
        if smi and not smi[0].startswith(("not available", "no output")):
            say("nvidia-smi lists a GPU but TensorFlow sees none: on Linux, TensorFlow needs "
                "its CUDA libraries (pip install 'tensorflow[and-cuda]' in this project's "
                "version range, docs/devices.md).")
        say("gpu_check: FAILED: no GPU found")
        return 1
    device = "/gpu:0" if args.device == "gpu" else "/cpu:0"
    tf2.config.experimental.enable_tensor_float_32_execution(False)
    say("Model: %d layers, hidden %d, %d heads, sequence %d; comparison batch %d, %d steps"
        % (args.layers, args.hidden_size, args.heads, args.seq_length, args.check_batch,
           args.check_steps))

    checker = Checker(args)
    ok = True
    start = time.perf_counter()
    reference, _, _ = checker.train("/cpu:0", "fp32", False, timed=False)
    say("CPU fp32 reference: losses %s (%.0f s)" % (
        " ".join("%.6f" % x for x in reference), time.perf_counter() - start))
    speeds = {}
    say("%s runs against the CPU:" % args.device.upper())
    for precision, xla in CONFIGS:
        name = precision + ("+XLA" if xla else "")
        try:
            losses, applied, speed = checker.train(device, precision, xla, timed=True)
        except Exception as e:  # a configuration that fails is a finding, not the end
            say("  %-12s FAILED: %s: %s" % (name, e.__class__.__name__, str(e)[:300]))
            ok = False
            continue
        ok &= compare(name, losses, applied, reference, getattr(args, precision + "_rtol"))
        speeds[name] = speed

    say("Training speed, batch %d, sequence %d, TensorFloat-32 off (sequences/s):"
        % (args.batch_size, args.seq_length))
    for name, speed in speeds.items():
        say("  %-12s %8.1f" % (name, speed))
    say("  (NVIDIA's TensorFlow BERT READMEs give fine-tuning training throughput for "
        "BERT-Large only: no BERT-Base figure to compare with.)")

    fp32 = checker.infer(device, "fp32", mixed_math=True)
    fp16 = checker.infer(device, "fp16", mixed_math=True)
    say("Inference, batch 8, sequence %d (sequences/s): fp32 (TensorFloat-32 where the GPU "
        "has it, TensorFlow's default) %.1f, fp16 %.1f" % (args.seq_length, fp32, fp16))
    published = NVIDIA_BASE_INFERENCE_BATCH8.get(args.seq_length)
    if published and args.layers == 12 and args.hidden_size == 768:
        say("  NVIDIA's published figures for the same model, batch and sequence length:")
        for gpu, (f32, f16) in published.items():
            mine = any(gpu.split()[0] in n for n in names)
            say("    %-10s fp32/TF32 %8.2f  fp16 %8.2f%s" % (gpu, f32, f16,
                                                            "   <- this GPU's type" if mine
                                                            else ""))
        say("  Source: " + NVIDIA_SOURCE)
    else:
        say("  NVIDIA publishes BERT-Base figures for sequence lengths 128 and 384 only.")

    num_gpus = len(gpus) if args.device == "gpu" else 0
    try:
        worst, replicas = checker.mirrored_matches_one_device(device, num_gpus)
        match = worst <= 1e-4
        say("MirroredStrategy over %d replica(s) vs one device: largest variable difference "
            "%.2e (tol 1e-04)  %s" % (replicas, worst, "ok" if match else "MISMATCH"))
        ok &= match
    except Exception as e:
        say("MirroredStrategy FAILED: %s: %s" % (e.__class__.__name__, str(e)[:300]))
        ok = False

    if ok:
        say("gpu_check: PASSED (%s)" % (", ".join(names) if args.device == "gpu" else
                                        "CPU standing in for a GPU"))
        return 0
    say("gpu_check: FAILED: see the MISMATCH/FAILED lines above")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
