"""Your own data for run_classifier.py, without code: ``--task_name=generic``.

The training, dev and test sets are CSV, TSV or JSON Lines files, found in
``--data_dir`` as train.*, dev.* (or val.*) and test.* with the extension
.csv, .tsv, .jsonl (.ndjson, .json: JSON Lines too), or named one by one
with ``--train_file``, ``--dev_file`` and ``--test_file``. Flags say which
columns hold the text (``--text_column``, and ``--text_b_column`` for
sentence pairs), the label (``--label_column``) and an optional id
(``--id_column``); CSV and TSV columns are named by the header row, or
numbered from 0 with ``--has_header=false``.

Three kinds of task:

* classification (the default): one label per row, a softmax over the
  labels;
* multi-label classification (``--multi_label``): any number of labels per
  row (separated by ``--label_separator``, or a JSON list), one sigmoid per
  label, a label predicted where its probability reaches
  ``--multi_label_threshold``; metrics micro and macro F1;
* regression (``--regression``): one number per row, squared-error loss;
  metrics Pearson and Spearman correlation.

The labels are ``--labels`` (comma-separated, in that order), else those of
the training file, sorted. A run writes them to <output_dir>/labels.txt
(one per line, in the order of the model's outputs); runs without
``--do_train`` read them back from there (or from next to
``--init_checkpoint``), so evaluation, prediction and export use the
training run's order.

This module defines the flags above and their settings (`Settings`,
which run_classifier.py's settings extend, listing the flags in its --help),
and reads the files into the classifier's examples (`GenericProcessor`, a
`classifier_data.DataProcessor`). See docs/own_data.md.

In: a run's settings (own data's flags). Out: `classifier_data.InputExample`s,
the label list, labels.txt and predictions.tsv. Imports TensorFlow
(tf.io.gfile, tf.logging).
"""

import codecs
import csv
import dataclasses
import io
import json
import math
import os
import re
from typing import Optional

import numpy as np
import tensorflow.compat.v1 as tf
from absl import flags

from scriptkit import classifier_data
from scriptkit import file_io
from scriptkit import run_record
from scriptkit import settings as settings_lib
from scriptkit import shared_flags
from scriptkit.errors import InputError

# The --task_name of own data.
TASK_NAME = "generic"
# Written to --output_dir: the labels in the order of the model's outputs.
LABELS_FILE = "labels.txt"
# Written to --output_dir by --do_predict: id and predicted label(s) per row.
PREDICTIONS_FILE = "predictions.tsv"
FORMATS = ("csv", "tsv", "jsonl")
_EXTENSIONS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl",
               ".json": "jsonl"}
# File names looked for in --data_dir (each with every extension above).
SPLIT_NAMES = {"train": ("train",), "dev": ("dev", "val"), "test": ("test",)}

# The flags of own data (--task_name=generic in run_classifier.py, whose
# --help lists them), with the defaults of `Settings`.
flags.DEFINE_enum(
    "data_format", "auto", ["auto"] + list(FORMATS),
    "--task_name=generic: format of the data files: csv (comma-separated, "
    "quoted as spreadsheets write it), tsv (tab-separated, no quoting), jsonl "
    "(one JSON object per line) or auto (by extension: .csv, .tsv, .jsonl, "
    ".ndjson, .json).")

flags.DEFINE_bool(
    "has_header", True,
    "--task_name=generic, CSV and TSV: the first row names the columns, and "
    "the column flags take those names. False: every row is data, and the "
    "column flags take 0-based column numbers.")

flags.DEFINE_string(
    "text_column", "text",
    "--task_name=generic: the column (JSON field) holding the text to classify "
    "(the first text of a sentence pair).")

flags.DEFINE_string(
    "text_b_column", None,
    "--task_name=generic: the column holding the second text of a sentence-pair "
    "task; unset: single texts.")

flags.DEFINE_string(
    "label_column", "label",
    "--task_name=generic: the column holding the label (training and dev files; "
    "test files need not have it).")

shared_flags.define_flags("id_column", helps={
    "id_column": "--task_name=generic: a column identifying each row, copied to "
                 "predictions.tsv; unset: rows are numbered from 0."})

flags.DEFINE_bool(
    "regression", False,
    "--task_name=generic: the labels are numbers to predict (squared-error loss; "
    "Pearson and Spearman correlation).")

flags.DEFINE_bool(
    "multi_label", False,
    "--task_name=generic: each row has any number of labels (separated by "
    "--label_separator, or a JSON list); one sigmoid output per label.")

flags.DEFINE_string(
    "label_separator", "|",
    "--task_name=generic with --multi_label: what separates the labels of a row.")

flags.DEFINE_float(
    "multi_label_threshold", 0.5,
    "--task_name=generic with --multi_label: a label is predicted when its "
    "probability is at least this (predictions.tsv and the F1 metrics).")

# The flags that mean something only for --task_name=generic.
_OWN_FLAGS = ("train_file", "dev_file", "test_file", "labels", "data_format", "has_header",
              "text_column", "text_b_column", "label_column", "id_column", "regression",
              "multi_label", "label_separator", "multi_label_threshold")


def is_generic_task(task_name):
    """Whether --task_name asks for own data (`TASK_NAME`, any letter case)."""
    return (task_name or "").strip().lower() == TASK_NAME


def check_flags_unused(task_name, settings):
    """Raises InputError if a flag of own data differs from its default in
    `settings` (a run's settings, `fine_tuning.Run.settings`) for another
    task, where it would be silently ignored."""
    if is_generic_task(task_name):
        return
    for name in _OWN_FLAGS:
        if getattr(settings, name) != settings_lib.default_of(settings, name):
            raise InputError(
                "--%s is for --task_name=%s (own data); --task_name=%s reads its own "
                "files in --data_dir" % (name, TASK_NAME, task_name))


# ---------------------------------------------------------------------------
# Settings.

@dataclasses.dataclass(frozen=True)
class Settings(settings_lib.FineTuning):
    """How to read own data, and where its label list lives: the settings
    of a fine-tuning run (of which own data reads --data_dir, --train_file,
    --dev_file and --test_file, --output_dir, where labels.txt is written
    and first looked for, --init_checkpoint, next to which it is looked for
    second, and --do_train: the labels then come from the training file
    unless given) with own data's flags, with their defaults (field names =
    flag names; run_classifier.Settings extends them).

    Attributes:
      labels: the labels, comma-separated (or a list), or None to infer
        them.
      data_format: "auto" (by extension), "csv", "tsv" or "jsonl".
      has_header: CSV/TSV files start with a header row.
      text_column, text_b_column, label_column, id_column: column names (with
        a header, and always for JSON Lines) or 0-based numbers as strings
        (CSV/TSV without header); text_b_column and id_column may be None.
      regression, multi_label: the kind of task (at most one of them).
      label_separator: what separates the labels of a multi-label row.
      multi_label_threshold: multi-label decision threshold on each
        probability.
    """

    labels: Optional[str] = None
    data_format: str = "auto"
    has_header: bool = True
    text_column: str = "text"
    text_b_column: Optional[str] = None
    label_column: str = "label"
    id_column: Optional[str] = None
    regression: bool = False
    multi_label: bool = False
    label_separator: str = "|"
    multi_label_threshold: float = 0.5


def check_settings(settings):
    """Raises InputError for own data's `Settings` that contradict each
    other.

    Returns:
      The --labels given, as a list (`parse_label_list`), or None.
    """
    labels = parse_label_list(settings.labels, "--labels") if settings.labels else None
    if settings.regression and settings.multi_label:
        raise InputError("--regression and --multi_label exclude each other")
    if settings.regression and labels:
        raise InputError("--labels is for classification; --regression predicts numbers")
    if settings.multi_label:
        if not settings.label_separator:
            raise InputError("--label_separator must not be empty")
        if not 0.0 < settings.multi_label_threshold < 1.0:
            raise InputError("--multi_label_threshold must be between 0 and 1, got %s"
                             % settings.multi_label_threshold)
    if settings.data_format not in ("auto",) + FORMATS:
        raise InputError("--data_format must be auto, csv, tsv or jsonl, got %r"
                         % settings.data_format)
    for name in ("text_column", "label_column"):
        if not getattr(settings, name):
            raise InputError("--%s must not be empty" % name)
    if labels is not None and not settings.multi_label and len(labels) < 2:
        raise InputError("--labels: a classifier needs at least two labels, got %s"
                         % ", ".join(labels))
    return labels


def parse_label_list(labels, where):
    """A list of labels from a comma-separated string (or a list), checked
    for empty and repeated names. Raises InputError naming `where`."""
    if isinstance(labels, str):
        labels = labels.split(",")
    labels = [str(label).strip() for label in labels]
    if not labels or any(not label for label in labels):
        raise InputError("%s: empty label name in %r" % (where, ",".join(labels)))
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise InputError("%s: label(s) given twice: %s" % (where, ", ".join(repeated)))
    return labels


def sort_labels(labels):
    """Labels in a fixed order: numerically if all are integers ("2" before
    "10"), else alphabetically."""
    labels = list(labels)
    if all(re.fullmatch(r"-?\d+", label) for label in labels):
        return sorted(labels, key=int)
    return sorted(labels)


# ---------------------------------------------------------------------------
# Reading files.

def detect_format(path, data_format="auto"):
    """"csv", "tsv" or "jsonl": `data_format` unless "auto", else by the file's
    extension. Raises InputError for an unknown extension."""
    if data_format and data_format != "auto":
        return data_format
    extension = os.path.splitext(path)[1].lower()
    if extension not in _EXTENSIONS:
        raise InputError(
            "%s: cannot tell the format from the extension %r; set --data_format to csv, "
            "tsv or jsonl" % (path, extension))
    return _EXTENSIONS[extension]


def read_text(path):
    """A file's text, decoded as UTF-8 (a leading byte-order mark, as some
    spreadsheet programs write, is dropped).

    Raises:
      InputError: missing file, or bytes that are not UTF-8 (naming the line).
    """
    if not tf.io.gfile.exists(path):
        raise InputError("File not found: %s" % path)
    with tf.io.gfile.GFile(path, "rb") as f:
        data = f.read()
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8):]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise InputError("%s, line %d: not UTF-8 text (byte 0x%02x); save the file as UTF-8"
                         % (path, line, data[e.start]))


@dataclasses.dataclass
class Table:
    """The data rows of one file.

    Attributes:
      path: the file.
      data_format: "csv", "tsv" or "jsonl".
      header: the column names of a CSV/TSV header row; None without one
        (and for JSON Lines, whose rows name their own fields).
      num_columns: columns of every CSV/TSV row (None for JSON Lines).
      rows: list of (line number, record): a list of strings for CSV/TSV, a
        dict for JSON Lines. Blank lines are left out.
    """

    path: str
    data_format: str
    header: list | None
    num_columns: int | None
    rows: list

    def key(self, column, flag_name):
        """Where `column` (the value of --flag_name) is in a record: a list
        index for CSV/TSV, the field name for JSON Lines.

        Raises:
          InputError: the file has no such column.
        """
        if self.data_format == "jsonl":
            return column
        if self.header is not None:
            matches = [i for i, name in enumerate(self.header) if name == column]
            if not matches:
                raise InputError(
                    "%s has no column %r (--%s); its header has: %s"
                    % (self.path, column, flag_name, ", ".join(repr(h) for h in self.header)))
            if len(matches) > 1:
                raise InputError("%s: the header names column %r %d times"
                                 % (self.path, column, len(matches)))
            return matches[0]
        if not re.fullmatch(r"\d+", column.strip()):
            raise InputError(
                "--%s=%s: without a header row (--has_header=false) columns are numbers, "
                "counting from 0" % (flag_name, column))
        index = int(column)
        if index >= self.num_columns:
            raise InputError("--%s=%d: %s has only %d columns (numbered from 0)"
                             % (flag_name, index, self.path, self.num_columns))
        return index

    def value(self, record, key, line, column):
        """The value at `key` of a record read at `line`; InputError if a JSON
        object lacks the field or has it null (`column` names it)."""
        if self.data_format != "jsonl":
            return record[key]
        if record.get(key) is None:
            raise InputError("%s, line %d: no field %r" % (self.path, line, column))
        return record[key]


def read_table(path, data_format="auto", has_header=True, skip_malformed_rows=False):
    """Reads a CSV, TSV or JSON Lines file.

    Args:
      path: the file (any tf.io.gfile path).
      data_format: "auto" (by extension), "csv", "tsv" or "jsonl".
      has_header: CSV/TSV: the first non-blank row names the columns.
      skip_malformed_rows: CSV/TSV rows with another number of columns than
        the header (or the first row) are skipped with a warning instead of
        raising InputError.

    Returns:
      A `Table`.

    Raises:
      InputError: naming the file and line of the first bad row.
    """
    data_format = detect_format(path, data_format)
    text = read_text(path)
    if data_format == "jsonl":
        return _read_jsonl(path, text)
    return _read_delimited(path, text, data_format, has_header, skip_malformed_rows)


def _read_delimited(path, text, data_format, has_header, skip_malformed_rows):
    source = io.StringIO(text, newline="")
    if data_format == "csv":
        # strict: a stray quote is an error, not a field that swallows lines.
        reader = csv.reader(source, strict=True)
        separator = "comma"
    else:
        # TSV has no quoting: quotes are ordinary characters (as in GLUE's files).
        reader = csv.reader(source, delimiter="\t", quoting=csv.QUOTE_NONE)
        separator = "tab"
    header = None
    num_columns = None
    rows = []
    previous_line = 0
    try:
        for row in reader:
            line = previous_line + 1  # where the row starts (a quoted field may span lines)
            previous_line = reader.line_num
            if not any(field.strip() for field in row):
                continue
            if num_columns is None:
                num_columns = len(row)
                if has_header:
                    header = [name.strip() for name in row]
                    continue
            if len(row) != num_columns:
                message = ("%s, line %d: expected %d %s-separated columns (as %s), found %d"
                           % (path, line, num_columns, separator,
                              "the header" if header is not None else "the first row",
                              len(row)))
                if data_format == "csv" and len(row) > num_columns:
                    message += " (a field with a comma in it must be in double quotes)"
                if skip_malformed_rows:
                    tf.logging.warning("Skipping malformed row: %s", message)
                    continue
                raise InputError(message + "; --skip_malformed_rows skips such rows")
            rows.append((line, row))
    except csv.Error as e:
        raise InputError("%s, line %d: %s" % (path, reader.line_num, e))
    return Table(path, data_format, header, num_columns, rows)


def _read_jsonl(path, text):
    return Table(path, "jsonl", None, None, list(file_io.json_lines(text, path)))


# ---------------------------------------------------------------------------
# Labels.

def read_label_file(path):
    """The labels of a labels.txt (one per line). InputError if it has none
    or repeats one."""
    with tf.io.gfile.GFile(path, "r") as f:
        labels = [line.strip() for line in f if line.strip()]
    if not labels:
        raise InputError("%s holds no labels" % path)
    return parse_label_list(labels, path)


def write_label_file(path, labels):
    """Writes labels.txt (one label per line), atomically."""
    with file_io.atomic_output(path) as writer:
        writer.write("".join(label + "\n" for label in labels))


def _scalar_text(value):
    """A JSON scalar as text (numbers as JSON writes them: 1, 2.5, true)."""
    return value if isinstance(value, str) else json.dumps(value)


# ---------------------------------------------------------------------------
# The processor.

class GenericProcessor(classifier_data.DataProcessor):
    """The processor of --task_name=generic (own data, see the module
    docstring), named after its task as the other processors are: your own
    CSV, TSV or JSON Lines files, read as `Settings` say; classification,
    multi-label classification or regression.

    Examples: `classifier_data.InputExample`s, guid "<split>-<id>" (the id
    column's value, else the row's 0-based position in the file); label a
    string (classification; a number's text for regression) or a tuple of
    label strings (multi-label). Test examples get a placeholder label.
    """

    def __init__(self, settings=None):
        """settings: a `Settings` (a run's settings hold one; default: all
        defaults); checked here (`check_settings`)."""
        self.settings = settings if settings is not None else Settings()
        self._given_labels = check_settings(self.settings)
        self._tables = {}
        self._labels = None
        self._label_source = None

    # What run_classifier needs to know about the task.
    @property
    def is_regression(self):
        return self.settings.regression

    @property
    def is_multi_label(self):
        return self.settings.multi_label

    @property
    def multi_label_threshold(self):
        return self.settings.multi_label_threshold

    @property
    def text_pairs(self):
        return self.settings.text_b_column is not None

    @property
    def input_fields(self):
        """The export's text inputs -> the columns (JSON fields) holding them
        in the data files, named where the files have a header, so that
        predict.py reads files laid out as the training files."""
        s = self.settings
        if not s.has_header:
            return {}
        return {"text_a": s.text_column, "text_b": s.text_b_column}

    @property
    def metric_names(self):
        if self.settings.regression:
            return ("pearson", "spearman")
        if self.settings.multi_label:
            return ("micro_f1", "macro_f1")
        return ()

    @property
    def main_metric(self):
        if self.settings.regression:
            return "eval_spearman"
        if self.settings.multi_label:
            return "eval_micro_f1"
        return "eval_accuracy"

    def get_train_examples(self, data_dir):
        """The training set: a list of InputExamples."""
        return self._examples("train", data_dir)

    def get_dev_examples(self, data_dir):
        """The dev set: a list of InputExamples."""
        return self._examples("dev", data_dir)

    def get_test_examples(self, data_dir):
        """The test set (placeholder labels): a list of InputExamples."""
        return self._examples("test", data_dir)

    def get_labels(self):
        """The labels in the order of the model's outputs (None for
        regression): --labels, else labels.txt of the training run when not
        training, else the training file's labels, sorted.

        Raises:
          InputError: no source of labels, or labels that differ from those
            of the model already in output_dir.
        """
        if self.settings.regression:
            return None
        if self._labels is None:
            self._labels, self._label_source = self._resolve_labels()
            self._check_against_saved_labels()
        return list(self._labels)

    def write_labels(self, output_dir):
        """Writes <output_dir>/labels.txt (nothing for regression); returns its
        path or None."""
        labels = self.get_labels()
        if labels is None:
            return None
        path = os.path.join(output_dir, LABELS_FILE)
        write_label_file(path, labels)
        file_io.report_output(path, "the labels in the order of the model's outputs")
        return path

    def prediction_text(self, output, label_list):
        """What predictions.tsv says for one output: the label with the
        highest probability; for multi-label the labels at or above the
        threshold, joined by the separator (empty if none); for regression
        the score."""
        if self.settings.regression:
            return str(float(output))
        if self.settings.multi_label:
            threshold = self.settings.multi_label_threshold
            return self.settings.label_separator.join(
                label for label, p in zip(label_list, output) if p >= threshold)
        return label_list[int(np.argmax(output))]

    def write_predictions_file(self, path, examples, outputs, label_list):
        """Writes `path` (predictions.tsv): a header "id<TAB>prediction", then
        per example its id and `prediction_text`, in input order."""
        with file_io.atomic_output(path) as writer:
            writer.write("id\tprediction\n")
            for example, output in zip(examples, outputs):
                writer.write("%s\t%s\n" % (example.guid.split("-", 1)[1],
                                           self.prediction_text(output, label_list)))

    # -- Files.

    def data_file(self, split, data_dir):
        """The file of a split ("train", "dev", "test"): its flag, else the one
        file <data_dir>/<name>.<ext> there is.

        Raises:
          InputError: none (or more than one) found.
        """
        flag_name = split + "_file"
        path = getattr(self.settings, flag_name)
        if path:
            return path
        names = SPLIT_NAMES[split]
        if not data_dir:
            raise InputError("No %s file: set --%s or --data_dir" % (split, flag_name))
        found = [os.path.join(data_dir, name + extension) for name in names
                 for extension in _EXTENSIONS
                 if tf.io.gfile.exists(os.path.join(data_dir, name + extension))]
        if not found:
            raise InputError(
                "No %s file in --data_dir=%s (looked for %s.csv, .tsv, .jsonl, .ndjson or "
                ".json); or name it with --%s"
                % (split, data_dir, " / ".join(names), flag_name))
        if len(found) > 1:
            raise InputError("--data_dir=%s has several %s files (%s): keep one, or choose "
                             "with --%s" % (data_dir, split, ", ".join(
                                 os.path.basename(p) for p in found), flag_name))
        return found[0]

    def _table(self, split, data_dir):
        path = self.data_file(split, data_dir)
        if path not in self._tables:
            table = read_table(path, self.settings.data_format, self.settings.has_header,
                               self.skip_malformed_rows)
            if not table.rows:
                raise InputError("%s has no data rows" % path)
            self._tables[path] = table
        return self._tables[path]

    # -- Labels.

    def _resolve_labels(self):
        settings = self.settings
        if self._given_labels:
            return list(self._given_labels), "--labels"
        if not settings.do_train:
            saved = run_record.find_file(LABELS_FILE, settings.output_dir,
                                              settings.init_checkpoint)
            if saved:
                return read_label_file(saved), saved
        try:
            table = self._table("train", settings.data_dir)
        except InputError as e:
            if settings.do_train:
                raise
            raise InputError(
                "No labels: give them with --labels (comma-separated), or run --do_train "
                "first (it writes %s to --output_dir), or point --init_checkpoint at a "
                "fine-tuned model with %s next to it (%s)" % (LABELS_FILE, LABELS_FILE, e))
        key = table.key(settings.label_column, "label_column")
        found = set()
        for line, record in table.rows:
            found.update(self._parse_label(table, line, record, key, None))
        labels = sort_labels(found)
        if not settings.multi_label and len(labels) < 2:
            raise InputError(
                "%s has only one label (%s): a classifier needs at least two; list them "
                "all with --labels" % (table.path, ", ".join(labels)))
        if not labels:
            raise InputError("%s: no row has a label" % table.path)
        tf.logging.info("Labels from %s (in output order): %s", table.path, ", ".join(labels))
        return labels, table.path

    def _check_against_saved_labels(self):
        """A model in output_dir was trained with the labels of its
        labels.txt: other labels would mislabel its outputs."""
        output_dir = self.settings.output_dir
        if not output_dir:
            return
        path = os.path.join(output_dir, LABELS_FILE)
        if path == self._label_source or not tf.io.gfile.exists(path):
            return
        saved = read_label_file(path)
        if saved != self._labels and tf.train.latest_checkpoint(output_dir):
            raise InputError(
                "The model in --output_dir=%s was trained with the labels %s (%s), but "
                "this run's labels (from %s) are %s: use a new --output_dir"
                % (output_dir, ", ".join(saved), path, self._label_source,
                   ", ".join(self._labels)))

    def _parse_label(self, table, line, record, key, labels):
        """The label of the row `record` (at `line`; its label at `key`): a
        tuple of labels (empty for a multi-label row without labels), a
        1-tuple otherwise. Checked against `labels` (None: no check);
        regression labels must be finite numbers."""
        settings = self.settings
        where = "%s, line %d" % (table.path, line)
        value = table.value(record, key, line, settings.label_column)
        if settings.regression:
            if isinstance(value, bool) or not isinstance(value, (str, int, float)):
                raise InputError("%s: label %r is not a number (--regression)" % (where, value))
            text = _scalar_text(value).strip()
            try:
                number = float(text)
            except ValueError:
                raise InputError("%s: label %r is not a number (--regression)" % (where, text))
            if not math.isfinite(number):
                raise InputError("%s: label %r is not a finite number" % (where, text))
            return (text,)
        if isinstance(value, list):
            if not settings.multi_label:
                raise InputError("%s: the label is a list; several labels per row need "
                                 "--multi_label" % where)
            if any(isinstance(v, (list, dict)) or v is None for v in value):
                raise InputError("%s: label list %r holds something other than names"
                                 % (where, value))
            parts = [_scalar_text(v).strip() for v in value]
        elif isinstance(value, dict):
            raise InputError("%s: the label is a JSON object, not a name" % where)
        elif settings.multi_label:
            parts = _scalar_text(value).split(settings.label_separator)
            parts = [part.strip() for part in parts]
        else:
            parts = [_scalar_text(value).strip()]
            if not parts[0]:
                raise InputError("%s: empty label" % where)
        found = []
        for label in parts:
            if not label or label in found:
                continue
            if re.search(r"[\t\r\n]", label):
                raise InputError("%s: label %r holds a tab or line break" % (where, label))
            if labels is not None and label not in labels:
                raise InputError("%s: label %r is not one of the labels %s (from %s)"
                                 % (where, label, ", ".join(labels), self._label_source))
            found.append(label)
        return tuple(found)

    # -- Examples.

    def _examples(self, split, data_dir):
        settings = self.settings
        table = self._table(split, data_dir)
        labels = self.get_labels()
        is_test = split == "test"
        text_key = table.key(settings.text_column, "text_column")
        text_b_key = (table.key(settings.text_b_column, "text_b_column")
                      if settings.text_b_column else None)
        id_key = table.key(settings.id_column, "id_column") if settings.id_column else None
        # Test files need no label column.
        label_key = None if is_test else table.key(settings.label_column, "label_column")
        examples = []
        for position, (line, record) in enumerate(table.rows):
            text_a = self._text(table, line, record, text_key, settings.text_column)
            text_b = None
            if text_b_key is not None:
                text_b = self._text(table, line, record, text_b_key, settings.text_b_column)
            if id_key is None:
                example_id = str(position)
            else:
                example_id = self._text(table, line, record, id_key, settings.id_column).strip()
            if is_test:
                label = self._placeholder_label(labels)
            else:
                parsed = self._parse_label(table, line, record, label_key, labels)
                label = parsed if settings.multi_label else parsed[0]
            examples.append(classifier_data.InputExample(
                guid="%s-%s" % (split, example_id), text_a=text_a, text_b=text_b,
                label=label))
        return examples

    def _placeholder_label(self, labels):
        if self.settings.regression:
            return "0"
        if self.settings.multi_label:
            return ()
        return labels[0]

    @staticmethod
    def _text(table, line, record, key, column):
        value = table.value(record, key, line, column)
        if isinstance(value, (list, dict)):
            raise InputError("%s, line %d: field %r is not text" % (table.path, line, column))
        return _scalar_text(value)
