"""Labels text with an exported model, or serves it over TensorFlow Serving's
REST API.

    # Label a file (or standard input) into JSON Lines:
    python predict.py --model_dir=/tmp/mrpc_export --input_file=pairs.jsonl
    # Serve the model as TensorFlow Serving would:
    python predict.py --model_dir=/tmp/mrpc_export --port=8501

--model_dir is an export folder of run_classifier.py, run_ner.py or
run_swag.py (the newest timestamped SavedModel in it is used) or one
SavedModel folder. The model tokenizes its own text (serving.py), so no
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
Bad requests are answered 400 {"error": "..."}, as TensorFlow Serving does.
"""

import base64
import csv
import http.server
import itertools
import json
import os
import re
import signal
import stat
import sys

import quiet_tf  # noqa: F401  (first: imports TensorFlow without its start-up noise)
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the WordPiece op of the exports)
from absl import flags
from tensorflow.core.protobuf import saved_model_pb2
from google.protobuf import json_format

import run_base
import web_page
from run_base import InputError

FLAGS = flags.FLAGS

run_base.define_flags(
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
    "An export folder of run_classifier.py, run_ner.py or run_swag.py (its newest "
    "timestamped SavedModel is used), or a SavedModel folder.")
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
flags.DEFINE_integer("max_request_bytes", 64 << 20,
                     "Requests with a larger body are refused (400).")

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
    if run_base.exists(os.path.join(model_dir, "saved_model.pb")):
        name = os.path.basename(os.path.normpath(model_dir))
        return model_dir, name if name.isdigit() else "1"
    versions = []
    if run_base.isdir(model_dir):
        versions = [name.rstrip("/") for name in run_base.gfile().listdir(model_dir)
                    if name.rstrip("/").isdigit()
                    and run_base.exists(os.path.join(model_dir, name, "saved_model.pb"))]
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
    """

    def __init__(self, model_dir):
        self.path, self.version = find_saved_model(model_dir)
        saved_model = saved_model_pb2.SavedModel()
        saved_model.ParseFromString(run_base.read_file_bytes(
            os.path.join(self.path, "saved_model.pb")))
        self.signature_defs = dict(saved_model.meta_graphs[0].signature_def)
        loaded = tf.saved_model.load(self.path)
        self._signatures = {name: Signature(name, function)
                            for name, function in loaded.signatures.items()}
        self._loaded = loaded  # Keeps the functions' variables alive.

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
        paths = run_base.expand_file_patterns("input_file", FLAGS.input_file)
        for path in paths:
            if not run_base.is_remote(path) and not os.access(path, os.R_OK):
                raise InputError("--input_file %s cannot be read (permission denied)" % path)
    elif sys.stdin is None or sys.stdin.closed:
        raise InputError("standard input is closed: give the text to label with --input_file")
    output = FLAGS.output_file
    if not output:
        if sys.stdout is None or sys.stdout.closed:
            raise InputError("standard output is closed: name a file with --output_file")
        return paths
    run_base.check_output_file(output)
    if not run_base.is_remote(output) and os.path.lexists(output):
        kind = os.lstat(output).st_mode
        if not stat.S_ISREG(kind):
            what = ("a symbolic link" if stat.S_ISLNK(kind) else "a named pipe" if
                    stat.S_ISFIFO(kind) else "a device" if stat.S_ISCHR(kind) or
                    stat.S_ISBLK(kind) else "a socket" if stat.S_ISSOCK(kind) else "not a file")
            raise InputError("--output_file %s is %s, not a regular file: name a new file "
                             "or a regular one (replaced once the labels are complete)"
                             % (output, what))
        for path in paths:
            if not run_base.is_remote(path) and os.path.samefile(path, output):
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
        with run_base.open_file(path, "rb") as f:
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
    progress = run_base.Progress("Labelling", unit="inputs")
    done = skipped = 0
    batch = []

    def bad_input(where, error):
        nonlocal skipped
        message = "%s, line %d: %s" % (where[0], where[1], error)
        if not FLAGS.skip_malformed_rows:
            raise InputError(message + " (--skip_malformed_rows skips such inputs)")
        run_base.log_warning("Skipping input: %s", message)
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


class _ReaderGone(run_base.InterruptedExit):
    """The end of labelling into standard output after its reader closed
    the pipe (``predict.py ... | head -1``): as other Unix tools, the script
    ends by SIGPIPE, without a message (see `run_base.run_script`)."""

    def __init__(self):
        super().__init__(128 + signal.SIGPIPE)


def _reader_gone():
    """A `_ReaderGone` to raise, with standard output sent to /dev/null
    (`run_base.discard_stdout`)."""
    run_base.discard_stdout()
    return _ReaderGone()


# ---------------------------------------------------------------------------
# The server: TensorFlow Serving's REST API.

_ROUTE = re.compile(r"^/v1/models/(?P<name>[^/:]+)(?:/versions/(?P<version>[^/:]+))?"
                    r"(?P<rest>(?::[a-z]+)|/metadata)?$")


def _columns(body, signature):
    """The request's inputs as name -> batch value, and whether the request
    was in row format."""
    if "instances" in body and "inputs" in body:
        raise RequestError("a request has either \"instances\" or \"inputs\", not both")
    single = next(iter(signature.inputs)) if len(signature.inputs) == 1 else None
    if "instances" in body:
        instances = body["instances"]
        if not isinstance(instances, list) or not instances:
            raise RequestError("\"instances\" must be a non-empty list")
        if single is not None:
            instances = [i if isinstance(i, dict) and set(i) == {single} else {single: i}
                         for i in instances]
        if not all(isinstance(i, dict) for i in instances):
            raise RequestError("each instance must be an object of the inputs %s"
                               % ", ".join(sorted(signature.inputs)))
        names = set(instances[0])
        if any(set(i) != names for i in instances):
            raise RequestError("every instance must name the same inputs")
        return {n: [i[n] for i in instances] for n in names}, True
    if "inputs" in body:
        inputs = body["inputs"]
        if not isinstance(inputs, dict) or (single is not None and set(inputs) != {single}):
            inputs = {single: inputs} if single is not None else inputs
        if not isinstance(inputs, dict):
            raise RequestError("\"inputs\" must be an object of the inputs %s"
                               % ", ".join(sorted(signature.inputs)))
        if any(isinstance(v, list) and not v for v in inputs.values()):
            raise RequestError("an input of \"inputs\" is an empty list")
        return inputs, False
    raise RequestError("a request needs \"instances\" (row format) or \"inputs\" (columnar)")


def predict_response(model, body):
    """The JSON answer of :predict for the decoded request `body`."""
    if not isinstance(body, dict):
        raise RequestError("the request must be a JSON object")
    name = body.get("signature_name", tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY)
    signature = model.signature(name)
    columns, rows = _columns(body, signature)
    outputs = signature(columns)
    if not rows:
        if len(outputs) == 1:
            (only,) = outputs.items()
            return {"outputs": json_value(*only)}
        return {"outputs": {n: json_value(n, v) for n, v in outputs.items()}}
    batch = len(next(iter(outputs.values())))
    if len(outputs) == 1:
        (n, v), = outputs.items()
        return {"predictions": [json_value(n, v[i]) for i in range(batch)]}
    return {"predictions": [{n: json_value(n, v[i]) for n, v in outputs.items()}
                            for i in range(batch)]}


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


def make_server(model, host, port, model_name, max_request_bytes):
    """An HTTP server (threads, one per connection) answering TensorFlow
    Serving's REST API for `model` as `model_name`; call its
    serve_forever()."""

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body leave in separate writes: with Nagle's algorithm
        # the body would wait for the client's delayed acknowledgement (40 ms).
        disable_nagle_algorithm = True

        def log_message(self, *args):  # One line per request would drown the log.
            pass

        def _answer(self, status, body):
            data = json.dumps(body, ensure_ascii=False).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _route(self):
            """(route match, error answer or None)."""
            match = _ROUTE.match(self.path.split("?", 1)[0])
            if match is None:
                return None, (404, {"error": "Malformed request: %s %s"
                                    % (self.command, self.path)})
            if match.group("name") != model_name:
                return None, (404, {"error": "Servable not found for request: Latest(%s)"
                                    % match.group("name")})
            version = match.group("version")
            if version is not None and version != model.version:
                return None, (404, {"error": "Servable not found for request: "
                                    "Specific(%s, %s)" % (model_name, version)})
            return match, None

        def do_GET(self):
            if self.path.split("?", 1)[0] in web_page.PATHS:  # A page to try the model.
                body, headers = web_page.page(model.path, model.version, model_name)
                self.send_response(200)
                for header in headers:
                    self.send_header(*header)
                self.end_headers()
                self.wfile.write(body)
                return
            match, error = self._route()
            if error:
                self._answer(*error)
            elif match.group("rest") == "/metadata":
                self._answer(200, metadata_response(model, model_name))
            elif not match.group("rest"):
                self._answer(200, status_response(model))
            else:
                self._answer(404, {"error": "Malformed request: GET %s" % self.path})

        def do_POST(self):
            match, error = self._route()
            length = self.headers.get("Content-Length")
            if error is None and (match.group("rest") or "") != ":predict":
                error = (400, {"error": "this server answers :predict requests (%s)"
                                        % self.path})
            if error is None and (length is None or not length.isdigit()):
                error = (400, {"error": "the request needs a Content-Length"})
            if error is None and int(length) > max_request_bytes:
                error = (400, {"error": "request body of %s bytes exceeds the limit of %d "
                                        "(--max_request_bytes)" % (length, max_request_bytes)})
            if error:
                self.close_connection = True  # The body is left unread.
                self._answer(*error)
                return
            try:
                body = json.loads(self.rfile.read(int(length)).decode("utf-8"))
                self._answer(200, predict_response(model, body))
            except UnicodeDecodeError as e:
                self._answer(400, {"error": "the request body is not UTF-8 (%s)" % e.reason})
            except json.JSONDecodeError as e:
                self._answer(400, {"error": "JSON Parse error: %s" % e})
            except RequestError as e:
                self._answer(400, {"error": str(e)})
            except tf.errors.OpError as e:
                self._answer(400, {"error": e.message})
            except Exception as e:  # noqa: BLE001  (the server keeps serving)
                run_base.log_warning("Request %s failed: %r", self.path, e)
                self._answer(500, {"error": "%s: %s" % (type(e).__name__, e)})

    server = http.server.ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server


# ---------------------------------------------------------------------------

def main(_):
    run_base.require_flags("model_dir")
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
    model = Model(FLAGS.model_dir)
    run_base.log_info("Model %s (version %s), signatures: %s", model.path, model.version,
                      ", ".join(sorted(model.signature_defs)))
    if FLAGS.port is not None:
        server = make_server(model, FLAGS.host, FLAGS.port, FLAGS.model_name,
                             FLAGS.max_request_bytes)
        run_base.log_info("Serving at http://%s:%d/v1/models/%s, a page to try it at / "
                          "(Ctrl-C stops)", FLAGS.host, server.server_address[1],
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
            run_base.gfile().makedirs(directory)  # As check_labelling_flags found it can be.
        with run_base.atomic_output(FLAGS.output_file) as writer:
            done, skipped = label_inputs(model, writer, paths, fields)
        run_base.report_output(FLAGS.output_file, "%d inputs labelled%s" % (
            done, ", %d skipped" % skipped if skipped else ""))
    else:
        try:
            label_inputs(model, sys.stdout, paths, fields)
            sys.stdout.flush()
        except BrokenPipeError:
            raise _reader_gone()


if __name__ == "__main__":
    run_base.run_script(main)
