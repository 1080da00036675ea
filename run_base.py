"""The part of the scripts' shared code that needs no TensorFlow: the shared
flag registry, running a script (one-line errors, readable logs), file
access, input and output checks, progress lines, atomic output files and
the lock that keeps one training run per output directory.

run_common.py re-exports what the scripts use of it next to its TensorFlow
parts, and the scripts use it through run_common. Scripts that do not need
TensorFlow (create_pretraining_data.py, create_vocab.py) and
squad_evaluate.py import this module alone, so they start without
TensorFlow's import (seconds, and hundreds of MB).

Files. Every script reads and writes through the functions of the "Files"
section: local paths with Python's own file functions, other paths (gs://,
TensorFlow's ram:// and any scheme with "://") through tf.io.gfile, which
imports TensorFlow when such a path is first used.

Flags. Every flag that more than one script has is defined here, once, in
`_SHARED_FLAGS`, so that scripts can be imported side by side (as the tests
do) without absl's duplicate-flag error. A script lists the shared flags it
uses with `define_flags`, with its own default or help text where they
differ (--max_seq_length is 384 for SQuAD, --doc_stride 64 for NER), and
defines the flags only it has with plain ``flags.DEFINE_*``. When several
scripts are imported into one process, the first one to define a shared flag
sets its default and help text; a script run from the shell always gets its
own.
"""

import atexit
import collections
import contextlib
import ctypes
import ctypes.util
import errno
import functools
import glob
import json
import os
import signal
import socket
import sys
import threading
import time
import uuid

from absl import app, flags
from absl import logging as absl_logging


def _is_tensorflow_error(error):
    """Whether `error` is a TensorFlow OpError (only possible once
    TensorFlow is loaded)."""
    if "tensorflow" not in sys.modules:
        return False
    import tensorflow.compat.v1 as tf
    return isinstance(error, tf.errors.OpError)


# ---------------------------------------------------------------------------
# Flags and running a script.

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
    "batch_size": (flags.DEFINE_integer, 32, "Inputs per prediction batch."),
    "input_format": (
        flags.DEFINE_enum, "auto", "Format of the input files; auto: told from the file.",
        ["auto", "jsonl", "tsv", "csv", "text", "swag_csv"]),
    "skip_malformed_rows": (
        flags.DEFINE_bool, False,
        "Skip (with a warning) data rows with the wrong number of columns instead "
        "of stopping with an error."),
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
    # Masking (create_pretraining_data.py, and run_pretraining.py for data
    # written with --dynamic_masking).
    "random_seed": (
        flags.DEFINE_integer, 12345,
        "Seed of the random choices (pairs, truncation, masks); in "
        "run_pretraining.py, of the masks drawn for --dynamic_masking data."),
    "masked_lm_prob": (
        flags.DEFINE_float, 0.15,
        "Share of each sequence's tokens to mask for the masked-LM task."),
    "do_whole_word_mask": (
        flags.DEFINE_bool, False,
        "Mask whole words: when one WordPiece of a word is chosen, all of the "
        "word's pieces are masked (default: each WordPiece is chosen on its own)."),
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
        "Peak learning rate of the optimizer, reached after the warm-up and "
        "then decayed to 0 (linearly, unless --poly_power says otherwise)."),
    "num_train_epochs": (
        flags.DEFINE_float, 3.0, "Passes over the training data (may be fractional)."),
    "max_train_steps": (
        flags.DEFINE_integer, 0,
        "If positive, train at most this many optimizer steps (the warm-up and "
        "decay fit the shortened run): for a quick try of a command."),
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
    "input_seed": (
        flags.DEFINE_integer, 0,
        "If not 0: the seed of the training input's order, the same in every "
        "run; a run resumed from a checkpoint goes on with the batch that an "
        "uninterrupted run would read next. 0: an unseeded order (the "
        "original's); a resumed run reads on from the records after those its "
        "checkpoint has trained on."),
    "gradient_accumulation_steps": (
        flags.DEFINE_integer, 1,
        "Sum the gradients of this many micro-batches of --train_batch_size "
        "before one optimizer update (effective batch = N * train_batch_size). "
        "global_step, num_train_steps and warm-up count optimizer updates."),
    "optimizer": (
        flags.DEFINE_enum, "adamw",
        "adamw: Adam with decoupled weight decay, the original's optimizer. "
        "lamb: the same moments and decay, each variable's step scaled to the "
        "size of its weights (per-variable trust ratio) and bias-corrected; "
        "meant for large batches (large --train_batch_size times "
        "--gradient_accumulation_steps, or many devices).",
        ["adamw", "lamb"]),
    "poly_power": (
        flags.DEFINE_float, 1.0,
        "Power of the learning rate's decay after the warm-up: "
        "lr * (1 - step / num_train_steps) ** poly_power (1.0: the original's "
        "linear decay)."),
    "start_warmup_step": (
        flags.DEFINE_integer, 0,
        "Global step at which the linear warm-up begins (the rate is 0 before "
        "it); the decay still counts from step 0. For a run that continues "
        "an earlier one's step count and warms up again."),
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
        "CPU training: return large freed tensors to the system at once "
        "(glibc mmap threshold 128 KiB; on oneDNN, TensorFlow's tensors from "
        "malloc instead of its own pool), which lowers the peak resident memory "
        "of a training step; costs speed, since the kernel zeroes fresh pages "
        "for every large tensor (figures in docs/performance.md)."),
    "log_every_seconds": (  # Every script has it (see `define_flags`).
        flags.DEFINE_integer, 30,
        "Seconds of wall time between two progress lines (training: step, loss, "
        "examples/s and ETA; long conversions: count, rate and ETA)."),
    "num_gpus": (
        flags.DEFINE_integer, 0,
        "With --distribution_strategy=mirrored: number of GPUs to use (0: all "
        "visible GPUs, or the CPU if there are none)."),
    "fused_ops": (
        flags.DEFINE_string, "auto",
        "Which of GELU, LayerNorm and dropout run as XLA-compiled loops instead of "
        "chains of separate ops: auto (all three where no GPU is visible, where "
        "they are faster; none on GPUs), all, none, or a comma-separated list of "
        "gelu, layer_norm, dropout. Same values to float rounding (fused dropout "
        "draws 16 random bits per value). Exports and TPU computations always "
        "use the separate ops. Unless none, --optimizer=lamb's update is "
        "compiled too, where no GPU is visible."),
    # Fine-tuning data, prediction and export.
    "data_dir": (
        flags.DEFINE_string, None,
        "Folder with the task's data files, found there by their usual names."),
    "train_file": (
        flags.DEFINE_string, None, "Training data file (instead of the one in --data_dir)."),
    "dev_file": (
        flags.DEFINE_string, None,
        "Dev (evaluation) data file (instead of the one in --data_dir)."),
    "test_file": (
        flags.DEFINE_string, None,
        "Test data file for --do_predict (instead of the one in --data_dir)."),
    "labels": (
        flags.DEFINE_string, None,
        "Comma-separated labels, in the order of the model's outputs. Default: "
        "those of the training data (or of the run record of an earlier "
        "training run)."),
    "doc_stride": (
        flags.DEFINE_integer, 128,
        "A text too long for one input is read in overlapping windows of "
        "--max_seq_length; each window starts this many word pieces after the "
        "previous one."),
    "export_dir": (
        flags.DEFINE_string, None,
        "If set, export a SavedModel for serving under this directory (in a "
        "timestamped subdirectory)."),
    "dynamic_padding": (
        flags.DEFINE_bool, False,
        "Pad each batch only to its longest input (rounded up to a length "
        "bucket, see --length_buckets) instead of --max_seq_length; training "
        "batches are formed from inputs of similar length. Same results up to "
        "float rounding; not on TPUs, which need fixed shapes."),
    "length_buckets": (
        flags.DEFINE_list, None,
        "With --dynamic_padding: the lengths a batch may be padded to, "
        "comma-separated and increasing (--max_seq_length is always the last). "
        "Each is one input shape, compiled once with --use_xla. Default: 8 "
        "even steps up to --max_seq_length, in multiples of 8."),
    "tpu_job_name": (
        flags.DEFINE_string, None,
        "With --use_tpu: the TPU worker job's name, when it is not 'tpu_worker'."),
}


TPU_FLAGS = ("use_tpu", "tpu_name", "tpu_zone", "gcp_project", "master", "num_tpu_cores",
             "tpu_job_name")


# The memory, speed and device options of the training scripts
# (run_common.TrainingOptions).
TRAINING_OPTION_FLAGS = ("gradient_accumulation_steps", "recompute_grad", "use_xla",
                         "precision", "distribution_strategy", "num_gpus",
                         "limit_memory_fragmentation", "fused_ops",
                         "optimizer", "poly_power", "start_warmup_step", "input_seed")

# What the fine-tuning scripts that train, evaluate and predict have in common
# (run_classifier.py, run_ner.py, run_swag.py): the original run_classifier's
# flags, the training options and the export.
FINE_TUNING_FLAGS = ("bert_config_file", "vocab_file", "output_dir", "init_checkpoint",
                     "do_lower_case", "max_seq_length", "do_train", "do_eval", "do_predict",
                     "train_batch_size", "eval_batch_size", "predict_batch_size",
                     "learning_rate", "num_train_epochs", "max_train_steps", "warmup_proportion",
                     "save_checkpoints_steps", "iterations_per_loop") + TPU_FLAGS + \
    TRAINING_OPTION_FLAGS + ("data_dir", "train_file", "dev_file", "test_file", "export_dir",
                             "dynamic_padding", "length_buckets")


def define_flags(*names, helps=None, **defaults):
    """Defines the named shared flags, and --log_every_seconds, unless this
    process has them already, and makes them key flags of the calling
    script, which its --help lists.

    Args:
      *names: flag names from `_SHARED_FLAGS` (or tuples of them, such as
        `TPU_FLAGS`).
      helps: optional dict name -> help text, for flags whose meaning this
        script states more precisely (which files --data_dir holds, say).
      **defaults: name=default for flags whose default differs in this
        script (max_seq_length=384 for SQuAD).
    """
    # The defining script's module: --help lists its key flags. (absl names
    # the module run as a program by its path.)
    module = sys._getframe(1).f_globals.get("__name__")  # pylint: disable=protected-access
    module = sys.argv[0] if module == "__main__" else module
    expanded = list(_ALWAYS_DEFINED)
    for name in names:
        expanded.extend(name if isinstance(name, (tuple, list)) else [name])
    for name in dict.fromkeys(expanded + list(defaults)):
        if name not in FLAGS:
            define_fn, default, help_text = _SHARED_FLAGS[name][:3]
            default = defaults.get(name, default)
            help_text = (helps or {}).get(name, help_text)
            if define_fn is flags.DEFINE_enum:
                define_fn(name, default, _SHARED_FLAGS[name][3], help_text)
            else:
                define_fn(name, default, help_text)
        FLAGS.register_key_flag_for_module(module, FLAGS[name])


# Every script logs progress: every call of `define_flags` adds this flag,
# and it is defined here for the scripts that define no shared flag.
_ALWAYS_DEFINED = ("log_every_seconds",)
define_flags()


_HELP_FLAGS = ("--help", "-help", "-h", "-?", "--helpshort", "--helpfull", "--helpxml")


def run_script(main):
    """`absl.app.run(main)` for the scripts, with their error and log output
    made readable.

    * `InputError` (and a failed write of an output file, see
      `output_write_error`) ends the run with one line "ERROR: <message>" on
      stderr and exit status 1, without a traceback.
    * Each log message is printed once (see `_log_each_message_once`).
    * At the end, each file the run wrote for the user is named, with its
      headline (`report_output`, `log_outputs`).
    * --help exits with status 0 (absl's own exit status for it is 1).
    * Ctrl-C (SIGINT) and SIGTERM stop the run (see `interrupts_caught`) with
      one line; outputs not yet complete are not put in place. The process
      then ends by the signal itself (a shell shows status 128 + its
      number), so that a calling shell loop stops too.

    Args:
      main: the script's main(argv).
    """
    def wrapped(argv):
        _log_each_message_once()
        _silence_deprecation_warnings()
        del _OUTPUTS[:]
        with interrupts_caught():
            try:
                # A signal that came while the script was starting.
                raise_if_interrupted()
                status = main(argv)
                log_outputs()
                return status
            except KeyboardInterrupt:
                signum = interrupted() or signal.SIGINT
                _INTERRUPT["exit_signal"] = signum
                _exit_with_error("interrupted by %s" % signal.Signals(signum).name,
                                 status=128 + signum)
            except SystemExit as e:
                if isinstance(e, InterruptedExit):
                    _INTERRUPT["exit_signal"] = e.code - 128
                raise
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
    if asks_for_help:
        # absl's test flags (--test_tmpdir, --test_random_seed, ...) come with
        # TensorFlow's import; they are no flags of the script.
        for flag in list(FLAGS.flags_by_module_dict().get("absl.testing.absltest", ())):
            if flag.name in FLAGS:
                delattr(FLAGS, flag.name)
    _INTERRUPT["exit_signal"] = None
    try:
        app.run(wrapped)
    except SystemExit as e:
        if asks_for_help and e.code == 1:
            sys.exit(0)
        signum = _INTERRUPT["exit_signal"]
        # Only for a script run as the program (not a test calling this).
        if signum and getattr(main, "__module__", None) == "__main__":
            _end_by_signal(signum)
        raise


def _end_by_signal(signum):
    """Ends the process by `signum` itself, with its default action, once
    the run's cleanup is done (as Python does after a KeyboardInterrupt):
    a shell then sees that the script was interrupted, and a shell loop
    calling it stops too, where an ordinary exit status would let it go on
    to its next command."""
    import logging
    for handler in logging.getLogger().handlers:
        handler.flush()
    _flush_stdout()
    sys.stderr.flush()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _flush_stdout():
    """Writes out what standard output holds, unless it is closed (the
    program started with it closed, or its reader went away: `| head`)."""
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except BrokenPipeError:
        discard_stdout()
    except (OSError, ValueError):
        pass


def discard_stdout():
    """Points standard output at /dev/null, once its reader has gone away
    (a closed pipe): what its buffer still holds would otherwise fail to be
    written again at exit, with a message."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (AttributeError, OSError, ValueError):
        pass


def _exit_with_error(message, status=1):
    """Prints "ERROR: <message>" once, after the log lines so far, and exits
    with `status`."""
    import logging
    for handler in logging.getLogger().handlers:
        handler.flush()
    _flush_stdout()
    sys.stderr.write("ERROR: %s\n" % message)
    sys.stderr.flush()
    sys.exit(status)


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


def limit_memory_fragmentation(threshold_bytes=128 * 1024):
    """Makes large freed tensors go back to the system at once
    (--limit_memory_fragmentation).

    TensorFlow on CPU allocates tensors with malloc. glibc raises its mmap
    threshold each time a large block is freed (up to 32 MiB), after which
    activations of a few MiB come from the heap, where freed blocks fragment
    and stay resident: a BERT-Base training step then peaks about 20% above
    what it actually holds. Fixing the threshold keeps every allocation of at
    least `threshold_bytes` in its own mapping, released when freed. With
    oneDNN on, TensorFlow keeps large tensors in a pool of its own instead;
    TF_ONEDNN_USE_SYSTEM_ALLOCATOR=1 (set here where unset; TensorFlow reads
    it when its CPU allocator is first used) hands them to malloc, so the
    threshold applies there too. The price is speed: every large tensor then
    gets fresh pages, which the kernel zeroes (docs/performance.md measures
    both). Process-wide; call once, early, before the first session
    allocates anything.

    Args:
      threshold_bytes: allocations of at least this size use mmap.

    Returns:
      True if applied (glibc), False where not available.
    """
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        m_mmap_threshold = -3  # From <malloc.h>.
        applied = bool(libc.mallopt(m_mmap_threshold, int(threshold_bytes)))
    except (OSError, AttributeError, TypeError):
        return False
    if applied:
        os.environ.setdefault("TF_ONEDNN_USE_SYSTEM_ALLOCATOR", "1")
    return applied


# ---------------------------------------------------------------------------
# The files a run wrote for its user, named once at its end.

_OUTPUTS = []  # (path, what), in the order written.


def report_output(path, what=""):
    """Adds `path` to the files this run wrote for the user, with `what`
    (its headline: "eval_accuracy = 0.87", "408 predictions", ...);
    `log_outputs` names them. Writing the same path again replaces the
    entry."""
    _OUTPUTS[:] = [entry for entry in _OUTPUTS if entry[0] != path]
    _OUTPUTS.append((path, what))


def log_outputs():
    """Logs "Wrote <path>: <what>" for each file of `report_output` (the
    scripts' last lines, see `run_script`)."""
    for path, what in _OUTPUTS:
        log_info("Wrote %s%s", path, ": " + what if what else "")


# ---------------------------------------------------------------------------
# Output locations: checked before any work, and failed writes in one line.

# errno values, and the texts of TensorFlow's errors, of a write that failed
# for lack of room: a full disk, a full quota, a file size limit.
_NO_ROOM_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
_NO_ROOM_TEXTS = ("No space left on device", "Disk quota exceeded", "File too large")


# flag name -> path, for each output location checked by this run.
_OUTPUT_LOCATIONS = {}


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
    if is_remote(path):
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
    if isdir(path):
        raise InputError("--%s %s is a directory: give the path of a file to write"
                         % (flag_name, path))
    directory = os.path.dirname(path) or "."
    if not create_dir and not is_remote(path) and not os.path.isdir(directory):
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
    elif _is_tensorflow_error(error):
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
# Input files and flags.

def require_flags(*names, data_files=()):
    """Raises InputError naming, in one line, every listed flag that is
    unset.

    Args:
      *names: the required flags.
      data_files: flags of data files (train_file, ...) that the script may
        find in --data_dir instead: the unset ones, where --data_dir is unset
        too, are named first, as "--data_dir (or --train_file and
        --dev_file)".
    """
    missing = ["--" + n for n in names if getattr(FLAGS, n) in (None, "")]
    files = ["--" + n for n in data_files if getattr(FLAGS, n) in (None, "")]
    if files and FLAGS.data_dir in (None, ""):
        listed = files[0] if len(files) == 1 else "%s and %s" % (", ".join(files[:-1]),
                                                                files[-1])
        missing.insert(0, "--data_dir (or %s)" % listed)
    if missing:
        raise InputError("Missing required flag(s): %s" % ", ".join(missing))


def require_file(flag_name, path):
    """Raises InputError if `path` (the value of --flag_name) does not exist."""
    if not path:
        raise InputError("--%s is required" % flag_name)
    if not exists(path):
        raise InputError("--%s: file not found: %s" % (flag_name, path))


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


# ---------------------------------------------------------------------------
# Files: local paths through Python, the others (a scheme with "://")
# through tf.io.gfile.

def is_remote(path):
    """Whether `path` names a file system of TensorFlow's (gs://, ram://,
    ...) rather than a local path."""
    return "://" in str(path)


def gfile():
    """tf.io.gfile, imported (quietly, see quiet_tf.py) on first use."""
    import quiet_tf  # noqa: F401
    import tensorflow.compat.v1 as tf
    return tf.io.gfile


def exists(path):
    """Whether the file or directory `path` exists."""
    return gfile().exists(path) if is_remote(path) else os.path.exists(path)


def isdir(path):
    """Whether `path` is a directory."""
    return gfile().isdir(path) if is_remote(path) else os.path.isdir(path)


def file_size(path):
    """The size of the file `path`, in bytes."""
    return gfile().stat(path).length if is_remote(path) else os.path.getsize(path)


def open_file(path, mode="r"):
    """Opens `path` for reading or writing ("r", "w", "rb", "wb", ...); text
    modes use UTF-8."""
    if is_remote(path):
        return gfile().GFile(path, mode)
    return open(path, mode, **({} if "b" in mode else {"encoding": "utf-8"}))


def read_file_bytes(path):
    """The content of the file `path`, as bytes."""
    with open_file(path, "rb") as f:
        return f.read()


def read_text(path, flag_name):
    """The text of the UTF-8 file `path` (named by --flag_name), without a
    leading byte order mark (which is no part of the data).

    Raises:
      InputError: the file is missing, or not UTF-8 (naming the line).
    """
    require_file(flag_name, path)
    try:
        text = read_file_bytes(path).decode("utf-8")
    except UnicodeDecodeError:
        raise non_utf8_error(flag_name, path)
    return text[1:] if text.startswith("\ufeff") else text


def read_json(path, flag_name=None):
    """The parsed content of the JSON file `path`.

    Args:
      path: the file.
      flag_name: the flag that named it, for messages (None: a file found
        by the script).

    Raises:
      InputError: the file is not UTF-8 (naming the line) or not JSON.
    """
    try:
        return json.loads(read_file_bytes(path).decode("utf-8"))
    except UnicodeDecodeError:
        raise non_utf8_error(flag_name, path)
    except ValueError as e:
        where = "--%s %s" % (flag_name, path) if flag_name else path
        raise InputError("%s is not a JSON file: %s" % (where, e))


def read_json_object(path, flag_name=None):
    """`read_json` of a file that must hold one JSON object (a dict)."""
    value = read_json(path, flag_name)
    if not isinstance(value, dict):
        where = "--%s %s" % (flag_name, path) if flag_name else path
        raise InputError("%s must hold a JSON object" % where)
    return value


def json_lines(text, path):
    """(line number, object) for each non-blank line of JSON Lines `text`,
    the content of the file `path`.

    Raises:
      InputError: naming the file and line of a line that is not JSON or
        not one JSON object.
    """
    # Not splitlines(): JSON strings may hold U+2028 and other characters it
    # would split at.
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as e:
            raise InputError("%s, line %d: not valid JSON: %s" % (path, number, e))
        if not isinstance(value, dict):
            raise InputError("%s, line %d: expected one JSON object ({...}) per line, found %s"
                             % (path, number, type(value).__name__))
        yield number, value


def expand_file_patterns(flag_name, patterns):
    """Comma-separated files or globs -> the files they name, each glob's
    matches sorted (directories left out).

    Raises:
      InputError: a pattern matches no file (names the flag and the
        pattern), or there is no pattern.
    """
    files = []
    for pattern in patterns.split(","):
        pattern = pattern.strip()
        if not pattern:
            continue
        if is_remote(pattern):
            matched = [p for p in gfile().glob(pattern) if not gfile().isdir(p)]
        else:
            matched = [p for p in glob.glob(pattern) if os.path.isfile(p)]
        if not matched:
            raise InputError("--%s: no file matches %s" % (flag_name, pattern))
        files.extend(sorted(matched))
    if not files:
        raise InputError("--%s is required" % flag_name)
    return files


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
    with open_file(path, "rb") as f:
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
# Logging and progress of long loops.

def format_duration(seconds):
    """"42 s", "3 min 05 s", "2 h 07 min"."""
    seconds = int(round(max(0.0, seconds)))
    if seconds < 60:
        return "%d s" % seconds
    if seconds < 3600:
        return "%d min %02d s" % divmod(seconds, 60)
    return "%d h %02d min" % (seconds // 3600, seconds % 3600 // 60)


def _logger():
    """Where this module's messages go: tf.logging once TensorFlow is loaded
    (with the scripts' other messages), else absl's logging (scripts that
    never load TensorFlow set its verbosity)."""
    if "tensorflow" in sys.modules:
        import tensorflow.compat.v1 as tf
        return tf.logging
    return absl_logging


def log_info(message, *args):
    """Logs at INFO level (see `_logger`)."""
    _logger().info(message, *args)


def log_warning(message, *args):
    """Logs at WARNING level (see `_logger`)."""
    _logger().warning(message, *args)


def log_every_seconds():
    """--log_every_seconds (its default, 30, where the flags are not parsed,
    as in a library call)."""
    return FLAGS["log_every_seconds"].value


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
            log_info("%s", self._message(now))

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
        log_info("%s", self._message(time.time(), final=True))


# ---------------------------------------------------------------------------
# BERT's input packing.

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


Span = collections.namedtuple("Span", ["start", "length"])


def window_spans(num_pieces, max_pieces, doc_stride, max_windows=0):
    """The windows that read a text of `num_pieces` pieces, at most
    `max_pieces` at a time (the reading of long texts in run_classifier,
    run_ner and run_squad).

    Each window starts `doc_stride` pieces after the previous one (or right
    after its end, when the stride is longer than the window), and the last
    one reaches the text's end. Hand-worked: 10 pieces, 4 per window, stride
    2 give (0, 4), (2, 4), (4, 4), (6, 4).

    Args:
      num_pieces: length of the text (0: no windows).
      max_pieces: the most pieces a window holds (>= 1).
      doc_stride: pieces from one window's start to the next's (>= 1).
      max_windows: keep only the first this many windows (0: all).

    Returns:
      list of Span(start, length).
    """
    spans = []
    start = 0
    while start < num_pieces and not (max_windows and len(spans) >= max_windows):
        length = min(max_pieces, num_pieces - start)
        spans.append(Span(start, length))
        if start + length >= num_pieces:
            break
        start += min(length, doc_stride)
    return spans


# ---------------------------------------------------------------------------
# Output files that appear complete or not at all.

class AtomicFile:
    """An output file written under a temporary name next to its final one
    and renamed into place when complete, so that a half-written file never
    looks complete (the one mechanism behind every output file of the
    scripts; local and gs:// paths).

        target = AtomicFile(path)
        writer = open(target.tmp_path, "wb")   # or any writer of a path
        ...                                    # on failure: target.abort()
        writer.close()
        target.commit()

    Args:
      path: the final path.
    """

    def __init__(self, path):
        self.path = path
        self.tmp_path = "%s.tmp-%d" % (path, os.getpid())

    def commit(self):
        """Renames the temporary file to `path` (replacing any file there);
        raises KeyboardInterrupt instead if the run was interrupted."""
        raise_if_interrupted()
        if is_remote(self.path):
            gfile().rename(self.tmp_path, self.path, overwrite=True)
        else:
            os.replace(self.tmp_path, self.path)

    def abort(self):
        """Removes the temporary file, if there is one."""
        if exists(self.tmp_path):
            if is_remote(self.tmp_path):
                gfile().remove(self.tmp_path)
            else:
                os.remove(self.tmp_path)


class AtomicWriter:
    """Base of the scripts' record and feature writers: `self._writer`
    (anything with write and close) writes the temporary file of an
    `AtomicFile`; `close` puts the complete file in place, `abort` removes
    the unfinished one.

    Args:
      path: the final path.
      open_writer: function (temporary path) -> the writer.
    """

    def __init__(self, path, open_writer):
        self._target = AtomicFile(path)
        self._writer = open_writer(self._target.tmp_path)

    def close(self):
        """Finishes the file and renames it to its final path."""
        self._writer.close()
        self._target.commit()

    def abort(self):
        """Closes and removes the unfinished file."""
        self._writer.close()
        self._target.abort()


@contextlib.contextmanager
def atomic_path(path):
    """Yields a temporary path next to `path` for the caller to write; on
    success it is renamed to `path`, on failure removed (see `AtomicFile`).
    A write that fails for lack of room becomes an InputError naming `path`
    (see `output_write_error`)."""
    target = AtomicFile(path)
    try:
        yield target.tmp_path
        target.commit()
    except BaseException as e:
        target.abort()
        message = output_write_error(e, path) if isinstance(e, Exception) else None
        if message:
            raise InputError(message) from e
        raise


@contextlib.contextmanager
def atomic_output(path, mode="w"):
    """Opens `path` for writing through `atomic_path`.

    Yields:
      A writable file object (a tf.io.gfile.GFile for remote paths).
    """
    with atomic_path(path) as tmp_path:
        with open_file(tmp_path, mode) as writer:
            yield writer


# ---------------------------------------------------------------------------
# Interruption: Ctrl-C (SIGINT) and SIGTERM (preemptible machines, job
# schedulers).

INTERRUPT_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class InterruptedExit(SystemExit):
    """The end of a run that a SIGINT or SIGTERM stopped after doing what it
    must (e.g. saving a checkpoint); the exit status is 128 + the signal's
    number, and a script run from the shell ends by the signal itself
    (see `run_script`)."""

# signal: the first interrupting signal's number, or None. held: while > 0,
# a first signal is only recorded (see `interrupts_held`).
# early: the handlers of `hold_interrupts_until_run` are in place (and
# before_early: the handlers they replaced). caught: how many
# `interrupts_caught` blocks are open.
_INTERRUPT = {"signal": None, "held": 0, "on_hold": None, "exit_signal": None,
              "early": False, "before_early": {}, "caught": 0}


def hold_interrupts_until_run():
    """For a script run as the program, from its first import on (quiet_tf
    calls this before it imports TensorFlow): a SIGINT or SIGTERM that comes
    before `run_script` installs its handlers is recorded, and `run_script`
    ends the run with it before `main` does any work. Without this, a SIGINT
    in those seconds would be lost where the process started ignoring it (a
    background job of a shell) and raise in the middle of an import
    elsewhere. A second signal ends the process at once. Main thread only;
    once per process, and nothing once the run has begun (a module that
    imports quiet_tf late, in the middle of the work)."""
    if (_INTERRUPT["early"] or _INTERRUPT["caught"]
            or threading.current_thread() is not threading.main_thread()):
        return
    _INTERRUPT["before_early"] = {signum: signal.signal(signum, _on_interrupt)
                                  for signum in INTERRUPT_SIGNALS}
    _INTERRUPT["held"] += 1
    _INTERRUPT["early"] = True


def _on_interrupt(signum, frame):
    first = _INTERRUPT["signal"] is None
    _INTERRUPT["signal"] = _INTERRUPT["signal"] or signum
    if first and _INTERRUPT["held"]:
        # A second signal ends the process at once, even in the middle of a
        # long TensorFlow call (Python handlers run only between its calls).
        for other in INTERRUPT_SIGNALS:
            signal.signal(other, signal.SIG_DFL)
        if _INTERRUPT["on_hold"]:
            _INTERRUPT["on_hold"](signum)
        return
    raise KeyboardInterrupt


@contextlib.contextmanager
def interrupts_caught():
    """Inside, SIGINT and SIGTERM raise KeyboardInterrupt (SIGTERM would
    otherwise end the process on the spot, leaving temporary files; a SIGINT
    that the parent process set to be ignored, as shells do for background
    jobs, counts too) and the signal is remembered (`interrupted`). The
    previous handlers come back on leaving. Outside the main thread, where
    Python cannot set signal handlers, nothing changes."""
    previous = {}
    # A signal recorded since the script's first import stays recorded.
    early = _INTERRUPT["early"]
    _INTERRUPT.update(signal=_INTERRUPT["signal"] if early else None, held=0, on_hold=None,
                      early=False)
    if threading.current_thread() is threading.main_thread():
        for signum in INTERRUPT_SIGNALS:
            previous[signum] = signal.signal(signum, _on_interrupt)
        if early:  # On leaving, the handlers from before the early hold.
            previous.update(_INTERRUPT["before_early"])
    _INTERRUPT["caught"] += 1
    try:
        yield
    finally:
        _INTERRUPT["caught"] -= 1
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _INTERRUPT.update(signal=None, held=0, on_hold=None)


def interrupted():
    """The number of the SIGINT or SIGTERM this run got, or None."""
    return _INTERRUPT["signal"]


def raise_if_interrupted():
    """Raises KeyboardInterrupt if the run got a SIGINT or SIGTERM.

    Called before an output is put in place: the KeyboardInterrupt that the
    signal raised can be lost, since Python prints and drops an exception
    raised while it runs a finalizer (a `__del__` method, a weakref or
    multiprocessing callback), and the work would then go on to the end.
    Inside `interrupts_held`, the block's end raises instead; other threads
    (the lock's heartbeat) never raise: the signal concerns the run's own
    thread.
    """
    if (_INTERRUPT["signal"] is not None and not _INTERRUPT["held"]
            and threading.current_thread() is threading.main_thread()):
        raise KeyboardInterrupt


@contextlib.contextmanager
def interrupts_held(on_hold=None, raise_after=True):
    """Inside, a first SIGINT or SIGTERM is recorded (and `on_hold(signum)`
    called, e.g. to log what will happen) instead of raising; a second one
    raises KeyboardInterrupt at once. The handlers of `interrupts_caught`
    are installed for the time of the block if they are not (main thread
    only).

    Args:
      on_hold: function(signum), called on the first signal.
      raise_after: on leaving the block normally, raise KeyboardInterrupt if
        a signal came (for steps that must finish whole, such as putting
        several files in place); False: the caller looks at `interrupted()`.
    """
    installed = {}
    if threading.current_thread() is threading.main_thread():
        for signum in INTERRUPT_SIGNALS:
            if signal.getsignal(signum) is not _on_interrupt:
                installed[signum] = signal.signal(signum, _on_interrupt)
    _INTERRUPT["held"] += 1
    previous_on_hold, _INTERRUPT["on_hold"] = _INTERRUPT["on_hold"], on_hold
    try:
        yield
    finally:
        _INTERRUPT["held"] -= 1
        _INTERRUPT["on_hold"] = previous_on_hold
        got = _INTERRUPT["signal"]
        if installed:
            # Not under `interrupts_caught` (a library call, a test): the
            # signal concerns this block only.
            _INTERRUPT["signal"] = None
            for signum, handler in installed.items():
                signal.signal(signum, handler)
    if raise_after and got is not None:
        raise KeyboardInterrupt


# ---------------------------------------------------------------------------
# One training run per output directory.
#
# A training run holds <output_dir>/training.lock (JSON: host, pid, process
# start, start time, command, a random token, the time of its last refresh)
# from its first write to its end. Two runs training into one directory
# would overwrite each other's checkpoints and records; evaluation and
# prediction runs only read the checkpoints and take no lock.

LOCK_FILE = "training.lock"
# A held lock is rewritten this often (its heartbeat): a lock of another
# host counts as left behind by a dead run once it has gone unrefreshed for
# LOCK_STALE_SECONDS. (The hosts' clocks are compared: they must agree to
# well within that.)
LOCK_HEARTBEAT_SECONDS = 60
LOCK_STALE_SECONDS = 5 * LOCK_HEARTBEAT_SECONDS

_HELD_LOCKS = {}  # lock path -> _HeldLock, the locks this process holds


class _HeldLock:
    """A lock this process holds, with the thread that refreshes it."""

    def __init__(self, path, content):
        self.path = path
        self.content = content
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._heartbeat, daemon=True,
                                       name="training-lock-heartbeat")

    def _heartbeat(self):
        while not self.stop.wait(LOCK_HEARTBEAT_SECONDS):
            try:
                holder = _read_lock(self.path)[1]
                if not holder or holder.get("token") != self.content["token"]:
                    log_warning("%s no longer names this run (another run took it over); "
                                "it is not refreshed any more", self.path)
                    return
                self.content["refreshed"] = time.time()
                with atomic_output(self.path) as f:
                    f.write(json.dumps(self.content, indent=2) + "\n")
            except Exception as e:  # A failed refresh is retried at the next beat.
                log_warning("Could not refresh %s: %s", self.path, e)


def _process_start(pid):
    """The start time of process `pid` in clock ticks since boot (Linux
    /proc), which tells a live process from a later one that got the same
    pid; None where unknown."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            # The command name (field 2) may hold spaces: count from its ")".
            return int(f.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _pid_alive(pid):
    """Whether a process with the id `pid` exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # Another user's process.
        return True
    return True


def _boot_id():
    """The id of this boot of the machine's kernel (Linux), which tells two
    machines, or two boots of one, that share a host name; None where
    unknown."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip() or None
    except OSError:
        return None


def _pid_namespace():
    """The inode of this process's PID namespace (Linux): containers that
    share a host name (--network=host, the same --hostname) but not their
    process ids differ in it; None where unknown."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


def _same_host(holder):
    """Whether the lock content `holder` was written where this process can
    see the holder's process by its pid: the same host name, boot and PID
    namespace. A lock without the last two (written by an earlier version)
    counts as of another host."""
    return (holder.get("host") == socket.gethostname()
            and holder.get("boot_id") == _boot_id()
            and holder.get("pid_namespace") == _pid_namespace())


def _read_lock(path):
    """(raw bytes, parsed content) of the lock file `path`: (None, None) if
    there is none, (bytes, {}) if it is not a lock's JSON object."""
    try:
        raw = read_file_bytes(path)
    except Exception:  # Missing (OSError locally, NotFoundError remote) or unreadable.
        if not exists(path):
            return None, None
        raise
    try:
        content = json.loads(raw.decode("utf-8"))
    except ValueError:
        return raw, {}
    return raw, content if isinstance(content, dict) else {}


def _lock_is_live(holder):
    """Whether the run named by the lock content `holder` still runs: on
    this host (`_same_host`), its process (same pid and start) exists; on
    another, it refreshed the lock within LOCK_STALE_SECONDS."""
    if _same_host(holder):
        pid = holder.get("pid")
        if pid == os.getpid():
            return any(lock.content["token"] == holder.get("token")
                       for lock in _HELD_LOCKS.values())
        if not isinstance(pid, int) or pid <= 0 or not _pid_alive(pid):
            return False
        start = holder.get("process_start")
        return start is None or _process_start(pid) in (None, start)
    refreshed = holder.get("refreshed")
    return (isinstance(refreshed, (int, float))
            and time.time() - refreshed < LOCK_STALE_SECONDS)


def _describe_holder(holder):
    return "pid %s on host %s, started %s" % (holder.get("pid"), holder.get("host"),
                                             holder.get("started_at"))


def _create_exclusively(path, data):
    """Creates the file `path` with `data` (bytes) unless it exists, so that
    of two runs racing for it at most one succeeds (see lock_output_dir for
    remote stores). Returns whether this call created it."""
    # Not named `path` + suffix: TensorFlow's ram:// file system counts any
    # name that starts with `path` as `path` existing.
    tmp_path = os.path.join(os.path.dirname(path),
                            ".%s.tmp-%d" % (os.path.basename(path), os.getpid()))
    with open_file(tmp_path, "wb") as f:
        f.write(data)
    try:
        if is_remote(path):
            try:
                gfile().rename(tmp_path, path, overwrite=False)
                return True
            except Exception:  # AlreadyExistsError
                if exists(path):
                    return False
                raise
        try:
            # A hard link appears complete, and fails if `path` exists.
            os.link(tmp_path, path)
            return True
        except FileExistsError:
            return False
        except OSError:  # No hard links on this file system: an exclusive create.
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            return True
    finally:
        _remove(tmp_path)


def _remove(path):
    """Removes the file `path` if it exists."""
    if is_remote(path):
        if gfile().exists(path):
            gfile().remove(path)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def is_training_chief():
    """Whether this process is the one of its training cluster (TF_CONFIG)
    that holds the output directory's lock: the "chief" task, else worker
    0; true without a cluster. All workers of a multi-worker run train into
    the same directory."""
    try:
        config = json.loads(os.environ.get("TF_CONFIG") or "{}")
        cluster, task = config.get("cluster") or {}, config.get("task") or {}
    except (ValueError, AttributeError):
        return True
    if not cluster or not task:
        return True
    if "chief" in cluster:
        return task.get("type") == "chief"
    return task.get("type") == "worker" and int(task.get("index", 0)) == 0


def lock_output_dir(output_dir, flag_name="output_dir"):
    """Makes this run the one training run of `output_dir`: creates the
    directory and its lock file, refreshed from a daemon thread until
    `release_output_locks` (which `releases_output_lock` calls when the
    script's main ends, however it ends). Call it after the input checks,
    before the first write.

    A lock left by a run that no longer runs (see `_lock_is_live`) is taken
    over, with a log line naming that run. Locally the lock is created with
    a hard link (or an exclusive create), so of two racing runs exactly one
    wins. Through tf.io.gfile (gs://, ram://, ...) it is a rename that
    refuses to overwrite, which TensorFlow implements as a check followed by
    a copy: on object stores two runs started within the same second can
    both pass it; reading the lock back afterwards narrows that window to
    the time between the two runs' writes.

    Args:
      output_dir: the run's --output_dir.
      flag_name: its flag, for the message.

    Raises:
      InputError: another training run holds the directory; the one line
        names its host, pid and start time.
    """
    if not is_training_chief():
        return
    path = os.path.join(output_dir, LOCK_FILE)
    if path in _HELD_LOCKS:
        return
    now = time.time()
    content = {
        "host": socket.gethostname(), "boot_id": _boot_id(),
        "pid_namespace": _pid_namespace(), "pid": os.getpid(),
        "process_start": _process_start(os.getpid()), "started": now,
        "started_at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(now)),
        "refreshed": now, "command": " ".join(sys.argv), "token": uuid.uuid4().hex}
    data = (json.dumps(content, indent=2) + "\n").encode("utf-8")
    in_use = ("--%s %s is in use by another training run (%s): wait for it to end or "
              "choose another --%s (evaluation and prediction runs may share it)")
    if is_remote(output_dir):
        gfile().makedirs(output_dir)
    else:
        os.makedirs(output_dir, exist_ok=True)
    for _ in range(3):
        raw, holder = _read_lock(path)
        if holder is not None:
            if holder and _lock_is_live(holder):
                raise InputError(in_use % (flag_name, output_dir, _describe_holder(holder),
                                           flag_name))
            if holder:
                log_warning("Taking over --%s %s from a training run that has ended "
                            "without releasing it (%s)", flag_name, output_dir,
                            _describe_holder(holder))
            else:
                log_warning("Taking over --%s %s: its lock %s is unreadable",
                            flag_name, output_dir, path)
            # Removed only if no other run has replaced it meanwhile.
            if _read_lock(path)[0] == raw:
                _remove(path)
        if _create_exclusively(path, data):
            break
    else:
        raise InputError("--%s %s: could not take its lock %s, other runs keep taking it"
                         % (flag_name, output_dir, path))
    holder = _read_lock(path)[1]
    if not holder or holder.get("token") != content["token"]:
        raise InputError(in_use % (flag_name, output_dir,
                                   _describe_holder(holder or {}), flag_name))
    lock = _HELD_LOCKS[path] = _HeldLock(path, content)
    lock.thread.start()


def release_output_locks():
    """Stops refreshing the locks this process holds and removes them (each
    only while it still names this run)."""
    while _HELD_LOCKS:
        path, lock = _HELD_LOCKS.popitem()
        if lock.content["pid"] != os.getpid():
            continue  # A forked child's copy: the lock is its parent's.
        lock.stop.set()
        # A refresh under way would put the file back after its removal.
        if lock.thread is not threading.current_thread():
            lock.thread.join(timeout=60)
        try:
            holder = _read_lock(path)[1]
            if holder and holder.get("token") == lock.content["token"]:
                _remove(path)
        except Exception as e:  # A lock left behind is taken over by the next run.
            log_warning("Could not remove %s: %s", path, e)


# Also for ends that pass by `releases_output_lock` (sys.exit in a thread, ...).
atexit.register(release_output_locks)


def releases_output_lock(main):
    """Decorator of a training script's main: the output directory lock its
    run took (`lock_output_dir`) is released when main returns or raises
    (errors, KeyboardInterrupt, the SIGTERM handling's exception)."""
    @functools.wraps(main)
    def wrapped(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        finally:
            release_output_locks()
    return wrapped
