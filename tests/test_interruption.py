"""Interrupted and resumed training: SIGTERM or Ctrl-C during training saves
a checkpoint and exits non-zero; the same command resumes at the next unseen
batch and ends with the variables of an uninterrupted run (also in the
middle of a gradient accumulation cycle); a damaged latest checkpoint is
set aside for the newest intact one; an interrupted data step commits
nothing."""

import logging
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from scriptkit import checkpoints
from scriptkit import errors
from scriptkit import file_io
from scriptkit import input_pipeline
from scriptkit import interrupts
from scriptkit import mixed_precision
import optimization
from scriptkit import output_lock
import run_classifier
import tiny
from scriptkit import training
from scriptkit import training_progress

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDS = ["good", "bad", "the", "a", "film", "plot", "was", "is", "very", "not", "fine",
         "dull", "great", "acting", "story"]


def _write_task(data_dir, num_train=24, seed=0):
    """An MRPC-layout task (train and dev) of `num_train` rows."""
    os.makedirs(data_dir, exist_ok=True)
    rng = random.Random(seed)
    header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    for split, n in (("train", num_train), ("dev", 4)):
        with open(os.path.join(data_dir, split + ".tsv"), "w") as f:
            f.write(header)
            for _ in range(n):
                label = rng.randint(0, 1)
                first = " ".join(rng.choice(WORDS[2:]) for _ in range(rng.randint(2, 6)))
                f.write("%d\t1\t2\t%s %s\t%s\n" % (label, first, "good" if label else "bad",
                                                   rng.choice(WORDS[2:])))


@pytest.fixture(scope="module", autouse=True)
def no_dropout():
    """No dropout anywhere (the model's rates are 0; run_classifier's head
    has the original's fixed 0.1): a resumed graph draws its dropout masks
    afresh, so only a dropout-free model can end bit for bit like an
    uninterrupted one."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tf.nn, "dropout", lambda x, *args, **kwargs: x)
        yield


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("interrupt")
    data_dir = str(tmp / "data")
    _write_task(data_dir)
    vocab, config = tiny.write_model_files(tmp, WORDS, vocab_size=len(WORDS) + 6,
                                           hidden_dropout_prob=0.0,
                                           attention_probs_dropout_prob=0.0)
    return dict(tmp=tmp, data_dir=data_dir, vocab=vocab, config=config)


def _flags(task, output_dir, **overrides):
    # 24 examples / 4 * 2 epochs = 12 micro-batches = 6 updates of 2.
    values = tiny.fine_tuning_flags(
        task_name="MRPC", max_seq_length=16, eval_every_n_steps=0, keep_best_checkpoint=False,
        best_checkpoint_metric=None, skip_malformed_rows=False, diagnostic_file=None,
        xnli_language="zh", labels=None, data_format="auto", has_header=True,
        text_column="text", text_b_column=None, label_column="label", id_column=None,
        regression=False, multi_label=False, label_separator="|", multi_label_threshold=0.5,
        doc_stride=None,
        data_dir=task["data_dir"], vocab_file=task["vocab"], bert_config_file=task["config"],
        output_dir=output_dir, do_train=True, train_batch_size=4, num_train_epochs=2.0,
        gradient_accumulation_steps=2, save_checkpoints_steps=2, input_seed=7,
        learning_rate=1e-3)
    values.update(overrides)
    return values


def _trainable_values(checkpoint):
    reader = tf.train.load_checkpoint(checkpoint)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if name.startswith(("bert/", "output_"))}


def _assert_same_variables(first, second):
    a, b = _trainable_values(first), _trainable_values(second)
    assert sorted(a) == sorted(b) and a
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=0, atol=1e-6, err_msg=name)


@pytest.fixture
def messages():
    handler = tiny.LogMessages()
    logger = logging.getLogger("tensorflow")
    logger.addHandler(handler)
    verbosity = tf.logging.get_verbosity()
    tf.logging.set_verbosity(tf.logging.INFO)
    yield handler.messages
    tf.logging.set_verbosity(verbosity)
    logger.removeHandler(handler)


@pytest.fixture(scope="module")
def uninterrupted(task):
    output_dir = str(task["tmp"] / "uninterrupted")
    tiny.run_main_seeded(run_classifier.main, _flags(task, output_dir))
    return tf.train.latest_checkpoint(output_dir)


def test_sigterm_mid_cycle_saves_and_resume_ends_like_an_uninterrupted_run(
        task, uninterrupted, messages, monkeypatch):
    """SIGTERM during the 5th micro-batch (one micro-batch into the 3rd
    cycle; the runner's last checkpoint is of step 2, with no micro-batch):
    the run saves step 2 again with its micro-step, exits with 128 + 15,
    and the same command finishes with the uninterrupted run's
    variables."""
    output_dir = str(task["tmp"] / "interrupted")
    hooks = training_progress.training_hooks
    monkeypatch.setattr(training_progress, "training_hooks", lambda *args, **kwargs: (
        hooks(*args, **kwargs) + [tiny.signal_during_run(5, signal.SIGTERM)]))
    with pytest.raises(training.TrainingInterrupted) as stopped:
        tiny.run_main_seeded(run_classifier.main, _flags(task, output_dir))
    monkeypatch.setattr(training_progress, "training_hooks", hooks)
    assert stopped.value.code == 128 + signal.SIGTERM
    checkpoint = tf.train.latest_checkpoint(output_dir)
    assert checkpoint.endswith("model.ckpt-2")
    assert tf.train.load_variable(checkpoint, optimization.MICRO_STEP_VARIABLE) == 1
    assert [line for line in messages if line.startswith("Training stopped by")] == [
        "Training stopped by SIGTERM at step 2: checkpoint %s saved; the same command "
        "resumes from it" % checkpoint]
    # The run's lock on the folder is released, and the handlers are the
    # test process's own again.
    assert not os.path.exists(os.path.join(output_dir, output_lock.LOCK_FILE))
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert interrupts.interrupted() is None

    tiny.run_main_seeded(run_classifier.main, _flags(task, output_dir))
    final = tf.train.latest_checkpoint(output_dir)
    assert final.endswith("model.ckpt-6")
    assert messages.count("Resuming the training input after the 20 examples that the "
                          "checkpoint has trained on (the same order, from the input seed)") == 1
    _assert_same_variables(final, uninterrupted)


def test_fp16_resume_after_skipped_steps_ends_like_an_uninterrupted_run(
        task, tmp_path, messages, monkeypatch):
    """--precision=fp16, with an initial loss scale so large that the first
    steps overflow: each skipped step reads a batch but leaves the global
    step. The checkpoint counts the batches read, so a run stopped after
    such steps resumes at the next unread batch (not global step batches
    in) and ends with the variables of an uninterrupted run. A checkpoint
    without the count (of an earlier version) still resumes, by its global
    step, and the run goes on without counting (it could not restore the
    count)."""
    monkeypatch.setattr(mixed_precision.DynamicLossScale.__init__, "__defaults__",
                        (2.0 ** 30, 2000, 2.0))
    values = dict(gradient_accumulation_steps=1, precision="fp16")
    output_dir = str(tmp_path / "uninterrupted")
    tiny.run_main_seeded(run_classifier.main, _flags(task, output_dir, **values))
    uninterrupted = tf.train.latest_checkpoint(output_dir)
    reader = tf.train.load_checkpoint(uninterrupted)
    assert reader.get_tensor(optimization.BATCHES_READ_VARIABLE) > reader.get_tensor("global_step")
    # A training counter, which exports leave out.
    import convert_checkpoint
    assert convert_checkpoint.classify_variables(list(reader.get_variable_to_shape_map()))[1][
        optimization.BATCHES_READ_VARIABLE] == "a training counter"

    output_dir = str(tmp_path / "interrupted")
    hooks = training_progress.training_hooks
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(training_progress, "training_hooks", lambda *args, **kwargs: (
            hooks(*args, **kwargs) + [tiny.signal_during_run(7, signal.SIGTERM)]))
        with pytest.raises(training.TrainingInterrupted):
            tiny.run_main_seeded(run_classifier.main, _flags(task, output_dir, **values))
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(output_dir))
    assert reader.get_tensor(optimization.BATCHES_READ_VARIABLE) == 7
    assert reader.get_tensor("global_step") < 7  # Steps were skipped.
    tiny.run_main_seeded(run_classifier.main, _flags(task, output_dir, **values))
    final = tf.train.latest_checkpoint(output_dir)
    _assert_same_variables(final, uninterrupted)
    assert messages.count("Resuming the training input after the 28 examples that the "
                          "checkpoint has trained on (the same order, from the input seed)") == 1

    # The final checkpoint as an earlier version wrote it, without the count.
    reader = tf.train.load_checkpoint(final)
    with tf.Graph().as_default():
        saved = [tf.Variable(reader.get_tensor(name), name=name)
                 for name in reader.get_variable_to_shape_map()
                 if name != optimization.BATCHES_READ_VARIABLE]
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            tf.train.Saver(saved).save(session, final)
    assert checkpoints.consumed_batches(output_dir) == 12
    tiny.run_main_seeded(run_classifier.main, _flags(task, output_dir, **dict(
        values, num_train_epochs=2.5)))
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(output_dir))
    assert reader.get_tensor("global_step") == 15
    assert not reader.has_tensor(optimization.BATCHES_READ_VARIABLE)


def test_resume_without_a_seed_reads_on_after_the_trained_records(task, tmp_path, monkeypatch):
    """Unseeded, the resumed input starts at the first record not yet
    trained on: with batches of 4 in file order (no shuffle), the 3rd
    batch after a checkpoint of 2 batches is the file's 3rd."""
    record_file = str(tmp_path / "r.tf_record")
    with tf.io.TFRecordWriter(record_file) as writer:
        for i in range(20):
            writer.write(tf.train.Example(features=tf.train.Features(feature={
                "x": input_pipeline.int64_feature([i])})).SerializeToString())
    features = {"x": tf.io.FixedLenFeature([], tf.int64)}

    def first_batch(**params):
        input_fn = input_pipeline.tfrecord_input_fn(record_file, features, is_training=True,
                                                    drop_remainder=True, shuffle_buffer=1)
        dataset = input_fn(dict(batch_size=4, **params))
        return tf.data.experimental.get_single_element(dataset.take(1))["x"]

    with tf.Graph().as_default(), tf.Session() as session:
        unseeded, seeded, seeded_later = session.run([
            first_batch(start_record=8, input_seed=None),
            first_batch(start_record=0, input_seed=3),
            first_batch(start_record=4, input_seed=3)])
    np.testing.assert_array_equal(unseeded, [8, 9, 10, 11])
    # Seeded (buffer 1: file order), 4 records in: the second batch.
    np.testing.assert_array_equal(seeded, [0, 1, 2, 3])
    np.testing.assert_array_equal(seeded_later, [4, 5, 6, 7])


def test_seeded_pooled_input_resumes_at_the_same_batch(tmp_path):
    """With dynamic padding (pools of batches sorted by length), a seeded
    stream started k batches in equals the full stream from batch k, for k
    inside and across pools."""
    record_file = str(tmp_path / "lengths.tf_record")
    rng = random.Random(0)
    with tf.io.TFRecordWriter(record_file) as writer:
        for i in range(150):
            length = rng.randint(1, 8)
            writer.write(tf.train.Example(features=tf.train.Features(feature={
                "input_ids": input_pipeline.int64_feature([i + 1] * length + [0] * (8 - length)),
                "input_mask": input_pipeline.int64_feature([1] * length + [0] * (8 - length)),
            })).SerializeToString())
    features = {name: tf.io.FixedLenFeature([8], tf.int64)
                for name in ("input_ids", "input_mask")}
    input_fn = input_pipeline.tfrecord_input_fn(record_file, features, is_training=True,
                                                drop_remainder=True, length_buckets=(4, 8))
    batch, pool = 2, input_pipeline.LENGTH_POOL_BATCHES

    def batches(start_batch, count):
        dataset = input_fn(dict(batch_size=batch, start_record=start_batch * batch,
                                input_seed=11))
        dataset = dataset.map(lambda b: tf.pad(b["input_ids"], [[0, 0], [0, 8 - tf.shape(
            b["input_ids"])[1]]]))
        return tf.data.experimental.get_single_element(dataset.take(count).batch(count))

    with tf.Graph().as_default(), tf.Session() as session:
        full, later, across = session.run([batches(0, 2 * pool + 5), batches(pool - 3, 8),
                                           batches(2 * pool + 1, 4)])
    np.testing.assert_array_equal(later, full[pool - 3:pool + 5])
    np.testing.assert_array_equal(across, full[2 * pool + 1:2 * pool + 5])


def _truncate(path, keep):
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[:keep])


@pytest.mark.parametrize("damage", ["data", "index"])
def test_damaged_latest_checkpoint_falls_back_to_the_newest_intact(
        task, uninterrupted, tmp_path, messages, monkeypatch, damage):
    """The latest checkpoint's .data (or .index) cut short: one warning
    names the file and the state file names the checkpoint before it;
    training resumes from there and ends like the uninterrupted run."""
    output_dir = str(tmp_path / "run")
    source = os.path.dirname(uninterrupted)
    os.makedirs(output_dir)
    for name in os.listdir(source):
        if name.startswith(("model.ckpt-4", "model.ckpt-6", "checkpoint", "graph")):
            with open(os.path.join(source, name), "rb") as f, \
                    open(os.path.join(output_dir, name), "wb") as g:
                g.write(f.read())
    with open(os.path.join(output_dir, "checkpoint"), "w") as f:
        f.write('model_checkpoint_path: "model.ckpt-6"\n'
                'all_model_checkpoint_paths: "model.ckpt-4"\n'
                'all_model_checkpoint_paths: "model.ckpt-6"\n')
    damaged = os.path.join(output_dir, "model.ckpt-6." + (
        "data-00000-of-00001" if damage == "data" else "index"))
    _truncate(damaged, os.path.getsize(damaged) // 2)

    if damage == "data":
        tiny.run_main_seeded(run_classifier.main, _flags(task, output_dir))
    else:
        # The same function, before training, as the run above calls it;
        # here with the folder given relative to the working directory.
        monkeypatch.chdir(tmp_path)
        intact = checkpoints.use_intact_checkpoint("run")
        assert intact == os.path.join("run", "model.ckpt-4")
        assert tf.train.latest_checkpoint("run") == intact
        assert checkpoints.consumed_batches("run", 2) == 8
        monkeypatch.undo()
    warnings = [line for line in messages if "the newest intact checkpoint" in line]
    named = damaged if damage == "data" else os.path.relpath(damaged, tmp_path)
    assert len(warnings) == 1 and warnings[0].startswith(named + " is cut short")
    assert warnings[0].endswith("resuming from %s (step 4), the newest intact checkpoint"
                                % os.path.join(output_dir if damage == "data" else "run",
                                               "model.ckpt-4"))
    if damage == "data":
        _assert_same_variables(tf.train.latest_checkpoint(output_dir), uninterrupted)


def _copy_checkpoints(source_dir, output_dir, steps):
    os.makedirs(output_dir)
    for name in os.listdir(source_dir):
        if name.startswith(tuple("model.ckpt-%d." % step for step in steps)):
            with open(os.path.join(source_dir, name), "rb") as f, \
                    open(os.path.join(output_dir, name), "wb") as g:
                g.write(f.read())


def _state_file(output_dir):
    """(the latest checkpoint, every checkpoint) that the "checkpoint" state
    file of `output_dir` names (as paths in `output_dir`), read as the text
    proto it is; None where it is not one."""
    from google.protobuf import text_format
    from tensorflow.python.training import checkpoint_state_pb2
    state = checkpoint_state_pb2.CheckpointState()
    try:
        with open(os.path.join(output_dir, "checkpoint"), "rb") as f:
            text_format.Merge(f.read().decode("utf-8"), state)
    except (OSError, UnicodeDecodeError, text_format.ParseError):
        return None
    return (os.path.join(output_dir, state.model_checkpoint_path),
            [os.path.join(output_dir, path) for path in state.all_model_checkpoint_paths])


def _tensorflow_sees_no_checkpoint(output_dir):
    """Whether TensorFlow finds no checkpoint to resume from in `output_dir`
    (an empty state file makes it raise instead)."""
    try:
        return tf.train.latest_checkpoint(output_dir) is None
    except ValueError:
        return True


# Damaged "checkpoint" state files: TensorFlow finds no checkpoint by them.
DAMAGED_STATE_FILES = {
    "truncated": (b'model_checkpoint_path: "model.ckpt-4"\nall_model_checkpoint_paths: "mod',
                  "is cut short or not a checkpoint state file"),
    "garbage": (b"\x00\x9c\xffK\x03 not a state file", "is cut short or not a checkpoint "
                "state file"),
    "empty": (b"", "is empty or cut short (it names no checkpoint)"),
    "missing": (b'model_checkpoint_path: "model.ckpt-8"\n'
                b'all_model_checkpoint_paths: "model.ckpt-8"\n',
                "names %s, which is not there (no .index)"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGED_STATE_FILES))
def test_damaged_state_file_falls_back_to_the_newest_intact_checkpoint(
        task, uninterrupted, tmp_path, messages, damage):
    """A "checkpoint" state file cut short, not a state file, empty, or
    naming a checkpoint that is not there: the folder's *.index files are
    listed, one warning names the state file, the state file is rewritten
    to name the newest intact checkpoint, and training resumes from it (and
    ends like the uninterrupted run) instead of starting over."""
    output_dir = str(tmp_path / "run")
    _copy_checkpoints(os.path.dirname(uninterrupted), output_dir, (2, 4))
    state_path = os.path.join(output_dir, "checkpoint")
    content, fault = DAMAGED_STATE_FILES[damage]
    with open(state_path, "wb") as f:
        f.write(content)
    # A damaged checkpoint of a later step, which the listing finds, is passed over.
    with open(os.path.join(output_dir, "model.ckpt-5.index"), "wb") as f:
        f.write(b"not a checkpoint index")
    assert _tensorflow_sees_no_checkpoint(output_dir)
    newest = os.path.join(output_dir, "model.ckpt-4")
    if "%s" in fault:
        fault %= os.path.join(output_dir, "model.ckpt-8")

    if damage == "garbage":
        try:
            tiny.run_main_seeded(run_classifier.main, _flags(task, output_dir))
            failed = None
        except Exception as e:  # noqa: BLE001  (asserted on below, with the state file)
            failed = "%s: %s" % (type(e).__name__, e)
        # The run resumed and went on to its last step's checkpoint.
        final = os.path.join(output_dir, os.path.basename(uninterrupted))
        assert (failed, (_state_file(output_dir) or [None])[0]) == (None, final)
        _assert_same_variables(tf.train.latest_checkpoint(output_dir), uninterrupted)
    else:
        assert checkpoints.use_intact_checkpoint(output_dir, rewrite=False) == newest
        assert _tensorflow_sees_no_checkpoint(output_dir)  # Left as it was.
        assert checkpoints.use_intact_checkpoint(output_dir) == newest
        # Rewritten to name the newest intact checkpoint, and the older one.
        assert _state_file(output_dir) == (newest, [newest[:-1] + "2", newest])
        assert tf.train.latest_checkpoint(output_dir) == newest
        assert checkpoints.consumed_batches(output_dir, 2) == 8
    warnings = [line for line in messages if "the newest intact checkpoint" in line]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("%s %s" % (state_path, fault)), warnings
    assert warnings[0].endswith(": resuming from %s (step 4), the newest intact checkpoint"
                                % newest), warnings


@pytest.mark.parametrize("state_file, fault", [
    (b'model_checkpoint_path: "model.ckpt-5"\n',
     r".*model\.ckpt-5\.index is cut short or corrupt .*"),
    (b"garbage", r".*run/checkpoint is cut short or not a checkpoint state file \(.*\)"),
])
def test_no_intact_checkpoint_is_one_line(tmp_path, state_file, fault):
    output_dir = tmp_path / "run"
    output_dir.mkdir()
    (output_dir / "model.ckpt-5.index").write_bytes(b"not a checkpoint")
    (output_dir / "checkpoint").write_bytes(state_file)
    with pytest.raises(errors.InputError, match=(
            r"^--output_dir .*run: cannot resume, %s and no checkpoint there is intact; "
            r"move the damaged files away to start over$" % fault)):
        checkpoints.use_intact_checkpoint(str(output_dir))


def _interrupt_when(command, ready, timeout=300, **popen_args):
    """Runs `command` with its output going to a file, sends it SIGINT as
    soon as `ready(output so far)` is true, and returns (exit status,
    everything it printed). Fails if the command ends before it is ready."""
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                   text=True, **popen_args)
        try:
            deadline = time.monotonic() + timeout
            while True:
                log.seek(0)
                output = log.read()
                if ready(output):
                    break
                assert process.poll() is None, "ended before it was ready:\n" + output
                assert time.monotonic() < deadline, "not ready in time:\n" + output
                time.sleep(0.05)  # Polling only; the state waited for decides.
            process.send_signal(signal.SIGINT)
            process.wait(timeout=120)
        finally:
            if process.poll() is None:
                process.kill()
        log.seek(0)
        return process.returncode, log.read()


def test_ctrl_c_from_outside_stops_training_with_a_checkpoint(task, tmp_path):
    """A real SIGINT to the script's process during a long training: one
    line naming the saved checkpoint, no traceback, and the process ends by
    the signal (a shell shows status 130)."""
    output_dir = str(tmp_path / "run")
    command = [sys.executable, os.path.join(ROOT, "run_classifier.py"), "--task_name=MRPC",
               "--data_dir=" + task["data_dir"], "--vocab_file=" + task["vocab"],
               "--bert_config_file=" + task["config"], "--output_dir=" + output_dir,
               "--do_train=True", "--max_seq_length=16", "--train_batch_size=4",
               "--num_train_epochs=100000", "--save_checkpoints_steps=1000000"]
    # The runner's first checkpoint: training has started (a signal from
    # here on stops it after a step, with a checkpoint).
    returncode, output = _interrupt_when(command,
                                         lambda output: "Saving checkpoints for 0" in output)
    # Ended by the signal itself, once done (as Python does after Ctrl-C).
    assert returncode == -signal.SIGINT, output
    assert "Traceback" not in output
    checkpoint = tf.train.latest_checkpoint(output_dir)
    step = int(checkpoint.rsplit("-", 1)[1])
    assert step > 0
    assert output.count("Training stopped by SIGINT at step %d: checkpoint %s saved"
                        % (step, checkpoint)) == 1, output


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_interrupted_commit_puts_nothing_in_place(tmp_path):
    """A signal whose KeyboardInterrupt was lost (raised inside a finalizer,
    where Python drops it) still stops the data step's outputs from being
    committed: the files already there stay, no temporary file is left."""
    import create_pretraining_data

    paths = [str(tmp_path / "a.tfrecord"), str(tmp_path / "b.tfrecord")]
    with open(paths[0], "wb") as f:
        f.write(b"earlier output")
    writer = create_pretraining_data._AtomicRecordFiles(paths)
    writer.write([b"record one", b"record two"])

    class _Finalized:
        def __del__(self):
            interrupts._on_interrupt(signal.SIGINT, None)

    try:
        with interrupts.interrupts_caught():
            _Finalized()  # The KeyboardInterrupt is printed and dropped here.
            assert interrupts.interrupted() == signal.SIGINT
            with pytest.raises(KeyboardInterrupt):
                writer.commit()
    finally:
        writer.abort()
    with open(paths[0], "rb") as f:
        assert f.read() == b"earlier output"
    assert sorted(os.listdir(tmp_path)) == ["a.tfrecord"]


def test_commit_of_several_files_finishes_whole_before_a_signal_acts(tmp_path):
    """A signal that comes while the files are put in place is acted on
    once all of them are: never a mix of new and old outputs."""
    import create_pretraining_data

    paths = [str(tmp_path / "a.tfrecord"), str(tmp_path / "b.tfrecord")]
    writer = create_pretraining_data._AtomicRecordFiles(paths)
    writer.write([b"one", b"two"])
    commits = []
    original = file_io.AtomicFile.commit

    def commit_then_signal(target):
        original(target)
        commits.append(target.path)
        if len(commits) == 1:
            os.kill(os.getpid(), signal.SIGTERM)
            # Recorded; a second signal would end the process at once.
            assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL

    with interrupts.interrupts_caught():
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(file_io.AtomicFile, "commit", commit_then_signal)
            with pytest.raises(KeyboardInterrupt):
                writer.commit()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert commits == paths
    assert all(os.path.getsize(path) > 0 for path in paths)


# create_pretraining_data.py run as from the shell, with its first shard held
# in its worker: the worker creates the file sys.argv[1] and waits there
# (until the pool ends it), so that a signal is sure to come while the
# workers work. The workers are forked (no TensorFlow is imported), so they
# have the replaced function.
_HELD_DATA_STEP = """
import os, signal, sys
sys.path.insert(0, %r)
ready_file = sys.argv.pop(1)
import create_pretraining_data as script
from scriptkit import script_runner
process_shard = script._process_shard


def held_shard(shard_index, lines):
    if shard_index == 0:
        with open(ready_file, "w") as f:
            f.write(str(os.getpid()))
        while True:
            signal.pause()
    return process_shard(shard_index, lines)


def main(argv):  # The program's own main: it ends by the signal, as the script does.
    return script.main(argv)


script._process_shard = held_shard
script_runner.run_script(main)
""" % ROOT


def test_sharded_data_step_stops_on_sigint_even_if_started_ignoring_it(tmp_path):
    """create_pretraining_data.py in sharded mode with worker processes,
    started as a shell script starts a background job (SIGINT ignored),
    gets SIGINT while a worker is in the middle of a shard: it stops (by the
    signal), leaves the earlier output files as they were and no temporary
    file, and its workers end (no hang)."""
    corpus = tmp_path / "corpus.txt"
    with open(os.path.join(ROOT, "demo_data", "corpus.txt")) as f:
        text = f.read()
    corpus.write_text(text * 2)  # Several shards of 0.05 MB.
    vocab = tiny.write_vocab(str(tmp_path), sorted(set(text.lower().split()))[:300])
    out = tmp_path / "out"
    out.mkdir()
    outputs = [out / "a.tfrecord", out / "b.tfrecord"]
    for path in outputs:
        path.write_bytes(b"earlier")
    ready_file = tmp_path / "worker_holds_shard_0"
    command = [sys.executable, "-c", _HELD_DATA_STEP, str(ready_file),
               "--input_file=%s" % corpus, "--vocab_file=%s" % vocab,
               "--output_file=%s" % ",".join(map(str, outputs)), "--max_seq_length=32",
               "--max_predictions_per_seq=5", "--num_workers=2", "--shard_size_mb=0.05"]
    returncode, output = _interrupt_when(
        command, lambda output: ready_file.exists(),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert returncode == -signal.SIGINT, output
    assert "ERROR: interrupted by SIGINT" in output
    assert [path.read_bytes() for path in outputs] == [b"earlier", b"earlier"]
    assert sorted(os.listdir(out)) == ["a.tfrecord", "b.tfrecord"]
    # The worker that held the shard has ended with the pool.
    worker = int(ready_file.read_text())
    assert not os.path.exists("/proc/%d" % worker) or _is_zombie(worker)


def _is_zombie(pid):
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "Z"


@pytest.mark.skipif(sys.platform != "linux", reason="uses Linux's RLIMIT_FSIZE")
def test_a_save_that_runs_out_of_room_leaves_the_previous_checkpoint_usable(
        task, tmp_path, messages):
    """A resumed run whose checkpoint writes fail for lack of room (a file
    size limit below the checkpoint's size, as a full disk would): one line,
    the previous checkpoint stays the latest and intact, and the next run
    removes the failed save's partial files and goes on."""
    # A large embedding table: the checkpoint's data file (about 6 MB) is
    # larger than the limit, the graph and event files are smaller.
    config = tiny.write_config(str(tmp_path), vocab_size=16000)
    output_dir = str(tmp_path / "run")
    values = _flags(task, output_dir, bert_config_file=config, gradient_accumulation_steps=1,
                    num_train_epochs=1.0, save_checkpoints_steps=100)
    tiny.run_main_seeded(run_classifier.main, values)
    latest = tf.train.latest_checkpoint(output_dir)
    assert latest.endswith("model.ckpt-6")

    limit = 4500 * 1000
    command = [sys.executable, "-c", (
        "import os, resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (%d, %d))\n"
        "os.execv(sys.executable, [sys.executable] + sys.argv[1:])\n" % (limit, limit)),
        os.path.join(ROOT, "run_classifier.py")] + [
        "--%s=%s" % (name, values[name]) for name in (
            "task_name", "data_dir", "vocab_file", "bert_config_file", "output_dir",
            "max_seq_length", "train_batch_size", "save_checkpoints_steps")] + [
        "--do_train=True", "--num_train_epochs=2"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stderr
    assert result.stderr.count("ERROR: ") == 1
    assert "File too large" in result.stderr.splitlines()[-1]
    assert "Traceback" not in result.stderr
    assert tf.train.latest_checkpoint(output_dir) == latest
    assert checkpoints._checkpoint_fault(latest) is None
    failed = [name for name in os.listdir(output_dir) if "_temp" in name]
    assert failed

    tiny.run_main_seeded(run_classifier.main, dict(values, num_train_epochs=2.0))
    assert tf.train.latest_checkpoint(output_dir).endswith("model.ckpt-12")
    assert not [name for name in os.listdir(output_dir) if "_temp" in name]
    assert "Removed %s: the partial files of a checkpoint save that failed" % os.path.join(
        output_dir, failed[0]) in messages
