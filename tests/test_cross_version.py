"""Checkpoints across TensorFlow versions and runtimes: a classifier trained
under one interpreter (say TensorFlow 2.15 with the Estimator) gives the same
predictions under the other (TensorFlow 2.21 with the session runner), and
the reverse.

The other interpreter comes from BERT_OTHER_PYTHON, which .ci/run sets to the
other leg's environment; without it the tests skip. Each run is a
`run_classifier.py` command line, as a user would type it.
"""

import os
import random
import shutil
import subprocess
import sys

import numpy as np
import pytest

import tiny

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OTHER_PYTHON = os.environ.get("BERT_OTHER_PYTHON", "")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not OTHER_PYTHON, reason="BERT_OTHER_PYTHON (the other CI leg's "
                       "interpreter) is not set"),
]

WORDS = ["a", "b", "c", "d", "e", "f", "g", "good"]


def _describe(python):
    code = "import sys, tensorflow as tf; print(sys.version.split()[0], tf.__version__)"
    return subprocess.run([python, "-c", code], capture_output=True, text=True,
                          timeout=300, env=_env()).stdout.strip()


def _env():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT)
    env.pop("BERT_RUNTIME", None)
    return env


def _write_task(data_dir):
    """An MRPC-layout task: label 1 iff "good" is in the first sentence."""
    rng = random.Random(3)
    os.makedirs(data_dir)
    header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    for split, n in (("train", 64), ("dev", 16)):
        with open(os.path.join(data_dir, split + ".tsv"), "w") as f:
            f.write(header)
            for _ in range(n):
                label = rng.randint(0, 1)
                words = rng.sample(WORDS[:-1], 4) + (["good"] if label else [])
                f.write("%d\t1\t2\t%s\t%s\n" % (label, " ".join(words),
                                                " ".join(rng.sample(WORDS[:-1], 3))))
    with open(os.path.join(data_dir, "test.tsv"), "w") as f:
        f.write("index\t#1 ID\t#2 ID\t#1 String\t#2 String\n")
        for i in range(11):
            f.write("%d\t1\t2\t%s\ta b\n" % (i, " ".join(rng.sample(WORDS, 5))))


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    root = tmp_path_factory.mktemp("cross")
    data_dir = str(root / "data")
    _write_task(data_dir)
    vocab, config = tiny.write_model_files(root, WORDS)
    return root, ["--task_name=MRPC", "--data_dir=" + data_dir, "--vocab_file=" + vocab,
                  "--bert_config_file=" + config, "--max_seq_length=16",
                  "--predict_batch_size=4"]


def _run(python, args):
    proc = subprocess.run([python, os.path.join(ROOT, "run_classifier.py")] + args,
                          capture_output=True, text=True, timeout=600, env=_env(), cwd=ROOT)
    assert proc.returncode == 0, "%s (%s):\n%s" % (python, _describe(python),
                                                  proc.stderr[-3000:])


def _predictions(output_dir):
    with open(os.path.join(output_dir, "test_results.tsv")) as f:
        return np.array([[float(x) for x in line.split("\t")] for line in f])


@pytest.mark.parametrize("writer, reader", [("this", "other"), ("other", "this")])
def test_checkpoint_predicts_the_same_on_the_other_version(task, writer, reader):
    root, common = task
    pythons = {"this": sys.executable, "other": OTHER_PYTHON}
    trained = str(root / ("trained_by_" + writer))
    _run(pythons[writer], common + ["--output_dir=" + trained, "--do_train", "--do_predict",
                                    "--train_batch_size=8", "--num_train_epochs=2",
                                    "--learning_rate=1e-3"])
    # The other version restores the whole checkpoint (weights, Adam slots,
    # global step) from its own output dir and predicts the test set.
    restored = str(root / ("restored_by_" + reader))
    os.makedirs(restored)
    for name in os.listdir(trained):
        if name.startswith("model.ckpt-16") or name == "checkpoint":
            shutil.copy(os.path.join(trained, name), restored)
    _run(pythons[reader], common + ["--output_dir=" + restored, "--do_predict"])
    expected, got = _predictions(trained), _predictions(restored)
    assert expected.shape == (11, 2)
    # Each process would draw its own random initial weights: agreement to
    # 1e-5 means the reader used the writer's checkpoint.
    np.testing.assert_allclose(got, expected, atol=1e-5)
