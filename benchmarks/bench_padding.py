"""Fine-tuning throughput with and without --dynamic_padding, on inputs
whose lengths follow real GLUE tasks.

    python benchmarks/bench_padding.py                       # the full table
    python benchmarks/bench_padding.py --layers=2 --threads=1 --tasks=mrpc \\
        --seq_lengths=128 --timed_steps=4                    # quick check

Each cell runs in its own child process: it writes (once per task and
length) a TFRecord file of synthetic inputs in run_classifier's format, then
trains BERT on it through the scripts' own code: the input pipeline of
`run_classifier.file_based_input_fn_builder` (with `length_buckets` from
`input_pipeline.default_length_buckets`, or without), the classifier of
`run_classifier.create_model` and `optimization.create_optimizer`. It runs
--warmup_steps updates (which also meet most bucket shapes once), then
--timed_steps timed ones (padded batches, all of one shape: 1 and
--padded_timed_steps), and reports examples/s and the mean padded length
per input. Padded and dynamic cells alternate, so both see the same load.

Input lengths (word pieces with [CLS] and [SEP]s), drawn with a fixed seed:
  mrpc  sentence pairs: log-normal, median 50, sigma 0.3, cut to 16..128
        (mean about 53; MRPC's own pairs average about 53 pieces under BERT's
        uncased vocabulary, with a tail past 100).
  sst2  single sentences: log-normal, median 22, sigma 0.5, cut to 4..66
        (mean about 25, as SST-2's).
"""

import json
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from absl import app, flags  # noqa: E402

import bench_common  # noqa: E402

FLAGS = flags.FLAGS

bench_common.define_model_flags(threads=2)
flags.DEFINE_list("thread_counts", "1,2", "Thread counts to measure (each a child).")
flags.DEFINE_list("seq_lengths", "128,512", "--max_seq_length values to measure.")
flags.DEFINE_list("tasks", "mrpc,sst2", "Length distributions (see the module docstring).")
flags.DEFINE_integer("batch_size", 8, "--train_batch_size.")
flags.DEFINE_integer("num_examples", 2048, "Synthetic inputs per file.")
flags.DEFINE_integer("warmup_steps", 32,
                     "Dynamic padding: untimed updates first: one pool of batches "
                     "(input_pipeline.LENGTH_POOL_BATCHES), which meets the bucket shapes, each "
                     "compiled once by the fused kernels, as a long run does early on.")
flags.DEFINE_integer("timed_steps", 16, "Dynamic padding: timed updates.")
flags.DEFINE_integer("padded_timed_steps", 4,
                     "Padded batches (one shape, after one warm-up update): timed updates.")
flags.DEFINE_integer("child_timeout", 1800, "Seconds allowed per cell.")
flags.DEFINE_string("child", None, "Internal: the JSON spec of one cell to measure here.")

TASKS = {
    # name: (median length, sigma, shortest, longest, pairs)
    "mrpc": (50.0, 0.3, 16, 128, True),
    "sst2": (22.0, 0.5, 4, 66, False),
}


def sample_lengths(task, count, seq_length, seed=0):
    """`count` input lengths of a task's distribution, cut to seq_length."""
    import numpy as np
    median, sigma, shortest, longest, _ = TASKS[task]
    rng = np.random.RandomState(seed)
    lengths = np.round(median * np.exp(sigma * rng.randn(count))).astype(int)
    return np.clip(lengths, shortest, min(longest, seq_length))


def write_records(path, task, seq_length):
    """Synthetic inputs in run_classifier's TFRecord format."""
    import numpy as np
    from scriptkit import quiet_tf  # noqa: F401
    import tensorflow.compat.v1 as tf

    from scriptkit import input_pipeline
    rng = np.random.RandomState(1)
    pairs = TASKS[task][4]
    with tf.io.TFRecordWriter(path) as writer:
        for length in sample_lengths(task, FLAGS.num_examples, seq_length):
            ids = [0] * seq_length
            ids[:length] = rng.randint(1000, FLAGS.vocab_size, length).tolist()
            mask = [1] * length + [0] * (seq_length - length)
            segments = [0] * seq_length
            if pairs:
                segments[length // 2:length] = [1] * (length - length // 2)
            writer.write(tf.train.Example(features=tf.train.Features(feature={
                "input_ids": input_pipeline.int64_feature(ids),
                "input_mask": input_pipeline.int64_feature(mask),
                "segment_ids": input_pipeline.int64_feature(segments),
                "label_ids": input_pipeline.int64_feature([int(rng.randint(2))]),
                "is_real_example": input_pipeline.int64_feature([1]),
            })).SerializeToString())


def run_child(spec):
    """Trains one cell in this process; prints one RESULT line."""
    from scriptkit import quiet_tf  # noqa: F401  (TensorFlow as the scripts import it)
    import tensorflow.compat.v1 as tf

    from scriptkit import input_pipeline
    import modeling
    import optimization
    import run_classifier

    seq_length = spec["seq_length"]
    buckets = input_pipeline.default_length_buckets(seq_length) if spec["dynamic"] else None
    with tf.Graph().as_default():
        tf.set_random_seed(0)
        input_fn = run_classifier.file_based_input_fn_builder(
            spec["path"], seq_length, is_training=True, drop_remainder=True,
            length_buckets=buckets)
        features = tf.data.make_one_shot_iterator(
            input_fn({"batch_size": FLAGS.batch_size})).get_next()
        config = bench_common.model_config(modeling, max_position_embeddings=max(512, seq_length))
        loss, _, _, _ = run_classifier.create_model(
            config, True, features["input_ids"], features["input_mask"],
            features["segment_ids"], features["label_ids"], 2, False)
        train_op = optimization.create_optimizer(loss, 2e-5, 1000, 100, use_tpu=False)
        width = tf.shape(features["input_ids"])[1]
        session_config = tf.ConfigProto(intra_op_parallelism_threads=spec["threads"],
                                        inter_op_parallelism_threads=spec["threads"])
        with tf.Session(config=session_config) as sess:
            sess.run(tf.global_variables_initializer())
            warmup, timed = ((FLAGS.warmup_steps, FLAGS.timed_steps) if spec["dynamic"]
                             else (1, FLAGS.padded_timed_steps))
            for _ in range(warmup):
                sess.run(train_op)
            widths = []
            start = time.perf_counter()
            for _ in range(timed):
                widths.append(sess.run([train_op, width])[1])
            seconds = time.perf_counter() - start
    bench_common.print_result({
        "examples_per_second": timed * FLAGS.batch_size / seconds,
        "mean_width": statistics.mean(int(w) for w in widths)})


def main(argv):
    del argv
    if FLAGS.child:
        run_child(json.loads(FLAGS.child))
        return
    print("CPU: %s; load average %s" % (bench_common.cpu_model(),
                                        " ".join("%.2f" % x for x in os.getloadavg())))
    print("BERT L=%d H=%d A=%d I=%d, batch %d, Adam; padded: 1 warm-up + %d timed updates, "
          "dynamic: %d + %d" % (FLAGS.layers, FLAGS.hidden_size, FLAGS.num_attention_heads,
                                FLAGS.intermediate_size, FLAGS.batch_size,
                                FLAGS.padded_timed_steps, FLAGS.warmup_steps,
                                FLAGS.timed_steps))
    print("%-5s %7s %7s %9s %12s %11s %12s %11s %8s" % (
        "task", "max len", "threads", "mean len", "padded ex/s", "padded len",
        "dynamic ex/s", "dynamic len", "speed-up"))
    sys.stdout.flush()
    flag_args = [a for a in sys.argv[1:] if not a.startswith("--child")]
    with tempfile.TemporaryDirectory() as tmp:
        for task in FLAGS.tasks:
            for seq_length in (int(x) for x in FLAGS.seq_lengths):
                path = os.path.join(tmp, "%s_%d.tf_record" % (task, seq_length))
                write_records(path, task, seq_length)
                mean_length = float(sample_lengths(task, FLAGS.num_examples,
                                                   seq_length).mean())
                for threads in (int(x) for x in FLAGS.thread_counts):
                    results = {}
                    for dynamic in (False, True):
                        spec = {"path": path, "seq_length": seq_length, "threads": threads,
                                "dynamic": dynamic}
                        results[dynamic] = bench_common.run_child(
                            [os.path.abspath(__file__), "--child=" + json.dumps(spec)]
                            + flag_args, timeout=FLAGS.child_timeout)
                    if any("error" in r for r in results.values()):
                        print("%-5s %7d %7d failed: %s" % (
                            task, seq_length, threads,
                            [r.get("error") for r in results.values()]))
                        continue
                    padded, dynamic = results[False], results[True]
                    print("%-5s %7d %7d %9.1f %12.2f %11.1f %12.2f %11.1f %7.2fx" % (
                        task, seq_length, threads, mean_length,
                        padded["examples_per_second"], padded["mean_width"],
                        dynamic["examples_per_second"], dynamic["mean_width"],
                        dynamic["examples_per_second"] / padded["examples_per_second"]))
                    sys.stdout.flush()


if __name__ == "__main__":
    app.run(main)
