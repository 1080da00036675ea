"""Converts BERT checkpoints between Hugging Face's layout and Google's.

With --hf_model_dir (the default direction), a Hugging Face model becomes a
Google BERT TF checkpoint, described below. With --to_hf, a checkpoint of
this project (a Google release, run_pretraining.py's output, or the output
dir of run_classifier.py, run_squad.py, run_ner.py or run_swag.py) becomes a
folder that transformers' Auto classes load offline: config.json (the
architecture told by the checkpoint's variables, labels and problem_type
from the run record), model.safetensors (weights only), vocab.txt,
tokenizer_config.json and special_tokens_map.json (`convert_to_hf`).

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
import dataclasses
import hashlib
import json
import os
import re
import shutil
import tempfile
from typing import Optional

import numpy as np
from scriptkit import quiet_tf  # noqa: F401  (first: imports TensorFlow without its start-up noise)
import tensorflow.compat.v1 as tf
from absl import flags

from scriptkit import checkpoints
from scriptkit import file_io
from scriptkit import hf_weights
from scriptkit import run_record
import modeling
from scriptkit import script_runner
from scriptkit import settings as settings_lib
from scriptkit import shared_flags
from scriptkit.errors import InputError


@dataclasses.dataclass(frozen=True)
class Settings(settings_lib.Common):
    """This script's flags, with its defaults (read in main by
    `settings_lib.from_flags`)."""

    hf_model_dir: Optional[str] = None
    to_hf: bool = False
    hf_architecture: Optional[str] = None
    overwrite: bool = False
    output_dir: Optional[str] = None
    init_checkpoint: Optional[str] = None
    bert_config_file: Optional[str] = None
    vocab_file: Optional[str] = None
    do_lower_case: bool = True


flags.DEFINE_string(
    "hf_model_dir", None,
    "Directory of a Hugging Face BERT model: config.json, vocab.txt and "
    "model.safetensors (or model.safetensors.index.json with its shards, or "
    "pytorch_model.bin).")

flags.DEFINE_bool(
    "to_hf", False,
    "Convert the other way: the checkpoint --init_checkpoint of this project (a Google "
    "release, run_pretraining.py's output or a fine-tuning run's --output_dir) into a "
    "Hugging Face folder in --output_dir (config.json, model.safetensors, vocab.txt, "
    "tokenizer_config.json, special_tokens_map.json) that transformers loads offline.")
flags.DEFINE_enum(
    "hf_architecture", None,
    ["BertModel", "BertForPreTraining", "BertForMaskedLM", "BertForNextSentencePrediction",
     "BertForSequenceClassification", "BertForTokenClassification",
     "BertForQuestionAnswering", "BertForMultipleChoice"],
    "With --to_hf: the transformers class to write (default: the one the checkpoint's "
    "variables show). A head the class has no place for is left out, with a log line.")
flags.DEFINE_bool(
    "overwrite", False,
    "Replace what --output_dir holds of another conversion (its config, casing or "
    "weights). Without it, only an empty or new folder, or one holding this same model "
    "(the same config and vocabulary), is written into. A different vocab.txt is never "
    "replaced.")

shared_flags.define_settings_flags(Settings, helps={
    "init_checkpoint": "With --to_hf: the checkpoint to convert (a prefix, or a directory: "
                       "its latest checkpoint).",
    "bert_config_file": "With --to_hf: the model's config (default: the run record's, else "
                        "bert_config.json next to the checkpoint).",
    "vocab_file": "With --to_hf: the model's vocabulary (default: the run record's, else "
                  "vocab.txt next to the checkpoint).",
    "do_lower_case": "With --to_hf: the casing the model was trained with (default: the run "
                     "record's, else tokenizer_config.json next to the vocabulary's, else "
                     "True)."})

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
    return file_io.read_json_object(path)


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
    # The encoder's table is checkpoints.py's, which the scripts check checkpoints
    # against; the same order (embeddings, layers, pooler).
    shapes = collections.OrderedDict(checkpoints.bert_variable_shapes(
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


# The task heads of the fine-tuning scripts: transformers class -> (this
# project's variable, Hugging Face tensor) pairs. Both store the weights as
# [outputs, hidden] (PyTorch's nn.Linear layout; the scripts multiply with
# transpose_b), so nothing is transposed.
TASK_HEADS = collections.OrderedDict([
    ("BertForSequenceClassification", (("output_weights", "classifier.weight"),
                                       ("output_bias", "classifier.bias"))),
    ("BertForTokenClassification", (("ner/output_weights", "classifier.weight"),
                                    ("ner/output_bias", "classifier.bias"))),
    ("BertForMultipleChoice", (("swag/output_weights", "classifier.weight"),
                               ("swag/output_bias", "classifier.bias"))),
    ("BertForQuestionAnswering", (("cls/squad/output_weights", "qa_outputs.weight"),
                                  ("cls/squad/output_bias", "qa_outputs.bias"))),
])
# Outputs of a head whose width is fixed by its task (None: the labels').
_HEAD_OUTPUTS = {"BertForSequenceClassification": None, "BertForTokenClassification": None,
                 "BertForMultipleChoice": 1, "BertForQuestionAnswering": 2}

# transformers builds these classes without a pooler.
_WITHOUT_POOLER = ("BertForTokenClassification", "BertForQuestionAnswering",
                   "BertForMaskedLM")

_POOLER = ("bert/pooler/dense/kernel", "bert/pooler/dense/bias")
_MLM_HEAD = ("cls/predictions/transform/dense/kernel", "cls/predictions/transform/dense/bias",
             "cls/predictions/transform/LayerNorm/beta",
             "cls/predictions/transform/LayerNorm/gamma", "cls/predictions/output_bias")
_NSP_HEAD = ("cls/seq_relationship/output_weights", "cls/seq_relationship/output_bias")


def convert_weights(hf_weights, config, source="the checkpoint", architecture=None):
    """Maps Hugging Face tensors to Google's variables.

    Args:
      hf_weights: dict Hugging Face name -> np.ndarray.
      config: bert_config dict (from `bert_config_from_hf`).
      source: file name for messages.
      architecture: the transformers class of config.json's "architectures";
        the task head of a class in TASK_HEADS is converted to the variables
        of the script that trains it (run_classifier.py's output_weights,
        ...).

    Returns:
      (OrderedDict Google name -> float32 np.ndarray, list of warnings).
      Embeddings and every encoder layer are required; the pooler, the
      pre-training heads and the task head are converted when present (each
      entirely or not at all).

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
    found, used = _mapped_tensors(weights, mapping, shapes, config, source)
    warnings = _check_parts(found, mapping, config, source, architecture)
    used.update(_task_head(weights, found, shapes, head_prefix, config, source, architecture))

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


def _mapped_tensors(weights, mapping, shapes, config, source):
    """The tensors of `weights` (Hugging Face name -> array) that `mapping`
    (`_name_map`) names, as Google's variables of `shapes`.

    Returns:
      (found: OrderedDict Google name -> float32 array, used: the Hugging
      Face names taken).

    Raises:
      InputError: a shape that disagrees with `config`, or a tensor that is
        not floating point (naming `source`).
    """
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
    return found, used


def _check_parts(found, mapping, config, source, architecture):
    """Checks that `found` (Google name -> array) holds the whole encoder,
    and the pooler and each pre-training head entirely or not at all.

    Returns:
      Warnings for the parts left out that `architecture` would have.

    Raises:
      InputError: a tensor of the encoder is missing, or a part is
        incomplete (naming `source`).
    """
    required = [g for g in mapping if not g.startswith("cls/") and g not in _POOLER]
    missing = [mapping[g][0][0] for g in required if g not in found]
    if missing:
        raise InputError("%s is missing %d tensor(s) of a %d-layer BERT encoder: %s"
                         % (source, len(missing), config["num_hidden_layers"],
                            ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else "")))

    # The pooler and each head are all-or-nothing: a partial head is a sign of
    # a checkpoint this converter does not understand.
    warnings = []
    for part, label in ((_POOLER, "pooler"), (_MLM_HEAD, "masked LM head"),
                        (_NSP_HEAD, "next sentence head")):
        present = [g for g in part if g in found]
        if present and len(present) != len(part):
            raise InputError("%s has an incomplete %s: missing %s" % (
                source, label, ", ".join(mapping[g][0][0] for g in part if g not in found)))
        if not present and architecture not in (
                TASK_HEADS if part is not _POOLER else _WITHOUT_POOLER):
            # (A task model has no use for the pre-training heads, a tagger
            # or reader none for the pooler.)
            warnings.append("%s has no %s (%s): the converted checkpoint leaves it out "
                            "and scripts will initialise it randomly"
                            % (source, label, mapping[part[0]][0][0].rsplit(".", 1)[0]))
    return warnings


def _task_head(weights, found, shapes, head_prefix, config, source, architecture):
    """Adds the task head of `architecture` (a class of TASK_HEADS) to
    `found` and its shapes to `shapes`, where `weights` hold it whole.

    Returns:
      The Hugging Face names taken (none without a head).

    Raises:
      InputError: a head that does not fit the config.
    """
    head = TASK_HEADS.get(architecture, ())
    head_names = [head_prefix + hf for _, hf in head]
    if not (head and all(name in weights for name in head_names)):
        return []
    (weight_var, _), (bias_var, _) = head
    weight_name, bias_name = head_names
    weight, bias = weights[weight_name], weights[bias_name]
    outputs = _HEAD_OUTPUTS[architecture]
    if (weight.ndim != 2 or weight.shape[1] != config["hidden_size"]
            or bias.shape != (weight.shape[0],)
            or outputs not in (None, weight.shape[0])):
        raise InputError("%s: the %s head %s %s / %s %s does not fit hidden_size=%d%s"
                         % (source, architecture, weight_name, list(weight.shape),
                            bias_name, list(bias.shape), config["hidden_size"],
                            " and %d outputs" % outputs if outputs else ""))
    found[weight_var] = np.ascontiguousarray(weight, dtype=np.float32)
    found[bias_var] = np.ascontiguousarray(bias, dtype=np.float32)
    shapes[weight_var], shapes[bias_var] = list(weight.shape), list(bias.shape)
    return head_names


# ---------------------------------------------------------------------------
# Writing.

def write_tf_checkpoint(variables, checkpoint_prefix):
    """Saves name -> array (float32 for weights) as a TF checkpoint at
    `checkpoint_prefix`.

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
            placeholder = tf.placeholder(tf.as_dtype(value.dtype), shape=value.shape)
            tf_vars.append(tf.Variable(placeholder, name=name, trainable=False))
            feed[placeholder] = value
        saver = tf.train.Saver(tf_vars, write_version=tf.train.SaverDef.V2)
        with tf.Session() as sess:
            sess.run(tf.variables_initializer(tf_vars), feed_dict=feed)
            saver.save(sess, checkpoint_prefix, write_meta_graph=False, write_state=False)


def convert(hf_model_dir, output_dir, overwrite=False):
    """Converts the model in `hf_model_dir`, writing Google's layout to `output_dir`
    (into a folder of another model only with `overwrite`: `check_output_folder`).

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
    file_io.check_output_dir(output_dir)
    _refuse_hugging_face_folder(output_dir)

    config_path = os.path.join(hf_model_dir, "config.json")
    vocab_path = os.path.join(hf_model_dir, "vocab.txt")
    hf_config = read_json(config_path)
    config = bert_config_from_hf(hf_config, config_path)
    if not tf.io.gfile.exists(vocab_path):
        raise InputError("--hf_model_dir: file not found: %s (BERT's WordPiece vocabulary)"
                         % vocab_path)
    with tf.io.gfile.GFile(vocab_path, "r") as f:
        num_vocab = sum(1 for _ in file_io.utf8_lines(f, None, vocab_path))
    if num_vocab > config["vocab_size"]:
        raise InputError("%s has %d tokens but vocab_size in %s is %d"
                         % (vocab_path, num_vocab, config_path, config["vocab_size"]))

    lower = _do_lower_case(hf_model_dir)
    casing = Planned(checkpoints.TOKENIZER_CONFIG_FILE, "json", {"do_lower_case": lower}) \
        if lower is not None else Planned(checkpoints.TOKENIZER_CONFIG_FILE, "absent", None)
    check_output_folder(output_dir, [
        Planned("bert_config.json", "config", config), Planned("vocab.txt", "vocab", vocab_path),
        casing, Planned(CHECKPOINT_NAME + ".index", "weights", None),
        Planned(CHECKPOINT_NAME + ".data-00000-of-00001", "weights", None)], overwrite)

    architecture = (hf_config.get("architectures") or [None])[0]
    hf_tensors, weights_source = hf_weights.load_hf_weights(hf_model_dir)
    variables, warnings = convert_weights(hf_tensors, config, source=weights_source,
                                          architecture=architecture)
    del hf_tensors
    for warning in warnings:
        tf.logging.warning(warning)

    def write_files(folder):
        write_tf_checkpoint(variables, os.path.join(folder, CHECKPOINT_NAME))
        _write_json(os.path.join(folder, "bert_config.json"), config)
        tf.io.gfile.copy(vocab_path, os.path.join(folder, "vocab.txt"), overwrite=True)
        if lower is not None:
            # The casing, next to the vocabulary, where the scripts check it.
            _write_json(os.path.join(folder, checkpoints.TOKENIZER_CONFIG_FILE),
                        {"do_lower_case": lower})

    # That of another model converted there would contradict this one.
    _write_folder(output_dir, write_files,
                  stale=[checkpoints.TOKENIZER_CONFIG_FILE] if lower is None else [])

    head = " with the %s head" % architecture if architecture in TASK_HEADS and \
        TASK_HEADS[architecture][0][0] in variables else ""
    file_io.report_output(
        os.path.join(output_dir, CHECKPOINT_NAME), "%d tensors converted from %s%s (%s)" % (
            len(variables), weights_source, head, ", ".join(
                "%s=%s" % (k, config[k]) for k in ("num_hidden_layers", "hidden_size",
                                                 "hidden_act"))))
    file_io.report_output(os.path.join(output_dir, "bert_config.json"))
    file_io.report_output(os.path.join(output_dir, "vocab.txt"))
    if lower is not None:
        file_io.report_output(os.path.join(output_dir, checkpoints.TOKENIZER_CONFIG_FILE),
                              "do_lower_case=%s" % lower)
        tf.logging.info("The model's tokenizer has do_lower_case=%s: pass "
                        "--do_lower_case=%s to the scripts", lower, lower)
    return {"checkpoint": os.path.join(output_dir, CHECKPOINT_NAME),
            "bert_config_file": os.path.join(output_dir, "bert_config.json"),
            "vocab_file": os.path.join(output_dir, "vocab.txt"),
            "warnings": warnings}


# Files of a Hugging Face model folder that this layout never writes.
_HF_MODEL_FILES = ("config.json", "model.safetensors", "model.safetensors.index.json",
                   "pytorch_model.bin", "pytorch_model.bin.index.json", "tf_model.h5",
                   "tokenizer.json")


def _refuse_hugging_face_folder(output_dir):
    """InputError if `output_dir` holds a Hugging Face model (its own
    --hf_model_dir, an earlier --to_hf output, ...): both layouts name their
    casing file tokenizer_config.json, and the converted one (casing only)
    would replace the model's, whose model_max_length and special tokens
    transformers needs."""
    held = [name for name in _HF_MODEL_FILES
            if tf.io.gfile.exists(os.path.join(output_dir, name))]
    config = os.path.join(output_dir, checkpoints.TOKENIZER_CONFIG_FILE)
    if tf.io.gfile.exists(config) and set(read_json(config)) - {"do_lower_case"}:
        held.append(checkpoints.TOKENIZER_CONFIG_FILE)
    if held:
        raise InputError(
            "--output_dir %s holds a Hugging Face model (%s), whose tokenizer_config.json "
            "and vocab.txt the converted files would replace: choose another folder"
            % (output_dir, ", ".join(held)))


# What a conversion writes into --output_dir, for `check_output_folder`: a
# file's name, its kind ("config": the model's config, a JSON object;
# "vocab": the vocabulary, copied from the path `value`; "json": another
# JSON object; "weights": a file of the weights; "absent": a file the
# conversion removes) and, for the JSON kinds, the object.
Planned = collections.namedtuple("Planned", ["name", "kind", "value"])


def _sha256(path):
    return hashlib.sha256(file_io.read_file_bytes(path)).hexdigest()


def _json_there(path):
    """The JSON object in `path`, or None where it holds none."""
    try:
        value = json.loads(file_io.read_file_bytes(path))
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def _differences(there, here, most=3):
    """What differs between two JSON objects, for a message: "key: A there,
    B here; ..." (at most `most` keys)."""
    keys = sorted(k for k in set(there) | set(here) if there.get(k) != here.get(k))
    text = "; ".join("%s: %s there, %s here" % (k, json.dumps(there.get(k)),
                                                json.dumps(here.get(k))) for k in keys[:most])
    return text + ("; and %d more" % (len(keys) - most) if len(keys) > most else "")


def check_output_folder(output_dir, planned, overwrite=False):
    """Checks, before any work, that writing the `planned` files into
    `output_dir` replaces nothing of another model.

    A folder that is missing or holds none of the files is written into;
    so is one holding this same model (its config file and vocabulary the
    same as the planned ones: a conversion run again, or newer weights of
    the model). Any other file that would be replaced or removed needs
    `overwrite` (--overwrite); a vocabulary is never replaced by a
    different one.

    Args:
      output_dir: --output_dir.
      planned: the `Planned` files of the conversion.
      overwrite: replace files of another conversion (logged).

    Raises:
      InputError: one line naming the file that would be replaced.
    """
    held = [p for p in planned if tf.io.gfile.exists(os.path.join(output_dir, p.name))]
    same = {}
    for p in held:
        path = os.path.join(output_dir, p.name)
        if p.kind == "vocab":
            same[p.name] = _sha256(path) == _sha256(p.value)
            if not same[p.name]:
                raise InputError(
                    "--output_dir %s holds %s of another vocabulary (%d tokens, sha256 %s...; "
                    "this model's: %d tokens, sha256 %s...): a vocabulary is never replaced; "
                    "choose another folder" % (
                        output_dir, p.name, _line_count(path), _sha256(path)[:12],
                        _line_count(p.value), _sha256(p.value)[:12]))
        elif p.kind in ("config", "json"):
            same[p.name] = _json_there(path) == p.value
    same_model = all(p.name in same and same[p.name] for p in planned
                     if p.kind in ("config", "vocab"))
    for p in held:
        if same.get(p.name) or (p.kind == "weights" and same_model):
            continue
        there = _json_there(os.path.join(output_dir, p.name)) if p.kind != "weights" else None
        if p.kind == "config":
            what = ("%s of another model (%s)" % (p.name, _differences(there, p.value))
                    if there is not None else "%s, which is no JSON object" % p.name)
        elif p.kind == "json":
            what = ("%s with other settings (%s)" % (p.name, _differences(there, p.value))
                    if there is not None else "%s, which is no JSON object" % p.name)
        elif p.kind == "absent":
            what = "%s, which this conversion would remove (the model records none)" % p.name
        else:
            what = "%s, the weights of %s" % (p.name, "another model" if any(
                q.name in same for q in planned if q.kind == "config") else
                "a model without its config beside them")
        if not overwrite:
            raise InputError("--output_dir %s holds %s: --overwrite replaces it, or choose "
                             "another folder" % (output_dir, what))
        tf.logging.warning("Replacing %s in %s (--overwrite)", what, output_dir)


def _line_count(path):
    with tf.io.gfile.GFile(path, "rb") as f:
        return sum(1 for _ in f)


def _write_json(path, value):
    with tf.io.gfile.GFile(path, "w") as f:
        f.write(json.dumps(value, indent=2, sort_keys=True) + "\n")


def _write_folder(output_dir, write_files, stale=()):
    """Writes a converted model into `output_dir` as a whole or not at all.

    Args:
      output_dir: the folder (created if missing; files of the same names
        are replaced).
      write_files: function(folder) writing every file into `folder`, a new
        temporary folder inside `output_dir`; its files are then moved into
        `output_dir`.
      stale: names of files of an earlier conversion into `output_dir` to
        remove, which this one does not write.

    Raises:
      InputError: a write failed for lack of room (naming the folder).
    """
    tf.io.gfile.makedirs(output_dir)
    tmp_dir = os.path.join(output_dir, ".convert-tmp-%d" % os.getpid())
    tf.io.gfile.makedirs(tmp_dir)
    try:
        write_files(tmp_dir)
        for name in sorted(tf.io.gfile.listdir(tmp_dir)):
            tf.io.gfile.rename(os.path.join(tmp_dir, name), os.path.join(output_dir, name),
                               overwrite=True)
        for name in stale:
            if tf.io.gfile.exists(os.path.join(output_dir, name)):
                tf.io.gfile.remove(os.path.join(output_dir, name))
    except Exception as e:
        # A full disk or a file size limit: one line naming the output.
        message = file_io.output_write_error(e, output_dir)
        if message:
            raise InputError(message) from e
        raise
    finally:
        if tf.io.gfile.exists(tmp_dir):
            tf.io.gfile.rmtree(tmp_dir)


def _do_lower_case(folder):
    """The casing (True, False) that the tokenizer_config.json in `folder`
    records (a Hugging Face model's, or the one written next to a converted
    vocabulary), or None where there is none or it does not say."""
    path = os.path.join(folder, checkpoints.TOKENIZER_CONFIG_FILE)
    if not tf.io.gfile.exists(path):
        return None
    lower = read_json(path).get("do_lower_case")
    return None if lower is None else bool(lower)


# ---------------------------------------------------------------------------
# The other way: a checkpoint of this project -> a Hugging Face folder.

# This project's hidden_act -> Hugging Face's, with the same numerics.
HF_HIDDEN_ACT = {"gelu": "gelu_new", "gelu_new": "gelu_new", "gelu_exact": "gelu",
                 "relu": "relu", "tanh": "tanh", "linear": "linear"}

# What training leaves in a checkpoint besides the weights: the optimizer's
# slots of a variable (Google's adam_m / adam_v, this project's
# AdamWeightDecayOptimizer / _1) and gradient accumulators, and counters.
_SLOT = re.compile(r"^(.+)/(adam_m|adam_v|AdamWeightDecayOptimizer(?:_\d+)?|grad_accum)$")
_COUNTERS = ("global_step", "gradient_accumulation/micro_step", "loss_scale/scale",
             "loss_scale/good_steps", "loss_scale/batches_read")

# The heads each transformers class has (pooler: bert.pooler.*).
_CLASS_PARTS = {
    "BertModel": ("pooler",),
    "BertForPreTraining": ("pooler", "mlm", "nsp"),
    "BertForMaskedLM": ("mlm",),
    "BertForNextSentencePrediction": ("pooler", "nsp"),
    "BertForSequenceClassification": ("pooler", "task"),
    "BertForTokenClassification": ("task",),
    "BertForQuestionAnswering": ("task",),
    "BertForMultipleChoice": ("pooler", "task"),
}

SPECIAL_TOKENS = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                  "cls_token": "[CLS]", "mask_token": "[MASK]"}


def classify_variables(names):
    """Sorts a checkpoint's variables.

    Args:
      names: the checkpoint's variable names.

    Returns:
      (weights, dropped): the model's variables (every name that is not
      training state), and name -> why it is not converted.

    Raises:
      InputError: a variable that is neither BERT's, a head's nor training
        state of one of them (naming it).
    """
    weights = set(names) - set(_COUNTERS)
    weights -= {n for n in names if _SLOT.match(n)}
    dropped = {n: "a training counter" for n in names if n in _COUNTERS}
    known = re.compile(r"^(bert/(embeddings|encoder/layer_\d+|pooler)/|cls/(predictions|"
                       r"seq_relationship)/)")
    heads = {var for head in TASK_HEADS.values() for var, _ in head}
    for name in sorted(names):
        match = _SLOT.match(name)
        if match:
            if match.group(1) not in weights:
                raise InputError("--init_checkpoint: %s is optimizer state of %s, which the "
                                 "checkpoint does not hold" % (name, match.group(1)))
            dropped[name] = "optimizer state"
        elif name in weights and not known.match(name) and name not in heads:
            raise InputError(
                "--init_checkpoint: variable %s is not part of BERT or of a head of this "
                "project's scripts (%s); nothing was written" % (
                    name, ", ".join(var for head in TASK_HEADS.values() for var, _ in head)))
    return weights, dropped


def detect_architecture(weights):
    """(transformers class, the variables it was told by) for a checkpoint's
    model variables. InputError if they show two task heads."""
    tasks = [(cls, [var for var, _ in head]) for cls, head in TASK_HEADS.items()
             if head[0][0] in weights]
    if len(tasks) > 1:
        raise InputError("--init_checkpoint holds the heads of %s: choose one with "
                         "--hf_architecture" % " and ".join(cls for cls, _ in tasks))
    if tasks:
        return tasks[0]
    mlm = "cls/predictions/output_bias" in weights
    nsp = "cls/seq_relationship/output_weights" in weights
    if mlm and nsp:
        return "BertForPreTraining", ["cls/predictions/*", "cls/seq_relationship/*"]
    if mlm:
        return "BertForMaskedLM", ["cls/predictions/*"]
    if nsp:
        return "BertForNextSentencePrediction", ["cls/seq_relationship/*"]
    return "BertModel", ["no head"]


def _labels_of(architecture, record, checkpoint, num_outputs):
    """(labels or None, problem_type or None, where they come from) of a
    classifier or tagger: the run record's, else labels.txt
    (run_classifier.py on own data) or ner_labels.json (run_ner.py) next to
    the checkpoint."""
    if architecture not in ("BertForSequenceClassification", "BertForTokenClassification"):
        return None, None, None
    if record is not None:
        problem_type = record.problem_type
        if architecture == "BertForTokenClassification":
            problem_type = None
        return record.labels, problem_type, record.path
    folder = os.path.dirname(checkpoint)
    if architecture == "BertForTokenClassification":
        path = os.path.join(folder, "ner_labels.json")
        if tf.io.gfile.exists(path):
            labels = file_io.read_json_object(path).get("labels")
            if isinstance(labels, list):
                return labels, None, path
        return None, None, None
    path = os.path.join(folder, "labels.txt")
    if tf.io.gfile.exists(path):
        with tf.io.gfile.GFile(path) as f:
            labels = [line.strip() for line in f if line.strip()]
        return labels, ("regression" if num_outputs == 1 and not labels else None), path
    return None, None, None


def hf_config_for(config, architecture, vocab, labels=None, problem_type=None):
    """The config.json of the Hugging Face folder.

    Args:
      config: modeling.BertConfig.
      architecture: the transformers class.
      vocab: token -> id of the vocabulary (for pad_token_id).
      labels: the classifier's or tagger's labels in output order, or None.
      problem_type: Hugging Face's problem_type of a classifier, or None.

    Returns:
      dict.
    """
    values = {
        "architectures": [architecture], "model_type": "bert",
        "vocab_size": config.vocab_size, "hidden_size": config.hidden_size,
        "num_hidden_layers": config.num_hidden_layers,
        "num_attention_heads": config.num_attention_heads,
        "intermediate_size": config.intermediate_size,
        "hidden_act": HF_HIDDEN_ACT[config.hidden_act.lower()],
        "hidden_dropout_prob": config.hidden_dropout_prob,
        "attention_probs_dropout_prob": config.attention_probs_dropout_prob,
        "max_position_embeddings": config.max_position_embeddings,
        "type_vocab_size": config.type_vocab_size,
        "initializer_range": config.initializer_range,
        "layer_norm_eps": LAYER_NORM_EPS, "position_embedding_type": "absolute",
        "pad_token_id": vocab.get("[PAD]", 0), "tie_word_embeddings": True,
    }
    if labels:
        values["id2label"] = {str(i): label for i, label in enumerate(labels)}
        values["label2id"] = {label: i for i, label in enumerate(labels)}
    if problem_type:
        values["problem_type"] = problem_type
    return values


# The inputs of a conversion to Hugging Face, resolved (`_hf_source`):
# checkpoint: the checkpoint prefix; record: its run record or None;
# config: its modeling.BertConfig, read from config_name (a file);
# tokenizer: the FullTokenizer of vocab_file, with do_lower_case.
_HfSource = collections.namedtuple("_HfSource", [
    "checkpoint", "record", "config", "config_name", "tokenizer", "vocab_file",
    "do_lower_case"])


def convert_to_hf(init_checkpoint, output_dir, bert_config_file=None, vocab_file=None,
                  do_lower_case=None, architecture=None, overwrite=False):
    """Writes a checkpoint of this project as a Hugging Face folder.

    Args:
      init_checkpoint: a checkpoint prefix or a directory (its latest).
      output_dir: the folder to write.
      bert_config_file: the model's config, or None: the run record's, else
        bert_config.json next to the checkpoint.
      vocab_file: the vocabulary, or None: the run record's, else vocab.txt
        next to the checkpoint.
      do_lower_case: the casing, or None: the run record's, else
        tokenizer_config.json next to the vocabulary's, else True.
      architecture: the transformers class to write, or None to detect it.
      overwrite: write into a folder of another model (`check_output_folder`).

    Returns:
      dict: "architecture", "config" (config.json's dict), "tensors" (name ->
      np.ndarray written), "dropped" (variable -> why).

    Raises:
      InputError: naming the flag, file or variable at fault; nothing is
        written then.
    """
    file_io.check_output_dir(output_dir)
    source = _hf_source(init_checkpoint, bert_config_file, vocab_file, do_lower_case)
    stored = dict(tf.train.list_variables(source.checkpoint))
    architecture, weights, dropped = _hf_variables(source, stored, architecture)
    labels, problem_type, labels_from = _hf_labels(source, stored, architecture, weights)
    hf_config = hf_config_for(source.config, architecture, source.tokenizer.vocab, labels,
                              problem_type)
    model_max_length, note = _input_length(source.record, source.config.max_position_embeddings)
    tokenizer_config = dict(SPECIAL_TOKENS, do_lower_case=bool(source.do_lower_case),
                            model_max_length=model_max_length,
                            tokenizer_class="BertTokenizer", tokenize_chinese_chars=True,
                            strip_accents=None, do_basic_tokenize=True)
    for name in ("pytorch_model.bin", "model.safetensors.index.json",
                 "pytorch_model.bin.index.json", "tf_model.h5", "tokenizer.json"):
        if tf.io.gfile.exists(os.path.join(output_dir, name)):
            raise InputError("--output_dir %s holds %s, which transformers would read "
                             "instead of or beside the converted files: choose an empty "
                             "folder" % (output_dir, name))
    check_output_folder(output_dir, [
        Planned("config.json", "config", hf_config),
        Planned("vocab.txt", "vocab", source.vocab_file),
        Planned(checkpoints.TOKENIZER_CONFIG_FILE, "json", tokenizer_config),
        Planned("special_tokens_map.json", "json", SPECIAL_TOKENS),
        Planned("model.safetensors", "weights", None)], overwrite)

    tensors = _hf_tensors(source, architecture, weights)
    _write_folder(output_dir, lambda folder: _write_hf_files(
        folder, tensors, hf_config, source.vocab_file, tokenizer_config))

    if note:
        tf.logging.warning("%s", note)
    reasons = collections.Counter(dropped.values())
    if dropped:
        tf.logging.info("Left out %d of the checkpoint's %d variables: %s", len(dropped),
                        len(stored), "; ".join("%d %s" % (n, why) for why, n in
                                               sorted(reasons.items())))
    file_io.report_output(
        os.path.join(output_dir, "model.safetensors"), "%s, %d tensors from %s" % (
            architecture, len(tensors), source.checkpoint))
    file_io.report_output(os.path.join(output_dir, "config.json"), ", ".join(
        ["hidden_act=%s" % hf_config["hidden_act"]]
        + (["labels %s from %s" % (",".join(labels), labels_from)]
           if labels and labels_from and problem_type != "regression" else [])
        + (["problem_type=%s" % problem_type] if problem_type else [])))
    for name in ("vocab.txt", checkpoints.TOKENIZER_CONFIG_FILE, "special_tokens_map.json"):
        file_io.report_output(os.path.join(output_dir, name),
                              "do_lower_case=%s" % bool(source.do_lower_case)
                              if name == checkpoints.TOKENIZER_CONFIG_FILE else "")
    return {"architecture": architecture, "config": hf_config, "tensors": tensors,
            "dropped": dropped}


def _hf_source(init_checkpoint, bert_config_file, vocab_file, do_lower_case):
    """The `_HfSource` of `convert_to_hf`'s arguments of the same names: the
    checkpoint resolved, the config, vocabulary and casing found where the
    arguments leave them out (the run record's, else the files next to the
    checkpoint), the tokenizer and config loaded and checked.

    Raises:
      InputError: no config or vocabulary to be found, or a config that
        Hugging Face cannot represent.
    """
    checkpoint = checkpoints.resolve_checkpoint("init_checkpoint", init_checkpoint,
                                                required=True)
    record = run_record.read(None, init_checkpoint)
    beside = os.path.dirname(checkpoint)
    if not bert_config_file and not (record and record.bert_config):
        bert_config_file = os.path.join(beside, "bert_config.json")
        if not tf.io.gfile.exists(bert_config_file):
            raise InputError("--bert_config_file is required (no run record and no "
                             "bert_config.json next to %s)" % checkpoint)
    if not vocab_file:
        recorded = record.flags.get("vocab_file") if record else None
        vocab_file = recorded if recorded and file_io.exists(recorded) else \
            os.path.join(beside, "vocab.txt")
        if not tf.io.gfile.exists(vocab_file):
            raise InputError("--vocab_file is required (%s and no vocab.txt next to %s)" % (
                "no run record naming one" if not record else
                "the run record %s names none" % record.path if not recorded else
                "the run record's %s is gone" % recorded, checkpoint))
    if do_lower_case is None:
        do_lower_case = record.flags.get("do_lower_case") if record else None
    if do_lower_case is None:
        do_lower_case = _do_lower_case(os.path.dirname(vocab_file))
    if do_lower_case is None:
        do_lower_case = True
    tokenizer = checkpoints.load_tokenizer(vocab_file, do_lower_case, checkpoint)
    config = checkpoints.load_bert_config(bert_config_file, vocab=tokenizer.vocab,
                                          vocab_file=vocab_file, record=record)
    config_name = bert_config_file or record.path
    if config.hidden_act.lower() not in HF_HIDDEN_ACT:
        raise InputError("%s: hidden_act %r has no Hugging Face counterpart"
                         % (config_name, config.hidden_act))
    return _HfSource(checkpoint, record, config, config_name, tokenizer, vocab_file,
                     do_lower_case)


def _task_variables(architecture):
    """The variables of the task head of the transformers class
    `architecture` (none for a class without one)."""
    return [var for var, _ in TASK_HEADS.get(architecture, ())]


def _hf_variables(source, stored, architecture):
    """The variables of `stored` (name -> shape, the checkpoint's) that the
    transformers class `architecture` (None: the one they show) takes.

    Returns:
      (architecture, the variable names converted, dropped: name -> why
      another is not).

    Raises:
      InputError: a variable the class needs is missing or has a shape the
        config does not imply.
    """
    checkpoint, config = source.checkpoint, source.config
    weights, dropped = classify_variables(stored)
    found, told_by = detect_architecture(weights)
    if architecture is None:
        architecture = found
        tf.logging.info("Architecture: %s (from %s in %s)", architecture,
                        ", ".join(told_by), checkpoint)
    else:
        tf.logging.info("Architecture: %s (--hf_architecture; the checkpoint's variables "
                        "show %s)", architecture, found)

    # The variables each part needs, and their shapes by the config.
    expected = expected_variables(config.to_dict())
    part_vars = {"pooler": list(_POOLER), "mlm": list(_MLM_HEAD), "nsp": list(_NSP_HEAD),
                 "task": _task_variables(architecture)}
    wanted = [n for n in expected if n not in _POOLER + _MLM_HEAD + _NSP_HEAD]
    for part in _CLASS_PARTS[architecture]:
        wanted += part_vars[part]
    missing = [n for n in wanted if n not in weights]
    if missing:
        raise InputError("--init_checkpoint %s has no %s, which %s needs%s" % (
            checkpoint, ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else ""),
            architecture, "" if architecture == found else
            " (its variables show %s)" % found))
    for name in sorted(weights - set(wanted)):
        if name in _POOLER:
            # transformers builds these classes without one, and would report
            # the tensors as unexpected; the task never reads it.
            dropped[name] = "%s has no pooler" % architecture
        else:
            dropped[name] = "%s has no place for it (--hf_architecture)" % architecture
    weights = [n for n in wanted if n not in dropped]

    for name in weights:
        want = expected.get(name)
        got = list(stored[name])
        if name in part_vars["task"]:
            outputs = _HEAD_OUTPUTS[architecture]
            want = [outputs or got[0], config.hidden_size] if name.endswith("weights") \
                else [outputs or stored[part_vars["task"][0]][0]]
        if got != want:
            raise InputError(
                "--init_checkpoint %s does not fit %s: %s has shape %s, the config implies %s"
                % (checkpoint, source.config_name, name, got, want))
    return architecture, weights, dropped


def _hf_labels(source, stored, architecture, weights):
    """(labels, problem_type, where the labels come from) of config.json,
    each None where the class `architecture` has none: a classifier's or
    tagger's labels (`_labels_of`, else LABEL_0..), a classifier's
    problem_type.

    Raises:
      InputError: the labels do not match the head's outputs.
    """
    if "task" not in _CLASS_PARTS[architecture]:
        return None, None, None
    head_weights = _task_variables(architecture)[0]
    num_outputs = stored[head_weights][0]
    labels, problem_type, labels_from = _labels_of(architecture, source.record,
                                                   source.checkpoint, num_outputs)
    if labels is not None and len(labels) != num_outputs and problem_type != "regression":
        raise InputError("%s lists %d labels but %s has %d outputs"
                         % (labels_from, len(labels), head_weights, num_outputs))
    if architecture == "BertForSequenceClassification" and problem_type is None:
        problem_type = "regression" if num_outputs == 1 else "single_label_classification"
    if labels is None and architecture in ("BertForSequenceClassification",
                                           "BertForTokenClassification") \
            and problem_type != "regression":
        tf.logging.warning("No run record or label file next to %s: the labels are "
                           "written as LABEL_0..LABEL_%d", source.checkpoint, num_outputs - 1)
        labels = ["LABEL_%d" % i for i in range(num_outputs)]
    if problem_type == "regression":
        # One output; transformers reads its count from id2label.
        labels = ["LABEL_0"]
    return labels, problem_type, labels_from


def _hf_tensors(source, architecture, weights):
    """Hugging Face name -> float32 array of the checkpoint's variables
    `weights`, transposed where Hugging Face's layout differs."""
    # Google name -> Hugging Face name (and whether to transpose).
    encoder_prefix = "" if architecture == "BertModel" else "bert."
    names = {g: (hf[0], transpose) for g, (hf, transpose)
             in _name_map(source.config.to_dict(), encoder_prefix, "").items()}
    for var, hf in TASK_HEADS.get(architecture, ()):
        names[var] = (hf, False)
    reader = tf.train.load_checkpoint(source.checkpoint)
    tensors = collections.OrderedDict()
    for name in [n for n in names if n in weights]:
        hf_name, transpose = names[name]
        value = np.asarray(reader.get_tensor(name), dtype=np.float32)
        tensors[hf_name] = np.ascontiguousarray(value.T if transpose else value)
    return tensors


def _write_hf_files(folder, tensors, hf_config, vocab_file, tokenizer_config):
    """Writes the files of a Hugging Face folder into `folder`: the
    `tensors` as model.safetensors, config.json of `hf_config`, vocab.txt (a
    copy of `vocab_file`), tokenizer_config.json and
    special_tokens_map.json."""
    from safetensors.numpy import save_file
    local, cleanup = _local_output(os.path.join(folder, "model.safetensors"))
    try:
        # "format": "pt" is what transformers expects of a PyTorch model's file.
        save_file(dict(tensors), local, metadata={"format": "pt"})
        # safetensors creates the file readable by its owner alone; give
        # it the mode of the files written beside it.
        os.chmod(local, 0o666 & ~_umask())
        if local != os.path.join(folder, "model.safetensors"):
            tf.io.gfile.copy(local, os.path.join(folder, "model.safetensors"))
    finally:
        cleanup()
    _write_json(os.path.join(folder, "config.json"), hf_config)
    tf.io.gfile.copy(vocab_file, os.path.join(folder, "vocab.txt"), overwrite=True)
    _write_json(os.path.join(folder, checkpoints.TOKENIZER_CONFIG_FILE), tokenizer_config)
    _write_json(os.path.join(folder, "special_tokens_map.json"), SPECIAL_TOKENS)


def _umask():
    """The process's umask (os.umask can only read it by setting it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _input_length(record, max_position_embeddings):
    """(model_max_length for tokenizer_config.json, a log line or None).

    A fine-tuned model read at most the run's --max_seq_length tokens at a
    time (its run record says), and with --doc_stride read longer inputs in
    windows; transformers' pipelines cut inputs at model_max_length or
    window them their own way, which the line says. A pre-trained model's
    positions after the run's --max_seq_length were not trained.

    Args:
      record: the run record (`run_record.RunRecord`), or None.
      max_position_embeddings: the model's longest input.
    """
    max_seq_length = record.flags.get("max_seq_length") if record else None
    if not max_seq_length:
        return max_position_embeddings, None
    length = min(int(max_seq_length), max_position_embeddings)
    stride = record.flags.get("doc_stride")
    if stride is None and length == max_position_embeddings:
        return length, None
    if record.problem_type == "pretraining":
        return length, (
            "%s (%s) pre-trained on sequences of --max_seq_length=%d tokens: "
            "tokenizer_config.json gets model_max_length=%d, as the position embeddings after "
            "it were not trained (docs/conversion.md)" % (record.script, record.path, length,
                                                          length))
    if stride is None:
        how = "cut its inputs at --max_seq_length=%d tokens" % length
    else:
        how = ("read longer inputs in windows of --max_seq_length=%d tokens starting "
               "--doc_stride=%d apart" % (length, stride))
    if record.script == "run_squad.py":
        pipeline = ("transformers (5) has no question-answering pipeline, and its "
                    "BertForQuestionAnswering reads one window: split longer contexts as the "
                    "scripts do (questions cut at --max_query_length=%s)"
                    % record.flags.get("max_query_length"))
    elif record.script == "run_ner.py":
        pipeline = ("the token-classification pipeline cuts a longer input there unless "
                    "called with stride=N (windows overlapping by N tokens), so its tags of "
                    "long inputs differ")
    elif record.script == "run_swag.py":
        pipeline = "transformers has no multiple-choice pipeline to compare"
    elif stride is not None:
        pipeline = ("the text-classification pipeline has no windows: with truncation=True "
                    "it reads the first %d tokens of a longer input alone, so its scores of "
                    "such inputs differ" % length)
    else:
        pipeline = ("the text-classification pipeline cuts a longer input there, as the "
                    "scripts do, only when called with truncation=True")
    return length, "%s (%s) %s: tokenizer_config.json gets model_max_length=%d; %s " \
        "(docs/conversion.md)" % (record.script, record.path, how, length, pipeline)


def _local_output(path):
    """(local path to write, cleanup function): a remote `path` (gs://) is
    written locally first, since safetensors writes local files only."""
    if not file_io.is_remote(path):
        return path, lambda: None
    tmp_dir = tempfile.mkdtemp(prefix="convert_checkpoint_")
    return os.path.join(tmp_dir, os.path.basename(path)), \
        lambda: shutil.rmtree(tmp_dir, ignore_errors=True)


def main(_):
    tf.logging.set_verbosity(tf.logging.INFO)
    s = settings_lib.from_flags(Settings)
    if s.to_hf:
        if s.hf_model_dir:
            raise InputError("--hf_model_dir and --to_hf are two directions: give one")
        convert_to_hf(s.init_checkpoint, s.output_dir, s.bert_config_file, s.vocab_file,
                      s.do_lower_case if "do_lower_case" in s.given else None,
                      s.hf_architecture, s.overwrite)
    else:
        convert(s.hf_model_dir, s.output_dir, s.overwrite)


if __name__ == "__main__":
    script_runner.run_script(main)
