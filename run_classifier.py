"""Fine-tunes BERT on a sentence or sentence-pair task (classification, or
regression for STS-B), evaluates it and predicts.

Differences from the original:

Nothing of it is removed: its flags (names, meanings, defaults), building
blocks (`convert_single_example`, `create_model`, `model_fn_builder`, ...;
new arguments are keywords with defaults), variable names and output files
(``eval_results.txt``, ``test_results.tsv``) stay. Added:

* processors for the whole GLUE benchmark in the standard GLUE download
  layout (CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI, RTE, WNLI) and XNLI in
  any language (``--xnli_language``); STS-B is a regression task;
* the metrics each task is reported with (F1 for MRPC/QQP, Matthews
  correlation for CoLA, Pearson/Spearman for STS-B) in ``eval_results.txt``;
* predictions in the GLUE submission format (``MRPC.tsv`` etc.);
* evaluation during training (``--eval_every_n_steps``) and keeping the best
  checkpoint (``--keep_best_checkpoint``);
* a SavedModel for serving (``--export_dir``);
* inputs longer than ``--max_seq_length`` read in overlapping windows
  (``--doc_stride``) instead of cut;
* clear errors for bad input before training starts;
* your own data without code (``--task_name=generic``, see own_data.py and
  docs/own_data.md): CSV, TSV or JSON Lines files with the columns named by
  flags; classification, multi-label classification or regression.
"""

import collections
import contextlib
import csv
import dataclasses
import itertools
import os

import numpy as np
import quiet_tf  # noqa: F401  (first: imports TensorFlow without its start-up noise)
import tensorflow.compat.v1 as tf
from absl import flags

import checkpoints
import errors
import evaluation
import file_io
import fine_tuning
import input_packing
import input_pipeline
import logs
import modeling
import output_lock
import own_data
import runtime
import script_runner
import serving
import shared_flags
import tokenization
import training
import training_progress

FLAGS = flags.FLAGS

# The task's flags, and the shared ones (export, own data, training options).
# This script's defaults, whichever script defined a shared flag first.
FLAG_DEFAULTS = shared_flags.define_flags(
    shared_flags.FINE_TUNING_FLAGS, "labels", "skip_malformed_rows", "doc_stride",
    max_seq_length=128, doc_stride=None,
    helps={
        "doc_stride": "Read an input too long for --max_seq_length in overlapping windows "
                      "instead of cutting it: windows of the first text (a pair's second "
                      "text is kept whole in each) that start this many word pieces apart. "
                      "Training learns each window with the input's label, or each input "
                      "from its combined windows (--window_loss); evaluation and "
                      "prediction combine the windows' outputs per input "
                      "(--window_aggregation). Unset: inputs are cut, as the original.",
        "data_dir": "Directory with the task's data files (train.tsv, dev.tsv, test.tsv "
                    "for GLUE tasks, as the GLUE download lays them out).",
        "export_dir": "If set, export a SavedModel for serving under this directory (in a "
                      "timestamped subdirectory). Its serving_default signature takes raw "
                      "text, tf.string text_a [batch] (and text_b [batch] for pair tasks), "
                      "and returns probabilities [batch, num_labels], label_ids and labels "
                      "(scores [batch] for regression); serving_ids takes int32 input_ids, "
                      "input_mask and segment_ids [batch, max_seq_length] instead. See "
                      "docs/serving.md.",
        "train_file": "--task_name=generic: the training file (instead of "
                      "train.csv/.tsv/.jsonl in --data_dir).",
        "dev_file": "--task_name=generic: the dev (evaluation) file (instead of dev.* or "
                    "val.* in --data_dir).",
        "test_file": "--task_name=generic: the file to predict with --do_predict (instead "
                     "of test.* in --data_dir).",
        "labels": "--task_name=generic: the labels, comma-separated, in the order of the "
                  "model's outputs. Default: those of the training file, sorted (or, "
                  "without --do_train, labels.txt of the training run in --output_dir or "
                  "next to --init_checkpoint).",
    })

flags.DEFINE_string(
    "task_name", None,
    "The task: cola, sst-2, mrpc, sts-b, qqp, mnli, qnli, rte, wnli or xnli "
    "(any letter case); or generic: your own CSV, TSV or JSON Lines files (see "
    "--text_column, --label_column and docs/own_data.md). Without --do_train it "
    "defaults to the training run's task (from its run_config.json).")

# This script's own flags: XNLI's language, evaluation during training,
# windows over long inputs.
flags.DEFINE_string(
    "xnli_language", "zh",
    "XNLI only: the language to train and evaluate on (zh, de, fr, ...).")

flags.DEFINE_integer(
    "eval_every_n_steps", 0,
    "With --do_train and --do_eval: also evaluate the dev set every N training "
    "steps (logging loss and metrics), not only at the end. 0: only at the end "
    "(or every --save_checkpoints_steps with --keep_best_checkpoint).")

flags.DEFINE_bool(
    "keep_best_checkpoint", False,
    "With --do_train and --do_eval: evaluate periodically and copy the "
    "checkpoint with the best dev score (the task's main metric, or "
    "--best_checkpoint_metric) to <output_dir>/best/. --do_predict and "
    "--export_dir then use that checkpoint.")

flags.DEFINE_string(
    "best_checkpoint_metric", None,
    "Metric from eval_results.txt that decides the best checkpoint (default: "
    "the task's main metric: eval_matthews_corr for CoLA, eval_f1 for MRPC and "
    "QQP, eval_spearman for STS-B, eval_accuracy otherwise). Higher is better, "
    "except for metrics whose name contains 'loss'.")

flags.DEFINE_integer(
    "max_windows", 0,
    "With --doc_stride: read at most this many windows of each input (its "
    "first ones); 0: as many as it takes (not with --window_loss=document).")

flags.DEFINE_enum(
    "window_aggregation", "mean", ["mean", "max", "first"],
    "With --doc_stride: how an input's prediction is made from its windows': "
    "the mean or the maximum of their logits (of their probabilities for "
    "multi-label tasks), or the first window's.")

flags.DEFINE_enum(
    "window_loss", "window", ["window", "document"],
    "With --doc_stride and --do_train: what the training loss is computed on. "
    "window: each window on its own, with its input's label. document: an "
    "input's windows (at most --max_windows, which this needs) go through the "
    "model together and the loss is computed on their combination by "
    "--window_aggregation (mean or max), as evaluation, prediction and the "
    "export combine them: for labels that one place of a long text decides. "
    "--train_batch_size then counts inputs, each of up to --max_windows windows.")

flags.DEFINE_string(
    "diagnostic_file", None,
    "MNLI only, with --do_predict: the GLUE diagnostic set "
    "(glue_data/diagnostic/diagnostic.tsv), predicted into AX.tsv.")

# Own data's flags (--task_name=generic), defined in own_data.py, which
# reads them: listed by this script's --help.
flags.adopt_module_key_flags(own_data)


# ---------------------------------------------------------------------------
# Examples and features.

@dataclasses.dataclass
class InputExample:
    """One example of a sentence (pair) classification task.

    Attributes:
      guid: unique id, "<set>-<index>" (e.g. "dev-12"); for GLUE test sets
        the index is the one the submission file needs.
      text_a: the (first) text, untokenized.
      text_b: the second text of a pair task; None for single-text tasks.
      label: the label as a string ("3.800" for regression), or a tuple of
        label strings for a multi-label task; test examples carry a
        placeholder.
    """

    guid: str
    text_a: str
    text_b: str | None = None
    label: str | tuple | None = None


class PaddingInputExample:
    """A stand-in example that fills the last batch of an evaluation or
    prediction up to the batch size.

    TPUs only run full batches, and dropping the last one would lose
    results; padding examples get weight 0 in the metrics and their
    predictions are discarded. A class of its own rather than None, so that
    padding is always deliberate.
    """


@dataclasses.dataclass
class InputFeatures:
    """The model input of one example: input_ids, input_mask and segment_ids
    (lists of max_seq_length ints), label_id (the label's index; a float for
    regression; for multi-label a list of num_labels 0/1 ints) and
    is_real_example (False for a PaddingInputExample)."""

    input_ids: list
    input_mask: list
    segment_ids: list
    label_id: int | float | list
    is_real_example: bool = True


# ---------------------------------------------------------------------------
# Data processors.

# Where the text, label and index are in each row of a data file.
#   header: whether the first line is a header (skipped).
#   num_columns: columns every row must have (None: as many as the header).
#   text_a, text_b, label, index: column numbers (None: absent).
Layout = collections.namedtuple(
    "Layout", ["header", "num_columns", "text_a", "text_b", "label", "index"])


class DataProcessor:
    """Reads a task's data files into `InputExample`s; one subclass per task.

    Custom tasks override the get_*_examples methods and get_labels (reading
    files with `_read_tsv`, say). The subclasses for the GLUE tasks describe
    their files with `Layout`s; the base class reads them, checks every row
    (number of columns, label) and raises `errors.InputError` naming the
    file and line at fault.
    """

    # What main needs to know about the task.
    is_regression = False
    # Several labels per example (multi-hot label ids, one sigmoid per label);
    # a label counts as predicted where its probability reaches
    # multi_label_threshold.
    is_multi_label = False
    multi_label_threshold = 0.5
    # Examples may have a second text (text_b): an export then takes two.
    text_pairs = True
    # Stem of the GLUE submission file (e.g. "MRPC" -> MRPC.tsv); None: none.
    submission_name = None
    # Metrics beyond eval_accuracy/eval_loss (names of `METRIC_FUNCTIONS`).
    metric_names = ()
    # The metric that decides the best checkpoint.
    main_metric = "eval_accuracy"
    # Set by main from --skip_malformed_rows.
    skip_malformed_rows = False

    def get_train_examples(self, data_dir):
        """The training set in `data_dir`: a list of `InputExample`s."""
        raise NotImplementedError("%s has no training set" % type(self).__name__)

    def get_dev_examples(self, data_dir):
        """The dev (evaluation) set in `data_dir`: a list of `InputExample`s."""
        raise NotImplementedError("%s has no dev set" % type(self).__name__)

    def get_test_examples(self, data_dir):
        """The test set in `data_dir` (to predict; placeholder labels): a list
        of `InputExample`s."""
        raise NotImplementedError("%s has no test set" % type(self).__name__)

    def get_labels(self):
        """The task's labels as a list of strings, in label id order; None
        for a regression task."""
        raise NotImplementedError("%s defines no labels" % type(self).__name__)

    def get_eval_sets(self, data_dir):
        """Dev sets to evaluate: a list of (name suffix, examples); the results
        of suffix "" go to eval_results.txt, others to eval_results_<suffix>.txt.
        """
        return [("", self.get_dev_examples(data_dir))]

    def get_predict_sets(self, data_dir):
        """Test sets to predict: a list of (name suffix, examples, submission
        name); suffix "" writes test_results.tsv, others
        test_results_<suffix>.tsv."""
        return [("", self.get_test_examples(data_dir), self.submission_name)]

    @classmethod
    def _read_tsv(cls, input_file, quotechar=None):
        """All rows of a tab-separated file, the header included, as lists of
        strings (the helper that custom processors call)."""
        with tf.io.gfile.GFile(input_file, "r") as f:
            return list(csv.reader(file_io.utf8_lines(f, None, input_file),
                                   delimiter="\t", quotechar=quotechar))

    def _read_rows(self, input_file, layout):
        """Reads a data file and checks its rows' number of columns.

        Args:
          input_file: path of the .tsv file.
          layout: `Layout` of the file.

        Returns:
          List of (line number, row) without the header and empty lines.

        Raises:
          errors.InputError: missing file or malformed row.
        """
        if not tf.io.gfile.exists(input_file):
            raise errors.InputError(
                "--data_dir: file not found: %s (needed by task %s)"
                % (input_file, type(self).__name__.replace("Processor", "")))
        rows = []
        with tf.io.gfile.GFile(input_file, "r") as f:
            # quotechar=None: quotes are ordinary characters in GLUE files.
            reader = csv.reader(file_io.utf8_lines(f, "data_dir", input_file),
                                delimiter="\t", quotechar=None)
            num_columns = layout.num_columns
            for i, row in enumerate(reader):
                if i == 0 and layout.header:
                    num_columns = num_columns or len(row)
                    continue
                if not row:
                    continue
                if len(row) != num_columns:
                    message = ("%s, line %d: expected %d tab-separated columns, found %d"
                               % (input_file, reader.line_num, num_columns, len(row)))
                    if self.skip_malformed_rows:
                        tf.logging.warning("Skipping malformed row: %s", message)
                        continue
                    raise errors.InputError(
                        message + " (use --skip_malformed_rows to skip such rows)")
                rows.append((reader.line_num, row))
        return rows

    def _make_example(self, guid, text_a, text_b, label, input_file, line_number):
        """An InputExample after checking its label against the task's."""
        labels = self.get_labels()
        if self.is_regression:
            try:
                float(label)
            except ValueError:
                raise errors.InputError(
                    "%s, line %d: label %r is not a number" % (input_file, line_number, label))
        elif label not in labels:
            raise errors.InputError(
                "%s, line %d: label %r is not one of the task's labels %s"
                % (input_file, line_number, label, ", ".join(labels)))
        return InputExample(guid=guid, text_a=text_a, text_b=text_b, label=label)

    def _dummy_label(self):
        """Label given to test examples (which have none)."""
        return "0" if self.is_regression else self.get_labels()[0]


class GlueProcessor(DataProcessor):
    """A GLUE task: train.tsv, dev.tsv and test.tsv in `data_dir`, read by
    the layouts `train_layout` (train and dev) and `test_layout`."""

    train_file = "train.tsv"
    dev_file = "dev.tsv"
    test_file = "test.tsv"
    train_layout = None
    test_layout = None
    labels = ("0", "1")

    @property
    def text_pairs(self):
        return self.train_layout.text_b is not None

    def get_train_examples(self, data_dir):
        """See base class."""
        return self._create_from_file(os.path.join(data_dir, self.train_file), "train")

    def get_dev_examples(self, data_dir):
        """See base class."""
        return self._create_from_file(os.path.join(data_dir, self.dev_file), "dev")

    def get_test_examples(self, data_dir):
        """See base class."""
        return self._create_from_file(os.path.join(data_dir, self.test_file), "test")

    def get_labels(self):
        """See base class."""
        return None if self.is_regression else list(self.labels)

    def _create_from_file(self, input_file, set_type):
        layout = self.test_layout if set_type.startswith("test") else self.train_layout
        return self._create_examples(self._read_rows(input_file, layout), set_type,
                                     input_file)

    def _create_examples(self, lines, set_type, input_file="<lines>"):
        """Creates examples from rows.

        Args:
          lines: list of (line number, row) from `_read_rows`, or a list of
            rows including the header (what `_read_tsv` returns, as custom
            processors pass it).
          set_type: "train", "dev", "test", or a name starting with one of
            them; test sets have no labels.
          input_file: the file's name, for error messages.

        Returns:
          List of InputExample; guid is "<set_type>-<index>", where index is
          the file's index column if it has one, else the row's position.
        """
        is_test = set_type.startswith("test")
        layout = self.test_layout if is_test else self.train_layout
        if lines and not isinstance(lines[0], tuple):
            # Plain rows as returned by `_read_tsv`.
            lines = [(i + 1, row) for i, row in enumerate(lines)
                     if row and not (i == 0 and layout.header)]
        examples = []
        for i, (line_number, row) in enumerate(lines):
            index = row[layout.index] if layout.index is not None else str(i)
            guid = "%s-%s" % (set_type, tokenization.convert_to_unicode(index))
            text_a = tokenization.convert_to_unicode(row[layout.text_a])
            text_b = None
            if layout.text_b is not None:
                text_b = tokenization.convert_to_unicode(row[layout.text_b])
            if is_test or layout.label is None:
                label = self._dummy_label()
            else:
                label = tokenization.convert_to_unicode(row[layout.label]).strip()
            examples.append(self._make_example(guid, text_a, text_b, label, input_file,
                                               line_number))
        return examples


class ColaProcessor(GlueProcessor):
    """CoLA (GLUE): is a sentence grammatical (1) or not (0)?

    train.tsv, dev.tsv: no header; source, label, original label, sentence.
    test.tsv: header "index sentence".
    """

    submission_name = "CoLA"
    metric_names = ("matthews_corr",)
    main_metric = "eval_matthews_corr"
    train_layout = Layout(header=False, num_columns=4, text_a=3, text_b=None, label=1, index=None)
    test_layout = Layout(header=True, num_columns=None, text_a=1, text_b=None, label=None, index=0)


class Sst2Processor(GlueProcessor):
    """SST-2 (GLUE): sentiment of a movie review sentence, 0 or 1.

    train.tsv, dev.tsv: header "sentence label". test.tsv: "index sentence".
    """

    submission_name = "SST-2"
    train_layout = Layout(header=True, num_columns=None, text_a=0, text_b=None, label=1, index=None)
    test_layout = Layout(header=True, num_columns=None, text_a=1, text_b=None, label=None, index=0)


class MrpcProcessor(GlueProcessor):
    """MRPC (GLUE): are two sentences paraphrases (1) or not (0)?

    train.tsv, dev.tsv: header "Quality #1 ID #2 ID #1 String #2 String".
    test.tsv: header "index #1 ID #2 ID #1 String #2 String".
    """

    submission_name = "MRPC"
    metric_names = ("f1",)
    main_metric = "eval_f1"
    train_layout = Layout(header=True, num_columns=None, text_a=3, text_b=4, label=0, index=None)
    test_layout = Layout(header=True, num_columns=None, text_a=3, text_b=4, label=None, index=0)


class StsbProcessor(GlueProcessor):
    """STS-B (GLUE): how similar two sentences are, a score from 0 to 5
    (regression).

    train.tsv, dev.tsv: header "index genre filename year old_index source1
    source2 sentence1 sentence2 score". test.tsv: the same without score.
    """

    submission_name = "STS-B"
    is_regression = True
    metric_names = ("pearson", "spearman")
    main_metric = "eval_spearman"
    train_layout = Layout(header=True, num_columns=None, text_a=7, text_b=8, label=9, index=0)
    test_layout = Layout(header=True, num_columns=None, text_a=7, text_b=8, label=None, index=0)


class QqpProcessor(GlueProcessor):
    """QQP (GLUE): do two Quora questions ask the same (1) or not (0)?

    train.tsv, dev.tsv: header "id qid1 qid2 question1 question2
    is_duplicate". test.tsv: "id question1 question2".
    """

    submission_name = "QQP"
    metric_names = ("f1",)
    main_metric = "eval_f1"
    train_layout = Layout(header=True, num_columns=None, text_a=3, text_b=4, label=5, index=0)
    test_layout = Layout(header=True, num_columns=None, text_a=1, text_b=2, label=None, index=0)


class MnliProcessor(GlueProcessor):
    """MultiNLI (GLUE): does a premise entail, contradict or leave open a
    hypothesis?

    train.tsv, dev_matched.tsv, dev_mismatched.tsv: header, sentence1 and
    sentence2 in columns 8 and 9, the gold label last. test_matched.tsv,
    test_mismatched.tsv: the first 10 columns only.
    get_dev_examples/get_test_examples are the matched sets; the mismatched
    sets are evaluated and predicted too when their files exist.
    """

    submission_name = "MNLI-m"
    dev_file = "dev_matched.tsv"
    test_file = "test_matched.tsv"
    labels = ("contradiction", "entailment", "neutral")
    train_layout = Layout(header=True, num_columns=None, text_a=8, text_b=9, label=-1, index=0)
    test_layout = Layout(header=True, num_columns=None, text_a=8, text_b=9, label=None, index=0)
    # Set by main from --diagnostic_file.
    diagnostic_file = None

    def get_dev_examples(self, data_dir):
        """See base class."""
        return self._create_from_file(os.path.join(data_dir, self.dev_file), "dev_matched")

    def get_dev_mismatched_examples(self, data_dir):
        """The dev_mismatched set."""
        return self._create_from_file(os.path.join(data_dir, "dev_mismatched.tsv"),
                                      "dev_mismatched")

    def get_test_mismatched_examples(self, data_dir):
        """The test_mismatched set."""
        return self._create_from_file(os.path.join(data_dir, "test_mismatched.tsv"),
                                      "test_mismatched")

    def get_diagnostic_examples(self, input_file):
        """The GLUE diagnostic set (header "index sentence1 sentence2")."""
        layout = Layout(header=True, num_columns=None, text_a=1, text_b=2, label=None,
                        index=0)
        rows = self._read_rows(input_file, layout)
        saved, self.test_layout = self.test_layout, layout
        try:
            return self._create_examples(rows, "test_diagnostic", input_file)
        finally:
            self.test_layout = saved

    def get_eval_sets(self, data_dir):
        """See base class."""
        sets = [("", self.get_dev_examples(data_dir))]
        if tf.io.gfile.exists(os.path.join(data_dir, "dev_mismatched.tsv")):
            sets.append(("mismatched", self.get_dev_mismatched_examples(data_dir)))
        else:
            tf.logging.warning("No dev_mismatched.tsv in %s: evaluating matched only",
                               data_dir)
        return sets

    def get_predict_sets(self, data_dir):
        """See base class."""
        sets = [("", self.get_test_examples(data_dir), "MNLI-m")]
        if tf.io.gfile.exists(os.path.join(data_dir, "test_mismatched.tsv")):
            sets.append(("mismatched", self.get_test_mismatched_examples(data_dir),
                         "MNLI-mm"))
        if self.diagnostic_file:
            sets.append(("diagnostic", self.get_diagnostic_examples(self.diagnostic_file),
                         "AX"))
        return sets


class QnliProcessor(GlueProcessor):
    """QNLI (GLUE): does a sentence answer a question?

    train.tsv, dev.tsv: header "index question sentence label".
    test.tsv: "index question sentence".
    """

    submission_name = "QNLI"
    labels = ("entailment", "not_entailment")
    train_layout = Layout(header=True, num_columns=None, text_a=1, text_b=2, label=3, index=0)
    test_layout = Layout(header=True, num_columns=None, text_a=1, text_b=2, label=None, index=0)


class RteProcessor(QnliProcessor):
    """RTE (GLUE): does one text entail another?

    train.tsv, dev.tsv: header "index sentence1 sentence2 label".
    test.tsv: "index sentence1 sentence2".
    """

    submission_name = "RTE"


class WnliProcessor(QnliProcessor):
    """WNLI (GLUE): the Winograd schema task as sentence pairs; RTE's layout,
    labels 0 and 1."""

    submission_name = "WNLI"
    labels = ("0", "1")


class XnliProcessor(DataProcessor):
    """XNLI: MultiNLI's task in 15 languages; this processor reads the one
    named by `language`.

    Train: <data_dir>/multinli/multinli.train.<language>.tsv (header;
    premise, hypothesis, label). Dev and test: <data_dir>/xnli.dev.tsv and
    xnli.test.tsv (header; language, gold label, ..., sentence1 and sentence2
    in columns 6 and 7), filtered by language.
    """

    labels = ("contradiction", "entailment", "neutral")

    def __init__(self, language="zh"):
        self.language = language

    def get_train_examples(self, data_dir):
        """See base class."""
        input_file = os.path.join(data_dir, "multinli",
                                  "multinli.train.%s.tsv" % self.language)
        layout = Layout(header=True, num_columns=3, text_a=0, text_b=1, label=2, index=None)
        examples = []
        for i, (line_number, row) in enumerate(self._read_rows(input_file, layout)):
            label = tokenization.convert_to_unicode(row[2])
            if label == "contradictory":
                label = "contradiction"
            examples.append(self._make_example(
                "train-%d" % (i + 1), tokenization.convert_to_unicode(row[0]),
                tokenization.convert_to_unicode(row[1]), label, input_file, line_number))
        return examples

    def get_dev_examples(self, data_dir):
        """See base class."""
        return self._create_xnli(os.path.join(data_dir, "xnli.dev.tsv"), "dev")

    def get_test_examples(self, data_dir):
        """See base class."""
        return self._create_xnli(os.path.join(data_dir, "xnli.test.tsv"), "test")

    def get_labels(self):
        """See base class."""
        return list(self.labels)

    def _create_xnli(self, input_file, set_type):
        layout = Layout(header=True, num_columns=None, text_a=6, text_b=7, label=1,
                        index=None)
        examples = []
        languages = set()
        for i, (line_number, row) in enumerate(self._read_rows(input_file, layout)):
            language = tokenization.convert_to_unicode(row[0])
            languages.add(language)
            if language != self.language:
                continue
            examples.append(self._make_example(
                "%s-%d" % (set_type, i + 1), tokenization.convert_to_unicode(row[6]),
                tokenization.convert_to_unicode(row[7]),
                tokenization.convert_to_unicode(row[1]), input_file, line_number))
        if not examples:
            raise errors.InputError(
                "%s has no examples in language %r (--xnli_language); it has: %s"
                % (input_file, self.language, ", ".join(sorted(languages))))
        return examples


class GenericProcessor(own_data.OwnDataProcessor, DataProcessor):
    """--task_name=generic (own data): your own CSV, TSV or JSON Lines
    files, read as own_data.Settings say (from the flags by default);
    classification, multi-label classification or regression.

    Named after its task, as the other processors are. The reading is
    `own_data.OwnDataProcessor`'s; this class only adds this module's
    DataProcessor and InputExample, which own_data.py cannot import (this
    script runs as __main__)."""

    example_class = InputExample


PROCESSORS = {
    own_data.TASK_NAME: GenericProcessor,
    "cola": ColaProcessor,
    "sst-2": Sst2Processor,
    "mrpc": MrpcProcessor,
    "sts-b": StsbProcessor,
    "qqp": QqpProcessor,
    "mnli": MnliProcessor,
    "qnli": QnliProcessor,
    "rte": RteProcessor,
    "wnli": WnliProcessor,
    "xnli": XnliProcessor,
}
# Other spellings users type for the same tasks.
_TASK_ALIASES = {"sst2": "sst-2", "sst": "sst-2", "stsb": "sts-b", "sts": "sts-b"}


def get_processor(task_name, xnli_language="zh", settings=None):
    """The DataProcessor for a task name (case-insensitive); own data read
    as a run's flag `settings` say (`own_data.Settings.from_flags`; None:
    the defaults).

    Raises:
      errors.InputError: unknown task; the message lists the known ones.
    """
    name = (task_name or "").strip().lower()
    name = _TASK_ALIASES.get(name, name)
    if name not in PROCESSORS:
        raise errors.InputError(
            "--task_name: unknown task %r; known tasks: %s"
            % (task_name, ", ".join(sorted(PROCESSORS))))
    if name == "xnli":
        return XnliProcessor(language=xnli_language)
    if name == own_data.TASK_NAME:
        return GenericProcessor.from_flags(settings) if settings else GenericProcessor()
    return PROCESSORS[name]()


# ---------------------------------------------------------------------------
# Features.

def convert_single_example(ex_index, example, label_list, max_seq_length, tokenizer,
                           multi_label=False):
    """Turns one `InputExample` into the model's `InputFeatures` (one),
    cutting what does not fit: `convert_example` without a doc_stride, with
    the same arguments."""
    return convert_example(ex_index, example, label_list, max_seq_length, tokenizer,
                           multi_label=multi_label)[0][0]


def first_text_windows(tokens_a, tokens_b, max_seq_length, doc_stride, max_windows=0):
    """The first text's pieces, in the windows that fit next to the second
    text (kept whole) in `max_seq_length` (see input_packing.window_spans).

    Returns:
      list of piece lists (one, possibly empty, if the text fits); None if
      the second text leaves no room for any piece of the first.
    """
    room = max_seq_length - (3 + len(tokens_b) if tokens_b else 2)
    if room < 1:
        return None
    spans = input_packing.window_spans(len(tokens_a), room, doc_stride, max_windows)
    return [tokens_a[start:start + length] for start, length in spans] or [tokens_a]


def convert_example(ex_index, example, label_list, max_seq_length, tokenizer,
                    multi_label=False, doc_stride=None, max_windows=0):
    """Turns one `InputExample` into the model's `InputFeatures`: one, or
    one per window with a `doc_stride`.

    Args:
      ex_index: position of the example (the first 5 are logged).
      example: InputExample, or PaddingInputExample for all-zero features
        with is_real_example False.
      label_list: the task's labels; None for regression (the label is then
        parsed as a float).
      max_seq_length: length of the feature lists.
      tokenizer: FullTokenizer.
      multi_label: the example's label is a tuple of labels (multi-label
        task).
      doc_stride: None: a text that does not fit is cut. Else the first
        text is read in windows that start this many
        pieces apart (`first_text_windows`), each with the whole second text.
      max_windows: with doc_stride, the most windows (0: all).

    Returns:
      (features, cut): features is a list of InputFeatures, one per window:
      [CLS] A [SEP] (B [SEP]) as ids, zero-padded to max_seq_length, with
      input_mask (1 for real tokens) and segment_ids (0 for A, 1 for B);
      label_id is the label's index in label_list (its float value for
      regression; for multi-label a list of len(label_list) ints, 1 for each
      of the example's labels). cut is True when windows were asked for but
      the second text alone leaves no room, so the pair was cut instead.
    """
    if isinstance(example, PaddingInputExample):
        zeros = [0] * max_seq_length
        if label_list is None:
            label_id = 0.0
        else:
            label_id = [0] * len(label_list) if multi_label else 0
        return [InputFeatures(input_ids=zeros, input_mask=list(zeros),
                              segment_ids=list(zeros), label_id=label_id,
                              is_real_example=False)], False

    tokens_a = tokenizer.tokenize(example.text_a)
    tokens_b = tokenizer.tokenize(example.text_b) if example.text_b else None
    windows = None
    if doc_stride is not None:
        windows = first_text_windows(tokens_a, tokens_b, max_seq_length, doc_stride,
                                     max_windows)
    cut = doc_stride is not None and windows is None
    if label_list is None:
        label_id = float(example.label)
    elif multi_label:
        label_id = [int(label in example.label) for label in label_list]
    else:
        label_id = label_list.index(example.label)

    features = []
    for window_a in windows or [tokens_a]:
        # The classifier reads the final vector of [CLS] (the pooled output):
        # fine-tuning the whole model makes it a summary of the input.
        tokens, input_ids, input_mask, segment_ids = input_packing.pack_sequence_pair(
            list(window_a), list(tokens_b) if tokens_b else None, max_seq_length, tokenizer)
        if ex_index < 5 and not features:
            # Test sets carry a placeholder label ("test..." guids, see
            # DataProcessor._create_examples).
            label = ("none (test data)" if example.guid.startswith("test")
                     else "%s (id = %s)" % (example.label, label_id))
            fields = [("guid", example.guid),
                      ("tokens", [tokenization.printable_text(t) for t in tokens]),
                      ("length", len(tokens)), ("label", label)]
            if windows and len(windows) > 1:
                fields.append(("windows", len(windows)))
            input_pipeline.log_example(fields, debug=ex_index > 0,
                                       ids=[("input_ids", input_ids), ("input_mask", input_mask),
                                        ("segment_ids", segment_ids)])
        features.append(InputFeatures(input_ids=input_ids, input_mask=input_mask,
                                      segment_ids=segment_ids, label_id=label_id,
                                      is_real_example=True))
    return features, cut


def file_based_convert_examples_to_features(
        examples, label_list, max_seq_length, tokenizer, output_file, multi_label=False,
        doc_stride=None, max_windows=0, pad_to_multiple=1, windows_per_record=0):
    """Converts `InputExample`s (see `convert_example`) into a TFRecord
    file, written atomically, of one tf.train.Example per input (per window
    with a doc_stride): int64 input_ids, input_mask, segment_ids
    [max_seq_length], label_ids [1] (float for regression, label_list None;
    [len(label_list)] 0/1 with multi_label) and is_real_example [1].

    Args:
      doc_stride, max_windows: the windows of long inputs (`convert_example`).
      pad_to_multiple: all-zero records (is_real_example 0) follow until the
        number of records is a multiple of this (full batches for TPUs).
      windows_per_record: 0: a record per window. Else (with a doc_stride
        and max_windows no larger) one record per input, holding its windows
        one after another in input_ids, input_mask and segment_ids
        [windows_per_record * max_seq_length], then all-zero windows (input
        mask 0) up to windows_per_record (--window_loss=document).

    Returns:
      list with the index in `examples` of each record's input (-1 for the
      padding records), in file order: an input's windows are consecutive.
    """
    label_feature = (input_pipeline.float_feature if label_list is None
                     else input_pipeline.int64_feature)
    progress = logs.Progress("Converting examples for %s" % os.path.basename(output_file),
                             len(examples))
    example_of_record = []
    cut = []

    def padding():
        # Counted once the inputs' records are written (a padding input makes one).
        for _ in range(input_pipeline.padding_count(len(example_of_record), pad_to_multiple)):
            yield -1, PaddingInputExample()

    with file_io.atomic_path(output_file) as tmp_file, \
            tf.io.TFRecordWriter(tmp_file) as writer:
        for ex_index, example in itertools.chain(enumerate(examples), padding()):
            if ex_index >= 0:
                progress.update()
            features, was_cut = convert_example(
                ex_index, example, label_list, max_seq_length, tokenizer,
                multi_label=multi_label, doc_stride=doc_stride, max_windows=max_windows)
            if was_cut:
                cut.append(example.guid)
            # The windows of each record: one, or all of the input's.
            records = [features] if windows_per_record else [[f] for f in features]
            for record_windows in records:
                feature = record_windows[0]
                label_ids = feature.label_id if multi_label else [feature.label_id]
                record = tf.train.Example(features=tf.train.Features(feature={
                    "input_ids": _windows_feature(record_windows, "input_ids",
                                                  windows_per_record, max_seq_length),
                    "input_mask": _windows_feature(record_windows, "input_mask",
                                                   windows_per_record, max_seq_length),
                    "segment_ids": _windows_feature(record_windows, "segment_ids",
                                                    windows_per_record, max_seq_length),
                    "label_ids": label_feature(label_ids),
                    "is_real_example": input_pipeline.int64_feature(
                        [int(feature.is_real_example)]),
                }))
                writer.write(record.SerializeToString())
                example_of_record.append(ex_index)
    progress.done()
    if cut:
        tf.logging.warning(
            "%d inputs of %s (the first: %s) have a second text that leaves no room for "
            "the first in --max_seq_length=%d: they are cut, not read in windows",
            len(cut), os.path.basename(output_file), cut[0], max_seq_length)
    return example_of_record


def _windows_feature(windows, name, num_windows, max_seq_length):
    """An int64 tf.train.Feature of the InputFeatures `windows`' list `name`
    (input_ids, ...), one window after another, then all-zero windows up to
    `num_windows` (0: none)."""
    values = [value for window in windows for value in getattr(window, name)]
    return input_pipeline.int64_feature(
        values + [0] * (max_seq_length * max(num_windows - len(windows), 0)))


def file_based_input_fn_builder(input_file, seq_length, is_training, drop_remainder,
                                is_regression=False, num_multi_labels=0,
                                length_buckets=None, windows_per_record=0):
    """Builds the `input_fn` reading a file of
    `file_based_convert_examples_to_features` for the runner.

    Args:
      input_file: the TFRecord file.
      seq_length: the max_seq_length it was written with.
      is_training: read the file over and over, shuffled.
      drop_remainder: drop a last partial batch (TPU).
      is_regression: label_ids are floats.
      num_multi_labels: a multi-label task's number of labels (label_ids are
        then 0/1 vectors of that length); 0 for other tasks.
      length_buckets: dynamic padding (input_pipeline.tfrecord_input_fn).
      windows_per_record: the file holds inputs of this many windows each
        (file_based_convert_examples_to_features); 0: single sequences.

    Returns:
      input_fn(params) -> tf.data.Dataset of dicts of int32 tensors
      [batch, seq_length] (input_ids, input_mask, segment_ids; with
      length_buckets, [batch, a bucket's length]; with windows_per_record,
      [batch, windows_per_record, ...]) and [batch] (label_ids, float32 for
      regression, [batch, num_multi_labels] for multi-label;
      is_real_example).
    """
    label_shape = [num_multi_labels] if num_multi_labels else []
    sequence_shape = [windows_per_record, seq_length] if windows_per_record else [seq_length]
    name_to_features = {
        "input_ids": tf.io.FixedLenFeature(sequence_shape, tf.int64),
        "input_mask": tf.io.FixedLenFeature(sequence_shape, tf.int64),
        "segment_ids": tf.io.FixedLenFeature(sequence_shape, tf.int64),
        "label_ids": tf.io.FixedLenFeature(label_shape,
                                           tf.float32 if is_regression else tf.int64),
        "is_real_example": tf.io.FixedLenFeature([], tf.int64),
    }

    return input_pipeline.tfrecord_input_fn(input_file, name_to_features, is_training,
                                            drop_remainder, length_buckets=length_buckets)


# The name that code written against Google's run_classifier.py calls.
_truncate_seq_pair = input_packing.truncate_seq_pair


# ---------------------------------------------------------------------------
# Model.

def create_model(bert_config, is_training, input_ids, input_mask, segment_ids,
                 labels, num_labels, use_one_hot_embeddings, is_regression=False,
                 multi_label=False, options=None):
    """BERT with a classification (or regression) layer on the pooled output.

    Variables: BERT's (bert/...), plus output_weights [num_labels, hidden]
    and output_bias [num_labels] at the top level: Google's names, so that
    fine-tuned checkpoints load in either code.

    Args:
      bert_config: modeling.BertConfig.
      is_training: apply dropout.
      input_ids, input_mask, segment_ids: int32 [batch, seq_length].
      labels: int32 [batch] label ids (float32 scores for regression; int32
        [batch, num_labels] 0/1 for multi-label).
      num_labels: number of classes (1 for regression).
      use_one_hot_embeddings: embedding lookup by one-hot product (TPUs).
      is_regression: predict a score, with a squared-error loss.
      multi_label: num_labels independent yes/no decisions: sigmoid
        probabilities, and the loss is the sigmoid cross-entropy averaged over
        the labels.
      options: training.TrainingOptions (None: the defaults).

    Returns:
      (loss, per_example_loss [batch], logits [batch, num_labels],
      probabilities [batch, num_labels]); for regression the last is the
      predicted score [batch] and the loss is the mean squared error.
    """
    with _classifier_logits(bert_config, is_training, input_ids, input_mask, segment_ids,
                            num_labels, use_one_hot_embeddings, options) as logits:
        if is_regression:
            scores = tf.squeeze(logits, axis=-1)
            per_example_loss = tf.square(scores - tf.cast(labels, tf.float32))
            return tf.reduce_mean(per_example_loss), per_example_loss, logits, scores

        if multi_label:
            # Each label on its own: no softmax competition between them.
            probabilities = tf.sigmoid(logits)
            per_example_loss = tf.reduce_mean(
                tf.nn.sigmoid_cross_entropy_with_logits(
                    labels=tf.cast(labels, logits.dtype), logits=logits), axis=-1)
            return tf.reduce_mean(per_example_loss), per_example_loss, logits, probabilities

        probabilities = tf.nn.softmax(logits, axis=-1)
        # Cross-entropy: minus the log-probability of the true label.
        log_probs = tf.nn.log_softmax(logits, axis=-1)
        one_hot_labels = tf.one_hot(labels, depth=num_labels, dtype=tf.float32)
        per_example_loss = -tf.reduce_sum(one_hot_labels * log_probs, axis=-1)
        return tf.reduce_mean(per_example_loss), per_example_loss, logits, probabilities


@contextlib.contextmanager
def _classifier_logits(bert_config, is_training, input_ids, input_mask, segment_ids,
                       num_labels, use_one_hot_embeddings, options):
    """The classifier's logits [batch, num_labels] (float32) of inputs
    [batch, seq_length] (see `create_model`), given inside the "loss" name
    scope, where the losses are built on them."""
    model = training.bert_model(bert_config, is_training, input_ids, input_mask,
                                segment_ids, use_one_hot_embeddings, options)

    # Sentence-level tasks classify the pooled output (from the final [CLS]
    # vector); a token-level task would take model.get_sequence_output().
    pooled = model.get_pooled_output()
    output_weights = tf.get_variable(
        "output_weights", [num_labels, pooled.shape[-1]],
        initializer=tf.truncated_normal_initializer(stddev=0.02))
    output_bias = tf.get_variable("output_bias", [num_labels],
                                  initializer=tf.zeros_initializer())

    with tf.variable_scope("loss"):
        if is_training:
            pooled = tf.nn.dropout(pooled, rate=0.1)
        yield tf.nn.bias_add(tf.matmul(pooled, output_weights, transpose_b=True),
                             output_bias)


def combine_windows(values, window_mask, how):
    """Combines each input's window outputs in the graph, as
    `aggregate_windows` does in NumPy.

    Args:
      values: float [batch, windows, ...], one output per window.
      window_mask: bool [batch, windows], False for the padding windows
        (left out); each input has at least one real window.
      how: "mean" or "max" (value by value).

    Returns:
      float [batch, ...].
    """
    mask = tf.reshape(window_mask, tf.concat(
        [tf.shape(window_mask), tf.ones([values.shape.ndims - 2], tf.int32)], axis=0))
    if how == "max":
        return tf.reduce_max(tf.where(tf.broadcast_to(mask, tf.shape(values)), values,
                                      tf.fill(tf.shape(values), values.dtype.min)), axis=1)
    weights = tf.cast(mask, values.dtype)
    return tf.reduce_sum(values * weights, axis=1) / tf.maximum(
        tf.reduce_sum(weights, axis=1), 1.0)


def document_losses(window_logits, window_mask, labels, how, is_regression=False,
                    multi_label=False):
    """The loss of each input of windows on the combination of its windows'
    outputs (--window_loss=document), as `example_losses` computes it on
    `example_outputs`: cross-entropy of the combined logits; for multi-label
    tasks, the sigmoid cross-entropy of the combined probabilities, averaged
    over the labels; for regression, the squared error of the combined
    score.

    Args:
      window_logits: float32 [batch, windows, num_labels].
      window_mask: bool [batch, windows] (see `combine_windows`).
      labels: as for `create_model`, one per input.
      how: "mean" or "max".

    Returns:
      float32 [batch].
    """
    if is_regression:
        scores = combine_windows(window_logits[..., 0], window_mask, how)
        return tf.square(scores - tf.cast(labels, tf.float32))
    if multi_label:
        labels = tf.cast(labels, tf.float32)
        if how == "max":
            # The largest probability is the sigmoid of the largest logit.
            return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
                labels=labels, logits=combine_windows(window_logits, window_mask, how)),
                axis=-1)
        # The log of the mean of the windows' probabilities (and of their
        # complements) from their logs, which stay finite where they are tiny.
        mask = tf.broadcast_to(window_mask[..., tf.newaxis], tf.shape(window_logits))
        count = tf.reduce_sum(tf.cast(window_mask, tf.float32), axis=1, keepdims=True)

        def log_mean(log_values):
            masked = tf.where(mask, log_values, tf.fill(tf.shape(log_values), -1e30))
            return tf.reduce_logsumexp(masked, axis=1) - tf.math.log(count)

        log_p = log_mean(tf.math.log_sigmoid(window_logits))
        log_not_p = log_mean(tf.math.log_sigmoid(-window_logits))
        return -tf.reduce_mean(labels * log_p + (1.0 - labels) * log_not_p, axis=-1)
    log_probs = tf.nn.log_softmax(combine_windows(window_logits, window_mask, how), axis=-1)
    one_hot_labels = tf.one_hot(labels, depth=tf.shape(window_logits)[-1], dtype=tf.float32)
    return -tf.reduce_sum(one_hot_labels * log_probs, axis=-1)


def create_document_model(bert_config, is_training, input_ids, input_mask, segment_ids,
                          labels, num_labels, use_one_hot_embeddings, how,
                          is_regression=False, multi_label=False, options=None,
                          fixed_shapes=False):
    """`create_model` for inputs of several windows, trained on the
    combination of their windows' outputs (--window_loss=document). The
    variables are `create_model`'s, so that evaluation, prediction and the
    export read the model window by window.

    Args:
      input_ids, input_mask, segment_ids: int32 [batch, windows,
        seq_length]; padding windows are all zero.
      labels: one per input, as for `create_model`.
      how: "mean" or "max", the --window_aggregation.
      fixed_shapes: run every window, padding included (TPUs). Otherwise
        only the real ones run, with a few padding windows that round their
        number up to a multiple of the batch size, so that the model meets
        few distinct shapes.
      Others: as for `create_model`.

    Returns:
      (loss, per_example_loss [batch]).
    """
    batch_size, num_windows, seq_length = modeling.get_shape_list(input_ids, expected_rank=3)
    window_mask = tf.reduce_max(input_mask, axis=-1) > 0
    # The windows of all inputs, one after another: [batch * windows, ...].
    sequences = [tf.reshape(t, [-1, seq_length]) for t in (input_ids, input_mask, segment_ids)]
    if not fixed_shapes:
        real = tf.reshape(window_mask, [-1])
        # The real windows first, each input's in order.
        order = tf.argsort(tf.cast(tf.logical_not(real), tf.int32), stable=True)
        count = tf.reduce_sum(tf.cast(real, tf.int32))
        chosen = order[:(count + batch_size - 1) // batch_size * batch_size]
        sequences = [tf.gather(t, chosen) for t in sequences]
    with _classifier_logits(bert_config, is_training, *sequences, num_labels,
                            use_one_hot_embeddings, options) as logits:
        if not fixed_shapes:
            logits = tf.scatter_nd(chosen[:, tf.newaxis], logits,
                                   [batch_size * num_windows, num_labels])
        window_logits = tf.reshape(logits, [batch_size, num_windows, num_labels])
        per_example_loss = document_losses(window_logits, window_mask, labels, how,
                                           is_regression=is_regression,
                                           multi_label=multi_label)
        return tf.reduce_mean(per_example_loss), per_example_loss


def model_fn_builder(bert_config, num_labels, init_checkpoint, learning_rate,
                     num_train_steps, num_warmup_steps, use_tpu,
                     use_one_hot_embeddings, is_regression=False, multi_label=False,
                     options=None, document_windows=None):
    """Builds the classifier's `model_fn` for the runner (TPUEstimator API).

    Args:
      bert_config, num_labels, use_one_hot_embeddings, is_regression,
        multi_label, options: as for `create_model`.
      init_checkpoint: checkpoint to start from, or None.
      learning_rate, num_train_steps, num_warmup_steps: the optimizer's
        schedule (see optimization.create_optimizer; TRAIN only).
      use_tpu: build for TPUEstimator (restore through a scaffold).
      document_windows: None, or "mean" or "max": TRAIN features are inputs
        of several windows, input_ids, input_mask and segment_ids [batch,
        windows, seq_length], and the loss is that of their combined
        outputs (`create_document_model`). EVAL and PREDICT features are
        single windows all the same.

    Returns:
      model_fn(features, labels, mode, params) -> runtime.TPUEstimatorSpec.
      `features` holds int32 input_ids, input_mask and segment_ids
      [batch, seq_length], and label_ids [batch] (float32 for regression;
      [batch, num_labels] for multi-label) and is_real_example [batch] when
      the data has them (a serving request has neither). TRAIN: the mean
      loss and its train_op. EVAL: eval_loss and (single-label
      classification only) eval_accuracy over the real examples. PREDICT:
      "probabilities" [batch, num_labels] ("scores" [batch] for
      regression) and "logits" [batch, num_labels], plus "label_ids" and
      "is_real_example" when the features have them; the serving signature
      returns only the first.
    """

    def build_head(features, mode):
        input_ids = features["input_ids"]
        label_ids, is_real_example = fine_tuning.example_labels(
            features, [num_labels] if multi_label else (),
            dtype=tf.float32 if is_regression else tf.int32)
        if document_windows and mode == runtime.ModeKeys.TRAIN:
            total_loss, _ = create_document_model(
                bert_config, True, input_ids, features["input_mask"], features["segment_ids"],
                label_ids, num_labels, use_one_hot_embeddings, document_windows,
                is_regression=is_regression, multi_label=multi_label, options=options,
                fixed_shapes=use_tpu)
            return fine_tuning.Head(loss=total_loss)
        total_loss, per_example_loss, logits, probabilities = create_model(
            bert_config, mode == runtime.ModeKeys.TRAIN, input_ids,
            features["input_mask"], features["segment_ids"], label_ids, num_labels,
            use_one_hot_embeddings, is_regression=is_regression, multi_label=multi_label,
            options=options)
        output_name = "scores" if is_regression else "probabilities"
        # Multi-label metrics (F1) come from the NumPy pass in `evaluate`.
        metric_fn = fine_tuning.loss_and_accuracy(not (is_regression or multi_label))
        return fine_tuning.Head(
            loss=total_loss,
            eval_metrics=(metric_fn, [per_example_loss, label_ids, logits, is_real_example]),
            # The logits too: windows of one input are combined over them.
            predictions={output_name: probabilities, "logits": logits},
            export_outputs={output_name: probabilities})

    return fine_tuning.task_model_fn(
        build_head, init_checkpoint, learning_rate, num_train_steps, num_warmup_steps,
        use_tpu, options, count_tokens=False, passed_through=("label_ids", "is_real_example"))


def input_fn_builder(features, seq_length, is_training, drop_remainder):
    """Builds an `input_fn` serving a list of `InputFeatures` from memory,
    as constant tensors: for small data sets and notebooks. `main` goes
    through TFRecord files instead.

    Returns:
      input_fn(params) -> tf.data.Dataset of dicts of int32 input_ids,
      input_mask, segment_ids [batch, seq_length] and label_ids [batch]
      (float32 when the labels are floats: regression; [batch, num_labels]
      when they are lists: multi-label); repeated and shuffled for training.
    """
    num_examples = len(features)
    label_ids = [f.label_id for f in features]
    label_dtype = tf.float32 if any(isinstance(x, float) for x in label_ids) else tf.int32
    label_shape = [len(label_ids[0])] if label_ids and isinstance(label_ids[0], list) else []
    columns = {
        "input_ids": ([f.input_ids for f in features], tf.int32),
        "input_mask": ([f.input_mask for f in features], tf.int32),
        "segment_ids": ([f.segment_ids for f in features], tf.int32),
        "label_ids": (label_ids, label_dtype),
    }

    def input_fn(params):
        """See input_fn_builder."""
        d = tf.data.Dataset.from_tensor_slices({
            name: tf.constant(values, dtype=dtype,
                              shape=[num_examples] + (label_shape if name == "label_ids"
                                                      else [seq_length]))
            for name, (values, dtype) in columns.items()})
        if is_training:
            d = d.repeat().shuffle(buffer_size=100)
        return d.batch(params["batch_size"], drop_remainder=drop_remainder)

    return input_fn


def convert_examples_to_features(examples, label_list, max_seq_length, tokenizer,
                                 multi_label=False):
    """`convert_single_example` of every example: a list of `InputFeatures`,
    in order (held in memory, for `input_fn_builder`)."""
    features = []
    for ex_index, example in enumerate(examples):
        if ex_index % 10000 == 0:
            tf.logging.info("Converting example %d of %d", ex_index, len(examples))
        features.append(convert_single_example(ex_index, example, label_list,
                                               max_seq_length, tokenizer,
                                               multi_label=multi_label))
    return features


# ---------------------------------------------------------------------------
# Metrics, in NumPy, over the real (not padding) examples.

def accuracy(labels, predictions):
    """Fraction of equal entries of two 1-D arrays."""
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    return float(np.mean(labels == predictions)) if labels.size else 0.0


def f1_score(labels, predictions, positive=1):
    """F1 of the positive class: 2TP / (2TP + FP + FN); 0 when undefined."""
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    tp = np.sum((predictions == positive) & (labels == positive))
    fp = np.sum((predictions == positive) & (labels != positive))
    fn = np.sum((predictions != positive) & (labels == positive))
    denominator = 2 * tp + fp + fn
    return float(2 * tp / denominator) if denominator else 0.0


def matthews_corrcoef(labels, predictions):
    """Matthews correlation coefficient of binary labels (0/1):
    (TP*TN - FP*FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)); 0 when undefined."""
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    tp = float(np.sum((predictions == 1) & (labels == 1)))
    tn = float(np.sum((predictions != 1) & (labels != 1)))
    fp = float(np.sum((predictions == 1) & (labels != 1)))
    fn = float(np.sum((predictions != 1) & (labels == 1)))
    denominator = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return float((tp * tn - fp * fn) / denominator) if denominator else 0.0


def pearson_corr(x, y):
    """Pearson correlation of two 1-D arrays; 0 when either is constant."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    dx, dy = x - x.mean(), y - y.mean()
    denominator = np.sqrt(np.sum(dx * dx) * np.sum(dy * dy))
    return float(np.sum(dx * dy) / denominator) if denominator else 0.0


def average_ranks(x):
    """1-based ranks of a 1-D array; tied values get the mean of their ranks."""
    x = np.asarray(x)
    order = np.argsort(x, kind="mergesort")
    sorted_x = x[order]
    ranks = np.empty(len(x), dtype=np.float64)
    start = 0
    while start < len(x):
        end = start
        while end + 1 < len(x) and sorted_x[end + 1] == sorted_x[start]:
            end += 1
        # Positions start..end (0-based) share ranks start+1..end+1.
        ranks[order[start:end + 1]] = (start + end) / 2.0 + 1.0
        start = end + 1
    return ranks


def spearman_corr(x, y):
    """Spearman rank correlation: Pearson correlation of average ranks."""
    return pearson_corr(average_ranks(x), average_ranks(y))


METRIC_FUNCTIONS = {
    "accuracy": accuracy,
    "f1": f1_score,
    "matthews_corr": matthews_corrcoef,
    "pearson": pearson_corr,
    "spearman": spearman_corr,
    # Multi-label: over [n, num_labels] 0/1 arrays.
    "micro_f1": own_data.micro_f1,
    "macro_f1": own_data.macro_f1,
}


def compute_metrics(metric_names, label_ids, outputs, is_real_example, is_regression,
                    threshold=None):
    """Task metrics over the real examples.

    Args:
      metric_names: names in METRIC_FUNCTIONS.
      label_ids: [n] label ids (scores for regression; [n, num_labels] 0/1
        for multi-label).
      outputs: [n, num_labels] probabilities, or [n] scores for regression.
      is_real_example: [n], 0 for padding examples (excluded).
      threshold: multi-label tasks: a label is predicted where its
        probability is >= threshold. None: single-label (argmax).

    Returns:
      dict "eval_<name>" -> float.
    """
    real = np.asarray(is_real_example).astype(bool)
    labels = np.asarray(label_ids)[real]
    outputs = np.asarray(outputs)[real]
    if is_regression:
        predictions = outputs
    elif threshold is not None:
        predictions = (outputs >= threshold).astype(np.int64)
    else:
        predictions = np.argmax(outputs, axis=-1)
    return {"eval_" + name: METRIC_FUNCTIONS[name](labels, predictions)
            for name in metric_names}


# ---------------------------------------------------------------------------
# Steps of main.

def _lcm(a, b):
    return a * b // np.gcd(a, b)


def _count_with_padding(num_examples, num_actual):
    return "%d (%d actual, %d padding)" % (num_examples, num_actual, num_examples - num_actual)


def _count_records(example_of_record, num_actual, windows):
    """The "Num examples" of the logs for the records of
    file_based_convert_examples_to_features (windows: the Windows or None)."""
    if not windows:
        return _count_with_padding(len(example_of_record), num_actual)
    num_windows = sum(1 for index in example_of_record if index >= 0)
    return "%d in %d windows (%d padding records)" % (
        num_actual, num_windows, len(example_of_record) - num_windows)


def _num_multi_labels(processor, label_list):
    """file_based_input_fn_builder's num_multi_labels for the task."""
    return len(label_list) if processor.is_multi_label else 0


class Windows:
    """How inputs too long for --max_seq_length are read (`convert_example`)
    and their windows' outputs combined (`aggregate_windows`); None: inputs
    are cut to fit."""

    def __init__(self, doc_stride, max_windows=0, aggregation="mean", loss="window"):
        self.doc_stride = doc_stride
        self.max_windows = max_windows
        self.aggregation = aggregation
        # "window" or "document" (--window_loss; training only).
        self.loss = loss

    @classmethod
    def from_flags(cls, settings):
        """The Windows of --doc_stride, --max_windows, --window_aggregation
        and --window_loss in a run's `settings`, or None without
        --doc_stride.

        Raises:
          InputError: a value out of range, window flags without
            --doc_stride, or --window_loss=document for training without
            --max_windows or with --window_aggregation=first.
        """
        if settings.doc_stride is None:
            for name in ("max_windows", "window_aggregation", "window_loss"):
                if FLAGS[name].present or getattr(settings, name) != FLAGS[name].default:
                    raise errors.InputError("--%s is for --doc_stride, which is unset"
                                            % name)
            return None
        if settings.doc_stride < 1:
            raise errors.InputError("--doc_stride=%d: must be at least 1"
                                    % settings.doc_stride)
        if settings.max_windows < 0:
            raise errors.InputError("--max_windows=%d: must be 0 (all) or more"
                                    % settings.max_windows)
        # Runs without training may follow a record that says "document".
        if settings.window_loss == "document" and settings.do_train:
            if settings.window_aggregation == "first":
                raise errors.InputError(
                    "--window_loss=document needs --window_aggregation=mean or max: with "
                    "first, only the first window would be trained")
            if not settings.max_windows:
                raise errors.InputError(
                    "--window_loss=document needs --max_windows: the windows of an input "
                    "trained together (a training batch holds --train_batch_size times "
                    "that many)")
        return cls(settings.doc_stride, settings.max_windows, settings.window_aggregation,
                   settings.window_loss)

    def convert_args(self):
        """file_based_convert_examples_to_features' arguments."""
        return {"doc_stride": self.doc_stride, "max_windows": self.max_windows}

    @property
    def per_document(self):
        """Whether training takes each input's windows together
        (--window_loss=document)."""
        return self.loss == "document"


def aggregate_windows(values, example_of_record, num_examples, how):
    """Combines the outputs of each input's windows.

    Args:
      values: [num_records, ...] outputs, in record order.
      example_of_record: [num_records] input index of each record (-1:
        padding, left out), as file_based_convert_examples_to_features
        returns it; an input's windows are consecutive.
      num_examples: number of inputs; each has at least one window.
      how: "mean", "max" or "first" (over the windows, value by value).

    Returns:
      float64 array [num_examples, ...].
    """
    values = np.asarray(values, dtype=np.float64)
    index = np.asarray(example_of_record)
    values, index = values[index >= 0], index[index >= 0]
    if not num_examples:
        return values[:0]
    if not np.array_equal(np.unique(index), np.arange(num_examples)):
        raise RuntimeError("The windows do not cover inputs 0..%d" % (num_examples - 1))
    starts = np.flatnonzero(np.r_[True, index[1:] != index[:-1]])
    if how == "first":
        return values[starts]
    if how == "max":
        return np.maximum.reduceat(values, starts, axis=0)
    counts = np.diff(np.r_[starts, len(index)]).reshape((-1,) + (1,) * (values.ndim - 1))
    return np.add.reduceat(values, starts, axis=0) / counts


def example_outputs(predictions, example_of_record, num_examples, processor, windows):
    """Each input's output from its windows' predictions.

    Args:
      predictions: the model_fn's prediction dicts, one per record.
      example_of_record, num_examples: as for `aggregate_windows`.
      processor: the task's DataProcessor (its problem type).
      windows: the Windows (its aggregation).

    Returns:
      (outputs, logits): outputs [num_examples, num_labels] probabilities
      (a softmax of the combined logits; for multi-label the combined
      probabilities), or [num_examples] scores for regression; logits the
      combined logits of single-label tasks, else None.
    """
    how = windows.aggregation
    if processor.is_regression:
        return aggregate_windows([p["scores"] for p in predictions], example_of_record,
                                 num_examples, how), None
    if processor.is_multi_label:
        return aggregate_windows([p["probabilities"] for p in predictions],
                                 example_of_record, num_examples, how), None
    logits = aggregate_windows([p["logits"] for p in predictions], example_of_record,
                               num_examples, how)
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True), logits


def example_losses(outputs, logits, label_ids, processor):
    """[n] losses of combined outputs (`example_outputs`), as the model_fn
    computes them: cross-entropy, mean sigmoid cross-entropy over the labels
    (multi-label), or squared error (regression)."""
    label_ids = np.asarray(label_ids)
    if processor.is_regression:
        return np.square(outputs - label_ids)
    if processor.is_multi_label:
        p = np.clip(outputs, 1e-12, 1 - 1e-12)
        return -np.mean(label_ids * np.log(p) + (1 - label_ids) * np.log(1 - p), axis=-1)
    log_norm = np.log(np.sum(np.exp(logits - logits.max(axis=-1, keepdims=True)), axis=-1))
    chosen = np.take_along_axis(logits, label_ids.reshape(-1, 1), axis=-1)[:, 0]
    return logits.max(axis=-1) + log_norm - chosen


class _EvalSet:
    """A dev set written to a TFRecord file, ready to evaluate."""

    def __init__(self, run, suffix, examples, label_list, processor, windows=None):
        self.suffix = suffix
        self.num_actual = len(examples)
        self.windows = windows
        settings = run.settings
        fixed = run.fixed_batches
        multiple = 1
        if fixed:
            # Full batches only: all-zero records fill the last one. They
            # have weight 0 in every metric. The predict pass for the task's
            # own metrics reads the same file, so the count must suit both
            # batch sizes.
            multiple = settings.eval_batch_size
            if processor.metric_names or windows:
                multiple = _lcm(settings.eval_batch_size, settings.predict_batch_size)
        name = "eval.tf_record" if not suffix else "eval_%s.tf_record" % suffix
        self.file = os.path.join(settings.output_dir, name)
        self.example_of_record = file_based_convert_examples_to_features(
            examples, label_list, settings.max_seq_length, run.tokenizer, self.file,
            multi_label=processor.is_multi_label, pad_to_multiple=multiple,
            **(windows.convert_args() if windows else {}))
        self.num_examples = len(self.example_of_record)
        # None: until the data runs out. A TPU needs the number of steps.
        self.steps = self.num_examples // settings.eval_batch_size if fixed else None
        self.input_fn = file_based_input_fn_builder(
            input_file=self.file, seq_length=settings.max_seq_length, is_training=False,
            drop_remainder=fixed, is_regression=processor.is_regression,
            num_multi_labels=_num_multi_labels(processor, label_list),
            length_buckets=run.options.length_buckets)

    def describe_count(self):
        """The "Num examples" of the logs."""
        return _count_records(self.example_of_record, self.num_actual, self.windows)


def evaluate(estimator, run, eval_set, processor, checkpoint_path=None):
    """Evaluates one checkpoint of the `fine_tuning.Run` `run` on a dev set:
    `checkpoint_path`, else the latest in --output_dir, else the run's
    --init_checkpoint (a fine-tuned model).

    Returns:
      dict with the estimator's eval_accuracy, eval_loss, loss and
      global_step, plus the task's metrics (computed in NumPy over a predict
      pass on the same data, padding rows excluded).
    """
    training_progress.log_phase("Running evaluation", [
        ("Num examples", eval_set.describe_count()),
        ("Batch size", run.settings.eval_batch_size)])
    checkpoint_path = checkpoint_path or tf.train.latest_checkpoint(run.output_dir)
    if eval_set.windows:
        return _evaluate_windows(estimator, run, eval_set, processor, checkpoint_path)
    result = evaluation.evaluate(
        estimator, eval_set.input_fn,
        training_progress.num_batches(eval_set.num_examples, run.settings.eval_batch_size),
        checkpoint_path, run.init_checkpoint, steps=eval_set.steps)
    if processor.metric_names:
        output_name = "scores" if processor.is_regression else "probabilities"
        label_ids, outputs, is_real = [], [], []
        for prediction in fine_tuning.iter_predictions(
                estimator, eval_set.input_fn, eval_set.num_examples,
                run.settings.predict_batch_size, eval_set.num_examples, checkpoint_path,
                phase="Computing the task's metrics", name_weights=False):
            label_ids.append(prediction["label_ids"])
            outputs.append(prediction[output_name])
            is_real.append(prediction["is_real_example"])
        threshold = processor.multi_label_threshold if processor.is_multi_label else None
        result.update(compute_metrics(processor.metric_names, label_ids, outputs, is_real,
                                      processor.is_regression, threshold=threshold))
    return result


def _evaluate_windows(estimator, run, eval_set, processor, checkpoint_path):
    """`evaluate` of a dev set read in windows: every metric over the inputs'
    combined outputs (`example_outputs`), one value per input."""
    predictions = fine_tuning.predict(
        estimator, eval_set.input_fn, eval_set.num_examples, run.settings.predict_batch_size,
        eval_set.num_examples, checkpoint_path, run.init_checkpoint, phase="Evaluating",
        what="windows")
    outputs, logits = example_outputs(predictions, eval_set.example_of_record,
                                      eval_set.num_actual, processor, eval_set.windows)
    label_ids = aggregate_windows([p["label_ids"] for p in predictions],
                                  eval_set.example_of_record, eval_set.num_actual, "first")
    if not processor.is_regression:
        label_ids = label_ids.astype(np.int64)
    loss = float(np.mean(example_losses(outputs, logits, label_ids, processor)))
    result = {"eval_loss": loss, "loss": loss, "global_step": checkpoints.checkpoint_step(
        checkpoint_path or run.init_checkpoint)}
    real = np.ones(len(outputs))
    if not (processor.is_regression or processor.is_multi_label):
        result.update(compute_metrics(["accuracy"], label_ids, outputs, real, False))
    threshold = processor.multi_label_threshold if processor.is_multi_label else None
    result.update(compute_metrics(processor.metric_names, label_ids, outputs, real,
                                  processor.is_regression, threshold=threshold))
    return result


def train_and_evaluate(estimator, run, train_input_fn, num_train_steps, eval_sets,
                       processor, eval_every_n_steps, keep_best, best_metric):
    """Trains to num_train_steps, evaluating the first dev set every
    eval_every_n_steps (and at the end), and with keep_best copies the best
    checkpoint to <output_dir>/best/ (`evaluation.train_and_evaluate`).

    Args:
      run: the `fine_tuning.Run`.
      train_input_fn: the training input_fn; each chunk of training goes on
        in it where the previous one stopped (training.ResumableTrainer).

    Returns:
      (results of the last evaluation, best checkpoint path or None).
    """
    best = evaluation.BestCheckpoint(best_metric, os.path.join(run.output_dir, "best")) \
        if keep_best else None

    def evaluate_fn(checkpoint, step):
        result = evaluate(estimator, run, eval_sets[0], processor, checkpoint)
        training_progress.log_phase("Eval results at step %d" % step,
                                    [(key, result[key]) for key in sorted(result)])
        return result

    steps = list(range(eval_every_n_steps, num_train_steps, eval_every_n_steps))
    result, _ = evaluation.train_and_evaluate(estimator, train_input_fn,
                                              steps + [num_train_steps], evaluate_fn, best)
    return result, best.path if best else None


def write_predictions(estimator, run, examples, suffix, submission_name, label_list,
                      processor, checkpoint_path=None, windows=None):
    """Predicts a test set; writes test_results[_<suffix>].tsv (one line of
    tab-separated class probabilities, or one score, per example, in input
    order) and, for GLUE tasks, <submission_name>.tsv ("index\\tprediction");
    for own data (GenericProcessor), predictions[_<suffix>].tsv (id and
    predicted label names). With `windows` (a Windows), each example's line
    combines its windows' outputs (`example_outputs`).
    """
    num_actual = len(examples)
    settings = run.settings
    fixed = run.fixed_batches
    name = "predict.tf_record" if not suffix else "predict_%s.tf_record" % suffix
    predict_file = os.path.join(run.output_dir, name)
    # Full batches only on TPUs; the padding records' predictions are dropped.
    example_of_record = file_based_convert_examples_to_features(
        examples, label_list, settings.max_seq_length, run.tokenizer, predict_file,
        multi_label=processor.is_multi_label,
        pad_to_multiple=settings.predict_batch_size if fixed else 1,
        **(windows.convert_args() if windows else {}))
    num_records = len(example_of_record)
    num_real = sum(1 for index in example_of_record if index >= 0)

    training_progress.log_phase("Running prediction", [
        ("Num examples", _count_records(example_of_record, num_actual, windows)),
        ("Batch size", settings.predict_batch_size)])
    input_fn = file_based_input_fn_builder(
        input_file=predict_file, seq_length=settings.max_seq_length, is_training=False,
        drop_remainder=fixed, is_regression=processor.is_regression,
        num_multi_labels=_num_multi_labels(processor, label_list),
        length_buckets=run.options.length_buckets)
    # In input order; the padding records come last.
    predictions = fine_tuning.predict(estimator, input_fn, num_records,
                                      settings.predict_batch_size, num_real, checkpoint_path,
                                      run.init_checkpoint, what="inputs")
    if windows:
        outputs = list(example_outputs(predictions, example_of_record[:num_real],
                                       num_actual, processor, windows)[0])
    else:
        output_name = "scores" if processor.is_regression else "probabilities"
        outputs = [prediction[output_name] for prediction in predictions]

    name = "test_results.tsv" if not suffix else "test_results_%s.tsv" % suffix
    output_predict_file = os.path.join(run.output_dir, name)
    with file_io.atomic_output(output_predict_file) as writer:
        for output in outputs:
            values = [output] if processor.is_regression else output
            writer.write("\t".join(str(v) for v in values) + "\n")
    file_io.report_output(output_predict_file, "%d predictions" % num_actual)

    if submission_name:
        submission_file = os.path.join(run.output_dir, submission_name + ".tsv")
        with file_io.atomic_output(submission_file) as writer:
            writer.write("index\tprediction\n")
            for example, output in zip(examples, outputs):
                index = example.guid.split("-", 1)[1]
                if processor.is_regression:
                    prediction = str(float(output))
                else:
                    prediction = label_list[int(np.argmax(output))]
                writer.write("%s\t%s\n" % (index, prediction))
        file_io.report_output(submission_file, "the GLUE submission file")

    if isinstance(processor, GenericProcessor):
        name = own_data.PREDICTIONS_FILE
        if suffix:
            name = name.replace(".tsv", "_%s.tsv" % suffix)
        path = os.path.join(run.output_dir, name)
        processor.write_predictions_file(path, examples[:num_actual], outputs, label_list)
        file_io.report_output(path, "the predicted labels")


def export_model(bert_config, processor, label_list, checkpoint_path, export_dir, vocab_file,
                 do_lower_case, max_seq_length=128, options=None, windows=None):
    """Exports a SavedModel (tag "serve") for serving from `checkpoint_path`
    (see serving.py) and returns its directory (timestamped, in
    `export_dir`).

    serving_default takes tf.string text_a [batch] (and text_b [batch] for
    pair tasks, `processor.text_pairs`; an empty text_b gives a single-text
    input, as --do_predict does), and returns:

    * single-label: probabilities [batch, num_labels], label_ids [batch]
      (the most probable) and labels [batch] (its name);
    * multi-label: probabilities [batch, num_labels], and label_ids and
      labels [batch, num_labels]: the labels at or above the threshold, in
      label order, then -1 and "" for the rest;
    * regression: scores [batch].

    serving_ids takes int32 input_ids, input_mask and segment_ids [batch,
    seq_length] and returns probabilities (scores for regression), as
    exports did before.

    The model_fn is the training one, run on the CPU without a TPU
    wrapper, so the export has no TPU graph whatever --use_tpu says.

    Args:
      processor: the task's DataProcessor (problem type, threshold, pairs).
      label_list: the label names (the model's outputs, in order).
      vocab_file, do_lower_case: the tokenizer, built into the export.
      max_seq_length: longer inputs are cut as for training.
      options: the run's training.TrainingOptions (its precision is kept).
      windows: a Windows: longer texts are read in windows instead, and
        each text's outputs combine its windows' as --do_predict does.
    """
    num_labels = 1 if processor.is_regression else len(label_list)
    model_fn = model_fn_builder(
        bert_config=bert_config, num_labels=num_labels, is_regression=processor.is_regression,
        multi_label=processor.is_multi_label, **fine_tuning.export_builder_args(options))

    def text_signature(tokenizer):
        inputs = {"text_a": serving.string_input("text_a")}
        if processor.text_pairs:
            inputs["text_b"] = serving.string_input("text_b")
        pieces_a = tokenizer.tokenize(inputs["text_a"])
        pieces_b = tokenizer.tokenize(inputs["text_b"]) if processor.text_pairs else None
        combine = None
        if windows:
            pieces_a, pieces_b, example_of_window = serving.first_text_windows(
                pieces_a, pieces_b, max_seq_length, windows.doc_stride, windows.max_windows)

            def combine(predictions):
                return _combine_window_predictions(predictions, example_of_window, processor,
                                                   windows.aggregation)

        features = serving.pack(pieces_a, pieces_b, max_seq_length, tokenizer.cls_id,
                                tokenizer.sep_id)
        return inputs, features, lambda predictions: _text_outputs(
            combine(predictions) if combine else predictions, processor, label_list)

    settings = {"max_seq_length": max_seq_length}
    if windows:
        settings.update(doc_stride=windows.doc_stride, max_windows=windows.max_windows,
                        window_aggregation=windows.aggregation)
    return serving.export(model_fn, export_dir, checkpoint_path, vocab_file, do_lower_case,
                          text_signature, settings=settings)


def _combine_window_predictions(predictions, example_of_window, processor, how):
    """`example_outputs` in the graph: the model_fn's predictions for
    windows ([windows, ...]) -> those of their inputs ([inputs, ...])."""
    def combine(values):
        if how == "first":
            position = tf.range(tf.shape(example_of_window)[0])
            return tf.gather(values, tf.math.segment_min(position, example_of_window))
        segment_fn = tf.math.segment_max if how == "max" else tf.math.segment_mean
        return segment_fn(values, example_of_window)

    if processor.is_regression:
        return {"scores": combine(predictions["scores"])}
    if processor.is_multi_label:
        return {"probabilities": combine(predictions["probabilities"])}
    return {"probabilities": tf.nn.softmax(combine(predictions["logits"]), axis=-1)}


def _text_outputs(predictions, processor, label_list):
    """The outputs of the text signature (see `export_model`) from the
    model_fn's predictions."""
    if processor.is_regression:
        return {"scores": predictions["scores"]}
    probabilities = predictions["probabilities"]
    names = tf.constant(label_list)
    if not processor.is_multi_label:
        label_ids = tf.argmax(probabilities, axis=-1, output_type=tf.int32)
        return {"probabilities": probabilities, "label_ids": label_ids,
                "labels": tf.gather(names, label_ids)}
    # Compared in float64, as the NumPy of --do_predict compares them.
    chosen = tf.cast(probabilities, tf.float64) >= processor.multi_label_threshold
    # The chosen labels' ids first (a stable sort keeps label order).
    order = tf.argsort(tf.cast(tf.logical_not(chosen), tf.int32), axis=-1, stable=True)
    label_ids = tf.where(tf.gather(chosen, order, batch_dims=1), order,
                         -tf.ones_like(order))
    labels = tf.where(label_ids >= 0, tf.gather(names, tf.maximum(label_ids, 0)),
                      tf.fill(tf.shape(label_ids), ""))
    return {"probabilities": probabilities, "label_ids": label_ids, "labels": labels}


def problem_type(processor):
    """The run record's problem type of a task (fine_tuning.PROBLEM_TYPES)."""
    if processor.is_regression:
        return "regression"
    if processor.is_multi_label:
        return "multi_label_classification"
    return "single_label_classification"


def write_run_record(run, processor, label_list):
    """Writes the run record of a training run (`fine_tuning.Run.write_record`):
    the task, the labels and the flags that shape the model's inputs."""
    names = ["task_name", "do_lower_case", "max_seq_length", "vocab_file"]
    if run.settings.doc_stride is not None:
        # Later runs read and combine windows as this one did.
        names += ["doc_stride", "max_windows", "window_aggregation"]
        if run.settings.window_loss != "window":
            # Recorded where it differs from the default only, so that other
            # runs' records stay as they were.
            names.append("window_loss")
    if isinstance(processor, XnliProcessor):
        names.append("xnli_language")
    if isinstance(processor, GenericProcessor):
        names += ["regression", "multi_label", "multi_label_threshold", "label_separator"]
    run.write_record(problem_type(processor), names, labels=label_list)


def _checkpoint_to_export(run, best_checkpoint=None):
    """The checkpoint --export_dir exports (`fine_tuning.Run.checkpoint`, with
    the classifier's output layer). Raises InputError if there is none."""
    checkpoint = run.checkpoint(best_checkpoint)
    if checkpoint:
        return checkpoint
    if run.init_checkpoint:
        raise errors.InputError(
            "--export_dir: --init_checkpoint=%s has no classifier layer (output_weights): "
            "fine-tune it first with --do_train" % run.init_checkpoint)
    raise errors.InputError(
        "--export_dir: no checkpoint in --output_dir=%s to export (train first with "
        "--do_train)" % run.output_dir)


def _needs(settings):
    """The flags a run requires besides the model's, and the data file flags
    it reads (`fine_tuning.prepare_run`). Own data may name each file
    (--train_file etc.) instead of a --data_dir; an export alone reads no
    data. A run that does nothing yet needs a --data_dir too (whatever the
    actions, a GLUE task reads its files there): named with the other
    missing flags, not after them."""
    reads_data = settings.do_train or settings.do_eval or settings.do_predict
    data_dir_flag, data_files = (), ()
    if own_data.is_generic_task(settings.task_name):
        data_files = fine_tuning.data_file_flags(
            settings, ("do_train", "train_file"), ("do_eval", "dev_file"),
            ("do_predict", "test_file"))
    elif reads_data or not settings.export_dir:
        data_dir_flag = ("data_dir",)
    return data_dir_flag + ("task_name",), data_files


def _check_flags(settings):
    """The classifier's checks of its flags (`fine_tuning.prepare_run`).

    Returns:
      (processor, windows): the task's DataProcessor, and its `Windows` or
      None.
    """
    own_data.check_flags_unused(settings.task_name, settings)
    processor = get_processor(settings.task_name, settings.xnli_language, settings)
    processor.skip_malformed_rows = settings.skip_malformed_rows
    if settings.diagnostic_file:
        if not isinstance(processor, MnliProcessor):
            raise errors.InputError("--diagnostic_file is for --task_name=MNLI only")
        file_io.require_file("diagnostic_file", settings.diagnostic_file)
        processor.diagnostic_file = settings.diagnostic_file
    windows = Windows.from_flags(settings)
    periodic_eval = settings.eval_every_n_steps > 0 or settings.keep_best_checkpoint
    if periodic_eval and not (settings.do_train and settings.do_eval):
        raise errors.InputError(
            "--eval_every_n_steps and --keep_best_checkpoint need --do_train and --do_eval")
    if settings.eval_every_n_steps < 0:
        raise errors.InputError("--eval_every_n_steps must be >= 0")
    return processor, windows


def _write_train_file(run, train_examples, label_list, processor, windows):
    """Writes the training inputs to train.tf_record in --output_dir.

    Returns:
      (path, number of records).
    """
    train_file = os.path.join(run.output_dir, "train.tf_record")
    windows_per_record = windows.max_windows if windows and windows.per_document else 0
    num_records = len(file_based_convert_examples_to_features(
        train_examples, label_list, run.settings.max_seq_length, run.tokenizer, train_file,
        multi_label=processor.is_multi_label, windows_per_record=windows_per_record,
        **(windows.convert_args() if windows else {})))
    return train_file, num_records


def _train(trainer, run, train_file, num_records, num_examples, label_list, processor,
           windows, num_train_steps, eval_sets):
    """Trains on `train_file` (`num_records` records of `num_examples`
    inputs), with periodic evaluation on the first of `eval_sets` where the
    flags ask for it.

    Returns:
      (results of the last evaluation or None, best checkpoint path or None).
    """
    settings = run.settings
    count = [("Num examples", num_examples)]
    if windows and windows.per_document:
        count.append(("Windows", "up to %d per example, trained together"
                      % windows.max_windows))
    elif windows:
        count.append(("Num windows", num_records))
    training_progress.log_training(run.options, count, num_train_steps,
                                   settings.train_batch_size)
    train_input_fn = file_based_input_fn_builder(
        input_file=train_file, seq_length=settings.max_seq_length, is_training=True,
        drop_remainder=True, is_regression=processor.is_regression,
        num_multi_labels=_num_multi_labels(processor, label_list),
        length_buckets=run.options.length_buckets,
        windows_per_record=windows.max_windows if windows and windows.per_document else 0)
    last_result = best_checkpoint = None
    if settings.eval_every_n_steps > 0 or settings.keep_best_checkpoint:
        every = settings.eval_every_n_steps or settings.save_checkpoints_steps
        last_result, best_checkpoint = train_and_evaluate(
            trainer, run, train_input_fn, num_train_steps, eval_sets, processor, every,
            settings.keep_best_checkpoint,
            settings.best_checkpoint_metric or processor.main_metric)
    else:
        trainer.train(input_fn=train_input_fn, max_steps=num_train_steps)
    checkpoints.report_trained_checkpoint(run.output_dir)
    return last_result, best_checkpoint


@output_lock.releases_output_lock
def main(_):
    # Every input is checked before anything is trained or written.
    run = fine_tuning.prepare_run(FLAG_DEFAULTS, min_seq_length=3, needs=_needs,
                                  check_flags=_check_flags, head_variable="output_weights")
    settings, bert_config = run.settings, run.bert_config
    processor, windows = run.task
    label_list = processor.get_labels()
    num_labels = 1 if processor.is_regression else len(label_list)
    # A checkpoint of another model in --output_dir would be restored and fail.
    checkpoints.check_output_dir_checkpoint(
        run.output_dir, bert_config,
        {"output_weights": [num_labels, bert_config.hidden_size], "output_bias": [num_labels]})

    # Read all data now, so that a bad file stops the run before training.
    data_dir = settings.data_dir
    train_examples = processor.get_train_examples(data_dir) if settings.do_train else None
    eval_sets = processor.get_eval_sets(data_dir) if settings.do_eval else []
    predict_sets = processor.get_predict_sets(data_dir) if settings.do_predict else []

    num_train_steps = num_warmup_steps = None
    if settings.do_train:
        # With windows, a check only: the windows, counted once converted,
        # make the steps (and the line that gives them).
        num_train_steps, num_warmup_steps = run.train_schedule(
            len(train_examples), announce=windows is None)
    if settings.export_dir and not settings.do_train:
        _checkpoint_to_export(run)

    run.start_output()
    if isinstance(processor, GenericProcessor):
        # The label order of the model's outputs, for later runs and for users.
        processor.write_labels(run.output_dir)
    if settings.do_train:
        write_run_record(run, processor, label_list)
        train_file, num_train_records = _write_train_file(run, train_examples, label_list,
                                                          processor, windows)
        if windows and not windows.per_document:
            # Each window is a training example.
            num_train_steps, num_warmup_steps = run.train_schedule(
                num_train_records, what="training windows")

    trainer = run.trainer(model_fn_builder(
        bert_config, num_labels, init_checkpoint=run.init_checkpoint,
        learning_rate=settings.learning_rate, num_train_steps=num_train_steps,
        num_warmup_steps=num_warmup_steps, use_tpu=settings.use_tpu,
        use_one_hot_embeddings=settings.use_tpu, is_regression=processor.is_regression,
        multi_label=processor.is_multi_label, options=run.options,
        document_windows=windows.aggregation if windows and windows.per_document else None))
    eval_sets = [
        _EvalSet(run, suffix, examples, label_list, processor, windows)
        for suffix, examples in eval_sets]

    last_result = best_checkpoint = None
    if settings.do_train:
        last_result, best_checkpoint = _train(
            trainer, run, train_file, num_train_records, len(train_examples), label_list,
            processor, windows, num_train_steps, eval_sets)

    for eval_set in eval_sets:
        if eval_set is eval_sets[0] and last_result is not None:
            # Already evaluated at the end of training.
            result = last_result
        else:
            result = evaluate(trainer, run, eval_set, processor)
        name = "eval_results.txt" if not eval_set.suffix else \
            "eval_results_%s.txt" % eval_set.suffix
        fine_tuning.write_eval_results(result, run.output_dir, file_name=name,
                                       headline=processor.main_metric)

    for suffix, examples, submission_name in predict_sets:
        write_predictions(trainer, run, examples, suffix, submission_name, label_list,
                          processor, checkpoint_path=best_checkpoint, windows=windows)

    if settings.export_dir:
        export_model(bert_config, processor, label_list, _checkpoint_to_export(
            run, best_checkpoint), settings.export_dir, settings.vocab_file,
            settings.do_lower_case, max_seq_length=settings.max_seq_length,
            options=run.options, windows=windows)


if __name__ == "__main__":
    script_runner.run_script(main)
