"""Fine-tuning and prediction throughput through the execution layer:
the Estimator (TensorFlow 2.15) against the session runner (runtime.py), on
run_classifier's own model_fn, input pipeline shape and training step.

    .venv-ci-tf2.15/bin/python benchmarks/bench_runtime.py            # both runners
    .venv-ci-latest/bin/python benchmarks/bench_runtime.py            # session only
    .venv-ci-tf2.15/bin/python benchmarks/bench_runtime.py --layers=12 --repeats=5

Each measurement is a child process (BERT_RUNTIME must be set before
TensorFlow starts). The runners alternate, `--repeats` times each, so load
changes hit both alike. A child trains `--warmup_steps + --steps` updates
(timing only the last `--steps`, with process CPU time and wall time per
update), then predicts `--predict_batches` batches (timing all but the
first), and reports its peak resident memory (ru_maxrss). The table gives
the median and min-max over the repeats, per example.
"""

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from absl import app, flags  # noqa: E402

import bench_common  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_list("runtimes", None, "Runners to compare (default: estimator,session where "
                  "TensorFlow has the Estimator, else session).")
flags.DEFINE_integer("repeats", 3, "Children per runner (alternating).")
bench_common.define_model_flags(threads=2, layers=4)
flags.DEFINE_integer("train_batch_size", 16, "Training batch size.")
flags.DEFINE_integer("predict_batch_size", 32, "Prediction batch size.")
flags.DEFINE_integer("warmup_steps", 2, "Untimed training updates first.")
flags.DEFINE_integer("steps", 5, "Timed training updates.")
flags.DEFINE_integer("predict_batches", 6, "Prediction batches (the first is untimed).")
flags.DEFINE_string("child", None, "Internal: run one measurement with this runner.")


def _child(runtime_name):
    os.environ["BERT_RUNTIME"] = runtime_name
    import numpy as np

    from scriptkit import quiet_tf  # noqa: F401  (TensorFlow as the scripts import it)
    import tensorflow.compat.v1 as tf

    import modeling
    import run_classifier
    from scriptkit import runners
    from scriptkit import runtime

    tf.logging.set_verbosity(tf.logging.WARN)
    config = modeling.BertConfig(
        vocab_size=FLAGS.vocab_size, hidden_size=FLAGS.hidden_size,
        num_hidden_layers=FLAGS.layers, num_attention_heads=FLAGS.num_attention_heads,
        intermediate_size=FLAGS.intermediate_size)
    total_steps = FLAGS.warmup_steps + FLAGS.steps
    model_fn = run_classifier.model_fn_builder(
        bert_config=config, num_labels=2, init_checkpoint=None, learning_rate=2e-5,
        num_train_steps=total_steps, num_warmup_steps=0, use_tpu=False,
        use_one_hot_embeddings=False)
    rng = np.random.RandomState(0)
    n = 256
    data = {"input_ids": rng.randint(0, FLAGS.vocab_size, (n, FLAGS.seq_length)),
            "input_mask": np.ones((n, FLAGS.seq_length), np.int64),
            "segment_ids": np.zeros((n, FLAGS.seq_length), np.int64),
            "label_ids": rng.randint(0, 2, (n,)),
            "is_real_example": np.ones((n,), np.int64)}

    def input_fn(params, repeat=True, count=None):
        dataset = tf.data.Dataset.from_tensor_slices(
            {k: v[:count].astype(np.int32) for k, v in data.items()})
        if repeat:
            dataset = dataset.repeat()
        return dataset.batch(params["batch_size"])

    class StepTimer(tf.train.SessionRunHook):
        def __init__(self):
            self.wall, self.cpu = [], []

        def before_run(self, run_context):
            self._start = (time.perf_counter(), time.process_time())

        def after_run(self, run_context, run_values):
            self.wall.append(time.perf_counter() - self._start[0])
            self.cpu.append(time.process_time() - self._start[1])

    session_config = tf.ConfigProto(intra_op_parallelism_threads=FLAGS.threads,
                                    inter_op_parallelism_threads=FLAGS.threads)
    with tempfile.TemporaryDirectory() as model_dir:
        run_config = runners.make_run_config(model_dir, save_checkpoints_steps=10000)
        run_config = run_config.replace(session_config=session_config)
        runner = runners.make_estimator(model_fn, run_config, False,
                                        train_batch_size=FLAGS.train_batch_size,
                                        predict_batch_size=FLAGS.predict_batch_size)
        timer = StepTimer()
        runner.train(input_fn, max_steps=total_steps, hooks=[timer])
        train_wall = timer.wall[FLAGS.warmup_steps:]
        train_cpu = timer.cpu[FLAGS.warmup_steps:]

        count = FLAGS.predict_batch_size * FLAGS.predict_batches
        marks = []
        for _ in runner.predict(lambda params: input_fn(params, repeat=False, count=count),
                                yield_single_examples=False):
            marks.append((time.perf_counter(), time.process_time()))
        predict_wall = marks[-1][0] - marks[0][0]
        predict_cpu = marks[-1][1] - marks[0][1]
    timed_examples = FLAGS.predict_batch_size * (len(marks) - 1)
    bench_common.print_result({
        "train_wall": statistics.median(train_wall) / FLAGS.train_batch_size,
        "train_cpu": statistics.median(train_cpu) / FLAGS.train_batch_size,
        "predict_wall": predict_wall / timed_examples,
        "predict_cpu": predict_cpu / timed_examples,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "tensorflow": tf.__version__, "runtime": runtime.RUNTIME})


def _fmt(values, scale=1.0, digits=4):
    values = [v * scale for v in values]
    return "%.*f (%.*f-%.*f)" % (digits, statistics.median(values), digits, min(values),
                                 digits, max(values))


def main(argv):
    del argv
    if FLAGS.child:
        _child(FLAGS.child)
        return
    runtimes = FLAGS.runtimes
    if not runtimes:
        probe = subprocess.run([sys.executable, "-c", "import tensorflow.compat.v1 as tf; "
                                "print(hasattr(tf, 'estimator'))"], capture_output=True,
                               text=True)
        runtimes = ["estimator", "session"] if "True" in probe.stdout else ["session"]
    flag_args = [a for a in sys.argv[1:] if not a.startswith("--runtimes")]
    results = {name: [] for name in runtimes}
    load_before = os.getloadavg()
    for _ in range(FLAGS.repeats):
        for name in runtimes:
            proc = subprocess.run([sys.executable, __file__, "--child=" + name] + flag_args,
                                  capture_output=True, text=True)
            result = bench_common.child_result(proc)
            if "error" in result:
                sys.exit("child %s failed:\n%s" % (name, proc.stderr[-3000:]))
            results[name].append(result)
    load_after = os.getloadavg()
    print("CPU: %s, %d cores; load average %.1f before, %.1f after; %d threads" % (
        bench_common.cpu_model(), os.cpu_count(), load_before[0], load_after[0], FLAGS.threads))
    print("Model: %d layers, hidden %d, seq %d; train batch %d, predict batch %d; "
          "median (min-max) of %d children" % (
              FLAGS.layers, FLAGS.hidden_size, FLAGS.seq_length, FLAGS.train_batch_size,
              FLAGS.predict_batch_size, FLAGS.repeats))
    print("| runner | TF | train CPU s/example | train wall s/example | predict CPU "
          "s/example | predict wall s/example | peak RSS MiB |")
    print("|---|---|---|---|---|---|---|")
    for name, rows in results.items():
        print("| %s | %s | %s | %s | %s | %s | %s |" % (
            name, rows[0]["tensorflow"], _fmt([r["train_cpu"] for r in rows]),
            _fmt([r["train_wall"] for r in rows]), _fmt([r["predict_cpu"] for r in rows]),
            _fmt([r["predict_wall"] for r in rows]),
            _fmt([r["peak_rss_mib"] for r in rows], digits=0)))
    if len(results) == 2:
        a, b = runtimes
        for key in ("train_cpu", "predict_cpu"):
            ratio = (statistics.median([r[key] for r in results[a]])
                     / statistics.median([r[key] for r in results[b]]))
            print("%s speed of %s relative to %s: %.3fx" % (key, b, a, ratio))


if __name__ == "__main__":
    app.run(main)
