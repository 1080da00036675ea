"""Labels text with an exported model, or serves it over TensorFlow Serving's
REST API.

    # Label a file (or standard input) into JSON Lines:
    python predict.py --model_dir=/tmp/mrpc_export --input_file=pairs.jsonl
    # Serve the model as TensorFlow Serving would:
    python predict.py --model_dir=/tmp/mrpc_export --port=8501

--model_dir is an export folder of run_classifier.py, run_ner.py,
run_swag.py or extract_features.py (the newest timestamped SavedModel in it
is used) or one SavedModel folder. The model tokenizes its own text (serving.py), so no
vocabulary or config is needed here. The model is loaded by exported_model.py; the
server is rest_server.py, answering requests as rest_api.py checks them.

Labelling: the input is JSON Lines (objects with the signature's input
names, e.g. "text_a" and "text_b"; other fields are ignored), TSV or CSV
whose header names the inputs, or one text per line for a model with one
text input; the format is told from the file's extension or its first line
(--input_format forces it), and --input_columns maps fields named otherwise
(sentence:text_a). Each input gives one JSON object of the signature's
outputs, in input order; a tagger's per-word outputs are cut to the text's
words, fill-mask's to its masks and a question answering export's n-best
to its num_answers (the REST API keeps them padded, as TensorFlow Serving
does).

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

import csv
import errno
import itertools
import json
import os
import re
import signal
import socket
import stat
import sys

import quiet_tf  # noqa: F401  (first: imports TensorFlow without its start-up noise)
import tensorflow as tf
from absl import flags

import exported_model
import file_io
import interrupts
import logs
import rest_api
import rest_server
import script_runner
import shared_flags
from errors import InputError
from exported_model import RequestError
from rest_api import DEFAULT_LIMITS

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
            exported_model.encode_strings(name, value)
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
        for example in exported_model.split_outputs(signature(columns)):
            example = _own_answers(example)
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


def _own_answers(example):
    """A question answering export's output for one input (name -> JSON
    value) with its n-best (the list values) cut to its num_answers; any
    other export's as it is."""
    count = example.get("num_answers")
    if count is None:
        return example
    return {name: value[:count] if isinstance(value, list) else value
            for name, value in example.items()}


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


def _listen():
    """The server of the flags, listening: its flags checked and its port
    bound before the model loads, so that a busy port or a bad address is
    one line naming the flag."""
    if not 0 <= FLAGS.port <= 65535:
        raise InputError("--port=%d: a port is 0 (any free one) to 65535" % FLAGS.port)
    if not re.fullmatch(r"[^/:?#\s]+", FLAGS.model_name):
        raise InputError("--model_name=%r: a name for the URLs, without /, :, ?, # or spaces"
                         % FLAGS.model_name)
    for name in rest_api.ServerLimits._fields[:-1]:
        if FLAGS[name].value < 1:
            raise InputError("--%s=%d: must be at least 1" % (name, FLAGS[name].value))
    if not FLAGS.client_timeout_seconds > 0:
        raise InputError("--client_timeout_seconds=%g: must be more than 0"
                         % FLAGS.client_timeout_seconds)
    limits = rest_api.ServerLimits(
        *[FLAGS[name].value for name in rest_api.ServerLimits._fields[:-1]],
        timeout_seconds=FLAGS.client_timeout_seconds)
    try:
        return rest_server.make_server(None, FLAGS.host, FLAGS.port, FLAGS.model_name,
                                       limits=limits, log_every_seconds=FLAGS.log_every_seconds)
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
        model = exported_model.Model(FLAGS.model_dir)
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
