"""TensorFlow Serving's warm-up requests: the file an export leaves in its
assets.extra/ and a server runs before it answers anyone, so that the first
request costs what the later ones do (TensorFlow optimises a signature's
graph on its first call, which takes seconds at BERT's sizes).

The file, ``assets.extra/tf_serving_warmup_requests``, is a TFRecord file
whose records are serialized ``tensorflow.serving.PredictionLog`` protos.
There is no TensorFlow Serving package here, so the few fields used are
written and read directly in protobuf's wire format
(tensorflow_serving/apis/prediction_log.proto, predict.proto, model.proto):

    PredictionLog  { PredictLog predict_log = 6; }
    PredictLog     { PredictRequest request = 1; }
    PredictRequest { ModelSpec model_spec = 1;
                     map<string, tensorflow.TensorProto> inputs = 2; }
    ModelSpec      { string signature_name = 3; }

A map is written as repeated entries {string key = 1; TensorProto value = 2;};
the tensors are TensorFlow's own TensorProto.
"""

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import tensor_pb2

# The file's name in a SavedModel's assets.extra/, as TF Serving looks for it.
FILE_NAME = "tf_serving_warmup_requests"

# What each text input of a warm-up request holds.
TEXT = "A short text that warms the model up."

_PREDICT_LOG, _REQUEST, _MODEL_SPEC, _INPUTS, _SIGNATURE_NAME = 6, 1, 1, 2, 3
_KEY, _VALUE = 1, 2
_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5


def example_requests(signature_defs, text=TEXT, empty=()):
    """One request per signature (name -> SignatureDef, in name order), of
    one instance: each text input `text` (for a rank-2 input, one text in a
    list), but "" for those named in `empty` (optional inputs, as a request
    that leaves them out), each number input zeros: one per instance, and
    for a rank of 2 or more two along its last axis (for an id signature:
    two [PAD] pieces, masked out, of segment 0).

    Returns:
      A list of (signature name, input name -> NumPy array [1, ...]).
    """
    requests = []
    for signature_name in sorted(signature_defs):
        arrays = {}
        for name, info in signature_defs[signature_name].inputs.items():
            dtype, rank = tf.as_dtype(info.dtype), len(info.tensor_shape.dim)
            # (Rank 1: one value per instance, a tagger's word index.)
            shape = ([1] * (rank - 1) + [1 if dtype == tf.string or rank == 1 else 2]
                     if rank else [])
            if dtype == tf.string:
                arrays[name] = np.full(shape, b"" if name in empty else text.encode("utf-8"),
                                       dtype=object)
            else:
                arrays[name] = np.zeros(shape, dtype=dtype.as_numpy_dtype)
        requests.append((signature_name, arrays))
    return requests


def _varint(value):
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number, data):
    """A length-delimited field (a string, bytes or a message)."""
    return _varint(number << 3 | _LENGTH) + _varint(len(data)) + data


def encode(signature_name, arrays):
    """The serialized PredictionLog of a PredictRequest to `signature_name`
    with the inputs `arrays` (name -> NumPy array or value)."""
    entries = b"".join(
        _field(_INPUTS, _field(_KEY, name.encode("utf-8")) + _field(
            _VALUE, tf.make_tensor_proto(arrays[name]).SerializeToString()))
        for name in sorted(arrays))
    request = _field(_MODEL_SPEC, _field(_SIGNATURE_NAME, signature_name.encode("utf-8")))
    return _field(_PREDICT_LOG, _field(_REQUEST, request + entries))


def _fields(data):
    """(number, value) of each field of a serialized message: bytes for a
    length-delimited field, an int for the others. Raises ValueError for
    data that is no message."""
    at = 0

    def varint():
        nonlocal at
        value = shift = 0
        while True:
            if at >= len(data) or shift > 63:
                raise ValueError("a varint runs past the end of the message")
            byte = data[at]
            at += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    while at < len(data):
        key = varint()
        number, kind = key >> 3, key & 7
        if kind == _VARINT:
            yield number, varint()
        elif kind in (_FIXED64, _FIXED32):
            size = 8 if kind == _FIXED64 else 4
            if at + size > len(data):
                raise ValueError("a fixed-size field runs past the end of the message")
            yield number, int.from_bytes(data[at:at + size], "little")
            at += size
        elif kind == _LENGTH:
            size = varint()
            if at + size > len(data):
                raise ValueError("field %d runs past the end of the message" % number)
            yield number, bytes(data[at:at + size])
            at += size
        else:
            raise ValueError("field %d has wire type %d, which protobuf 3 does not write"
                             % (number, kind))


def _only(data, number, what):
    """The last value of field `number` in `data` (protobuf's rule for a
    field written twice); ValueError naming `what` where there is none."""
    values = [value for n, value in _fields(data) if n == number]
    if not values or not isinstance(values[-1], bytes):
        raise ValueError("no %s" % what)
    return values[-1]


def decode(data):
    """(signature name, name -> NumPy array) of a serialized PredictionLog
    holding a PredictRequest; ValueError for any other record."""
    request = _only(_only(data, _PREDICT_LOG, "predict_log (the one kind of warm-up record "
                                              "this server runs)"), _REQUEST, "request")
    spec = [value for number, value in _fields(request) if number == _MODEL_SPEC]
    signature_name = ""
    if spec:
        names = [v for n, v in _fields(spec[-1]) if n == _SIGNATURE_NAME]
        signature_name = names[-1].decode("utf-8") if names else ""
    arrays = {}
    for number, entry in _fields(request):
        if number == _INPUTS:
            fields = dict(_fields(entry))
            tensor = tensor_pb2.TensorProto.FromString(fields.get(_VALUE, b""))
            arrays[fields.get(_KEY, b"").decode("utf-8")] = tf.make_ndarray(tensor)
    return signature_name or tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY, arrays


def write(path, requests):
    """Writes `requests` ((signature name, name -> array) pairs) to `path`
    as TF Serving's warm-up file."""
    with tf.io.TFRecordWriter(path) as writer:
        for signature_name, arrays in requests:
            writer.write(encode(signature_name, arrays))


def read(path):
    """The requests of the warm-up file `path`: a list of (signature name,
    name -> array). Raises ValueError naming the record that is not a
    PredictionLog of a PredictRequest, tf.errors.DataLossError for a file
    that is not TFRecord."""
    requests = []
    for index, record in enumerate(tf.data.TFRecordDataset(path).as_numpy_iterator()):
        try:
            requests.append(decode(record))
        except ValueError as e:
            raise ValueError("record %d: %s" % (index + 1, e))
    return requests
