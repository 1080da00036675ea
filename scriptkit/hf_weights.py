"""A Hugging Face model's weights as NumPy arrays, for convert_checkpoint.py:
model.safetensors, its shards (model.safetensors.index.json) or
pytorch_model.bin (and its shards), local or remote (gs://).

The files are untrusted input: safetensors files are read with the
``safetensors`` NumPy API (no code runs; bfloat16 ones by parsing the
format directly), and ``pytorch_model.bin`` only with PyTorch's
``weights_only=True`` loader, never a plain unpickle.

In: a Hugging Face model directory. Out: name -> np.ndarray;
errors.InputError naming the file at fault. Imports TensorFlow (for
tf.io.gfile); safetensors, and PyTorch for .bin files, where used.
"""

import json
import os
import shutil
import struct
import tempfile

import numpy as np
import tensorflow.compat.v1 as tf

from scriptkit import file_io
from scriptkit.errors import InputError


def _load_safetensors(path):
    """name -> np.ndarray from one .safetensors file (bfloat16 -> float32)."""
    from safetensors.numpy import load_file
    local_path, cleanup = _local_copy(path)
    try:
        try:
            return load_file(local_path)
        except TypeError:
            # NumPy has no bfloat16, so safetensors.numpy refuses such files.
            return _load_safetensors_raw(local_path)
        except Exception as e:  # safetensors raises its own error types.
            raise InputError("%s is not a readable safetensors file: %s" % (path, e))
    finally:
        cleanup()


_SAFETENSORS_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16,
                       "I64": np.int64, "I32": np.int32, "I16": np.int16,
                       "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


def _load_safetensors_raw(path):
    """Parses a safetensors file directly (8-byte header length, JSON header,
    raw little-endian data), widening BF16 tensors to float32."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        (header_len,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8:8 + header_len].decode("utf-8"))
    except (struct.error, ValueError, UnicodeDecodeError) as e:
        raise InputError("%s is not a readable safetensors file: %s" % (path, e))
    body = memoryview(data)[8 + header_len:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = body[begin:end]
        dtype = info["dtype"]
        if dtype == "BF16":
            bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            array = bits.view(np.float32)
        elif dtype in _SAFETENSORS_DTYPES:
            array = np.frombuffer(raw, dtype=np.dtype(_SAFETENSORS_DTYPES[dtype]).newbyteorder("<"))
        else:
            raise InputError("%s: tensor %s has unsupported dtype %s" % (path, name, dtype))
        tensors[name] = array.reshape(info["shape"]).copy()
    return tensors


def _load_pytorch_bin(path):
    """name -> np.ndarray from a pytorch_model.bin, with PyTorch's weights-only
    (no arbitrary code) loader."""
    try:
        import torch
    except ImportError:
        raise InputError(
            "%s is a PyTorch pickle, which is only read with PyTorch's safe "
            "weights_only loader, but PyTorch is not installed. Install torch, or "
            "convert the model to safetensors (model.safetensors) first." % path)
    local_path, cleanup = _local_copy(path)
    try:
        state = torch.load(local_path, map_location="cpu", weights_only=True)
    except Exception as e:  # Unpickling errors come in many types.
        raise InputError("%s could not be read with torch.load(weights_only=True): %s"
                         % (path, e))
    finally:
        cleanup()
    if not isinstance(state, dict):
        raise InputError("%s does not hold a state dict" % path)
    tensors = {}
    for name, value in state.items():
        if hasattr(value, "detach"):
            tensors[name] = value.detach().to(torch.float32).numpy() if \
                value.is_floating_point() else value.detach().numpy()
    return tensors


def _local_copy(path):
    """(local path, cleanup function): remote files (gs://) are copied to a
    local temporary file, since both readers need a local path."""
    if os.path.exists(path):
        return path, lambda: None
    tmp_dir = tempfile.mkdtemp(prefix="convert_checkpoint_")
    local_path = os.path.join(tmp_dir, os.path.basename(path))
    tf.io.gfile.copy(path, local_path, overwrite=True)
    return local_path, lambda: shutil.rmtree(tmp_dir, ignore_errors=True)


def load_hf_weights(model_dir):
    """Reads every tensor of a Hugging Face model directory.

    Looks for, in order: model.safetensors, model.safetensors.index.json
    (shards), pytorch_model.bin, pytorch_model.bin.index.json.

    Returns:
      (dict name -> np.ndarray, description of the files read).
    """
    def path(name):
        return os.path.join(model_dir, name)

    for single, index, loader in (
            ("model.safetensors", "model.safetensors.index.json", _load_safetensors),
            ("pytorch_model.bin", "pytorch_model.bin.index.json", _load_pytorch_bin)):
        if tf.io.gfile.exists(path(single)):
            return loader(path(single)), path(single)
        if tf.io.gfile.exists(path(index)):
            weight_map = file_io.read_json_object(path(index)).get("weight_map")
            if not isinstance(weight_map, dict):
                raise InputError("%s has no weight_map" % path(index))
            shards = sorted(set(weight_map.values()))
            missing = [shard for shard in shards if not tf.io.gfile.exists(path(shard))]
            if missing:
                raise InputError(
                    "--hf_model_dir %s: %s names %d shard(s) that are not there: %s; "
                    "download the missing file(s) into the directory"
                    % (model_dir, index, len(missing), ", ".join(missing)))
            tensors = {}
            for shard in shards:
                tensors.update(loader(path(shard)))
            return tensors, path(index)
    raise InputError(
        "--hf_model_dir %s holds no weights: expected model.safetensors, "
        "model.safetensors.index.json or pytorch_model.bin" % model_dir)
