"""Training-step throughput and peak memory of a BERT-Base-shaped model on
CPU/GPU, for each training option of the scripts.

    python benchmarks/bench_training.py --threads=2 --steps=3
    python benchmarks/bench_training.py --threads=1 --configs=fp32,recompute
    python benchmarks/bench_training.py --layers=2 --steps=2 --heads=finetune  # quick

Each (head, configuration) runs in its own child process, which builds the
model and train op the way the scripts do (`modeling.BertModel(...,
compute_type=, recompute_grad=)` and `optimization.create_optimizer(...,
gradient_accumulation_steps=, loss_scale_manager=)`), runs one warm-up update
and `--steps` timed updates, and reports the median seconds per update (wall
and process CPU time), examples/s and the child's peak resident memory (the
larger of ru_maxrss and VmHWM, which is the whole process: TensorFlow, the
variables, the Adam slots and the activations), and next to it the peak
of the updates alone ("of steps": VmHWM restarted after the variables'
initialization, in case its temporaries reach higher).

Heads:
  finetune   run_classifier's: dropout + 2-way softmax on the pooled output.
  pretrain   run_pretraining's: masked LM (20 predictions per sequence, output
             layer tied to the word embeddings) + next-sentence prediction.

Configurations (comma-separated in --configs):
  fp32       the original's computation (baseline).
  recompute  --recompute_grad: each layer recomputed in the backward pass.
  bf16       --precision=bf16 (matmuls and activations in bfloat16).
  fp16       --precision=fp16 with dynamic loss scaling.
  xla        --use_xla: XLA auto-clustering (TF_XLA_FLAGS set in the child
             before TensorFlow starts, plus global_jit_level ON_1).
  accum2     --gradient_accumulation_steps=2 with micro-batch batch/2: one
             update = 2 session runs; examples/s counts the whole batch.
  recompute_bf16  both options together.
  lamb       --optimizer=lamb (the fp32 computation with LAMB instead of
             AdamW): list it next to fp32, e.g. --configs=fp32,lamb,fp32,lamb,
             for the two interleaved.
  original   Google's original modeling.py and optimization.py
             (bert-tensorflow 1.0.4, requirements-bench.txt) in float32, its
             tf.contrib layer_norm replaced by the same computation
             (tests/reference.py); TensorFlow 2.15 only (it needs tf.layers).

TensorFlow is imported as the scripts import it (`quiet_tf`, with its CPU
back-end choice: oneDNN on x86-64 Linux unless TF_ENABLE_ONEDNN_OPTS says
otherwise); `original` gets TensorFlow's own default, as Google's scripts
do. The last column names the back-end each child ran on.

`--code_dir` imports modeling/optimization/... from another checkout (for
example an older commit exported with `git worktree` or `git archive`), so a
before/after comparison can run in the same invocation with
`--compare_code_dir`.
"""

import os
import resource
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from absl import app, flags  # noqa: E402

import bench_common  # noqa: E402

FLAGS = flags.FLAGS

bench_common.define_model_flags(threads=2)
flags.DEFINE_integer("batch_size", 16, "Examples per optimizer update.")
flags.DEFINE_integer("max_predictions", 20, "Masked LM predictions per sequence.")
flags.DEFINE_integer("steps", 3, "Timed updates per measurement (after 1 warm-up).")
flags.DEFINE_list("configs", "fp32,recompute,bf16,fp16,xla,accum2",
                  "Configurations to run (see the module docstring).")
flags.DEFINE_list("heads", "finetune,pretrain", "Heads: finetune, pretrain.")
flags.DEFINE_string("code_dir", ROOT, "Directory to import modeling/optimization from.")
flags.DEFINE_string("compare_code_dir", None,
                    "If set, every measurement also runs with the code from this "
                    "directory (labelled 'before'), interleaved, in the same run.")
flags.DEFINE_integer("malloc_mmap_threshold", 131072,
                     "If > 0, glibc mallopt(M_MMAP_THRESHOLD) and "
                     "TF_ONEDNN_USE_SYSTEM_ALLOCATOR=1 in each child before TensorFlow "
                     "starts, as script_runner.limit_memory_fragmentation() does; 0 keeps "
                     "glibc's default (dynamic) threshold and TensorFlow's allocator.")
flags.DEFINE_integer("child_timeout", 900, "Seconds allowed per measurement.")
flags.DEFINE_string("child", None, "Internal: 'head:config' to measure in this process.")

CONFIGS = {
    # name: (compute dtype name, recompute, accumulation steps, fp16 loss scale, xla)
    "fp32": ("float32", False, 1, False, False),
    "recompute": ("float32", True, 1, False, False),
    "bf16": ("bfloat16", False, 1, False, False),
    "fp16": ("float16", False, 1, True, False),
    "xla": ("float32", False, 1, False, True),
    "accum2": ("float32", False, 2, False, False),
    "recompute_bf16": ("bfloat16", True, 1, False, False),
    "lamb": ("float32", False, 1, False, False),
    "original": ("float32", False, 1, False, False),
}


def _peak_rss_mib(since_reset=False):
    """Peak resident memory of this process in MiB (ru_maxrss is KiB on
    Linux); with `since_reset`, VmHWM alone, which `_reset_peak_rss`
    restarts (NaN where there is none)."""
    peak = (float("nan") if since_reset
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0)
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    hwm = int(line.split()[1]) / 1024.0
                    peak = hwm if since_reset else max(peak, hwm)
    except OSError:
        pass
    return peak


def _reset_peak_rss():
    """Restarts VmHWM from the current resident size (Linux: writing 5 to
    /proc/self/clear_refs), so that a later `_peak_rss_mib` covers what
    runs after this call only; False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _build(head, config_name, batch):
    """Builds the model, loss and train op; returns (train_op, feed list)."""
    import numpy as np
    import tensorflow.compat.v1 as tf

    if config_name == "original":
        sys.path.insert(0, os.path.join(ROOT, "tests"))
        import reference
        modeling = reference.load_original_modeling()
        optimization = reference.load_original("optimization")
    else:
        import modeling
        import optimization

    dtype_name, recompute, accum, loss_scale, _ = CONFIGS[config_name]
    seq = FLAGS.seq_length
    config = bench_common.model_config(modeling)
    rng = np.random.RandomState(0)
    ids = tf.placeholder(tf.int32, [batch, seq])
    mask = tf.placeholder(tf.int32, [batch, seq])
    segments = tf.placeholder(tf.int32, [batch, seq])
    feed = {ids: rng.randint(0, FLAGS.vocab_size, (batch, seq)).astype(np.int32),
            mask: np.ones((batch, seq), np.int32),
            segments: (np.arange(seq)[None, :] >= seq // 2).astype(np.int32).repeat(batch, 0)}
    kwargs = {}
    if dtype_name != "float32" or recompute:
        kwargs = {"compute_type": getattr(tf, dtype_name), "recompute_grad": recompute}
    model = modeling.BertModel(config, is_training=True, input_ids=ids, input_mask=mask,
                               token_type_ids=segments, **kwargs)
    if head == "finetune":
        # run_classifier.create_model, 2 labels.
        labels = tf.placeholder(tf.int32, [batch])
        feed[labels] = rng.randint(0, 2, batch).astype(np.int32)
        output_layer = model.get_pooled_output()
        output_weights = tf.get_variable(
            "output_weights", [2, config.hidden_size],
            initializer=tf.truncated_normal_initializer(stddev=0.02))
        output_bias = tf.get_variable("output_bias", [2], initializer=tf.zeros_initializer())
        with tf.variable_scope("loss"):
            output_layer = tf.nn.dropout(output_layer, rate=0.1)
            logits = tf.nn.bias_add(tf.matmul(output_layer, output_weights, transpose_b=True),
                                    output_bias)
            log_probs = tf.nn.log_softmax(logits, axis=-1)
            one_hot_labels = tf.one_hot(labels, depth=2, dtype=tf.float32)
            loss = tf.reduce_mean(-tf.reduce_sum(one_hot_labels * log_probs, axis=-1))
    else:
        # run_pretraining's masked LM + next sentence heads.
        npred = FLAGS.max_predictions
        positions = tf.placeholder(tf.int32, [batch, npred])
        lm_ids = tf.placeholder(tf.int32, [batch, npred])
        lm_weights = tf.placeholder(tf.float32, [batch, npred])
        nsp = tf.placeholder(tf.int32, [batch, 1])
        feed[positions] = np.stack([np.sort(rng.choice(seq, npred, replace=False))
                                    for _ in range(batch)]).astype(np.int32)
        feed[lm_ids] = rng.randint(0, FLAGS.vocab_size, (batch, npred)).astype(np.int32)
        feed[lm_weights] = np.ones((batch, npred), np.float32)
        feed[nsp] = rng.randint(0, 2, (batch, 1)).astype(np.int32)
        sequence = model.get_sequence_output()
        flat = tf.reshape(sequence, [batch * seq, config.hidden_size])
        offsets = tf.reshape(tf.range(batch, dtype=tf.int32) * seq, [-1, 1])
        gathered = tf.gather(flat, tf.reshape(positions + offsets, [-1]))
        with tf.variable_scope("cls/predictions"):
            with tf.variable_scope("transform"):
                # The original's run_pretraining uses tf.layers.dense here.
                dense = tf.layers.dense if config_name == "original" else modeling.dense
                gathered = dense(
                    gathered, config.hidden_size,
                    activation=modeling.get_activation(config.hidden_act),
                    kernel_initializer=modeling.create_initializer(0.02), name="dense")
                gathered = modeling.layer_norm(gathered)
            output_bias = tf.get_variable("output_bias", [config.vocab_size],
                                          initializer=tf.zeros_initializer())
            logits = tf.nn.bias_add(tf.matmul(gathered, model.get_embedding_table(),
                                              transpose_b=True), output_bias)
            log_probs = tf.nn.log_softmax(logits, axis=-1)
            one_hot = tf.one_hot(tf.reshape(lm_ids, [-1]), depth=config.vocab_size,
                                 dtype=tf.float32)
            per_example = -tf.reduce_sum(log_probs * one_hot, axis=[-1])
            weights = tf.reshape(lm_weights, [-1])
            lm_loss = tf.reduce_sum(weights * per_example) / (tf.reduce_sum(weights) + 1e-5)
        with tf.variable_scope("cls/seq_relationship"):
            nsp_weights = tf.get_variable("output_weights", [2, config.hidden_size],
                                          initializer=modeling.create_initializer(0.02))
            nsp_bias = tf.get_variable("output_bias", [2], initializer=tf.zeros_initializer())
            nsp_logits = tf.nn.bias_add(tf.matmul(model.get_pooled_output(), nsp_weights,
                                                  transpose_b=True), nsp_bias)
            nsp_log_probs = tf.nn.log_softmax(nsp_logits, axis=-1)
            nsp_loss = tf.reduce_mean(-tf.reduce_sum(
                tf.one_hot(tf.reshape(nsp, [-1]), 2, dtype=tf.float32) * nsp_log_probs, -1))
        loss = lm_loss + nsp_loss
    opt_kwargs = {}
    if accum > 1:
        opt_kwargs["gradient_accumulation_steps"] = accum
    if loss_scale:
        from scriptkit import mixed_precision
        opt_kwargs["loss_scale_manager"] = mixed_precision.DynamicLossScale()
    if config_name == "lamb":
        opt_kwargs["optimizer_name"] = "lamb"
    train_op = optimization.create_optimizer(loss, 2e-5, 1000, 100, use_tpu=False,
                                             **opt_kwargs)
    return train_op, feed


def run_child(spec):
    """Measures one 'head:config' in this process; prints one RESULT line."""
    head, config_name = spec.split(":")
    _, _, accum, _, xla = CONFIGS[config_name]
    if xla:
        # Auto-clustering on CPU needs these before TensorFlow initialises.
        os.environ["TF_XLA_FLAGS"] = (os.environ.get("TF_XLA_FLAGS", "") +
                                      " --tf_xla_auto_jit=2 --tf_xla_cpu_global_jit")
    if FLAGS.malloc_mmap_threshold > 0:
        # Applied here, not through the code under test, so that older code
        # (--compare_code_dir) can be measured with the same allocator setting.
        import ctypes
        ctypes.CDLL("libc.so.6").mallopt(-3, FLAGS.malloc_mmap_threshold)  # M_MMAP_THRESHOLD
        # As the flag does: on oneDNN, large tensors from malloc, not a pool.
        os.environ["TF_ONEDNN_USE_SYSTEM_ALLOCATOR"] = "1"
    sys.path.insert(0, os.path.abspath(FLAGS.code_dir))
    if config_name != "original" and os.path.exists(
            os.path.join(FLAGS.code_dir, "quiet_tf.py")):
        # TensorFlow as that checkout's scripts import it (its CPU back-end
        # choice included); the original gets TensorFlow's own default.
        from scriptkit import quiet_tf  # noqa: F401
    import tensorflow.compat.v1 as tf
    from tensorflow.python.util import _pywrap_util_port

    batch = FLAGS.batch_size // accum
    with tf.Graph().as_default():
        train_op, feed = _build(head, config_name, batch)
        session_config = tf.ConfigProto(intra_op_parallelism_threads=FLAGS.threads,
                                        inter_op_parallelism_threads=FLAGS.threads)
        if xla:
            session_config.graph_options.optimizer_options.global_jit_level = (
                tf.OptimizerOptions.ON_1)
        with tf.Session(config=session_config) as sess:
            sess.run(tf.global_variables_initializer())
            # The initializers' temporaries can peak above the training
            # steps: the steps get a peak of their own. The reset restarts
            # ru_maxrss too, so the process peak is read first.
            init_peak = _peak_rss_mib()
            steps_measured = _reset_peak_rss()

            def update():
                for _ in range(accum):
                    sess.run(train_op, feed)

            update()  # Warm-up: graph optimisation, allocations, compilation.
            walls, cpus = [], []
            for _ in range(FLAGS.steps):
                wall, cpu = time.perf_counter(), time.process_time()
                update()
                walls.append(time.perf_counter() - wall)
                cpus.append(time.process_time() - cpu)
    wall = statistics.median(walls)
    cpu = statistics.median(cpus) / FLAGS.threads
    result = {"head": head, "config": config_name, "seconds_per_update": wall,
              "cpu_seconds_per_update": cpu,
              "examples_per_second": FLAGS.batch_size / wall,
              "cpu_examples_per_second": FLAGS.batch_size / cpu,
              "walls": walls, "peak_rss_mib": max(init_peak, _peak_rss_mib()),
              "steps_peak_rss_mib": (_peak_rss_mib(since_reset=True) if steps_measured
                                     else float("nan")),
              "backend": "oneDNN" if _pywrap_util_port.IsMklEnabled() else "Eigen"}
    bench_common.print_result(result)


def _measure(spec, code_dir):
    flag_args = [arg for arg in sys.argv[1:]
                 if not arg.startswith(("--child", "--code_dir", "--compare_code_dir"))]
    return bench_common.run_child(
        [os.path.abspath(__file__), "--child=" + spec, "--code_dir=" + code_dir] + flag_args,
        timeout=FLAGS.child_timeout)


def main(argv):
    del argv
    if FLAGS.child:
        run_child(FLAGS.child)
        return
    for name in FLAGS.configs:
        if name not in CONFIGS:
            raise SystemExit("unknown configuration %r (known: %s)" % (name, ", ".join(CONFIGS)))
    print("BERT L=%d H=%d A=%d I=%d vocab=%d, seq %d, batch %d, %d thread(s), "
          "median of %d updates after 1 warm-up, malloc mmap threshold %s" %
          (FLAGS.layers, FLAGS.hidden_size, FLAGS.num_attention_heads,
           FLAGS.intermediate_size, FLAGS.vocab_size, FLAGS.seq_length, FLAGS.batch_size,
           FLAGS.threads, FLAGS.steps, FLAGS.malloc_mmap_threshold or "glibc default"))
    print("%-9s %-15s %-7s %9s %11s %12s %13s %10s %13s  %s" % (
        "head", "config", "code", "s/update", "examples/s", "CPU-time ex/s",
        "peak RSS MiB", "of steps", "vs fp32", "CPU back-end"))
    sys.stdout.flush()
    codes = [("after", FLAGS.code_dir)]
    if FLAGS.compare_code_dir:
        codes = [("before", FLAGS.compare_code_dir)] + codes
    for head in FLAGS.heads:
        baseline = {}
        for name in FLAGS.configs:
            for label, code_dir in codes:
                r = _measure("%s:%s" % (head, name), code_dir)
                if "error" in r:
                    print("%-9s %-15s %-7s failed: %s" % (head, name, label, r["error"]))
                    continue
                if name == "fp32":
                    baseline[label] = r["examples_per_second"]
                ratio = (r["examples_per_second"] / baseline[label]
                         if label in baseline else float("nan"))
                print("%-9s %-15s %-7s %9.2f %11.2f %12.2f %13.0f %10.0f %12.2fx  %s" % (
                    head, name, label, r["seconds_per_update"], r["examples_per_second"],
                    r["cpu_examples_per_second"], r["peak_rss_mib"],
                    r.get("steps_peak_rss_mib", float("nan")), ratio,
                    r.get("backend", "?")))
                sys.stdout.flush()


if __name__ == "__main__":
    app.run(main)
