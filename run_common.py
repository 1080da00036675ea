"""What every BERT script repeats: shared flags, run configuration, estimator
construction, checkpoint initialisation, training options, logging and file
output.

The parts that need no TensorFlow (the shared flags, `run_script`, input and
output checks, progress lines, atomic output files) live in run_base.py and
are re-exported here, so a script needs this one module. This module
imports TensorFlow, modeling and optimization; scripts that must start
without TensorFlow import run_base instead.
"""

import contextlib
import json
import os
import re
import struct
import time

import quiet_tf  # noqa: F401  (first: imports TensorFlow without its start-up noise)
import tensorflow.compat.v1 as tf

import modeling
import optimization
import pretraining_records
import runtime
from run_base import (  # noqa: F401  (re-exported: the scripts use them from here)
    InputError,
    TPU_FLAGS,
    TRAINING_OPTION_FLAGS,
    define_flags,
    run_script,
    check_output_dir,
    check_output_file,
    output_write_error,
    require_flags,
    require_file,
    expand_file_patterns,
    REQUIRED_CONFIG_KEYS,
    OPTIONAL_CONFIG_KEYS,
    check_bert_config_values,
    read_file_bytes,
    utf8_lines,
    non_utf8_error,
    format_duration,
    log_info,
    log_warning,
    log_every_seconds,
    Progress,
    truncate_seq_pair,
    pack_sequence_pair,
    atomic_path,
    atomic_output,
    AtomicFile,
)
from run_base import _flag, _open_binary


# ---------------------------------------------------------------------------
# Config, vocabulary and checkpoints, checked before any work.

def require_checkpoint(flag_name, path):
    """Raises InputError if `path` (the value of --flag_name) is set but no
    checkpoint exists there (an unset flag is fine: random initialisation)."""
    if path and not tf.train.checkpoint_exists(path):
        raise InputError("--%s: no checkpoint at %s" % (flag_name, path))


def load_bert_config(bert_config_file, max_seq_length=None, vocab=None,
                     vocab_file=None):
    """Reads and checks a BERT config against the other inputs.

    Args:
      bert_config_file: path of bert_config.json.
      max_seq_length: if given, must not exceed max_position_embeddings.
      vocab: if given (token -> id), its size must not exceed vocab_size (a
        smaller one is logged as a warning: the embedding rows past it are
        never used).
      vocab_file: its path, for the message.

    Returns:
      modeling.BertConfig; training settings missing from the file
      (OPTIONAL_CONFIG_KEYS) have BertConfig's defaults.

    Raises:
      InputError: naming the flag at fault (see check_bert_config_values).
    """
    require_file("bert_config_file", bert_config_file)
    where = "--bert_config_file %s" % bert_config_file
    data = read_file_bytes(bert_config_file)
    try:
        values = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise non_utf8_error("bert_config_file", bert_config_file)
    except ValueError as e:
        raise InputError("%s is not valid JSON: %s" % (where, e))
    if not isinstance(values, dict):
        raise InputError("%s must hold a JSON object" % where)
    check_bert_config_values(values, where)
    try:
        modeling.get_activation(values["hidden_act"])
    except ValueError as e:
        raise InputError('%s: "hidden_act": %s' % (where, e))
    defaulted = [key for key in OPTIONAL_CONFIG_KEYS if key not in values]
    config = modeling.BertConfig.from_dict(values)
    if defaulted:
        tf.logging.info("%s has no %s: using %s", where, ", ".join(defaulted),
                        ", ".join("%s=%s" % (k, getattr(config, k)) for k in defaulted))
    try:
        modeling._validate_config(config)
    except ValueError as e:
        raise InputError("%s: %s" % (where, e))
    if max_seq_length is not None and max_seq_length > config.max_position_embeddings:
        raise InputError(
            "Cannot use sequence length %d because the BERT model was only trained "
            "up to sequence length %d (--max_seq_length vs max_position_embeddings "
            "in %s)" % (max_seq_length, config.max_position_embeddings, bert_config_file))
    if vocab is not None and len(vocab) > config.vocab_size:
        raise InputError(
            "--vocab_file %s has %d tokens but vocab_size in --bert_config_file %s is "
            "%d: the vocabulary does not belong to this model"
            % (vocab_file, len(vocab), bert_config_file, config.vocab_size))
    if vocab is not None and len(vocab) < config.vocab_size:
        tf.logging.warning(
            "--vocab_file %s has %d tokens, fewer than vocab_size %d in --bert_config_file "
            "%s: embedding rows %d..%d are never used. Fine for a padded table; otherwise "
            "check that the vocabulary belongs to this model.", vocab_file, len(vocab),
            config.vocab_size, bert_config_file, len(vocab), config.vocab_size - 1)
    return config


def load_tokenizer(vocab_file, do_lower_case, init_checkpoint=None):
    """A FullTokenizer, after checking the casing against a Google checkpoint
    name. Raises InputError for a missing vocabulary, one that is not UTF-8
    (naming the line) or a casing mismatch."""
    import tokenization
    require_file("vocab_file", vocab_file)
    try:
        tokenization.validate_case_matches_checkpoint(do_lower_case, init_checkpoint)
        return tokenization.FullTokenizer(vocab_file=vocab_file, do_lower_case=do_lower_case)
    except UnicodeDecodeError:
        raise non_utf8_error("vocab_file", vocab_file)
    except ValueError as e:
        raise InputError(str(e))


def resolve_checkpoint(flag_name, path, required=False):
    """The checkpoint that a checkpoint flag names.

    Args:
      flag_name: the flag, for messages.
      path: a checkpoint prefix (.../bert_model.ckpt, with a .index file next
        to it), or a directory holding checkpoints: its latest by the
        "checkpoint" state file, else its only one, else the one with the
        highest step (model.ckpt-<step>). The chosen file is logged.
      required: whether an empty `path` is an error (else None is returned).

    Returns:
      The checkpoint prefix, or None for an empty optional `path`.

    Raises:
      InputError: no checkpoint there, or several and no way to choose.
    """
    if not path:
        if required:
            raise InputError("--%s is required" % flag_name)
        return None
    if tf.io.gfile.isdir(path):
        chosen = tf.train.latest_checkpoint(path)
        if not chosen:
            # No "checkpoint" state file (as in Google's zips and converted
            # models).
            prefixes = sorted(index[:-len(".index")] for index in
                              tf.io.gfile.glob(os.path.join(path, "*.index")))
            steps = {}
            for prefix in prefixes:
                match = re.search(r"-(\d+)$", prefix)
                if match:
                    steps[prefix] = int(match.group(1))
            if len(prefixes) == 1:
                chosen = prefixes[0]
            elif prefixes and len(steps) == len(prefixes):
                chosen = max(prefixes, key=steps.get)
            elif prefixes:
                raise InputError(
                    "--%s %s holds several checkpoints (%s) and no \"checkpoint\" file "
                    "naming the latest: give the one to use, e.g. --%s=%s"
                    % (flag_name, path, ", ".join(os.path.basename(p) for p in prefixes),
                       flag_name, prefixes[0]))
        if chosen:
            tf.logging.info("--%s %s is a directory: using its checkpoint %s",
                            flag_name, path, chosen)
            return chosen
    elif tf.io.gfile.exists(path + ".index") or (
            not path.endswith(".index") and tf.train.checkpoint_exists(path)):
        return path
    elif path.endswith(".index") and tf.io.gfile.exists(path):
        return path[:-len(".index")]
    raise InputError("--%s: no checkpoint at %s (expected a prefix such as "
                     ".../bert_model.ckpt with a .index file next to it, or a directory "
                     "holding checkpoints)" % (flag_name, path))


def bert_variable_shapes(bert_config):
    """The variables `modeling.BertModel` creates for a config, and their
    shapes.

    Returns:
      dict name (without ":0") -> list of int: bert/embeddings/*,
      bert/encoder/layer_<i>/* and bert/pooler/*.
    """
    h, i = bert_config.hidden_size, bert_config.intermediate_size
    shapes = {
        "bert/embeddings/word_embeddings": [bert_config.vocab_size, h],
        "bert/embeddings/token_type_embeddings": [bert_config.type_vocab_size, h],
        "bert/embeddings/position_embeddings": [bert_config.max_position_embeddings, h],
        "bert/embeddings/LayerNorm/beta": [h],
        "bert/embeddings/LayerNorm/gamma": [h],
    }
    for layer in range(bert_config.num_hidden_layers):
        prefix = "bert/encoder/layer_%d/" % layer
        for name, rows, cols in (("attention/self/query", h, h),
                                 ("attention/self/key", h, h),
                                 ("attention/self/value", h, h),
                                 ("attention/output/dense", h, h),
                                 ("intermediate/dense", h, i),
                                 ("output/dense", i, h)):
            shapes[prefix + name + "/kernel"] = [rows, cols]
            shapes[prefix + name + "/bias"] = [cols]
        for name in ("attention/output/LayerNorm", "output/LayerNorm"):
            shapes[prefix + name + "/beta"] = [h]
            shapes[prefix + name + "/gamma"] = [h]
    shapes["bert/pooler/dense/kernel"] = [h, h]
    shapes["bert/pooler/dense/bias"] = [h]
    return shapes


def _num_layers(names):
    layers = {int(m.group(1)) for m in map(re.compile(r"^bert/encoder/layer_(\d+)/").match,
                                            names) if m}
    return max(layers) + 1 if layers else 0


def _shape_mismatch(stored, expected):
    """(name, stored shape, expected shape) of the first variable whose
    shape differs, or None."""
    for name, shape in expected.items():
        if name in stored and list(stored[name]) != list(shape):
            return name, list(stored[name]), list(shape)
    return None


def check_init_checkpoint(flag_name, checkpoint, bert_config, config_file=None):
    """Checks that a checkpoint to start from fits the model of the config.

    The encoder's variables that the checkpoint holds must have the config's
    shapes, it must hold the word embeddings (else it is no BERT checkpoint
    with Google's variable names) and as many layers as num_hidden_layers.
    Task heads are not compared: fine-tuning starts them anew.

    Args:
      flag_name: the flag that named the checkpoint.
      checkpoint: a checkpoint prefix (see `resolve_checkpoint`).
      bert_config: modeling.BertConfig.
      config_file: the config's path, for the message.

    Raises:
      InputError: naming the checkpoint, the variable and both shapes.
    """
    stored = dict(tf.train.list_variables(checkpoint))
    expected = bert_variable_shapes(bert_config)
    where = "--%s %s" % (flag_name, checkpoint)
    config = "--bert_config_file %s" % config_file if config_file else "the BERT config"
    if "bert/embeddings/word_embeddings" not in stored:
        raise InputError(
            "%s holds no bert/embeddings/word_embeddings: not a BERT checkpoint with Google's "
            "variable names (convert_checkpoint.py converts Hugging Face models)" % where)
    mismatch = _shape_mismatch(stored, expected)
    if mismatch:
        raise InputError(
            "%s does not fit %s: %s has shape %s in the checkpoint but %s by the config; "
            "use the bert_config.json that came with the checkpoint" % ((where, config)
                                                                        + mismatch))
    layers = _num_layers(stored)
    if layers != bert_config.num_hidden_layers:
        raise InputError(
            "%s has %d Transformer layers but %s says num_hidden_layers=%d; use the "
            "bert_config.json that came with the checkpoint"
            % (where, layers, config, bert_config.num_hidden_layers))


def check_output_dir_checkpoint(output_dir, bert_config, head_shapes=None):
    """Checks that a checkpoint already in output_dir belongs to this model.

    The runner resumes from (or predicts with) the latest checkpoint in
    output_dir; one of another model would fail only after it was restored,
    with a shape error in the middle of the graph.

    Args:
      output_dir: the run's model directory.
      bert_config: modeling.BertConfig of the run's model.
      head_shapes: name -> shape of the variables of the model's task head.

    Raises:
      InputError: the checkpoint lacks a variable or has another shape;
        names it and says how to go on.
    """
    if not output_dir or not tf.io.gfile.isdir(output_dir):
        return
    checkpoint = tf.train.latest_checkpoint(output_dir)
    if not checkpoint:
        return
    stored = dict(tf.train.list_variables(checkpoint))
    expected_shapes = dict(bert_variable_shapes(bert_config), **(head_shapes or {}))
    fix = ("use a new --output_dir, or delete %s to start over" % output_dir)
    mismatch = _shape_mismatch(stored, expected_shapes)
    if mismatch:
        raise InputError(
            "--output_dir %s holds a checkpoint of another model (%s): %s has shape %s "
            "there but %s in this run's model; %s"
            % ((output_dir, os.path.basename(checkpoint)) + mismatch + (fix,)))
    missing = [name for name in expected_shapes if name not in stored]
    if missing:
        raise InputError(
            "--output_dir %s holds a checkpoint of another model (%s), without %s%s of "
            "this run's model; %s" % (output_dir, os.path.basename(checkpoint), missing[0],
                                      " and %d more variable(s)" % (len(missing) - 1)
                                      if len(missing) > 1 else "", fix))
    layers = _num_layers(stored)
    expected_layers = _num_layers(expected_shapes)
    if layers != expected_layers:
        raise InputError(
            "--output_dir %s holds a checkpoint of another model (%s): %d Transformer "
            "layers, this run's model has %d; %s"
            % (output_dir, os.path.basename(checkpoint), layers, expected_layers, fix))


def log_checkpoint_used(what, checkpoint_path, model_dir):
    """Logs "<what> with the weights of <checkpoint>" on the Estimator, for
    the checkpoint a prediction or evaluation will restore (the session
    runner logs the same line itself).

    Args:
      what: "Predicting", "Evaluating", ...
      checkpoint_path: the checkpoint passed to the runner, or None for the
        latest in model_dir.
      model_dir: the runner's model directory.
    """
    if not runtime.USE_ESTIMATOR:
        return
    checkpoint_path = checkpoint_path or (tf.train.latest_checkpoint(model_dir)
                                          if model_dir else None)
    if checkpoint_path:
        tf.logging.info("%s with the weights of %s", what, checkpoint_path)
    else:
        tf.logging.warning("%s with freshly initialised weights: no checkpoint in %s",
                           what, model_dir)


# ---------------------------------------------------------------------------
# TFRecord input files.

def check_tfrecord_file(flag_name, path):
    """Walks the framing of a TFRecord file without reading its records.

    Each record is an 8-byte length, a 4-byte checksum of that length, the
    data and a 4-byte checksum of the data. The length checksums are
    verified and the file must end exactly after its last record, so a
    truncated or overwritten file is found here rather than by a
    DataLossError in the middle of training. (The data checksums are left to
    the reader: checking them means reading everything.)

    Args:
      flag_name: the flag that named the file.
      path: the file (local or gs://).

    Returns:
      The number of records.

    Raises:
      InputError: naming the file, the byte offset and what is wrong there.
    """
    size = tf.io.gfile.stat(path).length
    where = "--%s %s" % (flag_name, path)
    count = 0
    offset = 0
    with _open_binary(path) as f:
        while offset < size:
            f.seek(offset)
            header = f.read(12)
            if len(header) < 12:
                raise InputError(
                    "%s is truncated: it ends inside the header of record %d at byte offset "
                    "%d (file size %d); write the file again" % (where, count + 1, offset, size))
            (length,) = struct.unpack("<Q", header[:8])
            (stored_crc,) = struct.unpack("<I", header[8:])
            if pretraining_records.masked_crc32c(header[:8]) != stored_crc:
                raise InputError(
                    "%s cannot be read as TFRecord: the header of record %d at byte offset "
                    "%d fails its checksum (not a TFRecord file, or damaged there); write "
                    "the file again" % (where, count + 1, offset))
            end = offset + 12 + length + 4
            if end > size:
                raise InputError(
                    "%s is truncated: record %d at byte offset %d needs %d bytes but the "
                    "file ends after %d; write the file again"
                    % (where, count + 1, offset, end - offset, size - offset))
            offset = end
            count += 1
    return count


# ---------------------------------------------------------------------------
# Model options (the training-option flags) and initialisation.

def model_options():
    """Keyword arguments for `modeling.BertModel` from the option flags
    (compute_type from --precision, recompute_grad)."""
    compute_type = {"fp32": tf.float32, "fp16": tf.float16, "bf16": tf.bfloat16}[
        _flag("precision", "fp32")]
    return {"compute_type": compute_type,
            "recompute_grad": bool(_flag("recompute_grad", False))}


def init_from_checkpoint(init_checkpoint, use_tpu):
    """Sets up the graph's trainable variables to start from `init_checkpoint`
    (those whose names and shapes it holds; the others keep their random
    initialisers). Logs how many variables and parameters there are, how
    many were restored and which were not; every variable, marking the
    restored ones with ", *INIT_FROM_CKPT*", at DEBUG level.

    Args:
      init_checkpoint: checkpoint path prefix, or None/"" for none.
      use_tpu: whether the model_fn is built for TPUEstimator.

    Returns:
      The scaffold_fn for TPUEstimatorSpec: on TPU the restore has to be set
      up inside it; None otherwise (or without a checkpoint).
    """
    variables = tf.trainable_variables()
    restored = {}
    scaffold_fn = None
    if init_checkpoint:
        # Trainable variables only, like the original: taking the source's
        # global_step as well would start a new run (fine-tuning, or
        # pre-training continued in a new --output_dir) at the source's step,
        # past its own num_train_steps and learning-rate schedule.
        assignment_map, restored = modeling.get_assignment_map_from_checkpoint(
            variables, init_checkpoint)
        if use_tpu:
            def restoring_scaffold():
                tf.train.init_from_checkpoint(init_checkpoint, assignment_map)
                return tf.train.Scaffold()

            scaffold_fn = restoring_scaffold
        else:
            tf.train.init_from_checkpoint(init_checkpoint, assignment_map)

    # One summary line (a BERT-Base graph has 200 variables); the original's
    # line per variable at DEBUG level.
    num_parameters = sum(var.shape.num_elements() or 0 for var in variables)
    summary = "Trainable variables: %d, %s parameters" % (len(variables),
                                                          "{:,}".format(num_parameters))
    if init_checkpoint:
        summary += "; %d restored from %s" % (len(restored), init_checkpoint)
    tf.logging.info("%s", summary)
    fresh = [var.op.name for var in variables if var.name not in restored]
    if init_checkpoint and fresh:
        tf.logging.info("Not in the checkpoint, initialised at random: %s%s",
                        ", ".join(fresh[:8]),
                        " and %d more" % (len(fresh) - 8) if len(fresh) > 8 else "")
    tf.logging.debug("**** Trainable Variables ****")
    for var in variables:
        mark = ", *INIT_FROM_CKPT*" if var.name in restored else ""
        tf.logging.debug("  name = %s, shape = %s%s", var.name, var.shape, mark)
    return scaffold_fn


# ---------------------------------------------------------------------------
# Logging examples and features; tf.train.Feature helpers.

def log_example(fields, debug=False):
    """Logs one converted example (the scripts do so for their first five):
    a "*** Example ***" line, then "name: value" per (name, value) of
    `fields`, lists written space-separated; at DEBUG level with `debug`
    (for the examples after the first, which would fill a short run's
    log)."""
    log = tf.logging.debug if debug else tf.logging.info
    log("*** Example ***")
    for name, value in fields:
        if isinstance(value, (list, tuple)):
            value = " ".join(str(v) for v in value)
        log("%s: %s", name, value)


def log_phase(title, details):
    """Logs the start of a phase of a run the way the original scripts do:
    "***** <title> *****", then "  <name> = <value>" per (name, value) of
    `details`."""
    tf.logging.info("***** %s *****", title)
    for name, value in details:
        tf.logging.info("  %s = %s", name, value)


def int64_feature(values):
    """A tf.train.Feature holding the ints `values`."""
    return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def float_feature(values):
    """A tf.train.Feature holding the floats `values`."""
    return tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))


def decode_record(record, name_to_features):
    """Parses one serialized tf.train.Example into a dict of tensors.

    tf.train.Example stores integers as int64 only, while TPUs work on int32:
    int64 features come back as int32. Float features are left as they are.

    Args:
      record: scalar string tensor.
      name_to_features: name -> tf.io.FixedLenFeature.

    Returns:
      dict name -> tensor of the feature's shape.
    """
    example = tf.io.parse_single_example(record, name_to_features)
    return {name: tf.cast(t, tf.int32) if t.dtype == tf.int64 else t
            for name, t in example.items()}


def log_features(features):
    """Logs the name and shape of every input feature (each model_fn
    starts with it)."""
    tf.logging.info("*** Features ***")
    for name in sorted(features):
        tf.logging.info("  name = %s, shape = %s", name, features[name].shape)


# ---------------------------------------------------------------------------
# Training: the train op, the step count and the progress hook.

def create_train_op(loss, learning_rate, num_train_steps, num_warmup_steps, use_tpu):
    """`optimization.create_optimizer` with the option flags applied
    (--gradient_accumulation_steps, dynamic loss scaling for --precision=fp16).
    """
    loss_scale = None
    if _flag("precision", "fp32") == "fp16":
        import mixed_precision
        loss_scale = mixed_precision.DynamicLossScale()
    return optimization.create_optimizer(
        loss, learning_rate, num_train_steps, num_warmup_steps, use_tpu,
        gradient_accumulation_steps=_flag("gradient_accumulation_steps", 1),
        loss_scale_manager=loss_scale)


def num_train_steps(num_examples, train_batch_size, num_train_epochs):
    """Number of optimizer updates for `num_train_epochs` over `num_examples`.

    One update consumes `train_batch_size * --gradient_accumulation_steps`
    examples, so with accumulation the schedule (warm-up, decay, max_steps)
    stays in optimizer updates while covering the same epochs.
    """
    accumulation = max(1, _flag("gradient_accumulation_steps", 1) or 1)
    return int(num_examples / (train_batch_size * accumulation) * num_train_epochs)


class ThroughputHook(tf.train.SessionRunHook):
    """Logs the training progress about every --log_every_seconds of wall
    time: "step <global step>[ of <num_train_steps>]: loss = <mean loss since
    the last line>, <examples/s>[, <tokens/s>][, ETA <time>]", one line at
    the first step and one at the end.

    Args:
      loss: the loss tensor.
      examples_per_step: examples one session run consumes.
      tokens_per_step: tokens one session run consumes, or None.
      every_n_steps: log every this many runs instead of by time.
      num_train_steps: the global step training stops at, for the ETA.
      every_seconds: the interval (default: `log_every_seconds()`).
    """

    def __init__(self, loss, examples_per_step, tokens_per_step=None, every_n_steps=None,
                 num_train_steps=None, every_seconds=None):
        self._loss = loss
        self._examples_per_step = examples_per_step
        self._tokens_per_step = tokens_per_step
        self._every_n = every_n_steps
        self._every_seconds = log_every_seconds() if every_seconds is None else every_seconds
        self._num_train_steps = num_train_steps
        self._runs = 0
        self._interval_start = None
        self._interval_runs = 0
        self._interval_first_step = None
        self._losses = []

    def begin(self):
        self._global_step = tf.train.get_global_step()

    def before_run(self, run_context):
        if self._interval_start is None:
            self._interval_start = time.time()
        return tf.train.SessionRunArgs({"loss": self._loss, "step": self._global_step})

    def after_run(self, run_context, run_values):
        step = int(run_values.results["step"])
        if self._interval_first_step is None:
            self._interval_first_step = step
        self._runs += 1
        self._interval_runs += 1
        self._losses.append(float(run_values.results["loss"]))
        now = time.time()
        if self._every_n:
            due = self._runs % self._every_n == 0
        else:
            due = self._runs == 1 or now - self._interval_start >= self._every_seconds
        if due:
            self._log(now, run_context.session)

    def end(self, session):
        if self._interval_runs:
            self._log(time.time(), session)

    def _log(self, now, session):
        elapsed = max(now - self._interval_start, 1e-9)
        # The step fetched with the run may have been read before the
        # update: read it again.
        step = int(session.run(self._global_step))
        message = "step %d" % step
        if self._num_train_steps:
            message += " of %d" % self._num_train_steps
        message += ": loss = %.4f, %.2f examples/s" % (
            sum(self._losses) / len(self._losses),
            self._examples_per_step * self._interval_runs / elapsed)
        if self._tokens_per_step:
            message += ", %.0f tokens/s" % (self._tokens_per_step * self._interval_runs
                                            / elapsed)
        # Global steps per second: with gradient accumulation one step takes
        # several session runs.
        # (None after the first run alone, whose time is mostly start-up.)
        steps_done = step - self._interval_first_step
        if (self._num_train_steps and step < self._num_train_steps and steps_done > 0
                and self._runs > 1):
            message += ", ETA %s" % format_duration(
                (self._num_train_steps - step) * elapsed / steps_done)
        tf.logging.info("%s", message)
        self._losses = []
        self._interval_runs = 0
        self._interval_first_step = None
        self._interval_start = now


def training_hooks(loss, examples_per_step, tokens_per_step=None, use_tpu=False,
                   every_n_steps=None, num_train_steps=None):
    """Hooks logging the training loss and throughput on CPU/GPU (see
    `ThroughputHook`; num_train_steps gives the ETA).

    On TPU, device tensors cannot be read by host hooks, so none are added
    (TPUEstimator logs loss and examples/s itself there).
    """
    if use_tpu:
        return []
    return [ThroughputHook(loss, examples_per_step, tokens_per_step,
                           every_n_steps=every_n_steps, num_train_steps=num_train_steps)]


# ---------------------------------------------------------------------------
# Run configuration and the runner (the execution layer lives in runtime.py).

def make_run_config(output_dir, save_checkpoints_steps, iterations_per_loop=1000,
                    use_tpu=False, tpu_name=None, tpu_zone=None, gcp_project=None,
                    master=None, num_tpu_cores=8, keep_checkpoint_max=5,
                    tpu_job_name=None):
    """`runtime.make_run_config` with the option flags applied (--use_xla,
    --distribution_strategy, --num_gpus); on the Estimator without a TPU, its
    own step logging off (ThroughputHook's lines replace it)."""
    with _config_errors_as_input_errors():
        config = runtime.make_run_config(
            output_dir, save_checkpoints_steps, iterations_per_loop=iterations_per_loop,
            use_tpu=use_tpu, tpu_name=tpu_name, tpu_zone=tpu_zone, gcp_project=gcp_project,
            master=master, num_tpu_cores=num_tpu_cores,
            keep_checkpoint_max=keep_checkpoint_max, tpu_job_name=tpu_job_name,
            use_xla=_flag("use_xla", False),
            distribution_strategy=_flag("distribution_strategy", "none"),
            num_gpus=_flag("num_gpus", 0))
    if runtime.USE_ESTIMATOR and not use_tpu:
        # The Estimator's own "loss = ..., step = ..." and "global_step/sec"
        # lines every 100 steps repeat what ThroughputHook logs.
        config = config.replace(log_step_count_steps=None)
    return config


def make_estimator(model_fn, run_config, use_tpu, train_batch_size=None,
                   eval_batch_size=None, predict_batch_size=None):
    """`runtime.make_estimator`: the runner for the scripts' model_fn."""
    with _config_errors_as_input_errors():
        return runtime.make_estimator(model_fn, run_config, use_tpu,
                                      train_batch_size=train_batch_size,
                                      eval_batch_size=eval_batch_size,
                                      predict_batch_size=predict_batch_size)


@contextlib.contextmanager
def _config_errors_as_input_errors():
    try:
        yield
    except runtime.ConfigError as e:
        raise InputError(str(e))


# ---------------------------------------------------------------------------
# Result files.

def write_eval_results(result, output_dir, file_name="eval_results.txt",
                       header="***** Eval results *****"):
    """Logs `result` (name -> value) under `header` and writes it to
    output_dir/file_name as "key = value" lines sorted by key (the
    original's eval_results.txt format).

    Returns:
      The path written.
    """
    path = os.path.join(output_dir, file_name)
    with atomic_output(path) as writer:
        tf.logging.info(header)
        for key in sorted(result):
            line = "%s = %s" % (key, result[key])
            tf.logging.info("  %s", line)
            writer.write(line + "\n")
    return path
