"""BERT-Base with different kernels fused (the scripts' --fused_ops), in one
process: a graph is built for each --variant and their steps alternate, so
all see the same machine, load and thread pools.

    python benchmarks/bench_fused_ops.py --threads=1 --mode=train --steps=4
    python benchmarks/bench_fused_ops.py --threads=1 --mode=forward --layers=4
    python benchmarks/bench_fused_ops.py --variant=gelu --variant=none   # GELU alone

Prints the process CPU time of each step, the medians, their ratio and the
fraction of a dense float32 2048^3 matmul's rate timed in the same process
before and after (FLOPs counted as in bench_model.py: training = 3 x
forward). Training is one fine-tuning update (run_classifier's head,
create_optimizer) at batch 16; the forward pass is batch 32.
"""

import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from scriptkit import quiet_tf  # noqa: E402,F401  (TensorFlow as the scripts import it)
from absl import app, flags  # noqa: E402

import bench_common  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_integer("threads", 1, "intra_op and inter_op parallelism threads.")
flags.DEFINE_enum("mode", "train", ["train", "forward"], "What one step is.")
flags.DEFINE_integer("layers", 12, "Transformer layers (12 = BERT-Base).")
flags.DEFINE_integer("seq_length", 128, "Sequence length.")
flags.DEFINE_integer("steps", 4, "Timed steps per graph (alternating), after 1 warm-up.")
flags.DEFINE_multi_string("variant", ["all", "none"],
                          "A --fused_ops setting to measure (repeat the flag); the first "
                          "is compared with the others.")


def _build(mode, fused_ops):
    """(fetch, feed) of one step of a BERT-Base-wide model in the default graph."""
    import numpy as np
    import tensorflow.compat.v1 as tf

    import modeling
    import optimization

    batch, seq = (16 if mode == "train" else 32), FLAGS.seq_length
    config = modeling.BertConfig(vocab_size=30522, num_hidden_layers=FLAGS.layers,
                                 type_vocab_size=2)
    rng = np.random.RandomState(0)
    inputs = [tf.placeholder(tf.int32, [batch, seq]) for _ in range(3)]
    feed = dict(zip(inputs, [rng.randint(0, 30522, (batch, seq)), np.ones((batch, seq)),
                             np.zeros((batch, seq))]))
    model = modeling.BertModel(config, is_training=(mode == "train"), input_ids=inputs[0],
                               input_mask=inputs[1], token_type_ids=inputs[2],
                               fused_ops=fused_ops)
    if mode == "forward":
        return tf.reduce_sum(model.get_sequence_output()[:1, :1]), feed
    labels = tf.constant(rng.randint(0, 2, batch).astype(np.int32))
    pooled = modeling.dropout(model.get_pooled_output(), 0.1, model.fused_ops)
    weights = tf.get_variable("output_weights", [2, config.hidden_size],
                              initializer=tf.truncated_normal_initializer(stddev=0.02))
    logits = tf.matmul(pooled, weights, transpose_b=True)
    loss = -tf.reduce_mean(tf.reduce_sum(tf.one_hot(labels, 2) * tf.nn.log_softmax(logits), -1))
    return optimization.create_optimizer(loss, 2e-5, 1000, 100, use_tpu=False), feed


def _session(tf, graph):
    return tf.Session(graph=graph, config=tf.ConfigProto(
        intra_op_parallelism_threads=FLAGS.threads,
        inter_op_parallelism_threads=FLAGS.threads))


def _matmul_cpu_gflops(tf):
    """Best of 5: GFLOP/s per thread of CPU time of a float32 2048^3 matmul."""
    import numpy as np
    graph = tf.Graph()
    with graph.as_default():
        a = tf.Variable(np.random.RandomState(0).normal(size=(2048, 2048)).astype(np.float32))
        product = tf.reduce_sum(tf.matmul(a, a)[:1, :1])
        session = _session(tf, graph)
        session.run(tf.global_variables_initializer())
        session.run(product)
        times = []
        for _ in range(5):
            start = time.process_time()
            session.run(product)
            times.append((time.process_time() - start) / FLAGS.threads)
    return 2.0 * 2048 ** 3 / min(times) / 1e9


def main(argv):
    del argv
    import tensorflow.compat.v1 as tf

    print("BERT L=%d H=768, seq %d, %s step, %d thread(s); %s, load average %s"
          % (FLAGS.layers, FLAGS.seq_length, FLAGS.mode, FLAGS.threads,
             bench_common.cpu_model(), " ".join("%.2f" % x for x in os.getloadavg())))
    steps = {}
    for name in FLAGS.variant:
        graph = tf.Graph()
        with graph.as_default():
            fetch, feed = _build(FLAGS.mode, name)
            session = _session(tf, graph)
            session.run(tf.global_variables_initializer())
        session.run(fetch, feed)  # Warm-up: optimisation, compilation, allocations.
        steps[name] = (session, fetch, feed)
    matmul = [_matmul_cpu_gflops(tf)]
    times = {name: [] for name in steps}
    for i in range(FLAGS.steps):
        for name, (session, fetch, feed) in steps.items():
            start = time.process_time()
            session.run(fetch, feed)
            times[name].append((time.process_time() - start) / FLAGS.threads)
        print("step %d: %s" % (i, ", ".join("fused %s %.2f CPU s" % (name, t[-1])
                                              for name, t in times.items())))
        sys.stdout.flush()
    matmul.append(_matmul_cpu_gflops(tf))
    batch = 16 if FLAGS.mode == "train" else 32
    flops = bench_common.model_flops(batch, FLAGS.seq_length, FLAGS.layers, 768, 3072)
    if FLAGS.mode == "train":
        flops *= 3
    medians = {name: statistics.median(t) for name, t in times.items()}
    print("matmul %.1f / %.1f GFLOP/s per CPU-second (before / after)" % tuple(matmul))
    for name, median in medians.items():
        print("fused %-18s median %.3f CPU s/step [%.3f-%.3f], fraction of the matmul "
              "rate %.2f" % (name, median, min(times[name]), max(times[name]),
                             flops / median / 1e9 / max(matmul)))
    first = FLAGS.variant[0]
    for name in FLAGS.variant[1:]:
        print("fused %s: %.3fx the speed of fused %s" % (first, medians[name] / medians[first],
                                                         name))


if __name__ == "__main__":
    app.run(main)
