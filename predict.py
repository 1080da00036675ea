"""Labels text with an exported model, or serves it over TensorFlow Serving's
REST API.

    # Label a file (or standard input) into JSON Lines:
    python predict.py --model_dir=/tmp/mrpc_export --input_file=pairs.jsonl
    # Serve the model as TensorFlow Serving would:
    python predict.py --model_dir=/tmp/mrpc_export --port=8501

--model_dir is an export folder of run_classifier.py, run_ner.py,
run_swag.py or extract_features.py (the newest timestamped SavedModel in it
is used) or one SavedModel folder. The model tokenizes its own text (serving.py), so no
vocabulary or config is needed here.

Labelling: the input is JSON Lines (objects with the signature's input
names, e.g. "text_a" and "text_b"; other fields are ignored), TSV or CSV
whose header names the inputs, or one text per line for a model with one
text input; the format is told from the file's extension or its first line
(--input_format forces it), and --input_columns maps fields named otherwise
(sentence:text_a). Each input gives one JSON object of the signature's
outputs, in input order; a tagger's per-word outputs are cut to the text's
words.

Serving (--port): POST /v1/models/<name>[/versions/<v>]:predict with
{"instances": [...]} (answered {"predictions": [...]}) or {"inputs": ...}
(answered {"outputs": ...}), an optional "signature_name"; GET
/v1/models/<name> (status) and /v1/models/<name>/metadata (signatures);
GET / is a page to try the model in a browser (web_page.py).
Bad requests are answered 400 (or 404, 405, 408, 411, 413, 503) with
{"error": "..."}, as TensorFlow Serving does, and each request's size,
instances, text and time are bounded (--max_request_bytes, ...). The
server is for trusted networks: it has no authentication or TLS
(docs/serving.md shows a reverse proxy for the rest).
"""

import base64
import collections
import contextlib
import csv
import errno
import http.server
import io
import itertools
import json
import math
import os
import re
import signal
import socket
import socketserver
import stat
import sys
import threading
import time
import traceback

import quiet_tf  # noqa: F401  (first: imports TensorFlow without its start-up noise)
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the WordPiece op of the exports)
from absl import flags
from tensorflow.core.protobuf import saved_model_pb2
from google.protobuf import json_format

import file_io
import interrupts
import logs
import script_runner
import serving
import shared_flags
import tokenization
import web_page
from errors import InputError

FLAGS = flags.FLAGS

shared_flags.define_flags(
    "input_file", "output_file", "batch_size", "skip_malformed_rows", "input_format",
    helps={"input_format": "Format of --input_file: jsonl, tsv, csv (with a header naming "
                           "the model's inputs) or text (one text per line, tabs and all); "
                           "auto: by the extension (.jsonl, .ndjson, .tsv, .csv), else by the "
                           "first line: an object is JSON Lines, a line holding a tab a TSV "
                           "header, a comma-separated line naming the inputs a CSV header, "
                           "anything else the first text.",
           "input_file": "Text to label: files (comma-separated, globs allowed) in JSON "
                         "Lines, TSV or CSV with a header naming the model's inputs (or "
                         "mapped with --input_columns), or one text per line. Default: "
                         "standard input.",
           "output_file": "JSON Lines of the model's outputs, one line per input (its folder "
                          "is created if missing; a regular file there is replaced when "
                          "done). Default: standard output.",
           "skip_malformed_rows": "Skip (with a warning naming the file and line) inputs "
                                  "that cannot be read or that the model refuses instead of "
                                  "stopping: their outputs are left out."})

flags.DEFINE_string(
    "model_dir", None,
    "An export folder of run_classifier.py, run_ner.py, run_swag.py or extract_features.py "
    "(its newest timestamped SavedModel is used), or a SavedModel folder.")
flags.DEFINE_string(
    "input_columns", None,
    "JSON fields or TSV/CSV columns named otherwise than the model's inputs: "
    "comma-separated FIELD:INPUT pairs, e.g. sentence:text_a for a GLUE SST-2 file "
    "(header sentence, label). Inputs not named are read from the field of their name.")
flags.DEFINE_string("signature_name", "serving_default",
                    "The signature that labels (serving_ids takes WordPiece ids).")
flags.DEFINE_integer(
    "port", None,
    "Serve the model over TensorFlow Serving's REST API on this port (0: any free "
    "port, named in the log) instead of labelling input.")
flags.DEFINE_string("host", "127.0.0.1",
                    "The address the server listens on (0.0.0.0: every interface).")
flags.DEFINE_string("model_name", "default", "The model's name in the server's URLs.")

# What one request and the server may take: the defaults of the server's
# flags (timeout_seconds is --client_timeout_seconds) and of make_server.
ServerLimits = collections.namedtuple("ServerLimits", [
    "max_request_bytes", "max_instances", "max_text_chars", "max_requests_in_flight",
    "max_connections", "timeout_seconds"])
DEFAULT_LIMITS = ServerLimits(max_request_bytes=4 << 20, max_instances=256,
                              max_text_chars=200000, max_requests_in_flight=4,
                              max_connections=64, timeout_seconds=30)

flags.DEFINE_integer("max_request_bytes", DEFAULT_LIMITS.max_request_bytes,
                     "Server: requests with a larger body are refused (413).")
flags.DEFINE_integer(
    "max_instances", DEFAULT_LIMITS.max_instances,
    "Server: the most instances a request may hold (each ending of a multiple-choice "
    "instance counts, and each sequence of an id input); more: 400.")
flags.DEFINE_integer(
    "max_text_chars", DEFAULT_LIMITS.max_text_chars,
    "Server: the most characters of text a request may give the model to read, all its "
    "texts together. Each text is cut where the model stops reading (max_seq_length "
    "pieces, or --max_windows windows, of the export); the rest is not tokenized. More: "
    "400.")
flags.DEFINE_integer(
    "max_requests_in_flight", DEFAULT_LIMITS.max_requests_in_flight,
    "Server: :predict requests decoded and run at once; further ones wait for a place "
    "(each holding its connection).")
flags.DEFINE_integer(
    "max_connections", DEFAULT_LIMITS.max_connections,
    "Server: open connections (a thread each); one more is answered 503 and closed.")
flags.DEFINE_float(
    "client_timeout_seconds", DEFAULT_LIMITS.timeout_seconds,
    "Server: a request (its line, headers and body) must arrive within this many seconds, "
    "and its answer must be taken as long; an idle kept-alive connection is closed after "
    "as long.")

# Signature inputs and outputs, as TensorFlow Serving names the string kind.
_BINARY_SUFFIX = "_bytes"


# ---------------------------------------------------------------------------
# The model.

def find_saved_model(model_dir):
    """(SavedModel folder, version): `model_dir` itself if it holds a
    saved_model.pb, else its numbered subfolder with the highest number
    (an export's timestamps, TensorFlow Serving's versions). A SavedModel
    folder whose name is no number has version "1".

    Raises:
      InputError: no SavedModel there.
    """
    if file_io.exists(os.path.join(model_dir, "saved_model.pb")):
        name = os.path.basename(os.path.normpath(model_dir))
        return model_dir, name if name.isdigit() else "1"
    versions = []
    if file_io.isdir(model_dir):
        versions = [name.rstrip("/") for name in file_io.gfile().listdir(model_dir)
                    if name.rstrip("/").isdigit()
                    and file_io.exists(os.path.join(model_dir, name, "saved_model.pb"))]
    if not versions:
        raise InputError("--model_dir: no SavedModel in %s (a folder with saved_model.pb, or "
                         "an export folder holding timestamped ones)" % model_dir)
    version = max(versions, key=int)
    return os.path.join(model_dir, version), version


class RequestError(ValueError):
    """A request (or an input row) the model cannot take; the message says
    why."""


class Signature:
    """One signature of a loaded SavedModel, called with Python values.

    Attributes:
      name: the signature's name.
      inputs: name -> tf.TensorSpec (the batch is the first dimension).
      output_names: sorted.
    """

    def __init__(self, name, function):
        self.name = name
        self._function = function
        self.inputs = dict(function.structured_input_signature[1])
        self.output_names = sorted(function.structured_outputs)

    def __call__(self, columns):
        """The outputs (name -> NumPy array) for `columns`: input name ->
        its value for the whole batch (nested lists; strings as str, or
        {"b64": ...} for bytes). Raises RequestError for a missing or
        unknown input, or a value of the wrong type or shape."""
        unknown = sorted(set(columns) - set(self.inputs))
        missing = sorted(set(self.inputs) - set(columns))
        if unknown or missing:
            raise RequestError("the signature %s takes %s; %s" % (
                self.name, ", ".join(sorted(self.inputs)),
                "; ".join(filter(None, ["missing: " + ", ".join(missing) if missing else "",
                                        "unknown: " + ", ".join(unknown) if unknown else ""]))))
        tensors = {name: _tensor(name, columns[name], spec)
                   for name, spec in self.inputs.items()}
        return {name: value.numpy() for name, value in self._function(**tensors).items()}

    def run(self, arrays):
        """The outputs (name -> NumPy array) for `arrays`: input name -> a
        NumPy array of the input's dtype and rank (text as UTF-8 bytes),
        checked beforehand (the server's `_checked_inputs`)."""
        tensors = {name: tf.constant(arrays[name], dtype=spec.dtype)
                   for name, spec in self.inputs.items()}
        return {name: value.numpy() for name, value in self._function(**tensors).items()}


def _tensor(name, value, spec):
    """`value` (nested lists) as a tensor of `spec`'s type and rank."""
    if spec.dtype == tf.string:
        value = _strings(name, value)
    try:
        tensor = tf.constant(value, dtype=spec.dtype)
    except (TypeError, ValueError) as e:
        raise RequestError("input %s: expected %s of %s values (%s)"
                           % (name, _shape_words(spec), spec.dtype.name, e))
    if not spec.shape.is_compatible_with(tensor.shape):
        raise RequestError("input %s: expected %s, got shape %s"
                           % (name, _shape_words(spec), tensor.shape.as_list()))
    return tensor


def _shape_words(spec):
    return "a list" if spec.shape.rank == 1 else "lists nested %d deep" % spec.shape.rank


def _strings(name, value):
    """Nested lists of str / {"b64": ...} -> the same of bytes."""
    if isinstance(value, list):
        return [_strings(name, item) for item in value]
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, dict) and set(value) == {"b64"} and isinstance(value["b64"], str):
        try:
            return base64.b64decode(value["b64"], validate=True)
        except ValueError as e:
            raise RequestError("input %s: bad base64 (%s)" % (name, e))
    raise RequestError("input %s: expected text, got %s" % (name, json.dumps(value)[:80]))


def json_value(name, array):
    """A NumPy output as JSON: bytes as text (UTF-8), or {"b64": ...} for
    outputs named *_bytes and bytes that are not UTF-8, as TensorFlow
    Serving writes them."""
    if isinstance(array, bytes):
        array = np.array(array, dtype=object)
    if array.dtype != object:
        return array.tolist()
    if array.ndim:
        return [json_value(name, item) for item in array]
    if not name.endswith(_BINARY_SUFFIX):
        try:
            return array.item().decode("utf-8")
        except UnicodeDecodeError:
            pass
    return {"b64": base64.b64encode(array.item()).decode("ascii")}


class Model:
    """An exported SavedModel, loaded once (see `find_saved_model`).

    Attributes:
      path, version: the SavedModel folder and its version.
      signature_defs: name -> SignatureDef (the protos, for metadata).
      tokenizer_config: the export's settings (assets/tokenizer_config.json:
        max_seq_length, ...; {} where there is none).
      max_positions: the longest id sequence the model takes (its
        max_position_embeddings), or None where unknown.
    """

    def __init__(self, model_dir):
        self.path, self.version = find_saved_model(model_dir)
        saved_model = saved_model_pb2.SavedModel()
        saved_model.ParseFromString(file_io.read_file_bytes(
            os.path.join(self.path, "saved_model.pb")))
        self.signature_defs = dict(saved_model.meta_graphs[0].signature_def)
        loaded = tf.saved_model.load(self.path)
        self._signatures = {name: Signature(name, function)
                            for name, function in loaded.signatures.items()}
        self._loaded = loaded  # Keeps the functions' variables alive.
        config = os.path.join(self.path, "assets", serving.CONFIG_ASSET)
        self.tokenizer_config = (json.loads(file_io.read_file_bytes(config))
                                 if file_io.exists(config) else {})
        self.max_positions = next((int(v.shape[0]) for v in getattr(loaded, "variables", ())
                                   if v.name.endswith("position_embeddings:0")), None)

    def signature(self, name):
        """The `Signature` `name`; RequestError if the model has none."""
        if name not in self._signatures:
            raise RequestError("no signature %r; the model has %s"
                               % (name, ", ".join(sorted(self._signatures))))
        return self._signatures[name]


def split_outputs(outputs):
    """Batch outputs (name -> array [batch, ...]) -> one dict per example.
    A tagger's per-word outputs (beside its num_words) are cut to each
    text's words."""
    num_words = outputs.get("num_words")
    examples = []
    for i in range(len(next(iter(outputs.values())))):
        example = {}
        for name, array in outputs.items():
            value = array[i]
            if num_words is not None and name != "num_words" and value.ndim >= 1:
                value = value[:num_words[i]]
            example[name] = json_value(name, value)
        examples.append(example)
    return examples


# ---------------------------------------------------------------------------
# Labelling files.

# Formats told from a file's name (--input_format=auto); other names and
# standard input by their first line.
_EXTENSION_FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".tsv": "tsv", ".csv": "csv"}


def parse_input_columns(value):
    """--input_columns ("FIELD:INPUT,...") -> {input name: field name}.
    An input not named there is read from the field of its own name.

    Raises:
      InputError: an item without a colon, or a field or input named twice.
    """
    fields = {}
    for item in (value or "").split(","):
        if not item.strip():
            continue
        field, colon, name = item.rpartition(":")
        field, name = field.strip(), name.strip()
        if not colon or not field or not name:
            raise InputError("--input_columns: %r is not FIELD:INPUT (e.g. sentence:text_a)"
                             % item.strip())
        if name in fields or field in fields.values():
            raise InputError("--input_columns names %s twice"
                             % (name if name in fields else field))
        fields[name] = field
    return fields


def check_labelling_flags():
    """Checks the flags of labelling files (not --port) before the model
    loads: the input files exist and can be read (or standard input is
    open), and --output_file can be written (its folder is created) and is
    neither an input nor anything but a regular file (or standard output is
    open).

    Returns:
      The input files (empty for standard input).

    Raises:
      InputError: naming the flag at fault.
    """
    paths = []
    if FLAGS.input_file:
        paths = file_io.expand_file_patterns("input_file", FLAGS.input_file)
        for path in paths:
            if not file_io.is_remote(path) and not os.access(path, os.R_OK):
                raise InputError("--input_file %s cannot be read (permission denied)" % path)
    elif sys.stdin is None or sys.stdin.closed:
        raise InputError("standard input is closed: give the text to label with --input_file")
    output = FLAGS.output_file
    if not output:
        if sys.stdout is None or sys.stdout.closed:
            raise InputError("standard output is closed: name a file with --output_file")
        return paths
    file_io.check_output_file(output)
    if not file_io.is_remote(output) and os.path.lexists(output):
        kind = os.lstat(output).st_mode
        if not stat.S_ISREG(kind):
            what = ("a symbolic link" if stat.S_ISLNK(kind) else "a named pipe" if
                    stat.S_ISFIFO(kind) else "a device" if stat.S_ISCHR(kind) or
                    stat.S_ISBLK(kind) else "a socket" if stat.S_ISSOCK(kind) else "not a file")
            raise InputError("--output_file %s is %s, not a regular file: name a new file "
                             "or a regular one (replaced once the labels are complete)"
                             % (output, what))
        for path in paths:
            if not file_io.is_remote(path) and os.path.samefile(path, output):
                raise InputError("--output_file %s is the input file %s: writing the labels "
                                 "would replace it; name another file" % (output, path))
    return paths


def _sources(paths):
    """(name, binary stream) of each input: the files `paths`, or standard
    input."""
    if not paths:
        yield "<stdin>", sys.stdin.buffer
        return
    for path in paths:
        with file_io.open_file(path, "rb") as f:
            yield path, f


def _lines(stream):
    """The lines of a binary stream without their line breaks: a line ends
    at "\n", "\r\n" or "\r" (Windows and old Mac files)."""
    for raw in stream:
        line = raw[:-1] if raw.endswith(b"\n") else raw
        line = line[:-1] if line.endswith(b"\r") else line
        yield from line.split(b"\r")


def _decoded_lines(name, stream):
    """(line number, text) per line of `stream` that is not blank (every
    format skips those); a line that is not UTF-8 gives (number,
    RequestError)."""
    for number, raw in enumerate(_lines(stream), 1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            yield number, RequestError("not valid UTF-8 (%s)" % e.reason)
            continue
        if number == 1 and text.startswith("\ufeff"):
            text = text[1:]
        if text.strip():
            yield number, text


def _header(line, delimiter):
    """The fields of a TSV (no quoting) or CSV header line; csv.Error if it
    is not CSV."""
    if delimiter == "\t":
        return [field.strip() for field in line.split("\t")]
    return [field.strip() for field in next(csv.reader([line], strict=True), [])]


def _detect_format(name, first_line, fields):
    """The format of the input `name` whose first non-blank line is
    `first_line`, by --input_format, else the name's extension, else that
    line: an object is JSON Lines; a line holding a tab, a TSV header; a
    comma-separated line naming the input fields (`fields`, input -> field),
    a CSV header (so is any line that is no object, with --input_columns);
    anything else, one text per line."""
    if FLAGS.input_format != "auto":
        return FLAGS.input_format
    extension = os.path.splitext(name)[1].lower()
    if extension in _EXTENSION_FORMATS:
        return _EXTENSION_FORMATS[extension]
    if first_line.lstrip().startswith("{"):
        return "jsonl"
    if "\t" in first_line:
        return "tsv"
    if FLAGS.input_columns:
        return "csv"
    try:
        if set(fields.values()) <= set(_header(first_line, ",")):
            return "csv"
    except csv.Error:
        pass
    return "text"


def read_inputs(name, stream, signature, fields=None):
    """(line number, input values or RequestError) per input of a source:
    values are name -> value for `signature`'s inputs.

    Args:
      name: the source's name (a file's path, or "<stdin>").
      stream: its binary stream.
      signature: the Signature labelling it.
      fields: input name -> the JSON field or column holding it (default:
        the input's own name; see --input_columns).

    Raises:
      InputError: the source's format cannot give the signature's inputs.
    """
    fields = {n: (fields or {}).get(n, n) for n in signature.inputs}
    lines = _decoded_lines(name, stream)
    text_inputs = [n for n, spec in signature.inputs.items()
                   if spec.dtype == tf.string and spec.shape.rank == 1]
    # The first readable line tells the format (and may be a header).
    first = None
    for number, line in lines:
        if isinstance(line, RequestError):
            yield number, line
        else:
            first = (number, line)
            break
    if first is None:
        return
    data_format = _detect_format(name, first[1], fields)
    if data_format == "jsonl":
        rows = _jsonl_rows(itertools.chain([first], lines))
    elif data_format == "text":
        if len(signature.inputs) != 1 or len(text_inputs) != 1:
            raise InputError(
                "%s: one text per line fits a model with one text input; signature %s takes "
                "%s: give JSON Lines, or TSV/CSV with a header naming them"
                % (name, signature.name, ", ".join(sorted(signature.inputs))))
        if FLAGS.input_columns:
            raise InputError("%s: --input_columns names fields or columns, which one text "
                             "per line (--input_format=text) has not" % name)
        fields = {text_inputs[0]: text_inputs[0]}
        rows = (((n, {text_inputs[0]: line}) if isinstance(line, str) else (n, line))
                for n, line in itertools.chain([first], lines))
    else:
        rows = _delimited_rows(name, data_format, first, lines, signature, fields)
    for number, row in rows:
        if not isinstance(row, RequestError):
            try:
                row = _row_values(row, signature, fields)
            except RequestError as e:
                row = e
        yield number, row


def _row_values(row, signature, fields):
    """The signature's inputs from a row (a dict with their `fields`, and
    perhaps others), each checked against its signature input: one value
    per example (a text: a string or {"b64": ...}), or for an input of
    lists (SWAG's endings, the id signature's ids) a non-empty list of
    them."""
    values = {}
    for name, spec in signature.inputs.items():
        field = fields[name]
        if field not in row:
            raise RequestError("no %s" % field + ("" if field == name else " (input %s)" % name))
        _check_value(name, row[field], spec.shape.rank - 1, spec.dtype)
        values[name] = row[field]
    return values


def _check_value(name, value, rank, dtype):
    """Checks that `value` is a value of `dtype` (rank 0) or a non-empty
    list of such, nested `rank` deep; RequestError if not."""
    if rank:
        if not isinstance(value, list) or not value:
            raise RequestError("%s: expected a non-empty list" % name
                               + (" of lists" if rank > 1 else ""))
        for item in value:
            _check_value(name, item, rank - 1, dtype)
    elif dtype == tf.string:
        if isinstance(value, list):
            raise RequestError("%s: expected one value, found a list" % name)
        try:
            _strings(name, value)
        except UnicodeEncodeError:
            raise RequestError("%s: text holding a lone surrogate (such as \\ud800), which "
                               "is no character" % name)
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RequestError("%s: expected a number, found %s"
                           % (name, json.dumps(value, ensure_ascii=False)[:80]))


def _jsonl_rows(lines):
    for number, line in lines:
        if isinstance(line, RequestError):
            yield number, line
            continue
        try:
            value = json.loads(line)
        except RecursionError:
            yield number, RequestError("not valid JSON here (nested too deep)")
            continue
        except ValueError as e:
            yield number, RequestError("not valid JSON (%s)" % e)
            continue
        yield number, (value if isinstance(value, dict) else RequestError(
            "expected a JSON object, found %s" % type(value).__name__))


def _delimited_rows(name, data_format, first, lines, signature, fields):
    """Rows (column -> field) of a TSV/CSV source whose header line is
    `first`; the header must name a column for each input (`fields`)."""
    rank2 = [n for n, spec in signature.inputs.items() if spec.shape.rank != 1]
    if rank2:
        raise InputError("%s: the input %s is a list per example: give JSON Lines"
                         % (name, ", ".join(rank2)))
    delimiter = "\t" if data_format == "tsv" else ","
    try:
        header = _header(first[1], delimiter)
    except csv.Error as e:
        raise InputError("%s, line %d: not a CSV header (%s)" % (name, first[0], e))
    missing = [n for n in sorted(fields) if fields[n] not in header]
    if missing:
        found = ", ".join(repr(field) for field in header)
        if FLAGS.input_columns:
            raise InputError("%s, line %d: the header has no column %s (--input_columns); "
                             "columns found: %s" % (name, first[0], ", ".join(
                                 fields[n] for n in missing), found))
        raise InputError(
            "%s, line %d: the header names no column for the model's input %s (it takes %s; "
            "columns found: %s): map one with --input_columns=COLUMN:%s, or give "
            "--input_format=text if each line is one text"
            % (name, first[0], ", ".join(missing), ", ".join(sorted(signature.inputs)), found,
               missing[0]))
    for number, line in lines:
        if isinstance(line, RequestError):
            yield number, line
            continue
        if data_format == "tsv":
            values = line.split("\t")
        else:
            try:
                values = next(csv.reader([line], strict=True))
            except csv.Error as e:
                yield number, RequestError(str(e))
                continue
        if len(values) != len(header):
            yield number, RequestError("expected %d columns (as the header), found %d"
                                       % (len(header), len(values)))
            continue
        yield number, dict(zip(header, values))


def label_inputs(model, writer, paths=(), fields=None):
    """Labels every input of `paths` (standard input if none) in batches
    of --batch_size and writes one JSON line of outputs per input to
    `writer`. An input the model cannot take stops the run with one line
    naming its file and line (InputError), or with --skip_malformed_rows
    is left out with a warning. Returns (inputs labelled, inputs skipped).

    Args:
      fields: input name -> field or column (see `read_inputs`).
    """
    signature = model.signature(FLAGS.signature_name)
    progress = logs.Progress("Labelling", unit="inputs")
    done = skipped = 0
    batch = []

    def bad_input(where, error):
        nonlocal skipped
        message = "%s, line %d: %s" % (where[0], where[1], error)
        if not FLAGS.skip_malformed_rows:
            raise InputError(message + " (--skip_malformed_rows skips such inputs)")
        logs.log_warning("Skipping input: %s", message)
        skipped += 1

    def label(rows):
        columns = {n: [values[n] for _, values in rows] for n in signature.inputs}
        for example in split_outputs(signature(columns)):
            writer.write(json.dumps(example, ensure_ascii=False, sort_keys=True) + "\n")

    def flush():
        nonlocal done
        if not batch:
            return
        try:
            label(batch)
            done += len(batch)
        except (RequestError, tf.errors.OpError) as e:
            if len(batch) == 1:
                bad_input(batch[0][0], _error_text(e))
            # Which inputs the model refuses (ids whose lengths differ, say):
            # found by labelling the batch one input at a time.
            for row in batch if len(batch) > 1 else ():
                try:
                    label([row])
                    done += 1
                except (RequestError, tf.errors.OpError) as error:
                    bad_input(row[0], _error_text(error))
        progress.update(len(batch))
        del batch[:]

    for name, stream in _sources(paths):
        flush()
        for number, values in read_inputs(name, stream, signature, fields):
            if isinstance(values, RequestError):
                bad_input((name, number), values)
                continue
            # A batch holds inputs of one shape (as many endings each, say).
            if batch and _shape(values) != _shape(batch[0][1]):
                flush()
            batch.append(((name, number), values))
            if len(batch) == FLAGS.batch_size:
                flush()
    flush()
    progress.done()
    return done, skipped


def _shape(values):
    return tuple(len(v) if isinstance(v, list) else -1 for v in values.values())


def _error_text(error):
    """The line of an error that says what is wrong: TensorFlow's errors in
    a function say it last, after the stack of the op that failed, and
    before the op's name in [[...]]."""
    text = error.message if isinstance(error, tf.errors.OpError) else str(error)
    lines = [line.strip() for line in text.splitlines()
             if line.strip() and not line.strip().startswith("[[")]
    return re.sub(r"\s*\[Op:[^]]*\]$", "", lines[-1]) if lines else text


class _ReaderGone(interrupts.InterruptedExit):
    """The end of labelling into standard output after its reader closed
    the pipe (``predict.py ... | head -1``): as other Unix tools, the script
    ends by SIGPIPE, without a message (see `script_runner.run_script`)."""

    def __init__(self):
        super().__init__(128 + signal.SIGPIPE)


def _reader_gone():
    """A `_ReaderGone` to raise, with standard output sent to /dev/null
    (`script_runner.discard_stdout`)."""
    script_runner.discard_stdout()
    return _ReaderGone()


# ---------------------------------------------------------------------------
# The server: TensorFlow Serving's REST API.
#
# Whatever arrives is checked before it costs more than its own size: the
# body's framing and size, the JSON's depth (before it is decoded), then
# the request's layout, each value's rank, dimensions, type and range,
# and the amount of text the model is given (texts are cut where the
# model stops reading). A request that fails a check is answered 400 (or
# 404, 405, 408, 411, 413, 501, 503) with {"error": "..."} naming what was
# wrong, and the server goes on serving.

_ROUTE = re.compile(r"^/v1/models/(?P<name>[^/:]+)(?:/versions/(?P<version>[^/:]+))?"
                    r"(?P<rest>(?::[a-z]+)|/metadata)?$")

# The deepest a request's JSON may nest, objects and lists together. A
# request needs 2 levels around its values, an instance object 1, a
# {"b64": ...} object 1, and the exports' inputs have rank 3 at most.
# Deeper documents are refused before they are decoded, so json.loads
# never recurses deeply.
MAX_JSON_DEPTH = 16

# The most characters a number of a request may have: int64 has 19 digits
# and a sign. Longer ones are refused before Python converts them.
_MAX_NUMBER_CHARS = 40

# While answered requests come at most this often (seconds apart), each
# has a log line; faster ones are counted into a summary line.
_HUMAN_SECONDS = 1.0

# The longest request line (method, path and version) the server reads.
_MAX_REQUEST_LINE = 8192


# A JSON string, or the rest of the document after an opening quote that
# is never closed: always matched whole (possessive), so removing every
# string takes one pass however the quotes and backslashes are laid out.
_JSON_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+(?:"|\\?\Z)', re.S)
_DEPTH_CHUNK = 1 << 20


def json_depth(data):
    """How deep the JSON document `data` (bytes) nests objects and lists
    (0 for a bare string or number), counted on its brackets outside
    strings without decoding it. For a malformed document the count may be
    off; it only decides whether the document is decoded at all."""
    text = _JSON_STRING.sub(b"", data)
    depth = deepest = 0
    for start in range(0, len(text), _DEPTH_CHUNK):
        chunk = np.frombuffer(text, np.uint8, count=min(_DEPTH_CHUNK, len(text) - start),
                              offset=start)
        steps = (((chunk == ord("[")) | (chunk == ord("{"))).astype(np.int32)
                 - ((chunk == ord("]")) | (chunk == ord("}"))))
        running = np.cumsum(steps) + depth
        deepest = max(deepest, int(running.max()))
        depth = int(running[-1])
    return deepest


def _number(text, convert):
    if len(text) > _MAX_NUMBER_CHARS:
        raise RequestError("a number of %d characters: no input takes one so long" % len(text))
    value = convert(text)
    if not math.isfinite(value):
        raise RequestError("the number %s is out of range" % text)
    return value


def _refuse_constant(name):
    raise RequestError("%s is not JSON, and no input takes it" % name)


def decode_request(data):
    """The JSON value of a request body (bytes), checked for UTF-8, depth
    (`MAX_JSON_DEPTH`), NaN and Infinity, and numbers too long or out of
    range. Raises RequestError."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RequestError("the request body is not UTF-8 (%s at byte %d)" % (e.reason, e.start))
    depth = json_depth(data)
    if depth > MAX_JSON_DEPTH:
        raise RequestError("the request's JSON nests %d levels deep; this server reads at most "
                           "%d" % (depth, MAX_JSON_DEPTH))
    try:
        return json.loads(text, parse_int=lambda t: _number(t, int),
                          parse_float=lambda t: _number(t, float),
                          parse_constant=_refuse_constant)
    except json.JSONDecodeError as e:
        raise RequestError("JSON Parse error: %s" % e)


def _printable(text, limit=60):
    """`text` for a message: as it is if short and printable, else quoted
    (as repr does) and cut to `limit` characters."""
    if len(text) <= limit and text.isprintable() and "'" not in text:
        return text
    return repr(text[:limit]) + ("..." if len(text) > limit else "")


def _describe(value):
    """A JSON value in a few words, for an error message."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, (int, float)):
        return "the number %s" % _printable(repr(value), 30)
    if isinstance(value, str):
        return "the text %r" % (value[:30] + ("..." if len(value) > 30 else ""))
    if isinstance(value, list):
        return "a list of %d value%s" % (len(value), "" if len(value) == 1 else "s")
    return "an object of %s" % (_names(value) or "no keys")


def _names(names, most=5):
    """Up to `most` names (printable, cut), joined by commas."""
    names = sorted(names)
    shown = ", ".join(_printable(name, 40) for name in names[:most])
    return shown + (" and %d more" % (len(names) - most) if len(names) > most else "")


def _columns(body, signature, max_instances):
    """The request's values per input, and whether the request is in row
    format: (name -> [its value in each instance], True) for
    {"instances": [...]}, (name -> its value for the whole batch, False)
    for {"inputs": ...}. With one input, an instance (or "inputs") may be
    the input's value itself, as in TensorFlow Serving. Raises
    RequestError for a request of neither format, too many instances
    (more than `max_instances`), or an instance that does not name exactly
    the signature's inputs; the values are checked by `_checked_inputs`."""
    if "instances" in body and "inputs" in body:
        raise RequestError("a request has either \"instances\" or \"inputs\", not both")
    names = sorted(signature.inputs)
    single = names[0] if len(names) == 1 else None

    def named(value, where):
        """`value` as an object of named inputs."""
        if single is not None and not (isinstance(value, dict)
                                       and (single in value or set(value) != {"b64"})):
            return {single: value}  # The one input's value itself.
        if not isinstance(value, dict):
            raise RequestError("%s must be an object of the inputs %s, not %s"
                               % (where, ", ".join(names), _describe(value)))
        missing = sorted(set(names) - set(value))
        unknown = sorted(set(value) - set(names))
        if missing or unknown:
            raise RequestError("%s: the signature %s takes %s; %s" % (
                where, signature.name, ", ".join(names), "; ".join(filter(None, [
                    "missing: " + ", ".join(missing) if missing else "",
                    "unknown: " + _names(unknown) if unknown else ""]))))
        return value

    if "instances" in body:
        instances = body["instances"]
        if not isinstance(instances, list) or not instances:
            raise RequestError("\"instances\" must be a non-empty list, not %s"
                               % _describe(instances))
        if len(instances) > max_instances:
            raise RequestError("%d instances in one request; this server takes at most %d "
                               "(--max_instances)" % (len(instances), max_instances))
        instances = [named(instance, "instances[%d]" % i)
                     for i, instance in enumerate(instances)]
        return {name: [instance[name] for instance in instances] for name in names}, True
    if "inputs" in body:
        return named(body["inputs"], "\"inputs\""), False
    raise RequestError("a request needs \"instances\" (row format) or \"inputs\" "
                       "(columnar format)")


def _kind(dtype):
    """What a value of `dtype` is called in messages."""
    if dtype == tf.string:
        return "text"
    if dtype == tf.bool:
        return "true or false"
    return ("integer" if dtype.is_integer else "number") + " (%s)" % dtype.name


def _expected(rank, dtype):
    kind = _kind(dtype)
    if rank == 0:
        return "one " + kind
    return ("a list" if rank == 1 else "lists nested %d deep" % rank) + " of " + kind


# A lone surrogate (JSON's "\ud800"), which is not Unicode text.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _leaf(label, value, dtype, binary):
    """One value of an input, checked against the input's dtype: text as
    str (bytes for a binary input, named *_bytes), numbers as they are."""
    if dtype == tf.string:
        if isinstance(value, str):
            bad = _SURROGATE.search(value)
            if bad:
                raise RequestError("%s: a lone surrogate (U+%04X) at character %d is not text"
                                   % (label, ord(bad.group()), bad.start()))
            return value.encode("utf-8") if binary else value
        if isinstance(value, dict) and set(value) == {"b64"} and isinstance(value["b64"], str):
            try:
                data = base64.b64decode(value["b64"], validate=True)
            except ValueError as e:
                raise RequestError("%s: bad base64 (%s)" % (label, e))
            if binary:
                return data
            try:
                return data.decode("utf-8")
            except UnicodeDecodeError as e:
                raise RequestError("%s: {\"b64\": ...} holds bytes that are not UTF-8 text (%s "
                                   "at byte %d)" % (label, e.reason, e.start))
    elif dtype == tf.bool:
        if isinstance(value, bool):
            return value
    elif dtype.is_integer:
        if isinstance(value, int) and not isinstance(value, bool):
            if not dtype.min <= value <= dtype.max:
                raise RequestError("%s: %d is out of the range of %s (%d to %d)"
                                   % (label, value, dtype.name, dtype.min, dtype.max))
            return value
    elif dtype.is_floating:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value
    else:
        raise RequestError("%s: this server takes no %s values" % (label, dtype.name))
    raise RequestError("%s: expected %s, found %s" % (label, _kind(dtype), _describe(value)))


def _nested(label, value, rank, dtype, binary):
    """(shape, values in row-major order) of `value`: lists nested exactly
    `rank` deep, the lists of each level equally long and none empty, each
    value checked by `_leaf`. Raises RequestError naming `label`."""
    shape, level = [], [value]
    for depth in range(rank):
        length = None
        for item in level:
            if not isinstance(item, list):
                raise RequestError("%s: expected %s, found %s"
                                   % (label, _expected(rank, dtype), _describe(item)))
            if not item:
                raise RequestError("%s: an empty list, where %s is expected"
                                   % (label, _expected(rank - depth, dtype)))
            if length is None:
                length = len(item)
            elif len(item) != length:
                raise RequestError("%s: lists of %d and of %d values side by side; the lists "
                                   "of one level must be equally long" % (label, length,
                                                                          len(item)))
        shape.append(length)
        level = [inner for item in level for inner in item]
    for item in level:
        if isinstance(item, list):
            raise RequestError("%s: expected %s, found lists nested deeper"
                               % (label, _expected(rank, dtype)))
    return shape, [_leaf(label, item, dtype, binary) for item in level]


# Places where a text may be cut without changing the words before them:
# ASCII whitespace ends a word for every rule of the tokenizer (cleaning,
# lower-casing with its final sigma, accent stripping, word splitting),
# and a CJK ideograph is a word by itself. `_CHUNK` matches the stretches
# between such places (one ideograph, or a run of anything else).
_CJK = "".join("%s-%s" % (chr(low), chr(high)) for low, high in tokenization._CJK_RANGES)
_CHUNK = re.compile("[%s]|[^ \t\n\r%s]+" % (_CJK, _CJK))
# A chunk with a letter, digit or "_" gives at least one word: cleaning
# keeps such characters, lower-casing and accent stripping leave a letter
# a letter, and "_" is punctuation, a word by itself.
_WORD_CHARACTER = re.compile(r"\w")


def read_length(text, words, limit):
    """How many characters of `text` (a str) the tokenizer must be given
    for its first `words` words (basic tokens) to be those of the whole
    text: the end of the chunk (see `_CHUNK`) by which `words` chunks
    holding a word character have passed, or len(text) where there is no
    such end (`words` None: the whole text is read). None where that
    length is over `limit` (the chunks are not scanned past it)."""
    if words is not None and len(text) > words:
        seen = 0
        for chunk in _CHUNK.finditer(text):
            if chunk.end() > limit:
                return None
            if _WORD_CHARACTER.search(text, chunk.start(), chunk.end()):
                seen += 1
                if seen == words:
                    return chunk.end()
    return len(text) if len(text) <= limit else None


def words_read(config, name):
    """The most words of one text of the input `name` that an export's text
    signature reads, from the settings it records (tokenizer_config.json:
    max_seq_length, and doc_stride and max_windows for windows, pooling for
    sentence embeddings); None where it reads the whole text (a tagger's
    document, windows without max_windows, an input it does not know).

    A text gives at least one WordPiece per word, and the signature reads
    at most max_seq_length - 2 pieces of each text ([CLS] and [SEP] take
    two places), of a windowed first text the pieces of max_windows windows
    doc_stride apart. A text cut after that many words gives the same
    features as the whole text: `serving.pack` cuts a pair by its sides'
    lengths, and one of at least max_seq_length - 3 pieces is cut to the
    same length whatever its own; a windowed first text keeps all its
    windows, a second text of that length leaves no room for windows.
    """
    length = config.get("max_seq_length")
    if not length:
        return None
    if name == "text_a" and "doc_stride" in config:
        windows = config.get("max_windows", 0)
        return (windows - 1) * config["doc_stride"] + length - 2 if windows else None
    if "max_query_length" in config:  # Question answering reads its whole context.
        return config["max_query_length"] if name == "question" else None
    if name in ("text_a", "text_b", "context", "question", "endings"):
        return length - 2
    if name == "text" and "pooling" in config:  # A sentence embedding's text.
        return length - 2
    return None


def _checked_inputs(model, signature, columns, rows, limits):
    """The request's values (`_columns`) as NumPy arrays of the signature's
    inputs, each checked before it is built: rank, dimensions, one batch
    size for all, type and range of each value, sequences per request
    (--max_instances: texts of a text input, rows of ids of an id input),
    ids per sequence (the model's max_position_embeddings) and characters
    the model reads per request (--max_text_chars; each text is cut where
    the model stops reading, see `words_read`).

    Returns:
      (name -> array, RequestHeld).

    Raises:
      RequestError: naming the input, and the instance in row format.
    """
    arrays, cuts = {}, {}
    batch = None
    chars_left = limits.max_text_chars
    for name in sorted(signature.inputs):
        spec = signature.inputs[name]
        rank, label = spec.shape.rank, "input %s" % name
        if not rank:
            raise RequestError("%s: the signature gives it no batch dimension; this server "
                               "cannot serve it" % label)
        binary = name.endswith(_BINARY_SUFFIX)
        if rows:
            shape, values = None, []
            for i, value in enumerate(columns[name]):
                inner, leaves = _nested("instances[%d]: %s" % (i, label), value, rank - 1,
                                        spec.dtype, binary)
                if shape is not None and inner != shape:
                    raise RequestError("instances[%d]: %s has the dimensions %s, instances[0] "
                                       "%s; they must agree" % (i, label, inner, shape))
                shape = inner
                values.extend(leaves)
            shape = [len(columns[name])] + shape
        else:
            value = columns[name]
            if isinstance(value, list) and len(value) > limits.max_instances:
                raise RequestError("%s: %d instances in one request; this server takes at most "
                                   "%d (--max_instances)" % (label, len(value),
                                                             limits.max_instances))
            shape, values = _nested(label, value, rank, spec.dtype, binary)
        for size, wanted in zip(shape[1:], spec.shape.as_list()[1:]):
            if wanted is not None and size != wanted:
                raise RequestError("%s: the dimensions %s, where the signature has %s"
                                   % (label, shape, spec.shape.as_list()))
        if batch is None:
            batch = (shape[0], name)
        elif shape[0] != batch[0]:
            raise RequestError("input %s has %d instances, input %s %d; every input needs one "
                               "value per instance" % (batch[1], batch[0], name, shape[0]))
        sequences = int(np.prod(shape if spec.dtype == tf.string or rank == 1 else shape[:-1]))
        if sequences > limits.max_instances:
            raise RequestError("%s: %d %s in one request; this server takes at most %d "
                               "(--max_instances)" % (label, sequences, "texts" if spec.dtype
                                                      == tf.string else "sequences",
                                                      limits.max_instances))
        if spec.dtype == tf.string:
            words = None if binary else words_read(model.tokenizer_config, name)
            array = np.empty(len(values), dtype=object)
            cut = unread = 0
            for k, text in enumerate(values):
                end = read_length(text, words, chars_left)
                if end is None:
                    raise RequestError(
                        "%s: the request's texts hold more than %d characters that the model "
                        "reads (--max_text_chars)" % (label, limits.max_text_chars))
                chars_left -= end
                if end < len(text):
                    cut, unread = cut + 1, unread + len(text) - end
                    text = text[:end]
                array[k] = text if binary else text.encode("utf-8")
            if cut:
                cuts[name] = (cut, unread)
        else:
            if rank >= 2 and model.max_positions and shape[-1] > model.max_positions:
                raise RequestError("%s: sequences of %d; the model takes at most %d (its "
                                   "max_position_embeddings)" % (label, shape[-1],
                                                                 model.max_positions))
            array = np.array(values, dtype=spec.dtype.as_numpy_dtype)
        arrays[name] = array.reshape(shape)
    return arrays, RequestHeld(batch[0], cuts)


def predict_response(model, body, limits=None):
    """The JSON answer of :predict for the decoded request `body`, and what
    the request held (RequestHeld, for the log). `limits`: a
    ServerLimits (default: `DEFAULT_LIMITS`). Raises RequestError for a
    request the model cannot take; no tensor is built before every check
    has passed."""
    limits = limits or DEFAULT_LIMITS
    if not isinstance(body, dict):
        raise RequestError("the request must be a JSON object, not %s" % _describe(body))
    name = body.get("signature_name") or tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY
    if not isinstance(name, str):
        raise RequestError("\"signature_name\" must be text, not %s" % _describe(name))
    if name not in model.signature_defs:
        raise RequestError("no signature %s%s; the model has %s" % (
            repr(name[:60]), "..." if len(name) > 60 else "",
            ", ".join(sorted(model.signature_defs))))
    signature = model.signature(name)
    columns, rows = _columns(body, signature, limits.max_instances)
    arrays, held = _checked_inputs(model, signature, columns, rows, limits)
    outputs = signature.run(arrays)
    if not rows:
        if len(outputs) == 1:
            (only,) = outputs.items()
            return {"outputs": json_value(*only)}, held
        return {"outputs": {n: json_value(n, v) for n, v in outputs.items()}}, held
    batch = len(next(iter(outputs.values())))
    if len(outputs) == 1:
        (n, v), = outputs.items()
        return {"predictions": [json_value(n, v[i]) for i in range(batch)]}, held
    return {"predictions": [{n: json_value(n, v[i]) for n, v in outputs.items()}
                            for i in range(batch)]}, held


def op_error_message(error):
    """The message of a TensorFlow op error without what TensorFlow adds
    around it when a function runs: "Graph execution error:", the Python
    frames that defined the op (they would show the server's paths), the
    node and the function's name."""
    text = error.message
    frames = re.search(r"Detected at node .*? \(most recent call last\):\n", text)
    if frames:
        text = text[frames.end():]
        # The frames are indented lines (and blank ones) up to the message.
        text = re.sub(r"\A(?:[ \t].*\n|\n)*", "", text)
    lines = [line.strip() for line in text.splitlines()
             if line.strip() and not line.strip().startswith("[[")
             and line.strip() != "Graph execution error:"]
    text = re.sub(r"\s*\[Op:[^\]]*\]$", "", " ".join(lines))
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", text)
    return text or type(error).__name__


def status_response(model):
    """GET /v1/models/<name>: the loaded version, available."""
    return {"model_version_status": [{"version": model.version, "state": "AVAILABLE",
                                      "status": {"error_code": "OK", "error_message": ""}}]}


def metadata_response(model, model_name):
    """GET /v1/models/<name>/metadata: the signatures, as protobuf JSON."""
    def as_dict(message):
        try:
            return json_format.MessageToDict(message, preserving_proto_field_name=True,
                                              always_print_fields_with_no_presence=True)
        except TypeError:  # protobuf before 5.26 names the option differently
            return json_format.MessageToDict(message, preserving_proto_field_name=True,
                                              including_default_value_fields=True)
    return {"model_spec": {"name": model_name, "signature_name": "", "version": model.version},
            "metadata": {"signature_def": {"signature_def": {
                name: as_dict(signature_def)
                for name, signature_def in sorted(model.signature_defs.items())}}}}


class _HTTPError(Exception):
    """An answer other than 200, raised where a request is found wrong."""

    def __init__(self, status, message, headers=()):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, tuple(headers)


class _ReadTimeout(TimeoutError):
    """A request did not arrive within --client_timeout_seconds."""


class _DeadlineReader(io.RawIOBase):
    """A socket read with a deadline for the whole request, however the
    client paces its bytes; counts the bytes of the request received."""

    def __init__(self, connection):
        super().__init__()
        self._connection = connection
        self.deadline = None
        self.received = 0

    def start(self, seconds):
        """A new request: it has `seconds` to arrive."""
        self.deadline = time.monotonic() + seconds
        self.received = 0

    def readable(self):
        return True

    def readinto(self, buffer):
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise _ReadTimeout()
        self._connection.settimeout(left)
        try:
            count = self._connection.recv_into(buffer)
        except TimeoutError:
            raise _ReadTimeout()
        self.received += count
        return count


def _client(address):
    """A client's address for the log."""
    host, port = address[:2]
    return ("[%s]:%d" if ":" in host else "%s:%d") % (host, port)


class _RequestLog:
    """The server's log: every error answer on a line of its own; answered
    requests one line each while they come at a human pace (at most one a
    second), else counted and summed up on one line about every
    `every_seconds`."""

    def __init__(self, every_seconds, clock=time.monotonic):
        self._every, self._clock = every_seconds, clock
        self._lock = threading.Lock()
        self._last_line = -math.inf
        self._counted = self._instances = self._cut = self._unread = 0
        self._since = None

    def answered(self, line, held):
        """A 200 answer: `line` says what; `held`, a RequestHeld or None,
        what the request held."""
        now = self._clock()
        with self._lock:
            if now - self._last_line < _HUMAN_SECONDS:
                if not self._counted:
                    self._since = now
                self._counted += 1
                if held:
                    self._instances += held.instances
                    self._cut += sum(count for count, _ in held.cut.values())
                    self._unread += sum(unread for _, unread in held.cut.values())
                return
            self._last_line = now
            self._summary(now)
        if held:
            line += " (%s%s)" % (_count(held.instances, "instance"),
                                 "".join("; %s: %s" % (name, _cut_words(*cut))
                                         for name, cut in sorted(held.cut.items())))
        logs.log_info("%s", line)

    def error(self, line, message):
        logs.log_warning("%s: %s", line, message)

    def flush(self):
        """Logs the summary of the counted requests once it is due."""
        now = self._clock()
        with self._lock:
            if self._counted and now - self._since >= self._every:
                self._summary(now)

    def _summary(self, now):
        if self._counted:
            logs.log_info("%d more %s answered in %s (%s%s)", self._counted,
                          "request" if self._counted == 1 else "requests",
                          logs.format_duration(now - self._since),
                          _count(self._instances, "instance"),
                          "; " + _cut_words(self._cut, self._unread) if self._cut else "")
            self._counted = self._instances = self._cut = self._unread = 0


def _count(number, noun):
    return "%d %s%s" % (number, noun, "" if number == 1 else "s")


def _cut_words(count, unread):
    return "%s cut where the model stops reading, %s not read" % (
        _count(count, "text"), _count(unread, "character"))


# What a :predict request held, for the log: its instances, and per text
# input the texts cut and the characters left unread (name -> (texts,
# characters)).
RequestHeld = collections.namedtuple("RequestHeld", ["instances", "cut"])


class _Server(http.server.ThreadingHTTPServer):
    """A thread per connection, at most `limits.max_connections` of them
    (one more is answered 503 and closed); `limits.max_requests_in_flight`
    :predict requests decoded and run at once, the others waiting for a
    place (a queue bounded by the connections)."""

    daemon_threads = True
    block_on_close = False
    # Connections that wait in the kernel to be accepted (also while the
    # model loads).
    request_queue_size = 64

    def __init__(self, address, family, model, model_name, limits, log):
        self.address_family = family
        self.model, self.model_name, self.limits, self.log = model, model_name, limits, log
        self.places = threading.BoundedSemaphore(limits.max_requests_in_flight)
        self.connections = self.waiting = 0
        self.lock = threading.Lock()
        super().__init__(address, _Handler)

    def server_bind(self):
        # HTTPServer's would look the host's name up (a DNS query).
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def process_request(self, request, client_address):
        with self.lock:
            full = self.connections >= self.limits.max_connections
            if not full:
                self.connections += 1
        if full:
            self._refuse(request, client_address)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._closed_one()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._closed_one()

    def _closed_one(self):
        with self.lock:
            self.connections -= 1

    def _refuse(self, request, client_address):
        message = ("the server has %d connections open, its most (--max_connections); try "
                   "again later" % self.limits.max_connections)
        data = json.dumps({"error": message}).encode()
        try:
            request.settimeout(1)
            request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: "
                            b"application/json\r\nContent-Length: %d\r\nConnection: close\r\n"
                            b"Retry-After: 1\r\n\r\n%s" % (len(data), data))
        except OSError:
            pass
        self.log.error("Connection from %s: 503" % _client(client_address), message)
        self.shutdown_request(request)

    def handle_error(self, request, client_address):
        """One log line where socketserver would print a traceback."""
        error = sys.exc_info()[1]
        logs.log_warning("Connection from %s ended by %s: %s", _client(client_address),
                         type(error).__name__, error)

    def service_actions(self):
        self.log.flush()

    @contextlib.contextmanager
    def in_flight(self):
        """A context for one :predict request being decoded and run: waits
        for one of the --max_requests_in_flight places."""
        with self.lock:
            self.waiting += 1
        self.places.acquire()
        with self.lock:
            self.waiting -= 1
        try:
            yield
        finally:
            self.places.release()


class _Handler(http.server.BaseHTTPRequestHandler):
    """TensorFlow Serving's REST API for `server.model` (see `make_server`)."""

    protocol_version = "HTTP/1.1"
    # Headers and body leave in separate writes: with Nagle's algorithm
    # the body would wait for the client's delayed acknowledgement (40 ms).
    disable_nagle_algorithm = True
    # Names the program only: no Python or library versions.
    server_version = "predict.py"
    # A request line without a version is answered as HTTP/1.1 (with a
    # status line and headers), not as HTTP/0.9.
    default_request_version = "HTTP/1.1"

    def version_string(self):
        return self.server_version

    def log_request(self, *args):  # The server logs each answer itself.
        pass

    def log_message(self, *args):
        pass

    def setup(self):
        super().setup()
        self.rfile.close()
        self._reader = _DeadlineReader(self.connection)
        self.rfile = io.BufferedReader(self._reader, 1 << 16)

    def handle(self):
        try:
            super().handle()
        except (ConnectionError, TimeoutError) as e:
            # The client left, or stopped reading its answer (one that left
            # an idle connection is not worth a line).
            if self._started is not None:
                self.server.log.error(self._line(),
                                      "the client left before its answer was sent (%s)"
                                      % type(e).__name__)

    def handle_one_request(self):
        limits = self.server.limits
        self._reader.start(limits.timeout_seconds)
        self._started = None
        self.command, self.path, self.request_version = "", "", "HTTP/1.1"
        self.requestline = ""
        try:
            line = self.rfile.readline(_MAX_REQUEST_LINE + 1)
            if not line:
                self.close_connection = True
                return
            self._started = time.monotonic()
            if len(line) > _MAX_REQUEST_LINE:
                self.send_error(414, "the request line is longer than %d bytes"
                                % _MAX_REQUEST_LINE)
                return
            self.raw_requestline = line
            if not self.parse_request():
                return
            method = getattr(self, "do_" + self.command, None)
            if method is None:
                self.send_error(501, "unsupported method %s" % _printable(self.command, 20))
                return
            method()
            self.wfile.flush()
        except _ReadTimeout:
            self.close_connection = True
            if self._reader.received:
                self._started = self._started or time.monotonic()
                self.send_error(408, "the request did not arrive within %g s "
                                "(--client_timeout_seconds)" % limits.timeout_seconds)

    def _line(self, status=None):
        """The request (method, path, client) and its answer's status."""
        request = "%s %s from %s" % (self.command or "-", _printable(self.path, 80) or "-",
                                     _client(self.client_address))
        if status is None:
            return request
        took = "" if self._started is None else " in %d ms" % round(
            1000 * (time.monotonic() - self._started))
        return "%s: %d%s" % (request, status, took)

    def _answer(self, status, body, held=None, headers=(), detail=None):
        """Sends `body` as JSON, then logs the answer (an error with its
        message, or `detail` where the log should say more)."""
        data = json.dumps(body, ensure_ascii=False).encode("utf-8", "backslashreplace")
        self._send(status, data, (("Content-Type", "application/json"),
                                  ("Content-Length", str(len(data)))) + tuple(headers))
        # Logged once sent (an answer the client did not take has the line
        # of `handle` instead).
        if status >= 400:
            self.server.log.error(self._line(status), detail or body["error"])
        else:
            self.server.log.answered(self._line(status), held)

    def send_error(self, code, message=None, explain=None):
        """Every error answer is JSON, {"error": ...}, and ends the
        connection (the rest of the request may be unread)."""
        self.close_connection = True
        self._answer(code, {"error": message or self.responses.get(code, ("error",))[0]})

    def handle_expect_100(self):
        # A body that would be refused is refused before the client sends it.
        if self.command == "POST":
            try:
                self._body_length()
            except _HTTPError as e:
                self.send_error(e.status, e.message)
                return False
        return super().handle_expect_100()

    def _route(self):
        """The route's match; _HTTPError 404 for another path, model or
        version."""
        match = _ROUTE.match(self.path.split("?", 1)[0])
        if match is None:
            raise _HTTPError(404, "Malformed request: %s %s" % (self.command,
                                                               _printable(self.path, 200)))
        if match.group("name") != self.server.model_name:
            raise _HTTPError(404, "Servable not found for request: Latest(%s)"
                             % _printable(match.group("name")))
        version = match.group("version")
        if version is not None and version != self.server.model.version:
            raise _HTTPError(404, "Servable not found for request: Specific(%s, %s)"
                             % (self.server.model_name, _printable(version)))
        return match

    def _body_length(self):
        """The body's length by Content-Length, or None for a chunked body;
        _HTTPError for a body this server does not read."""
        limit = self.server.limits.max_request_bytes
        encodings = self.headers.get_all("Transfer-Encoding") or []
        lengths = self.headers.get_all("Content-Length") or []
        if encodings:
            if lengths:
                raise _HTTPError(400, "a request has either a Content-Length or a "
                                      "Transfer-Encoding, not both")
            if [e.strip().lower() for e in ",".join(encodings).split(",")] != ["chunked"]:
                raise _HTTPError(501, "this server reads the transfer coding chunked only, "
                                      "not %s" % _printable(", ".join(encodings)))
            return None
        if not lengths:
            raise _HTTPError(411, "the request needs a Content-Length (or a chunked body)")
        if len(lengths) > 1 or not re.fullmatch(r"[0-9]{1,18}", lengths[0].strip()):
            raise _HTTPError(400, "the Content-Length %s is not one number of bytes"
                             % _printable(", ".join(lengths)))
        length = int(lengths[0])
        if length > limit:
            raise _HTTPError(413, "request body of %d bytes exceeds the limit of %d "
                                  "(--max_request_bytes)" % (length, limit))
        return length

    def _read_body(self):
        """The request's body (bytes), by its Content-Length or in chunks."""
        length = self._body_length()
        if length is not None:
            data = self.rfile.read(length)
            if len(data) < length:
                raise _HTTPError(400, "the body ended after %d of the %d bytes of its "
                                      "Content-Length" % (len(data), length))
            return data
        limit, parts, total = self.server.limits.max_request_bytes, [], 0
        while True:
            line = self.rfile.readline(1026)
            size = line.split(b";", 1)[0].strip()
            if not line.endswith(b"\n") or not re.fullmatch(rb"[0-9A-Fa-f]{1,16}", size):
                raise _HTTPError(400, "a malformed chunk of a chunked body")
            size = int(size, 16)
            if size == 0:
                break
            total += size
            if total > limit:
                raise _HTTPError(413, "request body of more than %d bytes exceeds the limit "
                                      "(--max_request_bytes)" % limit)
            parts.append(self.rfile.read(size))
            if len(parts[-1]) < size or self.rfile.readline(3) not in (b"\r\n", b"\n"):
                raise _HTTPError(400, "the chunked body ended inside a chunk")
        for _ in range(100):  # Trailer fields, which are not used, then an empty line.
            line = self.rfile.readline(8194)
            if not line.endswith(b"\n"):
                raise _HTTPError(400, "the chunked body ended inside its trailer")
            if not line.strip():
                return b"".join(parts)
        raise _HTTPError(400, "a chunked body's trailer of more than 100 lines")

    def _has_body(self):
        return bool(self.headers.get("Transfer-Encoding")) or (
            self.headers.get("Content-Length", "0").strip() not in ("", "0"))

    def do_GET(self):
        if self._has_body():
            self.close_connection = True  # The body is not read.
        if self.path.split("?", 1)[0] in web_page.PATHS:  # A page to try the model.
            self._page()
            return
        try:
            match = self._route()
            if match.group("rest") == "/metadata":
                self._answer(200, metadata_response(self.server.model, self.server.model_name))
            elif not match.group("rest"):
                self._answer(200, status_response(self.server.model))
            else:
                raise _HTTPError(404, "Malformed request: GET %s" % _printable(self.path, 200))
        except _HTTPError as e:
            self._answer(e.status, {"error": e.message}, headers=e.headers)

    def _page(self):
        """Sends the page to try the model (web_page.py), logged as an answer."""
        model = self.server.model
        body, headers = web_page.page(model.path, model.version, self.server.model_name)
        self._send(200, body, tuple(headers))
        self.server.log.answered(self._line(200), None)

    def _send(self, status, data, headers):
        """Writes the status line, `headers` ((name, value) pairs) and, but
        for a HEAD request, `data` (bytes)."""
        self.connection.settimeout(self.server.limits.timeout_seconds)
        self.send_response(status)
        for header in headers:
            self.send_header(*header)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def do_POST(self):
        try:
            if (self._route().group("rest") or "") != ":predict":
                raise _HTTPError(400, "this server answers :predict requests (%s)"
                                 % _printable(self.path, 200))
            data = self._read_body()
        except _HTTPError as e:
            self.close_connection = True  # The body is left unread, or malformed.
            self._answer(e.status, {"error": e.message}, headers=e.headers)
            return
        with self.server.in_flight():
            self._answer(*self._predict(data))

    def _predict(self, data):
        """The answer (`_answer`'s arguments) to a :predict body."""
        try:
            answer, held = predict_response(self.server.model, decode_request(data),
                                            self.server.limits)
            return 200, answer, held
        except RequestError as e:
            return 400, {"error": str(e)}
        except tf.errors.OpError as e:
            return 400, {"error": op_error_message(e)}
        except Exception as e:  # noqa: BLE001  (the server keeps serving)
            frame = traceback.extract_tb(e.__traceback__)[-1]
            return 500, {"error": "internal error (%s); the server's log has more"
                                  % type(e).__name__}, None, (), "%s: %s (in %s, line %d)" % (
                type(e).__name__, e, os.path.basename(frame.filename), frame.lineno)

    def _refuse_method(self):
        self.close_connection = self._has_body() or self.close_connection
        self._answer(405, {"error": "%s is not answered here: GET the model's status or "
                                    "metadata, POST :predict" % self.command},
                     headers=[("Allow", "GET, POST")])

    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = _refuse_method


def listen_family(host, port):
    """The address family to listen on `host` with (IPv4 or IPv6).

    Raises:
      socket.gaierror: `host` is no address or name of one.
    """
    if not host:  # Every IPv4 interface, as socketserver takes "".
        return socket.AF_INET
    return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                              flags=socket.AI_PASSIVE)[0][0]


def make_server(model, host, port, model_name, max_request_bytes=None, limits=None,
                log_every_seconds=None):
    """An HTTP server answering TensorFlow Serving's REST API for `model`
    as `model_name`, bound to (host, port) and listening; call its
    serve_forever(). `model` may be None at first: set `server.model`
    before serving (main binds the port before it loads the model).

    Args:
      limits: a ServerLimits (default `DEFAULT_LIMITS`), and
        `max_request_bytes` in place of its field if given.
      log_every_seconds: the summary line's interval (default
        --log_every_seconds).

    Raises:
      OSError: the address cannot be listened on (socket.gaierror: it is
        no address).
    """
    limits = limits or DEFAULT_LIMITS
    if max_request_bytes is not None:
        limits = limits._replace(max_request_bytes=max_request_bytes)
    log = _RequestLog(logs.log_every_seconds() if log_every_seconds is None
                      else log_every_seconds)
    return _Server((host, port), listen_family(host, port), model, model_name, limits, log)

def _listen():
    """The server of the flags, listening: its flags checked and its port
    bound before the model loads, so that a busy port or a bad address is
    one line naming the flag."""
    if not 0 <= FLAGS.port <= 65535:
        raise InputError("--port=%d: a port is 0 (any free one) to 65535" % FLAGS.port)
    if not re.fullmatch(r"[^/:?#\s]+", FLAGS.model_name):
        raise InputError("--model_name=%r: a name for the URLs, without /, :, ?, # or spaces"
                         % FLAGS.model_name)
    for name in ServerLimits._fields[:-1]:
        if FLAGS[name].value < 1:
            raise InputError("--%s=%d: must be at least 1" % (name, FLAGS[name].value))
    if not FLAGS.client_timeout_seconds > 0:
        raise InputError("--client_timeout_seconds=%g: must be more than 0"
                         % FLAGS.client_timeout_seconds)
    limits = ServerLimits(*[FLAGS[name].value for name in ServerLimits._fields[:-1]],
                          timeout_seconds=FLAGS.client_timeout_seconds)
    try:
        return make_server(None, FLAGS.host, FLAGS.port, FLAGS.model_name, limits=limits,
                           log_every_seconds=FLAGS.log_every_seconds)
    except socket.gaierror as e:
        raise InputError("--host=%s: no address of this machine, nor a name of one (%s)"
                         % (FLAGS.host, e.strerror))
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise InputError("--port=%d: another program listens there (%s)"
                             % (FLAGS.port, e.strerror))
        if e.errno == errno.EADDRNOTAVAIL:
            raise InputError("--host=%s: no network interface of this machine has that "
                             "address (%s)" % (FLAGS.host, e.strerror))
        if e.errno == errno.EACCES:
            raise InputError("--port=%d: not allowed to listen there (%s; ports below 1024 "
                             "need privileges)" % (FLAGS.port, e.strerror))
        raise InputError("--host=%s --port=%d: cannot listen there (%s)"
                         % (FLAGS.host, FLAGS.port, e.strerror or e))


# ---------------------------------------------------------------------------

def main(_):
    shared_flags.require_flags("model_dir")
    if FLAGS.input_format == "swag_csv":
        raise InputError("--input_format=swag_csv is for run_swag.py; here: jsonl, tsv, csv "
                         "or text")
    if FLAGS.batch_size < 1:
        raise InputError("--batch_size must be at least 1, got %d" % FLAGS.batch_size)
    if FLAGS.port is not None and (FLAGS.input_file or FLAGS.output_file):
        raise InputError("--port serves the model; --input_file and --output_file label "
                         "files: give one or the other")
    if FLAGS.port is not None and FLAGS.input_columns:
        raise InputError("--input_columns names the columns of files to label; --port "
                         "serves requests, which name the inputs")
    fields = parse_input_columns(FLAGS.input_columns)
    paths = check_labelling_flags() if FLAGS.port is None else []
    server = _listen() if FLAGS.port is not None else None  # Before the model loads.
    try:
        model = Model(FLAGS.model_dir)
    except BaseException:
        if server is not None:
            server.server_close()
        raise
    logs.log_info("Model %s (version %s), signatures: %s", model.path, model.version,
                  ", ".join(sorted(model.signature_defs)))
    if server is not None:
        server.model = model
        host = server.server_address[0]
        logs.log_info("Serving at http://%s:%d/v1/models/%s, a page to try it at / "
                      "(Ctrl-C stops)",
                      "[%s]" % host if ":" in host else host, server.server_address[1],
                      FLAGS.model_name)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
        return
    try:
        signature = model.signature(FLAGS.signature_name)  # Checked before anything is read.
    except RequestError as e:
        raise InputError("--signature_name: %s" % e)
    unknown = sorted(set(fields) - set(signature.inputs))
    if unknown:
        raise InputError("--input_columns: the signature %s has no input %s (it takes %s)"
                         % (signature.name, ", ".join(unknown),
                            ", ".join(sorted(signature.inputs))))
    if FLAGS.output_file:
        directory = os.path.dirname(FLAGS.output_file)
        if directory:
            file_io.gfile().makedirs(directory)  # As check_labelling_flags found it can be.
        with file_io.atomic_output(FLAGS.output_file) as writer:
            done, skipped = label_inputs(model, writer, paths, fields)
        file_io.report_output(FLAGS.output_file, "%d inputs labelled%s" % (
            done, ", %d skipped" % skipped if skipped else ""))
    else:
        try:
            label_inputs(model, sys.stdout, paths, fields)
            sys.stdout.flush()
        except BrokenPipeError:
            raise _reader_gone()


if __name__ == "__main__":
    script_runner.run_script(main)
