"""The inputs of `predict.py`'s labelling: files (or standard input) read
into the rows a model's signature takes, one input per line or row.

A file's format is --input_format's, else told by its extension, never by
its content (`input_format`): JSON Lines (one object per line), TSV and CSV
(a header row naming the columns, then one input per row), or one text per
line (every line an input, blank ones too). Each input of the signature is
read from the field of its name, or from one its training run read
(`input_fields`: an export records them), or from --input_columns'. A row
that cannot give the signature's inputs is a `RequestError` in its place,
so that its output line can say why.

In: binary streams and a `exported_model.Signature`. Out: (line number,
input values or RequestError, passed fields) per input (`read_inputs`).
Imports TensorFlow (the signature's dtypes).
"""

import csv
import json
import os
import sys

import tensorflow as tf

from scriptkit import exported_model
from scriptkit import file_io
from scriptkit import logs
from scriptkit.errors import InputError
from scriptkit.exported_model import RequestError

# Formats told from a file's name (--input_format=auto); standard input is
# one text per line. Nothing is told from a file's content.
_EXTENSION_FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".tsv": "tsv",
                      ".csv": "csv", ".txt": "text"}
STDIN = "<stdin>"


def parse_input_columns(value):
    """--input_columns ("FIELD:INPUT,...") -> {input name: field name}.
    An input not named there is read from the field of its own name (or
    one its training run read, `input_fields`).

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


def input_format(name, flag_value):
    """The format of the input `name` (a file's path, or `STDIN`):
    `flag_value` (--input_format) unless "auto", else told by the file's
    extension; standard input is one text per line.

    Raises:
      InputError: "auto" for a file whose extension tells no format.
    """
    if flag_value != "auto":
        return flag_value
    if name == STDIN:
        return "text"
    extension = os.path.splitext(name)[1].lower()
    if extension not in _EXTENSION_FORMATS:
        raise InputError("--input_file %s: its extension tells no format (.jsonl, .ndjson, "
                         ".json, .tsv, .csv or .txt): give --input_format=jsonl, tsv, csv or "
                         "text" % name)
    return _EXTENSION_FORMATS[extension]


def input_fields(signature, config, columns=None):
    """Where each input of `signature` is read in a row: input name -> the
    fields (JSON Lines) or columns (TSV, CSV) that may hold it, in order of
    preference. A field is a name, or a list of names whose values make
    the input's list (SWAG's ending0, ending1, ...).

    Args:
      signature: the `exported_model.Signature` labelling the rows.
      config: the export's settings (`exported_model.Model.tokenizer_config`):
        its "input_fields" (input -> the column its training run read it
        from) are read besides the inputs' own names.
      columns: input -> field from --input_columns: that field alone.
    """
    recorded = config.get("input_fields") or {}
    fields = {}
    for name in signature.inputs:
        if columns and name in columns:
            fields[name] = [columns[name]]
        else:
            fields[name] = [name] + ([recorded[name]] if recorded.get(name) not in
                                     (None, name) else [])
    return fields


def _field_words(field):
    return "+".join(field) if isinstance(field, list) else field


def sources(paths):
    """(name, binary stream) of each input: the files `paths`, or standard
    input."""
    if not paths:
        yield STDIN, sys.stdin.buffer
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


def _decoded_lines(stream, source):
    """(line number, text) per line of `stream`; a line that is not UTF-8
    gives (number, RequestError). Blank lines are left out (counted in the
    `Source` `source`), but in one text per line, where each line is an
    input."""
    for number, raw in enumerate(_lines(stream), 1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            yield number, RequestError("not valid UTF-8 (%s)" % e.reason)
            continue
        if number == 1 and text.startswith("\ufeff"):
            text = text[1:]
        if source.data_format == "text" or text.strip():
            yield number, text
        else:
            source.blank_lines += 1


def _header(line, delimiter):
    """The fields of a TSV (no quoting) or CSV header line; csv.Error if it
    is not CSV."""
    if delimiter == "\t":
        return [field.strip() for field in line.split("\t")]
    return [field.strip() for field in next(csv.reader([line], strict=True), [])]


class Source:
    """What `read_inputs` found in one input: its format and counts, for
    the log.

    Attributes:
      name: the file's path, or `STDIN`.
      data_format: "jsonl", "tsv", "csv" or "text".
      inputs: the inputs read (each gives one output line).
      blank_lines: blank lines left out (JSON Lines, TSV, CSV).
    """

    def __init__(self, name, data_format):
        self.name, self.data_format = name, data_format
        self.inputs = self.blank_lines = 0

    def describe(self):
        what = {"jsonl": "JSON Lines", "tsv": "TSV", "csv": "CSV",
                "text": "one text per line"}[self.data_format]
        return "%s: %d inputs (%s%s)" % (
            self.name, self.inputs, what,
            ", %d blank lines left out" % self.blank_lines if self.blank_lines else "")


def read_inputs(source, stream, signature, fields, id_field=None, optional=()):
    """(line number, input values or RequestError, passed fields) per input
    of a source: values are name -> value for `signature`'s inputs; passed
    fields are {id_field: its value} where the row has that field (else
    {}), copied to the input's output line.

    One text per line: every line is an input, blank ones too. JSON Lines,
    TSV and CSV: every row is one (a TSV or CSV file's first line is its
    header); blank lines are no rows.

    Args:
      source: the `Source` read (its name and format; its counts are kept).
      stream: its binary stream.
      signature: the Signature labelling it.
      fields: input name -> the fields that may hold it (`input_fields`).
      id_field: the field passed through (--id_column, "id" by default), or
        None.
      optional: inputs a row may leave out (the text alone where text_b is
        missing, in an embedding export of text pairs): they are "".

    Raises:
      InputError: the source's format cannot give the signature's inputs.
    """
    name, data_format = source.name, source.data_format
    lines = _decoded_lines(stream, source)
    if data_format == "text":
        text_inputs = [n for n, spec in signature.inputs.items()
                       if spec.dtype == tf.string and spec.shape.rank == 1]
        needed = [n for n in signature.inputs if n not in optional]
        if len(text_inputs) < 1 or len(needed) > 1 or (needed and needed[0] not in text_inputs):
            raise InputError(
                "%s: one text per line fits a model with one text input; signature %s takes "
                "%s: give JSON Lines (.jsonl), or TSV/CSV (.tsv, .csv) with a header naming "
                "them" % (name, signature.name, ", ".join(sorted(signature.inputs))))
        text_input = needed[0] if needed else text_inputs[0]
        for number, line in lines:
            if number == 1 and name == STDIN and isinstance(line, str) and \
                    line.strip().startswith("{") and line.strip().endswith("}"):
                logs.log_warning("Standard input is read as one text per line; "
                                 "--input_format=jsonl reads it as JSON Lines")
            source.inputs += 1
            if isinstance(line, RequestError):
                yield number, line, {}
                continue
            values = {n: "" for n in signature.inputs}
            values[text_input] = line
            yield number, values, {}
        return
    if data_format == "jsonl":
        rows = _jsonl_rows(lines)
    else:
        rows = _delimited_rows(name, data_format, lines, signature, fields, optional)
    for number, row in rows:
        source.inputs += 1
        passed = {}
        if not isinstance(row, RequestError):
            if id_field is not None and id_field in row:
                passed = {id_field: row[id_field]}
            try:
                row = _row_values(row, signature, fields, optional)
            except RequestError as e:
                row = e
        yield number, row, passed


def _field_value(row, field):
    """The value of `field` (a name, or a list of names) in `row`, or
    KeyError where the row lacks it."""
    if isinstance(field, list):
        return [row[name] for name in field]
    return row[field]


def _row_values(row, signature, fields, optional):
    """The signature's inputs from a row (a dict with their `fields`, and
    perhaps others), each checked against its signature input: one value
    per example (a text: a string or {"b64": ...}), or for an input of
    lists (SWAG's endings, the id signature's ids) a non-empty list of
    them; an `optional` input the row lacks is ""."""
    values = {}
    for name, spec in signature.inputs.items():
        for field in fields[name]:
            try:
                value = _field_value(row, field)
                break
            except KeyError:
                continue
        else:
            if name not in optional:
                names = [_field_words(f) for f in fields[name]]
                raise RequestError("no %s" % " (nor ".join(names) + ")" * (len(names) - 1)
                                   + ("" if names[0] == name else " (input %s)" % name))
            value = ""
        _check_value(name, value, spec.shape.rank - 1, spec.dtype)
        values[name] = value
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
    """(line number, row dict or RequestError) per line of JSON Lines."""
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


def _delimited_rows(name, data_format, lines, signature, fields, optional):
    """(line number, row dict (column -> value) or RequestError) per data
    row of a TSV/CSV source, whose first line is its header: the header
    must name a column for each input (one of its `fields`) that is not
    `optional`."""
    first = next(lines, None)
    if first is None:
        return
    if isinstance(first[1], RequestError):
        raise InputError("%s, line %d: the header %s" % (name, first[0], first[1]))
    delimiter = "\t" if data_format == "tsv" else ","
    try:
        header = _header(first[1], delimiter)
    except csv.Error as e:
        raise InputError("%s, line %d: not a CSV header (%s)" % (name, first[0], e))

    def found(field):
        return all(n in header for n in field) if isinstance(field, list) else field in header
    missing = [n for n in sorted(fields) if n not in optional
               and not any(found(field) for field in fields[n])]
    lists = [n for n, spec in signature.inputs.items() if spec.shape.rank != 1
             and not any(isinstance(field, list) and found(field) for field in fields[n])]
    if lists:
        raise InputError("%s: the input %s is a list per example: give JSON Lines"
                         % (name, ", ".join(lists)))
    if missing:
        shown = ", ".join(repr(field) for field in header)
        named = ", ".join(" or ".join(_field_words(f) for f in fields[n]) for n in missing)
        if len(fields[missing[0]]) == 1 and fields[missing[0]][0] != missing[0]:
            raise InputError("%s, line %d: the header has no column %s (--input_columns); "
                             "columns found: %s" % (name, first[0], named, shown))
        looked = "" if all(fields[n] == [n] for n in missing) else "; looked for %s" % named
        raise InputError(
            "%s, line %d: the header names no column for the model's input %s (it takes %s%s; "
            "columns found: %s): map one with --input_columns=COLUMN:%s"
            % (name, first[0], ", ".join(missing), ", ".join(sorted(signature.inputs)), looked,
               shown, missing[0]))
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
