"""Paths that are not local: every script's tiny end-to-end run with its
inputs and outputs on TensorFlow's in-memory ram:// file system, which goes
through tf.io.gfile as gs:// does (without a cloud); and the lock that keeps
a second training run out of an --output_dir in use, locally and on ram://.

ram:// lives in this process only, so everything runs in-process. Two
quirks of that file system shape the tests: a write to an existing file
appends to it, and a name counts as existing when any file's name starts
with it; each test therefore writes under a fresh ram:// folder.
"""

import json
import os
import socket
import time
import uuid

import pytest
import tensorflow.compat.v1 as tf
from absl import flags

import run_base
import run_common

FLAGS = flags.FLAGS
gfile = tf.io.gfile


def _exact_ram_paths():
    """tf.io.gfile's exists and isdir made exact on ram://, as they are on
    local disks and gs://. TensorFlow's ram:// file system answers both by
    name prefix: with model.ckpt-2.index written, "model.ckpt-2" exists and
    is a directory, which makes TensorFlow's own checkpoint readers (they ask
    isdir of a checkpoint prefix) fail on ram:// alone."""
    from tensorflow.python.lib.io import _pywrap_file_io, file_io
    prefix_exists, prefix_isdir, stat = (file_io.file_exists_v2, file_io.is_directory_v2,
                                         file_io.stat_v2)

    def listdir(path):  # Not list_directory_v2, which calls isdir.
        return [name.decode() if isinstance(name, bytes) else name
                for name in _pywrap_file_io.GetChildren(path.encode())]

    def is_file(path):
        try:
            return not stat(path).is_directory
        except tf.errors.NotFoundError:
            return False

    def isdir(path):
        path = str(path)
        if not path.startswith("ram://"):
            return prefix_isdir(path)
        path = path.rstrip("/")
        if not prefix_isdir(path) or is_file(path):
            return False
        parent, name = path.rsplit("/", 1)
        if parent != "ram:/" and name in listdir(parent):  # Created as a directory.
            return True
        # Or holding a file, named "<path>/<child>" and not "<path><child>".
        return any(is_file(path + "/" + child) or isdir(path + "/" + child)
                   for child in listdir(path))

    def exists(path):
        if not str(path).startswith("ram://"):
            return prefix_exists(path)
        return prefix_exists(path) and (is_file(path) or isdir(path))
    return exists, isdir


@pytest.fixture(scope="module", autouse=True)
def exact_ram_paths():
    from tensorflow.python.lib.io import file_io
    exists, isdir = _exact_ram_paths()
    with pytest.MonkeyPatch.context() as patch:
        for module in (file_io, tf.io.gfile):
            patch.setattr(module, "exists" if module is tf.io.gfile else "file_exists_v2",
                          exists)
            patch.setattr(module, "isdir" if module is tf.io.gfile else "is_directory_v2",
                          isdir)
        yield


def ram_dir(name):
    """A fresh folder name on ram:// (not created)."""
    return "ram://%s/%s" % (uuid.uuid4().hex[:12], name)


def to_ram(local_path, name=None):
    """Copies the local file or folder `local_path` to a fresh ram:// place
    and returns its path there."""
    local_path = str(local_path)
    destination = ram_dir(name or os.path.basename(local_path))
    if os.path.isfile(local_path):
        gfile.makedirs(os.path.dirname(destination))
        gfile.copy(local_path, destination)
        return destination
    for root, _, files in os.walk(local_path):
        target = os.path.join(destination, os.path.relpath(root, local_path)).rstrip("/.")
        gfile.makedirs(target)
        for file_name in files:
            gfile.copy(os.path.join(root, file_name), os.path.join(target, file_name))
    return destination


def read_ram(path):
    with gfile.GFile(path, "r") as f:
        return f.read()


def assert_no_partial_files(directory):
    """No temporary file of an atomic write is left in `directory`."""
    names = [name for _, _, files in gfile.walk(directory) for name in files]
    assert not [n for n in names if ".tmp-" in n], names


# ---------------------------------------------------------------------------
# The lock of an output directory.

def write_lock(output_dir, **content):
    """Puts a lock of another run into `output_dir`."""
    gfile.makedirs(output_dir)
    with run_base.atomic_output(os.path.join(output_dir, run_base.LOCK_FILE)) as f:
        f.write(json.dumps(content))


def live_holder():
    """A lock's content naming a live process of this host (the parent of
    the test process)."""
    pid = os.getppid()
    return dict(host=socket.gethostname(), pid=pid, process_start=run_base._process_start(pid),
                started_at="2026-01-02 03:04:05 UTC", refreshed=time.time(), token="other")


@pytest.fixture(params=["local", "ram"])
def lock_dir(request, tmp_path):
    return str(tmp_path / "out") if request.param == "local" else ram_dir("out")


def lock_path(output_dir):
    return os.path.join(output_dir, run_base.LOCK_FILE)


def test_lock_is_held_during_the_run_and_released_however_it_ends(lock_dir):
    @run_base.releases_output_lock
    def main():
        run_base.lock_output_dir(lock_dir)
        holder = json.loads(run_base.read_file_bytes(lock_path(lock_dir)))
        assert (holder["host"], holder["pid"]) == (socket.gethostname(), os.getpid())
        assert run_base._lock_is_live(holder)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        main()
    assert not run_base.exists(lock_path(lock_dir))
    assert not run_base._HELD_LOCKS
    assert_no_partial_files(lock_dir)


def test_only_one_of_two_racing_creates_wins(lock_dir):
    gfile.makedirs(lock_dir)
    path = lock_path(lock_dir)
    assert run_base._create_exclusively(path, b"first")
    assert not run_base._create_exclusively(path, b"second")
    assert run_base.read_file_bytes(path) == b"first"
    assert gfile.listdir(lock_dir) == [run_base.LOCK_FILE]


def test_a_live_run_is_named_in_one_line(lock_dir):
    write_lock(lock_dir, **live_holder())
    before = run_base.read_file_bytes(lock_path(lock_dir))
    with pytest.raises(run_base.InputError) as e:
        run_base.lock_output_dir(lock_dir)
    message = str(e.value)
    assert "\n" not in message
    assert ("--output_dir %s is in use by another training run (pid %d on host %s, started "
            "2026-01-02 03:04:05 UTC)" % (lock_dir, os.getppid(), socket.gethostname())
            in message)
    assert run_base.read_file_bytes(lock_path(lock_dir)) == before
    assert not run_base._HELD_LOCKS


def _dead_pid():
    import subprocess
    import sys
    process = subprocess.Popen([sys.executable, "-c", ""])
    process.wait()
    return process.pid


@pytest.mark.parametrize("change", [
    dict(pid="dead"),  # the process has ended
    dict(process_start=-1),  # the pid now belongs to a later process
    dict(host="elsewhere", refreshed=time.time() - run_base.LOCK_STALE_SECONDS - 5),
])
def test_a_stale_lock_is_taken_over_with_a_log_line(lock_dir, change, caplog):
    holder = dict(live_holder(), **change)
    if holder["pid"] == "dead":
        holder["pid"] = _dead_pid()
    write_lock(lock_dir, **holder)
    with caplog.at_level("WARNING"):
        run_base.lock_output_dir(lock_dir)
    try:
        assert json.loads(run_base.read_file_bytes(lock_path(lock_dir)))["pid"] == os.getpid()
    finally:
        run_base.release_output_locks()
    assert ("Taking over --output_dir %s from a training run that has ended without "
            "releasing it (pid %d on host %s, started 2026-01-02 03:04:05 UTC)"
            % (lock_dir, holder["pid"], holder["host"])) in caplog.text
    assert not run_base.exists(lock_path(lock_dir))


def test_a_recent_lock_of_another_host_is_live(lock_dir):
    write_lock(lock_dir, **dict(live_holder(), host="elsewhere", pid=1,
                                refreshed=time.time() - 30))
    with pytest.raises(run_base.InputError, match=r"\(pid 1 on host elsewhere, started"):
        run_base.lock_output_dir(lock_dir)


def test_the_heartbeat_refreshes_the_lock(lock_dir, monkeypatch):
    monkeypatch.setattr(run_base, "LOCK_HEARTBEAT_SECONDS", 0.05)
    run_base.lock_output_dir(lock_dir)
    try:
        first = json.loads(run_base.read_file_bytes(lock_path(lock_dir)))["refreshed"]
        deadline = time.time() + 10
        while time.time() < deadline:
            time.sleep(0.1)
            holder = json.loads(run_base.read_file_bytes(lock_path(lock_dir)))
            if holder["refreshed"] > first:
                break
        assert holder["refreshed"] > first
    finally:
        run_base.release_output_locks()


def test_only_the_chief_of_a_cluster_takes_the_lock(tmp_path, monkeypatch):
    cluster = {"worker": ["localhost:1", "localhost:2"]}
    monkeypatch.setenv("TF_CONFIG", json.dumps(
        {"cluster": cluster, "task": {"type": "worker", "index": 1}}))
    run_base.lock_output_dir(str(tmp_path))
    assert not os.path.exists(lock_path(str(tmp_path)))
    monkeypatch.setenv("TF_CONFIG", json.dumps(
        {"cluster": cluster, "task": {"type": "worker", "index": 0}}))
    run_base.lock_output_dir(str(tmp_path))
    assert os.path.exists(lock_path(str(tmp_path)))
    run_base.release_output_locks()


# ---------------------------------------------------------------------------
# The scripts end to end on ram://.

def ram_listing(directory):
    return sorted(gfile.listdir(directory))


def test_run_classifier(tmp_path):
    """Data, vocabulary and config on ram://; training, evaluation and
    predictions written there. With a live training run's
    lock in the folder, an evaluation run still works and a
    training run is refused before any work; a bad data file on ram:// is
    named in one line."""
    import test_run_classifier as classifier
    classifier._write_mrpc_task(str(tmp_path / "data"), num_train=8, num_dev=4, num_test=2)
    vocab, config = classifier._model_files(tmp_path)
    inputs = dict(task_name="MRPC", data_dir=to_ram(tmp_path / "data"),
                  vocab_file=to_ram(vocab), bert_config_file=to_ram(config),
                  train_batch_size=4, max_train_steps=2)
    output_dir = ram_dir("output")
    classifier.run_main(**inputs, output_dir=output_dir, do_train=True, do_eval=True,
                        do_predict=True)
    names = ram_listing(output_dir)
    for name in ("model.ckpt-2.index", "checkpoint", "run_config.json", "train.tf_record",
                 "eval_results.txt", "test_results.tsv"):
        assert name in names
    assert run_base.LOCK_FILE not in names
    assert "eval_accuracy = " in read_ram(os.path.join(output_dir, "eval_results.txt"))
    assert len(read_ram(os.path.join(output_dir, "test_results.tsv")).splitlines()) == 2
    assert json.loads(read_ram(os.path.join(output_dir, "run_config.json")))["script"]
    assert_no_partial_files(output_dir)

    write_lock(output_dir, **live_holder())
    gfile.remove(os.path.join(output_dir, "eval_results.txt"))
    classifier.run_main(**inputs, output_dir=output_dir, do_eval=True)
    assert gfile.exists(os.path.join(output_dir, "eval_results.txt"))
    before = ram_listing(output_dir)
    with pytest.raises(run_common.InputError, match=r"^--output_dir ram://.* is in use by "
                       r"another training run \(pid %d on host " % os.getppid()):
        classifier.run_main(**inputs, output_dir=output_dir, do_train=True)
    assert ram_listing(output_dir) == before

    dev = os.path.join(inputs["data_dir"], "dev.tsv")
    gfile.remove(dev)  # (A write to an existing ram:// file appends.)
    with gfile.GFile(dev, "w") as f:
        f.write("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\ta\tb\n2\t1\t2\ta\tb\n")
    fresh = ram_dir("output")
    with pytest.raises(run_common.InputError,
                       match=r"^%s, line 3: label '2' is not one of" % dev):
        classifier.run_main(**inputs, output_dir=fresh, do_train=True, do_eval=True)
    assert not gfile.exists(fresh)
