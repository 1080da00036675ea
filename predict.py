"""Labels text with an exported model, or serves it over TensorFlow Serving's
REST API.

    # Label a file (or standard input) into JSON Lines:
    python predict.py --model_dir=/tmp/mrpc_export --input_file=pairs.jsonl
    # Serve the model as TensorFlow Serving would:
    python predict.py --model_dir=/tmp/mrpc_export --port=8501

--model_dir is an export folder of run_classifier.py, run_ner.py,
run_swag.py or extract_features.py (the newest timestamped SavedModel in it
is used) or one SavedModel folder. The model tokenizes its own text
(scriptkit/serving.py), so no vocabulary or config is needed here. The
model is loaded by scriptkit/exported_model.py; the server is
scriptkit/rest_server.py, answering requests as scriptkit/rest_api.py
checks them.

Labelling: the input is JSON Lines (objects with the signature's input
names, e.g. "text_a" and "text_b", or the columns its training run read;
an "id" goes through), TSV or CSV whose header names them, or one text per
line for a model with one text input; the format is told by the file's
extension (--input_format says it otherwise), never by its content
(scriptkit/labelling_input.py), and --input_columns maps fields named
otherwise (sentence:text_a). Each input gives one line, a JSON object of
the signature's outputs, in input order; a tagger's per-word outputs are cut to the text's
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

import dataclasses
import errno
import json
import os
import re
import signal
import socket
import stat
import sys
import time
from typing import Optional

from scriptkit import quiet_tf  # noqa: F401  (first: imports TensorFlow without its start-up noise)
import tensorflow as tf
from absl import flags

from scriptkit import batching
from scriptkit import exported_model
from scriptkit import file_io
from scriptkit import interrupts
from scriptkit import labelling_input
from scriptkit import logs
from scriptkit import rest_api
from scriptkit import rest_server
from scriptkit import script_runner
from scriptkit import settings as settings_lib
from scriptkit import shared_flags
from scriptkit.errors import InputError
from scriptkit.exported_model import RequestError
from scriptkit.labelling_input import STDIN
from scriptkit.rest_api import DEFAULT_LIMITS


@dataclasses.dataclass(frozen=True)
class Settings(settings_lib.Common):
    """The export, the files or the port it serves, how rows are read and
    the server's limits (read in main by `settings_lib.from_flags`)."""

    model_dir: Optional[str] = None
    input_file: Optional[str] = None
    output_file: Optional[str] = None
    batch_size: int = 32
    skip_malformed_rows: bool = False
    input_format: str = "auto"
    id_column: Optional[str] = None
    input_columns: Optional[str] = None
    signature_name: str = "serving_default"
    port: Optional[int] = None
    host: str = "127.0.0.1"
    model_name: str = "default"
    max_request_bytes: int = DEFAULT_LIMITS.max_request_bytes
    max_instances: int = DEFAULT_LIMITS.max_instances
    max_text_chars: int = DEFAULT_LIMITS.max_text_chars
    max_windows_per_request: int = DEFAULT_LIMITS.max_windows_per_request
    max_requests_in_flight: int = DEFAULT_LIMITS.max_requests_in_flight
    max_connections: int = DEFAULT_LIMITS.max_connections
    max_buffered_bytes: int = DEFAULT_LIMITS.max_buffered_bytes
    client_timeout_seconds: float = DEFAULT_LIMITS.timeout_seconds
    max_batch_size: int = batching.DEFAULT_MAX_BATCH_SIZE
    batch_timeout_micros: int = batching.DEFAULT_BATCH_TIMEOUT_MICROS


shared_flags.define_settings_flags(Settings, helps={
    "input_format": "Format of --input_file: jsonl (one JSON object per line), tsv or csv (a "
                    "header row naming the model's inputs, then one input per row), or text "
                    "(one text per line, tabs and all, no header); auto: by the extension "
                    "(.jsonl, .ndjson, .json, .tsv, .csv, .txt), and standard input is text. "
                    "Nothing is told from the content.",
    "input_file": "Text to label: files (comma-separated, globs allowed) in JSON Lines, TSV or "
                  "CSV with a header naming the model's inputs (or the columns its training "
                  "run read, or mapped with --input_columns), or one text per line. Default: "
                  "standard input, one text per line.",
    "output_file": "JSON Lines of the model's outputs, one line per input, in input order "
                   "(its folder is created if missing; a regular file there is replaced when "
                   "done). Default: standard output.",
    "skip_malformed_rows": "For inputs that cannot be read or that the model refuses: write "
                           "a line {\"error\": \"<file>, line <n>: <why>\"} (with a "
                           "warning) and go on, instead of stopping; lines out still equal "
                           "inputs in.",
    "id_column": "The JSON field or TSV/CSV column copied, under its own name and unchanged, "
                 "to the output line of each input that has it (default: id)."})

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
    "max_windows_per_request", DEFAULT_LIMITS.max_windows_per_request,
    "Server: the most windows (rows of the export's max_seq_length pieces) the model may "
    "run for one request, counted by the export's tokenizer before the model runs: each "
    "window of a question answering context, a tagger's document or a classifier text "
    "read with --doc_stride, one per other instance, one per ending of a multiple-choice "
    "instance. More: 400.")
flags.DEFINE_integer(
    "max_requests_in_flight", DEFAULT_LIMITS.max_requests_in_flight,
    "Server: :predict requests decoded and run at once; further ones wait for a place "
    "(each holding its connection).")
flags.DEFINE_integer(
    "max_connections", DEFAULT_LIMITS.max_connections,
    "Server: open connections, idle ones included (each a file descriptor and a few KiB; "
    "what they have sent counts towards --max_buffered_bytes); one more is answered 503 "
    "and closed. The process's limit of open files is raised to fit them.")
flags.DEFINE_integer(
    "max_buffered_bytes", DEFAULT_LIMITS.max_buffered_bytes,
    "Server: bytes of requests not yet answered (lines, headers, bodies) held in memory, "
    "all connections together (never less than one request of --max_request_bytes "
    "takes); past it, the request still being read that holds the most is answered 503 "
    "and what it sent is dropped.")
flags.DEFINE_float(
    "client_timeout_seconds", DEFAULT_LIMITS.timeout_seconds,
    "Server: a request (its line, headers and body) must arrive within this many seconds, "
    "and its answer must be taken as long; an idle kept-alive connection is closed after "
    "as long.")
flags.DEFINE_integer(
    "max_batch_size", batching.DEFAULT_MAX_BATCH_SIZE,
    "Server: requests in flight together are run as one batch of at most this many "
    "instances (and --max_windows_per_request windows), as TensorFlow Serving's batching "
    "does, where the signature's outputs have fixed shapes past the batch (classifiers, "
    "multiple choice, embeddings); others run alone, beside the others. 1: every request "
    "runs alone. The batches are as large as --max_requests_in_flight allows.")
flags.DEFINE_integer(
    "batch_timeout_micros", batching.DEFAULT_BATCH_TIMEOUT_MICROS,
    "Server: how long, in microseconds, the oldest request waiting to run waits for others "
    "to join its batch (0: it goes with those waiting).")


# ---------------------------------------------------------------------------
# Labelling files.

def check_labelling_flags(settings):
    """Checks the `settings` of labelling files (not --port) before the
    model loads: the input files exist and can be read (or standard input is
    open), each has a format (`input_format`), --id_column names a field
    only where there are fields, and --output_file can be written (its
    folder is created) and is neither an input nor anything but a regular
    file (or standard output is open).

    Returns:
      input file (or `STDIN`) -> its format, in reading order.

    Raises:
      InputError: naming the flag at fault.
    """
    paths = []
    if settings.input_file:
        paths = file_io.expand_file_patterns("input_file", settings.input_file)
        for path in paths:
            if not file_io.is_remote(path) and not os.access(path, os.R_OK):
                raise InputError("--input_file %s cannot be read (permission denied)" % path)
    elif sys.stdin is None or sys.stdin.closed:
        raise InputError("standard input is closed: give the text to label with --input_file")
    formats = {name: labelling_input.input_format(name, settings.input_format)
               for name in paths or [STDIN]}
    texts = [name for name, data_format in formats.items() if data_format == "text"]
    if texts and settings.id_column:
        raise InputError("--id_column names a field or column; %s is one text per line"
                         % ("standard input" if texts[0] == STDIN else texts[0]))
    if texts and settings.input_columns:
        raise InputError("--input_columns names fields or columns; %s is one text per line"
                         % ("standard input" if texts[0] == STDIN else texts[0]))
    output = settings.output_file
    if not output:
        if sys.stdout is None or sys.stdout.closed:
            raise InputError("standard output is closed: name a file with --output_file")
        return formats
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
    return formats


def label_inputs(settings, model, writer, sources, fields, id_field=None):
    """Labels every input of `sources` in batches of --batch_size and writes
    one JSON line of outputs per input to `writer`, in input order, with
    the input's passed fields (its id). An input the model cannot take
    stops the run with one line naming its file and line (InputError), or
    with --skip_malformed_rows gets a line {"error": "<file>, line <n>:
    <why>"} (and its id), with a warning: lines out equal inputs in.

    Args:
      settings: the script's settings (--signature_name, --batch_size,
        --skip_malformed_rows).
      model: the `exported_model.Model`.
      writer: a text stream.
      sources: (Source, binary stream) per input (`labelling_input.sources`,
        `labelling_input.input_format`).
      fields: input name -> the fields that may hold it
        (`labelling_input.input_fields`).
      id_field: the field passed through (see `labelling_input.read_inputs`).

    Returns:
      (inputs labelled, inputs refused).
    """
    signature = model.signature(settings.signature_name)
    optional = tuple(model.tokenizer_config.get("optional_inputs") or ())
    progress = logs.Progress("Labelling", unit="inputs")
    done = refused = 0
    batch = []

    def write(row):
        writer.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")

    def bad_input(where, error, passed):
        nonlocal refused
        message = "%s, line %d: %s" % (where[0], where[1], error)
        if not settings.skip_malformed_rows:
            raise InputError(message + " (--skip_malformed_rows writes an error line for such "
                             "inputs instead)")
        logs.log_warning("Input refused: %s", message)
        write(dict(passed, error=message))
        refused += 1

    def label(rows):
        columns = {n: [values[n] for _, values, _ in rows] for n in signature.inputs}
        outputs = exported_model.split_outputs(signature(columns))
        for (_, _, passed), example in zip(rows, outputs):
            write(dict(_own_answers(example), **passed))

    def flush():
        nonlocal done
        if not batch:
            return
        try:
            label(batch)
            done += len(batch)
        except (RequestError, tf.errors.OpError) as e:
            if len(batch) == 1:
                bad_input(batch[0][0], _error_text(e), batch[0][2])
            # Which inputs the model refuses (ids whose lengths differ, say):
            # found by labelling the batch one input at a time.
            for row in batch if len(batch) > 1 else ():
                try:
                    label([row])
                    done += 1
                except (RequestError, tf.errors.OpError) as error:
                    bad_input(row[0], _error_text(error), row[2])
        progress.update(len(batch))
        del batch[:]

    for source, stream in sources:
        flush()
        for number, values, passed in labelling_input.read_inputs(source, stream, signature, fields,
                                                  id_field, optional):
            if isinstance(values, RequestError):
                flush()  # The lines before it first.
                bad_input((source.name, number), values, passed)
                continue
            # A batch holds inputs of one shape (as many endings each, say).
            if batch and _shape(values) != _shape(batch[0][1]):
                flush()
            batch.append(((source.name, number), values, passed))
            if len(batch) == settings.batch_size:
                flush()
        flush()
        logs.log_info("Read %s", source.describe())
    progress.done()
    return done, refused


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


def _listen(settings):
    """The server of `settings`, listening: its flags checked and its port
    bound before the model loads, so that a busy port or a bad address is
    one line naming the flag."""
    if not 0 <= settings.port <= 65535:
        raise InputError("--port=%d: a port is 0 (any free one) to 65535" % settings.port)
    if not re.fullmatch(r"[^/:?#\s]+", settings.model_name):
        raise InputError("--model_name=%r: a name for the URLs, without /, :, ?, # or spaces"
                         % settings.model_name)
    counts = [name for name in rest_api.ServerLimits._fields if name != "timeout_seconds"]
    for name in counts:
        if getattr(settings, name) < 1:
            raise InputError("--%s=%d: must be at least 1" % (name, getattr(settings, name)))
    if not settings.client_timeout_seconds > 0:
        raise InputError("--client_timeout_seconds=%g: must be more than 0"
                         % settings.client_timeout_seconds)
    if settings.max_batch_size < 1:
        raise InputError("--max_batch_size=%d: must be at least 1" % settings.max_batch_size)
    if not 0 <= settings.batch_timeout_micros <= 10 ** 6:
        raise InputError("--batch_timeout_micros=%d: must be 0 to 1000000 (a second)"
                         % settings.batch_timeout_micros)
    limits = rest_api.ServerLimits(timeout_seconds=settings.client_timeout_seconds,
                                   **{name: getattr(settings, name) for name in counts})
    try:
        return rest_server.make_server(None, settings.host, settings.port, settings.model_name,
                                       limits=limits,
                                       log_every_seconds=settings.log_every_seconds,
                                       batch_settings=(settings.max_batch_size,
                                                       settings.batch_timeout_micros))
    except socket.gaierror as e:
        raise InputError("--host=%s: no address of this machine, nor a name of one (%s)"
                         % (settings.host, e.strerror))
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise InputError("--port=%d: another program listens there (%s)"
                             % (settings.port, e.strerror))
        if e.errno == errno.EADDRNOTAVAIL:
            raise InputError("--host=%s: no network interface of this machine has that "
                             "address (%s)" % (settings.host, e.strerror))
        if e.errno == errno.EACCES:
            raise InputError("--port=%d: not allowed to listen there (%s; ports below 1024 "
                             "need privileges)" % (settings.port, e.strerror))
        raise InputError("--host=%s --port=%d: cannot listen there (%s)"
                         % (settings.host, settings.port, e.strerror or e))


def _check_settings(settings):
    """The checks of the flags against each other, before anything loads."""
    settings_lib.require(settings, "model_dir")
    if settings.input_format == "swag_csv":
        raise InputError("--input_format=swag_csv is for run_swag.py; here: jsonl, tsv, csv "
                         "or text")
    if settings.batch_size < 1:
        raise InputError("--batch_size must be at least 1, got %d" % settings.batch_size)
    if settings.port is not None and (settings.input_file or settings.output_file):
        raise InputError("--port serves the model; --input_file and --output_file label "
                         "files: give one or the other")
    if settings.port is not None and settings.input_columns:
        raise InputError("--input_columns names the columns of files to label; --port "
                         "serves requests, which name the inputs")


def serve(settings, server, model):
    """Serves `model` on the listening `server` until Ctrl-C, after its
    warm-up (the first call of a signature optimises its graph: seconds at
    BERT-Base size, done before anyone is told to send requests)."""
    started = time.monotonic()
    count, source = model.warm_up()
    logs.log_info("Warmed up with %d request%s (%s) in %.1f s", count, "" if count == 1
                  else "s", source or "one per signature: the export has no warm-up file",
                  time.monotonic() - started)
    server.model = model
    host = server.server_address[0]
    logs.log_info("Serving at http://%s:%d/v1/models/%s, a page to try it at / (Ctrl-C stops)",
                  "[%s]" % host if ":" in host else host, server.server_address[1],
                  settings.model_name)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def label_files(settings, model, formats, columns):
    """Labels the inputs of `formats` (file -> format) into --output_file
    (or standard output), after checking the flags against the model's
    signature: --signature_name, --input_columns' inputs and --id_column."""
    try:
        signature = model.signature(settings.signature_name)
    except RequestError as e:
        raise InputError("--signature_name: %s" % e)
    unknown = sorted(set(columns) - set(signature.inputs))
    if unknown:
        raise InputError("--input_columns: the signature %s has no input %s (it takes %s)"
                         % (signature.name, ", ".join(unknown),
                            ", ".join(sorted(signature.inputs))))
    id_field = settings.id_column or rest_api.ID_FIELD
    if id_field in signature.inputs or id_field in signature.output_names:
        raise InputError("--id_column=%s: the signature %s has an %s of that name"
                         % (id_field, signature.name,
                            "input" if id_field in signature.inputs else "output"))
    fields = labelling_input.input_fields(signature, model.tokenizer_config, columns)
    sources = ((labelling_input.Source(name, formats[name]), stream)
               for name, stream in labelling_input.sources(
                   [name for name in formats if name != STDIN]))
    if not settings.output_file:
        try:
            done, refused = label_inputs(settings, model, sys.stdout, sources, fields,
                                         id_field)
            sys.stdout.flush()
        except BrokenPipeError:
            raise _reader_gone()
        logs.log_info("Standard output: %s", _lines_written(done, refused))
        return
    directory = os.path.dirname(settings.output_file)
    if directory:
        file_io.gfile().makedirs(directory)  # As check_labelling_flags found it can be.
    with file_io.atomic_output(settings.output_file) as writer:
        done, refused = label_inputs(settings, model, writer, sources, fields, id_field)
    file_io.report_output(settings.output_file, _lines_written(done, refused))


# ---------------------------------------------------------------------------

def main(_):
    settings = settings_lib.from_flags(Settings)
    _check_settings(settings)
    columns = labelling_input.parse_input_columns(settings.input_columns)
    formats = check_labelling_flags(settings) if settings.port is None else {}
    server = _listen(settings) if settings.port is not None else None  # Before the model.
    try:
        model = exported_model.Model(settings.model_dir)
    except BaseException:
        if server is not None:
            server.server_close()
        raise
    logs.log_info("Model %s (version %s), signatures: %s", model.path, model.version,
                  ", ".join(sorted(model.signature_defs)))
    if server is not None:
        serve(settings, server, model)
    else:
        label_files(settings, model, formats, columns)


def _lines_written(done, refused):
    """What the output holds, for the log: one line per input."""
    return "%d lines, one per input: %d labelled%s" % (
        done + refused, done, ", %d refused (lines with \"error\")" % refused if refused else "")

if __name__ == "__main__":
    script_runner.run_script(main)
