"""Converts a Hugging Face BERT checkpoint into a Google BERT TF checkpoint.

Input: a directory in the Hugging Face layout (``config.json``, ``vocab.txt``
and ``model.safetensors``, a sharded ``model.safetensors.index.json`` or
``pytorch_model.bin``), as written by ``transformers`` or sentence-transformers.

Output (in --output_dir, the layout of Google's released zips):

* ``bert_model.ckpt.index`` / ``bert_model.ckpt.data-00000-of-00001``: a TF
  checkpoint with Google's variable names (``bert/embeddings/...``,
  ``bert/encoder/layer_N/...``, ``bert/pooler/dense/...`` and, where the input
  has them, the pre-training heads ``cls/predictions/...`` and
  ``cls/seq_relationship/...``), float32, kernels as ``[in, out]``;
* ``bert_config.json`` with the activation mapped so numerics are preserved
  (Hugging Face "gelu" is the exact erf GELU = our "gelu_exact"; Hugging Face
  "gelu_new" / "gelu_pytorch_tanh" is the tanh approximation = Google's "gelu");
* ``vocab.txt``, copied.

Every script here can then start from the converted model with
``--init_checkpoint=$OUT/bert_model.ckpt --bert_config_file=$OUT/bert_config.json
--vocab_file=$OUT/vocab.txt``.

A checkpoint is untrusted input: safetensors files are read with the
``safetensors`` NumPy API (no code runs), and ``pytorch_model.bin`` only with
PyTorch's ``weights_only=True`` loader, never a plain unpickle.

Anything that cannot be represented exactly (another architecture, relative
position embeddings, a different LayerNorm epsilon, an unknown activation,
missing tensors, shapes that disagree with config.json) is an error naming the
file and the tensor or key at fault; all checks run before anything is
written, and the files are written to a temporary directory and renamed into
place, so a failure never leaves a half-written model.
"""

import collections
import json
import os
import re
import shutil
import struct
import tempfile

import numpy as np
import quiet_tf  # noqa: F401  (first: imports TensorFlow without its start-up noise)
import tensorflow.compat.v1 as tf
from absl import flags

import modeling
import run_common
from run_common import InputError

FLAGS = flags.FLAGS

flags.DEFINE_string(
    "hf_model_dir", None,
    "Directory of a Hugging Face BERT model: config.json, vocab.txt and "
    "model.safetensors (or model.safetensors.index.json with its shards, or "
    "pytorch_model.bin).")

run_common.define_flags("output_dir")

CHECKPOINT_NAME = "bert_model.ckpt"

# Hugging Face hidden_act -> this codebase's (and Google's) hidden_act.
HIDDEN_ACT = {
    "gelu": "gelu_exact",          # HF "gelu" is x * Phi(x) with erf.
    "gelu_new": "gelu",            # The tanh approximation (Google's "gelu").
    "gelu_pytorch_tanh": "gelu",   # Same formula, PyTorch's fused kernel.
    "gelu_fast": "gelu",           # Same formula, written differently.
    "relu": "relu",
    "tanh": "tanh",
}

# Google's LayerNorm (modeling.layer_norm) uses this epsilon.
LAYER_NORM_EPS = 1e-12

# Keys of bert_config.json and the Hugging Face config keys they come from.
_CONFIG_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                "intermediate_size", "hidden_act", "hidden_dropout_prob",
                "attention_probs_dropout_prob", "max_position_embeddings",
                "type_vocab_size", "initializer_range")
_CONFIG_DEFAULTS = {"hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
                    "initializer_range": 0.02, "type_vocab_size": 2,
                    "max_position_embeddings": 512, "hidden_act": "gelu"}


# ---------------------------------------------------------------------------
# Config.

def read_json(path):
    """Reads a JSON object from `path`; InputError naming the file if it is
    missing or invalid."""
    if not tf.io.gfile.exists(path):
        raise InputError("--hf_model_dir: file not found: %s" % path)
    return run_common.read_json_object(path)


def bert_config_from_hf(hf_config, config_path):
    """Maps a Hugging Face BertConfig dict to a Google bert_config.json dict.

    Args:
      hf_config: the parsed config.json.
      config_path: its path, for messages.

    Returns:
      dict with exactly Google's bert_config.json keys.

    Raises:
      InputError: the config describes a model this codebase cannot reproduce
        exactly (another model type, activation, position embedding type,
        LayerNorm epsilon, a decoder).
    """
    model_type = hf_config.get("model_type")
    architectures = hf_config.get("architectures") or []
    if model_type is None:
        # Very old configs have no model_type; accept them only if every
        # architecture they name is a BERT one.
        if any(not str(a).startswith("Bert") for a in architectures):
            raise InputError("%s: model_type is missing and architectures %s are not BERT"
                             % (config_path, architectures))
    elif model_type != "bert":
        raise InputError(
            "%s: model_type is %r, but only \"bert\" checkpoints can be converted "
            "(other architectures such as RoBERTa, DistilBERT, ALBERT or ELECTRA "
            "differ in layout or numerics)" % (config_path, model_type))

    for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                "intermediate_size"):
        if not isinstance(hf_config.get(key), int) or hf_config[key] <= 0:
            raise InputError("%s: %s must be a positive integer, got %r"
                             % (config_path, key, hf_config.get(key)))

    act = hf_config.get("hidden_act", "gelu")
    if not isinstance(act, str) or act.lower() not in HIDDEN_ACT:
        raise InputError("%s: hidden_act %r is not supported (supported: %s)"
                         % (config_path, act, ", ".join(sorted(HIDDEN_ACT))))

    position_type = hf_config.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise InputError("%s: position_embedding_type %r is not supported (only "
                         "\"absolute\", as in Google's BERT)" % (config_path, position_type))

    eps = hf_config.get("layer_norm_eps", LAYER_NORM_EPS)
    if not isinstance(eps, (int, float)) or abs(eps - LAYER_NORM_EPS) > 1e-15:
        raise InputError("%s: layer_norm_eps is %r but Google's BERT (and this codebase) "
                         "uses %g: the converted model would compute different outputs"
                         % (config_path, eps, LAYER_NORM_EPS))

    for key in ("is_decoder", "add_cross_attention"):
        if hf_config.get(key):
            raise InputError("%s: %s is true; only encoder-only BERT models can be "
                             "converted" % (config_path, key))

    config = {}
    for key in _CONFIG_KEYS:
        config[key] = hf_config.get(key, _CONFIG_DEFAULTS.get(key))
    config["hidden_act"] = HIDDEN_ACT[act.lower()]
    if config["hidden_size"] % config["num_attention_heads"]:
        raise InputError("%s: hidden_size %d is not a multiple of num_attention_heads %d"
                         % (config_path, config["hidden_size"],
                            config["num_attention_heads"]))
    return config


# ---------------------------------------------------------------------------
# Reading weights.

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
            weight_map = read_json(path(index)).get("weight_map")
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


# ---------------------------------------------------------------------------
# Name mapping.

_LAYER_PARTS = (
    # Hugging Face name inside encoder.layer.N -> Google name (dense: transposed).
    ("attention.self.query", "attention/self/query"),
    ("attention.self.key", "attention/self/key"),
    ("attention.self.value", "attention/self/value"),
    ("attention.output.dense", "attention/output/dense"),
    ("intermediate.dense", "intermediate/dense"),
    ("output.dense", "output/dense"),
)
_LAYER_NORMS = (
    ("attention.output.LayerNorm", "attention/output/LayerNorm"),
    ("output.LayerNorm", "output/LayerNorm"),
)


def _normalize_key(key):
    """Old (pytorch-pretrained-bert) checkpoints name LayerNorm parameters
    gamma/beta; today's weight/bias."""
    key = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", key)
    return re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", key)


def expected_variables(config, with_pretraining_heads=True):
    """The variables of a Google BERT checkpoint and their shapes.

    Args:
      config: bert_config dict.
      with_pretraining_heads: include cls/predictions and cls/seq_relationship.

    Returns:
      OrderedDict Google name -> shape (list of int).
    """
    h = config["hidden_size"]
    # The encoder's table is run_common's, which the scripts check checkpoints
    # against; the same order (embeddings, layers, pooler).
    shapes = collections.OrderedDict(run_common.bert_variable_shapes(
        modeling.BertConfig.from_dict(config)))
    if with_pretraining_heads:
        shapes["cls/predictions/transform/dense/kernel"] = [h, h]
        shapes["cls/predictions/transform/dense/bias"] = [h]
        shapes["cls/predictions/transform/LayerNorm/beta"] = [h]
        shapes["cls/predictions/transform/LayerNorm/gamma"] = [h]
        shapes["cls/predictions/output_bias"] = [config["vocab_size"]]
        shapes["cls/seq_relationship/output_weights"] = [2, h]
        shapes["cls/seq_relationship/output_bias"] = [2]
    return shapes


def _name_map(config, encoder_prefix, head_prefix):
    """Google name -> (list of candidate Hugging Face names, transpose)."""
    mapping = collections.OrderedDict()
    e = encoder_prefix

    def linear(google, hf):
        mapping[google + "/kernel"] = ([hf + ".weight"], True)
        mapping[google + "/bias"] = ([hf + ".bias"], False)

    def norm(google, hf):
        mapping[google + "/gamma"] = ([hf + ".weight"], False)
        mapping[google + "/beta"] = ([hf + ".bias"], False)

    for name in ("word_embeddings", "token_type_embeddings", "position_embeddings"):
        mapping["bert/embeddings/" + name] = ([e + "embeddings.%s.weight" % name], False)
    norm("bert/embeddings/LayerNorm", e + "embeddings.LayerNorm")
    for n in range(config["num_hidden_layers"]):
        for hf, google in _LAYER_PARTS:
            linear("bert/encoder/layer_%d/%s" % (n, google), e + "encoder.layer.%d.%s" % (n, hf))
        for hf, google in _LAYER_NORMS:
            norm("bert/encoder/layer_%d/%s" % (n, google), e + "encoder.layer.%d.%s" % (n, hf))
    linear("bert/pooler/dense", e + "pooler.dense")
    c = head_prefix + "cls."
    linear("cls/predictions/transform/dense", c + "predictions.transform.dense")
    norm("cls/predictions/transform/LayerNorm", c + "predictions.transform.LayerNorm")
    mapping["cls/predictions/output_bias"] = (
        [c + "predictions.bias", c + "predictions.decoder.bias"], False)
    # Google stores the NSP weights as [2, hidden] (used with transpose_b),
    # which is already PyTorch's [out, in] layout: no transpose.
    mapping["cls/seq_relationship/output_weights"] = ([c + "seq_relationship.weight"], False)
    mapping["cls/seq_relationship/output_bias"] = ([c + "seq_relationship.bias"], False)
    return mapping


_POOLER = ("bert/pooler/dense/kernel", "bert/pooler/dense/bias")
_MLM_HEAD = ("cls/predictions/transform/dense/kernel", "cls/predictions/transform/dense/bias",
             "cls/predictions/transform/LayerNorm/beta",
             "cls/predictions/transform/LayerNorm/gamma", "cls/predictions/output_bias")
_NSP_HEAD = ("cls/seq_relationship/output_weights", "cls/seq_relationship/output_bias")


def convert_weights(hf_weights, config, source="the checkpoint"):
    """Maps Hugging Face tensors to Google's variables.

    Args:
      hf_weights: dict Hugging Face name -> np.ndarray.
      config: bert_config dict (from `bert_config_from_hf`).
      source: file name for messages.

    Returns:
      (OrderedDict Google name -> float32 np.ndarray, list of warnings).
      Embeddings and every encoder layer are required; the pooler and the
      pre-training heads are converted when present (each head entirely or not
      at all).

    Raises:
      InputError: a required tensor is missing, a shape disagrees with the
        config, or a tensor belongs to an encoder this config does not describe.
    """
    weights = {_normalize_key(k): v for k, v in hf_weights.items()}
    suffix = "embeddings.word_embeddings.weight"
    candidates = [k for k in weights if k == suffix or k.endswith("." + suffix)]
    if len(candidates) != 1:
        raise InputError("%s: expected one word embedding table (*%s), found %s"
                         % (source, suffix, candidates or "none"))
    encoder_prefix = candidates[0][:-len(suffix)]
    head_prefix = encoder_prefix[:-len("bert.")] if encoder_prefix.endswith("bert.") \
        else encoder_prefix

    shapes = expected_variables(config)
    mapping = _name_map(config, encoder_prefix, head_prefix)
    warnings = []
    found = collections.OrderedDict()
    used = set()
    for google, (hf_names, transpose) in mapping.items():
        hf_name = next((n for n in hf_names if n in weights), None)
        if hf_name is None:
            continue
        used.update(n for n in hf_names if n in weights)
        value = weights[hf_name]
        if transpose:
            value = value.T
        if list(value.shape) != shapes[google]:
            raise InputError(
                "%s: tensor %s has shape %s, but config.json implies %s for %s "
                "(hidden_size=%d, intermediate_size=%d, vocab_size=%d, "
                "max_position_embeddings=%d, type_vocab_size=%d)"
                % (source, hf_name, list(weights[hf_name].shape),
                   shapes[google][::-1] if transpose else shapes[google], google,
                   config["hidden_size"], config["intermediate_size"],
                   config["vocab_size"], config["max_position_embeddings"],
                   config["type_vocab_size"]))
        if not np.issubdtype(value.dtype, np.floating):
            raise InputError("%s: tensor %s has dtype %s, expected floating point"
                             % (source, hf_name, value.dtype))
        found[google] = np.ascontiguousarray(value, dtype=np.float32)

    required = [g for g in mapping if not g.startswith("cls/") and g not in _POOLER]
    missing = [mapping[g][0][0] for g in required if g not in found]
    if missing:
        raise InputError("%s is missing %d tensor(s) of a %d-layer BERT encoder: %s"
                         % (source, len(missing), config["num_hidden_layers"],
                            ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else "")))

    # The pooler and each head are all-or-nothing: a partial head is a sign of
    # a checkpoint this converter does not understand.
    for part, label in ((_POOLER, "pooler"), (_MLM_HEAD, "masked LM head"),
                        (_NSP_HEAD, "next sentence head")):
        present = [g for g in part if g in found]
        if present and len(present) != len(part):
            raise InputError("%s has an incomplete %s: missing %s" % (
                source, label, ", ".join(mapping[g][0][0] for g in part if g not in found)))
        if not present:
            warnings.append("%s has no %s (%s): the converted checkpoint leaves it out "
                            "and scripts will initialise it randomly"
                            % (source, label, mapping[part[0]][0][0].rsplit(".", 1)[0]))

    # Google's MLM output layer reuses the word embeddings; a checkpoint with
    # separate decoder weights cannot be represented, so its MLM head is dropped.
    decoder = head_prefix + "cls.predictions.decoder.weight"
    if decoder in weights:
        used.add(decoder)
        if "cls/predictions/output_bias" in found and not np.array_equal(
                weights[decoder], weights[encoder_prefix + suffix]):
            for g in _MLM_HEAD:
                del found[g]
            warnings.append("%s: %s differs from the word embeddings (untied), which "
                            "Google's BERT cannot represent: the masked LM head is left out"
                            % (source, decoder))

    leftovers = sorted(k for k in weights if k not in used and not k.endswith("position_ids"))
    inside = [k for k in leftovers if k.startswith(encoder_prefix + "encoder.")
              or k.startswith(encoder_prefix + "embeddings.")]
    if inside:
        raise InputError("%s has tensor(s) that a %d-layer BERT encoder does not have "
                         "(does num_hidden_layers in config.json match?): %s"
                         % (source, config["num_hidden_layers"], ", ".join(inside[:10])))
    if leftovers:
        warnings.append("%s: ignoring tensor(s) with no Google BERT counterpart (e.g. a "
                        "task head): %s" % (source, ", ".join(leftovers[:10])))

    ordered = collections.OrderedDict((g, found[g]) for g in shapes if g in found)
    return ordered, warnings


# ---------------------------------------------------------------------------
# Writing.

def write_tf_checkpoint(variables, checkpoint_prefix):
    """Saves name -> float32 array as a TF checkpoint at `checkpoint_prefix`.

    Uses tf.compat.v1 Variables and a Saver in a fresh graph. Values are fed
    through the variables' initializers rather than embedded as constants, so
    models larger than the 2 GB graph limit convert too. Only the .index and
    .data files are written (no "checkpoint" state file and no .meta graph),
    as in Google's released checkpoints.
    """
    with tf.Graph().as_default():
        tf_vars = []
        feed = {}
        for name, value in variables.items():
            placeholder = tf.placeholder(tf.float32, shape=value.shape)
            tf_vars.append(tf.Variable(placeholder, name=name, trainable=False))
            feed[placeholder] = value
        saver = tf.train.Saver(tf_vars, write_version=tf.train.SaverDef.V2)
        with tf.Session() as sess:
            sess.run(tf.variables_initializer(tf_vars), feed_dict=feed)
            saver.save(sess, checkpoint_prefix, write_meta_graph=False, write_state=False)


def convert(hf_model_dir, output_dir):
    """Converts the model in `hf_model_dir`, writing Google's layout to `output_dir`.

    Returns:
      dict with the written "checkpoint" prefix, "bert_config_file",
      "vocab_file", and the list of "warnings".
    """
    if not hf_model_dir:
        raise InputError("--hf_model_dir is required")
    if not output_dir:
        raise InputError("--output_dir is required")
    if not tf.io.gfile.isdir(hf_model_dir):
        raise InputError("--hf_model_dir: directory not found: %s" % hf_model_dir)
    run_common.check_output_dir(output_dir)

    config_path = os.path.join(hf_model_dir, "config.json")
    vocab_path = os.path.join(hf_model_dir, "vocab.txt")
    config = bert_config_from_hf(read_json(config_path), config_path)
    if not tf.io.gfile.exists(vocab_path):
        raise InputError("--hf_model_dir: file not found: %s (BERT's WordPiece vocabulary)"
                         % vocab_path)
    with tf.io.gfile.GFile(vocab_path, "r") as f:
        num_vocab = sum(1 for _ in run_common.utf8_lines(f, None, vocab_path))
    if num_vocab > config["vocab_size"]:
        raise InputError("%s has %d tokens but vocab_size in %s is %d"
                         % (vocab_path, num_vocab, config_path, config["vocab_size"]))

    hf_weights, weights_source = load_hf_weights(hf_model_dir)
    variables, warnings = convert_weights(hf_weights, config, source=weights_source)
    del hf_weights
    for warning in warnings:
        tf.logging.warning(warning)

    # Everything is checked: write into a temporary directory next to the
    # output, then move the files into place.
    tf.io.gfile.makedirs(output_dir)
    tmp_dir = os.path.join(output_dir, ".convert-tmp-%d" % os.getpid())
    tf.io.gfile.makedirs(tmp_dir)
    try:
        write_tf_checkpoint(variables, os.path.join(tmp_dir, CHECKPOINT_NAME))
        with tf.io.gfile.GFile(os.path.join(tmp_dir, "bert_config.json"), "w") as f:
            f.write(json.dumps(config, indent=2, sort_keys=True) + "\n")
        tf.io.gfile.copy(vocab_path, os.path.join(tmp_dir, "vocab.txt"), overwrite=True)
        lower = _do_lower_case(hf_model_dir)
        if lower is not None:
            # The casing, next to the vocabulary, where the scripts check it.
            with tf.io.gfile.GFile(os.path.join(tmp_dir, run_common.TOKENIZER_CONFIG_FILE),
                                   "w") as f:
                f.write(json.dumps({"do_lower_case": lower}) + "\n")
        for name in sorted(tf.io.gfile.listdir(tmp_dir)):
            tf.io.gfile.rename(os.path.join(tmp_dir, name), os.path.join(output_dir, name),
                               overwrite=True)
        stale = os.path.join(output_dir, run_common.TOKENIZER_CONFIG_FILE)
        if lower is None and tf.io.gfile.exists(stale):  # Of another model converted there.
            tf.io.gfile.remove(stale)
    except Exception as e:
        # A full disk or a file size limit: one line naming the output.
        message = run_common.output_write_error(e, output_dir)
        if message:
            raise InputError(message) from e
        raise
    finally:
        if tf.io.gfile.exists(tmp_dir):
            tf.io.gfile.rmtree(tmp_dir)

    run_common.report_output(
        os.path.join(output_dir, CHECKPOINT_NAME), "%d tensors converted from %s (%s)" % (
            len(variables), weights_source, ", ".join(
                "%s=%s" % (k, config[k]) for k in ("num_hidden_layers", "hidden_size",
                                                 "hidden_act"))))
    run_common.report_output(os.path.join(output_dir, "bert_config.json"))
    run_common.report_output(os.path.join(output_dir, "vocab.txt"))
    if lower is not None:
        run_common.report_output(os.path.join(output_dir, run_common.TOKENIZER_CONFIG_FILE),
                                 "do_lower_case=%s" % lower)
        tf.logging.info("The model's tokenizer has do_lower_case=%s: pass "
                        "--do_lower_case=%s to the scripts", lower, lower)
    return {"checkpoint": os.path.join(output_dir, CHECKPOINT_NAME),
            "bert_config_file": os.path.join(output_dir, "bert_config.json"),
            "vocab_file": os.path.join(output_dir, "vocab.txt"),
            "warnings": warnings}


def _do_lower_case(hf_model_dir):
    """The casing of a Hugging Face model (True, False), from its
    tokenizer_config.json, or None where it does not say."""
    path = os.path.join(hf_model_dir, run_common.TOKENIZER_CONFIG_FILE)
    if not tf.io.gfile.exists(path):
        return None
    lower = read_json(path).get("do_lower_case")
    return None if lower is None else bool(lower)


def main(_):
    tf.logging.set_verbosity(tf.logging.INFO)
    convert(FLAGS.hf_model_dir, FLAGS.output_dir)


if __name__ == "__main__":
    run_common.run_script(main)
