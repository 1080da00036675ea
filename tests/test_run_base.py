"""run_base: the scripts' shared code that needs no TensorFlow. It imports
without TensorFlow, and its atomic output files appear whole or not at all."""

import os
import subprocess
import sys

import pytest

import run_base

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_imports_without_tensorflow():
    """run_base, and the scripts that use it alone, start without loading
    TensorFlow."""
    code = ("import sys; sys.path.insert(0, %r); import run_base, squad_evaluate, "
            "create_pretraining_data; print('tensorflow' in sys.modules)" % ROOT)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


def test_run_common_re_exports_run_base():
    import run_common
    for name in ("InputError", "define_flags", "run_script", "Progress", "atomic_output",
                 "AtomicFile", "check_output_dir", "pack_sequence_pair"):
        assert getattr(run_common, name) is getattr(run_base, name), name
    assert issubclass(run_common.ThroughputHook, run_common.tf.train.SessionRunHook)


def test_atomic_file_commit_and_abort(tmp_path):
    path = str(tmp_path / "out.txt")
    target = run_base.AtomicFile(path)
    with open(target.tmp_path, "w") as f:
        f.write("half")
    assert not os.path.exists(path)
    target.abort()
    assert os.listdir(tmp_path) == []
    target.abort()  # Nothing left to remove: no error.

    with open(path, "w") as f:
        f.write("old")
    target = run_base.AtomicFile(path)
    with open(target.tmp_path, "w") as f:
        f.write("new")
    target.commit()
    assert os.listdir(tmp_path) == ["out.txt"]
    with open(path) as f:
        assert f.read() == "new"


def test_atomic_output_leaves_nothing_on_failure(tmp_path):
    path = str(tmp_path / "results.txt")
    with pytest.raises(RuntimeError, match="stop"):
        with run_base.atomic_output(path) as writer:
            writer.write("partial\n")
            raise RuntimeError("stop")
    assert os.listdir(tmp_path) == []
    with run_base.atomic_output(path) as writer:
        writer.write("caf\u00e9\n")
    with open(path, encoding="utf-8") as f:
        assert f.read() == "caf\u00e9\n"
