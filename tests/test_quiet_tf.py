"""quiet_tf: TensorFlow's start-up noise is left out at import, and every
other line printed during the import still reaches standard error."""

import os
import subprocess
import sys

import pytest

from scriptkit import quiet_tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Lines TensorFlow 2.15 and 2.21 print at import on a machine without a GPU.
NOISE = [
    "2026-12-01 20:12:48.490638: E external/local_xla/xla/stream_executor/cuda/cuda_dnn.cc:9261]"
    " Unable to register cuDNN factory: Attempting to register factory for plugin cuDNN when "
    "one has already been registered",
    "E external/local_xla/xla/stream_executor/cuda/cuda_fft.cc:607] Unable to register cuFFT "
    "factory: Attempting to register factory for plugin cuFFT when one has already been "
    "registered",
    "E external/local_xla/xla/stream_executor/cuda/cuda_blas.cc:1515] Unable to register "
    "cuBLAS factory: Attempting to register factory for plugin cuBLAS",
    "W tensorflow/compiler/tf2tensorrt/utils/py_utils.cc:38] TF-TRT Warning: Could not find "
    "TensorRT",
    "I0000 00:00:1796155961.762213    3960 cudart_stub.cc:31] Could not find cuda drivers on "
    "your machine, GPU will not be used.",
    "I tensorflow/core/platform/cpu_feature_guard.cc:182] This TensorFlow binary is optimized "
    "to use available CPU instructions in performance-critical operations.",
    "To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow "
    "with the appropriate compiler flags.",
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
]
KEPT = [
    "E tensorflow/core/framework/op_kernel.cc:1830] OP_REQUIRES failed at save_restore_v2_ops",
    "Traceback (most recent call last):",
    "W tensorflow/core/framework/cpu_allocator_impl.cc:83] Allocation exceeds 10% of memory.",
]


@pytest.mark.parametrize("line", NOISE)
def test_startup_noise_is_recognised(line):
    assert quiet_tf.is_startup_noise(line)


@pytest.mark.parametrize("line", KEPT)
def test_other_lines_are_kept(line):
    assert not quiet_tf.is_startup_noise(line)


def _import_fake_tensorflow(tmp_path, env=None):
    """Imports quiet_tf in a fresh process, with a stand-in `tensorflow`
    package that writes noise and real lines to file descriptor 2 (as the C++
    side does) and to sys.stderr, and returns the process's stderr."""
    package = tmp_path / "tensorflow"
    package.mkdir()
    (package / "__init__.py").write_text(
        "import os, sys\n"
        "os.write(2, %r)\n"
        "sys.stderr.write('a warning written by Python\\n')\n"
        "os.write(2, %r)\n"
        "class config:\n"
        "    @staticmethod\n"
        "    def list_physical_devices(kind):\n"
        "        os.write(2, b'E0000 cuda_platform.cc:52] failed call to cuInit: 303\\n')\n"
        "        return []\n"
        % ((NOISE[0] + "\n" + KEPT[0] + "\n").encode(), (NOISE[3] + "\n").encode()))
    code = ("import sys; sys.path[:0] = [%r, %r]; from scriptkit import quiet_tf; "
            "import tensorflow; "
            "print('after the import', file=sys.stderr)" % (str(tmp_path), ROOT))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, **(env or {})), timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


def test_import_drops_the_noise_and_keeps_the_rest_in_order(tmp_path):
    err = _import_fake_tensorflow(tmp_path)
    lines = err.splitlines()
    assert lines[:3] == [KEPT[0], "a warning written by Python", "after the import"]
    assert not any(quiet_tf.is_startup_noise(line) for line in lines)
    if quiet_tf._HAS_NVIDIA_DEVICE:  # A real GPU: a failed cuInit is an error worth seeing.
        assert any("failed call to cuInit" in line for line in lines)
    else:
        assert len(lines) == 3


def test_unfiltered_on_request(tmp_path):
    err = _import_fake_tensorflow(tmp_path, env={"BERT_TF_IMPORT_LOG": "1"})
    assert NOISE[0] in err and NOISE[3] in err and KEPT[0] in err


@pytest.mark.slow
def test_real_tensorflow_import_is_quiet():
    """The real TensorFlow of this environment, imported through quiet_tf and
    asked for its devices, then the scripts' execution layer (runtime.py,
    which on TensorFlow 2.15 takes the TPUEstimator's names), print nothing
    on a machine without a GPU."""
    if quiet_tf._HAS_NVIDIA_DEVICE:
        pytest.skip("this machine has an NVIDIA device: its CUDA messages are real")
    code = ("import sys; sys.path.insert(0, %r); from scriptkit import quiet_tf; "
            "import tensorflow as tf; "
            "tf.config.list_physical_devices(); from scriptkit import runtime" % ROOT)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""


_XLA_SCRIPT = """
import sys
sys.path.insert(0, %r)
from scriptkit import quiet_tf
import numpy as np
import tensorflow.compat.v1 as tf
import bert_ops
if sys.argv[1] == "warm":
    assert quiet_tf.start_xla_quietly()
with tf.Graph().as_default():
    x = tf.placeholder(tf.float32, [None, 8])
    y = bert_ops.gelu(x, fused=True)
    grad = tf.gradients(tf.reduce_sum(y), x)[0]
    with tf.Session() as session:
        session.run([y, grad], {x: np.ones((2, 8))})
print("RAN")
""" % ROOT


@pytest.mark.slow
def test_xla_start_up_lines_are_caught():
    """A fused GELU at TensorFlow's default log level: after
    start_xla_quietly, XLA's start-up lines (one error-level on TensorFlow
    2.15) do not reach standard error; without it they come at the first
    run."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("TF_CPP_MIN_LOG_LEVEL", "BERT_TF_IMPORT_LOG")}
    stderr = {}
    for mode in ("warm", "cold"):
        proc = subprocess.run([sys.executable, "-c", _XLA_SCRIPT, mode], capture_output=True,
                              text=True, timeout=300, env=env)
        assert proc.returncode == 0 and "RAN" in proc.stdout, proc.stderr[-3000:]
        stderr[mode] = proc.stderr
    assert quiet_tf._XLA_START_NOISE.search(stderr["cold"]), stderr["cold"]
    assert stderr["warm"] == "", stderr["warm"]


@pytest.mark.parametrize("environ, system, machine, expected", [
    ({}, "linux", "x86_64", "1"),
    ({"TF_ENABLE_ONEDNN_OPTS": "0"}, "linux", "x86_64", "0"),
    ({"TF_ENABLE_ONEDNN_OPTS": "1"}, "linux", "aarch64", "1"),
    ({}, "linux", "aarch64", None),
    ({}, "darwin", "x86_64", None),
    ({}, "win32", "AMD64", None),
])
def test_onednn_is_the_default_only_on_x86_64_linux(environ, system, machine, expected):
    assert quiet_tf.use_onednn_by_default(environ, system, machine) == expected
    assert environ.get("TF_ENABLE_ONEDNN_OPTS") == expected


def test_onednn_choice_is_made_before_tensorflow_loads(tmp_path):
    """The stand-in TensorFlow sees the variable at its import: set by
    quiet_tf where unset (on x86-64 Linux), and an explicit 0 kept."""
    package = tmp_path / "tensorflow"
    package.mkdir()
    (package / "__init__.py").write_text(
        "import os\n"
        "print('seen', os.environ.get('TF_ENABLE_ONEDNN_OPTS'))\n"
        "class config:\n"
        "    @staticmethod\n"
        "    def list_physical_devices(kind):\n"
        "        return []\n")
    code = "import sys; sys.path[:0] = [%r, %r]; from scriptkit import quiet_tf" % (
        str(tmp_path), ROOT)
    env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    expected = quiet_tf.use_onednn_by_default({})
    for extra, seen in (({}, expected), ({"TF_ENABLE_ONEDNN_OPTS": "0"}, "0")):
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env=dict(env, **extra), timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == ["seen", str(seen)]


@pytest.mark.slow
def test_real_tensorflow_runs_onednn_on_x86_64_linux():
    """Imported through quiet_tf, this environment's TensorFlow has its
    oneDNN kernels on where quiet_tf chooses them, and off when asked."""
    if quiet_tf.use_onednn_by_default({}) is None:
        pytest.skip("oneDNN is left to TensorFlow's own choice on this platform")
    code = ("import sys; sys.path.insert(0, %r); from scriptkit import quiet_tf; "
            "import tensorflow; "
            "from tensorflow.python.util import _pywrap_util_port; "
            "print(_pywrap_util_port.IsMklEnabled())" % ROOT)
    env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    for extra, enabled in (({}, "True"), ({"TF_ENABLE_ONEDNN_OPTS": "0"}, "False")):
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env=dict(env, **extra), timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split()[-1] == enabled


def _importing_tensorflow(pid):
    """Whether process `pid` has begun to load TensorFlow's libraries."""
    try:
        with open("/proc/%d/maps" % pid) as f:
            return "libtensorflow_framework" in f.read()
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc")
def test_sigint_while_tensorflow_imports_stops_the_script(tmp_path):
    """A script started as a shell starts a background job (SIGINT ignored)
    gets SIGINT while TensorFlow is still importing: the signal is not
    lost, the script ends by it with one line and writes nothing."""
    import signal
    import time

    import test_interruption
    import tiny
    data_dir = str(tmp_path / "data")
    test_interruption._write_task(data_dir)
    vocab = tiny.write_vocab(str(tmp_path), test_interruption.WORDS)
    config = tiny.write_config(str(tmp_path), vocab_size=len(test_interruption.WORDS) + 6)
    output_dir = tmp_path / "out"
    command = [sys.executable, os.path.join(ROOT, "run_classifier.py"), "--task_name=MRPC",
               "--data_dir=" + data_dir, "--vocab_file=" + vocab, "--bert_config_file=" + config,
               "--output_dir=%s" % output_dir, "--do_train=True", "--max_seq_length=16",
               "--train_batch_size=4", "--num_train_epochs=1", "--fused_ops=none"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        deadline = time.time() + 120
        while not _importing_tensorflow(process.pid):
            assert process.poll() is None and time.time() < deadline
            time.sleep(0.005)
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == -signal.SIGINT, output
    assert "ERROR: interrupted by SIGINT" in output and "Traceback" not in output
    assert not output_dir.exists()


def test_a_late_import_leaves_the_run_s_signal_handling_alone():
    """quiet_tf imported in the middle of a run (a module that loads
    TensorFlow late) does not put a running script's signals on hold: a
    SIGINT still stops the work."""
    import signal

    from scriptkit import interrupts
    with interrupts.interrupts_caught():
        interrupts.hold_interrupts_until_run()
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
    assert not interrupts.held_until_run()


@pytest.mark.parametrize("main_name, in_worker, held", [
    ("__main__", False, True),       # A script of this folder run as the program.
    ("__mp_main__", False, False),   # Its main module in a spawned worker.
    ("__main__", True, False)])      # A forked worker.
def test_only_a_script_s_own_process_holds_early_signals(monkeypatch, main_name, in_worker,
                                                         held):
    """Worker processes of a script (create_pretraining_data.py's pool) that
    import quiet_tf keep their signal handling: their pool ends them with
    SIGTERM, which a hold would only record (a hang)."""
    import multiprocessing
    import signal
    import types

    from scriptkit import interrupts
    main = types.ModuleType(main_name)
    main.__file__ = os.path.join(ROOT, "create_pretraining_data.py")
    monkeypatch.setitem(sys.modules, "__main__", main)
    monkeypatch.setattr(multiprocessing, "parent_process",
                        lambda: object() if in_worker else None)
    handlers = {signum: signal.getsignal(signum) for signum in interrupts.INTERRUPT_SIGNALS}
    try:
        quiet_tf._hold_early_interrupts()
        assert interrupts.held_until_run() is held
    finally:
        # As a script's run takes over the hold: its handlers leave with it.
        with interrupts.interrupts_caught():
            pass
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    assert not interrupts.held_until_run()


@pytest.mark.slow
def test_keras_loads_when_first_used():
    """Through quiet_tf, TensorFlow's import leaves Keras unloaded; Keras
    then loads, optimizers included, when the code first asks for it."""
    code = ("import sys; sys.path.insert(0, %r); from scriptkit import quiet_tf; "
            "import tensorflow as tf; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('keras', 'tf_keras')"
            "         and sys.modules[m] is not None)[:3]); "
            "step = tf.keras.optimizers.SGD(0.5); value = tf.Variable([2.0]); "
            "step.apply_gradients([(tf.constant([1.0]), value)]); "
            "print(float(value.numpy()[0]), type(step).__module__.split('.')[0])" % ROOT)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    before, after = proc.stdout.splitlines()[-2:]
    assert before == "[]"
    assert after.split()[0] == "1.5" and after.split()[1] in ("keras", "tf_keras")
