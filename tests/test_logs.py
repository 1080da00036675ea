"""The words of the scripts' logs: training progress in optimizer steps,
the training headline with the effective batch, evaluation and prediction
progress, and example dumps that show what a reader checks."""

import logging
import os

import pytest
import tensorflow.compat.v1 as tf
from absl import flags

import bert_ops
from scriptkit import run_record
from scriptkit import input_pipeline
from scriptkit import logs
import run_classifier
import tiny
import tokenization
from scriptkit import training
from scriptkit import training_progress

FLAGS = flags.FLAGS


@pytest.fixture
def log_lines():
    """The INFO (and, with DEBUG on, DEBUG) messages logged meanwhile."""
    messages = []

    class Collector(logging.Handler):
        def emit(self, record):
            messages.append(record.getMessage())

    collector = Collector()
    logger = logging.getLogger("tensorflow")
    logger.addHandler(collector)
    verbosity = tf.logging.get_verbosity()
    tf.logging.set_verbosity(tf.logging.INFO)
    yield messages
    tf.logging.set_verbosity(verbosity)
    logger.removeHandler(collector)


def _run_hooked(hooks, num_runs, runs_per_update):
    """`num_runs` session runs of a graph whose global step advances once
    every `runs_per_update` runs (as gradient accumulation does)."""
    with tf.Graph().as_default():
        global_step = tf.train.get_or_create_global_step()
        runs = tf.Variable(0, dtype=tf.int64, trainable=False)
        count = tf.assign_add(runs, 1)
        step = tf.cond(tf.equal(count % runs_per_update, 0),
                       lambda: tf.assign_add(global_step, 1), lambda: tf.identity(global_step))
        loss = tf.cast(step, tf.float32)
        with tf.train.MonitoredSession(hooks=hooks(loss)) as session:
            for _ in range(num_runs):
                session.run(step)


def test_training_lines_count_optimizer_steps_with_accumulation(log_lines):
    """With two micro-batches per update, 6 runs make steps 1, 2, 3 of 3:
    a line after each completed update, never "step 0"."""
    _run_hooked(lambda loss: [training_progress.ThroughputHook(
        loss, examples_per_step=4, num_train_steps=3, every_seconds=0, runs_per_step=2)],
        num_runs=6, runs_per_update=2)
    steps = [line.split(":")[0] for line in log_lines if line.startswith("step ")]
    assert steps == ["step 1 of 3", "step 2 of 3", "step 3 of 3"]


def test_evaluation_progress_ends_with_the_count(log_lines):
    _run_hooked(lambda loss: [training_progress.ProgressHook(
        "Predicting", training_progress.num_batches(10, 4))], num_runs=3, runs_per_update=1)
    assert training_progress.num_batches(10, 4) == 3
    assert log_lines[-1].startswith("Predicting: 3 batches (")
    assert log_lines[-1].endswith(" in all)")


def test_training_headline_gives_the_effective_batch_and_options(log_lines):
    options = training.TrainingOptions(gradient_accumulation_steps=2, recompute_grad=True,
                                       fused_ops=bert_ops.FusedOps(layer_norm=True, dropout=True))
    training_progress.log_training(options, [("Num examples", 100)], num_train_steps=7,
                                   train_batch_size=16)
    assert log_lines == ["***** Running training *****", "  Num examples = 100",
                         "  Batch size = 16 × 2 accumulated = 32", "  Num steps = 7",
                         "  Options = precision fp32, recompute_grad, fused "
                         "layer_norm,dropout"]


def test_example_dump_shows_tokens_length_and_the_real_label(tmp_path, log_lines):
    """A dev row shows its label; a test row (placeholder label) shows none;
    the id lists come at DEBUG level only."""
    vocab = tiny.write_vocab(str(tmp_path), ["good", "film"])
    tokenizer = tokenization.FullTokenizer(vocab, do_lower_case=True)
    for guid in ("dev-1", "test-1"):
        run_classifier.convert_single_example(
            0, run_classifier.InputExample(guid, "Good film", None, label="1"), ["0", "1"],
            8, tokenizer)
    dumps = "\n".join(log_lines).split("*** Example ***")[1:]
    assert [dump.strip().splitlines() for dump in dumps] == [
        ["guid: dev-1", "tokens: [CLS] good film [SEP]", "length: 4", "label: 1 (id = 1)"],
        ["guid: test-1", "tokens: [CLS] good film [SEP]", "length: 4",
         "label: none (test data)"]]
    del log_lines[:]
    tf.logging.set_verbosity(tf.logging.DEBUG)
    run_classifier.convert_single_example(
        0, run_classifier.InputExample("dev-2", "film", None, label="0"), ["0", "1"], 4,
        tokenizer)
    assert "input_ids: 2 6 3 0" in log_lines


def _tfrecord_buffer_sizes(input_fn, params):
    """The buffer_size of every TFRecord reader that `input_fn` builds, in
    its graph or in the functions of its dataset (-1: left unset, which
    TensorFlow 2.16+ reports in a log line)."""
    with tf.Graph().as_default() as graph:
        input_fn(params)
        graph_def = graph.as_graph_def()
    sizes = []
    for nodes in [graph_def.node] + [f.node_def for f in graph_def.library.function]:
        by_name = {node.name: node for node in nodes}
        for node in nodes:
            if node.op.startswith("TFRecordDataset"):
                const = by_name[node.input[2].split(":")[0].lstrip("^")]
                sizes.append(int(tf.make_ndarray(const.attr["value"].tensor)))
    return sizes


def test_tfrecord_readers_give_their_buffer_size(tmp_path):
    """The fine-tuning, pre-training and feature readers set the read
    buffer, so that no run prints "TFRecordDataset `buffer_size` is
    unspecified"."""
    import extract_features
    import run_pretraining
    path = str(tmp_path / "x.tfrecord")
    tf.io.TFRecordWriter(path).close()
    features = {"input_ids": tf.io.FixedLenFeature([4], tf.int64)}
    fns = [
        input_pipeline.tfrecord_input_fn(path, features, is_training=True, drop_remainder=True),
        run_pretraining.input_fn_builder([path], 8, 2, is_training=False),
        run_pretraining.input_fn_builder([path], 8, 2, is_training=True, seed=3),
        extract_features.file_based_input_fn_builder(path, 4)]
    for input_fn in fns:
        sizes = _tfrecord_buffer_sizes(input_fn, {"batch_size": 2})
        assert sizes and set(sizes) == {input_pipeline.TFRECORD_BUFFER_BYTES}


def test_windowed_run_gives_one_step_total(tmp_path, log_lines):
    """run_classifier with --doc_stride and --max_train_steps: the steps
    are counted once, from the windows (not first from the inputs)."""
    import test_long_inputs
    data_dir = str(tmp_path / "data")
    test_long_inputs._write_long_task(data_dir, num_train=40, num_dev=2, num_test=2)
    vocab = tiny.write_vocab(str(tmp_path), test_long_inputs.FILLER + test_long_inputs.SIGNALS)
    config = tiny.write_config(str(tmp_path), vocab_size=len(test_long_inputs.FILLER) + 7)
    flag_values = test_long_inputs._generic_flags(
        data_dir=data_dir, vocab_file=vocab, bert_config_file=config,
        output_dir=str(tmp_path / "out"), do_train=True, doc_stride=7, max_train_steps=1)
    flag_values.update(train_batch_size=8, num_train_epochs=2.0, fused_ops="none")
    tiny.run_main_seeded(run_classifier.main, flag_values)
    (windows,) = [int(line.split("=")[1]) for line in log_lines
                  if line.startswith("  Num windows = ")]
    assert windows > 40
    totals = [line for line in log_lines if line.startswith("Training 1 of the ")]
    assert totals == ["Training 1 of the %d steps of 2.0 epochs (--max_train_steps)"
                      % int(windows / 8 * 2.0)]


def test_run_record_knows_the_vocabulary_by_its_file(tmp_path, monkeypatch, log_lines):
    """The recorded --vocab_file (an absolute path) given again as a
    relative path, or as a copy elsewhere, is the same vocabulary: no
    warning. Another file is warned about."""
    import json
    vocab = tiny.write_vocab(str(tmp_path), ["good", "film"])
    copy = tiny.write_vocab(str(tmp_path), ["good", "film"], name="copy.txt")
    other = tiny.write_vocab(str(tmp_path), ["bad", "film"], name="other.txt")
    record = {"script": "run_classifier.py", "problem_type": "single_label_classification",
              "labels": ["0", "1"], "bert_config": {"vocab_size": 9},
              "flags": {"vocab_file": vocab}}
    (tmp_path / "run_config.json").write_text(json.dumps(record))
    monkeypatch.chdir(tmp_path)
    import run_swag
    record = run_record.read(str(tmp_path))
    warned = {}
    for given in ("vocab.txt", "./vocab.txt", copy, other):
        del log_lines[:]
        run_record.follow(run_swag.Settings(output_dir=str(tmp_path), vocab_file=given,
                                            given=frozenset({"vocab_file"})), record)
        warned[given] = [line for line in log_lines if "differs" in line]
    assert warned == {"vocab.txt": [], "./vocab.txt": [], copy: [], other: [
        "--vocab_file=%s differs from the training run's %s in %s; using %s"
        % (other, vocab, tmp_path / "run_config.json", other)]}


def _save_base_model(config_file, prefix):
    """A BERT checkpoint without a task head at `prefix` (a base model)."""
    import modeling
    config = modeling.BertConfig.from_json_file(config_file)
    with tf.Graph().as_default():
        modeling.BertModel(config, False, tf.zeros([1, 4], tf.int32), scope="bert")
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            tf.train.Saver().save(session, prefix)
    return prefix


def test_restore_lines_name_the_checkpoint_the_weights_come_from(tmp_path, log_lines):
    """Training from a base model names it and the head it lacks; the
    evaluation and prediction after it, and a resumed training, restore
    every variable from the run's checkpoint, and say so."""
    import test_long_inputs
    data_dir = str(tmp_path / "data")
    test_long_inputs._write_long_task(data_dir, num_train=8, num_dev=2, num_test=2)
    vocab = tiny.write_vocab(str(tmp_path), test_long_inputs.FILLER + test_long_inputs.SIGNALS)
    config = tiny.write_config(str(tmp_path), vocab_size=len(test_long_inputs.FILLER) + 7)
    base = _save_base_model(config, str(tmp_path / "base" / "bert_model.ckpt"))
    output_dir = str(tmp_path / "out")
    flag_values = test_long_inputs._generic_flags(
        data_dir=data_dir, vocab_file=vocab, bert_config_file=config, output_dir=output_dir,
        init_checkpoint=base, do_train=True, do_eval=True, do_predict=True)
    flag_values.update(train_batch_size=4, num_train_epochs=1.0, fused_ops="none")

    def restore_lines():
        lines = [line.split("; ", 1)[-1] for line in log_lines
                 if line.startswith(("Trainable variables", "Not in the checkpoint"))]
        del log_lines[:]
        return lines

    tiny.run_main_seeded(run_classifier.main, flag_values)
    trained = os.path.join(output_dir, "model.ckpt-2")
    assert restore_lines() == [
        "%d restored from %s" % (len(tf.train.list_variables(base)), base),
        "Not in the checkpoint, initialised at random: output_weights, output_bias",
        "all restored from %s" % trained, "all restored from %s" % trained]
    flag_values.update(num_train_epochs=2.0, do_eval=False, do_predict=False)
    tiny.run_main_seeded(run_classifier.main, flag_values)
    assert restore_lines() == ["all restored from %s" % trained]


class _FakeTime:
    """A clock for training_progress that only moves when told (seconds)."""

    def __init__(self):
        self.now = 1000.0

    def time(self):
        return self.now


def _train_segment(hook, clock, start_step, num_runs, runs_per_update, seconds_of_run):
    """`num_runs` session runs, from global step `start_step`, of a graph
    whose step advances every `runs_per_update` runs; run i (from 0) moves
    `clock` by seconds_of_run(i)."""

    class Tick(tf.train.SessionRunHook):
        def __init__(self):
            self.runs = 0

        def after_run(self, run_context, run_values):
            clock.now += seconds_of_run(self.runs)
            self.runs += 1

    with tf.Graph().as_default():
        global_step = tf.get_variable(
            "global_step", initializer=tf.constant(start_step, tf.int64), trainable=False,
            collections=[tf.GraphKeys.GLOBAL_VARIABLES, tf.GraphKeys.GLOBAL_STEP])
        runs = tf.Variable(0, dtype=tf.int64, trainable=False)
        count = tf.assign_add(runs, 1)
        step = tf.cond(tf.equal(count % runs_per_update, 0),
                       lambda: tf.assign_add(global_step, 1), lambda: tf.identity(global_step))
        loss = tf.cast(step, tf.float32)
        with tf.train.MonitoredSession(hooks=[Tick(), hook(loss)]) as session:
            for _ in range(num_runs):
                session.run(step)


def test_rate_and_eta_leave_out_start_up_and_count_evaluations(log_lines, monkeypatch):
    """Two micro-batches per update, 10 updates, evaluations after steps 3,
    6 and 9. The first update of each `train` call holds 100 s + 2 s (then
    5 s + 2 s) of start-up, the other runs 1 s: the rate and ETA use the
    1 s runs only; before any evaluation was timed the ETA says how many
    come; after the first (50 s, plus the 7 s restart) it includes them."""
    clock = _FakeTime()
    monkeypatch.setattr(training_progress, "time", clock)
    training = training_progress.TrainingClock(evaluation_steps=[3, 6, 9])
    monkeypatch.setitem(training_progress.TRAINING_CLOCK, "current", training)

    def hook(loss):
        return training_progress.ThroughputHook(loss, examples_per_step=4, num_train_steps=10,
                                                every_seconds=0, runs_per_step=2)

    _train_segment(hook, clock, 0, 6, 2, lambda run: [100.0, 2.0][run] if run < 2 else 1.0)
    clock.now += 50.0  # The evaluation at step 3.
    _train_segment(hook, clock, 3, 4, 2, lambda run: [5.0, 2.0][run] if run < 2 else 1.0)
    steps = [line for line in log_lines if line.startswith("step ")]
    assert steps == [
        "step 1 of 10: loss = 0.5000 (mean of 2 batches), 1 min 42 s with start-up",
        # 4 examples a second; 16 runs of 1 s to go, and 3 evaluations.
        "step 2 of 10: loss = 1.5000 (mean of 2 batches), 4.00 examples/s, ETA 16 s + "
        "3 evaluations",
        "step 3 of 10: loss = 2.5000 (mean of 2 batches), 4.00 examples/s, ETA 14 s + "
        "3 evaluations",
        # 12 runs of 1 s and 2 evaluations of 57 s to go.
        "step 4 of 10: loss = 3.5000 (mean of 2 batches), 7 s with start-up, ETA 2 min 06 s "
        "with 2 evaluations",
        "step 5 of 10: loss = 4.5000 (mean of 2 batches), 4.00 examples/s, ETA 2 min 04 s "
        "with 2 evaluations"]


def test_a_first_line_without_timed_runs_gives_the_start_up(log_lines, monkeypatch):
    clock = _FakeTime()
    monkeypatch.setattr(training_progress, "time", clock)
    _train_segment(lambda loss: training_progress.ThroughputHook(
        loss, examples_per_step=4, num_train_steps=10, every_seconds=30), clock, 0, 3, 1,
        lambda run: 100.0 if run == 0 else 1.0)
    assert [line for line in log_lines if line.startswith("step ")] == [
        "step 1 of 10: loss = 1.0000 (1 batch), 1 min 40 s with start-up",
        "step 3 of 10: loss = 2.5000 (mean of 2 batches), 4.00 examples/s, ETA 7 s"]


def test_once_lets_the_first_record_of_a_message_through_within_its_block(caplog):
    with caplog.at_level(logging.INFO, logger="tensorflow"):
        with logs.once("prediction_loop marked as finished"):
            for _ in range(2):
                tf.logging.info("%s marked as finished", "prediction_loop")
                tf.logging.info("another line")
        tf.logging.info("%s marked as finished", "prediction_loop")
    assert [r.getMessage() for r in caplog.records] == [
        "prediction_loop marked as finished", "another line", "another line",
        "prediction_loop marked as finished"]
    assert not logging.getLogger("tensorflow").filters
