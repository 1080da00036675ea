"""Tests of evaluation.py (evaluation during training, the best checkpoint
kept) and of fine_tuning.iter_predictions (the scripts' predict loop), with
stand-in runners whose checkpoints are real."""

import logging
import os

import pytest
import tensorflow.compat.v1 as tf

from scriptkit import errors
from scriptkit import evaluation
from scriptkit import fine_tuning


def _save_checkpoint(model_dir, step, value=0.0):
    """Saves model.ckpt-<step> in `model_dir` with global_step = `step` and
    a variable "weight" = `value`. Returns its path."""
    with tf.Graph().as_default():
        global_step = tf.train.get_or_create_global_step()
        tf.Variable(value, name="weight")
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            session.run(global_step.assign(step))
            saver = tf.train.Saver(max_to_keep=None)
            return saver.save(session, os.path.join(model_dir, "model.ckpt"),
                              global_step=step)


class _Trainer:
    """A stand-in `training.ResumableTrainer`: `train` saves a checkpoint at
    max_steps (its weight the step's value in `weights`); the calls are
    recorded."""

    def __init__(self, model_dir, weights=None):
        self.model_dir = model_dir
        self.weights = weights or {}
        self.trained_to = []
        self.evaluation_steps = None

    def evaluations_at(self, steps):
        self.evaluation_steps = list(steps)

    def train(self, input_fn, max_steps):
        assert input_fn == "train input"
        self.trained_to.append(max_steps)
        _save_checkpoint(self.model_dir, max_steps, self.weights.get(max_steps, 0.0))


def _evaluate_weight(checkpoint, step):
    """An evaluate_fn: the checkpoint's step and weight as metrics."""
    return {"global_step": step, "loss": float(tf.train.load_variable(checkpoint, "weight"))}


def test_evaluates_each_step_and_resumes_after_the_last_evaluated(tmp_path):
    model_dir = str(tmp_path)
    trainer = _Trainer(model_dir)
    evaluated = []

    def evaluate_fn(checkpoint, step):
        evaluated.append((os.path.basename(checkpoint), step))
        return {"step": step}

    result, checkpoint = evaluation.train_and_evaluate(
        trainer, "train input", [2, 4, 5], evaluate_fn)
    assert trainer.trained_to == [2, 4, 5]
    assert trainer.evaluation_steps == [2, 4]
    assert evaluated == [("model.ckpt-2", 2), ("model.ckpt-4", 4), ("model.ckpt-5", 5)]
    assert result == {"step": 5}
    assert checkpoint == os.path.join(model_dir, "model.ckpt-5")

    # A run resumed at step 3 goes on to 4 and 5; one that is done does nothing,
    # unless asked to evaluate the last checkpoint all the same.
    for name in tf.io.gfile.listdir(model_dir):
        tf.io.gfile.remove(os.path.join(model_dir, name))
    _save_checkpoint(model_dir, 3)
    trainer.trained_to, evaluated[:] = [], []
    evaluation.train_and_evaluate(trainer, "train input", [2, 4, 5], evaluate_fn)
    assert trainer.trained_to == [4, 5]
    assert [step for _, step in evaluated] == [4, 5]
    trainer.trained_to, evaluated[:] = [], []
    assert evaluation.train_and_evaluate(trainer, "train input", [2, 4, 5],
                                         evaluate_fn) == (None, None)
    assert trainer.trained_to == [] and evaluated == []
    result, _ = evaluation.train_and_evaluate(trainer, "train input", [2, 4, 5], evaluate_fn,
                                              evaluate_when_done=True)
    assert trainer.trained_to == [5] and result == {"step": 5}


def test_stop_ends_training_at_the_first_result_that_asks(tmp_path):
    trainer = _Trainer(str(tmp_path), weights={2: 0.5, 4: 0.9, 6: 0.95})
    result, checkpoint = evaluation.train_and_evaluate(
        trainer, "train input", [2, 4, 6], _evaluate_weight,
        stop=lambda result: result["loss"] >= 0.8)
    assert trainer.trained_to == [2, 4]
    assert result == {"global_step": 4, "loss": pytest.approx(0.9)}
    assert checkpoint.endswith("model.ckpt-4")


def test_best_checkpoint_is_copied_with_its_results(tmp_path, caplog):
    """A loss: the lowest wins (step 4 of losses 0.7, 0.2, 0.4); its copy in
    best/ restores its weight, and best/eval_results.txt holds its
    results."""
    caplog.set_level(logging.INFO, logger="tensorflow")
    model_dir = str(tmp_path / "out")
    best_dir = os.path.join(model_dir, "best")
    trainer = _Trainer(model_dir, weights={2: 0.7, 4: 0.2, 6: 0.4})
    best = evaluation.BestCheckpoint("loss", best_dir)
    evaluation.train_and_evaluate(trainer, "train input", [2, 4, 6], _evaluate_weight, best)
    assert best.path == os.path.join(best_dir, "model.ckpt-4")
    assert best.value == pytest.approx(0.2)
    assert tf.train.latest_checkpoint(best_dir) == best.path
    assert tf.train.load_variable(best.path, "weight") == pytest.approx(0.2)
    assert not tf.io.gfile.glob(os.path.join(best_dir, "model.ckpt-2*"))
    with open(os.path.join(best_dir, "eval_results.txt")) as f:
        assert f.read().splitlines() == ["global_step = 4", "loss = %s" % best.value]
    assert [line for line in caplog.messages if line.startswith("New best")] == [
        "New best checkpoint: step 2, loss = %s (copied to %s)" % (
            float(tf.train.load_variable(os.path.join(model_dir, "model.ckpt-2"), "weight")),
            best_dir),
        "New best checkpoint: step 4, loss = %s (copied to %s)" % (best.value, best_dir)]

    # Any other metric: the highest wins.
    accuracy = evaluation.BestCheckpoint("accuracy", str(tmp_path / "best_accuracy"))
    for step, value in ((2, 0.5), (4, 0.4)):
        accuracy.consider({"accuracy": value}, os.path.join(model_dir, "model.ckpt-%d" % step),
                          step)
    assert accuracy.path.endswith("model.ckpt-2") and accuracy.value == 0.5


def test_best_checkpoint_metric_must_be_a_result(tmp_path):
    best = evaluation.BestCheckpoint("f1", str(tmp_path / "best"))
    with pytest.raises(errors.InputError, match=r"--best_checkpoint_metric=f1 .*: loss"):
        best.consider({"loss": 1.0}, "unused", 1)


class _Predictor:
    """A stand-in runner whose predict yields `num_records` predictions
    from a real session, whose hooks see the session's batches of 2."""

    model_dir = None

    def __init__(self, num_records):
        self.num_records = num_records

    def predict(self, input_fn, checkpoint_path=None, hooks=None):
        assert input_fn == "input" and checkpoint_path == "ckpt"
        with tf.Graph().as_default():
            batch = tf.data.Dataset.range(self.num_records).batch(2).make_one_shot_iterator()
            values = batch.get_next()
            with tf.train.MonitoredSession(hooks=hooks) as session:
                while not session.should_stop():
                    for value in session.run(values):
                        yield {"value": value}


def test_predict_loop_keeps_count_and_ends_the_pass(caplog):
    """The first `count` predictions of 5 records (the rest padding), and
    the progress's last line, logged once the pass has ended."""
    caplog.set_level(logging.INFO, logger="tensorflow")
    predictions = fine_tuning.predict(_Predictor(5), "input", 5, 2, 3, checkpoint="ckpt")
    assert [p["value"] for p in predictions] == [0, 1, 2]
    assert caplog.messages[0] == "Predicting with the weights of ckpt"
    assert caplog.messages[-1].startswith("Predicting: 3 batches (")
    assert caplog.messages[-1].endswith(" in all)")

    caplog.clear()
    values = [p["value"] for p in fine_tuning.iter_predictions(
        _Predictor(5), "input", 5, 2, 5, checkpoint="ckpt", phase="Scoring", unit="features",
        name_weights=False)]
    assert values == [0, 1, 2, 3, 4]
    assert caplog.messages[-1].startswith("Scoring: 5 features (")
    assert not any("weights" in line for line in caplog.messages)

    with pytest.raises(RuntimeError, match="Got 5 predictions for 6 windows"):
        fine_tuning.predict(_Predictor(5), "input", 6, 2, 6, checkpoint="ckpt",
                            what="windows")
