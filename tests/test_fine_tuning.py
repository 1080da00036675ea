"""fine_tuning's model_fn skeleton (`task_model_fn`) and its helpers, on a
toy head of one weight matrix, against values computed in NumPy."""

import numpy as np
import pytest
import tensorflow.compat.v1 as tf


from scriptkit import task_model
from scriptkit import runtime

M = runtime.ModeKeys
X = np.array([[1.0, 2.0], [0.5, -1.0], [-2.0, 0.25]], np.float32)
LABELS = np.array([1, 0, 0], np.int32)
REAL = np.array([1, 1, 0], np.int32)
W0 = np.array([[0.5, -0.25], [0.125, 1.0]], np.float32)  # [classes, inputs]


def _features(with_labels=True):
    features = {"input_ids": tf.constant(np.zeros((3, 4), np.int32)),
                "x": tf.constant(X)}
    if with_labels:
        features["label_ids"] = tf.constant(LABELS)
        features["is_real_example"] = tf.constant(REAL)
    return features


def _build_head(features, mode):
    """Softmax of x @ w^T over two classes, w starting at W0."""
    w = tf.get_variable("toy/w", initializer=tf.constant(W0))
    logits = tf.matmul(features["x"], w, transpose_b=True)
    label_ids, is_real_example = task_model.example_labels(features)
    per_example_loss = -tf.reduce_sum(
        tf.one_hot(label_ids, 2) * tf.nn.log_softmax(logits), axis=-1)
    probabilities = tf.nn.softmax(logits)
    return task_model.Head(
        loss=tf.reduce_mean(per_example_loss),
        eval_metrics=(task_model.loss_and_accuracy(),
                      [per_example_loss, label_ids, logits, is_real_example]),
        predictions={"probabilities": probabilities, "logits": logits},
        export_outputs={"probabilities": probabilities})


def _numpy_head(w):
    logits = X @ w.T
    log_probs = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return logits, np.exp(log_probs), -log_probs[np.arange(3), LABELS]


def _model_fn(build_head=_build_head, init_checkpoint=None, **kwargs):
    return task_model.task_model_fn(build_head, init_checkpoint, 0.1, 10, 0, False, None,
                                     **kwargs)


def _run(spec, fetches):
    with tf.Session() as sess:
        sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
        return sess.run(fetches)


def test_each_mode_gets_the_heads_part():
    logits, probabilities, losses = _numpy_head(W0)
    with tf.Graph().as_default():
        spec = _model_fn(passed_through=("label_ids", "is_real_example", "absent"))(
            _features(), None, M.PREDICT, {})
        out = _run(spec, spec.predictions)
        # The head's predictions, then the features passed through as they came.
        assert list(out) == ["probabilities", "logits", "label_ids", "is_real_example"]
        np.testing.assert_allclose(out["probabilities"], probabilities, rtol=1e-5)
        np.testing.assert_array_equal(out["is_real_example"], REAL)
        signature = spec.export_outputs[tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY]
        assert list(signature.outputs) == ["probabilities"]

    with tf.Graph().as_default():
        spec = _model_fn()(_features(), None, M.EVAL, {})
        metric_fn, tensors = spec.eval_metrics
        metrics = metric_fn(*tensors)
        with tf.Session() as sess:
            sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
            sess.run({k: update for k, (_, update) in metrics.items()})
            values = sess.run({k: value for k, (value, _) in metrics.items()})
        real = REAL.astype(bool)
        # The padding example (is_real_example 0) counts in neither metric.
        assert values["eval_loss"] == pytest.approx(losses[real].mean(), rel=1e-5)
        assert values["eval_accuracy"] == pytest.approx(
            np.mean(logits.argmax(axis=1)[real] == LABELS[real]))

    with tf.Graph().as_default():
        tf.train.get_or_create_global_step()
        spec = _model_fn()(_features(), None, M.TRAIN, {"batch_size": 3})
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            loss, _ = sess.run([spec.loss, spec.train_op])
            step = sess.run(tf.train.get_global_step())
        assert loss == pytest.approx(losses.mean(), rel=1e-5)
        assert step == 1


def test_training_starts_from_the_init_checkpoint(tmp_path):
    w = np.array([[2.0, 0.0], [0.0, -3.0]], np.float32)
    checkpoint = str(tmp_path / "model.ckpt")
    with tf.Graph().as_default():
        tf.get_variable("toy/w", initializer=tf.constant(w))
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            tf.train.Saver().save(sess, checkpoint, write_meta_graph=False)
    with tf.Graph().as_default():
        spec = _model_fn(init_checkpoint=checkpoint)(_features(False), None, M.PREDICT, {})
        out = _run(spec, spec.predictions)
    np.testing.assert_allclose(out["logits"], _numpy_head(w)[0], rtol=1e-5)
    assert sorted(out) == ["logits", "probabilities"]


def test_a_mode_the_task_has_not_raises():
    def predict_only(features, mode):
        w = tf.get_variable("toy/w", initializer=tf.constant(W0))
        return task_model.Head(predictions={"logits": tf.matmul(features["x"], w)})

    for mode in (M.TRAIN, M.EVAL):
        with tf.Graph().as_default():
            with pytest.raises(ValueError, match="test_fine_tuning's model_fn supports "
                                                 "infer, not %s" % mode):
                _model_fn(predict_only, modes=(M.PREDICT,))(
                    _features(), None, mode, {"batch_size": 3})
    with tf.Graph().as_default():
        # No features passed through unless named.
        spec = _model_fn(predict_only, modes=(M.PREDICT,))(_features(), None, M.PREDICT, {})
        assert list(spec.predictions) == ["logits"]


def test_example_labels_of_a_serving_request_are_zeros_and_real():
    with tf.Graph().as_default():
        features = _features(with_labels=False)
        label_ids, is_real_example = task_model.example_labels(features, [5], tf.float32)
        given = task_model.example_labels(_features())
        out = _run(None, [label_ids, is_real_example, given])
    assert out[0].dtype == np.float32
    np.testing.assert_array_equal(out[0], np.zeros((3, 5)))
    np.testing.assert_array_equal(out[1], np.ones(3))
    np.testing.assert_array_equal(out[2][0], LABELS)
    assert out[2][1].dtype == np.float32
    np.testing.assert_array_equal(out[2][1], REAL)
