"""The model's files, checked before any work: bert_config.json, the
vocabulary and its casing, the checkpoint to start from and the ones a run
leaves in its --output_dir (their shapes, how many batches they trained on,
damaged ones set aside for the newest intact one); and the initialisation
of a graph's variables from a checkpoint.

In: the paths that the flags name, and a modeling.BertConfig. Out: the
config, the tokenizer, checkpoint prefixes, or an InputError naming the
flag and file at fault. Imports TensorFlow.
"""

import contextlib
import json
import os
import re

from scriptkit import quiet_tf  # noqa: F401  (first: imports TensorFlow without its start-up noise)
import tensorflow.compat.v1 as tf
from google.protobuf import text_format
# The CheckpointState message of the "checkpoint" state file (TensorFlow has
# no public name for it).
from tensorflow.python.training import checkpoint_state_pb2

from scriptkit import file_io
import modeling
import optimization
import tokenization
from scriptkit.errors import InputError


# ---------------------------------------------------------------------------
# bert_config.json.

# Keys of bert_config.json that fix the model's shapes or what it computes:
# a config without one of them describes no particular model, so none of them
# is filled in with a default (Google's released configs have them all).
REQUIRED_CONFIG_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers",
                        "num_attention_heads", "intermediate_size", "hidden_act",
                        "max_position_embeddings", "type_vocab_size")


# Training-time settings, which keep BertConfig's defaults when missing.
OPTIONAL_CONFIG_KEYS = ("hidden_dropout_prob", "attention_probs_dropout_prob",
                        "initializer_range")


def _describe_json_value(value):
    kind = {str: "the string", bool: "the boolean", list: "the list", dict: "the object",
            type(None): ""}.get(type(value), "")
    return ("%s %s" % (kind, json.dumps(value))).strip()


def check_bert_config_values(values, where):
    """Checks the keys and value types of a bert_config.json object.

    Args:
      values: the parsed JSON object (a dict).
      where: "--bert_config_file <path>", to start the message with.

    Raises:
      InputError: listing the missing required keys, or naming each key whose
        value has the wrong type or range. Keys that BertConfig does not know
        (written by other toolkits) are accepted.
    """
    missing = [key for key in REQUIRED_CONFIG_KEYS if key not in values]
    if missing:
        raise InputError(
            "%s lacks the key(s) %s, without which the model is undefined: use the "
            "bert_config.json that came with the checkpoint" % (where, ", ".join(missing)))
    problems = []
    for key in REQUIRED_CONFIG_KEYS + OPTIONAL_CONFIG_KEYS:
        if key not in values:
            continue
        value = values[key]
        if key == "hidden_act":
            if not isinstance(value, str):
                problems.append('"%s" must be a string such as "gelu", not %s'
                                % (key, _describe_json_value(value)))
            continue
        if key in OPTIONAL_CONFIG_KEYS:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                problems.append('"%s" must be a number, not %s'
                                % (key, _describe_json_value(value)))
            elif key == "initializer_range" and not value > 0:
                problems.append('"%s" must be positive, not %s' % (key, value))
            elif key != "initializer_range" and not 0 <= value < 1:
                problems.append('"%s" must be a probability in [0, 1), not %s'
                                % (key, value))
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            problems.append('"%s" must be an integer, not %s'
                            % (key, _describe_json_value(value)))
        elif value < 1:
            problems.append('"%s" must be at least 1, not %d' % (key, value))
    if problems:
        raise InputError("%s: %s" % (where, "; ".join(problems)))


def load_bert_config(bert_config_file, max_seq_length=None, vocab=None,
                     vocab_file=None, record=None):
    """Reads and checks a BERT config against the other inputs.

    Args:
      bert_config_file: path of bert_config.json; may be None when `record`
        holds the config.
      max_seq_length: if given, must not exceed max_position_embeddings.
      vocab: if given (token -> id), its size must not exceed vocab_size (a
        smaller one is logged as a warning: the embedding rows past it are
        never used).
      vocab_file: its path, for the message.
      record: the `run_record.RunRecord` of the training run, or None.

    Returns:
      modeling.BertConfig; training settings missing from the file
      (OPTIONAL_CONFIG_KEYS) have BertConfig's defaults.

    Raises:
      InputError: naming the flag at fault (see check_bert_config_values).
    """
    if not bert_config_file and record is not None and record.bert_config:
        where = "the config in %s" % record.path
        values = dict(record.bert_config)
    else:
        file_io.require_file("bert_config_file", bert_config_file)
        where = "--bert_config_file %s" % bert_config_file
        values = file_io.read_json_object(bert_config_file, "bert_config_file")
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
        modeling.validate_config(config)
    except ValueError as e:
        raise InputError("%s: %s" % (where, e))
    if max_seq_length is not None and max_seq_length > config.max_position_embeddings:
        raise InputError(
            "Cannot use sequence length %d because the BERT model was only trained "
            "up to sequence length %d (--max_seq_length vs max_position_embeddings "
            "in %s)" % (max_seq_length, config.max_position_embeddings, where))
    if vocab is not None and len(vocab) > config.vocab_size:
        raise InputError(
            "--vocab_file %s has %d tokens but vocab_size in %s is %d: the vocabulary "
            "does not belong to this model" % (vocab_file, len(vocab), where, config.vocab_size))
    if vocab is not None and len(vocab) < config.vocab_size:
        tf.logging.warning(
            "--vocab_file %s has %d tokens, fewer than vocab_size %d in %s: embedding rows "
            "%d..%d are never used. Fine for a padded table; otherwise check that the "
            "vocabulary belongs to this model.", vocab_file, len(vocab), config.vocab_size,
            where, len(vocab), config.vocab_size - 1)
    return config


# ---------------------------------------------------------------------------
# The vocabulary and its casing.

# Next to a vocabulary, as Hugging Face writes it: {"do_lower_case": ...}, the
# casing the model was trained with (convert_checkpoint.py copies it).
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"


def load_tokenizer(vocab_file, do_lower_case, init_checkpoint=None):
    """A FullTokenizer, after checking --do_lower_case against what is known
    of the model's casing: a Google release's name in the checkpoint path,
    a tokenizer_config.json next to the vocabulary (both errors), and the
    vocabulary itself (`tokenization.vocab_casing`: a warning, where it
    tells).

    Raises:
      InputError: a missing vocabulary, one that is not UTF-8 (naming the
        line), or a casing that contradicts the checkpoint's name or the
        tokenizer_config.json.
    """
    file_io.require_file("vocab_file", vocab_file)
    try:
        tokenization.validate_case_matches_checkpoint(do_lower_case, init_checkpoint)
        tokenizer = tokenization.FullTokenizer(vocab_file=vocab_file,
                                               do_lower_case=do_lower_case)
    except UnicodeDecodeError:
        raise file_io.non_utf8_error("vocab_file", vocab_file)
    except ValueError as e:
        raise InputError(str(e))
    recorded = os.path.join(os.path.dirname(vocab_file), TOKENIZER_CONFIG_FILE)
    if file_io.exists(recorded):
        model_lower = file_io.read_json_object(recorded).get("do_lower_case")
        if model_lower is not None and bool(model_lower) != bool(do_lower_case):
            raise InputError(
                "--do_lower_case=%s, but %s says the model's vocabulary is used with "
                "do_lower_case=%s: pass --do_lower_case=%s"
                % (bool(do_lower_case), recorded, bool(model_lower), bool(model_lower)))
    casing = tokenization.vocab_casing(tokenizer.vocab)
    if casing == "uncased" and not do_lower_case:
        tf.logging.warning(
            "--do_lower_case=False, but --vocab_file %s is uncased (no token has a capital "
            "letter): every word with one becomes [UNK]; pass --do_lower_case=True",
            vocab_file)
    elif casing == "cased" and do_lower_case:
        tf.logging.warning(
            "--do_lower_case=True, but --vocab_file %s is cased: the text loses its capitals, "
            "which the model was trained with; pass --do_lower_case=False", vocab_file)
    return tokenizer


# ---------------------------------------------------------------------------
# Checkpoints: the one to start from, and those in --output_dir.

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
    with a shape error in the middle of the graph. Of a damaged latest
    checkpoint, the newest intact one is checked instead
    (`use_intact_checkpoint`; training sets the damaged one aside).

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
    checkpoint = use_intact_checkpoint(output_dir, rewrite=False)
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


def consumed_batches(output_dir, gradient_accumulation_steps=1):
    """How many training batches the latest checkpoint in `output_dir` has
    used: the count it saved where it has one (a float16 run's, whose
    steps skipped for overflow read a batch each without moving the global
    step: optimization.BATCHES_READ_VARIABLE), else its global step times
    `gradient_accumulation_steps`, plus the micro-batches of an unfinished
    accumulation cycle that it saved.

    A resumed run skips this many batches of its input so that it goes on
    with the next batch that an uninterrupted run would read. 0 when there
    is no checkpoint yet.
    """
    checkpoint = tf.train.latest_checkpoint(output_dir) if output_dir else None
    if not checkpoint:
        return 0
    reader = tf.train.load_checkpoint(checkpoint)
    if reader.has_tensor(optimization.BATCHES_READ_VARIABLE):
        return int(reader.get_tensor(optimization.BATCHES_READ_VARIABLE))
    step = int(reader.get_tensor(tf.GraphKeys.GLOBAL_STEP))
    micro_step = 0
    if gradient_accumulation_steps > 1 and reader.has_tensor(optimization.MICRO_STEP_VARIABLE):
        micro_step = int(reader.get_tensor(optimization.MICRO_STEP_VARIABLE))
    return step * gradient_accumulation_steps + micro_step


def log_checkpoint_used(what, checkpoint_path, model_dir, init_checkpoint=None):
    """Logs whose weights an evaluation or prediction runs with, as the
    runner will restore them: "<what> with the weights of <checkpoint>".

    Args:
      what: "Predicting", "Evaluating", ...
      checkpoint_path: the checkpoint passed to the runner, or None for the
        latest in model_dir.
      model_dir: the runner's model directory.
      init_checkpoint: the checkpoint the model_fn starts from
        (`init_from_checkpoint`), which gives the weights where model_dir
        has no checkpoint; with neither, the weights are fresh (a warning).
    """
    checkpoint_path = checkpoint_path or (tf.train.latest_checkpoint(model_dir)
                                          if model_dir else None)
    if checkpoint_path or init_checkpoint:
        tf.logging.info("%s with the weights of %s", what, checkpoint_path or init_checkpoint)
    else:
        tf.logging.warning("%s with freshly initialised weights: no checkpoint in %s and "
                           "no --init_checkpoint", what, model_dir)


def fine_tuned_checkpoint(output_dir, init_checkpoint, head_variable, preferred=None):
    """The checkpoint that evaluation, prediction and export use: `preferred`
    (the best one kept), else the latest in `output_dir`, else
    `init_checkpoint` (resolved) if it holds the task head `head_variable`,
    a fine-tuned model given as --init_checkpoint (as Google's README's
    prediction commands give it); None if there is none."""
    if preferred:
        return preferred
    checkpoint = tf.train.latest_checkpoint(output_dir) if output_dir else None
    if checkpoint:
        return checkpoint
    if init_checkpoint and head_variable in dict(tf.train.list_variables(init_checkpoint)):
        return init_checkpoint
    return None


def checkpoint_step(checkpoint_path):
    """The global step saved in the checkpoint `checkpoint_path` (0 if it
    has none, or for None)."""
    if not checkpoint_path:
        return 0
    try:
        return int(tf.train.load_variable(checkpoint_path, tf.GraphKeys.GLOBAL_STEP))
    except (tf.errors.NotFoundError, ValueError):
        return 0


def report_trained_checkpoint(output_dir):
    """Names the latest checkpoint in `output_dir`, the one training ended
    with, among the run's outputs (`file_io.report_output`)."""
    checkpoint = tf.train.latest_checkpoint(output_dir)
    if checkpoint:
        file_io.report_output(checkpoint, "the trained model, at step %d"
                              % checkpoint_step(checkpoint))


# ---------------------------------------------------------------------------
# The variables' initialisation from a checkpoint.

# While a `training.ResumableTrainer` call runs: the checkpoint from which its runner
# restores every variable (a resumed training, an evaluation or prediction of
# a trained model), which replaces the model_fn's initialisation; None where
# that initialisation gives the weights.
_RUNNER_RESTORES = {"checkpoint": None}


@contextlib.contextmanager
def runner_restores(checkpoint):
    """Inside, `init_from_checkpoint` logs that the runner restores all
    variables from `checkpoint` (None: that the initialisation is used)."""
    previous = _RUNNER_RESTORES["checkpoint"]
    _RUNNER_RESTORES["checkpoint"] = checkpoint
    try:
        yield
    finally:
        _RUNNER_RESTORES["checkpoint"] = previous


def init_from_checkpoint(init_checkpoint, use_tpu):
    """Sets up the graph's trainable variables to start from `init_checkpoint`
    (those whose names and shapes it holds; the others keep their random
    initialisers). Logs how many variables and parameters there are, how
    many were restored and which were not; every variable, marking the
    restored ones with ", *INIT_FROM_CKPT*", at DEBUG level. Where the
    runner of a `training.ResumableTrainer` restores a checkpoint of the run instead
    (resumed training, evaluation, prediction), the initialisation is never
    run: the line names that checkpoint.

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
        # Trainable variables only: taking the source's
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

    # One summary line (a BERT-Base graph has 200 variables); a line per
    # variable only at DEBUG level. (`restored` holds each name with and
    # without its ":0".)
    num_parameters = sum(var.shape.num_elements() or 0 for var in variables)
    summary = "Trainable variables: %d, %s parameters" % (len(variables),
                                                          "{:,}".format(num_parameters))
    runner_checkpoint = _RUNNER_RESTORES["checkpoint"]
    if runner_checkpoint:
        summary += "; all restored from %s" % runner_checkpoint
        restored = {var.name for var in variables}
    elif init_checkpoint:
        summary += "; %d restored from %s" % (len(assignment_map), init_checkpoint)
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
# Damaged checkpoints: set aside for the newest intact one.

def _checkpoint_fault(prefix):
    """None if checkpoint `prefix` looks whole (its index reads, and its
    data files hold at least the bytes that the index lists); else what is
    wrong, naming the file."""
    index = prefix + ".index"
    if not tf.io.gfile.exists(index):
        return "%s is missing" % index
    try:
        reader = tf.train.load_checkpoint(prefix)
        shapes = reader.get_variable_to_shape_map()
        dtypes = reader.get_variable_to_dtype_map()
    except (tf.errors.OpError, ValueError) as e:
        return "%s is cut short or corrupt (%s)" % (index, str(e).splitlines()[0])
    # The shards of the latest save: files of another shard count may be
    # left from an earlier save under the same name.
    shard_sets = {}
    for path in tf.io.gfile.glob(prefix + ".data-*"):
        match = re.search(r"-of-(\d+)$", path)
        if match:
            shard_sets.setdefault(int(match.group(1)), []).append(path)
    complete = [paths for count, paths in shard_sets.items() if len(paths) == count]
    if not complete:
        return "%s.data-* is incomplete (%d file(s))" % (
            prefix, sum(map(len, shard_sets.values())))
    data_files = sorted(max(complete, key=lambda paths: sum(
        tf.io.gfile.stat(path).length for path in paths)))
    needed = 0
    for name, shape in shapes.items():
        dtype = tf.as_dtype(dtypes[name])
        if dtype.is_numpy_compatible and dtype != tf.string:
            count = 1
            for dim in shape:
                count *= dim
            needed += count * dtype.size
    have = sum(tf.io.gfile.stat(path).length for path in data_files)
    if have < needed:
        return "%s is cut short (%d bytes, the index lists %d)" % (
            data_files[0] if len(data_files) == 1 else prefix + ".data-*", have, needed)
    return None


# The file in a model directory that names its checkpoints (TensorFlow's
# CheckpointState as a text proto); TensorFlow resumes from the checkpoint it
# names as the latest.
CHECKPOINT_STATE_FILE = "checkpoint"


def _state_file_fault(model_dir):
    """None if `model_dir` has no checkpoint state file or one that reads as
    a CheckpointState naming a latest checkpoint; else what is wrong with it,
    naming the file. (TensorFlow takes an unreadable state file for a
    folder without checkpoints, and would train from the start.)"""
    path = os.path.join(model_dir, CHECKPOINT_STATE_FILE)
    if not tf.io.gfile.exists(path):
        return None
    state = checkpoint_state_pb2.CheckpointState()
    try:
        with tf.io.gfile.GFile(path, "rb") as f:
            text_format.Merge(f.read().decode("utf-8"), state)
    except (text_format.ParseError, UnicodeDecodeError) as e:
        return "%s is cut short or not a checkpoint state file (%s)" % (
            path, str(e).splitlines()[0] if str(e) else type(e).__name__)
    if not state.model_checkpoint_path:
        return "%s is empty or cut short (it names no checkpoint)" % path
    return None


def _intact_checkpoints(model_dir):
    """The intact checkpoints of `model_dir` found by listing its *.index
    files, whatever its state file says: the runner's "<prefix>-<step>"
    names, oldest step first."""
    found = []
    for index in tf.io.gfile.glob(os.path.join(model_dir, "*.index")):
        prefix = index[:-len(".index")]
        match = re.search(r"-(\d+)$", prefix)
        if match and _checkpoint_fault(prefix) is None:
            found.append((int(match.group(1)), prefix))
    return [prefix for _, prefix in sorted(found)]


def use_intact_checkpoint(model_dir, rewrite=True):
    """Makes the latest checkpoint in `model_dir` (by its "checkpoint" state
    file) one that can be restored: if it is cut short or unreadable (a full
    disk, a killed copy), or the state file itself is unreadable or names a
    checkpoint that is not there, one warning names the damaged file and the
    state file is rewritten to name the newest intact checkpoint instead:
    the newest older one the state file lists, else the newest that a
    listing of the folder's *.index files finds. The damaged files stay;
    training overwrites them when it reaches their step again.

    Args:
      model_dir: the run's model directory.
      rewrite: False: only find the checkpoint, leave the state file as it
        is (for runs that do not hold the directory's training lock).

    Returns:
      The latest intact checkpoint's prefix, or None when there is none
      yet (no state file).

    Raises:
      InputError: the state file or the checkpoints it lists are damaged,
        and no checkpoint there is intact.
    """
    if not model_dir:
        return None
    fault = _state_file_fault(model_dir)
    intact = []
    if fault is None:
        state = tf.train.get_checkpoint_state(model_dir)
        if not state or not state.model_checkpoint_path:
            return None
        listed = list(state.all_model_checkpoint_paths)
        if state.model_checkpoint_path not in listed:
            listed.append(state.model_checkpoint_path)
        latest = state.model_checkpoint_path
        fault = _checkpoint_fault(latest)
        if fault is None:
            return latest
        if not tf.io.gfile.exists(latest + ".index"):
            fault = "%s names %s, which is not there (no .index)" % (
                os.path.join(model_dir, CHECKPOINT_STATE_FILE), latest)
        intact = [path for path in listed[:listed.index(latest)]
                  if _checkpoint_fault(path) is None]
    if not intact:
        intact = _intact_checkpoints(model_dir)
    if not intact:
        raise InputError("--output_dir %s: cannot resume, %s and no checkpoint there is "
                         "intact; move the damaged files away to start over"
                         % (model_dir, fault))
    newest = intact[-1]
    if not rewrite:
        return newest
    tf.logging.warning("%s: resuming from %s (step %d), the newest intact checkpoint",
                       fault, newest, checkpoint_step(newest))
    # The paths as the state file gave them, or as the listing found them
    # (TensorFlow writes them relative to model_dir again, in the list it
    # is given).
    tf.train.update_checkpoint_state(model_dir, newest, all_model_checkpoint_paths=intact)
    return newest
