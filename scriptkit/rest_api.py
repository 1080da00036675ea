"""TensorFlow Serving's REST API without the HTTP: a request's JSON
decoded and checked, run on an `exported_model.Model`, and answered
(:predict, the model's status and metadata). `rest_server.py` carries these
over HTTP.

Whatever arrives is checked before it costs more than its own size: the
JSON's depth (before it is decoded), then the request's layout, each
value's rank, dimensions, type and range, and the amount of text the model
is given (texts are cut where the model stops reading). A request that
fails a check raises `RequestError` naming what was wrong.
"""

import base64
import collections
import json
import math
import re

import numpy as np
import tensorflow as tf
from google.protobuf import json_format

from scriptkit import exported_model
import tokenization
from scriptkit.exported_model import RequestError

# What one request and the server may take: the defaults of the server's
# flags (timeout_seconds is --client_timeout_seconds) and of
# rest_server.make_server. max_buffered_bytes: the bytes of requests not
# yet answered that the server holds, all connections together (it has a
# default, for limits made without it).
ServerLimits = collections.namedtuple("ServerLimits", [
    "max_request_bytes", "max_instances", "max_text_chars", "max_windows_per_request",
    "max_requests_in_flight", "max_connections", "timeout_seconds", "max_buffered_bytes"],
    defaults=[256 << 20])
# max_windows_per_request: as many model rows as --max_instances instances
# without windows give, so that only texts read in windows meet it.
DEFAULT_LIMITS = ServerLimits(max_request_bytes=4 << 20, max_instances=256,
                              max_text_chars=200000, max_windows_per_request=256,
                              max_requests_in_flight=4, max_connections=4096,
                              timeout_seconds=30, max_buffered_bytes=256 << 20)

# The field of a request's instance (and of a JSON Lines row) that is no
# input: copied as it is to the instance's prediction (predict.py's
# --id_column names another for files).
ID_FIELD = "id"

# What a :predict request held, for the log: its instances, and per text
# input the texts cut and the characters left unread (name -> (texts,
# characters)).
RequestHeld = collections.namedtuple("RequestHeld", ["instances", "cut"])

# The deepest a request's JSON may nest, objects and lists together. A
# request needs 2 levels around its values, an instance object 1, a
# {"b64": ...} object 1, and the exports' inputs have rank 3 at most.
# Deeper documents are refused before they are decoded, so json.loads
# never recurses deeply.
MAX_JSON_DEPTH = 16

# The most characters a number of a request may have: int64 has 19 digits
# and a sign. Longer ones are refused before Python converts them.
_MAX_NUMBER_CHARS = 40

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


def printable(text, limit=60):
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
        return "the number %s" % printable(repr(value), 30)
    if isinstance(value, str):
        return "the text %r" % (value[:30] + ("..." if len(value) > 30 else ""))
    if isinstance(value, list):
        return "a list of %d value%s" % (len(value), "" if len(value) == 1 else "s")
    return "an object of %s" % (_names(value) or "no keys")


def _names(names, most=5):
    """Up to `most` names (printable, cut), joined by commas."""
    names = sorted(names)
    shown = ", ".join(printable(name, 40) for name in names[:most])
    return shown + (" and %d more" % (len(names) - most) if len(names) > most else "")


def _columns(body, signature, max_instances, optional=()):
    """The request's values per input, whether the request is in row
    format, and the instances' ids: (name -> [its value in each instance],
    True, ids) for {"instances": [...]}, (name -> its value for the whole
    batch, False, None) for {"inputs": ...}. With one input, an instance
    (or "inputs") may be the input's value itself, as in TensorFlow
    Serving. An instance object may hold an "id" (`ID_FIELD`, not an input
    of the signature), any JSON value, which its prediction gets back (ids:
    one per instance, None where it has none; None where no instance has
    one); an input of `optional` it leaves out is "" (the text alone, for
    text_b; the predicted label, for an explanation's label). Raises
    RequestError for a request of neither format, too many instances (more
    than `max_instances`), or an instance that does not name exactly the
    signature's inputs; the values are checked by `_checked_inputs`."""
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
        value = dict(value)
        for name in optional:
            if name in names:
                value.setdefault(name, "")
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
        ids = [instance.pop(ID_FIELD, None) if isinstance(instance, dict)
               and ID_FIELD not in names else None for instance in instances]
        instances = [named(instance, "instances[%d]" % i)
                     for i, instance in enumerate(instances)]
        return ({name: [instance[name] for instance in instances] for name in names}, True,
                ids if any(i is not None for i in ids) else None)
    if "inputs" in body:
        return named(body["inputs"], "\"inputs\""), False, None
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
_CJK = "".join("%s-%s" % (chr(low), chr(high)) for low, high in tokenization.CJK_RANGES)
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
    sentence embeddings, max_query_length for question answering); None
    where it reads the whole text (a tagger's document, windows without
    max_windows, a question answering context, an input it does not know).

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
        binary = name.endswith(exported_model.BINARY_SUFFIX)
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


def _check_windows(signature, arrays, limit):
    """How many windows (rows of max_seq_length pieces,
    `exported_model.Signature.windows`) the model would run for the checked
    `arrays`, counted by the export's own tokenizer (a few milliseconds)
    before the model runs, or None where the signature does not say.
    Raises RequestError where that is more than `limit`."""
    windows = signature.windows(arrays)
    if windows is not None and windows > limit:
        raise RequestError(
            "the request would have the model run %d windows (rows of at most the export's "
            "max_seq_length pieces); this server runs at most %d per request "
            "(--max_windows_per_request)" % (windows, limit))
    return windows


def predict_response(model, body, limits=None, batcher=None):
    """The JSON answer of :predict for the decoded request `body`, and what
    the request held (RequestHeld, for the log). `limits`: a
    ServerLimits (default: `DEFAULT_LIMITS`); `batcher`: a
    `batching.Batcher` that runs the model, merging concurrent requests
    (None: the model runs in this thread, alone). Raises RequestError for a
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
    optional = tuple(model.tokenizer_config.get("optional_inputs") or ())
    columns, rows, ids = _columns(body, signature, limits.max_instances, optional)
    arrays, held = _checked_inputs(model, signature, columns, rows, limits)
    windows = _check_windows(signature, arrays, limits.max_windows_per_request)
    outputs = (batcher.run(signature, arrays, windows) if batcher
               else signature.run(arrays))
    if not rows:
        if len(outputs) == 1:
            (only,) = outputs.items()
            return {"outputs": exported_model.json_value(*only)}, held
        return {"outputs": {n: exported_model.json_value(n, v) for n, v in outputs.items()}}, held
    batch = len(next(iter(outputs.values())))
    if len(outputs) == 1 and ids is None:
        (n, v), = outputs.items()
        return {"predictions": [exported_model.json_value(n, v[i]) for i in range(batch)]}, held
    # Instances with ids: each prediction an object, its id among its outputs.
    predictions = [{n: exported_model.json_value(n, v[i]) for n, v in outputs.items()}
                   for i in range(batch)]
    for prediction, instance_id in zip(predictions, ids or ()):
        if instance_id is not None:
            prediction[ID_FIELD] = instance_id
    return {"predictions": predictions}, held


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
