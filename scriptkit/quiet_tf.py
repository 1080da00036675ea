"""Imports TensorFlow for the scripts: on x86-64 Linux with oneDNN's CPU
kernels, and without its start-up noise on machines without a GPU.

oneDNN. TensorFlow's Linux x86-64 wheels carry two CPU back-ends for
matmuls and a few other ops: Eigen, and Intel's oneDNN (with fusions such as
matmul + bias + activation). TensorFlow turns oneDNN on by itself only on
CPUs with AVX512_VNNI, AVX512_BF16 or AMX; on the others (AVX2-only CPUs)
it uses Eigen, with which a BERT training step takes about a quarter longer
and more memory (docs/performance.md). The choice is read once, when
TensorFlow loads, from TF_ENABLE_ONEDNN_OPTS, so this module sets that
variable to 1 before the import where it is unset, on x86-64 Linux only
(where it was measured). Set TF_ENABLE_ONEDNN_OPTS=0 to keep Eigen. Results
differ from Eigen's by float32 rounding, as they do between machines.

Start-up noise.

Importing TensorFlow makes its C++ side print lines that say nothing about
the run: on TensorFlow 2.15 three error-level "Unable to register
cuDNN/cuFFT/cuBLAS factory" lines (a known harmless double registration)
and "Could not find TensorRT"; on every version "Could not find cuda
drivers" and a note on CPU instructions; on TensorFlow 2.16+ the first look
for devices logs an error-level "failed call to cuInit" where there is no
GPU. TF_CPP_MIN_LOG_LEVEL cannot
silence them for the import alone (TensorFlow reads it once, at its first
log line, and keeps it for the whole process), and a level high enough to
hide error-level lines would hide real errors too.

So the import runs with the process's standard error (file descriptor 2)
sent to a temporary file. Afterwards every line that is not one of the known
start-up messages is written back to standard error, in order: anything
else TensorFlow prints while importing is still seen. Lines printed after
the import are not touched.

The first XLA compilation of a process prints a few more lines, one of them
error-level on TensorFlow 2.15 ("SetPriority unimplemented"), whatever
TF_CPP_MIN_LOG_LEVEL says. The scripts compile GELU, LayerNorm and dropout
with XLA (bert_ops.py), so before their first session they call
`start_xla_quietly` (through training.choose_fused_ops), which compiles a
one-element function with the same filtering.

Keras. TensorFlow's import loads Keras's optimizers (and with them most
of Keras) for registrations that only Keras's own models need; none of the
scripts uses Keras, so the import here skips that step
(`_without_keras_preload`), and Keras loads when something first uses it.

Interruptions. A script run as the program has its SIGINT and SIGTERM
caught from this module's import on (`_hold_early_interrupts`): a Ctrl-C
or a scheduler's SIGTERM while TensorFlow imports ends the run before it
does any work, in one line, where it would otherwise be lost or raise in
the middle of the import.

The scripts import this module before TensorFlow (`from scriptkit import quiet_tf`); it
does its work once, when first imported, and cannot change anything once
TensorFlow has been imported. Set BERT_TF_IMPORT_LOG=1 to see
TensorFlow's start-up lines unfiltered.
"""

import contextlib
import functools
import glob
import os
import platform
import re
import sys
import tempfile

from scriptkit import interrupts

# Whether this machine has an NVIDIA GPU driver at all (its device nodes).
# Only where it has none is a failed CUDA initialisation noise; where it has
# one, that error is real and stays visible.
_HAS_NVIDIA_DEVICE = bool(glob.glob("/dev/nvidia[0-9]*")) or os.path.exists(
    "/proc/driver/nvidia")

# The start-up lines left out (matched anywhere in a line).
_NOISE = re.compile(
    r"Unable to register (cuDNN|cuFFT|cuBLAS) factory"
    r"|Could not find TensorRT"
    r"|Could not find cuda drivers on your machine"
    r"|cpu_feature_guard\.cc"
    r"|^To enable the following instructions: .*rebuild TensorFlow"
    r"|oneDNN custom operations are on"
    r"|All log messages before absl::InitializeLog\(\) is called are written to STDERR")
_NO_GPU_NOISE = re.compile(r"failed call to cuInit")


def is_startup_noise(line):
    """Whether `line` (str) is one of the start-up messages left out."""
    if _NO_GPU_NOISE.search(line):
        return not _HAS_NVIDIA_DEVICE
    return _NOISE.search(line) is not None


def use_onednn_by_default(environ=None, system=None, machine=None):
    """Sets TF_ENABLE_ONEDNN_OPTS=1 in `environ` (default os.environ) where it
    is unset and the machine is x86-64 Linux; returns the value in effect
    (None where it stays unset)."""
    environ = os.environ if environ is None else environ
    system = sys.platform if system is None else system
    machine = platform.machine() if machine is None else machine
    if ("TF_ENABLE_ONEDNN_OPTS" not in environ and system.startswith("linux")
            and machine.lower() in ("x86_64", "amd64")):
        environ["TF_ENABLE_ONEDNN_OPTS"] = "1"
    return environ.get("TF_ENABLE_ONEDNN_OPTS")


@contextlib.contextmanager
def _stderr_without(is_noise):
    """Runs the body with file descriptor 2 sent to a temporary file, then
    writes back to standard error, in order, every captured line for which
    `is_noise(line)` is false. Where descriptor 2 is unusable, the body runs
    unfiltered."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # No usable file descriptor 2.
        yield
        return
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            kept = [line for line in captured.read().decode("utf-8", "replace")
                    .splitlines(keepends=True) if not is_noise(line)]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()


# What TensorFlow's own __init__ imports of Keras "so that load-time
# registrations happen" (Keras 3's package, or tf_keras where
# TF_USE_LEGACY_KERAS is set); it ignores an ImportError there.
_KERAS_PRELOADS = ("keras.src.optimizers", "tf_keras.src.optimizers")


@contextlib.contextmanager
def _without_keras_preload():
    """Runs the body (the import of TensorFlow) with TensorFlow's eager
    import of Keras turned into an ImportError, which TensorFlow passes
    over. Keras is then imported where it is first used (`tf.keras`, or
    `import keras`), whole, as before: nothing is lost, but a process that
    never uses Keras, as none of the scripts does, does not load it: about
    26 MiB less resident memory and 0.3 CPU seconds less for the import on
    TensorFlow 2.15 (whose Estimator loads Keras itself later), 74 MiB and
    0.6 s on 2.21 (docs/performance.md)."""
    blocked = [name for name in _KERAS_PRELOADS if name not in sys.modules]
    for name in blocked:
        # None in sys.modules makes `import name` raise ImportError at once.
        sys.modules[name] = None
    try:
        yield
    finally:
        for name in blocked:
            if sys.modules.get(name, "") is None:
                del sys.modules[name]


def _import_quietly():
    if "tensorflow" in sys.modules:
        return
    use_onednn_by_default()
    if os.environ.get("BERT_TF_IMPORT_LOG") == "1":
        with _without_keras_preload():
            import tensorflow  # noqa: F401
        return
    with _stderr_without(is_startup_noise), _without_keras_preload():
        import tensorflow
        if not _HAS_NVIDIA_DEVICE:
            # The first look for devices tries to start CUDA, which on
            # TensorFlow 2.16+ logs an error-level "failed call to
            # cuInit" without a GPU: done here, that line is caught.
            tensorflow.config.list_physical_devices("GPU")


# What XLA's CPU runtime prints when a process first compiles something
# (TensorFlow 2.15 prints the last two even with TF_CPP_MIN_LOG_LEVEL=2).
_XLA_START_NOISE = re.compile(
    r"XLA service 0x[0-9a-f]+ initialized for platform Host"
    r"|StreamExecutor (device \(0\)|\[0\]): Host"
    r"|MLIR V1 optimization pass is not enabled"
    r"|disabling MLIR crash reproducer"
    r"|All log messages before absl::InitializeLog\(\) is called"
    r"|Compiled cluster using XLA!"
    r"|SetPriority unimplemented for this stream")


@functools.lru_cache(maxsize=None)
def start_xla_quietly():
    """Compiles and runs a one-element XLA function, with XLA's start-up
    lines left out of standard error (the scripts' models compile their GELU,
    LayerNorm and dropout with XLA, see bert_ops.py; those lines would
    otherwise come at the first training step, one of them error-level).
    Once per process: later calls return the first call's answer.

    It runs in a session with TensorFlow's default configuration. The first
    session of a process fixes the size of TensorFlow's process-wide thread
    pools, so call this only where later sessions use the default thread
    counts too, as the scripts do.

    Returns:
      True if XLA compiled and ran the function, False if it failed (the
      error is printed); the caller should then not use XLA.
    """
    import tensorflow as tf

    try:
        if os.environ.get("BERT_TF_IMPORT_LOG") == "1":
            _run_one_xla_function(tf)
        else:
            with _stderr_without(_XLA_START_NOISE.search):
                _run_one_xla_function(tf)
        return True
    except Exception as e:  # pylint: disable=broad-except
        sys.stderr.write("XLA is not usable here (%s: %s); GELU, LayerNorm and dropout run as "
                         "separate ops\n"
                         % (type(e).__name__, str(e).splitlines()[0] if str(e) else ""))
        return False


def _run_one_xla_function(tf):
    with tf.Graph().as_default():
        # A placeholder of unknown length, so that Grappler cannot fold the
        # call away, and a tanh: with less, TensorFlow 2.15 skips the
        # compiler stage that prints the last start-up line.
        x = tf.compat.v1.placeholder(tf.float32, [None])
        function = tf.function(lambda value: value * tf.tanh(value), jit_compile=True,
                               autograph=False)
        with tf.compat.v1.Session() as session:
            session.run(function(x), {x: [1.0]})


def _hold_early_interrupts():
    """For a script of the repository (the folder above this package) run
    as the program: its SIGINT and SIGTERM are caught from now on, before
    TensorFlow's import (seconds), and acted on by script_runner.run_script
    (see interrupts.hold_interrupts_until_run). Not in other programs (a notebook,
    pytest), which keep their own handling, nor in a script's worker
    processes (create_pretraining_data.py's), whose signals their pool
    handles."""
    main = sys.modules.get("__main__")
    main_file = getattr(main, "__file__", None)
    scripts = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    multiprocessing = sys.modules.get("multiprocessing")
    if multiprocessing is not None and multiprocessing.parent_process() is not None:
        return  # A worker (a spawned one's main module is "__mp_main__").
    if (main_file and getattr(main, "__name__", None) == "__main__"
            and os.path.dirname(os.path.abspath(main_file)) == scripts):
        interrupts.hold_interrupts_until_run()


_hold_early_interrupts()
_import_quietly()
