"""BertModel speed on CPU/GPU: forward pass and one fine-tuning train step of
a BERT-Base-shaped model, against a dense float32 matmul measured in the same
process with the same thread count.

    python benchmarks/bench_model.py --threads=1 --steps=3
    python benchmarks/bench_model.py --threads=2 --layers=4 --steps=3   # quicker

Each measurement (forward, train) runs in its own child process, which first
times a [2048, 768] x [768, 3072] float32 tf.matmul (the shape of BERT-Base's
feed-forward layer at 16 x 128 tokens), then the model. Printed per
measurement: examples/s, achieved GFLOP/s, that rate as a fraction of the
matmul's (by wall time, and by process CPU time per thread, which is the
reliable one on a machine shared with other jobs), and the child's peak
resident memory (ru_maxrss).

FLOPs counted (multiply-add = 2): per layer and sequence, the dense layers
2 * S * (4 H^2 + 2 H I) and attention 4 * S^2 * H; plus the pooler 2 H^2. A
training step counts 3x the forward (backward = 2x forward); the embedding
lookups, softmax/LayerNorm/GELU element-wise work and the optimizer update are
not counted (they are a few percent).

`--implementations=ours,original` also measures Google's original
modeling.py and optimization.py (bert-tensorflow 1.0.4, with its tf.contrib
layer_norm replaced by the same computation, see tests/reference.py;
TensorFlow 2.15 only), alternating with this project's, `--repeats` times
each; the table then gives the median over the repeats.
"""

import json
import os
import resource
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from absl import app, flags  # noqa: E402

FLAGS = flags.FLAGS

flags.DEFINE_integer("threads", 1, "intra_op and inter_op parallelism threads.")
flags.DEFINE_integer("forward_batch_size", 32, "Batch size of the forward pass.")
flags.DEFINE_integer("train_batch_size", 16, "Batch size of the training step.")
flags.DEFINE_integer("seq_length", 128, "Sequence length.")
flags.DEFINE_integer("layers", 12, "Transformer layers (12 = BERT-Base).")
flags.DEFINE_integer("hidden_size", 768, "Hidden size.")
flags.DEFINE_integer("num_attention_heads", 12, "Attention heads.")
flags.DEFINE_integer("intermediate_size", 3072, "Feed-forward size.")
flags.DEFINE_integer("vocab_size", 30522, "Vocabulary size.")
flags.DEFINE_integer("steps", 3, "Timed steps per measurement (after 1 warm-up).")
flags.DEFINE_integer("matmul_steps", 5, "Timed runs of the reference matmul.")
flags.DEFINE_list("implementations", "ours", "ours and/or original (Google's code).")
flags.DEFINE_integer("repeats", 1, "Children per implementation and mode (alternating).")
flags.DEFINE_string("implementation", "ours", "Internal: the implementation a child measures.")
flags.DEFINE_enum("mode", "all", ["all", "forward", "train"],
                  "Which measurement; 'all' runs each in a child process.")


def model_flops(batch, seq, layers, hidden, intermediate):
    """Forward FLOPs of the encoder and pooler for one batch."""
    dense = 2 * seq * (4 * hidden * hidden + 2 * hidden * intermediate)
    attention = 4 * seq * seq * hidden
    return batch * (layers * (dense + attention) + 2 * hidden * hidden)


def _session_config():
    import tensorflow.compat.v1 as tf
    return tf.ConfigProto(intra_op_parallelism_threads=FLAGS.threads,
                          inter_op_parallelism_threads=FLAGS.threads)


def _median_time(fn, steps):
    """Median (wall seconds, process CPU seconds) of `steps` calls of `fn`.

    CPU time divided by the thread count is the better measure on a machine
    shared with other jobs; on an idle machine the two agree.
    """
    fn()  # Warm-up (graph optimisation, allocations).
    walls, cpus = [], []
    for _ in range(steps):
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus) / FLAGS.threads


def measure_matmul():
    """GFLOP/s of a dense float32 [2048, 768] x [768, 3072] matmul."""
    import numpy as np
    import tensorflow.compat.v1 as tf
    m, k, n = 2048, 768, 3072
    with tf.Graph().as_default():
        a = tf.Variable(np.random.RandomState(0).normal(size=(m, k)).astype(np.float32))
        b = tf.Variable(np.random.RandomState(1).normal(size=(k, n)).astype(np.float32))
        # Reduce to a scalar so that fetching the result costs nothing.
        product = tf.reduce_sum(tf.matmul(a, b)[:1, :1])
        with tf.Session(config=_session_config()) as sess:
            sess.run(tf.global_variables_initializer())
            wall, cpu = _median_time(lambda: sess.run(product), FLAGS.matmul_steps)
    return 2.0 * m * k * n / wall / 1e9, 2.0 * m * k * n / cpu / 1e9


def measure_model(mode):
    """Examples/s and GFLOP/s of the forward pass or one training step."""
    import numpy as np
    import tensorflow.compat.v1 as tf

    if FLAGS.implementation == "original":
        sys.path.insert(0, os.path.join(ROOT, "tests"))
        import reference
        modeling = reference.load_original_modeling()
        optimization = reference.load_original("optimization")
    else:
        import modeling
        import optimization

    batch = FLAGS.forward_batch_size if mode == "forward" else FLAGS.train_batch_size
    seq = FLAGS.seq_length
    config = modeling.BertConfig(
        vocab_size=FLAGS.vocab_size, hidden_size=FLAGS.hidden_size,
        num_hidden_layers=FLAGS.layers, num_attention_heads=FLAGS.num_attention_heads,
        intermediate_size=FLAGS.intermediate_size, type_vocab_size=2)
    rng = np.random.RandomState(0)
    feed_values = [rng.randint(0, FLAGS.vocab_size, (batch, seq)).astype(np.int32),
                   np.ones((batch, seq), np.int32), np.zeros((batch, seq), np.int32)]
    with tf.Graph().as_default():
        placeholders = [tf.placeholder(tf.int32, [batch, seq]) for _ in range(3)]
        model = modeling.BertModel(config, is_training=(mode == "train"),
                                   input_ids=placeholders[0], input_mask=placeholders[1],
                                   token_type_ids=placeholders[2])
        if mode == "forward":
            fetch = model.get_sequence_output()
        else:
            # run_classifier's head: dropout, output_weights/bias, softmax loss.
            labels = tf.constant(rng.randint(0, 2, batch).astype(np.int32))
            pooled = modeling.dropout(model.get_pooled_output(), 0.1)
            output_weights = tf.get_variable(
                "output_weights", [2, config.hidden_size],
                initializer=tf.truncated_normal_initializer(stddev=0.02))
            output_bias = tf.get_variable("output_bias", [2],
                                          initializer=tf.zeros_initializer())
            logits = tf.nn.bias_add(tf.matmul(pooled, output_weights, transpose_b=True),
                                    output_bias)
            log_probs = tf.nn.log_softmax(logits, axis=-1)
            loss = -tf.reduce_mean(tf.reduce_sum(tf.one_hot(labels, 2) * log_probs, -1))
            fetch = optimization.create_optimizer(loss, 2e-5, 1000, 100, use_tpu=False)
        feed = dict(zip(placeholders, feed_values))
        with tf.Session(config=_session_config()) as sess:
            sess.run(tf.global_variables_initializer())
            seconds, cpu_seconds = _median_time(lambda: sess.run(fetch, feed), FLAGS.steps)
    flops = model_flops(batch, seq, FLAGS.layers, FLAGS.hidden_size, FLAGS.intermediate_size)
    if mode == "train":
        flops *= 3
    return {"mode": mode, "batch": batch, "seconds_per_step": seconds,
            "examples_per_second": batch / seconds, "gflops": flops / seconds / 1e9,
            "cpu_gflops": flops / cpu_seconds / 1e9}


def run_child(mode):
    """Measures matmul + `mode` in this process and prints one JSON line."""
    # The matmul is timed before and after the model; the better of the two
    # is the reference (less disturbed by other jobs).
    before = measure_matmul()
    result = measure_model(mode)
    after = measure_matmul()
    result["matmul_gflops"] = max(before[0], after[0])
    result["matmul_cpu_gflops"] = max(before[1], after[1])
    result["fraction_of_matmul"] = result["gflops"] / result["matmul_gflops"]
    result["cpu_fraction_of_matmul"] = result["cpu_gflops"] / result["matmul_cpu_gflops"]
    # Linux reports ru_maxrss in KiB.
    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print("RESULT " + json.dumps(result))


def main(argv):
    if FLAGS.mode != "all":
        run_child(FLAGS.mode)
        return
    del argv
    flag_args = [arg for arg in sys.argv[1:]
                 if not arg.startswith(("--mode", "--implementation="))]
    print("BERT L=%d H=%d A=%d I=%d vocab=%d, seq %d, %d thread(s); %d timed steps" %
          (FLAGS.layers, FLAGS.hidden_size, FLAGS.num_attention_heads,
           FLAGS.intermediate_size, FLAGS.vocab_size, FLAGS.seq_length, FLAGS.threads,
           FLAGS.steps))
    runs = {}
    for mode in ("forward", "train"):
        for _ in range(FLAGS.repeats):
            for implementation in FLAGS.implementations:
                out = subprocess.run(
                    [sys.executable, os.path.abspath(__file__), "--mode=" + mode,
                     "--implementation=" + implementation] + flag_args,
                    capture_output=True, text=True, check=False)
                lines = [line for line in out.stdout.splitlines()
                         if line.startswith("RESULT ")]
                if out.returncode != 0 or not lines:
                    sys.stderr.write(out.stderr[-4000:])
                    raise SystemExit("measurement %r of %s failed (exit %d)"
                                     % (mode, implementation, out.returncode))
                runs.setdefault((mode, implementation), []).append(
                    json.loads(lines[-1][len("RESULT "):]))
    print("%-8s %-9s %6s %9s %11s %9s %15s %9s %13s %13s" % (
        "mode", "code", "batch", "s/step", "examples/s", "GFLOP/s", "matmul GFLOP/s",
        "fraction", "CPU fraction", "peak RSS MiB"))
    for (mode, implementation), results in runs.items():
        def median(key):
            return statistics.median(r[key] for r in results)
        print("%-8s %-9s %6d %9.3f %11.2f %9.1f %15.1f %9.2f %13.2f %13.0f" % (
            mode, implementation, results[0]["batch"], median("seconds_per_step"),
            median("examples_per_second"), median("gflops"), median("matmul_gflops"),
            median("fraction_of_matmul"), median("cpu_fraction_of_matmul"),
            median("peak_rss_mib")))


if __name__ == "__main__":
    app.run(main)
