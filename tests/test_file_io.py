"""file_io and the other modules the scripts share that need no TensorFlow:
they import without it, the atomic output files appear whole or not at
all, and each shared name is used from the module that defines it."""

import ast
import glob
import importlib
import os
import subprocess
import sys

import pytest

from scriptkit import file_io
from scriptkit import logs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The modules that the scripts share, lower layers (no TensorFlow) first.
TF_FREE_MODULES = ("errors", "shared_flags", "interrupts", "logs", "file_io", "output_lock",
                   "script_runner", "input_packing")
SHARED_MODULES = TF_FREE_MODULES + ("checkpoints", "input_pipeline", "training_progress",
                                    "training", "evaluation", "fine_tuning", "runtime",
                                    "saved_model_writer", "serving", "exported_model", "rest_api",
                                    "async_http", "rest_server")


def test_imports_without_tensorflow():
    """The shared modules that need no TensorFlow, and the scripts that use
    only them, start without loading TensorFlow."""
    code = ("import sys; sys.path.insert(0, %r); from scriptkit import %s; import squad_evaluate, "
            "create_pretraining_data; print('tensorflow' in sys.modules)"
            % (ROOT, ", ".join(TF_FREE_MODULES)))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


def test_shared_names_are_used_from_their_own_module():
    """No shared module passes on another's functions or classes: every
    `<module>.<name>` in the code (scripts, tests, benchmarks) names the
    module that defines it."""
    modules = {name: importlib.import_module("scriptkit." + name) for name in SHARED_MODULES}
    paths = [path for pattern in ("*.py", "scriptkit/*.py", "tests/*.py", "benchmarks/*.py")
             for path in glob.glob(os.path.join(ROOT, pattern))]
    wrong = []
    for path in sorted(paths):
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in modules):
                continue
            value = getattr(modules[node.value.id], node.attr, None)
            owner = (getattr(value, "__module__", None) or "").replace("scriptkit.", "", 1)
            if owner in modules and owner != node.value.id:
                wrong.append("%s:%d: %s.%s is %s's" % (os.path.relpath(path, ROOT), node.lineno,
                                                      node.value.id, node.attr, owner))
    assert not wrong, "\n".join(wrong)


def test_atomic_file_commit_and_abort(tmp_path):
    path = str(tmp_path / "out.txt")
    target = file_io.AtomicFile(path)
    with open(target.tmp_path, "w") as f:
        f.write("half")
    assert not os.path.exists(path)
    target.abort()
    assert os.listdir(tmp_path) == []
    target.abort()  # Nothing left to remove: no error.

    with open(path, "w") as f:
        f.write("old")
    target = file_io.AtomicFile(path)
    with open(target.tmp_path, "w") as f:
        f.write("new")
    target.commit()
    assert os.listdir(tmp_path) == ["out.txt"]
    with open(path) as f:
        assert f.read() == "new"


def test_atomic_output_leaves_nothing_on_failure(tmp_path):
    path = str(tmp_path / "results.txt")
    with pytest.raises(RuntimeError, match="stop"):
        with file_io.atomic_output(path) as writer:
            writer.write("partial\n")
            raise RuntimeError("stop")
    assert os.listdir(tmp_path) == []
    with file_io.atomic_output(path) as writer:
        writer.write("caf\u00e9\n")
    with open(path, encoding="utf-8") as f:
        assert f.read() == "caf\u00e9\n"


def test_outputs_are_named_once_each_and_forgotten_for_the_next_run(monkeypatch):
    """`log_outputs` names each reported file once, in the order written,
    with its latest headline; after `forget_outputs` it names none."""
    lines = []
    monkeypatch.setattr(logs, "log_info", lambda message, *args: lines.append(message % args))
    file_io.forget_outputs()
    try:
        file_io.report_output("/out/a.txt", "3 lines")
        file_io.report_output("/out/b.json")
        file_io.report_output("/out/a.txt", "4 lines")
        file_io.log_outputs()
        assert lines == ["Wrote /out/b.json", "Wrote /out/a.txt: 4 lines"]
        file_io.forget_outputs()
        file_io.log_outputs()
        assert lines == ["Wrote /out/b.json", "Wrote /out/a.txt: 4 lines"]
    finally:
        file_io.forget_outputs()
