"""What every BERT script repeats: loading and checking the model's files,
the run record, the training options, the estimator, checkpoint
initialisation, the train op and its progress lines, exports and result
files.

The parts that need no TensorFlow (the shared flag registry, `run_script`,
file access, input and output checks, progress lines, atomic output files)
live in run_base.py and are re-exported here, so a script needs this one
module. This module imports TensorFlow, modeling and optimization; scripts
that must start without TensorFlow import run_base instead.
"""

import contextlib
import dataclasses
import json
import os
import random
import re
import signal
import sys
import time

import quiet_tf  # noqa: F401  (first: imports TensorFlow without its start-up noise)
import tensorflow.compat.v1 as tf
from absl import flags
from google.protobuf import text_format
# The CheckpointState message of the "checkpoint" state file (TensorFlow has
# no public name for it).
from tensorflow.python.training import checkpoint_state_pb2

import bert_ops
import modeling
import optimization
import run_base
import runtime
from run_base import (  # noqa: F401  (re-exported: the scripts use them from here)
    InputError,
    TPU_FLAGS,
    TRAINING_OPTION_FLAGS,
    FINE_TUNING_FLAGS,
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
    read_text,
    read_json,
    read_json_object,
    json_lines,
    utf8_lines,
    non_utf8_error,
    format_duration,
    log_info,
    log_warning,
    log_every_seconds,
    Progress,
    truncate_seq_pair,
    pack_sequence_pair,
    Span,
    window_spans,
    atomic_path,
    atomic_output,
    AtomicFile,
    AtomicWriter,
    limit_memory_fragmentation,
    exists,
    isdir,
    report_output,
    lock_output_dir,
    releases_output_lock,
)

FLAGS = flags.FLAGS


# ---------------------------------------------------------------------------
# Config, vocabulary and checkpoints, checked before any work.

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
      record: the `RunRecord` of the training run, or None.

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
        require_file("bert_config_file", bert_config_file)
        where = "--bert_config_file %s" % bert_config_file
        values = read_json_object(bert_config_file, "bert_config_file")
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
    import tokenization
    require_file("vocab_file", vocab_file)
    try:
        tokenization.validate_case_matches_checkpoint(do_lower_case, init_checkpoint)
        tokenizer = tokenization.FullTokenizer(vocab_file=vocab_file,
                                               do_lower_case=do_lower_case)
    except UnicodeDecodeError:
        raise non_utf8_error("vocab_file", vocab_file)
    except ValueError as e:
        raise InputError(str(e))
    recorded = os.path.join(os.path.dirname(vocab_file), TOKENIZER_CONFIG_FILE)
    if exists(recorded):
        model_lower = read_json_object(recorded).get("do_lower_case")
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


# ---------------------------------------------------------------------------
# What a fine-tuning run leaves for later runs: the run record, the label
# files, the checkpoint to predict and export with.

RUN_RECORD_FILE = "run_config.json"

# The kinds of task a run record names (Hugging Face's problem_type names for
# the classifiers).
PROBLEM_TYPES = ("single_label_classification", "multi_label_classification", "regression",
                 "token_classification", "multiple_choice", "question_answering")


def find_run_file(name, output_dir, init_checkpoint=None):
    """The file `name` (run_config.json, labels.txt, ...) that a training run
    wrote: in `output_dir`, else next to `init_checkpoint` (inside it, if it
    is a directory of checkpoints). None where neither has it."""
    folders = [output_dir] if output_dir else []
    if init_checkpoint:
        folders.append(init_checkpoint if isdir(init_checkpoint)
                       else os.path.dirname(init_checkpoint))
    for folder in folders:
        path = os.path.join(folder, name)
        if exists(path):
            return path
    return None


@dataclasses.dataclass
class RunRecord:
    """The run record of a fine-tuning run (its run_config.json).

    Attributes:
      path: the file.
      script: the script that wrote it ("run_classifier.py", ...).
      problem_type: one of PROBLEM_TYPES.
      labels: the label list in the order of the model's outputs (NER: the
        tags), or None (regression, multiple choice, question answering).
      flags: name -> value of the flags that define the model's task and
        inputs (task, casing, sequence length, vocabulary, ...).
      bert_config: the model's bert_config.json object.
    """

    path: str
    script: str
    problem_type: str
    labels: list
    flags: dict
    bert_config: dict


def write_run_record(output_dir, problem_type, bert_config, flag_names, labels=None):
    """Writes <output_dir>/run_config.json for the runs that come after a
    fine-tuning run: predictions, evaluations and exports without
    --do_train read it (`use_run_record`), and so can conversions.

    Args:
      output_dir: the run's --output_dir.
      problem_type: one of PROBLEM_TYPES.
      bert_config: the modeling.BertConfig trained.
      flag_names: the flags to record, with their values in this run
        (--vocab_file as an absolute path).
      labels: the label list, or None.

    Returns:
      The path written.
    """
    values = {}
    for name in flag_names:
        value = FLAGS[name].value
        if name == "vocab_file" and value and not run_base.is_remote(value):
            value = os.path.abspath(value)
        values[name] = value
    record = {"script": os.path.basename(sys.argv[0]), "problem_type": problem_type,
              "labels": labels, "flags": values, "bert_config": bert_config.to_dict()}
    path = os.path.join(output_dir, RUN_RECORD_FILE)
    with atomic_output(path) as writer:
        writer.write(json.dumps(record, indent=2, sort_keys=True) + "\n")
    report_output(path, "the run record (task, labels, model config, input settings)")
    return path


def read_run_record(output_dir, init_checkpoint=None):
    """The `RunRecord` of an earlier training run (see `find_run_file`), or
    None. InputError naming the file if it is not a run record."""
    path = find_run_file(RUN_RECORD_FILE, output_dir, init_checkpoint)
    if path is None:
        return None
    values = read_json_object(path, None)
    try:
        return RunRecord(path, values["script"], values["problem_type"], values["labels"],
                         dict(values["flags"]), dict(values["bert_config"]))
    except (KeyError, TypeError, ValueError) as e:
        raise InputError("%s is not a run record of this project (%s): move it away or "
                         "train again" % (path, e))


def use_run_record():
    """The `RunRecord` that a run without --do_train follows, or None.

    It is found in --output_dir, else next to --init_checkpoint. Each flag it
    records that the command line does not give takes the recorded value
    (one line names them all); a flag given with another value keeps the
    command line's value, with a warning. A training run reads none: it
    writes its own.
    """
    if FLAGS.do_train:
        return None
    record = read_run_record(FLAGS.output_dir, FLAGS.init_checkpoint)
    if record is None:
        return None
    taken = []
    for name, value in sorted(record.flags.items()):
        if name not in FLAGS or value is None:
            continue
        flag = FLAGS[name]
        if flag.using_default_value:
            if name == "vocab_file" and not exists(value):
                tf.logging.warning("%s names --vocab_file=%s, which does not exist (any more)",
                                   record.path, value)
                continue
            flag.value = value
            taken.append("--%s=%s" % (name, value))
        elif flag.value != value and not (name == "vocab_file"
                                          and _same_file(flag.value, value)):
            tf.logging.warning("--%s=%s differs from the training run's %s in %s; using %s",
                               name, flag.value, value, record.path, flag.value)
    if taken:
        tf.logging.info("Settings of the training run, from %s: %s", record.path,
                        " ".join(taken))
    return record


def _same_file(given, recorded):
    """Whether the path `given` on the command line and the path `recorded`
    in a run record name the same file: the same file once resolved (a
    relative path, a link), or two files of the same content (a copy)."""
    try:
        if not run_base.is_remote(given) and not run_base.is_remote(recorded):
            if os.path.exists(given) and os.path.exists(recorded) and \
                    os.path.samefile(given, recorded):
                return True
        return (exists(given) and exists(recorded)
                and run_base.file_size(given) == run_base.file_size(recorded)
                and read_file_bytes(given) == read_file_bytes(recorded))
    except (OSError, tf.errors.OpError):
        return False


def check_run_flags(min_seq_length):
    """The first checks of a fine-tuning script's flags: something to do
    (--do_train, --do_eval, --do_predict or --export_dir), an existing
    --data_dir if one is given, and a --max_seq_length of at least
    `min_seq_length` ([CLS], [SEP]s and one piece of text)."""
    if not (FLAGS.do_train or FLAGS.do_eval or FLAGS.do_predict or FLAGS.export_dir):
        raise InputError("At least one of `do_train`, `do_eval`, `do_predict` or "
                         "`export_dir` must be set.")
    if FLAGS.data_dir and not tf.io.gfile.isdir(FLAGS.data_dir):
        raise InputError("--data_dir: directory not found: %s" % FLAGS.data_dir)
    if FLAGS.max_seq_length < min_seq_length:
        raise InputError("--max_seq_length must be at least %d, got %d"
                         % (min_seq_length, FLAGS.max_seq_length))


def data_file(flag_name, names, required_for):
    """A data file: its flag (--train_file, ...), else the first of `names`
    found in --data_dir.

    Returns:
      The path, or None if there is none and `required_for` is None.

    Raises:
      InputError: there is none and `required_for` ("--do_train", ...) needs
        it; the message names what was tried.
    """
    path = getattr(FLAGS, flag_name)
    if path:
        return path
    for name in names if FLAGS.data_dir else ():
        path = os.path.join(FLAGS.data_dir, name)
        if exists(path):
            return path
    if required_for:
        where = ("in --data_dir=%s (%s)" % (FLAGS.data_dir, ", ".join(names))
                 if FLAGS.data_dir else "(no --data_dir)")
        raise InputError("%s needs --%s or a data file %s" % (required_for, flag_name, where))
    return None


def require_model_flags(record, *names, data_files=()):
    """`require_flags` for the flags `names`, then --vocab_file,
    --bert_config_file (unless the `RunRecord` `record` holds the config) and
    --output_dir, in one message, with the data files of `data_files` (see
    `require_flags`)."""
    config_flag = () if record is not None and record.bert_config else ("bert_config_file",)
    require_flags(*names, "vocab_file", *config_flag, "output_dir", data_files=data_files)


def data_file_flags(*actions):
    """The data file flags that the run reads, of (action flag, file flag)
    pairs such as ("do_train", "train_file"): those whose action is set."""
    return [file_flag for action, file_flag in actions if getattr(FLAGS, action)]


def load_model_inputs(record=None, max_seq_length=None):
    """What a fine-tuning script loads and checks before any work (after
    `require_model_flags`): the tokenizer (--vocab_file, --do_lower_case),
    the BERT config (--bert_config_file, else the `RunRecord` `record`'s),
    --init_checkpoint resolved (`resolve_checkpoint`) and checked against
    the config, and --output_dir checked.

    Args:
      record: the run's `RunRecord`, or None.
      max_seq_length: checked against the config's max_position_embeddings.

    Returns:
      (tokenizer, bert_config, init_checkpoint).
    """
    tokenizer = load_tokenizer(FLAGS.vocab_file, FLAGS.do_lower_case, FLAGS.init_checkpoint)
    init_checkpoint = resolve_checkpoint("init_checkpoint", FLAGS.init_checkpoint)
    bert_config = load_bert_config(FLAGS.bert_config_file, max_seq_length=max_seq_length,
                                   vocab=tokenizer.vocab, vocab_file=FLAGS.vocab_file,
                                   record=record)
    check_output_dir(FLAGS.output_dir)
    if init_checkpoint:
        check_init_checkpoint("init_checkpoint", init_checkpoint, bert_config,
                              FLAGS.bert_config_file or record.path)
    return tokenizer, bert_config, init_checkpoint


def fine_tuned_checkpoint(output_dir, init_checkpoint, head_variable, preferred=None):
    """The checkpoint that evaluation, prediction and export use: `preferred`
    (the best one kept), else the latest in `output_dir`, else
    `init_checkpoint` (resolved) if it holds the task head `head_variable`,
    a fine-tuned model as in the original README's prediction commands;
    None if there is none."""
    if preferred:
        return preferred
    checkpoint = tf.train.latest_checkpoint(output_dir) if output_dir else None
    if checkpoint:
        return checkpoint
    if init_checkpoint and head_variable in dict(tf.train.list_variables(init_checkpoint)):
        return init_checkpoint
    return None


def export_builder_args(options):
    """The arguments of a script's model_fn builder for an export: no
    checkpoint to start from (the export's own restores it), no training,
    no TPU, and the `TrainingOptions` `options` made fit for serving
    (`TrainingOptions.for_export`)."""
    return dict(init_checkpoint=None, learning_rate=0.0, num_train_steps=None,
                num_warmup_steps=None, use_tpu=False, use_one_hot_embeddings=False,
                options=(options or TrainingOptions()).for_export())


# ---------------------------------------------------------------------------
# Training options (the training-option flags), the model and its
# initialisation.

_COMPUTE_TYPES = {"fp32": tf.float32, "fp16": tf.float16, "bf16": tf.bfloat16}


@dataclasses.dataclass(frozen=True)
class TrainingOptions:
    """The memory, speed and device options of a run (the flags of
    TRAINING_OPTION_FLAGS), as one value that a script's main hands to its
    model_fn builder and to the runner. The defaults are the original's
    behaviour, which a library call gets without flags.

    Attributes:
      precision: "fp32", "fp16" or "bf16", the encoder's compute type
        (fp16 trains with dynamic loss scaling).
      recompute_grad: recompute each Transformer layer in the backward pass.
      fused_ops: bert_ops.FusedOps, or None for bert_ops' "auto".
      gradient_accumulation_steps: micro-batches per optimizer update.
      use_xla: XLA auto-clustering of the whole graph.
      distribution_strategy: "none", "mirrored" or "multi_worker_mirrored".
      num_gpus: GPUs for "mirrored" (0: all).
      optimizer: "adamw" or "lamb" (optimization.create_optimizer's
        optimizer_name).
      poly_power, start_warmup_step: the learning-rate schedule's decay power
        and the step its warm-up begins at.
      length_buckets: with dynamic padding, the increasing lengths a batch
        may be padded to (the last is max_seq_length); None: every batch is
        padded to max_seq_length (see `tfrecord_input_fn`).
      input_seed: the seed of the training input's order, or None for an
        unseeded order (see `ResumableTrainer`).
    """

    precision: str = "fp32"
    recompute_grad: bool = False
    fused_ops: bert_ops.FusedOps = None
    gradient_accumulation_steps: int = 1
    use_xla: bool = False
    distribution_strategy: str = "none"
    num_gpus: int = 0
    optimizer: str = "adamw"
    poly_power: float = 1.0
    start_warmup_step: int = 0
    length_buckets: tuple = None
    input_seed: int = None

    def model_kwargs(self):
        """The keyword arguments of `modeling.BertModel` these options set."""
        return {"compute_type": _COMPUTE_TYPES[self.precision],
                "recompute_grad": self.recompute_grad, "fused_ops": self.fused_ops}

    def describe(self):
        """The options in effect, for the logs: "precision fp32, fused
        gelu,layer_norm,dropout" and whichever others are on."""
        parts = ["precision %s" % self.precision]
        if self.recompute_grad:
            parts.append("recompute_grad")
        parts.append("fused %s" % (self.fused_ops if self.fused_ops is not None else "auto"))
        if self.use_xla:
            parts.append("XLA")
        if self.distribution_strategy != "none":
            parts.append("%s strategy" % self.distribution_strategy)
        if self.optimizer != "adamw":
            parts.append("optimizer %s" % self.optimizer)
        if self.poly_power != 1.0:
            parts.append("decay power %g" % self.poly_power)
        if self.start_warmup_step:
            parts.append("warm-up from step %d" % self.start_warmup_step)
        if self.length_buckets:
            parts.append("dynamic padding to %s" % ",".join(map(str, self.length_buckets)))
        return ", ".join(parts)

    def for_export(self):
        """These options for a SavedModel's graph: no recomputation, and every
        kernel written out (a model server may lack XLA)."""
        return dataclasses.replace(self, recompute_grad=False, fused_ops=bert_ops.FusedOps())


def training_options_from_flags():
    """The `TrainingOptions` of the parsed flags (every training script
    defines TRAINING_OPTION_FLAGS). Applies the process-wide ones now, before
    any session: --limit_memory_fragmentation, and XLA's start for fused
    kernels (`choose_fused_ops`)."""
    if not FLAGS.poly_power > 0:
        raise InputError("--poly_power=%s must be positive" % FLAGS.poly_power)
    if FLAGS.limit_memory_fragmentation:
        limit_memory_fragmentation()
    # A multi-worker strategy must configure TensorFlow's collective ops
    # before anything starts TensorFlow's runtime, as XLA's start would.
    multi_worker = FLAGS.distribution_strategy == "multi_worker_mirrored"
    return TrainingOptions(
        precision=FLAGS.precision, recompute_grad=FLAGS.recompute_grad,
        fused_ops=choose_fused_ops(FLAGS.fused_ops, start_xla=not multi_worker),
        gradient_accumulation_steps=max(1, FLAGS.gradient_accumulation_steps or 1),
        use_xla=FLAGS.use_xla, distribution_strategy=FLAGS.distribution_strategy,
        num_gpus=FLAGS.num_gpus, optimizer=FLAGS.optimizer, poly_power=FLAGS.poly_power,
        start_warmup_step=FLAGS.start_warmup_step,
        length_buckets=length_buckets_from_flags(), input_seed=FLAGS.input_seed or None)


def default_length_buckets(max_seq_length):
    """--length_buckets' default: 8 even steps up to max_seq_length, each
    rounded up to a multiple of 8 (which suits the matrix units of GPUs and
    CPUs alike)."""
    return tuple(sorted({min(max_seq_length, -(-max_seq_length * i // 64) * 8)
                         for i in range(1, 9)}))


def length_buckets_from_flags():
    """TrainingOptions.length_buckets of --dynamic_padding and
    --length_buckets (scripts without them: None).

    Raises:
      InputError: --length_buckets not increasing positive integers, or
        past --max_seq_length.
    """
    if "dynamic_padding" not in FLAGS:
        return None
    max_seq_length = FLAGS.max_seq_length
    if not FLAGS.dynamic_padding:
        if FLAGS.length_buckets:
            raise InputError("--length_buckets is for --dynamic_padding, which is off")
        return None
    if FLAGS.use_tpu:
        tf.logging.warning("--dynamic_padding is off on TPUs (they need fixed shapes): "
                           "batches are padded to --max_seq_length=%d", max_seq_length)
        return None
    if not FLAGS.length_buckets:
        return default_length_buckets(max_seq_length)
    try:
        buckets = [int(value) for value in FLAGS.length_buckets]
    except ValueError:
        raise InputError("--length_buckets=%s: expected comma-separated whole numbers"
                         % ",".join(FLAGS.length_buckets))
    if any(b < 1 for b in buckets) or buckets != sorted(set(buckets)) or \
            buckets[-1] > max_seq_length:
        raise InputError("--length_buckets=%s: expected increasing lengths from 1 to "
                         "--max_seq_length=%d" % (",".join(FLAGS.length_buckets),
                                                  max_seq_length))
    if buckets[-1] != max_seq_length:
        buckets.append(max_seq_length)
    return tuple(buckets)


def choose_fused_ops(setting, start_xla=True):
    """The bert_ops.FusedOps of --fused_ops=`setting`. Where any kernel is
    fused, XLA is started here with `start_xla` (`quiet_tf.start_xla_quietly`:
    its start-up lines caught now rather than at the first step); where XLA
    does not work, every kernel is written out.

    Raises:
      InputError: an unknown value, naming --fused_ops.
    """
    try:
        fused_ops = bert_ops.choose_fused_ops(setting)
    except ValueError as e:
        raise InputError("--fused_ops: %s" % e)
    if start_xla and fused_ops != bert_ops.FusedOps() and not quiet_tf.start_xla_quietly():
        return bert_ops.FusedOps()
    return fused_ops


def bert_model(bert_config, is_training, input_ids, input_mask, segment_ids,
               use_one_hot_embeddings, options=None):
    """`modeling.BertModel` with the `TrainingOptions` `options` (None: the
    defaults), for the scripts' create_model functions.

    Args:
      input_ids, input_mask, segment_ids: int32 [batch, seq_length].

    Returns:
      The modeling.BertModel.
    """
    # "bert" by name, not as the default name (which a second model in the
    # graph would get as "bert_1"): an export builds the model twice on the
    # same variables (serving.py).
    return modeling.BertModel(
        config=bert_config, is_training=is_training, input_ids=input_ids,
        input_mask=input_mask, token_type_ids=segment_ids,
        use_one_hot_embeddings=use_one_hot_embeddings, scope="bert",
        **(options or TrainingOptions()).model_kwargs())


# While a `ResumableTrainer` call runs: the checkpoint from which its runner
# restores every variable (a resumed training, an evaluation or prediction of
# a trained model), which replaces the model_fn's initialisation; None where
# that initialisation gives the weights.
_RUNNER_RESTORES = {"checkpoint": None}


@contextlib.contextmanager
def _runner_restores(checkpoint):
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
    runner of a `ResumableTrainer` restores a checkpoint of the run instead
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
    # line per variable at DEBUG level. (`restored` holds each name with and
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
# Logging examples and features; tf.train.Feature helpers.

def log_example(fields, debug=False, ids=()):
    """Logs one converted example (the scripts do so for their first few),
    for a reader to check the input: a "*** Example ***" line, then
    "name: value" per (name, value) of `fields` (the tokens, their number,
    the label), lists written space-separated; at DEBUG level with `debug`
    (for the examples after the first, which would fill a short run's log).
    The id lists `ids` ((name, list) pairs, max_seq_length long) come at
    DEBUG level only: --verbosity=1 shows them."""
    log = tf.logging.debug if debug else tf.logging.info
    log("*** Example ***")
    for name, value in fields:
        if isinstance(value, (list, tuple)):
            value = " ".join(str(v) for v in value)
        log("%s: %s", name, value)
    for name, value in ids:
        tf.logging.debug("%s: %s", name, " ".join(str(v) for v in value))


def log_training(options, details, num_train_steps):
    """Logs the start of training as `log_phase` does: `details` ((name,
    value) pairs: what the data holds), then the batch (with gradient
    accumulation "16 × 2 accumulated = 32"), the number of optimizer steps
    and the memory and speed options in effect (`TrainingOptions`)."""
    batch, accumulation = FLAGS.train_batch_size, options.gradient_accumulation_steps
    batch_text = str(batch) if accumulation == 1 else "%d × %d accumulated = %d" % (
        batch, accumulation, batch * accumulation)
    log_phase("Running training", list(details) + [
        ("Batch size", batch_text), ("Num steps", num_train_steps),
        ("Options", options.describe())])


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


# The read buffer of the scripts' TFRecord readers, in bytes: TensorFlow
# 2.15's default, given explicitly because TensorFlow 2.16+ logs a line on
# every run whose reader leaves it unset.
TFRECORD_BUFFER_BYTES = 256 * 1024

# Dynamic padding sorts training inputs by length within pools of this many
# batches: enough for batches of like lengths, few enough that the order
# stays random.
LENGTH_POOL_BATCHES = 32

# The features that run along the sequence (their last axis is trimmed).
SEQUENCE_FEATURES = ("input_ids", "input_mask", "segment_ids")


def tfrecord_input_fn(input_file, name_to_features, is_training, drop_remainder,
                      shuffle_buffer=100, length_buckets=None,
                      sequence_features=SEQUENCE_FEATURES):
    """The runner's input_fn(params) for a TFRecord file of tf.train.Examples
    (decoded by `decode_record`), in batches of params["batch_size"].

    Args:
      input_file: the file.
      name_to_features: name -> tf.io.FixedLenFeature.
      is_training: read the file over and over, shuffled `shuffle_buffer`
        records at a time; otherwise once, in order. A training run resumed
        from a checkpoint (params[START_RECORD] records in, see
        `ResumableTrainer`) goes on with the next batch of the same stream
        when params[INPUT_SEED] seeds the shuffle, and with the records
        after those already trained on when it is unseeded.
      drop_remainder: drop a last, smaller batch (TPU).
      length_buckets: dynamic padding (TrainingOptions.length_buckets):
        each batch's `sequence_features` are cut, on their last axis, to
        the first bucket that holds its longest input (by input_mask), and
        training batches are made of inputs of like length: the shuffled
        stream is read in pools of LENGTH_POOL_BATCHES batches, each pool
        sorted by length, cut into batches, and the batches shuffled. A pool
        holds the same inputs as the same batches without it, so each input
        is read as often. Evaluation and prediction keep the input order.
        None: every batch keeps the file's length.
      sequence_features: the features of one value per position.
    """
    def input_fn(params):
        batch_size = params["batch_size"]
        pooled = bool(length_buckets) and is_training
        start_record = params.get(START_RECORD, 0) if is_training else 0
        seed = params.get(INPUT_SEED) if is_training else None
        # Records skipped before decoding (cheap), and whole batches after.
        skip_records, skip_batches = start_record, 0
        if seed is not None and pooled:
            pool_records = batch_size * LENGTH_POOL_BATCHES
            skip_records = start_record // pool_records * pool_records
            skip_batches = (start_record - skip_records) // batch_size
        if start_record:
            tf.logging.info(
                "Resuming the training input after the %d examples that the checkpoint has "
                "trained on (%s)", start_record, "unseeded: the records after them, in a new "
                "order" if seed is None else "the same order, from the input seed")
        d = tf.data.TFRecordDataset(input_file, buffer_size=TFRECORD_BUFFER_BYTES)
        if is_training:
            d = d.repeat()
            if seed is None:
                d = d.skip(start_record).shuffle(buffer_size=shuffle_buffer)
            else:
                d = d.shuffle(buffer_size=shuffle_buffer, seed=seed).skip(skip_records)
        d = d.map(lambda record: decode_record(record, name_to_features),
                  num_parallel_calls=tf.data.AUTOTUNE)
        if pooled:
            # The batches' order within a pool: from the input seed, else the
            # run's graph seed, else random.
            pool_seed = seed if seed is not None else tf.get_seed(None)[1]
            pool_seed = random.randrange(2 ** 31) if pool_seed is None else pool_seed
            first_pool = skip_records // (batch_size * LENGTH_POOL_BATCHES)
            d = d.batch(batch_size * LENGTH_POOL_BATCHES, drop_remainder=True)
            d = tf.data.Dataset.zip((tf.data.Dataset.range(first_pool, 2 ** 62), d))
            d = d.flat_map(lambda index, pool: tf.data.Dataset.from_tensor_slices(
                _batches_by_length(pool, batch_size, [pool_seed, index])))
            d = d.skip(skip_batches)
        else:
            d = d.batch(batch_size, drop_remainder=drop_remainder)
        if length_buckets:
            d = d.map(lambda batch: _trim_to_bucket(batch, length_buckets,
                                                    sequence_features))
        return d.prefetch(tf.data.AUTOTUNE)

    return input_fn


def _input_lengths(features):
    """[n] lengths (real positions) of a batch of inputs; inputs of several
    sequences (multiple choice) count their longest."""
    lengths = tf.reduce_sum(tf.cast(features["input_mask"], tf.int32), axis=-1)
    while lengths.shape.ndims > 1:
        lengths = tf.reduce_max(lengths, axis=-1)
    return lengths


def _batches_by_length(pool, batch_size, seed):
    """A pool of inputs ([pool_batches * batch_size, ...] each) sorted by
    length, cut into batches and the batches shuffled (by the stateless
    `seed`, two integers): [pool_batches, batch_size, ...] each."""
    order = tf.argsort(_input_lengths(pool), stable=True)
    num_batches = tf.shape(order)[0] // batch_size
    shuffle = tf.argsort(tf.random.stateless_uniform(
        [num_batches], seed=tf.cast(tf.stack(seed), tf.int64)))
    order = tf.gather(tf.reshape(order, [num_batches, batch_size]), shuffle)
    return {name: tf.gather(values, order) for name, values in pool.items()}


def _trim_to_bucket(batch, length_buckets, sequence_features):
    """The batch with its sequence features cut to the first of
    `length_buckets` that holds its longest input."""
    buckets = tf.constant(length_buckets, dtype=tf.int32)
    longest = tf.reduce_max(_input_lengths(batch))
    length = tf.gather(buckets, tf.minimum(
        tf.searchsorted(buckets, tf.reshape(longest, [1]), side="left")[0],
        len(length_buckets) - 1))
    return {name: (values[..., :length] if name in sequence_features else values)
            for name, values in batch.items()}


def log_features(features):
    """Logs the name and shape of every input feature (each model_fn
    starts with it)."""
    tf.logging.info("*** Features ***")
    for name in sorted(features):
        tf.logging.info("  name = %s, shape = %s", name, features[name].shape)


# ---------------------------------------------------------------------------
# Training: the train op, the step count and the progress hook.

def create_train_op(loss, learning_rate, num_train_steps, num_warmup_steps, use_tpu,
                    options=None):
    """`optimization.create_optimizer` with the `TrainingOptions` `options`
    applied (optimizer and schedule shape, gradient accumulation, dynamic
    loss scaling for fp16)."""
    options = options or TrainingOptions()
    loss_scale = None
    if options.precision == "fp16":
        import mixed_precision
        loss_scale = mixed_precision.DynamicLossScale()
    return optimization.create_optimizer(
        loss, learning_rate, num_train_steps, num_warmup_steps, use_tpu,
        gradient_accumulation_steps=options.gradient_accumulation_steps,
        loss_scale_manager=loss_scale, optimizer_name=options.optimizer,
        poly_power=options.poly_power, start_warmup_step=options.start_warmup_step,
        # LAMB's update is an XLA loop where the model's kernels are.
        fused_update=(None if options.fused_ops is None
                      else options.fused_ops != bert_ops.FusedOps()),
        count_batches=bool(tf.get_collection(COUNT_BATCHES)))


def train_spec(loss, learning_rate, num_train_steps, num_warmup_steps, use_tpu, options,
               examples_per_step, tokens_per_step=None, scaffold_fn=None):
    """The TRAIN spec of the scripts' model_fns: `create_train_op` and the
    progress hooks (`training_hooks`).

    Args:
      loss: the scalar loss.
      learning_rate, num_train_steps, num_warmup_steps: the schedule.
      use_tpu: built for TPUEstimator.
      options: `TrainingOptions` (None: the defaults).
      examples_per_step, tokens_per_step: what one batch holds.
      scaffold_fn: from `init_from_checkpoint`.
    """
    return runtime.TPUEstimatorSpec(
        mode=runtime.ModeKeys.TRAIN, loss=loss,
        train_op=create_train_op(loss, learning_rate, num_train_steps, num_warmup_steps,
                                 use_tpu, options),
        training_hooks=training_hooks(
            loss, examples_per_step, tokens_per_step, use_tpu=use_tpu,
            num_train_steps=num_train_steps,
            runs_per_step=(options or TrainingOptions()).gradient_accumulation_steps),
        scaffold_fn=scaffold_fn)


def num_train_steps(num_examples, train_batch_size, num_train_epochs,
                    gradient_accumulation_steps=1):
    """Number of optimizer updates for `num_train_epochs` over `num_examples`.

    One update consumes `train_batch_size * gradient_accumulation_steps`
    examples, so with accumulation the schedule (warm-up, decay, max_steps)
    stays in optimizer updates while covering the same epochs.
    """
    accumulation = max(1, gradient_accumulation_steps or 1)
    return int(num_examples / (train_batch_size * accumulation) * num_train_epochs)


def train_schedule(num_examples, options, what="training examples", announce=True):
    """(num_train_steps, num_warmup_steps) for `num_examples` with
    --train_batch_size, --num_train_epochs and --warmup_proportion, the
    steps capped by --max_train_steps (logged with the full count, unless
    `announce` is False: for an early check whose count the caller replaces
    later).

    Raises:
      InputError: the flags make no training step.
    """
    steps = num_train_steps(num_examples, FLAGS.train_batch_size, FLAGS.num_train_epochs,
                            options.gradient_accumulation_steps)
    if steps < 1:
        raise InputError(
            "%d %s, --train_batch_size=%d and --num_train_epochs=%s make 0 training steps"
            % (num_examples, what, FLAGS.train_batch_size, FLAGS.num_train_epochs))
    if 0 < FLAGS.max_train_steps < steps and announce:
        tf.logging.info("Training %d of the %d steps of %s epochs (--max_train_steps)",
                        FLAGS.max_train_steps, steps, FLAGS.num_train_epochs)
    if 0 < FLAGS.max_train_steps < steps:
        steps = FLAGS.max_train_steps
    return steps, int(steps * FLAGS.warmup_proportion)


class TrainingClock:
    """The time of one training run, across the runner's `train` calls that
    its evaluations split it into, for the ETA of `ThroughputHook`.

    The first update of a `train` call holds its start-up (graph
    optimisation, XLA compilation, the input pipeline filling up, and with
    gradient accumulation the first run of the update's ops), which is no
    training step's time: the run's first one is left out, and from the
    second call on, the time from the previous call's last run to the end of
    this call's first update counts as a pause (the evaluation, and the
    restart of training after it).

    Args:
      evaluation_steps: the global steps after which training pauses for an
        evaluation (not the last step, after which training is over).

    Attributes:
      runs, run_seconds: session runs timed, and their wall time (from the
        end of the run before, so checkpoint saves and hooks count too).
      pauses, pause_seconds: pauses for evaluations so far, and their time.
    """

    def __init__(self, evaluation_steps=()):
        self.evaluation_steps = tuple(sorted(evaluation_steps))
        self.runs = 0
        self.run_seconds = 0.0
        self.pauses = 0
        self.pause_seconds = 0.0
        self.last_run_end = None  # Of the previous `train` call.

    def eta(self, step, num_train_steps, runs_per_step=1):
        """", ETA <time>" for the training from global step `step` to
        `num_train_steps` ("" before any run was timed): the remaining
        session runs at the mean time of a run so far, plus the
        evaluations still to come at the mean time of a pause so far
        ("with N evaluations"), or "+ N evaluations" when none was timed
        yet."""
        if not self.runs or step >= num_train_steps:
            return ""
        seconds = (num_train_steps - step) * runs_per_step * self.run_seconds / self.runs
        pending = sum(step <= e < num_train_steps for e in self.evaluation_steps)
        evaluations = "%d evaluation%s" % (pending, "" if pending == 1 else "s")
        if pending and self.pauses:
            return ", ETA %s with %s" % (format_duration(
                seconds + pending * self.pause_seconds / self.pauses), evaluations)
        if pending:
            return ", ETA %s + %s" % (format_duration(seconds), evaluations)
        return ", ETA %s" % format_duration(seconds)


# The `TrainingClock` of the `ResumableTrainer.train` call under way (its
# hooks time the run on it), or None.
_TRAINING_CLOCK = {"current": None}


class ThroughputHook(tf.train.SessionRunHook):
    """Logs the training progress about every --log_every_seconds of wall
    time: "step <global step>[ of <num_train_steps>]: loss = <the mean loss
    of the batches since the last line> (mean of <n> batches),
    <examples/s>[, <tokens/s>][, ETA <time>]", one line at the first step
    and one at the end. The rate leaves out the start-up in the first
    update (a line with no other run says how long it took), and the
    ETA counts the evaluations still to come (see `TrainingClock`; the
    clock of the `ResumableTrainer` training, else one of this hook's own).

    Args:
      loss: the loss tensor.
      examples_per_step: examples one session run consumes.
      tokens_per_step: tokens one session run consumes, or None.
      every_n_steps: log every this many runs instead of by time.
      num_train_steps: the global step training stops at, for the ETA.
      every_seconds: the interval (default: `log_every_seconds()`).
      runs_per_step: session runs per optimizer update (gradient
        accumulation): lines come only after a completed update, so that
        the step they give is the update just made.
    """

    def __init__(self, loss, examples_per_step, tokens_per_step=None, every_n_steps=None,
                 num_train_steps=None, every_seconds=None, runs_per_step=1):
        self._loss = loss
        self._examples_per_step = examples_per_step
        self._tokens_per_step = tokens_per_step
        self._every_n = every_n_steps
        self._every_seconds = log_every_seconds() if every_seconds is None else every_seconds
        self._num_train_steps = num_train_steps
        self._runs_per_step = max(1, runs_per_step)
        self._clock = None
        self._runs = 0
        self._begin = None
        self._last_run_end = None
        self._interval_start = None
        self._interval_timed_runs = 0
        self._interval_seconds = 0.0
        self._losses = []

    def begin(self):
        self._global_step = tf.train.get_global_step()
        self._clock = _TRAINING_CLOCK["current"] or TrainingClock()
        self._begin = time.time()

    def before_run(self, run_context):
        return tf.train.SessionRunArgs({"loss": self._loss, "step": self._global_step})

    def after_run(self, run_context, run_values):
        now = time.time()
        self._runs += 1
        self._losses.append(float(run_values.results["loss"]))
        clock = self._clock
        if self._runs < self._runs_per_step:
            pass  # The start-up (see below).
        elif self._runs == self._runs_per_step:
            # The first update: its first run holds the start-up, and with
            # gradient accumulation the first run that applies the update
            # starts its ops too. Not timed as a step; after an
            # evaluation, part of the pause.
            if clock.last_run_end is not None:
                clock.pauses += 1
                clock.pause_seconds += now - clock.last_run_end
            self._interval_start = now
        else:
            clock.runs += 1
            clock.run_seconds += now - self._last_run_end
            self._interval_timed_runs += 1
            self._interval_seconds += now - self._last_run_end
        self._last_run_end = now
        if self._every_n:
            due = self._runs % self._every_n == 0
        else:
            due = self._runs % self._runs_per_step == 0 and (
                self._runs == self._runs_per_step
                or now - self._interval_start >= self._every_seconds)
        if due:
            self._log(now, run_context.session)

    def end(self, session):
        if self._losses:
            self._log(time.time(), session)
        if self._last_run_end is not None:
            self._clock.last_run_end = self._last_run_end

    def _log(self, now, session):
        # The step fetched with the run may have been read before the
        # update: read it again.
        step = int(session.run(self._global_step))
        message = "step %d" % step
        if self._num_train_steps:
            message += " of %d" % self._num_train_steps
        batches = len(self._losses)
        message += ": loss = %.4f (%s)" % (
            sum(self._losses) / batches,
            "1 batch" if batches == 1 else "mean of %d batches" % batches)
        if self._interval_timed_runs:
            seconds = max(self._interval_seconds, 1e-9)
            message += ", %.2f examples/s" % (
                self._examples_per_step * self._interval_timed_runs / seconds)
            if self._tokens_per_step:
                message += ", %.0f tokens/s" % (
                    self._tokens_per_step * self._interval_timed_runs / seconds)
        else:
            message += ", %s with start-up" % format_duration(now - self._begin)
        if self._num_train_steps:
            message += self._clock.eta(step, self._num_train_steps, self._runs_per_step)
        tf.logging.info("%s", message)
        self._losses = []
        self._interval_timed_runs = 0
        self._interval_seconds = 0.0
        self._interval_start = now


def training_hooks(loss, examples_per_step, tokens_per_step=None, use_tpu=False,
                   every_n_steps=None, num_train_steps=None, runs_per_step=1):
    """Hooks logging the training loss and throughput on CPU/GPU (see
    `ThroughputHook`; num_train_steps gives the ETA).

    On TPU, device tensors cannot be read by host hooks, so none are added
    (TPUEstimator logs loss and examples/s itself there).
    """
    if use_tpu:
        return []
    return [ThroughputHook(loss, examples_per_step, tokens_per_step,
                           every_n_steps=every_n_steps, num_train_steps=num_train_steps,
                           runs_per_step=runs_per_step)]


class ProgressHook(tf.train.SessionRunHook):
    """Logs the progress of an evaluation or prediction at the rhythm of
    training's lines (a `Progress` of batches): "<what>: <n> of <total>
    batches (<rate>, ETA ...)", and a last line with the time it took.

    Args:
      what: "Evaluating", "Predicting", ...
      num_batches: the batches the run will take, or None where unknown.
    """

    def __init__(self, what, num_batches=None):
        self._what = what
        self._num_batches = num_batches
        self._progress = None

    def begin(self):
        self._progress = Progress(self._what, self._num_batches, unit="batches")

    def after_run(self, run_context, run_values):
        self._progress.update()

    def end(self, session):
        self._progress.done()


def num_batches(num_examples, batch_size):
    """Batches of `batch_size` that `num_examples` fill (the last one may be
    partial)."""
    return -(-num_examples // batch_size)


# ---------------------------------------------------------------------------
# Run configuration and the runner (the execution layer lives in runtime.py).

def make_run_config(output_dir, save_checkpoints_steps, iterations_per_loop=1000,
                    use_tpu=False, tpu_name=None, tpu_zone=None, gcp_project=None,
                    master=None, num_tpu_cores=8, keep_checkpoint_max=5,
                    tpu_job_name=None, options=None):
    """`runtime.make_run_config` with the `TrainingOptions` `options` applied
    (XLA, the distribution strategy, GPUs); on the Estimator without a TPU,
    its own step logging off (ThroughputHook's lines replace it)."""
    options = options or TrainingOptions()
    with _config_errors_as_input_errors():
        config = runtime.make_run_config(
            output_dir, save_checkpoints_steps, iterations_per_loop=iterations_per_loop,
            use_tpu=use_tpu, tpu_name=tpu_name, tpu_zone=tpu_zone, gcp_project=gcp_project,
            master=master, num_tpu_cores=num_tpu_cores,
            keep_checkpoint_max=keep_checkpoint_max, tpu_job_name=tpu_job_name,
            use_xla=options.use_xla, distribution_strategy=options.distribution_strategy,
            num_gpus=options.num_gpus)
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


def estimator_from_flags(model_fn, options, **batch_sizes):
    """The runner of a training script's model_fn, configured by its flags
    (--output_dir, --save_checkpoints_steps, --iterations_per_loop, the TPU
    flags) and the `TrainingOptions` `options`, as a `ResumableTrainer`.

    Args:
      **batch_sizes: train_batch_size, eval_batch_size, predict_batch_size.
    """
    run_config = make_run_config(
        FLAGS.output_dir, FLAGS.save_checkpoints_steps, FLAGS.iterations_per_loop,
        FLAGS.use_tpu, FLAGS.tpu_name, FLAGS.tpu_zone, FLAGS.gcp_project, FLAGS.master,
        FLAGS.num_tpu_cores, tpu_job_name=FLAGS.tpu_job_name, options=options)
    return ResumableTrainer(make_estimator(model_fn, run_config, FLAGS.use_tpu, **batch_sizes),
                            options, batch_sizes.get("train_batch_size"))


@contextlib.contextmanager
def _config_errors_as_input_errors():
    try:
        yield
    except runtime.ConfigError as e:
        raise InputError(str(e))


# ---------------------------------------------------------------------------
# Interrupted and resumed training.

# input_fn params that `ResumableTrainer.train` adds: how many records of the
# training stream (all workers' together) the checkpoint has trained on, and
# the run's input seed (None: unseeded).
START_RECORD = "start_record"
INPUT_SEED = "input_seed"

# A graph collection that `ResumableTrainer.train` fills (through the
# input_fn, which the runners call before the model_fn, in the same graph)
# where the train op may count the batches it reads
# (optimization.BATCHES_READ_VARIABLE): in a new run, or one resumed from a
# checkpoint that holds the count. A checkpoint without it (of an earlier
# version) could not restore the variable, so such a run goes on without.
COUNT_BATCHES = "run_common_count_batches"


class TrainingInterrupted(run_base.InterruptedExit):
    """Training stopped by SIGINT or SIGTERM after a checkpoint was saved;
    the exit status is 128 + the signal's number."""


class ResumableTrainer:
    """A runner of `make_estimator` (all its methods pass through) whose
    `train` goes on where the latest checkpoint stopped, and stops cleanly
    when the process is told to.

    * Before training, a latest checkpoint that is cut short or unreadable
      is set aside for the newest intact one (`use_intact_checkpoint`).
    * The input_fn gets params[START_RECORD] (the records that the
      checkpoint's steps have consumed, `consumed_batches` times the
      training batch) and params[INPUT_SEED], so that it can start at the
      next unseen batch (`tfrecord_input_fn`): with a seed, the run then
      trains on exactly the batches of an uninterrupted run. A float16
      train op counts the batches it reads (COUNT_BATCHES), as steps
      skipped for overflow do not move the global step.
    * SIGINT (Ctrl-C) or SIGTERM during training: the running step is
      finished, a checkpoint of that step is saved (`InterruptHook`), one
      line names it, and `TrainingInterrupted` ends the run. A second signal
      stops at once.

    Args:
      runner: what `make_estimator` returns.
      options: the run's `TrainingOptions` (gradient accumulation, seed).
      train_batch_size: examples per training step (all replicas).
    """

    def __init__(self, runner, options, train_batch_size):
        self._runner = runner
        self._options = options
        self._train_batch_size = train_batch_size or 0
        self._clock = TrainingClock()

    def evaluations_at(self, steps):
        """Tells the progress lines' ETA the global steps after which the
        caller evaluates between two `train` calls (see `TrainingClock`)."""
        self._clock.evaluation_steps = tuple(sorted(steps))

    def __getattr__(self, name):
        return getattr(self._runner, name)

    def train(self, input_fn, max_steps=None, hooks=None, steps=None):
        """`runner.train` from the next unseen batch; see the class."""
        # A signal whose KeyboardInterrupt was lost stops the run here.
        run_base.raise_if_interrupted()
        model_dir = self._runner.model_dir
        chief = run_base.is_training_chief()
        if chief:  # The holder of the directory's lock; other workers only read.
            _remove_failed_saves(model_dir)
        checkpoint = use_intact_checkpoint(model_dir, rewrite=chief)
        start_batch = consumed_batches(model_dir, self._options.gradient_accumulation_steps)
        start_record = start_batch * self._train_batch_size
        seed = self._options.input_seed
        count_batches = checkpoint is None or tf.train.load_checkpoint(checkpoint).has_tensor(
            optimization.BATCHES_READ_VARIABLE)

        def positioned_input_fn(params):
            params = dict(params)
            params[START_RECORD] = start_record
            params[INPUT_SEED] = seed
            if count_batches:
                tf.add_to_collection(COUNT_BATCHES, 1)
            return input_fn(params)

        hook = InterruptHook(model_dir, save=chief)
        _TRAINING_CLOCK["current"] = self._clock
        try:
            with run_base.interrupts_held(on_hold=hook.stop_soon, raise_after=False), \
                    _runner_restores(checkpoint):
                self._runner.train(positioned_input_fn, max_steps=max_steps,
                                   hooks=list(hooks or ()) + [hook], steps=steps)
        finally:
            _TRAINING_CLOCK["current"] = None
        if hook.signum is not None:
            checkpoint = tf.train.latest_checkpoint(model_dir)
            step = hook.step
            if step is None:  # The signal came after the hooks had ended.
                step = int(tf.train.load_variable(checkpoint, tf.GraphKeys.GLOBAL_STEP))
            tf.logging.warning(
                "Training stopped by %s at step %d: checkpoint %s saved; the same command "
                "resumes from it", hook.signal_name, step, checkpoint)
            raise TrainingInterrupted(128 + hook.signum)
        return self

    def _restored_checkpoint(self, checkpoint_path):
        """The checkpoint an evaluation or prediction restores: the one
        given, else the latest of model_dir (None: the model_fn's
        initialisation gives the weights)."""
        model_dir = self._runner.model_dir
        return checkpoint_path or (tf.train.latest_checkpoint(model_dir) if model_dir
                                   else None)

    def evaluate(self, *args, **kwargs):
        """`runner.evaluate`, its checkpoint named by the model_fn's log."""
        with _runner_restores(self._restored_checkpoint(kwargs.get("checkpoint_path"))):
            return self._runner.evaluate(*args, **kwargs)

    def predict(self, *args, **kwargs):
        """`runner.predict` (a generator), its checkpoint named by the
        model_fn's log."""
        predictions = iter(self._runner.predict(*args, **kwargs))
        # The graph is built when the first prediction is asked for.
        with _runner_restores(self._restored_checkpoint(kwargs.get("checkpoint_path"))):
            first = next(predictions, _NO_PREDICTION)
        if first is _NO_PREDICTION:
            return
        yield first
        yield from predictions


_NO_PREDICTION = object()  # The end of `ResumableTrainer.predict`'s first next().


def _remove_failed_saves(model_dir):
    """Removes what checkpoint saves that failed (a full disk) left in
    `model_dir`: the saver's "<prefix>-<step>_temp..." folders of partial
    files, which take the room the next save needs."""
    if not model_dir or not tf.io.gfile.isdir(model_dir):
        return
    for name in tf.io.gfile.listdir(model_dir):
        name = name.rstrip("/")
        path = os.path.join(model_dir, name)
        if re.fullmatch(r".+-\d+_temp(_[0-9a-f]+)?", name) and tf.io.gfile.isdir(path):
            tf.io.gfile.rmtree(path)
            tf.logging.info("Removed %s: the partial files of a checkpoint save that failed",
                            path)


def _graph_variable(name):
    """The graph's global variable called `name`, or None."""
    for variable in tf.global_variables():
        if variable.op.name == name:
            return variable
    return None


class InterruptHook(tf.train.SessionRunHook):
    """Stops training after the running step once `stop_soon` was called (by
    the signal handler of `ResumableTrainer.train`), with a checkpoint of
    that step.

    The runner's own saver writes a checkpoint at the end of training when
    the global step has moved since its last one. In the middle of a
    gradient accumulation cycle it may not have: this hook then saves the
    accumulated micro-batches itself (under the same step's name), so that
    none of them is trained on twice.

    Args:
      model_dir: where checkpoints go.
      save: whether this process saves checkpoints (the chief of a cluster;
        the others only stop).
    """

    def __init__(self, model_dir, save=True):
        self._model_dir = model_dir
        self._save = save
        self.signum = None
        self.step = None
        self._micro_step = None
        self._saver = None

    @property
    def signal_name(self):
        return signal.Signals(self.signum).name if self.signum else None

    def stop_soon(self, signum):
        """Asks training to stop after the running step (called once)."""
        self.signum = signum
        tf.logging.warning("Got %s: stopping after the running step to save a checkpoint "
                           "(a second signal stops at once, without one)", self.signal_name)

    def begin(self):
        self._global_step = tf.train.get_global_step()
        self._micro_step = _graph_variable(optimization.MICRO_STEP_VARIABLE)
        if self._micro_step is not None and self._save:
            self._saver = tf.train.Saver(sharded=True, save_relative_paths=True)

    def after_run(self, run_context, run_values):
        if self.signum is not None:
            run_context.request_stop()

    def end(self, session):
        if self.signum is None:
            return
        self.step = int(session.run(self._global_step))
        if self._saver is None:
            return
        micro_step = int(session.run(self._micro_step))
        latest = tf.train.latest_checkpoint(self._model_dir)
        if latest and micro_step:
            reader = tf.train.load_checkpoint(latest)
            saved = (int(reader.get_tensor(tf.GraphKeys.GLOBAL_STEP)),
                     int(reader.get_tensor(optimization.MICRO_STEP_VARIABLE)))
            if saved != (self.step, micro_step) and saved[0] == self.step:
                # Same name as the latest: the state file needs no change.
                self._saver.save(session, latest, write_meta_graph=False, write_state=False)


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
    step = int(tf.train.load_variable(newest, tf.GraphKeys.GLOBAL_STEP))
    tf.logging.warning("%s: resuming from %s (step %d), the newest intact checkpoint",
                       fault, newest, step)
    # The paths as the state file gave them, or as the listing found them
    # (TensorFlow writes them relative to model_dir again, in the list it
    # is given).
    tf.train.update_checkpoint_state(model_dir, newest, all_model_checkpoint_paths=intact)
    return newest


# ---------------------------------------------------------------------------
# Result files.

def report_trained_checkpoint(output_dir):
    """Names the latest checkpoint in `output_dir`, the one training ended
    with, among the run's outputs (`report_output`)."""
    checkpoint = tf.train.latest_checkpoint(output_dir)
    if checkpoint:
        step = int(tf.train.load_variable(checkpoint, tf.GraphKeys.GLOBAL_STEP))
        report_output(checkpoint, "the trained model, at step %d" % step)


def write_eval_results(result, output_dir, file_name="eval_results.txt",
                       header="***** Eval results *****", headline=None):
    """Logs `result` (name -> value) under `header` and writes it to
    output_dir/file_name as "key = value" lines sorted by key (the
    original's eval_results.txt format), reported with its `headline`
    metric (`report_output`).

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
    report_output(path, "%s = %s" % (headline, result[headline]) if headline in result
                  else "")
    return path
