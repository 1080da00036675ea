"""The output files of extract_features.py, written as its predictions
arrive: JSON Lines (`JsonlWriter`, the original's format), TFRecord
(`TFRecordFeatureWriter`) and NumPy .npz (`NpzWriter`), each appearing
complete, under its name, only when closed (`make_writer` picks one by
--output_format).

Each writer takes (linex_index, tokens, [one array per layer]) per input
line, where an array is float [num_tokens, hidden] (per-token vectors) or
[hidden] (a pooled vector); `close` completes the file, `abort` removes what
was written.

In: the vectors of each input line. Out: the file. Imports TensorFlow (for
tf.io.gfile and tf.train.Example).
"""

import json
import os
import shutil
import tempfile
import zipfile

import numpy as np
import tensorflow.compat.v1 as tf

from scriptkit import file_io
from scriptkit import input_pipeline


def make_writer(output_format, output_file, layer_indexes, npz_dtype="float32"):
    """The writer of `output_file` in `output_format` ("jsonl", "tfrecord" or
    "npz", whose floats are `npz_dtype`), for the layers `layer_indexes`."""
    if output_format == "jsonl":
        return JsonlWriter(output_file, layer_indexes)
    if output_format == "tfrecord":
        return TFRecordFeatureWriter(output_file, layer_indexes)
    return NpzWriter(output_file, layer_indexes, dtype=npz_dtype)


class JsonlWriter(file_io.AtomicWriter):
    """JSON Lines with one entry per token (pooling "none"), or with pooling one line
    {"linex_index": i, "layers": [{"index": -1, "values": [...]}, ...]}."""

    def __init__(self, output_file, layer_indexes):
        super().__init__(output_file, lambda path: tf.io.gfile.GFile(path, "w"))
        self._layer_indexes = layer_indexes

    @staticmethod
    def _values(vector):
        # Python's round() of the float64 value of each float32, not
        # np.round, which can differ in the last digit: the same vectors
        # must give the same text as Google's script.
        return [round(x, 6) for x in vector.tolist()]

    def _layers(self, vectors):
        """[{"index": layer index, "values": [...]}, ...] of one vector per
        layer."""
        return [{"index": index, "values": self._values(vector)}
                for index, vector in zip(self._layer_indexes, vectors)]

    def write(self, linex_index, tokens, layers):
        # Plain dicts keep their insertion order, which json.dumps follows:
        # the keys come out in the documented order.
        record = {"linex_index": linex_index}
        if layers and layers[0].ndim == 1:
            record["layers"] = self._layers(layers)
        else:
            record["features"] = [
                {"token": token, "layers": self._layers([layer[t] for layer in layers])}
                for t, token in enumerate(tokens)]
        self._writer.write(json.dumps(record) + "\n")


class TFRecordFeatureWriter(file_io.AtomicWriter):
    """One tf.train.Example per input line with int64 "linex_index" and
    "num_tokens", bytes "tokens" (pooling "none" only) and, per layer, float
    "layer_<index>" holding the flattened [num_tokens, hidden] (or [hidden])
    vectors."""

    def __init__(self, output_file, layer_indexes):
        super().__init__(output_file, tf.io.TFRecordWriter)
        self._layer_indexes = layer_indexes

    def write(self, linex_index, tokens, layers):
        feature = {
            "linex_index": input_pipeline.int64_feature([linex_index]),
            "num_tokens": input_pipeline.int64_feature([len(tokens)]),
        }
        if layers[0].ndim == 2:
            feature["tokens"] = tf.train.Feature(bytes_list=tf.train.BytesList(
                value=[t.encode("utf-8") for t in tokens]))
        for index, layer in zip(self._layer_indexes, layers):
            feature["layer_%d" % index] = tf.train.Feature(
                float_list=tf.train.FloatList(value=layer.reshape(-1)))
        example = tf.train.Example(features=tf.train.Features(feature=feature))
        self._writer.write(example.SerializeToString())


class NpzWriter:
    """A NumPy .npz (uncompressed zip of .npy arrays), written without
    holding the features in memory: arrays are appended to local raw files
    while predictions arrive, and the archive is assembled from them at the
    end.

    Arrays: "linex_index" int64 [N], "num_tokens" int32 [N], and per layer
    "layer_<index>": [total_tokens, hidden] (pooling "none"; example i's rows
    start at the sum of num_tokens[:i]) or [N, hidden] (pooling); with
    pooling "none" also "tokens" (unicode) [total_tokens].
    """

    def __init__(self, output_file, layer_indexes, dtype=np.float32):
        self._layer_indexes = layer_indexes
        self._path = output_file
        self._dtype = np.dtype(dtype)
        self._dir = tempfile.mkdtemp(prefix="extract_features_npz_")
        self._files = {}
        self._rows = 0
        self._hidden = None
        self._num_tokens = 0
        self._max_token_len = 1
        self._pooled = None
        self._count = 0

    def _append(self, name, array):
        f = self._files.get(name)
        if f is None:
            f = self._files[name] = open(os.path.join(self._dir, name), "wb")
        f.write(np.ascontiguousarray(array).tobytes())

    def write(self, linex_index, tokens, layers):
        self._count += 1
        self._pooled = layers[0].ndim == 1
        self._hidden = layers[0].shape[-1]
        self._append("linex_index", np.array([linex_index], dtype="<i8"))
        self._append("num_tokens", np.array([len(tokens)], dtype="<i4"))
        for index, layer in zip(self._layer_indexes, layers):
            self._append("layer_%d" % index, layer.astype(self._dtype.newbyteorder("<")))
        if not self._pooled:
            self._num_tokens += len(tokens)
            self._max_token_len = max([self._max_token_len] + [len(t) for t in tokens])
            self._append("tokens", "".join(t + "\n" for t in tokens).encode("utf-8"))

    def _arrays(self):
        """(name, dtype, shape, chunk iterator) of each array, in order."""
        rows = self._count if self._pooled else self._num_tokens
        arrays = [("linex_index", np.dtype("<i8"), (self._count,)),
                  ("num_tokens", np.dtype("<i4"), (self._count,))]
        if not self._pooled:
            arrays.append(("tokens", np.dtype("<U%d" % self._max_token_len), (rows,)))
        for index in self._layer_indexes:
            arrays.append(("layer_%d" % index, self._dtype.newbyteorder("<"),
                           (rows, self._hidden)))
        return arrays

    def _chunks(self, name, dtype):
        path = os.path.join(self._dir, name)
        if name == "tokens":
            # Fixed-width UTF-32 as NumPy stores unicode arrays.
            with open(path, "r", encoding="utf-8", newline="\n") as f:
                for line in f:
                    yield np.array([line[:-1]], dtype=dtype).tobytes()
            return
        with open(path, "rb") as f:
            while True:
                chunk = f.read(1 << 22)
                if not chunk:
                    return
                yield chunk

    def close(self):
        for f in self._files.values():
            f.close()
        try:
            zip_path = os.path.join(self._dir, "output.npz")
            with zipfile.ZipFile(zip_path, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
                for name, dtype, shape in self._arrays():
                    with zf.open(name + ".npy", "w", force_zip64=True) as entry:
                        np.lib.format.write_array_header_2_0(entry, {
                            "descr": np.lib.format.dtype_to_descr(dtype),
                            "fortran_order": False, "shape": shape})
                        for chunk in self._chunks(name, dtype):
                            entry.write(chunk)
            target = file_io.AtomicFile(self._path)
            tf.io.gfile.copy(zip_path, target.tmp_path, overwrite=True)
            target.commit()
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)

    def abort(self):
        for f in self._files.values():
            f.close()
        shutil.rmtree(self._dir, ignore_errors=True)
