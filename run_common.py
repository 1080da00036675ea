"""What every BERT script repeats: shared flags, run configuration, estimator
construction, checkpoint initialisation, training options, logging and file
output.

Flags shared by several scripts are defined here, once, so that scripts can
be imported side by side (as the tests do) without absl's duplicate-flag
error. A script lists the shared flags it uses with `define_flags`, and
defines its own flags with plain ``flags.DEFINE_*``.

When several scripts are imported into one process, the first one to define a
shared flag sets its default (only ``max_seq_length`` differs: 384 for SQuAD,
128 elsewhere); a script run from the shell always gets its own default.
"""

import contextlib
import errno
import importlib
import json
import os
import re
import struct
import sys
import time

from absl import app, flags

import pretraining_records


class _LazyModule:
    """A module imported on first attribute access.

    TensorFlow (and modeling/optimization, which import it) are loaded only
    when a function here needs them, so a script using just the flags and
    input checks (create_pretraining_data.py) runs without TensorFlow's
    ~440 MB and ~3 s import.
    """

    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        import quiet_tf  # noqa: F401
        return getattr(importlib.import_module(self._name), attr)


tf = _LazyModule("tensorflow.compat.v1")
modeling = _LazyModule("modeling")
optimization = _LazyModule("optimization")

FLAGS = flags.FLAGS


class InputError(ValueError):
    """Bad user input (a flag, a file, a line): reported without a traceback."""


# name -> (define function, default, help[, enum values]). Names, defaults and
# meanings are the original scripts'; the help texts are this project's.
_SHARED_FLAGS = {
    "bert_config_file": (
        flags.DEFINE_string, None,
        "bert_config.json of the pre-trained model: the architecture (layers, "
        "hidden size, heads, vocabulary size, ...) the checkpoint was made with."),
    "vocab_file": (
        flags.DEFINE_string, None,
        "WordPiece vocabulary (vocab.txt, one token per line) of the model."),
    "output_dir": (
        flags.DEFINE_string, None,
        "Directory for checkpoints and result files; created if missing."),
    "init_checkpoint": (
        flags.DEFINE_string, None,
        "Checkpoint to start from, usually a pre-trained BERT model (the path "
        "prefix, e.g. .../bert_model.ckpt)."),
    "input_file": (
        flags.DEFINE_string, None,
        "Input file(s): a file, a comma-separated list of files, or globs."),
    "output_file": (flags.DEFINE_string, None, "Output file(s)."),
    "do_lower_case": (
        flags.DEFINE_bool, True,
        "Lower-case the text and strip accents before WordPiece: True for "
        "uncased models, False for cased ones."),
    "max_seq_length": (
        flags.DEFINE_integer, 128,
        "Length of the model input in WordPiece tokens, [CLS] and [SEP] "
        "included: shorter inputs are zero-padded to it, longer ones truncated "
        "(SQuAD documents: split into overlapping windows)."),
    "max_predictions_per_seq": (
        flags.DEFINE_integer, 20,
        "Most masked-LM predictions per sequence: pre-training must use the "
        "value its data was created with."),
    "do_train": (flags.DEFINE_bool, False, "Train on the training data."),
    "do_eval": (
        flags.DEFINE_bool, False,
        "Evaluate the model: on the dev set, or for pre-training on --input_file."),
    "do_predict": (flags.DEFINE_bool, False, "Write predictions for the test data."),
    "train_batch_size": (
        flags.DEFINE_integer, 32, "Examples per training batch, over all devices."),
    "eval_batch_size": (
        flags.DEFINE_integer, 8, "Examples per evaluation batch, over all devices."),
    "predict_batch_size": (
        flags.DEFINE_integer, 8, "Examples per prediction batch, over all devices."),
    "learning_rate": (
        flags.DEFINE_float, 5e-5,
        "Peak learning rate of Adam, reached after the warm-up and then "
        "decayed linearly to 0."),
    "num_train_epochs": (
        flags.DEFINE_float, 3.0, "Passes over the training data (may be fractional)."),
    "warmup_proportion": (
        flags.DEFINE_float, 0.1,
        "Share of the training steps during which the learning rate climbs "
        "linearly from 0 (0.1: the first tenth)."),
    "save_checkpoints_steps": (
        flags.DEFINE_integer, 1000, "Steps between two saved checkpoints."),
    "iterations_per_loop": (
        flags.DEFINE_integer, 1000,
        "TPU: training steps run on the device per round trip from the host."),
    "use_tpu": (
        flags.DEFINE_bool, False,
        "Run on a Cloud TPU; otherwise on the local CPU or GPU(s)."),
    "tpu_name": (
        flags.DEFINE_string, None,
        "With --use_tpu: the Cloud TPU, by the name it was created with or as "
        "a grpc://<address>:8470 URL."),
    "tpu_zone": (
        flags.DEFINE_string, None,
        "[Optional] GCE zone of the Cloud TPU; looked up in the GCE metadata "
        "when unset."),
    "gcp_project": (
        flags.DEFINE_string, None,
        "[Optional] Google Cloud project that owns the Cloud TPU; looked up in "
        "the GCE metadata when unset."),
    "master": (
        flags.DEFINE_string, None,
        "[Optional] Address of the TensorFlow master; derived from --tpu_name "
        "when unset."),
    "num_tpu_cores": (
        flags.DEFINE_integer, 8,
        "With --use_tpu: how many TPU cores to use."),
    "use_one_hot_embeddings": (
        flags.DEFINE_bool, False,
        "Look up word embeddings as a one-hot matrix product instead of a "
        "gather: the faster way on TPUs, the slower one elsewhere."),
    # Options beyond the original (memory, speed, several devices); all off
    # by default, so default behaviour stays the original's.
    "gradient_accumulation_steps": (
        flags.DEFINE_integer, 1,
        "Sum the gradients of this many micro-batches of --train_batch_size "
        "before one optimizer update (effective batch = N * train_batch_size). "
        "global_step, num_train_steps and warm-up count optimizer updates."),
    "recompute_grad": (
        flags.DEFINE_bool, False,
        "Recompute each Transformer layer's activations in the backward pass "
        "instead of storing them (gradient checkpointing): much less memory "
        "for about a third more compute."),
    "use_xla": (flags.DEFINE_bool, False, "Compile the model with XLA (CPU/GPU)."),
    "precision": (
        flags.DEFINE_enum, "fp32",
        "Compute precision of the Transformer: fp32 (the original), fp16 "
        "(GPUs; dynamic loss scaling) or bf16 (TPUs, and CPUs with AVX512_BF16). "
        "Variables, optimizer state and checkpoints stay float32.",
        ["fp32", "fp16", "bf16"]),
    "distribution_strategy": (
        flags.DEFINE_enum, "none",
        "Without --use_tpu: train with tf.distribute. 'mirrored' uses every "
        "local GPU (or --num_gpus of them); 'multi_worker_mirrored' spans the "
        "machines named in the TF_CONFIG environment variable.",
        ["none", "mirrored", "multi_worker_mirrored"]),
    "limit_memory_fragmentation": (
        flags.DEFINE_bool, False,
        "CPU training: make glibc's malloc return large freed blocks to the "
        "system at once (mmap threshold 128 KiB), which lowers peak resident "
        "memory of a BERT-Base training step by about 1 GiB; may cost some "
        "speed (more page faults)."),
    "log_every_seconds": (
        flags.DEFINE_integer, 30,
        "Seconds of wall time between two progress lines (training: step, loss, "
        "examples/s and ETA; long conversions: count, rate and ETA)."),
    "num_gpus": (
        flags.DEFINE_integer, 0,
        "With --distribution_strategy=mirrored: number of GPUs to use (0: all "
        "visible GPUs, or the CPU if there are none)."),
}

TPU_FLAGS = ("use_tpu", "tpu_name", "tpu_zone", "gcp_project", "master", "num_tpu_cores")
TRAINING_OPTION_FLAGS = ("gradient_accumulation_steps", "recompute_grad", "use_xla",
                         "precision", "distribution_strategy", "num_gpus",
                         "limit_memory_fragmentation", "log_every_seconds")


def define_flags(*names, **default_overrides):
    """Defines the named shared flags unless already defined in this process.

    Args:
      *names: flag names from `_SHARED_FLAGS` (or tuples of them, such as
        `TPU_FLAGS`).
      **default_overrides: name=default for flags whose default differs in
        this script (e.g. max_seq_length=384 for SQuAD).
    """
    expanded = []
    for name in names:
        expanded.extend(name if isinstance(name, (tuple, list)) else [name])
    for name in list(expanded) + [n for n in default_overrides if n not in expanded]:
        if name in FLAGS:
            continue
        define_fn, default, help_text = _SHARED_FLAGS[name][:3]
        default = default_overrides.get(name, default)
        if define_fn is flags.DEFINE_enum:
            define_fn(name, default, _SHARED_FLAGS[name][3], help_text)
        else:
            define_fn(name, default, help_text)


_HELP_FLAGS = ("--help", "-help", "-h", "-?", "--helpshort", "--helpfull", "--helpxml")


def run_script(main):
    """`absl.app.run(main)` for the scripts, with their error and log output
    made readable.

    * `InputError` (and a failed write of an output file, see
      `output_write_error`) ends the run with one line "ERROR: <message>" on
      stderr and exit status 1, without a traceback.
    * Each log message is printed once (see `_log_each_message_once`).
    * --help exits with status 0 (absl's own exit status for it is 1).

    Args:
      main: the script's main(argv).
    """
    def wrapped(argv):
        _log_each_message_once()
        _silence_deprecation_warnings()
        if _flag("limit_memory_fragmentation", False):
            import recompute
            recompute.limit_memory_fragmentation()
        try:
            return main(argv)
        except InputError as e:
            _exit_with_error(str(e))
        except Exception as e:  # Reported in one line only if it is a failed write.
            message = output_write_error(e)
            if message is None:
                raise
            _exit_with_error(message)

    asks_for_help = any(arg.split("=", 1)[0] in _HELP_FLAGS
                        for arg in sys.argv[1:sys.argv.index("--")
                                            if "--" in sys.argv else None])
    try:
        app.run(wrapped)
    except SystemExit as e:
        if asks_for_help and e.code == 1:
            sys.exit(0)
        raise


def _exit_with_error(message):
    """Prints "ERROR: <message>" once, after the log lines so far, and exits
    with status 1."""
    import logging
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.write("ERROR: %s\n" % message)
    sys.stderr.flush()
    sys.exit(1)


def _silence_deprecation_warnings():
    """Turns off TensorFlow's warnings that its own APIs (the Estimator's,
    TF1's) are deprecated: three lines each, dozens in a short run on the
    Estimator (TensorFlow 2.15), none of them about the user's input."""
    if "tensorflow" not in sys.modules:
        return
    try:
        from tensorflow.python.util import deprecation
    except ImportError:  # Moved in some later version: the warnings stay.
        return
    deprecation._PRINT_DEPRECATION_WARNINGS = False


def _log_each_message_once():
    """Leaves the printing of log records to absl's handler alone.

    TensorFlow gives its "tensorflow" logger a stderr handler of its own when
    it is imported before logging is set up (the scripts import it at the
    top), and absl's handler on the root logger prints the same records
    again: every message came out twice ("INFO:tensorflow:..." and
    "I1201 ... ]"). Absl's form, with the time, is kept. A TensorFlow
    imported later finds the root handler and adds none.
    """
    import logging
    if "tensorflow" not in sys.modules:
        return
    tf_logger = logging.getLogger("tensorflow")
    root_handlers = logging.getLogger().handlers
    if not root_handlers or not tf_logger.propagate:
        return
    for handler in list(tf_logger.handlers):
        # Exactly StreamHandler: file handlers and pytest's capture handlers
        # (subclasses) stay.
        if type(handler) is logging.StreamHandler:
            tf_logger.removeHandler(handler)


# ---------------------------------------------------------------------------
# Output locations: checked before any work, and failed writes in one line.

# errno values, and the texts of TensorFlow's errors, of a write that failed
# for lack of room: a full disk, a full quota, a file size limit.
_NO_ROOM_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
_NO_ROOM_TEXTS = ("No space left on device", "Disk quota exceeded", "File too large")

# flag name -> path, for each output location checked by this run.
_OUTPUT_LOCATIONS = {}


def _is_remote(path):
    return "://" in path


def _exists(path):
    return tf.io.gfile.exists(path) if _is_remote(path) else os.path.exists(path)


def _isdir(path):
    return tf.io.gfile.isdir(path) if _is_remote(path) else os.path.isdir(path)


def check_output_dir(path, flag_name="output_dir"):
    """Checks that a run can write into the directory `path`, creating
    nothing: it must be a directory or not exist yet, and the directory it
    is in (or would be created in) must be writable.

    Remote paths (gs://...) are not checked (a write is the only test).

    Args:
      path: the directory.
      flag_name: the flag that named it, for the message.

    Raises:
      InputError: naming the flag, the path and what to do.
    """
    if not path:
        raise InputError("--%s is required" % flag_name)
    _OUTPUT_LOCATIONS[flag_name] = path
    if _is_remote(path):
        return
    if os.path.exists(path) and not os.path.isdir(path):
        raise InputError("--%s %s is a file, not a directory: name a directory (it is "
                         "created if missing) or move the file away" % (flag_name, path))
    existing = os.path.abspath(path)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise InputError("--%s %s cannot be created: %s is a file, not a directory"
                         % (flag_name, path, existing))
    if not os.access(existing, os.W_OK | os.X_OK):
        if existing == os.path.abspath(path):
            detail = "is not writable"
        else:
            detail = "cannot be created: %s is not writable" % existing
        raise InputError("--%s %s %s: choose another directory or change its permissions"
                         % (flag_name, path, detail))


def check_output_file(path, flag_name="output_file", create_dir=True):
    """Checks that a run can write the file `path` (see check_output_dir).

    Args:
      path: the file.
      flag_name: the flag that named it, for the message.
      create_dir: whether the run creates a missing parent directory; if
        not, the directory must exist.

    Raises:
      InputError: `path` is a directory, or its directory is missing (with
        create_dir False), a file or not writable.
    """
    if not path:
        raise InputError("--%s is required" % flag_name)
    if _isdir(path):
        raise InputError("--%s %s is a directory: give the path of a file to write"
                         % (flag_name, path))
    directory = os.path.dirname(path) or "."
    if not create_dir and not _is_remote(path) and not os.path.isdir(directory):
        raise InputError("--%s %s: directory %s does not exist" % (flag_name, path, directory))
    try:
        check_output_dir(directory, flag_name)
    except InputError as e:
        raise InputError(str(e).replace("--%s %s" % (flag_name, directory),
                                        "--%s %s: its directory %s" % (flag_name, path, directory),
                                        1))
    _OUTPUT_LOCATIONS[flag_name] = path


def output_write_error(error, path=None):
    """The one-line message for `error` if it is a write that failed for lack
    of room (full disk, quota, file size limit), else None.

    Args:
      error: an exception: an OSError, or a TensorFlow error (whose text
        usually names the file).
      path: the file being written, if the caller knows it.

    Returns:
      "cannot write <path>: <reason>; free some space ... or choose another
      --<flag>", or None.
    """
    if isinstance(error, OSError) and error.errno in _NO_ROOM_ERRNOS:
        reason = error.strerror or str(error)
        path = path or error.filename
    elif "tensorflow" in sys.modules and isinstance(error, tf.errors.OpError):
        text = error.message or str(error)
        # The text's first line may say nothing ("Graph execution error:"),
        # and the line with the reason names a temporary file: the reason alone.
        reason = next((t for t in _NO_ROOM_TEXTS if t in text), None)
        if reason is None:
            return None
    else:
        return None
    flag = None
    for name, location in _OUTPUT_LOCATIONS.items():
        if path is None or os.path.abspath(str(path)).startswith(os.path.abspath(location)):
            flag = name
    where = "--%s %s" % (flag, _OUTPUT_LOCATIONS[flag]) if flag else "the output"
    if path:
        return ("cannot write %s: %s; free some disk space (or raise the file size "
                "limit) or choose another location for %s" % (path, reason, where))
    return ("writing %s failed: %s; free some disk space (or raise the file size limit) "
            "or choose another location" % (where, reason))


# ---------------------------------------------------------------------------
# Input validation.

def require_flags(*names):
    """Raises InputError naming every listed flag that is unset."""
    missing = [n for n in names if getattr(FLAGS, n) in (None, "")]
    if missing:
        raise InputError("Missing required flag(s): %s" % ", ".join("--" + n for n in missing))


def require_file(flag_name, path):
    """Raises InputError if `path` (the value of --flag_name) does not exist."""
    if not path:
        raise InputError("--%s is required" % flag_name)
    if not tf.io.gfile.exists(path):
        raise InputError("--%s: file not found: %s" % (flag_name, path))


def require_checkpoint(flag_name, path):
    """Raises InputError if `path` (the value of --flag_name) is set but no
    checkpoint exists there (an unset flag is fine: random initialisation)."""
    if path and not tf.train.checkpoint_exists(path):
        raise InputError("--%s: no checkpoint at %s" % (flag_name, path))


def expand_file_patterns(flag_name, patterns):
    """Comma-separated files or globs -> sorted list of existing files.

    Raises:
      InputError: a pattern matches nothing (names the flag and the pattern).
    """
    files = []
    for pattern in patterns.split(","):
        pattern = pattern.strip()
        if not pattern:
            continue
        matched = tf.io.gfile.glob(pattern)
        if not matched:
            raise InputError("--%s: no file matches %s" % (flag_name, pattern))
        files.extend(sorted(matched))
    if not files:
        raise InputError("--%s is required" % flag_name)
    return files


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


def _open_binary(path):
    if _is_remote(path):
        return tf.io.gfile.GFile(path, "rb")
    return open(path, "rb")


def read_file_bytes(path):
    """The content of a local or remote (gs://...) file, as bytes."""
    with _open_binary(path) as f:
        return f.read()


def utf8_lines(lines, flag_name, path):
    """Passes on the lines of a file opened as UTF-8 text, turning a
    UnicodeDecodeError into `non_utf8_error` (naming the line).

    Args:
      lines: an iterable of str, e.g. a tf.io.gfile.GFile opened with "r".
      flag_name, path: the flag and the file, for the message.
    """
    try:
        yield from lines
    except UnicodeDecodeError:
        raise non_utf8_error(flag_name, path)


def non_utf8_error(flag_name, path):
    """The InputError for a file that is not UTF-8, naming its first bad line.

    Called after a UnicodeDecodeError, whose position is relative to
    whatever chunk was being decoded: the file is read again, line by line,
    to find the line, the byte offset and the reason.

    Args:
      flag_name: the flag that named the file (or its directory), or None.
      path: the file.

    Returns:
      InputError("--<flag> <path>, line N: not valid UTF-8 (byte offset O of
      the file: <reason>); convert the file to UTF-8").
    """
    where = "--%s %s" % (flag_name, path) if flag_name else path
    offset = 0
    with _open_binary(path) as f:
        for number, line in enumerate(f, 1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as e:
                return InputError(
                    "%s, line %d: not valid UTF-8 (byte offset %d of the file: %s); convert "
                    "the file to UTF-8" % (where, number, offset + e.start, e.reason))
            offset += len(line)
    return InputError("%s is not valid UTF-8 (a character is cut off at the end); convert "
                      "the file to UTF-8" % where)


# ---------------------------------------------------------------------------
# Checkpoints.

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
    import runtime
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
# Progress of long loops.

def format_duration(seconds):
    """"42 s", "3 min 05 s", "2 h 07 min"."""
    seconds = int(round(max(0.0, seconds)))
    if seconds < 60:
        return "%d s" % seconds
    if seconds < 3600:
        return "%d min %02d s" % divmod(seconds, 60)
    return "%d h %02d min" % (seconds // 3600, seconds % 3600 // 60)


def _log_info(message, *args):
    """INFO through TensorFlow's logger if it is loaded, else absl's (scripts
    without TensorFlow set absl's verbosity)."""
    if "tensorflow" in sys.modules:
        tf.logging.info(message, *args)
    else:
        from absl import logging as absl_logging
        absl_logging.info(message, *args)


def log_every_seconds():
    """--log_every_seconds, or 30 where a script has no such flag."""
    return _flag("log_every_seconds", 30)


class Progress:
    """Logs the progress of a long loop about every --log_every_seconds:
    "<what>: <count> of <total> <unit> (<rate> <unit>/s, ETA <time>)".

        progress = run_common.Progress("Converting examples", len(examples))
        for example in examples:
            ...
            progress.update()
        progress.done()

    Args:
      what: what the loop does.
      total: how many items it will do, or None (no ETA then).
      unit: what it counts.
      every_seconds: the interval (default: `log_every_seconds()`).
    """

    def __init__(self, what, total=None, unit="examples", every_seconds=None):
        self.what = what
        self.total = total
        self.unit = unit
        self.count = 0
        self._every = log_every_seconds() if every_seconds is None else every_seconds
        self._start = time.time()
        self._last_log = self._start

    def update(self, increment=1, count=None):
        """Counts `increment` more items (or sets the count), logging if the
        interval has passed."""
        self.count = self.count + increment if count is None else count
        now = time.time()
        if now - self._last_log >= self._every:
            self._last_log = now
            _log_info("%s", self._message(now))

    def _message(self, now, final=False):
        elapsed = max(now - self._start, 1e-9)
        rate = self.count / elapsed
        if self.total is not None and not final:
            message = "%s: %d of %d %s" % (self.what, self.count, self.total, self.unit)
        else:
            message = "%s: %d %s" % (self.what, self.count, self.unit)
        message += " (%.1f %s/s" % (rate, self.unit)
        if final:
            message += ", %s in all)" % format_duration(elapsed)
        elif self.total is not None and rate > 0:
            message += ", ETA %s)" % format_duration((self.total - self.count) / rate)
        else:
            message += ")"
        return message

    def done(self):
        """Logs the final count, rate and time."""
        _log_info("%s", self._message(time.time(), final=True))


# ---------------------------------------------------------------------------
# Model building blocks shared by the model_fns.

def model_options():
    """Keyword arguments for `modeling.BertModel` from the option flags
    (compute_type from --precision, recompute_grad)."""
    compute_type = {"fp32": tf.float32, "fp16": tf.float16, "bf16": tf.bfloat16}[
        _flag("precision", "fp32")]
    return {"compute_type": compute_type,
            "recompute_grad": bool(_flag("recompute_grad", False))}


def _flag(name, default):
    """Value of a shared flag, or `default` if this script did not define it
    or the flags are not parsed (a script imported as a library)."""
    if name in FLAGS and FLAGS.is_parsed():
        return getattr(FLAGS, name)
    return default


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


def truncate_seq_pair(tokens_a, tokens_b, max_length):
    """Shortens two token lists in place until together they hold at most
    `max_length` tokens, always dropping the last token of the longer list
    (of `tokens_b` when both are equally long).

    Trimming the longer side keeps most of a short text, where each token
    tends to carry more information than a token of a long one.
    """
    while len(tokens_a) + len(tokens_b) > max_length:
        longer = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        longer.pop()


def pack_sequence_pair(tokens_a, tokens_b, max_seq_length, tokenizer):
    """Lays out one text or a text pair the way BERT reads it.

      one text:  [CLS] a1 a2 a3 [SEP]             segment ids 0 0 0 0 0
      a pair:    [CLS] a1 a2 [SEP] b1 b2 b3 [SEP] segment ids 0 0 0 0 1 1 1 1

    Too long inputs are cut first: a single text at its end, a pair with
    `truncate_seq_pair`. The id lists are then zero-padded to max_seq_length.

    Args:
      tokens_a: word pieces of the first text (a pair's is shortened in
        place).
      tokens_b: word pieces of the second text; None or empty for one text.
      max_seq_length: length of the returned id lists.
      tokenizer: FullTokenizer, to map tokens to ids.

    Returns:
      (tokens, input_ids, input_mask, segment_ids): the tokens with [CLS] and
      [SEP] and without padding, then three lists of max_seq_length ints;
      input_mask is 1 on real tokens and 0 on padding.
    """
    if tokens_b:
        truncate_seq_pair(tokens_a, tokens_b, max_seq_length - 3)  # [CLS], 2 x [SEP]
    else:
        tokens_a = tokens_a[:max_seq_length - 2]  # [CLS], [SEP]

    tokens = ["[CLS]", *tokens_a, "[SEP]"]
    segment_ids = [0] * len(tokens)
    if tokens_b:
        tokens += [*tokens_b, "[SEP]"]
        segment_ids += [1] * (len(tokens_b) + 1)

    input_ids = tokenizer.convert_tokens_to_ids(tokens)
    input_mask = [1] * len(input_ids)
    padding = [0] * (max_seq_length - len(input_ids))
    return tokens, input_ids + padding, input_mask + padding, segment_ids + padding


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


class _ThroughputHookMethods:
    """Logs the training progress about every --log_every_seconds of wall
    time: "step <global step>[ of <num_train_steps>]: loss = <mean loss since
    the last line>, <examples/s>[, <tokens/s>][, ETA <time>]", one line at
    the first step and one at the end.

    `ThroughputHook` is this plus tf.train.SessionRunHook, made on first use
    (see `__getattr__`) so that importing run_common does not load TensorFlow.

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
    return [_throughput_hook_class()(loss, examples_per_step, tokens_per_step,
                                     every_n_steps=every_n_steps,
                                     num_train_steps=num_train_steps)]


_THROUGHPUT_HOOK = []


def _throughput_hook_class():
    """`ThroughputHook`: a tf.train.SessionRunHook, created once, lazily."""
    if not _THROUGHPUT_HOOK:
        _THROUGHPUT_HOOK.append(type("ThroughputHook", (_ThroughputHookMethods,
                                                        tf.train.SessionRunHook),
                                     {"__module__": __name__}))
    return _THROUGHPUT_HOOK[0]


def __getattr__(name):
    # PEP 562: `run_common.ThroughputHook` still works, without importing
    # TensorFlow when run_common itself is imported.
    if name == "ThroughputHook":
        return _throughput_hook_class()
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


# ---------------------------------------------------------------------------
# Run configuration and the runner (the execution layer lives in runtime.py).

def make_run_config(output_dir, save_checkpoints_steps, iterations_per_loop=1000,
                    use_tpu=False, tpu_name=None, tpu_zone=None, gcp_project=None,
                    master=None, num_tpu_cores=8, keep_checkpoint_max=5,
                    tpu_job_name=None):
    """`runtime.make_run_config` with the option flags applied (--use_xla,
    --distribution_strategy, --num_gpus); on the Estimator without a TPU, its
    own step logging off (ThroughputHook's lines replace it)."""
    import runtime
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
    import runtime
    with _config_errors_as_input_errors():
        return runtime.make_estimator(model_fn, run_config, use_tpu,
                                      train_batch_size=train_batch_size,
                                      eval_batch_size=eval_batch_size,
                                      predict_batch_size=predict_batch_size)


@contextlib.contextmanager
def _config_errors_as_input_errors():
    import runtime
    try:
        yield
    except runtime.ConfigError as e:
        raise InputError(str(e))


# ---------------------------------------------------------------------------
# Output files (through tf.io.gfile, so gs:// paths work).

@contextlib.contextmanager
def atomic_path(path):
    """Yields a temporary path next to `path` for the caller to write; on
    success it is renamed to `path`, on failure removed, so a half-written
    file never looks complete. A write that fails for lack of room becomes
    an InputError naming `path` (see `output_write_error`)."""
    tmp_path = "%s.tmp-%d" % (path, os.getpid())
    try:
        yield tmp_path
        tf.io.gfile.rename(tmp_path, path, overwrite=True)
    except BaseException as e:
        if tf.io.gfile.exists(tmp_path):
            tf.io.gfile.remove(tmp_path)
        message = output_write_error(e, path) if isinstance(e, Exception) else None
        if message:
            raise InputError(message) from e
        raise


@contextlib.contextmanager
def atomic_output(path, mode="w"):
    """Opens `path` for writing through `atomic_path`.

    Yields:
      A writable tf.io.gfile.GFile.
    """
    with atomic_path(path) as tmp_path:
        with tf.io.gfile.GFile(tmp_path, mode) as writer:
            yield writer


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
