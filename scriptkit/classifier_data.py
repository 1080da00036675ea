"""The classifier's examples and the processors that read its tasks' data:
`InputExample` (one text or text pair and its label), `PaddingInputExample`
(the stand-in that fills a TPU batch), `InputFeatures` (one model input),
`DataProcessor` (the base class of a task's reader, which custom tasks
subclass, see docs/own_task.md), and the processors of the GLUE tasks
(read by `Layout`s of their files) and of XNLI.

In: data files in the GLUE download layout (and XNLI's). Out:
`InputExample`s; a malformed file raises `errors.InputError` naming the
file and line. run_classifier.py imports these names, under which code
written against Google's run_classifier.py finds them. Imports TensorFlow
(tf.io.gfile, tf.logging).
"""

import collections
import csv
import dataclasses
import os

import tensorflow.compat.v1 as tf

import tokenization
from scriptkit import errors
from scriptkit import file_io


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
    # The export's text inputs -> the column that holds each in the task's
    # data files, as their header names it: predict.py reads such files
    # without --input_columns.
    input_fields = {}
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

    input_fields = {"text_a": "sentence"}

    submission_name = "CoLA"
    metric_names = ("matthews_corr",)
    main_metric = "eval_matthews_corr"
    train_layout = Layout(header=False, num_columns=4, text_a=3, text_b=None, label=1, index=None)
    test_layout = Layout(header=True, num_columns=None, text_a=1, text_b=None, label=None, index=0)


class Sst2Processor(GlueProcessor):
    """SST-2 (GLUE): sentiment of a movie review sentence, 0 or 1.

    train.tsv, dev.tsv: header "sentence label". test.tsv: "index sentence".
    """

    input_fields = {"text_a": "sentence"}

    submission_name = "SST-2"
    train_layout = Layout(header=True, num_columns=None, text_a=0, text_b=None, label=1, index=None)
    test_layout = Layout(header=True, num_columns=None, text_a=1, text_b=None, label=None, index=0)


class MrpcProcessor(GlueProcessor):
    """MRPC (GLUE): are two sentences paraphrases (1) or not (0)?

    train.tsv, dev.tsv: header "Quality #1 ID #2 ID #1 String #2 String".
    test.tsv: header "index #1 ID #2 ID #1 String #2 String".
    """

    input_fields = {"text_a": "#1 String", "text_b": "#2 String"}

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

    input_fields = {"text_a": "sentence1", "text_b": "sentence2"}

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

    input_fields = {"text_a": "question1", "text_b": "question2"}

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

    input_fields = {"text_a": "sentence1", "text_b": "sentence2"}

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

    input_fields = {"text_a": "question", "text_b": "sentence"}

    submission_name = "QNLI"
    labels = ("entailment", "not_entailment")
    train_layout = Layout(header=True, num_columns=None, text_a=1, text_b=2, label=3, index=0)
    test_layout = Layout(header=True, num_columns=None, text_a=1, text_b=2, label=None, index=0)


class RteProcessor(QnliProcessor):
    """RTE (GLUE): does one text entail another?

    train.tsv, dev.tsv: header "index sentence1 sentence2 label".
    test.tsv: "index sentence1 sentence2".
    """

    input_fields = {"text_a": "sentence1", "text_b": "sentence2"}

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

    input_fields = {"text_a": "sentence1", "text_b": "sentence2"}

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
