"""Running a script: `run_script` is `absl.app.run` with readable errors and
logs. Bad input (an InputError) and a write that failed for lack of room end
the run with one line; each log message is printed once; the run's outputs
are named at its end; a SIGINT or SIGTERM stops it with one line and ends the
process by that signal. Also the process-wide memory setting of
--limit_memory_fragmentation.

In: a script's main(argv). Out: its exit status. Needs no TensorFlow, so
that the scripts that do without it (create_pretraining_data.py,
create_vocab.py) start without TensorFlow's import (seconds, and hundreds
of MB).
"""

import ctypes
import ctypes.util
import os
import signal
import sys

from absl import app, flags

from scriptkit import file_io
from scriptkit import interrupts
from scriptkit import logs
from scriptkit import shared_flags  # noqa: F401  (defines --log_every_seconds, which run_script reads)
from scriptkit.errors import InputError

FLAGS = flags.FLAGS


_HELP_FLAGS = ("--help", "-help", "-h", "-?", "--helpshort", "--helpfull", "--helpxml")


def run_script(main):
    """`absl.app.run(main)` for the scripts, with their error and log output
    made readable.

    * `errors.InputError` (and a failed write of an output file, see
      `file_io.output_write_error`) ends the run with one line "ERROR: <message>" on
      stderr and exit status 1, without a traceback.
    * Each log message is printed once (see `_log_each_message_once`).
    * At the end, each file the run wrote for the user is named, with its
      headline (`file_io.report_output`, `file_io.log_outputs`).
    * --help exits with status 0 (absl's own exit status for it is 1).
    * Ctrl-C (SIGINT) and SIGTERM stop the run (see `interrupts.interrupts_caught`) with
      one line; outputs not yet complete are not put in place. The process
      then ends by the signal itself (a shell shows status 128 + its
      number), so that a calling shell loop stops too.

    Args:
      main: the script's main(argv).
    """
    def wrapped(argv):
        # The log's rhythm, as absl's own logging flags set its verbosity.
        logs.set_log_every_seconds(FLAGS.log_every_seconds)
        _log_each_message_once()
        _silence_deprecation_warnings()
        file_io.forget_outputs()
        with interrupts.interrupts_caught():
            try:
                # A signal that came while the script was starting.
                interrupts.raise_if_interrupted()
                status = main(argv)
                file_io.log_outputs()
                return status
            except KeyboardInterrupt:
                signum = interrupts.interrupted() or signal.SIGINT
                interrupts.set_exit_signal(signum)
                _exit_with_error("interrupted by %s" % signal.Signals(signum).name,
                                 status=128 + signum)
            except SystemExit as e:
                if isinstance(e, interrupts.InterruptedExit):
                    interrupts.set_exit_signal(e.code - 128)
                raise
            except InputError as e:
                _exit_with_error(str(e))
            except Exception as e:  # Reported in one line only if it is a failed write.
                message = file_io.output_write_error(e)
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
    interrupts.set_exit_signal(None)
    try:
        app.run(wrapped)
    except SystemExit as e:
        if asks_for_help and e.code == 1:
            sys.exit(0)
        signum = interrupts.exit_signal()
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
