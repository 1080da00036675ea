"""Tests of run_pretraining.py: the pre-training heads against NumPy, the
input pipeline, input checking, and short end-to-end runs (training shows
learning; restoring a checkpoint with cls/* variables)."""

import json
import logging
import os

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
from absl import flags
from absl.testing import flagsaver

from scriptkit import checkpoints
from scriptkit import dynamic_masking
from scriptkit import errors
from scriptkit import input_pipeline
import modeling
import optimization
from scriptkit import pretraining_records
import run_pretraining
from scriptkit import runtime
import tiny

FLAGS = flags.FLAGS
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SEQ = 32
PRED = 5
NUM_WORDS = 40
VOCAB_SIZE = len(tiny.SPECIAL_TOKENS) + NUM_WORDS
CLS_ID, SEP_ID, MASK_ID = 2, 3, 4
TRAIN_STEPS = 300

RESULT_KEYS = {"global_step", "loss", "masked_lm_accuracy", "masked_lm_loss",
               "next_sentence_accuracy", "next_sentence_loss"}


# ---------------------------------------------------------------------------
# Helpers.

def _int64(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def _float(values):
    return tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))


def make_instances(n, seq=SEQ, pred=PRED, seed=0):
    """Synthetic pre-training instances as feature dicts (lists of ints).

    Each sequence is one word repeated, so a masked word can be predicted from
    any unmasked one: a tiny model learns it in a few hundred steps, while at
    step 0 it guesses (accuracy about 1/vocab). Next-sentence labels are
    random.
    """
    rng = np.random.RandomState(seed)
    instances = []
    for _ in range(n):
        word = len(tiny.SPECIAL_TOKENS) + rng.randint(NUM_WORDS)
        ids = [CLS_ID] + [word] * (seq - 2) + [SEP_ID]
        positions = sorted(rng.choice(np.arange(1, seq - 1), pred, replace=False).tolist())
        input_ids = list(ids)
        for p in positions:
            input_ids[p] = MASK_ID
        instances.append({
            "input_ids": input_ids,
            "input_mask": [1] * seq,
            "segment_ids": [0] * (seq // 2) + [1] * (seq - seq // 2),
            "masked_lm_positions": positions,
            "masked_lm_ids": [ids[p] for p in positions],
            "masked_lm_weights": [1.0] * pred,
            "next_sentence_labels": [int(rng.randint(2))],
        })
    return instances


def write_records(path, instances, drop=(), override=None):
    """Writes instances as tf.train.Examples with the original's feature
    names (masked_lm_weights a float feature, the others int64)."""
    with tf.io.TFRecordWriter(path) as writer:
        for instance in instances:
            features = {}
            for name, values in instance.items():
                if name in drop:
                    continue
                if override and name in override:
                    values = override[name]
                maker = _float if name == "masked_lm_weights" else _int64
                features[name] = maker(values)
            example = tf.train.Example(features=tf.train.Features(feature=features))
            writer.write(example.SerializeToString())
    return path


def run_main(**flag_values):
    """Runs run_pretraining.main in-process with exactly these flags (all
    others at their defaults) and a fixed graph-level seed."""
    argv = ["run_pretraining"] + ["--%s=%s" % (k, v) for k, v in flag_values.items()]
    with flagsaver.flagsaver(), tiny.seeded_runs():
        FLAGS.unparse_flags()
        FLAGS(argv)
        return run_pretraining.main([])


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A tiny vocab/config (no dropout, so eval is deterministic; one layer,
    enough to copy the repeated word, so each run builds a smaller graph)
    and data."""
    d = tmp_path_factory.mktemp("pretrain")
    vocab = tiny.write_vocab(str(d), ["w%d" % i for i in range(NUM_WORDS)])
    config = tiny.write_config(str(d), VOCAB_SIZE, num_hidden_layers=1,
                               hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    data = write_records(str(d / "data.tfrecord"), make_instances(256))
    return {"dir": d, "config": config, "data": data, "vocab": vocab}


def base_flags(setup, output_dir, **overrides):
    values = {
        "bert_config_file": setup["config"],
        "input_file": setup["data"],
        "output_dir": output_dir,
        "max_seq_length": SEQ,
        "max_predictions_per_seq": PRED,
        "train_batch_size": 16,
        "eval_batch_size": 32,
        "learning_rate": 2e-3,
        "num_train_steps": TRAIN_STEPS,
        "num_warmup_steps": TRAIN_STEPS // 10,
        "max_eval_steps": 4,
        "save_checkpoints_steps": 1000,
        "iterations_per_loop": 1000,
    }
    values.update(overrides)
    return values


def read_results(path):
    result = {}
    with open(path) as f:
        for line in f:
            key, value = line.rstrip("\n").split(" = ")
            result[key] = value if value in ("True", "False") else float(value)
    return result


# ---------------------------------------------------------------------------
# The heads, against NumPy.

def _np_layer_norm(x):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-12)


def _np_log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_gather_indexes_matches_numpy():
    rng = np.random.RandomState(1)
    seq = rng.randn(3, 7, 4).astype(np.float32)
    positions = np.array([[0, 6], [3, 3], [5, 1]], dtype=np.int32)
    with tf.Graph().as_default(), tf.Session() as sess:
        out = sess.run(run_pretraining.gather_indexes(tf.constant(seq), tf.constant(positions)))
    expected = np.stack([seq[b, p] for b in range(3) for p in positions[b]])
    np.testing.assert_allclose(out, expected)


def test_masked_lm_output_variables_and_loss_match_numpy():
    config = modeling.BertConfig(vocab_size=11, hidden_size=6, hidden_act="relu",
                                 num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=8)
    rng = np.random.RandomState(2)
    sequence = rng.randn(2, 5, 6).astype(np.float32)
    table = rng.randn(11, 6).astype(np.float32)
    positions = np.array([[1, 4, 0], [2, 3, 0]], dtype=np.int32)
    label_ids = np.array([[7, 3, 0], [10, 5, 0]], dtype=np.int32)
    weights = np.array([[1.0, 1.0, 0.0], [1.0, 0.5, 0.0]], dtype=np.float32)
    with tf.Graph().as_default(), tf.Session() as sess:
        loss, per_example, log_probs = run_pretraining.get_masked_lm_output(
            config, tf.constant(sequence), tf.constant(table), tf.constant(positions),
            tf.constant(label_ids), tf.constant(weights))
        shapes = {v.op.name: v.shape.as_list() for v in tf.global_variables()}
        sess.run(tf.global_variables_initializer())
        # A non-zero bias and LayerNorm parameters make the check meaningful.
        scope = "cls/predictions/"
        variables = {v.op.name: v for v in tf.global_variables()}
        bias = rng.randn(11).astype(np.float32)
        gamma = rng.rand(6).astype(np.float32) + 0.5
        beta = rng.randn(6).astype(np.float32)
        variables[scope + "output_bias"].load(bias, sess)
        variables[scope + "transform/LayerNorm/gamma"].load(gamma, sess)
        variables[scope + "transform/LayerNorm/beta"].load(beta, sess)
        kernel = sess.run(variables[scope + "transform/dense/kernel"])
        dense_bias = rng.randn(6).astype(np.float32)
        variables[scope + "transform/dense/bias"].load(dense_bias, sess)
        loss, per_example, log_probs = sess.run([loss, per_example, log_probs])

    # Exactly the original's variables: the output layer is tied to the
    # embedding table, so no output weights of its own.
    assert shapes == {
        scope + "transform/dense/kernel": [6, 6],
        scope + "transform/dense/bias": [6],
        scope + "transform/LayerNorm/beta": [6],
        scope + "transform/LayerNorm/gamma": [6],
        scope + "output_bias": [11],
    }
    gathered = np.concatenate([sequence[b, positions[b]] for b in range(2)])
    hidden = np.maximum(gathered @ kernel + dense_bias, 0.0)
    hidden = _np_layer_norm(hidden) * gamma + beta
    expected_log_probs = _np_log_softmax(hidden @ table.T + bias)
    expected_per_example = -expected_log_probs[np.arange(6), label_ids.reshape(-1)]
    w = weights.reshape(-1)
    expected_loss = (w * expected_per_example).sum() / (w.sum() + 1e-5)
    np.testing.assert_allclose(log_probs, expected_log_probs, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(per_example, expected_per_example, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(loss, expected_loss, rtol=1e-4)


def test_next_sentence_output_variables_and_loss_match_numpy():
    config = modeling.BertConfig(vocab_size=11, hidden_size=6)
    rng = np.random.RandomState(3)
    pooled = rng.randn(4, 6).astype(np.float32)
    labels = np.array([[0], [1], [1], [0]], dtype=np.int32)
    with tf.Graph().as_default(), tf.Session() as sess:
        outputs = run_pretraining.get_next_sentence_output(
            config, tf.constant(pooled), tf.constant(labels))
        variables = {v.op.name: v for v in tf.global_variables()}
        assert {k: v.shape.as_list() for k, v in variables.items()} == {
            "cls/seq_relationship/output_weights": [2, 6],
            "cls/seq_relationship/output_bias": [2],
        }
        sess.run(tf.global_variables_initializer())
        bias = np.array([0.3, -0.2], dtype=np.float32)
        variables["cls/seq_relationship/output_bias"].load(bias, sess)
        weights = sess.run(variables["cls/seq_relationship/output_weights"])
        loss, per_example, log_probs = sess.run(outputs)
    expected_log_probs = _np_log_softmax(pooled @ weights.T + bias)
    expected_per_example = -expected_log_probs[np.arange(4), labels[:, 0]]
    np.testing.assert_allclose(log_probs, expected_log_probs, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(per_example, expected_per_example, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(loss, expected_per_example.mean(), rtol=1e-5)


def test_metric_fn_weights_masked_lm_predictions():
    # 2 examples x 2 predictions; argmax of the log-probs below: 1, 0, 2, 2.
    log_probs = np.log(np.array([[0.1, 0.8, 0.1], [0.7, 0.2, 0.1],
                                 [0.2, 0.2, 0.6], [0.1, 0.1, 0.8]], dtype=np.float32))
    ids = np.array([[1, 1], [2, 0]], dtype=np.int32)          # right, wrong, right, wrong
    weights = np.array([[1.0, 1.0], [1.0, 0.0]], dtype=np.float32)  # last is padding
    example_loss = np.array([1.0, 2.0, 3.0, 100.0], dtype=np.float32)
    ns_log_probs = np.log(np.array([[0.9, 0.1], [0.3, 0.7]], dtype=np.float32))
    ns_labels = np.array([[0], [0]], dtype=np.int32)
    ns_loss = np.array([0.5, 1.5], dtype=np.float32)
    with tf.Graph().as_default(), tf.Session() as sess:
        metrics = run_pretraining.metric_fn(
            tf.constant(example_loss), tf.constant(log_probs), tf.constant(ids),
            tf.constant(weights), tf.constant(ns_loss), tf.constant(ns_log_probs),
            tf.constant(ns_labels))
        sess.run(tf.local_variables_initializer())
        sess.run({k: v[1] for k, v in metrics.items()})
        values = sess.run({k: v[0] for k, v in metrics.items()})
    assert values["masked_lm_accuracy"] == pytest.approx(2.0 / 3.0)
    assert values["masked_lm_loss"] == pytest.approx(2.0)  # (1 + 2 + 3) / 3
    assert values["next_sentence_accuracy"] == pytest.approx(0.5)
    assert values["next_sentence_loss"] == pytest.approx(1.0)


# ---------------------------------------------------------------------------
# Input pipeline.

def _batches(input_fn, batch_size, count):
    with tf.Graph().as_default(), tf.Session() as sess:
        dataset = input_fn({"batch_size": batch_size})
        next_batch = tf.data.make_one_shot_iterator(dataset).get_next()
        dtypes = {k: v.dtype for k, v in next_batch.items()}
        shapes = {k: v.shape.as_list() for k, v in next_batch.items()}
        return [sess.run(next_batch) for _ in range(count)], dtypes, shapes


def test_input_fn_decodes_records_as_int32_batches(tmp_path):
    instances = make_instances(10, seed=4)
    files = [write_records(str(tmp_path / "a.tfrecord"), instances[:6]),
             write_records(str(tmp_path / "b.tfrecord"), instances[6:])]

    eval_fn = run_pretraining.input_fn_builder(files, SEQ, PRED, is_training=False)
    batches, dtypes, shapes = _batches(eval_fn, 4, 3)
    assert dtypes == {"input_ids": tf.int32, "input_mask": tf.int32, "segment_ids": tf.int32,
                      "masked_lm_positions": tf.int32, "masked_lm_ids": tf.int32,
                      "masked_lm_weights": tf.float32, "next_sentence_labels": tf.int32}
    # drop_remainder=True: static batch dimension, as TPUs need.
    assert shapes["input_ids"] == [4, SEQ]
    assert shapes["masked_lm_positions"] == [4, PRED]
    assert shapes["next_sentence_labels"] == [4, 1]
    # Eval reads the files in order and repeats them (10 records, 12 read).
    order = (instances + instances)[:12]
    for name in instances[0]:
        got = np.concatenate([b[name] for b in batches])
        np.testing.assert_allclose(got, np.array([inst[name] for inst in order]))

    train_fn = run_pretraining.input_fn_builder(files, SEQ, PRED, is_training=True)
    batches, _, shapes = _batches(train_fn, 4, 5)
    assert shapes["input_ids"] == [4, SEQ]
    # Training shuffles and repeats over both files: every record read is
    # one of those written.
    written = {tuple(inst["input_ids"]) for inst in instances}
    seen = {tuple(row) for b in batches for row in b["input_ids"]}
    assert seen <= written
    assert len(seen) > 4


def _tagged_files(directory, num_files, records_per_file):
    """Files whose records say where they come from: input_ids[1] is
    5 + the file's index, input_ids[2] 5 + the record's index."""
    paths = []
    for f in range(num_files):
        instances = make_instances(records_per_file, seed=f)
        for r, instance in enumerate(instances):
            instance["input_ids"][1] = 5 + f
            instance["input_ids"][2] = 5 + r
        paths.append(write_records(str(directory / ("part-%02d.tfrecord" % f)), instances))
    return paths


def _read(files, params, count, seed=None):
    """(file index, record index) of `count` batches of 4 of the training
    input_fn, with `params` (a copy is passed and returned)."""
    params = dict(params, batch_size=4)
    input_fn = run_pretraining.input_fn_builder(files, SEQ, PRED, is_training=True,
                                                seed=seed)
    with tf.Graph().as_default(), tf.Session() as sess:
        next_batch = tf.data.make_one_shot_iterator(input_fn(params)).get_next()
        ids = [sess.run(next_batch["input_ids"]) for _ in range(count)]
    return [(int(row[1]) - 5, int(row[2]) - 5) for batch in ids for row in batch], params


def test_workers_read_distinct_files(tmp_path):
    """With several input pipelines (workers), each reads only its own files,
    every n-th of the list, and tells the runner so; with fewer files than
    workers each reads all (the runner then shards the batches)."""
    files = _tagged_files(tmp_path, 4, 6)
    seen = {}
    for index in range(2):
        read, params = _read(files, {runtime.INPUT_PIPELINE: (2, index)}, 12)
        assert params[runtime.INPUT_SHARDED] is True
        seen[index] = {f for f, _ in read}
    assert seen == {0: {0, 2}, 1: {1, 3}}
    read, params = _read(files[:1], {runtime.INPUT_PIPELINE: (2, 1)}, 3)
    assert runtime.INPUT_SHARDED not in params
    assert {f for f, _ in read} == {0}
    # One pipeline (one process): every file.
    read, params = _read(files, {}, 12)
    assert runtime.INPUT_SHARDED not in params and {f for f, _ in read} == {0, 1, 2, 3}


def test_input_seed_fixes_the_training_order(tmp_path):
    files = _tagged_files(tmp_path, 4, 6)
    first, _ = _read(files, {runtime.INPUT_PIPELINE: (2, 0)}, 15, seed=7)
    again, _ = _read(files, {runtime.INPUT_PIPELINE: (2, 0)}, 15, seed=7)
    other, _ = _read(files, {runtime.INPUT_PIPELINE: (2, 0)}, 15, seed=8)
    assert first == again
    assert first != other
    # Interleaved: the first batches already mix both of the worker's files.
    assert {f for f, _ in first[:12]} == {0, 2}
    # Repeated: more records read (60) than the two files hold (12).
    assert len(set(first)) == 12


def test_seeded_training_segments_continue_where_the_checkpoint_stopped(setup, tmp_path,
                                                                        monkeypatch):
    """With --input_seed, every training segment (between evaluations, or a
    resumed run) reads the one stream of that seed, from the batch after
    those its checkpoint has trained on."""
    calls = []
    builder = run_pretraining.input_fn_builder

    def recording_builder(*args, **kwargs):
        input_fn = builder(*args, **kwargs)
        if not kwargs.get("is_training"):
            return input_fn

        def recording_input_fn(params):
            # The records the segment's checkpoint has trained on, in
            # batches of 16.
            calls.append((kwargs.get("seed"),
                          params.get(input_pipeline.START_RECORD, 0) // 16))
            return input_fn(params)
        return recording_input_fn

    monkeypatch.setattr(run_pretraining, "input_fn_builder", recording_builder)
    output_dir = str(tmp_path / "seeded")
    run_main(**base_flags(setup, output_dir, do_train=True, eval_file=setup["data"],
                          samples_between_eval=32, num_train_steps=4, num_warmup_steps=0,
                          max_eval_steps=1, input_seed=3))
    assert calls == [(3, 0), (3, 2)]
    # Resumed (a longer run in the same folder); the input says where it
    # starts, once.
    messages = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())
    logging.getLogger("tensorflow").addHandler(handler)
    try:
        run_main(**base_flags(setup, output_dir, do_train=True, num_train_steps=5,
                              num_warmup_steps=0, input_seed=3))
    finally:
        logging.getLogger("tensorflow").removeHandler(handler)
    assert calls[2:] == [(3, 4)]
    assert [m for m in messages if m.startswith("Resuming the training input")] == [
        "Resuming the training input after 4 batches (64 records): 0 whole epochs "
        "skipped by count, then 64 records skipped unread"]


def test_resume_position_is_that_of_the_checkpoint_training_starts_from(setup, tmp_path):
    """A latest checkpoint cut short is set aside by the trainer for the one
    before it, and the input goes on from that one's position (there is one
    position, the trainer's), not from the damaged checkpoint's."""
    output_dir = str(tmp_path / "run")
    values = base_flags(setup, output_dir, do_train=True, num_train_steps=4,
                        num_warmup_steps=0, save_checkpoints_steps=2, iterations_per_loop=2,
                        input_seed=3)
    run_main(**values)
    damaged = os.path.join(output_dir, "model.ckpt-4.index")
    with open(damaged, "rb") as f:
        data = f.read()
    with open(damaged, "wb") as f:
        f.write(data[:len(data) // 2])
    messages = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())
    logging.getLogger("tensorflow").addHandler(handler)
    try:
        run_main(**dict(values, num_train_steps=6))
    finally:
        logging.getLogger("tensorflow").removeHandler(handler)
    assert [m for m in messages if m.startswith("Resuming the training input")] == [
        "Resuming the training input after 2 batches (32 records): 0 whole epochs "
        "skipped by count, then 32 records skipped unread"]
    assert tf.train.load_variable(output_dir, "global_step") == 6


def test_max_seq_length_default_is_this_scripts(setup, tmp_path):
    """A process that defined --max_seq_length for another script first
    (run_squad.py: 384) still runs this one with its own default, 128."""
    values = base_flags(setup, str(tmp_path / "out"), do_train=True,
                        max_predictions_per_seq=200)
    del values["max_seq_length"]
    with flagsaver.flagsaver():
        FLAGS.set_default("max_seq_length", 384)
        with pytest.raises(errors.InputError, match=r"^--max_predictions_per_seq=200 must "
                                                    r"be between 1 and --max_seq_length=128$"):
            run_main(**values)


# ---------------------------------------------------------------------------
# Input checking: clear errors naming the flag and file at fault.

@pytest.mark.parametrize("overrides, message", [
    ({"do_train": False, "do_eval": False}, "do_train"),
    ({"input_file": ""}, "--input_file"),
    ({"input_file": "/nonexistent/dir/*.tfrecord"}, "no file matches /nonexistent/dir"),
    ({"bert_config_file": "/nonexistent/bert_config.json"}, "--bert_config_file"),
    ({"max_seq_length": 128, "max_predictions_per_seq": PRED}, "max_position_embeddings"),
    ({"max_seq_length": 48}, "has length 32 but --max_seq_length=48"),
    ({"max_predictions_per_seq": 7}, "has length 5 but --max_predictions_per_seq=7"),
    ({"init_checkpoint": "/nonexistent/model.ckpt"}, "--init_checkpoint"),
    ({"poly_power": 0}, "--poly_power=0.0 must be positive"),
    ({"stop_threshold": 0.7}, "--stop_threshold needs --eval_file"),
    ({"samples_between_eval": 64}, "--samples_between_eval needs --eval_file"),
    ({"eval_file": "/nonexistent/eval.tfrecord"}, "--eval_file: no file matches"),
    ({"eval_file": "DATA", "stop_threshold": 72}, "--stop_threshold=72 must be between"),
    ({"eval_file": "DATA", "samples_start_eval": -1}, "--samples_start_eval=-1 must be"),
    ({"eval_file": "DATA", "distribution_strategy": "multi_worker_mirrored"},
     "--eval_file: evaluation during training is not supported"),
])
def test_bad_flags_raise_input_error(setup, tmp_path, overrides, message):
    values = base_flags(setup, str(tmp_path / "out"), do_train=True)
    values.update(overrides)
    if values.get("eval_file") == "DATA":
        values["eval_file"] = setup["data"]
    with pytest.raises(errors.InputError, match=message):
        run_main(**values)
    assert not os.path.exists(tmp_path / "out" / "checkpoint")


def test_bad_records_raise_input_error(setup, tmp_path):
    instances = make_instances(2)
    cases = {
        "empty.tfrecord": (lambda p: open(p, "wb").close(), "holds no records"),
        "text.tfrecord": (lambda p: open(p, "w").write("just some text\n" * 20),
                          "cannot be read as TFRecord"),
        "missing.tfrecord": (lambda p: write_records(p, instances, drop=("masked_lm_ids",)),
                             "no feature 'masked_lm_ids'"),
        "big_ids.tfrecord": (lambda p: write_records(
            p, instances, override={"masked_lm_ids": [VOCAB_SIZE] * PRED}),
            "token id %d but vocab_size" % VOCAB_SIZE),
    }
    for name, (make, message) in cases.items():
        path = str(tmp_path / name)
        make(path)
        with pytest.raises(errors.InputError, match=message) as info:
            run_main(**base_flags(setup, str(tmp_path / "out"), input_file=path,
                                  do_train=True))
        assert path in str(info.value)


def test_eval_file_records_are_checked_naming_the_flag(setup, tmp_path):
    short = write_records(str(tmp_path / "short.tfrecord"), make_instances(2, seq=16))
    with pytest.raises(errors.InputError,
                       match="--eval_file: feature 'input_ids' of .* has length 16"):
        run_main(**base_flags(setup, str(tmp_path / "out"), do_train=True, eval_file=short))


@pytest.mark.parametrize("args, steps", [
    ((10, 16, 0, 0), [10]),
    ((10, 16, 0, 32), [2, 4, 6, 8, 10]),
    # 20 examples a time with 16 a step: after 20, 40, 60, ... examples,
    # rounded up to whole steps (2, 3, 4, 5, 7, 8, 9; 160 is step 10).
    ((10, 16, 0, 20), [2, 3, 4, 5, 7, 8, 9, 10]),
    # Every 48 examples (steps 3, 6, 9), none before 100 examples.
    ((10, 16, 100, 48), [9, 10]),
    ((10, 16, 0, 1000), [10]),
])
def test_evaluation_steps(args, steps):
    assert run_pretraining.evaluation_steps(*args) == steps


# ---------------------------------------------------------------------------
# As a library, with the flags never parsed.

_LIBRARY_SCRIPT = r"""
import json, sys
import tensorflow.compat.v1 as tf
from absl import flags
import modeling, run_pretraining
from scriptkit import runtime

config_file, data_file, seq, pred = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
assert not flags.FLAGS.is_parsed()
config = modeling.BertConfig.from_json_file(config_file)
model_fn = run_pretraining.model_fn_builder(config, None, 1e-3, 10, 1, False, False)
out = {}
for mode in (runtime.ModeKeys.EVAL, runtime.ModeKeys.TRAIN, runtime.ModeKeys.PREDICT):
    is_training = mode == runtime.ModeKeys.TRAIN
    with tf.Graph().as_default():
        input_fn = run_pretraining.input_fn_builder([data_file], seq, pred, is_training)
        batch = tf.data.make_one_shot_iterator(input_fn({"batch_size": 4})).get_next()
        global_step = tf.train.get_or_create_global_step()
        try:
            spec = model_fn(batch, None, mode, {"batch_size": 4})
        except ValueError as e:
            out["predict_error"] = str(e)
            continue
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            if is_training:
                losses = [float(sess.run([spec.train_op, spec.loss])[1]) for _ in range(2)]
                out["train"] = {"losses": losses, "step": int(sess.run(global_step))}
                continue
            metric_fn, tensors = spec.eval_metrics
            metrics = metric_fn(*tensors)
            sess.run(tf.local_variables_initializer())
            values, loss, _ = sess.run([batch, spec.loss,
                                        {k: v[1] for k, v in metrics.items()}])
            out["batch"] = {k: v.tolist() for k, v in values.items()}
            out["loss"] = float(loss)
            out["eval"] = {k: float(v) for k, v in
                           sess.run({k: v[0] for k, v in metrics.items()}).items()}
out["parsed"] = flags.FLAGS.is_parsed()
print("JSON" + json.dumps(out))
"""


def test_building_blocks_work_as_a_library_with_flags_unparsed(setup):
    """In a fresh process that never parses flags: input_fn_builder reads the
    records back and model_fn_builder's EVAL and TRAIN specs run."""
    out = tiny.run_library_script(_LIBRARY_SCRIPT, setup["config"], setup["data"], SEQ, PRED)
    assert not out["parsed"]
    # Evaluation reads the file in order: the first four instances written.
    for name, values in out["batch"].items():
        np.testing.assert_allclose(values, [inst[name] for inst in make_instances(256)[:4]])
    # The model's loss is the sum of the two heads' (weighted) mean losses.
    assert set(out["eval"]) == RESULT_KEYS - {"global_step", "loss"}
    assert out["loss"] == pytest.approx(
        out["eval"]["masked_lm_loss"] + out["eval"]["next_sentence_loss"], rel=1e-5)
    assert 0.0 <= out["eval"]["masked_lm_accuracy"] <= 1.0
    assert out["train"]["step"] == 2
    assert all(np.isfinite(out["train"]["losses"]))
    assert "train and eval" in out["predict_error"]


# ---------------------------------------------------------------------------
# End to end (tiny model, CPU).

@pytest.fixture(scope="module")
def trained(setup):
    """Trains TRAIN_STEPS steps with --eval_at_start and --do_eval."""
    output_dir = str(setup["dir"] / "trained")
    # The vocabulary and casing are for the run record only.
    run_main(**base_flags(setup, output_dir, do_train=True, do_eval=True,
                          eval_at_start=True, vocab_file=setup["vocab"], do_lower_case=False))
    return output_dir


@pytest.mark.slow
def test_run_record_is_what_a_conversion_needs(trained, setup, tmp_path):
    """A training run records its model (config, sequence length, and the
    vocabulary and casing the command line gave), and --to_hf of its
    checkpoint needs no other flag."""
    import convert_checkpoint
    with open(os.path.join(trained, "run_config.json")) as f:
        record = json.load(f)
    with open(setup["config"]) as f:
        config = json.load(f)
    assert record["script"] == "run_pretraining.py"
    assert record["problem_type"] == "pretraining" and record["labels"] is None
    assert record["flags"] == {"vocab_file": os.path.abspath(setup["vocab"]),
                               "do_lower_case": False, "max_seq_length": SEQ}
    assert {k: record["bert_config"][k] for k in config} == config
    hf = str(tmp_path / "hf")
    result = convert_checkpoint.convert_to_hf(trained, hf)
    assert result["architecture"] == "BertForPreTraining"
    with open(os.path.join(hf, "tokenizer_config.json")) as f:
        tokenizer_config = json.load(f)
    assert tokenizer_config["do_lower_case"] is False
    # Positions after the pre-training's sequences were not trained.
    assert tokenizer_config["model_max_length"] == SEQ
    with open(os.path.join(hf, "vocab.txt"), "rb") as f, open(setup["vocab"], "rb") as g:
        assert f.read() == g.read()


@pytest.mark.slow
def test_train_and_eval_shows_learning(trained):
    start = read_results(os.path.join(trained, run_pretraining.START_RESULTS_FILE))
    end = read_results(os.path.join(trained, "eval_results.txt"))
    assert set(start) == RESULT_KEYS
    assert set(end) == RESULT_KEYS
    assert start["global_step"] == 0
    assert end["global_step"] == TRAIN_STEPS
    # At step 0 the model guesses among 45 tokens; after training it has
    # learned to copy the repeated word.
    assert start["masked_lm_accuracy"] < 0.15
    # (1.0 on each of eight graph seeds; at 150 steps some seeds stayed at
    # 0.50 to 0.70.)
    assert end["masked_lm_accuracy"] > 0.9
    assert end["masked_lm_loss"] < start["masked_lm_loss"] - 1.0
    assert end["loss"] == pytest.approx(end["masked_lm_loss"] + end["next_sentence_loss"],
                                        abs=0.05)
    assert tf.train.latest_checkpoint(trained).endswith("model.ckpt-%d" % TRAIN_STEPS)


@pytest.mark.slow
def test_checkpoint_has_the_original_variable_names(trained, setup):
    names = dict(tf.train.list_variables(os.path.join(trained, "model.ckpt-%d" % TRAIN_STEPS)))
    hidden = 32
    assert names["cls/predictions/output_bias"] == [VOCAB_SIZE]
    assert names["cls/predictions/transform/dense/kernel"] == [hidden, hidden]
    assert names["cls/predictions/transform/LayerNorm/gamma"] == [hidden]
    assert names["cls/seq_relationship/output_weights"] == [2, hidden]
    assert names["cls/seq_relationship/output_bias"] == [2]
    assert names["bert/embeddings/word_embeddings"] == [VOCAB_SIZE, hidden]
    assert names["cls/predictions/output_bias/adam_m"] == [VOCAB_SIZE]


@pytest.mark.slow
def test_init_checkpoint_restores_cls_variables(trained, setup, tmp_path):
    """Training from --init_checkpoint in a fresh output_dir starts from
    exactly the source model (cls/* included) at global step 0."""
    source = os.path.join(trained, "model.ckpt-%d" % TRAIN_STEPS)
    output_dir = str(tmp_path / "restored")
    run_main(**base_flags(setup, output_dir, do_train=True, do_eval=True, eval_at_start=True,
                          init_checkpoint=source, num_train_steps=3, num_warmup_steps=0))

    start = os.path.join(output_dir, "model.ckpt-0")
    for name, _ in tf.train.list_variables(source):
        if name.startswith(("cls/", "bert/")) and "adam_" not in name:
            np.testing.assert_array_equal(tf.train.load_variable(start, name),
                                          tf.train.load_variable(source, name), err_msg=name)
    # Same weights, same data, no dropout: the same evaluation at the start.
    mine = read_results(os.path.join(output_dir, run_pretraining.START_RESULTS_FILE))
    theirs = read_results(os.path.join(trained, "eval_results.txt"))
    for key in ("masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy",
                "next_sentence_loss", "loss"):
        assert mine[key] == pytest.approx(theirs[key], rel=1e-5), key
    # The source's global_step is not restored: this run's own 3 steps ran
    # (as in the original, which restores trainable variables only).
    assert mine["global_step"] == 0
    assert read_results(os.path.join(output_dir, "eval_results.txt"))["global_step"] == 3
    assert tf.train.latest_checkpoint(output_dir).endswith("model.ckpt-3")


@pytest.mark.slow
def test_lamb_with_accumulation_trains_from_the_flags(setup, tmp_path):
    """--optimizer=lamb with --gradient_accumulation_steps, --poly_power and
    --start_warmup_step: the run builds LAMB (its graph), counts optimizer
    updates, and checkpoints the moments under the usual slot names."""
    output_dir = str(tmp_path / "lamb")
    run_main(**base_flags(setup, output_dir, do_train=True, optimizer="lamb",
                          gradient_accumulation_steps=2, train_batch_size=8,
                          num_train_steps=3, num_warmup_steps=1, poly_power=2.0,
                          start_warmup_step=1, learning_rate=1e-2))
    assert tf.train.latest_checkpoint(output_dir).endswith("model.ckpt-3")
    checkpoint = os.path.join(output_dir, "model.ckpt-3")
    names = dict(tf.train.list_variables(checkpoint))
    assert names["cls/predictions/output_bias/adam_v"] == [VOCAB_SIZE]
    assert "cls/predictions/output_bias/grad_accum" in names
    with open(os.path.join(output_dir, "graph.pbtxt")) as f:
        assert "LambOptimizer" in f.read()
    # The accumulated gradients reached the moments.
    moment = tf.train.load_variable(checkpoint, "bert/embeddings/word_embeddings/adam_m")
    assert np.abs(moment).max() > 0


def _summaries(directory):
    """{tag: [(step, value), ...]} of the TensorBoard events in `directory`."""
    values = {}
    for path in sorted(tf.io.gfile.glob(os.path.join(directory, "events.out.tfevents.*"))):
        for event in tf.train.summary_iterator(path):
            for value in event.summary.value:
                values.setdefault(value.tag, []).append((event.step, value.simple_value))
    return {tag: sorted(points) for tag, points in values.items()}


@pytest.mark.slow
def test_training_stops_at_the_target_accuracy(setup, tmp_path):
    """--eval_file with --samples_between_eval and --stop_threshold: an
    evaluation every 20 steps (320 examples), training ends at the first one
    at or above the threshold, and eval_results.txt and TensorBoard say
    where."""
    output_dir = str(tmp_path / "target")
    run_main(**base_flags(setup, output_dir, do_train=True, do_eval=True,
                          eval_file=setup["data"], samples_between_eval=320,
                          stop_threshold=0.3))
    result = read_results(os.path.join(output_dir, "eval_results.txt"))
    step = int(result["global_step"])
    assert step % 20 == 0 and step < TRAIN_STEPS
    assert result["examples_seen"] == step * 16
    assert result["masked_lm_accuracy"] >= 0.3
    assert result["stop_threshold_reached"] == "True"
    assert result["wall_time_seconds"] > 0
    assert tf.train.latest_checkpoint(output_dir).endswith("model.ckpt-%d" % step)
    # One evaluation every 320 examples up to the stop; only the last one
    # reached the threshold.
    curve = _summaries(os.path.join(output_dir, run_pretraining.BY_EXAMPLES_DIR))
    accuracy = curve["masked_lm_accuracy"]
    assert [examples for examples, _ in accuracy] == list(range(320, step * 16 + 1, 320))
    assert accuracy[-1][1] == pytest.approx(result["masked_lm_accuracy"], abs=1e-6)
    assert all(value < 0.3 for _, value in accuracy[:-1])
    # The runner's own evaluation summaries, by step.
    by_step = _summaries(os.path.join(output_dir, "eval"))["masked_lm_accuracy"]
    assert [s for s, _ in by_step] == list(range(20, step + 1, 20))
    # The same command again: the target is met already, nothing trains and
    # one line says so; --stop_threshold=0 trains on.
    with open(os.path.join(output_dir, "eval_results.txt")) as f:
        written = f.read()
    messages = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())
    logging.getLogger("tensorflow").addHandler(handler)
    try:
        run_main(**base_flags(setup, output_dir, do_train=True, do_eval=True,
                              eval_file=setup["data"], samples_between_eval=320,
                              stop_threshold=0.3))
    finally:
        logging.getLogger("tensorflow").removeHandler(handler)
    assert tf.train.latest_checkpoint(output_dir).endswith("model.ckpt-%d" % step)
    assert [m for m in messages if m.startswith("Not training")] == [
        "Not training: %s (step %d) already reached --stop_threshold=0.3 (masked_lm_accuracy"
        " = %.4f in %s); to train on, give --stop_threshold=0 or a higher target"
        % (tf.train.latest_checkpoint(output_dir), step, result["masked_lm_accuracy"],
           os.path.join(output_dir, "eval_results.txt"))]
    with open(os.path.join(output_dir, "eval_results.txt")) as f:
        assert f.read() == written
    run_main(**base_flags(setup, output_dir, do_train=True, eval_file=setup["data"],
                          num_train_steps=step + 1, stop_threshold=0.0))
    assert tf.train.latest_checkpoint(output_dir).endswith("model.ckpt-%d" % (step + 1))


# ---------------------------------------------------------------------------
# Data written without masks (create_pretraining_data.py --dynamic_masking),
# masked as it is read; the seeded stream resumed from a checkpoint.

def write_unmasked(path, num_records, tag=0, seed=0):
    """Unmasked records of `num_records` sequences of one word repeated,
    with input_ids[1] = 5 + tag and input_ids[2] = 5 + the record's index
    (at most NUM_WORDS - 1), and 8 padding positions at the end."""
    encoder = pretraining_records.ExampleEncoder(VOCAB_SIZE, SEQ, PRED)
    rng = np.random.RandomState(seed)
    records = []
    for r in range(num_records):
        word = len(tiny.SPECIAL_TOKENS) + rng.randint(NUM_WORDS)
        ids = [CLS_ID, 5 + tag, 5 + r % NUM_WORDS] + [word] * (SEQ - 12) + [SEP_ID]
        records.append(encoder.encode_unmasked(ids, 10, bool(rng.randint(2))))
    with open(path, "wb") as f:
        f.write(b"".join(pretraining_records.frame_records(records)))
    return path


@pytest.fixture(scope="module")
def unmasked(setup):
    """Three unmasked files (5, 7 and 4 records) and their masking."""
    d = setup["dir"]
    files = [write_unmasked(str(d / ("unmasked-%d.tfrecord" % i)), n, tag=i, seed=i)
             for i, n in enumerate([5, 7, 4])]
    vocab = dynamic_masking.MaskingVocab(str(d / "vocab.txt"))
    masking = dynamic_masking.Masking(vocab, 0.15, PRED, False, random_seed=9)
    return {"files": files, "counts": [5, 7, 4], "masking": masking}


def _stream(unmasked, num_batches, params=None, **kwargs):
    """`num_batches` training batches of 3 of the unmasked files (all
    features, numpy) and the params the input_fn was given."""
    params = dict(params or {}, batch_size=3)
    kwargs.setdefault("masking", unmasked["masking"])
    input_fn = run_pretraining.input_fn_builder(unmasked["files"], SEQ, PRED,
                                                is_training=True, **kwargs)
    with tf.Graph().as_default(), tf.Session() as sess:
        next_batch = tf.data.make_one_shot_iterator(input_fn(params)).get_next()
        return [sess.run(next_batch) for _ in range(num_batches)], params


def _unmask(batch):
    """The examples' original ids (the targets put back): [batch, SEQ]."""
    ids = batch["input_ids"].copy()
    for row in range(len(ids)):
        k = int(batch["masked_lm_weights"][row].sum())
        ids[row, batch["masked_lm_positions"][row, :k]] = batch["masked_lm_ids"][row, :k]
    return ids


def test_unmasked_records_are_masked_as_they_are_read(unmasked):
    """The records come out as masked records do, masked afresh in each epoch
    (16 records, 12 batches of 3 = 2.25 epochs), the same way for the same
    seed; a resumed stream (params[START_RECORD]) goes on exactly where it would
    have, whether whole epochs are skipped by count or read."""
    batches, _ = _stream(unmasked, 12, seed=5)
    assert set(batches[0]) == set(pretraining_records.FEATURE_NAMES)
    assert batches[0]["masked_lm_positions"].shape == (3, PRED)
    assert batches[0]["masked_lm_weights"].dtype == np.float32
    # 24 real tokens: round(3.6) = 4 targets each, [MASK] in most.
    assert all((b["masked_lm_weights"].sum(axis=1) == 4).all() for b in batches)
    assert np.mean([(b["input_ids"] == MASK_ID).sum() for b in batches]) > 0.6 * 12
    # Each example's masks: by (epoch, file, record).
    masks = {}
    for number, batch in enumerate(batches):
        original = _unmask(batch)
        for row in range(3):
            epoch = (number * 3 + row) // 16
            key = (epoch, int(original[row, 1]) - 5, int(original[row, 2]) - 5)
            masks[key] = tuple(batch["masked_lm_positions"][row])
    assert len({k[1:] for k in masks if k[0] == 0}) == 16
    changed = [masks[(0,) + k[1:]] != masks[k] for k in masks if k[0] == 1]
    assert sum(changed) >= 0.7 * len(changed)

    again, _ = _stream(unmasked, 12, seed=5)
    other, _ = _stream(unmasked, 12, seed=6)
    for name in batches[0]:
        assert all(np.array_equal(a[name], b[name]) for a, b in zip(batches, again))
    assert not all(np.array_equal(a["input_ids"], b["input_ids"]) for a, b in zip(batches, other))
    for skip in (4, 7):  # 12 and 21 records: in the first epoch, and past it.
        for counts in (unmasked["counts"], None):
            resumed, _ = _stream(unmasked, 12 - skip,
                                 params={input_pipeline.START_RECORD: skip * 3}, seed=5,
                                 records_per_file=counts)
            for name in batches[0]:
                for a, b in zip(batches[skip:], resumed):
                    np.testing.assert_array_equal(a[name], b[name])


def test_two_workers_draw_the_masks_of_one_process(unmasked):
    """With files split between two workers, each example of an epoch gets
    the masks one process gives it."""
    def masks_of(batches):
        out = {}
        for batch in batches:
            original = _unmask(batch)
            for row in range(3):
                out[(int(original[row, 1]), int(original[row, 2]))] = (
                    tuple(batch["input_ids"][row]), tuple(batch["masked_lm_positions"][row]))
        return out
    single = masks_of(_stream(unmasked, 5, seed=5)[0])  # 15 of the epoch's 16
    workers = {}
    for index in range(2):
        # Worker 0 reads files 0 and 2 (9 records), worker 1 file 1 (7).
        batches, params = _stream(unmasked, 2, {runtime.INPUT_PIPELINE: (2, index)}, seed=5)
        assert params[runtime.INPUT_SHARDED] is True
        workers.update(masks_of(batches))
    shared = set(single) & set(workers)
    assert len(shared) >= 8
    assert all(single[k] == workers[k] for k in shared)


def test_input_files_of_both_kinds_are_refused(setup, unmasked, tmp_path):
    with pytest.raises(errors.InputError,
                       match="--input_file mixes records with masks .*data.tfrecord.* and "
                             "records written with --dynamic_masking .*unmasked-0"):
        run_main(**base_flags(setup, str(tmp_path / "out"), do_train=True,
                              input_file=setup["data"] + "," + unmasked["files"][0]))
    with pytest.raises(errors.InputError, match="--vocab_file is needed"):
        run_main(**base_flags(setup, str(tmp_path / "out"), do_train=True,
                              input_file=unmasked["files"][0]))
    assert not os.path.exists(tmp_path / "out" / "checkpoint")


def _variables(output_dir):
    checkpoint = tf.train.latest_checkpoint(output_dir)
    return {name: tf.train.load_variable(checkpoint, name)
            for name, _ in tf.train.list_variables(checkpoint)}


@pytest.mark.slow
def test_interrupted_seeded_run_ends_as_an_uninterrupted_one(setup, unmasked, tmp_path):
    """A seeded run on unmasked data, 2 batches an update, stopped by a
    SIGTERM during its 5th micro-batch (one into the 3rd update) and run
    again (the same command) ends at step 5 with the variables of a run
    straight to 5 (no dropout in the tiny config): it trained on the same
    batches with the same masks, the stopped cycle's micro-batch included."""
    flags_ = dict(do_train=True, input_file=",".join(unmasked["files"]),
                  vocab_file=str(setup["dir"] / "vocab.txt"), random_seed=9,
                  masked_lm_prob=0.15, do_whole_word_mask=False, input_seed=4,
                  train_batch_size=4, gradient_accumulation_steps=2,
                  num_warmup_steps=1, learning_rate=1e-2, save_checkpoints_steps=1)
    # (Seeded initialisation: both runs start from the same weights.)
    straight = str(tmp_path / "straight")
    tiny.run_main_seeded(run_pretraining.main,
                         base_flags(setup, straight, num_train_steps=5, **flags_))
    resumed = str(tmp_path / "resumed")
    stopped = tiny.run_main_interrupted(
        run_pretraining.main, base_flags(setup, resumed, num_train_steps=5, **flags_), at=5)
    assert stopped.endswith("model.ckpt-2")
    a, b = _variables(straight), _variables(resumed)
    assert a.keys() == b.keys()
    assert int(b["global_step"]) == 5
    moved = 0
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-5, atol=1e-6, err_msg=name)
        moved += name.endswith("adam_m")
    assert moved


def test_consumed_batches_counts_the_saved_micro_step(tmp_path):
    """The stream position of a checkpoint saved in the middle of an
    accumulation cycle: updates × batches an update + micro-batches done."""
    with tf.Graph().as_default(), tf.Session() as sess:
        step = tf.train.get_or_create_global_step()
        micro = tf.get_variable(optimization.MICRO_STEP_VARIABLE, shape=[], dtype=tf.int64,
                                initializer=tf.constant_initializer(3), trainable=False)
        sess.run(tf.global_variables_initializer())
        sess.run(step.assign(7))
        tf.train.Saver([step, micro]).save(sess, str(tmp_path / "model.ckpt"), global_step=7)
    assert checkpoints.consumed_batches(str(tmp_path), 4) == 7 * 4 + 3
    assert checkpoints.consumed_batches(str(tmp_path), 1) == 7
    assert checkpoints.consumed_batches(str(tmp_path / "none"), 4) == 0
