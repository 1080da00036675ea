"""The Colab path: scripts/install_into.sh and notebooks/colab_quickstart.ipynb.

The install script's choices are checked in every leg, on stand-in
environments whose only "package" is TensorFlow's metadata (the script reads
the version from the metadata and imports nothing). The real install and the
notebook run in the "colab" leg of .ci/run (BERT_COLAB_LEG=1): an environment
where TensorFlow 2.20 was installed first, as on Colab, and the project's
requirements then went in through scripts/install_into.sh.
"""

import importlib.metadata
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INSTALL = os.path.join(ROOT, "scripts", "install_into.sh")
NOTEBOOK = os.path.join(ROOT, "notebooks", "colab_quickstart.ipynb")
COLAB_LEG = os.environ.get("BERT_COLAB_LEG") == "1"
colab_leg_only = pytest.mark.skipif(
    not COLAB_LEG, reason="needs the environment of .ci/run's colab leg (BERT_COLAB_LEG=1)")


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory):
    """A bare virtual environment (no pip) and its site-packages folder."""
    venv = str(tmp_path_factory.mktemp("stand_in") / "venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    python = os.path.join(venv, "bin", "python")
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True).stdout.strip()
    return python, purelib


def dry_run(stand_in, tf_version):
    """install_into.sh --dry-run on the stand-in, with TensorFlow `tf_version`
    (or none) "installed"."""
    python, purelib = stand_in
    for name in os.listdir(purelib):
        if name.startswith("tensorflow-"):
            for f in os.listdir(os.path.join(purelib, name)):
                os.remove(os.path.join(purelib, name, f))
            os.rmdir(os.path.join(purelib, name))
    if tf_version:
        info = os.path.join(purelib, "tensorflow-%s.dist-info" % tf_version)
        os.makedirs(info)
        with open(os.path.join(info, "METADATA"), "w") as f:
            f.write("Metadata-Version: 2.1\nName: tensorflow\nVersion: %s\n" % tf_version)
    return subprocess.run(["bash", INSTALL, "--dry-run", python],
                          capture_output=True, text=True)


@pytest.mark.parametrize("version,minor", [("2.16.2", "2.16"), ("2.19.1", "2.19"),
                                           ("2.20.0", "2.20"), ("2.21.0", "2.21")])
def test_installed_tensorflow_is_pinned_with_matching_text(stand_in, version, minor):
    result = dry_run(stand_in, version)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "tensorflow==%s.*" % minor in lines
    assert "tensorflow-text==%s.*" % minor in lines
    # Only 2.20 leaves protobuf unbounded while breaking on protobuf 7.
    assert ("protobuf<7" in lines) == (minor == "2.20")
    assert "-r requirements.txt -c CONSTRAINTS" in lines[-1]


def test_without_tensorflow_nothing_is_pinned(stand_in):
    result = dry_run(stand_in, None)
    assert result.returncode == 0, result.stderr
    assert "constraints:" not in result.stdout
    assert "No TensorFlow installed" in result.stdout
    assert result.stdout.splitlines()[-1].endswith("-r requirements.txt")


@pytest.mark.parametrize("version,hint", [("2.15.1", "requirements-tf2.15.txt"),
                                          ("2.22.0", "supports 2.16-2.21")])
def test_unsupported_tensorflow_is_not_replaced(stand_in, version, hint):
    result = dry_run(stand_in, version)
    assert result.returncode == 2
    assert hint in result.stderr
    assert "would run" not in result.stdout


def test_notebook_is_stored_without_outputs():
    with open(NOTEBOOK) as f:
        notebook = json.load(f)
    code = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    assert code
    assert all(not c["outputs"] and c["execution_count"] is None for c in code)
    source = "".join("".join(c["source"]) for c in code)
    for needed in ("install_into.sh", "list_physical_devices", "run_classifier.py",
                   "--export_dir", "predict.py", "REPO_URL"):
        assert needed in source


def versions():
    return {name: importlib.metadata.version(name)
            for name in ("tensorflow", "tensorflow-text", "protobuf")}


@colab_leg_only
def test_preinstalled_tensorflow_kept_with_matching_text():
    v = versions()
    assert v["tensorflow"].startswith("2.20."), v
    assert v["tensorflow-text"].startswith("2.20."), v
    assert int(v["protobuf"].split(".")[0]) < 7, v
    # TensorFlow Text's ops load into this TensorFlow.
    subprocess.run([sys.executable, "-c", "import tensorflow_text"], check=True)


@colab_leg_only
def test_installing_again_offline_changes_nothing():
    before = versions()
    env = dict(os.environ, PIP_NO_INDEX="1")
    subprocess.run(["bash", INSTALL, sys.executable], check=True, env=env)
    assert versions() == before


@colab_leg_only
@pytest.mark.slow
def test_notebook_runs_top_to_bottom(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    out = tmp_path / "quickstart"
    # The kernel inherits this environment: the checkout instead of a clone,
    # outputs under tmp_path, and pip without an index (offline).
    monkeypatch.setenv("BERT_CHECKOUT", ROOT)
    monkeypatch.setenv("QUICKSTART_OUTPUT", str(out))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(notebook, timeout=900, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    try:
        client.execute()
    finally:
        nbformat.write(notebook, str(tmp_path / "executed.ipynb"))
    text = "\n".join(o.get("text", "") for c in notebook.cells if c.cell_type == "code"
                     for o in c.get("outputs", []))
    assert "TensorFlow 2.20." in text  # the kernel ran on the kept TensorFlow
    assert "Working in " + ROOT in text
    with open(out / "sst2" / "eval_results.txt") as f:
        accuracy = float(dict(line.split(" = ") for line in f.read().splitlines())["eval_accuracy"])
    assert accuracy > 0.6  # the majority class is 0.56 of the dev set
    with open(out / "predictions.jsonl") as f:
        predictions = [json.loads(line) for line in f]
    assert len(predictions) == 3
    assert any(os.path.isfile(os.path.join(out, "export", v, "saved_model.pb"))
               for v in os.listdir(out / "export"))
