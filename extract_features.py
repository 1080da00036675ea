"""Writes BERT's contextual vectors (its encoder layers' outputs) for every
line of a text file, for use as fixed features by other models.

The default output is JSON Lines: one line per input line, in input
order,

    {"linex_index": 0, "features": [{"token": "[CLS]", "layers": [
        {"index": -1, "values": [0.123456, ...]}, ...]}, ...]}

with every value rounded to 6 decimals, the tokens including [CLS] and
[SEP] and the padding left out. An input line ``A ||| B`` is a sentence pair.

Differences from the original:

The flags, the input and the JSON Lines format are the same (the rounding
and the keys' order included). Added:

* Streaming: the input is tokenized into a temporary TFRecord file that the
  estimator reads back (nothing is held in memory as constant tensors), and
  output is written as predictions arrive, so memory does not grow with the
  input. The output file appears (by rename) only when complete.
* --output_format=npz (NumPy arrays, float32 or --npz_dtype=float16) or
  tfrecord (one tf.train.Example per line) instead of the ~15 kB-per-token
  JSON.
* --pooling=cls|mean|pooler: one sentence vector per input line and layer
  instead of one vector per token (mean: over the real tokens, [CLS] and
  [SEP] included, as sentence-transformers does; pooler: the pooler's tanh
  layer on [CLS], as classifiers read it), L2-normalised with
  --normalize_embeddings.
* --export_dir: a SavedModel that takes raw text and returns one sentence
  embedding per text (see `export_embeddings`), for predict.py or
  TensorFlow Serving; with --input_file as well, both are written.
* --trim_padding (CPU/GPU): each batch runs at the length of its longest
  example rather than --max_seq_length.
* Progress logging with examples/s; clear errors for bad flags and files.
"""

import dataclasses
import os
import shutil
import tempfile
import time
from typing import Optional

import numpy as np
from scriptkit import quiet_tf  # noqa: F401  (first: imports TensorFlow without its start-up noise)
import tensorflow.compat.v1 as tf
from absl import flags

from scriptkit import checkpoints
from scriptkit import feature_writers
from scriptkit import file_io
from scriptkit import fine_tuning
from scriptkit import input_packing
from scriptkit import input_pipeline
import modeling
from scriptkit import runtime
from scriptkit import script_runner
from scriptkit import serving
from scriptkit import settings as settings_lib
from scriptkit import shared_flags
from scriptkit import task_model
import tokenization
from scriptkit import training
from scriptkit.errors import InputError


# ---------------------------------------------------------------------------
# Settings and flags.

@dataclasses.dataclass(frozen=True)
class Settings(settings_lib.TPU):
    """This script's flags, with its defaults (read in main by
    `settings_lib.from_flags`): the TPU's, and of the training options
    only those of inference (--precision, --use_xla, --fused_ops)."""

    input_file: Optional[str] = None
    output_file: Optional[str] = None
    bert_config_file: Optional[str] = None
    max_seq_length: int = 128
    init_checkpoint: Optional[str] = None
    vocab_file: Optional[str] = None
    do_lower_case: bool = True
    use_one_hot_embeddings: bool = False
    precision: str = "fp32"
    use_xla: bool = False
    fused_ops: str = "auto"
    batch_size: int = 32
    export_dir: Optional[str] = None
    export_precision: str = "fp32"
    layers: str = "-1,-2,-3,-4"
    output_format: str = "jsonl"
    pooling: str = "none"
    normalize_embeddings: bool = False
    export_text_pairs: bool = False
    npz_dtype: str = "float32"
    trim_padding: bool = False


shared_flags.define_settings_flags(Settings, helps={
    "batch_size": "Input lines per prediction batch.",
    "export_dir": "If set, export a SavedModel of sentence embeddings under this "
                  "directory (in a timestamped subdirectory): serving_default takes "
                  "tf.string text [batch] and returns float32 embedding [batch, "
                  "hidden_size], pooled (--pooling; none: mean) from the first "
                  "--layers entry. Without --input_file, only the export is "
                  "written."})

flags.DEFINE_string(
    "layers", "-1,-2,-3,-4",
    "Comma-separated encoder layers to output: -1 is the last layer, 0 the first.")

flags.DEFINE_enum(
    "output_format", "jsonl", ["jsonl", "npz", "tfrecord"],
    "jsonl: the original's JSON Lines. npz: NumPy arrays (see "
    "README.md). tfrecord: one tf.train.Example per line.")

flags.DEFINE_enum(
    "pooling", "none", ["none", "cls", "mean", "pooler"],
    "none: one vector per token (the original). cls: the [CLS] token's vector. "
    "mean: the mean over the real tokens ([CLS] and [SEP] included, padding "
    "excluded). pooler: the pooler's output (dense + tanh on the last layer's "
    "[CLS]; --layers=-1 only). With cls/mean/pooler, one vector per input line "
    "and layer. --export_dir pools by mean where this is none.")

flags.DEFINE_bool(
    "normalize_embeddings", False,
    "Divide each pooled vector by its L2 norm (sentence-transformers' Normalize), "
    "in the output file and the export. Needs pooling (not for --pooling=none "
    "with --input_file).")

flags.DEFINE_bool(
    "export_text_pairs", False,
    "With --export_dir: serving_default also takes text_b [batch], each text packed "
    "with its text_b as a line \"A ||| B\" is (an empty text_b: the text alone).")

flags.DEFINE_enum(
    "npz_dtype", "float32", ["float32", "float16"],
    "Float type of the arrays written with --output_format=npz.")

flags.DEFINE_bool(
    "trim_padding", False,
    "CPU/GPU only: run each batch at the length of its longest example "
    "instead of --max_seq_length. Much faster for short lines; values agree "
    "with the default to float32 rounding (so a 6th decimal may differ).")

@dataclasses.dataclass
class InputExample:
    """One input line: its number (unique_id, from 0), `text_a`, and for a
    pair `text_b` (else None)."""

    unique_id: int
    text_a: str
    text_b: str | None


@dataclasses.dataclass
class InputFeatures:
    """The model input of one line: its `tokens` ([CLS] ... [SEP], unpadded)
    and the int lists input_ids, input_mask and input_type_ids, each
    max_seq_length long."""

    unique_id: int
    tokens: list
    input_ids: list
    input_mask: list
    input_type_ids: list


# ---------------------------------------------------------------------------
# Data.

def iter_examples(input_file):
    """Yields an `InputExample` per line of `input_file`, in order.

    A line "A ||| B" is the pair (A, B); any other line is one text. Lines are
    stripped; an empty line is an example with empty text (its output line
    keeps the input's numbering).

    Raises:
      InputError: a line is not valid UTF-8 (names the file and line).
    """
    with tf.io.gfile.GFile(input_file, "rb") as reader:
        for unique_id, raw in enumerate(reader):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise InputError("--input_file %s line %d is not valid UTF-8: %s"
                                 % (input_file, unique_id + 1, e))
            line = line.strip()
            # Split at the last separator, if any.
            text_a, separator, text_b = line.rpartition(" ||| ")
            if not separator:
                text_a, text_b = line, None
            yield InputExample(unique_id=unique_id, text_a=text_a, text_b=text_b)


def read_examples(input_file):
    """All `InputExample`s of `input_file` as a list (see `iter_examples`)."""
    return list(iter_examples(input_file))


def convert_example(ex_index, example, seq_length, tokenizer):
    """Tokenizes one `InputExample` into `InputFeatures` of `seq_length`.

    Single texts become [CLS] A [SEP]; pairs [CLS] A [SEP] B [SEP] with
    type ids 0 for the first segment (and its [SEP]) and 1 for the second.
    The first five examples are logged.
    """
    tokens_a = tokenizer.tokenize(example.text_a)
    tokens_b = tokenizer.tokenize(example.text_b) if example.text_b else None
    tokens, input_ids, input_mask, input_type_ids = input_packing.pack_sequence_pair(
        tokens_a, tokens_b, seq_length, tokenizer)
    features = InputFeatures(unique_id=example.unique_id, tokens=tokens,
                             input_ids=input_ids, input_mask=input_mask,
                             input_type_ids=input_type_ids)
    if ex_index < 5:
        input_pipeline.log_example(
            [("unique_id", example.unique_id),
             ("tokens", [tokenization.printable_text(t) for t in tokens]),
             ("length", len(tokens))], debug=ex_index > 0,
            ids=[("input_ids", input_ids), ("input_mask", input_mask),
                 ("input_type_ids", input_type_ids)])
    return features


def convert_examples_to_features(examples, seq_length, tokenizer):
    """`convert_example` of every `InputExample`: a list of `InputFeatures`
    of `seq_length`, in order."""
    return [convert_example(i, example, seq_length, tokenizer)
            for i, example in enumerate(examples)]


def write_features(features, output_file):
    """Writes `InputFeatures` (any iterable) to a TFRecord file, one
    tf.train.Example each, streaming.

    Returns:
      The number of features written.
    """
    count = 0
    with tf.io.TFRecordWriter(output_file) as writer:
        for feature in features:
            example = tf.train.Example(features=tf.train.Features(feature={
                "unique_ids": input_pipeline.int64_feature([feature.unique_id]),
                "input_ids": input_pipeline.int64_feature(feature.input_ids),
                "input_mask": input_pipeline.int64_feature(feature.input_mask),
                "input_type_ids": input_pipeline.int64_feature(feature.input_type_ids),
            }))
            writer.write(example.SerializeToString())
            count += 1
    return count


def file_based_input_fn_builder(input_file, seq_length, trim_padding=False):
    """Creates an `input_fn` reading the TFRecord file of `write_features`.

    The dataset yields dicts of int32 tensors: unique_ids [batch],
    input_ids / input_mask / input_type_ids [batch, seq_length], in file order.
    With `trim_padding`, each batch is cut to its longest example (dynamic
    shapes: not for TPUs).
    """
    name_to_features = {
        "unique_ids": tf.io.FixedLenFeature([], tf.int64),
        "input_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
        "input_mask": tf.io.FixedLenFeature([seq_length], tf.int64),
        "input_type_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
    }

    def input_fn(params):
        """See file_based_input_fn_builder."""
        d = tf.data.TFRecordDataset(input_file, buffer_size=input_pipeline.TFRECORD_BUFFER_BYTES)
        d = d.map(lambda record: input_pipeline.decode_record(record, name_to_features))
        # Every line gets its features: the last batch may be a partial one.
        d = d.batch(params["batch_size"], drop_remainder=False)
        return d.map(_trim_batch) if trim_padding else d

    return input_fn


def _trim_batch(batch):
    """Cuts the padding columns that no example of the batch uses."""
    length = tf.reduce_max(tf.reduce_sum(batch["input_mask"], axis=1))
    return {name: t if name == "unique_ids" else t[:, :length] for name, t in batch.items()}


def input_fn_builder(features, seq_length):
    """Creates an `input_fn` serving a list of `InputFeatures` from memory
    (as constant tensors, so for small inputs: `main` streams through
    `write_features` and `file_based_input_fn_builder` instead).

    The dataset yields the same dicts as `file_based_input_fn_builder`'s, in
    list order, the last batch possibly partial.
    """
    num_examples = len(features)
    columns = {
        "unique_ids": ([f.unique_id for f in features], [num_examples]),
        "input_ids": ([f.input_ids for f in features], [num_examples, seq_length]),
        "input_mask": ([f.input_mask for f in features], [num_examples, seq_length]),
        "input_type_ids": ([f.input_type_ids for f in features], [num_examples, seq_length]),
    }

    def input_fn(params):
        """See input_fn_builder."""
        d = tf.data.Dataset.from_tensor_slices({
            name: tf.constant(values, dtype=tf.int32, shape=shape)
            for name, (values, shape) in columns.items()})
        return d.batch(params["batch_size"], drop_remainder=False)

    return input_fn


# ---------------------------------------------------------------------------
# Model.

def model_fn_builder(bert_config, init_checkpoint, layer_indexes, use_tpu,
                     use_one_hot_embeddings, pooling="none", options=None,
                     normalize=False):
    """Builds the feature-extraction `model_fn` for the runner (TPUEstimator
    API; PREDICT only).

    Args:
      bert_config: modeling.BertConfig.
      init_checkpoint: checkpoint prefix; must hold every encoder variable.
      layer_indexes: encoder layers to output (negative: from the last).
      use_tpu: build for TPUEstimator (restore through a scaffold).
      use_one_hot_embeddings: embedding lookup by one-hot product (TPUs).
      pooling: "none", "cls", "mean" or "pooler" (see `sentence_vectors`).
      options: training.TrainingOptions (precision, fused kernels; None:
        the defaults).
      normalize: L2-normalise each pooled vector.

    Returns:
      model_fn whose predictions per example are "unique_id" (int32),
      "input_ids" and "input_mask" ([seq_length], to recover the tokens and
      their number), and for the j-th entry of `layer_indexes`
      "layer_output_j": [seq_length, hidden_size] with pooling "none", else
      [hidden_size] (see `sentence_vectors`).
    """

    def build_head(features, mode):
        del mode  # PREDICT only.
        input_mask = features["input_mask"]
        model = training.bert_model(
            bert_config, False, features["input_ids"], input_mask, features["input_type_ids"],
            use_one_hot_embeddings, options)
        _check_checkpoint_covers_model(init_checkpoint, with_pooler=pooling == "pooler")
        predictions = {"unique_id": features["unique_ids"],
                       "input_ids": features["input_ids"], "input_mask": input_mask}
        for j, layer_index in enumerate(layer_indexes):
            predictions["layer_output_%d" % j] = sentence_vectors(
                model, layer_index, input_mask, pooling, normalize)
        return task_model.Head(predictions=predictions)

    return task_model.task_model_fn(build_head, init_checkpoint, 0.0, None, None, use_tpu,
                                    options, modes=(runtime.ModeKeys.PREDICT,))


def sentence_vectors(model, layer_index, input_mask, pooling, normalize=False):
    """The vectors of one encoder layer, pooled per `pooling`.

    Args:
      model: the modeling.BertModel.
      layer_index: the encoder layer (negative: from the last).
      input_mask: int32 [batch, seq_length], 1 at the real tokens.
      pooling: "none": every token's vector, [batch, seq_length, hidden];
        "cls": the first token's, "mean": the mean over the positions where
        input_mask is 1, "pooler": the model's pooled output (its dense tanh
        layer on the last layer's first token; `layer_index` must name the
        last layer), each [batch, hidden].
      normalize: divide each pooled vector by its L2 norm.

    Returns:
      float32 [batch, seq_length, hidden] or [batch, hidden].
    """
    if pooling == "pooler":
        output = model.get_pooled_output()
    else:
        output = model.get_all_encoder_layers()[layer_index]  # [batch, seq_length, hidden]
    if pooling == "cls":
        output = output[:, 0, :]
    elif pooling == "mean":
        # Every row has at least [CLS] and [SEP]: no division by 0.
        real_tokens = tf.cast(input_mask, tf.float32)[:, :, None]
        output = (tf.reduce_sum(output * real_tokens, axis=1)
                  / tf.reduce_sum(real_tokens, axis=1))
    if normalize:
        # x / max(|x|, 1e-12), as sentence-transformers' Normalize (torch's
        # F.normalize) divides: TensorFlow's epsilon bounds the squared norm.
        output = tf.math.l2_normalize(output, axis=-1, epsilon=1e-24)
    return output


def _check_checkpoint_covers_model(init_checkpoint, with_pooler=False):
    """Features from randomly initialised weights are worthless, so every
    encoder variable must come from the checkpoint (the pooler too
    `with_pooler`; else, unused, it may be absent).

    Raises:
      InputError: names the missing variables or the shape mismatch.
    """
    try:
        (_, initialized) = modeling.get_assignment_map_from_checkpoint(
            tf.trainable_variables(), init_checkpoint)
    except ValueError as e:
        raise InputError("--init_checkpoint: %s" % e)
    missing = [v.op.name for v in tf.trainable_variables()
               if v.op.name not in initialized
               and (with_pooler or "/pooler/" not in v.op.name)]
    if missing:
        raise InputError(
            "--init_checkpoint %s lacks %d variable(s) of the model described by "
            "--bert_config_file, e.g. %s: is it a BERT checkpoint with Google's variable "
            "names (see convert_checkpoint.py for Hugging Face models)?"
            % (init_checkpoint, len(missing), ", ".join(missing[:3])))


# ---------------------------------------------------------------------------
# Export: a SavedModel of sentence embeddings.

# The output of the export's signatures.
EMBEDDING = "embedding"


def embedding_model_fn_builder(bert_config, layer_index, pooling, normalize, options=None):
    """Builds the model_fn of an embedding export (`serving.export` calls it
    in PREDICT mode, with no checkpoint: the export restores the weights).

    Args:
      bert_config: modeling.BertConfig.
      layer_index, pooling, normalize: see `sentence_vectors` (pooling not
        "none").
      options: training.TrainingOptions for the export (`for_export`).

    Returns:
      model_fn taking int32 input_ids, input_mask and segment_ids [batch,
      seq_length]; its predictions and export outputs are {"embedding":
      float32 [batch, hidden_size]}.
    """

    def build_head(features, mode):
        del mode  # PREDICT only.
        model = training.bert_model(
            bert_config, False, features["input_ids"], features["input_mask"],
            features["segment_ids"], False, options)
        embedding = sentence_vectors(model, layer_index, features["input_mask"], pooling,
                                     normalize)
        return task_model.Head(predictions={EMBEDDING: embedding},
                               export_outputs={EMBEDDING: embedding})

    return task_model.task_model_fn(build_head, None, 0.0, None, None, False, options,
                                    modes=(runtime.ModeKeys.PREDICT,))


def export_embeddings(source, layer_index=-1, pooling="mean", normalize=False,
                      text_pairs=False):
    """Exports a SavedModel (tag "serve") of sentence embeddings of the
    `serving.ExportSource` `source` (see serving.py) and returns its
    directory (timestamped, in source.export_dir).

    serving_default takes tf.string text [batch] (and text_b [batch] with
    `text_pairs`: an empty one gives the text alone), tokenized and packed
    as extract_features.py packs a line (a pair as "A ||| B"), cut to
    source.max_seq_length, and returns embedding, float32 [batch,
    hidden_size]: layer `layer_index` pooled by `pooling` (and L2-normalised
    with `normalize`), see `sentence_vectors`. serving_ids takes int32
    input_ids, input_mask and segment_ids [batch, seq_length] and returns
    the same embedding. tokenizer_config.json records max_seq_length,
    pooling, layer and normalize_embeddings.

    Args:
      source: the model and its weights (a checkpoint prefix holding the
        encoder, and the pooler for pooling "pooler"), the folder, the
        tokenizer built into the export, the input length and the options
        (its precision is kept).
      layer_index, pooling, normalize: the embedding (pooling not "none").
      text_pairs: serving_default also takes text_b.
    """
    model_fn = embedding_model_fn_builder(
        source.bert_config, layer_index, pooling, normalize,
        (source.options or training.TrainingOptions()).for_export())
    max_seq_length = source.max_seq_length

    def text_signature(tokenizer):
        inputs = {"text": serving.string_input("text")}
        if text_pairs:
            inputs["text_b"] = serving.string_input("text_b")
        pieces_b = tokenizer.tokenize(inputs["text_b"]) if text_pairs else None
        features = serving.pack(tokenizer.tokenize(inputs["text"]), pieces_b, max_seq_length,
                                tokenizer.cls_id, tokenizer.sep_id)
        return inputs, features, lambda predictions: {EMBEDDING: predictions[EMBEDDING]}

    settings = {"max_seq_length": max_seq_length, "pooling": pooling, "layer": layer_index,
                "normalize_embeddings": bool(normalize)}
    if text_pairs:
        # A row without text_b is the text alone (an empty text_b packs so).
        settings["optional_inputs"] = ["text_b"]
    return serving.export(model_fn, source, text_signature, settings=settings,
                          onnx_head=("embedding", (layer_index, pooling, normalize)))


# ---------------------------------------------------------------------------
# Flag checks.

def parse_layers(layers, num_hidden_layers, output_format="jsonl"):
    """"-1,-2" -> [-1, -2], each in [-num_hidden_layers, num_hidden_layers).

    A layer may be named twice only for --output_format=jsonl (the value of
    `output_format`); the other formats name their arrays by layer.

    Raises:
      InputError: naming --layers and the bad entry.
    """
    indexes = []
    for part in (layers or "").split(","):
        part = part.strip()
        try:
            index = int(part)
        except ValueError:
            raise InputError("--layers=%s: %r is not an integer layer index (e.g. "
                             "--layers=-1,-2,-3,-4)" % (layers, part))
        if not -num_hidden_layers <= index < num_hidden_layers:
            raise InputError(
                "--layers=%s: layer %d does not exist; the model has %d layers "
                "(indexes 0..%d, or -1..-%d from the last)"
                % (layers, index, num_hidden_layers, num_hidden_layers - 1,
                   num_hidden_layers))
        indexes.append(index)
    if len(set(indexes)) != len(indexes) and output_format != "jsonl":
        raise InputError("--layers=%s names a layer twice, which --output_format=%s "
                         "cannot store" % (layers, output_format))
    return indexes


def resolve_checkpoint(init_checkpoint):
    """A checkpoint prefix, or a directory holding checkpoints -> the
    checkpoint prefix (see `checkpoints.resolve_checkpoint`).

    Raises:
      InputError: no checkpoint there, or several and no way to choose.
    """
    return checkpoints.resolve_checkpoint("init_checkpoint", init_checkpoint, required=True)


# ---------------------------------------------------------------------------

def _check_run_flags(settings):
    """The checks of which outputs a run writes, on the flags of
    `settings` alone (before any file is read): --input_file with
    --output_file, --export_dir, or both; --normalize_embeddings and
    --export_text_pairs where they apply.

    Raises:
      InputError: one line naming the flag.
    """
    s = settings
    model_flags = ("vocab_file", "bert_config_file", "init_checkpoint")
    if not s.export_dir:
        settings_lib.require(s, "input_file", "output_file", *model_flags)
    elif s.input_file:
        settings_lib.require(s, "output_file", *model_flags)
    else:
        settings_lib.require(s, *model_flags)
        if s.output_file:
            raise InputError("--output_file=%s needs an --input_file to read (with "
                             "--export_dir alone, only the export is written)" % s.output_file)
    if s.normalize_embeddings and s.pooling == "none" and s.input_file:
        raise InputError("--normalize_embeddings normalises pooled vectors: give --pooling=cls, "
                         "mean or pooler (per-token vectors are written as they are)")
    if s.export_text_pairs and not s.export_dir:
        raise InputError("--export_text_pairs shapes the export: give --export_dir too")


def _check_pooler(layers, layer_indexes, num_hidden_layers, init_checkpoint):
    """For --pooling=pooler: the pooler reads the last layer only (`layers`:
    the flag's value, `layer_indexes` parsed), and the checkpoint must hold
    it. Raises InputError naming the flag."""
    if any(index % num_hidden_layers != num_hidden_layers - 1 for index in layer_indexes):
        raise InputError("--pooling=pooler is computed from the last layer only: give "
                         "--layers=-1 (not %s)" % layers)
    stored = dict(tf.train.list_variables(init_checkpoint))
    if "bert/pooler/dense/kernel" not in stored:
        raise InputError("--pooling=pooler: --init_checkpoint %s holds no pooler "
                         "(bert/pooler/dense/kernel); use --pooling=cls or mean"
                         % init_checkpoint)


@dataclasses.dataclass
class ExtractionRun:
    """What the phases of `main` take, from `prepare_run`.

    Attributes:
      settings: the script's `Settings`.
      tokenizer: the tokenization.FullTokenizer of --vocab_file.
      bert_config: the model's modeling.BertConfig.
      init_checkpoint: the checkpoint (resolved from --init_checkpoint).
      layer_indexes: --layers, parsed (ints).
      options: training.TrainingOptions (precision, XLA, fused ops).
    """

    settings: Settings
    tokenizer: tokenization.FullTokenizer
    bert_config: modeling.BertConfig
    init_checkpoint: str
    layer_indexes: list
    options: training.TrainingOptions

    def export_source(self):
        """What the export takes (`serving.ExportSource`): the model and
        the weights of --init_checkpoint, --export_dir, the tokenizer's
        files, --max_seq_length and the options."""
        s = self.settings
        return serving.ExportSource(self.bert_config, self.init_checkpoint, s.export_dir,
                                    s.vocab_file, s.do_lower_case, s.max_seq_length,
                                    self.options, s.export_precision)

    def estimator(self, model_dir):
        """The runner of the feature-extraction model_fn (`model_fn_builder`)
        with its scratch `model_dir` (None on a TPU): a TPUEstimator's API,
        which runs on the CPU or GPU when --use_tpu is off."""
        s = self.settings
        run_config = training.make_run_config(
            output_dir=model_dir, save_checkpoints_steps=None, use_tpu=s.use_tpu,
            tpu_name=s.tpu_name, tpu_zone=s.tpu_zone, gcp_project=s.gcp_project,
            master=s.master, num_tpu_cores=s.num_tpu_cores, tpu_job_name=s.tpu_job_name,
            options=self.options)
        model_fn = model_fn_builder(
            bert_config=self.bert_config, init_checkpoint=self.init_checkpoint,
            layer_indexes=self.layer_indexes, use_tpu=s.use_tpu,
            use_one_hot_embeddings=s.use_one_hot_embeddings, pooling=s.pooling,
            options=self.options, normalize=s.normalize_embeddings)
        return training.make_estimator(model_fn, run_config, s.use_tpu,
                                       predict_batch_size=s.batch_size)


def prepare_run(settings):
    """Checks `settings` (the script's `Settings`) and the files they name,
    before any output is written.

    Returns:
      An `ExtractionRun`.

    Raises:
      InputError: one line naming the flag (and file) at fault.
    """
    s = settings
    _check_run_flags(s)
    if s.input_file:
        file_io.require_file("input_file", s.input_file)
    serving.check_export_flags(s.vocab_file, s.export_dir, s.export_precision)
    tokenizer = checkpoints.load_tokenizer(s.vocab_file, s.do_lower_case, s.init_checkpoint)
    bert_config = checkpoints.load_bert_config(
        s.bert_config_file, max_seq_length=s.max_seq_length,
        vocab=tokenizer.vocab, vocab_file=s.vocab_file)
    missing = [t for t in ("[CLS]", "[SEP]", "[UNK]") if t not in tokenizer.vocab]
    if missing:
        raise InputError("--vocab_file %s lacks %s: not a BERT vocabulary"
                         % (s.vocab_file, ", ".join(missing)))
    layer_indexes = parse_layers(s.layers, bert_config.num_hidden_layers,
                                 output_format=s.output_format)
    init_checkpoint = resolve_checkpoint(s.init_checkpoint)
    checkpoints.check_init_checkpoint("init_checkpoint", init_checkpoint, bert_config,
                                      s.bert_config_file)
    if s.pooling == "pooler":
        _check_pooler(s.layers, layer_indexes, bert_config.num_hidden_layers, init_checkpoint)
    if s.max_seq_length < 3:
        raise InputError("--max_seq_length=%d is too small (at least 3: [CLS] A [SEP])"
                         % s.max_seq_length)
    if s.batch_size < 1:
        raise InputError("--batch_size must be positive")
    if s.trim_padding and s.use_tpu:
        raise InputError("--trim_padding needs dynamic shapes, which TPUs do not "
                         "support: leave it off with --use_tpu")
    options = training.TrainingOptions(
        precision=s.precision, use_xla=s.use_xla,
        fused_ops=training.choose_fused_ops(s.fused_ops, training=False))
    if s.input_file:
        file_io.check_output_file(s.output_file, "output_file")
    return ExtractionRun(s, tokenizer, bert_config, init_checkpoint, layer_indexes, options)


def export_run(run):
    """Writes the sentence-embedding SavedModel of `run` under
    --export_dir (`export_embeddings`), pooled by --pooling (none: mean)."""
    s = run.settings
    # Per-token vectors (the file's default) make no sentence embedding.
    pooling = "mean" if s.pooling == "none" else s.pooling
    tf.logging.info(
        "Exporting sentence embeddings: %s pooling%s of layer %d, %s%s", pooling,
        " (the export's default for --pooling=none)" if s.pooling == "none" else "",
        run.layer_indexes[0],
        "L2-normalised" if s.normalize_embeddings else
        "not normalised (--normalize_embeddings to normalise)",
        "; inputs text and text_b" if s.export_text_pairs else "; input text")
    export_embeddings(run.export_source(), layer_index=run.layer_indexes[0], pooling=pooling,
                      normalize=s.normalize_embeddings, text_pairs=s.export_text_pairs)


def write_input_features(run, features_file):
    """Tokenizes --input_file, streaming, into `features_file`
    (`write_features`). Returns the number of examples.

    Raises:
      InputError: an empty --input_file.
    """
    s = run.settings
    num_examples = write_features(
        (convert_example(i, example, s.max_seq_length, run.tokenizer)
         for i, example in enumerate(iter_examples(s.input_file))),
        features_file)
    if num_examples == 0:
        raise InputError("--input_file %s is empty: expected one text (or "
                         "\"A ||| B\" pair) per line" % s.input_file)
    tf.logging.info("Tokenized %d examples from %s", num_examples, s.input_file)
    return num_examples


def write_features_file(run, estimator, input_fn, num_examples):
    """Predicts the features of the `num_examples` examples of `input_fn`
    and writes them to --output_file as they come (the file appears,
    complete, only at the end).

    Raises:
      RuntimeError: the estimator gave another number of predictions.
    """
    s = run.settings
    writer = feature_writers.make_writer(s.output_format, s.output_file, run.layer_indexes,
                                         s.npz_dtype)
    try:
        start = time.time()
        done = 0
        # The model_fn restores --init_checkpoint; the runner's model
        # directory is a scratch one, without checkpoints.
        for result in fine_tuning.iter_predictions(
                estimator, input_fn, num_examples, s.batch_size, num_examples,
                init_checkpoint=run.init_checkpoint, phase="Computing features",
                unit="examples", last_line=False):
            if done == 0:
                # The first result comes after building the graph and
                # restoring the checkpoint (the progress lines' rate is
                # measured from here).
                tf.logging.info("First predictions after %.1f s", time.time() - start)
            num_tokens = int(np.sum(result["input_mask"]))
            # Every token came from the vocabulary, so ids map back to them.
            tokens = run.tokenizer.convert_ids_to_tokens(
                result["input_ids"][:num_tokens].tolist())
            layers = []
            for j in range(len(run.layer_indexes)):
                layer = result["layer_output_%d" % j]
                layers.append(layer if s.pooling != "none" else layer[:num_tokens])
            writer.write(int(result["unique_id"]), tokens, layers)
            done += 1
        writer.close()
        writer = None
    finally:
        if writer is not None:
            writer.abort()
    elapsed = max(time.time() - start, 1e-9)
    file_io.report_output(s.output_file, "%d examples in %.1f s (%.1f examples/s)"
                          % (done, elapsed, done / elapsed))


def main(_):
    tf.logging.set_verbosity(tf.logging.INFO)
    run = prepare_run(settings_lib.from_flags(Settings))
    settings = run.settings
    if settings.export_dir:
        export_run(run)
        if not settings.input_file:
            return

    output_dir = os.path.dirname(settings.output_file)
    if output_dir:
        tf.io.gfile.makedirs(output_dir)

    # Tokenize once, streaming, into a TFRecord file next to the output (so
    # a TPU can read it from the same bucket).
    features_file = "%s.features.tmp-%d" % (settings.output_file, os.getpid())
    model_dir = None if settings.use_tpu else tempfile.mkdtemp(prefix="extract_features_")
    try:
        num_examples = write_input_features(run, features_file)
        input_fn = file_based_input_fn_builder(features_file, settings.max_seq_length,
                                               trim_padding=settings.trim_padding)
        write_features_file(run, run.estimator(model_dir), input_fn, num_examples)
    finally:
        if tf.io.gfile.exists(features_file):  # Scratch input, never an output.
            tf.io.gfile.remove(features_file)
        if model_dir:
            shutil.rmtree(model_dir, ignore_errors=True)


if __name__ == "__main__":
    script_runner.run_script(main)
