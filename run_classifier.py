# coding=utf-8
# Copyright 2018 The Google AI Language Team Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""BERT fine-tuning runner for sentence (pair) classification and regression.

Same flags, building blocks and output files as Google's original
``run_classifier.py`` (``eval_results.txt``, ``test_results.tsv``), plus:

* processors for the whole GLUE benchmark in the standard GLUE download
  layout (CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI, RTE, WNLI) and XNLI in
  any language (``--xnli_language``); STS-B is a regression task;
* the metrics each task is reported with (F1 for MRPC/QQP, Matthews
  correlation for CoLA, Pearson/Spearman for STS-B) in ``eval_results.txt``;
* predictions in the GLUE submission format (``MRPC.tsv`` etc.);
* evaluation during training (``--eval_every_n_steps``) and keeping the best
  checkpoint (``--keep_best_checkpoint``);
* a SavedModel for serving (``--export_dir``);
* clear errors for bad input before training starts.
"""

import collections
import csv
import os

import numpy as np
import tensorflow.compat.v1 as tf
from absl import flags

import modeling
import run_common
import runtime
import tokenization

FLAGS = flags.FLAGS

# The original's flags, with its names, meanings and defaults.
run_common.define_flags(
    "bert_config_file", "vocab_file", "output_dir", "init_checkpoint",
    "do_lower_case", "max_seq_length", "do_train", "do_eval", "do_predict",
    "train_batch_size", "eval_batch_size", "predict_batch_size", "learning_rate",
    "num_train_epochs", "warmup_proportion", "save_checkpoints_steps",
    "iterations_per_loop", run_common.TPU_FLAGS, run_common.TRAINING_OPTION_FLAGS,
    max_seq_length=128)

flags.DEFINE_string(
    "data_dir", None,
    "The input data dir. Should contain the .tsv files (or other data files) "
    "for the task.")

flags.DEFINE_string("task_name", None, "The name of the task to train.")

flags.DEFINE_string("tpu_job_name", None,
                    "Name of TPU worker, if anything other than 'tpu_worker'")

# Beyond the original.
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

flags.DEFINE_string(
    "export_dir", None,
    "If set, export a SavedModel for serving under this directory (in a "
    "timestamped subdirectory). Its serving_default signature takes int32 "
    "input_ids, input_mask and segment_ids of shape [batch, max_seq_length] and "
    "returns `probabilities` [batch, num_labels] (`scores` [batch] for STS-B).")

flags.DEFINE_bool(
    "skip_malformed_rows", False,
    "Skip (with a warning) data rows with the wrong number of columns instead "
    "of stopping with an error.")

flags.DEFINE_string(
    "diagnostic_file", None,
    "MNLI only, with --do_predict: the GLUE diagnostic set "
    "(glue_data/diagnostic/diagnostic.tsv), predicted into AX.tsv.")


# ---------------------------------------------------------------------------
# Examples and features.

class InputExample(object):
    """A single training/test example for simple sequence classification."""

    def __init__(self, guid, text_a, text_b=None, label=None):
        """Constructs a InputExample.

        Args:
          guid: Unique id for the example ("<set>-<index>").
          text_a: string. The untokenized text of the first sequence. For
            single sequence tasks, only this sequence must be specified.
          text_b: (Optional) string. The untokenized text of the second
            sequence. Only must be specified for sequence pair tasks.
          label: (Optional) string. The label of the example (a number as a
            string for regression). This should be specified for train and
            dev examples, but not for test examples.
        """
        self.guid = guid
        self.text_a = text_a
        self.text_b = text_b
        self.label = label


class PaddingInputExample(object):
    """Fake example so the num input examples is a multiple of the batch size.

    When running eval/predict on the TPU, we need to pad the number of
    examples to be a multiple of the batch size, because the TPU requires a
    fixed batch size. The alternative is to drop the last batch, which is bad
    because it means the entire output data won't be generated.

    We use this class instead of `None` because treating `None` as padding
    batches could cause silent errors.
    """


class InputFeatures(object):
    """A single set of features of data."""

    def __init__(self,
                 input_ids,
                 input_mask,
                 segment_ids,
                 label_id,
                 is_real_example=True):
        self.input_ids = input_ids
        self.input_mask = input_mask
        self.segment_ids = segment_ids
        self.label_id = label_id
        self.is_real_example = is_real_example


# ---------------------------------------------------------------------------
# Data processors.

# Where the text, label and index are in each row of a data file.
#   header: whether the first line is a header (skipped).
#   num_columns: columns every row must have (None: as many as the header).
#   text_a, text_b, label, index: column numbers (None: absent).
Layout = collections.namedtuple(
    "Layout", ["header", "num_columns", "text_a", "text_b", "label", "index"])


class DataProcessor(object):
    """Base class for data converters for sequence classification data sets.

    Subclasses for the GLUE tasks describe their files with `Layout`s; the
    base class reads them, checks every row (number of columns, label) and
    raises `run_common.InputError` naming the file and line at fault.
    """

    # Beyond the original: what main needs to know about the task.
    is_regression = False
    # Stem of the GLUE submission file (e.g. "MRPC" -> MRPC.tsv); None: none.
    submission_name = None
    # Metrics beyond eval_accuracy/eval_loss (names of `METRIC_FUNCTIONS`).
    metric_names = ()
    # The metric that decides the best checkpoint.
    main_metric = "eval_accuracy"
    # Set by main from --skip_malformed_rows.
    skip_malformed_rows = False

    def get_train_examples(self, data_dir):
        """Gets a collection of `InputExample`s for the train set."""
        raise NotImplementedError()

    def get_dev_examples(self, data_dir):
        """Gets a collection of `InputExample`s for the dev set."""
        raise NotImplementedError()

    def get_test_examples(self, data_dir):
        """Gets a collection of `InputExample`s for prediction."""
        raise NotImplementedError()

    def get_labels(self):
        """Gets the list of labels for this data set (None for regression)."""
        raise NotImplementedError()

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
        """Reads a tab separated value file (list of rows, header included)."""
        with tf.io.gfile.GFile(input_file, "r") as f:
            reader = csv.reader(f, delimiter="\t", quotechar=quotechar)
            return [line for line in reader]

    def _read_rows(self, input_file, layout):
        """Reads a data file and checks its rows' number of columns.

        Args:
          input_file: path of the .tsv file.
          layout: `Layout` of the file.

        Returns:
          List of (line number, row) without the header and empty lines.

        Raises:
          run_common.InputError: missing file or malformed row.
        """
        if not tf.io.gfile.exists(input_file):
            raise run_common.InputError(
                "--data_dir: file not found: %s (needed by task %s)"
                % (input_file, type(self).__name__.replace("Processor", "")))
        rows = []
        with tf.io.gfile.GFile(input_file, "r") as f:
            # quotechar=None: quotes are ordinary characters in GLUE files.
            reader = csv.reader(f, delimiter="\t", quotechar=None)
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
                    raise run_common.InputError(
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
                raise run_common.InputError(
                    "%s, line %d: label %r is not a number" % (input_file, line_number, label))
        elif label not in labels:
            raise run_common.InputError(
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
          lines: list of (line number, row) from `_read_rows`, or (as in the
            original) a list of rows including the header.
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
    """Processor for the CoLA data set (GLUE version).

    train.tsv, dev.tsv: no header; source, label, original label, sentence.
    test.tsv: header "index sentence".
    """

    submission_name = "CoLA"
    metric_names = ("matthews_corr",)
    main_metric = "eval_matthews_corr"
    train_layout = Layout(header=False, num_columns=4, text_a=3, text_b=None, label=1,
                          index=None)
    test_layout = Layout(header=True, num_columns=None, text_a=1, text_b=None, label=None,
                         index=0)


class Sst2Processor(GlueProcessor):
    """Processor for the SST-2 data set (GLUE version).

    train.tsv, dev.tsv: header "sentence label". test.tsv: "index sentence".
    """

    submission_name = "SST-2"
    train_layout = Layout(header=True, num_columns=None, text_a=0, text_b=None, label=1,
                          index=None)
    test_layout = Layout(header=True, num_columns=None, text_a=1, text_b=None, label=None,
                         index=0)


class MrpcProcessor(GlueProcessor):
    """Processor for the MRPC data set (GLUE version).

    train.tsv, dev.tsv: header "Quality #1 ID #2 ID #1 String #2 String".
    test.tsv: header "index #1 ID #2 ID #1 String #2 String".
    """

    submission_name = "MRPC"
    metric_names = ("f1",)
    main_metric = "eval_f1"
    train_layout = Layout(header=True, num_columns=None, text_a=3, text_b=4, label=0,
                          index=None)
    test_layout = Layout(header=True, num_columns=None, text_a=3, text_b=4, label=None,
                         index=0)


class StsbProcessor(GlueProcessor):
    """Processor for the STS-B data set (GLUE version): regression on a
    similarity score from 0 to 5.

    train.tsv, dev.tsv: header "index genre filename year old_index source1
    source2 sentence1 sentence2 score". test.tsv: the same without score.
    """

    submission_name = "STS-B"
    is_regression = True
    metric_names = ("pearson", "spearman")
    main_metric = "eval_spearman"
    train_layout = Layout(header=True, num_columns=None, text_a=7, text_b=8, label=9,
                          index=0)
    test_layout = Layout(header=True, num_columns=None, text_a=7, text_b=8, label=None,
                         index=0)


class QqpProcessor(GlueProcessor):
    """Processor for the QQP data set (GLUE version).

    train.tsv, dev.tsv: header "id qid1 qid2 question1 question2
    is_duplicate". test.tsv: "id question1 question2".
    """

    submission_name = "QQP"
    metric_names = ("f1",)
    main_metric = "eval_f1"
    train_layout = Layout(header=True, num_columns=None, text_a=3, text_b=4, label=5,
                          index=0)
    test_layout = Layout(header=True, num_columns=None, text_a=1, text_b=2, label=None,
                         index=0)


class MnliProcessor(GlueProcessor):
    """Processor for the MultiNLI data set (GLUE version).

    train.tsv, dev_matched.tsv, dev_mismatched.tsv: header, sentence1 and
    sentence2 in columns 8 and 9, the gold label last. test_matched.tsv,
    test_mismatched.tsv: the first 10 columns only. Like the original,
    get_dev_examples/get_test_examples are the matched sets; the mismatched
    sets are evaluated and predicted too when their files exist.
    """

    submission_name = "MNLI-m"
    dev_file = "dev_matched.tsv"
    test_file = "test_matched.tsv"
    labels = ("contradiction", "entailment", "neutral")
    train_layout = Layout(header=True, num_columns=None, text_a=8, text_b=9, label=-1,
                          index=0)
    test_layout = Layout(header=True, num_columns=None, text_a=8, text_b=9, label=None,
                         index=0)
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
    """Processor for the QNLI data set (GLUE version).

    train.tsv, dev.tsv: header "index question sentence label".
    test.tsv: "index question sentence".
    """

    submission_name = "QNLI"
    labels = ("entailment", "not_entailment")
    train_layout = Layout(header=True, num_columns=None, text_a=1, text_b=2, label=3,
                          index=0)
    test_layout = Layout(header=True, num_columns=None, text_a=1, text_b=2, label=None,
                         index=0)


class RteProcessor(QnliProcessor):
    """Processor for the RTE data set (GLUE version).

    train.tsv, dev.tsv: header "index sentence1 sentence2 label".
    test.tsv: "index sentence1 sentence2".
    """

    submission_name = "RTE"


class WnliProcessor(QnliProcessor):
    """Processor for the WNLI data set (GLUE version): RTE's layout, labels
    0 and 1."""

    submission_name = "WNLI"
    labels = ("0", "1")


class XnliProcessor(DataProcessor):
    """Processor for the XNLI data set, in the language `language`.

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
            raise run_common.InputError(
                "%s has no examples in language %r (--xnli_language); it has: %s"
                % (input_file, self.language, ", ".join(sorted(languages))))
        return examples


PROCESSORS = {
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


def get_processor(task_name, xnli_language="zh"):
    """The DataProcessor for a task name (case-insensitive).

    Raises:
      run_common.InputError: unknown task; the message lists the known ones.
    """
    name = (task_name or "").strip().lower()
    name = _TASK_ALIASES.get(name, name)
    if name not in PROCESSORS:
        raise run_common.InputError(
            "--task_name: unknown task %r; known tasks: %s"
            % (task_name, ", ".join(sorted(PROCESSORS))))
    if name == "xnli":
        return XnliProcessor(language=xnli_language)
    return PROCESSORS[name]()


# ---------------------------------------------------------------------------
# Features.

def convert_single_example(ex_index, example, label_list, max_seq_length, tokenizer):
    """Converts a single `InputExample` into a single `InputFeatures`.

    Args:
      ex_index: position of the example (the first 5 are logged).
      example: InputExample or PaddingInputExample.
      label_list: the task's labels; None for regression (the label is then
        parsed as a float).
      max_seq_length: length of the output lists.
      tokenizer: FullTokenizer.

    Returns:
      InputFeatures: `[CLS] A [SEP] (B [SEP])` as ids, zero-padded to
      max_seq_length, with input_mask (1 for real tokens) and segment_ids
      (0 for A, 1 for B); label_id is the label's index (float for
      regression).
    """
    if isinstance(example, PaddingInputExample):
        return InputFeatures(
            input_ids=[0] * max_seq_length,
            input_mask=[0] * max_seq_length,
            segment_ids=[0] * max_seq_length,
            label_id=0.0 if label_list is None else 0,
            is_real_example=False)

    tokens_a = tokenizer.tokenize(example.text_a)
    tokens_b = tokenizer.tokenize(example.text_b) if example.text_b else None
    # For classification the vector of [CLS] is the "sentence vector" (this
    # works because the whole model is fine-tuned).
    tokens, input_ids, input_mask, segment_ids = run_common.pack_sequence_pair(
        tokens_a, tokens_b, max_seq_length, tokenizer)

    assert len(input_ids) == max_seq_length
    assert len(input_mask) == max_seq_length
    assert len(segment_ids) == max_seq_length

    if label_list is None:
        label_id = float(example.label)
    else:
        label_id = {label: i for i, label in enumerate(label_list)}[example.label]
    if ex_index < 5:
        tf.logging.info("*** Example ***")
        tf.logging.info("guid: %s" % (example.guid))
        tf.logging.info("tokens: %s" % " ".join(
            [tokenization.printable_text(x) for x in tokens]))
        tf.logging.info("input_ids: %s" % " ".join([str(x) for x in input_ids]))
        tf.logging.info("input_mask: %s" % " ".join([str(x) for x in input_mask]))
        tf.logging.info("segment_ids: %s" % " ".join([str(x) for x in segment_ids]))
        tf.logging.info("label: %s (id = %s)" % (example.label, label_id))

    return InputFeatures(
        input_ids=input_ids,
        input_mask=input_mask,
        segment_ids=segment_ids,
        label_id=label_id,
        is_real_example=True)


def file_based_convert_examples_to_features(
        examples, label_list, max_seq_length, tokenizer, output_file):
    """Converts `InputExample`s to a TFRecord file of tf.train.Examples with
    input_ids, input_mask, segment_ids (int64 [max_seq_length]), label_ids
    (int64 [1]; float [1] for regression, label_list None) and
    is_real_example (int64 [1]). Written atomically."""

    def create_int_feature(values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))

    def create_float_feature(values):
        return tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))

    tmp_file = "%s.tmp-%d" % (output_file, os.getpid())
    try:
        with tf.io.TFRecordWriter(tmp_file) as writer:
            for (ex_index, example) in enumerate(examples):
                if ex_index % 10000 == 0:
                    tf.logging.info("Writing example %d of %d" % (ex_index, len(examples)))

                feature = convert_single_example(ex_index, example, label_list,
                                                 max_seq_length, tokenizer)

                features = collections.OrderedDict()
                features["input_ids"] = create_int_feature(feature.input_ids)
                features["input_mask"] = create_int_feature(feature.input_mask)
                features["segment_ids"] = create_int_feature(feature.segment_ids)
                if label_list is None:
                    features["label_ids"] = create_float_feature([feature.label_id])
                else:
                    features["label_ids"] = create_int_feature([feature.label_id])
                features["is_real_example"] = create_int_feature(
                    [int(feature.is_real_example)])

                tf_example = tf.train.Example(features=tf.train.Features(feature=features))
                writer.write(tf_example.SerializeToString())
        tf.io.gfile.rename(tmp_file, output_file, overwrite=True)
    except BaseException:
        if tf.io.gfile.exists(tmp_file):
            tf.io.gfile.remove(tmp_file)
        raise


def file_based_input_fn_builder(input_file, seq_length, is_training, drop_remainder,
                                is_regression=False, skip_records=0):
    """Creates an `input_fn` closure to be passed to TPUEstimator.

    Args:
      input_file: TFRecord file from `file_based_convert_examples_to_features`.
      seq_length: max_seq_length it was written with.
      is_training: repeat and shuffle.
      drop_remainder: drop a last partial batch (TPU).
      is_regression: label_ids are floats.
      skip_records: training only: start this many records into the repeated
        file (to continue where an earlier `train` call stopped).

    Returns:
      input_fn(params) -> tf.data.Dataset of dicts of int32 tensors
      [batch, seq_length] (input_ids, input_mask, segment_ids) and [batch]
      (label_ids, float32 for regression; is_real_example).
    """
    name_to_features = {
        "input_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
        "input_mask": tf.io.FixedLenFeature([seq_length], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
        "label_ids": tf.io.FixedLenFeature([], tf.float32 if is_regression else tf.int64),
        "is_real_example": tf.io.FixedLenFeature([], tf.int64),
    }

    def input_fn(params):
        """The actual input function."""
        batch_size = params["batch_size"]

        # For training, we want a lot of parallel reading and shuffling.
        # For eval, we want no shuffling and parallel reading doesn't matter.
        d = tf.data.TFRecordDataset(input_file)
        if is_training:
            d = d.repeat()
            if skip_records:
                d = d.skip(skip_records)
            d = d.shuffle(buffer_size=100)

        d = d.map(lambda record: run_common.decode_record(record, name_to_features),
                  num_parallel_calls=tf.data.AUTOTUNE)
        d = d.batch(batch_size=batch_size, drop_remainder=drop_remainder)
        return d.prefetch(tf.data.AUTOTUNE)

    return input_fn


# The original's name for it.
_truncate_seq_pair = run_common.truncate_seq_pair


# ---------------------------------------------------------------------------
# Model.

def create_model(bert_config, is_training, input_ids, input_mask, segment_ids,
                 labels, num_labels, use_one_hot_embeddings, is_regression=False):
    """Creates a classification (or regression) model on the pooled output.

    Args:
      input_ids, input_mask, segment_ids: int32 [batch, seq_length].
      labels: int32 [batch] label ids (float32 scores for regression).
      num_labels: number of classes (1 for regression).

    Returns:
      (loss, per_example_loss [batch], logits [batch, num_labels],
      probabilities [batch, num_labels]); for regression the last is the
      predicted score [batch] and the loss is the mean squared error.
    """
    model = modeling.BertModel(
        config=bert_config,
        is_training=is_training,
        input_ids=input_ids,
        input_mask=input_mask,
        token_type_ids=segment_ids,
        use_one_hot_embeddings=use_one_hot_embeddings,
        **run_common.model_options())

    # In the demo, we are doing a simple classification task on the entire
    # segment.
    #
    # If you want to use the token-level output, use
    # model.get_sequence_output() instead.
    output_layer = model.get_pooled_output()

    hidden_size = output_layer.shape[-1]

    output_weights = tf.get_variable(
        "output_weights", [num_labels, hidden_size],
        initializer=tf.truncated_normal_initializer(stddev=0.02))

    output_bias = tf.get_variable(
        "output_bias", [num_labels], initializer=tf.zeros_initializer())

    with tf.variable_scope("loss"):
        if is_training:
            # I.e., 0.1 dropout
            output_layer = tf.nn.dropout(output_layer, rate=0.1)

        logits = tf.matmul(output_layer, output_weights, transpose_b=True)
        logits = tf.nn.bias_add(logits, output_bias)

        if is_regression:
            scores = tf.squeeze(logits, axis=-1)
            per_example_loss = tf.square(scores - tf.cast(labels, tf.float32))
            loss = tf.reduce_mean(per_example_loss)
            return (loss, per_example_loss, logits, scores)

        probabilities = tf.nn.softmax(logits, axis=-1)
        log_probs = tf.nn.log_softmax(logits, axis=-1)

        one_hot_labels = tf.one_hot(labels, depth=num_labels, dtype=tf.float32)

        per_example_loss = -tf.reduce_sum(one_hot_labels * log_probs, axis=-1)
        loss = tf.reduce_mean(per_example_loss)

        return (loss, per_example_loss, logits, probabilities)


def model_fn_builder(bert_config, num_labels, init_checkpoint, learning_rate,
                     num_train_steps, num_warmup_steps, use_tpu,
                     use_one_hot_embeddings, is_regression=False):
    """Returns `model_fn` closure for TPUEstimator.

    PREDICT returns {"probabilities"} ({"scores"} for regression), plus
    "label_ids" and "is_real_example" when the features have them; the
    serving signature returns only the former.
    """

    def model_fn(features, labels, mode, params):  # pylint: disable=unused-argument
        """The `model_fn` for TPUEstimator."""

        run_common.log_features(features)

        input_ids = features["input_ids"]
        input_mask = features["input_mask"]
        segment_ids = features["segment_ids"]
        label_dtype = tf.float32 if is_regression else tf.int32
        if "label_ids" in features:
            label_ids = features["label_ids"]
        else:
            # Serving: no labels.
            label_ids = tf.zeros(tf.shape(input_ids)[:1], dtype=label_dtype)
        if "is_real_example" in features:
            is_real_example = tf.cast(features["is_real_example"], dtype=tf.float32)
        else:
            is_real_example = tf.ones(tf.shape(label_ids), dtype=tf.float32)

        is_training = (mode == runtime.ModeKeys.TRAIN)

        (total_loss, per_example_loss, logits, probabilities) = create_model(
            bert_config, is_training, input_ids, input_mask, segment_ids, label_ids,
            num_labels, use_one_hot_embeddings, is_regression=is_regression)

        scaffold_fn = run_common.init_from_checkpoint(init_checkpoint, use_tpu)

        if mode == runtime.ModeKeys.TRAIN:
            train_op = run_common.create_train_op(
                total_loss, learning_rate, num_train_steps, num_warmup_steps, use_tpu)
            return runtime.TPUEstimatorSpec(
                mode=mode,
                loss=total_loss,
                train_op=train_op,
                training_hooks=run_common.training_hooks(
                    total_loss, examples_per_step=params["batch_size"], use_tpu=use_tpu),
                scaffold_fn=scaffold_fn)

        if mode == runtime.ModeKeys.EVAL:

            def metric_fn(per_example_loss, label_ids, logits, is_real_example):
                # The padding examples of TPU eval have weight 0.
                loss = tf.metrics.mean(values=per_example_loss, weights=is_real_example)
                if is_regression:
                    return {"eval_loss": loss}
                predictions = tf.argmax(logits, axis=-1, output_type=tf.int32)
                accuracy = tf.metrics.accuracy(
                    labels=label_ids, predictions=predictions, weights=is_real_example)
                return {
                    "eval_accuracy": accuracy,
                    "eval_loss": loss,
                }

            eval_metrics = (metric_fn,
                            [per_example_loss, label_ids, logits, is_real_example])
            return runtime.TPUEstimatorSpec(
                mode=mode,
                loss=total_loss,
                eval_metrics=eval_metrics,
                scaffold_fn=scaffold_fn)

        output_name = "scores" if is_regression else "probabilities"
        predictions = {output_name: probabilities}
        if "label_ids" in features:
            predictions["label_ids"] = label_ids
        if "is_real_example" in features:
            predictions["is_real_example"] = features["is_real_example"]
        return runtime.TPUEstimatorSpec(
            mode=mode,
            predictions=predictions,
            export_outputs={
                tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY:
                    runtime.PredictOutput({output_name: probabilities}),
            },
            scaffold_fn=scaffold_fn)

    return model_fn


# This function is not used by this file but is still used by the Colab and
# people who depend on it.
def input_fn_builder(features, seq_length, is_training, drop_remainder):
    """Creates an `input_fn` closure to be passed to TPUEstimator, from a
    list of InputFeatures held in memory (small data sets only)."""

    all_input_ids = []
    all_input_mask = []
    all_segment_ids = []
    all_label_ids = []

    for feature in features:
        all_input_ids.append(feature.input_ids)
        all_input_mask.append(feature.input_mask)
        all_segment_ids.append(feature.segment_ids)
        all_label_ids.append(feature.label_id)

    def input_fn(params):
        """The actual input function."""
        batch_size = params["batch_size"]

        num_examples = len(features)
        label_dtype = tf.float32 if any(isinstance(x, float) for x in all_label_ids) \
            else tf.int32

        # This is for demo purposes and does NOT scale to large data sets.
        d = tf.data.Dataset.from_tensor_slices({
            "input_ids": tf.constant(all_input_ids, shape=[num_examples, seq_length],
                                     dtype=tf.int32),
            "input_mask": tf.constant(all_input_mask, shape=[num_examples, seq_length],
                                      dtype=tf.int32),
            "segment_ids": tf.constant(all_segment_ids, shape=[num_examples, seq_length],
                                       dtype=tf.int32),
            "label_ids": tf.constant(all_label_ids, shape=[num_examples], dtype=label_dtype),
        })

        if is_training:
            d = d.repeat()
            d = d.shuffle(buffer_size=100)

        d = d.batch(batch_size=batch_size, drop_remainder=drop_remainder)
        return d

    return input_fn


# This function is not used by this file but is still used by the Colab and
# people who depend on it.
def convert_examples_to_features(examples, label_list, max_seq_length, tokenizer):
    """Convert a set of `InputExample`s to a list of `InputFeatures`."""

    features = []
    for (ex_index, example) in enumerate(examples):
        if ex_index % 10000 == 0:
            tf.logging.info("Writing example %d of %d" % (ex_index, len(examples)))

        feature = convert_single_example(ex_index, example, label_list,
                                         max_seq_length, tokenizer)

        features.append(feature)
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
    "f1": f1_score,
    "matthews_corr": matthews_corrcoef,
    "pearson": pearson_corr,
    "spearman": spearman_corr,
}


def compute_metrics(metric_names, label_ids, outputs, is_real_example, is_regression):
    """Task metrics over the real examples.

    Args:
      metric_names: names in METRIC_FUNCTIONS.
      label_ids: [n] label ids (scores for regression).
      outputs: [n, num_labels] probabilities, or [n] scores for regression.
      is_real_example: [n], 0 for padding examples (excluded).

    Returns:
      dict "eval_<name>" -> float.
    """
    real = np.asarray(is_real_example).astype(bool)
    labels = np.asarray(label_ids)[real]
    outputs = np.asarray(outputs)[real]
    predictions = outputs if is_regression else np.argmax(outputs, axis=-1)
    return {"eval_" + name: METRIC_FUNCTIONS[name](labels, predictions)
            for name in metric_names}


# ---------------------------------------------------------------------------
# Steps of main.

def _use_fixed_size_batches():
    """Whether eval/predict batches must all be full (TPU): the data are then
    padded with PaddingInputExample."""
    return FLAGS.use_tpu


def _pad_examples(examples, multiple):
    """`examples` plus PaddingInputExamples up to a multiple of `multiple`."""
    examples = list(examples)
    while len(examples) % multiple != 0:
        examples.append(PaddingInputExample())
    return examples


def _lcm(a, b):
    return a * b // np.gcd(a, b)


class _EvalSet(object):
    """A dev set written to a TFRecord file, ready to evaluate."""

    def __init__(self, suffix, examples, label_list, tokenizer, processor):
        self.suffix = suffix
        self.num_actual = len(examples)
        fixed = _use_fixed_size_batches()
        if fixed:
            # TPU requires a fixed batch size for all batches, therefore the
            # number of examples must be a multiple of the batch size, or else
            # examples will get dropped. So we pad with fake examples which are
            # ignored later on. These do NOT count towards the metric (all
            # tf.metrics support a per-instance weight, and these get a weight
            # of 0.0). The predict pass for the extra metrics reads the same
            # file, so pad to a multiple of both batch sizes.
            multiple = FLAGS.eval_batch_size
            if processor.metric_names:
                multiple = _lcm(FLAGS.eval_batch_size, FLAGS.predict_batch_size)
            examples = _pad_examples(examples, multiple)
        self.num_examples = len(examples)
        name = "eval.tf_record" if not suffix else "eval_%s.tf_record" % suffix
        self.file = os.path.join(FLAGS.output_dir, name)
        file_based_convert_examples_to_features(
            examples, label_list, FLAGS.max_seq_length, tokenizer, self.file)
        # This tells the estimator to run through the entire set; on the TPU
        # the number of steps must be given.
        self.steps = self.num_examples // FLAGS.eval_batch_size if fixed else None
        self.input_fn = file_based_input_fn_builder(
            input_file=self.file, seq_length=FLAGS.max_seq_length, is_training=False,
            drop_remainder=fixed, is_regression=processor.is_regression)


def evaluate(estimator, eval_set, processor, checkpoint_path=None):
    """Evaluates one checkpoint on a dev set.

    Returns:
      dict with the estimator's eval_accuracy, eval_loss, loss and
      global_step, plus the task's metrics (computed in NumPy over a predict
      pass on the same data, padding rows excluded).
    """
    tf.logging.info("***** Running evaluation *****")
    tf.logging.info("  Num examples = %d (%d actual, %d padding)",
                    eval_set.num_examples, eval_set.num_actual,
                    eval_set.num_examples - eval_set.num_actual)
    tf.logging.info("  Batch size = %d", FLAGS.eval_batch_size)
    checkpoint_path = checkpoint_path or tf.train.latest_checkpoint(FLAGS.output_dir)
    result = estimator.evaluate(input_fn=eval_set.input_fn, steps=eval_set.steps,
                                checkpoint_path=checkpoint_path)
    if processor.metric_names:
        output_name = "scores" if processor.is_regression else "probabilities"
        label_ids, outputs, is_real = [], [], []
        for prediction in estimator.predict(input_fn=eval_set.input_fn,
                                            checkpoint_path=checkpoint_path):
            label_ids.append(prediction["label_ids"])
            outputs.append(prediction[output_name])
            is_real.append(prediction["is_real_example"])
        result.update(compute_metrics(processor.metric_names, label_ids, outputs, is_real,
                                      processor.is_regression))
    return result


def _is_better(metric, value, best_value):
    if best_value is None:
        return True
    if "loss" in metric:
        return value < best_value
    return value > best_value


def _copy_checkpoint(checkpoint_path, target_dir):
    """Copies a checkpoint's files into target_dir (replacing any checkpoint
    there) and writes its `checkpoint` state file. Returns the new path."""
    tf.io.gfile.makedirs(target_dir)
    for old in tf.io.gfile.glob(os.path.join(target_dir, "model.ckpt-*")):
        tf.io.gfile.remove(old)
    name = os.path.basename(checkpoint_path)
    for source in tf.io.gfile.glob(checkpoint_path + ".*"):
        tf.io.gfile.copy(source, os.path.join(target_dir, os.path.basename(source)),
                         overwrite=True)
    # Written last, so that it only ever names complete files.
    with run_common.atomic_output(os.path.join(target_dir, "checkpoint")) as writer:
        writer.write('model_checkpoint_path: "%s"\nall_model_checkpoint_paths: "%s"\n'
                     % (name, name))
    return os.path.join(target_dir, name)


def train_and_evaluate(estimator, train_input_fn_for, num_train_steps, eval_sets,
                       processor, eval_every_n_steps, keep_best, best_metric,
                       examples_per_step, num_train_examples):
    """Trains to num_train_steps, evaluating the first dev set every
    eval_every_n_steps (and at the end), and with keep_best copies the best
    checkpoint to <output_dir>/best/.

    Args:
      train_input_fn_for: skip_records -> training input_fn.
      examples_per_step: training examples one step consumes.

    Returns:
      (results of the last evaluation, best checkpoint path or None).
    """
    best_value = None
    best_path = None
    best_dir = os.path.join(FLAGS.output_dir, "best")
    result = None
    step = _global_step(estimator)
    while step < num_train_steps:
        next_step = min(num_train_steps, (step // eval_every_n_steps + 1) * eval_every_n_steps)
        # Continue in the data where the previous chunk stopped, instead of
        # starting over at the beginning of the (repeated) file.
        skip = (step * examples_per_step) % num_train_examples
        estimator.train(input_fn=train_input_fn_for(skip), max_steps=next_step)
        step = _global_step(estimator)
        result = evaluate(estimator, eval_sets[0], processor)
        tf.logging.info("***** Eval results at step %d *****", step)
        for key in sorted(result.keys()):
            tf.logging.info("  %s = %s", key, str(result[key]))
        if keep_best:
            if best_metric not in result:
                raise run_common.InputError(
                    "--best_checkpoint_metric=%s is not among the eval metrics: %s"
                    % (best_metric, ", ".join(sorted(result))))
            value = float(result[best_metric])
            if _is_better(best_metric, value, best_value):
                best_value = value
                best_path = _copy_checkpoint(tf.train.latest_checkpoint(FLAGS.output_dir),
                                             best_dir)
                run_common.write_eval_results(result, best_dir,
                                              header="***** Best eval results *****")
                tf.logging.info("New best checkpoint: step %d, %s = %s (copied to %s)",
                                step, best_metric, value, best_dir)
    if keep_best and best_path:
        tf.logging.info("Best checkpoint: %s (%s = %s)", best_path, best_metric, best_value)
    return result, best_path


def _global_step(estimator):
    """The global step of the latest checkpoint in output_dir (0 if none)."""
    checkpoint = tf.train.latest_checkpoint(FLAGS.output_dir)
    if not checkpoint:
        return 0
    return int(tf.train.load_variable(checkpoint, tf.GraphKeys.GLOBAL_STEP))


def write_predictions(estimator, examples, suffix, submission_name, label_list,
                      tokenizer, processor, checkpoint_path=None):
    """Predicts a test set; writes test_results[_<suffix>].tsv (one line of
    tab-separated class probabilities, or one score, per example, in input
    order) and, for GLUE tasks, <submission_name>.tsv ("index\\tprediction").
    """
    num_actual = len(examples)
    fixed = _use_fixed_size_batches()
    if fixed:
        # TPU requires a fixed batch size for all batches; the padding
        # examples are dropped below.
        examples = _pad_examples(examples, FLAGS.predict_batch_size)

    name = "predict.tf_record" if not suffix else "predict_%s.tf_record" % suffix
    predict_file = os.path.join(FLAGS.output_dir, name)
    file_based_convert_examples_to_features(examples, label_list, FLAGS.max_seq_length,
                                            tokenizer, predict_file)

    tf.logging.info("***** Running prediction*****")
    tf.logging.info("  Num examples = %d (%d actual, %d padding)",
                    len(examples), num_actual, len(examples) - num_actual)
    tf.logging.info("  Batch size = %d", FLAGS.predict_batch_size)

    predict_input_fn = file_based_input_fn_builder(
        input_file=predict_file, seq_length=FLAGS.max_seq_length, is_training=False,
        drop_remainder=fixed, is_regression=processor.is_regression)

    result = estimator.predict(input_fn=predict_input_fn, checkpoint_path=checkpoint_path)

    output_name = "scores" if processor.is_regression else "probabilities"
    outputs = []
    tf.logging.info("***** Predict results *****")
    for (i, prediction) in enumerate(result):
        if i >= num_actual:
            break
        outputs.append(prediction[output_name])
    if len(outputs) != num_actual:
        raise RuntimeError("Got %d predictions for %d examples" % (len(outputs), num_actual))

    name = "test_results.tsv" if not suffix else "test_results_%s.tsv" % suffix
    output_predict_file = os.path.join(FLAGS.output_dir, name)
    with run_common.atomic_output(output_predict_file) as writer:
        for output in outputs:
            values = [output] if processor.is_regression else output
            writer.write("\t".join(str(v) for v in values) + "\n")
    tf.logging.info("Wrote %d predictions to %s", num_actual, output_predict_file)

    if submission_name:
        submission_file = os.path.join(FLAGS.output_dir, submission_name + ".tsv")
        with run_common.atomic_output(submission_file) as writer:
            writer.write("index\tprediction\n")
            for example, output in zip(examples, outputs):
                index = example.guid.split("-", 1)[1]
                if processor.is_regression:
                    prediction = str(float(output))
                else:
                    prediction = label_list[int(np.argmax(output))]
                writer.write("%s\t%s\n" % (index, prediction))
        tf.logging.info("Wrote GLUE submission file %s", submission_file)


def export_model(bert_config, num_labels, is_regression, checkpoint_path, export_dir):
    """Exports a SavedModel (tag "serve") for serving from `checkpoint_path`.

    The serving_default signature takes int32 input_ids, input_mask and
    segment_ids [batch, max_seq_length] and returns probabilities
    [batch, num_labels] (scores [batch] for regression).

    The model_fn is the training one, run on the CPU without a TPU
    wrapper, so the export has no TPU graph whatever --use_tpu says.

    Returns:
      The directory of the SavedModel (a timestamped directory in export_dir).
    """
    model_fn = model_fn_builder(
        bert_config=bert_config, num_labels=num_labels, init_checkpoint=None,
        learning_rate=0.0, num_train_steps=None, num_warmup_steps=None, use_tpu=False,
        use_one_hot_embeddings=False, is_regression=is_regression)

    seq_length = FLAGS.max_seq_length

    def serving_input_receiver_fn():
        features = {
            name: tf.placeholder(tf.int32, [None, seq_length], name=name)
            for name in ("input_ids", "input_mask", "segment_ids")
        }
        return runtime.ServingInputReceiver(features, features)

    path = runtime.export_saved_model(model_fn, export_dir, serving_input_receiver_fn,
                                      checkpoint_path=checkpoint_path,
                                      model_dir=FLAGS.output_dir)
    tf.logging.info("Exported SavedModel for serving to %s (from %s)", path, checkpoint_path)
    return path


def _checkpoint_to_export(best_checkpoint):
    """The best checkpoint, else the latest in output_dir, else
    --init_checkpoint if it is a fine-tuned classifier (as in the original
    README's prediction command). Raises InputError if there is none."""
    checkpoint = best_checkpoint or tf.train.latest_checkpoint(FLAGS.output_dir)
    if checkpoint:
        return checkpoint
    if FLAGS.init_checkpoint:
        names = [name for name, _ in tf.train.list_variables(FLAGS.init_checkpoint)]
        if "output_weights" in names:
            return FLAGS.init_checkpoint
        raise run_common.InputError(
            "--export_dir: --init_checkpoint=%s has no classifier layer (output_weights): "
            "fine-tune it first with --do_train" % FLAGS.init_checkpoint)
    raise run_common.InputError(
        "--export_dir: no checkpoint in --output_dir=%s to export (train first with "
        "--do_train)" % FLAGS.output_dir)


def main(_):
    tf.logging.set_verbosity(tf.logging.INFO)

    # Every input is checked before anything is trained or written.
    run_common.require_flags("data_dir", "task_name", "vocab_file", "bert_config_file",
                             "output_dir")
    if not (FLAGS.do_train or FLAGS.do_eval or FLAGS.do_predict or FLAGS.export_dir):
        raise run_common.InputError(
            "At least one of `do_train`, `do_eval`, `do_predict` or `export_dir` must "
            "be set.")
    processor = get_processor(FLAGS.task_name, FLAGS.xnli_language)
    processor.skip_malformed_rows = FLAGS.skip_malformed_rows
    if FLAGS.diagnostic_file:
        if not isinstance(processor, MnliProcessor):
            raise run_common.InputError("--diagnostic_file is for --task_name=MNLI only")
        run_common.require_file("diagnostic_file", FLAGS.diagnostic_file)
        processor.diagnostic_file = FLAGS.diagnostic_file
    if not tf.io.gfile.isdir(FLAGS.data_dir):
        raise run_common.InputError("--data_dir: directory not found: %s" % FLAGS.data_dir)

    tokenizer = run_common.load_tokenizer(FLAGS.vocab_file, FLAGS.do_lower_case,
                                          FLAGS.init_checkpoint)
    run_common.require_checkpoint("init_checkpoint", FLAGS.init_checkpoint)
    bert_config = run_common.load_bert_config(
        FLAGS.bert_config_file, max_seq_length=FLAGS.max_seq_length, vocab=tokenizer.vocab,
        vocab_file=FLAGS.vocab_file)
    if FLAGS.max_seq_length < 3:
        raise run_common.InputError("--max_seq_length must be at least 3, got %d"
                                    % FLAGS.max_seq_length)

    periodic_eval = FLAGS.eval_every_n_steps > 0 or FLAGS.keep_best_checkpoint
    if periodic_eval and not (FLAGS.do_train and FLAGS.do_eval):
        raise run_common.InputError(
            "--eval_every_n_steps and --keep_best_checkpoint need --do_train and --do_eval")
    if FLAGS.eval_every_n_steps < 0:
        raise run_common.InputError("--eval_every_n_steps must be >= 0")
    best_metric = FLAGS.best_checkpoint_metric or processor.main_metric

    label_list = processor.get_labels()
    num_labels = 1 if processor.is_regression else len(label_list)

    # Read all data now, so that a bad file stops the run before training.
    train_examples = processor.get_train_examples(FLAGS.data_dir) if FLAGS.do_train else None
    eval_sets = processor.get_eval_sets(FLAGS.data_dir) if FLAGS.do_eval else []
    predict_sets = processor.get_predict_sets(FLAGS.data_dir) if FLAGS.do_predict else []

    num_train_steps = None
    num_warmup_steps = None
    if FLAGS.do_train:
        num_train_steps = run_common.num_train_steps(
            len(train_examples), FLAGS.train_batch_size, FLAGS.num_train_epochs)
        if num_train_steps < 1:
            raise run_common.InputError(
                "%d training examples, --train_batch_size=%d and --num_train_epochs=%s "
                "make 0 training steps" % (len(train_examples), FLAGS.train_batch_size,
                                           FLAGS.num_train_epochs))
        num_warmup_steps = int(num_train_steps * FLAGS.warmup_proportion)

    tf.io.gfile.makedirs(FLAGS.output_dir)

    run_config = run_common.make_run_config(
        FLAGS.output_dir, FLAGS.save_checkpoints_steps, FLAGS.iterations_per_loop,
        FLAGS.use_tpu, FLAGS.tpu_name, FLAGS.tpu_zone, FLAGS.gcp_project, FLAGS.master,
        FLAGS.num_tpu_cores, tpu_job_name=FLAGS.tpu_job_name)

    model_fn = model_fn_builder(
        bert_config=bert_config,
        num_labels=num_labels,
        init_checkpoint=FLAGS.init_checkpoint,
        learning_rate=FLAGS.learning_rate,
        num_train_steps=num_train_steps,
        num_warmup_steps=num_warmup_steps,
        use_tpu=FLAGS.use_tpu,
        use_one_hot_embeddings=FLAGS.use_tpu,
        is_regression=processor.is_regression)

    # If TPU is not available, this will fall back to normal Estimator on CPU
    # or GPU.
    estimator = run_common.make_estimator(
        model_fn, run_config, FLAGS.use_tpu,
        train_batch_size=FLAGS.train_batch_size,
        eval_batch_size=FLAGS.eval_batch_size,
        predict_batch_size=FLAGS.predict_batch_size)

    eval_sets = [_EvalSet(suffix, examples, label_list, tokenizer, processor)
                 for suffix, examples in eval_sets]

    best_checkpoint = None
    last_result = None
    if FLAGS.do_train:
        train_file = os.path.join(FLAGS.output_dir, "train.tf_record")
        file_based_convert_examples_to_features(
            train_examples, label_list, FLAGS.max_seq_length, tokenizer, train_file)
        tf.logging.info("***** Running training *****")
        tf.logging.info("  Num examples = %d", len(train_examples))
        tf.logging.info("  Batch size = %d", FLAGS.train_batch_size)
        tf.logging.info("  Num steps = %d", num_train_steps)

        def train_input_fn_for(skip_records):
            return file_based_input_fn_builder(
                input_file=train_file, seq_length=FLAGS.max_seq_length, is_training=True,
                drop_remainder=True, is_regression=processor.is_regression,
                skip_records=skip_records)

        if periodic_eval:
            every = FLAGS.eval_every_n_steps or FLAGS.save_checkpoints_steps
            accumulation = FLAGS.gradient_accumulation_steps or 1
            last_result, best_checkpoint = train_and_evaluate(
                estimator, train_input_fn_for, num_train_steps, eval_sets, processor,
                every, FLAGS.keep_best_checkpoint, best_metric,
                FLAGS.train_batch_size * accumulation, len(train_examples))
        else:
            estimator.train(input_fn=train_input_fn_for(0), max_steps=num_train_steps)

    for eval_set in eval_sets:
        if eval_set is eval_sets[0] and last_result is not None:
            # Already evaluated at the end of training.
            result = last_result
        else:
            result = evaluate(estimator, eval_set, processor)
        name = "eval_results.txt" if not eval_set.suffix else \
            "eval_results_%s.txt" % eval_set.suffix
        run_common.write_eval_results(result, FLAGS.output_dir, file_name=name)

    for suffix, examples, submission_name in predict_sets:
        write_predictions(estimator, examples, suffix, submission_name, label_list,
                          tokenizer, processor, checkpoint_path=best_checkpoint)

    if FLAGS.export_dir:
        checkpoint = _checkpoint_to_export(best_checkpoint)
        export_model(bert_config, num_labels, processor.is_regression, checkpoint,
                     FLAGS.export_dir)


if __name__ == "__main__":
    run_common.run_script(main)
