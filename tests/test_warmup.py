"""warmup.py: TF Serving's warm-up file, written with every export and run
by predict.py before it serves.

The reference for the wire format is protobuf's own encoder and parser, on
message types declared here with the field numbers of TensorFlow Serving's
protos (tensorflow_serving/apis/prediction_log.proto, predict.proto,
model.proto; the map of inputs as its repeated entries, the TensorProto
as the bytes it is serialized to, which protobuf writes alike)."""

import logging
import os
import shutil
from unittest import mock

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
from absl import flags
from absl.testing import flagsaver
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from tensorflow.core.framework import tensor_pb2

from scriptkit import errors
from scriptkit import exported_model
import predict
from scriptkit import async_http
from scriptkit import serving
from scriptkit import warmup

FLAGS = flags.FLAGS


def _serving_messages():
    """PredictionLog, as TF Serving declares the fields used here."""
    proto = descriptor_pb2.FileDescriptorProto(name="warmup_test.proto",
                                               package="tensorflow.serving", syntax="proto3")
    field = descriptor_pb2.FieldDescriptorProto
    optional, repeated = field.LABEL_OPTIONAL, field.LABEL_REPEATED

    def message(name, *fields):
        declared = proto.message_type.add(name=name)
        for field_name, number, kind, label, type_name in fields:
            declared.field.add(name=field_name, number=number, type=kind, label=label,
                               type_name=type_name)
        return declared

    message("ModelSpec", ("name", 1, field.TYPE_STRING, optional, None),
            ("signature_name", 3, field.TYPE_STRING, optional, None))
    message("InputsEntry", ("key", 1, field.TYPE_STRING, optional, None),
            ("value", 2, field.TYPE_BYTES, optional, None))
    message("PredictRequest",
            ("model_spec", 1, field.TYPE_MESSAGE, optional, ".tensorflow.serving.ModelSpec"),
            ("inputs", 2, field.TYPE_MESSAGE, repeated, ".tensorflow.serving.InputsEntry"))
    message("PredictLog", ("request", 1, field.TYPE_MESSAGE, optional,
                           ".tensorflow.serving.PredictRequest"))
    message("ClassifyLog", ("request", 1, field.TYPE_BYTES, optional, None))
    message("PredictionLog",
            ("classify_log", 2, field.TYPE_MESSAGE, optional, ".tensorflow.serving.ClassifyLog"),
            ("predict_log", 6, field.TYPE_MESSAGE, optional, ".tensorflow.serving.PredictLog"))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    descriptor = pool.FindMessageTypeByName("tensorflow.serving.PredictionLog")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(descriptor)
    return message_factory.MessageFactory(pool).GetPrototype(descriptor)


def test_records_are_prediction_logs_as_protobuf_reads_and_writes_them():
    prediction_log = _serving_messages()
    arrays = {"text": np.array([b"caf\xc3\xa9", b""], dtype=object),
              "input_ids": np.array([[2, 70000, 3]], np.int32)}
    parsed = prediction_log.FromString(warmup.encode("serving_ids", arrays))
    assert parsed.HasField("predict_log") and not parsed.HasField("classify_log")
    request = parsed.predict_log.request
    assert request.model_spec.signature_name == "serving_ids"
    inputs = {entry.key: tf.make_ndarray(tensor_pb2.TensorProto.FromString(entry.value))
              for entry in request.inputs}
    assert sorted(inputs) == ["input_ids", "text"]
    assert inputs["text"].tolist() == [b"caf\xc3\xa9", b""]
    assert inputs["input_ids"].dtype == np.int32
    np.testing.assert_array_equal(inputs["input_ids"], arrays["input_ids"])

    # Written by protobuf (a model name, which this server ignores, too):
    # read back the same; an empty signature name is serving_default.
    log = prediction_log()
    request = log.predict_log.request
    request.model_spec.name = "squad"
    request.model_spec.signature_name = "serving_ids"
    for name, value in arrays.items():
        request.inputs.add(key=name, value=tf.make_tensor_proto(value).SerializeToString())
    name, read = warmup.decode(log.SerializeToString())
    assert name == "serving_ids" and sorted(read) == ["input_ids", "text"]
    assert read["text"].tolist() == arrays["text"].tolist()
    np.testing.assert_array_equal(read["input_ids"], arrays["input_ids"])
    request.model_spec.signature_name = ""
    assert warmup.decode(log.SerializeToString())[0] == "serving_default"
    other = prediction_log()
    other.classify_log.request = b"x"
    with pytest.raises(ValueError, match="no predict_log"):
        warmup.decode(other.SerializeToString())


def _export_copy(exports, name, tmp_path):
    folder = str(tmp_path / name)
    shutil.copytree(exports[name], folder)
    return folder


@pytest.mark.parametrize("name", ["pair", "ner", "swag"])
def test_each_export_warms_each_signature_up_with_its_file(exports, name):
    """The file holds one request per signature, of one instance of the
    signature's inputs, and running them (as a server would) works."""
    path = os.path.join(exports[name], "assets.extra", warmup.FILE_NAME)
    requests = warmup.read(path)
    model = exported_model.Model(exports[name])
    # A classifier's and a tagger's export explain too (a classifier's label
    # left empty: the predicted one).
    assert [n for n, _ in requests] == ([serving.EXPLAIN_SIGNATURE] if name != "swag" else []) \
        + [serving.TEXT_SIGNATURE, serving.IDS_SIGNATURE]
    for signature_name, arrays in requests:
        if signature_name == serving.EXPLAIN_SIGNATURE and name == "pair":
            assert arrays["label"].tolist() == [b""]
        signature = model.signature(signature_name)
        assert sorted(arrays) == sorted(signature.inputs)
        for input_name, array in arrays.items():
            spec = signature.inputs[input_name]
            assert array.ndim == spec.shape.rank and array.shape[0] == 1
            assert array.dtype == (object if spec.dtype == tf.string
                                   else spec.dtype.as_numpy_dtype)
    ran = []
    run = exported_model.Signature.run
    with mock.patch.object(exported_model.Signature, "run", autospec=True,
                           side_effect=lambda self, arrays: ran.append(self.name)
                           or run(self, arrays)):
        assert model.warm_up() == (len(requests), path)
    assert ran == [n for n, _ in requests]


def test_without_a_file_each_signature_gets_one_request(exports, tmp_path):
    folder = _export_copy(exports, "pair", tmp_path)
    os.remove(os.path.join(folder, "assets.extra", warmup.FILE_NAME))
    model = exported_model.Model(folder)
    assert model.warm_up() == (3, None)  # explain, serving_default, serving_ids


def test_a_broken_file_stops_the_server_naming_it(exports, tmp_path):
    folder = _export_copy(exports, "pair", tmp_path)
    path = os.path.join(folder, "assets.extra", warmup.FILE_NAME)
    with open(path, "wb") as f:
        f.write(b"not a TFRecord file")
    model = exported_model.Model(folder)
    with pytest.raises(errors.InputError, match="the warm-up file %s cannot be read" % path):
        model.warm_up()
    # A request the model refuses: as TF Serving, the model does not serve.
    warmup.write(path, [("serving_ids", {"input_ids": np.zeros([1, 2], np.int32),
                                         "input_mask": np.full([1, 2], 5, np.int32),
                                         "segment_ids": np.zeros([1, 2], np.int32)})])
    with pytest.raises(errors.InputError, match=r"warm-up request 1 of %s \(signature "
                                                r"serving_ids\) failed: .*input input_mask: 5"
                                                % path):
        model.warm_up()


def test_predict_warms_up_before_it_says_it_serves(exports, caplog):
    """predict.py --port: the warm-up's requests run, and their line is
    logged, before the line that says where it serves."""
    order = []
    run = exported_model.Signature.run

    def serve_forever(self):
        order.append("serve")
        raise KeyboardInterrupt

    values = dict(model_dir=os.path.dirname(exports["pair"]), input_file=None,
                  output_file=None, port=0, host="127.0.0.1", model_name="m")
    if not FLAGS.is_parsed():
        FLAGS.mark_as_parsed()
    with caplog.at_level(logging.INFO, logger="tensorflow"), flagsaver.flagsaver(**values), \
            mock.patch.object(async_http.Server, "serve_forever", serve_forever), \
            mock.patch.object(exported_model.Signature, "run", autospec=True,
                              side_effect=lambda self, arrays: order.append(self.name)
                              or run(self, arrays)):
        predict.main([])
    assert order == [serving.EXPLAIN_SIGNATURE, serving.TEXT_SIGNATURE, serving.IDS_SIGNATURE,
                     "serve"]
    lines = [r.getMessage() for r in caplog.records]
    warmed = [i for i, line in enumerate(lines) if line.startswith("Warmed up with 3 requests")]
    serving_at = [i for i, line in enumerate(lines) if line.startswith("Serving at http://")]
    assert len(warmed) == len(serving_at) == 1 and warmed[0] < serving_at[0], lines
    assert warmup.FILE_NAME in lines[warmed[0]]
