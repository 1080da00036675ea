"""Paths that are not local: the scripts' tiny end-to-end runs with their
inputs and outputs on TensorFlow's in-memory ram:// file system, which goes
through tf.io.gfile as gs:// does (without a cloud; demo.py and
squad_evaluate.py work on local files, see docs/faq.md); and the lock that
keeps a second training run out of an --output_dir in use, locally and on
ram://.

ram:// lives in this process only, so everything runs in-process. Three
quirks of that file system, which gs:// does not share, shape the tests:
it answers exists and isdir by name prefix (`exact_ram_paths` makes them
exact for this module), a write to an existing file appends to it (each
test writes under a fresh ram:// folder), and renaming a folder leaves its
files behind (SavedModel exports are written locally and copied).
"""

import errno
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid

import pytest
import tensorflow.compat.v1 as tf
from absl import flags

from absl.testing import flagsaver

from scriptkit import errors
from scriptkit import file_io
import modeling
from scriptkit import output_lock
import tiny

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
# Atomic writes and input checks.

def test_an_atomic_write_that_fails_leaves_the_old_file_and_no_part():
    directory = ram_dir("out")
    path = os.path.join(directory, "results.txt")
    with file_io.atomic_output(path) as f:
        f.write("complete\n")
    with pytest.raises(RuntimeError):
        with file_io.atomic_output(path) as f:
            f.write("half")
            raise RuntimeError("interrupted")
    assert read_ram(path) == "complete\n"
    assert gfile.listdir(directory) == ["results.txt"]


def test_missing_inputs_on_ram_are_named():
    directory = ram_dir("data")
    gfile.makedirs(directory)
    with pytest.raises(errors.InputError,
                       match="^--vocab_file: file not found: %s/vocab.txt$" % directory):
        file_io.require_file("vocab_file", directory + "/vocab.txt")
    with pytest.raises(errors.InputError,
                       match=r"^--input_file: no file matches %s/\*\.tfrecord$" % directory):
        file_io.expand_file_patterns("input_file", directory + "/*.tfrecord")
    with gfile.GFile(directory + "/bad.txt", "wb") as f:
        f.write(b"fine\nnot \xff utf-8\n")
    with pytest.raises(errors.InputError, match=r"^--input_file %s/bad.txt, line 2: not "
                       r"valid UTF-8" % directory):
        file_io.read_text(directory + "/bad.txt", "input_file")


# ---------------------------------------------------------------------------
# The lock of an output directory.

def write_lock(output_dir, **content):
    """Puts a lock of another run into `output_dir`."""
    gfile.makedirs(output_dir)
    with file_io.atomic_output(os.path.join(output_dir, output_lock.LOCK_FILE)) as f:
        f.write(json.dumps(content))


def live_holder():
    """A lock's content naming a live process of this host (the parent of
    the test process)."""
    pid = os.getppid()
    return dict(host=socket.gethostname(), boot_id=output_lock._boot_id(),
                pid_namespace=output_lock._pid_namespace(), pid=pid,
                process_start=output_lock._process_start(pid),
                started_at="2026-01-02 03:04:05 UTC", refreshed=time.time(), token="other")


@pytest.fixture(params=["local", "ram"])
def lock_dir(request, tmp_path):
    return str(tmp_path / "out") if request.param == "local" else ram_dir("out")


def lock_path(output_dir):
    return os.path.join(output_dir, output_lock.LOCK_FILE)


def test_lock_is_held_during_the_run_and_released_however_it_ends(lock_dir):
    @output_lock.releases_output_lock
    def main():
        output_lock.lock_output_dir(lock_dir)
        holder = json.loads(file_io.read_file_bytes(lock_path(lock_dir)))
        assert (holder["host"], holder["pid"]) == (socket.gethostname(), os.getpid())
        assert output_lock._lock_is_live(holder)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        main()
    assert not file_io.exists(lock_path(lock_dir))
    assert not output_lock._HELD_LOCKS
    assert_no_partial_files(lock_dir)


def test_a_create_fails_where_the_lock_exists(lock_dir):
    gfile.makedirs(lock_dir)
    path = lock_path(lock_dir)
    assert output_lock._create_exclusively(path, b"first")
    assert not output_lock._create_exclusively(path, b"second")
    assert file_io.read_file_bytes(path) == b"first"
    assert gfile.listdir(lock_dir) == [output_lock.LOCK_FILE]


def test_of_racing_creates_on_a_local_disk_exactly_one_wins(tmp_path):
    """Processes released together by a barrier create the same lock file
    at once, in each of 25 fresh folders: every time exactly one succeeds,
    the file holds its bytes, and no temporary file is left."""
    import multiprocessing
    num_processes, rounds = 4, 25
    paths = []
    for round_index in range(rounds):
        os.makedirs(str(tmp_path / str(round_index)))
        paths.append(lock_path(str(tmp_path / str(round_index))))
    context = multiprocessing.get_context("spawn")  # This process has TensorFlow's threads.
    barrier, results = context.Barrier(num_processes), context.Queue()
    processes = [context.Process(target=tiny.race_to_create,
                                 args=(barrier, paths, index, results))
                 for index in range(num_processes)]
    for process in processes:
        process.start()
    outcomes = [results.get(timeout=300) for _ in range(num_processes * rounds)]
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    for round_index, path in enumerate(paths):
        winners = [index for r, index, created in outcomes if r == round_index and created]
        assert len(winners) == 1, (round_index, winners)
        assert file_io.read_file_bytes(path) == b"%d" % winners[0]
        assert os.listdir(os.path.dirname(path)) == [output_lock.LOCK_FILE]


def test_a_live_run_is_named_in_one_line(lock_dir):
    write_lock(lock_dir, **live_holder())
    before = file_io.read_file_bytes(lock_path(lock_dir))
    with pytest.raises(errors.InputError) as e:
        output_lock.lock_output_dir(lock_dir)
    message = str(e.value)
    assert "\n" not in message
    assert ("--output_dir %s is in use by another training run (pid %d on host %s, started "
            "2026-01-02 03:04:05 UTC)" % (lock_dir, os.getppid(), socket.gethostname())
            in message)
    assert file_io.read_file_bytes(lock_path(lock_dir)) == before
    assert not output_lock._HELD_LOCKS


def test_a_live_run_of_another_user_is_refused(lock_dir, monkeypatch):
    """Signal 0 to another user's process fails with "permission denied"
    (EPERM): the process is there, so its run's lock is refused."""
    holder = live_holder()
    kill = os.kill

    def kill_of_another_user(pid, signum):
        if pid == holder["pid"]:
            raise PermissionError(errno.EPERM, os.strerror(errno.EPERM))
        return kill(pid, signum)

    monkeypatch.setattr(os, "kill", kill_of_another_user)
    write_lock(lock_dir, **holder)
    with pytest.raises(errors.InputError, match=r"is in use by another training run \(pid %d "
                       % holder["pid"]):
        output_lock.lock_output_dir(lock_dir)
    assert not output_lock._HELD_LOCKS


# Run as another user: the lock of a run of this test's user (`pid`) in
# `folder`. Everything is imported before the privileges are dropped (the
# interpreter's own files may be readable by root only).
_LOCK_AS_ANOTHER_USER = """
import json, os, sys
sys.path.insert(0, {root!r})
from scriptkit import output_lock
from scriptkit.errors import InputError
if {uid} is not None:
    os.setgid({uid})
    os.setuid({uid})
try:
    os.kill({pid}, 0)
    signal = "allowed"
except PermissionError:
    signal = "EPERM"
try:
    output_lock.lock_output_dir({folder!r})
    outcome = "taken over"
except InputError as e:
    outcome = str(e)
print(json.dumps([signal, outcome]))
"""


def test_a_run_of_another_user_is_refused_by_a_process_that_cannot_signal_it():
    """A real "permission denied": a process of another user (nobody, as
    root runs the tests; else pid 1 where another user's) finds the lock
    of a live run it may not signal, and must refuse it."""
    if os.geteuid() == 0:
        pid, uid = os.getpid(), 65534  # This process (root's), seen by nobody.
    elif os.path.exists("/proc/1") and os.stat("/proc/1").st_uid != os.geteuid():
        pid, uid = 1, None
    else:
        pytest.skip("neither root nor a process of another user here")
    folder = tempfile.mkdtemp()
    try:
        os.chmod(folder, 0o777)
        write_lock(folder, **dict(live_holder(), pid=pid,
                                  process_start=output_lock._process_start(pid)))
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        completed = subprocess.run(
            [sys.executable, "-c", _LOCK_AS_ANOTHER_USER.format(root=root, uid=uid, pid=pid,
                                                                folder=folder)],
            capture_output=True, text=True, timeout=300)
        assert completed.returncode == 0, completed.stderr[-3000:]
        signal, outcome = json.loads(completed.stdout.splitlines()[-1])
    finally:
        shutil.rmtree(folder)
    assert signal == "EPERM"  # What this test is about.
    assert "is in use by another training run (pid %d on host" % pid in outcome, outcome


def _dead_pid():
    import subprocess
    import sys
    process = subprocess.Popen([sys.executable, "-c", ""])
    process.wait()
    return process.pid


@pytest.mark.parametrize("change", [
    dict(pid="dead"),  # the process has ended
    dict(process_start=-1),  # the pid now belongs to a later process
    dict(host="elsewhere", refreshed=time.time() - output_lock.LOCK_STALE_SECONDS - 5),
])
def test_a_stale_lock_is_taken_over_with_a_log_line(lock_dir, change, caplog):
    holder = dict(live_holder(), **change)
    if holder["pid"] == "dead":
        holder["pid"] = _dead_pid()
    write_lock(lock_dir, **holder)
    with caplog.at_level("WARNING"):
        output_lock.lock_output_dir(lock_dir)
    try:
        assert json.loads(file_io.read_file_bytes(lock_path(lock_dir)))["pid"] == os.getpid()
    finally:
        output_lock.release_output_locks()
    assert ("Taking over --output_dir %s from a training run that has ended without "
            "releasing it (pid %d on host %s, started 2026-01-02 03:04:05 UTC)"
            % (lock_dir, holder["pid"], holder["host"])) in caplog.text
    assert not file_io.exists(lock_path(lock_dir))


@pytest.mark.parametrize("other", [
    dict(pid_namespace=1),  # another container with the same host name
    dict(boot_id="0b5e0b5e-another-boot"),  # another machine, or boot, of that name
    dict(boot_id=None, pid_namespace=None),  # a lock of an earlier version, without both
])
def test_a_lock_of_the_same_host_name_elsewhere_goes_by_its_heartbeat(lock_dir, other, caplog):
    """A lock that names this host but another boot or PID namespace (two
    containers sharing a host name, as with --network=host): its pid says
    nothing here, so it is live while its heartbeat is recent and taken
    over once it is stale, as a lock of another host."""
    holder = {name: value for name, value in dict(live_holder(), pid=_dead_pid(),
                                                   **other).items() if value is not None}
    write_lock(lock_dir, **holder)
    with pytest.raises(errors.InputError, match=r"is in use by another training run \(pid "
                       r"%d on host %s, " % (holder["pid"], socket.gethostname())):
        output_lock.lock_output_dir(lock_dir)
    stale_dir = os.path.join(lock_dir, "stale")
    write_lock(stale_dir, **dict(holder, refreshed=time.time() - output_lock.LOCK_STALE_SECONDS
                                 - 5))
    with caplog.at_level("WARNING"):
        output_lock.lock_output_dir(stale_dir)
    output_lock.release_output_locks()
    assert "Taking over --output_dir %s from a training run that has ended" % stale_dir in (
        caplog.text)


def test_the_lock_names_its_boot_and_pid_namespace(tmp_path):
    output_lock.lock_output_dir(str(tmp_path))
    try:
        holder = json.loads(file_io.read_file_bytes(lock_path(str(tmp_path))))
    finally:
        output_lock.release_output_locks()
    assert holder["boot_id"] == output_lock._boot_id()
    assert holder["pid_namespace"] == output_lock._pid_namespace()
    if sys.platform == "linux":
        with open("/proc/sys/kernel/random/boot_id") as f:
            assert holder["boot_id"] == f.read().strip()
        assert holder["pid_namespace"] == int(
            os.readlink("/proc/self/ns/pid").split("[")[1].rstrip("]"))


def test_a_recent_lock_of_another_host_is_live(lock_dir):
    write_lock(lock_dir, **dict(live_holder(), host="elsewhere", pid=1,
                                refreshed=time.time() - 30))
    with pytest.raises(errors.InputError, match=r"\(pid 1 on host elsewhere, started"):
        output_lock.lock_output_dir(lock_dir)


def test_the_heartbeat_refreshes_the_lock(lock_dir, monkeypatch):
    monkeypatch.setattr(output_lock, "LOCK_HEARTBEAT_SECONDS", 0.05)
    output_lock.lock_output_dir(lock_dir)
    try:
        first = json.loads(file_io.read_file_bytes(lock_path(lock_dir)))["refreshed"]
        deadline = time.time() + 10
        while time.time() < deadline:
            time.sleep(0.1)
            holder = json.loads(file_io.read_file_bytes(lock_path(lock_dir)))
            if holder["refreshed"] > first:
                break
        assert holder["refreshed"] > first
    finally:
        output_lock.release_output_locks()


def test_only_the_chief_of_a_cluster_takes_the_lock(tmp_path, monkeypatch):
    cluster = {"worker": ["localhost:1", "localhost:2"]}
    monkeypatch.setenv("TF_CONFIG", json.dumps(
        {"cluster": cluster, "task": {"type": "worker", "index": 1}}))
    output_lock.lock_output_dir(str(tmp_path))
    assert not os.path.exists(lock_path(str(tmp_path)))
    monkeypatch.setenv("TF_CONFIG", json.dumps(
        {"cluster": cluster, "task": {"type": "worker", "index": 0}}))
    output_lock.lock_output_dir(str(tmp_path))
    assert os.path.exists(lock_path(str(tmp_path)))
    output_lock.release_output_locks()


# ---------------------------------------------------------------------------
# The scripts end to end on ram://.

def ram_listing(directory):
    return sorted(gfile.listdir(directory))


def test_run_classifier_and_predict(tmp_path):
    """Data, vocabulary and config on ram://; training and predictions
    written there. With a live training run's lock in the folder, an
    evaluation run still works and a training run is refused before any
    work; a bad data file on ram:// is named in one line. predict.py reads
    the export (copied to ram://: see docs/faq.md for --export_dir) and
    its input there, and writes its output there."""
    import predict
    import test_run_classifier as classifier
    classifier._write_mrpc_task(str(tmp_path / "data"), num_train=8, num_dev=4, num_test=2)
    vocab, config = classifier._model_files(tmp_path)
    inputs = dict(task_name="MRPC", data_dir=to_ram(tmp_path / "data"),
                  vocab_file=to_ram(vocab), bert_config_file=to_ram(config),
                  train_batch_size=4, max_train_steps=2)
    output_dir = ram_dir("output")
    classifier.run_main(**inputs, output_dir=output_dir, do_train=True, do_predict=True,
                        export_dir=str(tmp_path / "export"))
    names = ram_listing(output_dir)
    for name in ("model.ckpt-2.index", "checkpoint", "run_config.json", "train.tf_record",
                 "test_results.tsv"):
        assert name in names
    assert output_lock.LOCK_FILE not in names
    assert len(read_ram(os.path.join(output_dir, "test_results.tsv")).splitlines()) == 2
    assert json.loads(read_ram(os.path.join(output_dir, "run_config.json")))["script"]
    assert_no_partial_files(output_dir)

    write_lock(output_dir, **live_holder())
    classifier.run_main(**inputs, output_dir=output_dir, do_eval=True)
    assert "eval_accuracy = " in read_ram(os.path.join(output_dir, "eval_results.txt"))
    before = ram_listing(output_dir)
    with pytest.raises(errors.InputError, match=r"^--output_dir ram://.* is in use by "
                       r"another training run \(pid %d on host " % os.getppid()):
        classifier.run_main(**inputs, output_dir=output_dir, do_train=True)
    assert ram_listing(output_dir) == before

    dev = os.path.join(inputs["data_dir"], "dev.tsv")
    gfile.remove(dev)  # (A write to an existing ram:// file appends.)
    with gfile.GFile(dev, "w") as f:
        f.write("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\ta\tb\n2\t1\t2\ta\tb\n")
    fresh = ram_dir("output")
    with pytest.raises(errors.InputError,
                       match=r"^%s, line 3: label '2' is not one of" % dev):
        classifier.run_main(**inputs, output_dir=fresh, do_train=True, do_eval=True)
    assert not gfile.exists(fresh)

    export_dir = to_ram(tmp_path / "export")
    predict_dir = ram_dir("predict")
    gfile.makedirs(predict_dir)
    with gfile.GFile(predict_dir + "/in.jsonl", "w") as f:
        f.write(json.dumps({"text_a": "the good dog", "text_b": "a mat"}) + "\n")
    values = dict(model_dir=export_dir, input_file=predict_dir + "/in.jsonl",
                  output_file=predict_dir + "/out.jsonl", batch_size=2,
                  skip_malformed_rows=False, input_format="auto",
                  signature_name="serving_default", port=None)
    with flagsaver.flagsaver(**values):
        predict.main([])
    (line,) = read_ram(predict_dir + "/out.jsonl").splitlines()
    assert json.loads(line)["labels"] in ("0", "1")
    assert_no_partial_files(predict_dir)


def test_create_pretraining_data_then_run_pretraining(tmp_path):
    """Corpus and vocabulary on ram://, the records written there, and
    pre-training (with evaluation) on them, config and output on ram://."""
    import create_pretraining_data
    import test_create_pretraining_data as data_tests
    corpus, vocab, _, _ = data_tests.tagged_corpus(str(tmp_path), num_docs=6)
    with open(vocab, encoding="utf-8") as f:
        vocab_size = len(f.read().split())
    config = tiny.write_config(str(tmp_path), vocab_size)
    corpus, vocab, config = to_ram(corpus), to_ram(vocab), to_ram(config)
    records = os.path.join(ram_dir("records"), "part-0.tfrecord")
    values = dict(input_file=corpus, output_file=records, vocab_file=vocab,
                  do_lower_case=True, do_whole_word_mask=False, max_seq_length=32,
                  max_predictions_per_seq=5, random_seed=1, dupe_factor=1,
                  masked_lm_prob=0.15, short_seq_prob=0.1, num_workers=1,
                  shard_size_mb=0.0, shuffle_buffer_size=1000)
    if not FLAGS.is_parsed():
        FLAGS.mark_as_parsed()
    with flagsaver.flagsaver(**values):
        create_pretraining_data.main([])
    assert sum(1 for _ in tf.data.TFRecordDataset(records)) > 8
    assert_no_partial_files(os.path.dirname(records))

    import run_pretraining
    import test_run_pretraining as pretraining_tests
    output_dir = ram_dir("output")
    pretraining_tests.run_main(
        bert_config_file=config, input_file=os.path.dirname(records) + "/part-*",
        output_dir=output_dir, do_train=True, do_eval=True, max_seq_length=32,
        max_predictions_per_seq=5, train_batch_size=4, eval_batch_size=4,
        num_train_steps=2, num_warmup_steps=0, max_eval_steps=1,
        save_checkpoints_steps=1000, iterations_per_loop=1000)
    assert run_pretraining  # (imported for its flags)
    names = ram_listing(output_dir)
    assert "model.ckpt-2.index" in names and output_lock.LOCK_FILE not in names
    results = read_ram(os.path.join(output_dir, "eval_results.txt"))
    assert "global_step = 2" in results and "masked_lm_accuracy" in results
    assert_no_partial_files(output_dir)


def test_run_ner(tmp_path):
    import random

    import test_run_ner as ner
    rng = random.Random(0)
    data_dir = tmp_path / "data"
    ner._write_conll(data_dir / "train.txt", rng, 4)
    ner._write_conll(data_dir / "valid.txt", rng, 2)
    vocab, config = ner._model_files(tmp_path)
    output_dir = ram_dir("output")
    ner.run_main(data_dir=to_ram(data_dir), vocab_file=to_ram(vocab),
                 bert_config_file=to_ram(config), output_dir=output_dir, do_train=True,
                 do_eval=True, train_batch_size=4, max_train_steps=2)
    names = ram_listing(output_dir)
    for name in ("model.ckpt-2.index", "ner_labels.json", "run_config.json",
                 "eval_results.txt", "eval_predictions.txt"):
        assert name in names
    assert "eval_f1 = " in read_ram(os.path.join(output_dir, "eval_results.txt"))
    assert output_lock.LOCK_FILE not in names
    assert_no_partial_files(output_dir)


def test_run_swag(tmp_path):
    import test_run_swag as swag
    swag._write_task(str(tmp_path / "data"), num_train=8, num_dev=4, num_test=3)
    vocab, config = swag._model_files(tmp_path)
    output_dir = ram_dir("output")
    swag.run_main(data_dir=to_ram(tmp_path / "data"), vocab_file=to_ram(vocab),
                  bert_config_file=to_ram(config), output_dir=output_dir, do_train=True,
                  do_eval=True, do_predict=True, train_batch_size=4, max_train_steps=2)
    names = ram_listing(output_dir)
    for name in ("model.ckpt-2.index", "run_config.json", "eval_results.txt",
                 "test_results.tsv"):
        assert name in names
    assert len(read_ram(os.path.join(output_dir, "test_results.tsv")).splitlines()) == 4
    assert_no_partial_files(output_dir)


def test_run_squad(tmp_path):
    import test_run_squad as squad
    values, dev = squad._main_flags(tmp_path, version_2=False, max_train_steps=2)
    for name in ("vocab_file", "bert_config_file", "train_file", "predict_file"):
        values[name] = to_ram(values[name])
    values["output_dir"] = output_dir = ram_dir("output")
    squad._run_main(values)
    names = ram_listing(output_dir)
    for name in ("model.ckpt-2.index", "run_config.json", "predictions.json",
                 "nbest_predictions.json", "eval_results.json"):
        assert name in names, names
    predictions = json.loads(read_ram(os.path.join(output_dir, "predictions.json")))
    assert list(predictions) == squad._question_ids(dev)
    # --evaluate_only scores the predictions there again.
    gfile.remove(os.path.join(output_dir, "eval_results.json"))
    squad._run_main(dict(values, evaluate_only=True))
    assert "exact_match" in json.loads(read_ram(os.path.join(output_dir,
                                                             "eval_results.json")))
    assert_no_partial_files(output_dir)


def test_extract_features(tmp_path):
    """Input, vocabulary, config and checkpoint on ram://; the features
    (JSON Lines and .npz) written there."""
    import numpy as np

    import test_extract_features as features
    directory = tmp_path / "model"
    directory.mkdir()
    vocab = tiny.write_vocab(str(directory), features.VOCAB)
    tiny.write_config(str(directory), vocab_size=len(features.VOCAB) + 5)
    with tf.Graph().as_default():
        config = modeling.BertConfig.from_json_file(str(directory / "bert_config.json"))
        modeling.BertModel(config, is_training=False,
                           input_ids=tf.zeros([1, 4], tf.int32))
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            tf.train.Saver().save(session, str(directory / "bert_model.ckpt"),
                                  write_meta_graph=False)
    (directory / "input.txt").write_text("\n".join(features.LINES) + "\n", encoding="utf-8")
    model_dir = to_ram(directory)
    model = dict(input_file=model_dir + "/input.txt", vocab_file=model_dir + "/vocab.txt",
                 bert_config_file=model_dir + "/bert_config.json",
                 init_checkpoint=model_dir + "/bert_model.ckpt")
    assert os.path.basename(vocab) == "vocab.txt"
    output_dir = ram_dir("features")
    jsonl = features.run_extract(model, output_dir + "/features.jsonl")
    lines = read_ram(jsonl).splitlines()
    assert len(lines) == len(features.LINES)
    assert json.loads(lines[0])["features"][0]["token"] == "[CLS]"
    npz = features.run_extract(model, output_dir + "/features.npz", output_format="npz")
    with gfile.GFile(npz, "rb") as f:
        assert len(np.load(f, allow_pickle=False).files) > 0
    assert_no_partial_files(output_dir)


def test_create_vocab(tmp_path):
    import test_create_vocab as vocab_tests
    corpus = to_ram(vocab_tests.write_corpus(str(tmp_path / "corpus.txt"), num_lines=200))
    output = os.path.join(ram_dir("vocab"), "vocab.txt")
    vocab_tests.run_main(input_file=corpus, output_file=output, vocab_size=120,
                         do_lower_case=True)
    tokens = read_ram(output).split()
    assert tokens[0] == "[PAD]" and "[CLS]" in tokens and 60 < len(tokens) <= 120
    assert_no_partial_files(os.path.dirname(output))


def test_convert_checkpoint_both_ways(tmp_path):
    """A Hugging Face model on ram:// converted to a checkpoint there, and
    back to the Hugging Face layout, on ram://."""
    import convert_checkpoint
    import test_convert_checkpoint as convert_tests
    model_dir = to_ram(convert_tests.hf_model_dir("pretraining", tmp_path / "hf"))
    output_dir = ram_dir("converted")
    convert_checkpoint.convert(model_dir, output_dir)
    names = ram_listing(output_dir)
    for name in ("bert_model.ckpt.index", "bert_config.json", "vocab.txt"):
        assert name in names, names
    back = ram_dir("back")
    convert_checkpoint.convert_to_hf(os.path.join(output_dir, "bert_model.ckpt"), back,
                                     os.path.join(output_dir, "bert_config.json"),
                                     os.path.join(output_dir, "vocab.txt"), True, None)
    assert {"config.json", "model.safetensors", "vocab.txt"} <= set(ram_listing(back))
    assert_no_partial_files(output_dir)
    assert_no_partial_files(back)
