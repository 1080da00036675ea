"""saved_model_writer.write_saved_model and the checkpoint it restores: a
checkpoint without a global step (converted or pre-trained elsewhere)
exports, a variable no signature reads may be absent (it keeps its initial
value), and a variable a signature reads that the checkpoint lacks is one
line of bad input, with nothing written."""

import os

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from scriptkit import saved_model_writer
from scriptkit.errors import InputError


def _checkpoint(path, **values):
    """A checkpoint holding exactly `values` (name -> float32 array), no
    global step."""
    with tf.Graph().as_default(), tf.Session() as session:
        for name, value in values.items():
            tf.get_variable(name, initializer=np.asarray(value, np.float32))
        session.run(tf.global_variables_initializer())
        return tf.train.Saver().save(session, path, write_meta_graph=False)


def _build_signatures(in_loop=False):
    """y = x * w + b; an unused variable `pooler` stands for a layer that no
    signature runs. `in_loop`: y is computed in a loop in the graph (as
    serving.run_in_chunks runs a model), whose body reads `pooler` into
    an op no output uses (the body's function captures it all the same)."""
    x = tf.placeholder(tf.float32, [None, 2], name="x")
    w = tf.get_variable("w", [2], initializer=tf.zeros_initializer())
    b = tf.get_variable("b", [], initializer=tf.zeros_initializer())
    pooler = tf.get_variable("pooler", [3], initializer=tf.constant_initializer(7.0))
    if not in_loop:
        return {"serving_default": tf.saved_model.predict_signature_def(
            {"x": x}, {"y": x * w + b})}

    def body(index, y):
        tf.reduce_sum(pooler.read_value())  # Read, used by nothing.
        return index + 1, y + x * w + b

    _, y = tf.while_loop(lambda index, _: index < 1, body, [0, tf.zeros_like(x)])
    return {"serving_default": tf.saved_model.predict_signature_def({"x": x}, {"y": y})}


@pytest.mark.parametrize("in_loop", [False, True])
def test_checkpoint_without_global_step_or_unread_variables_exports(tmp_path, in_loop):
    checkpoint = _checkpoint(str(tmp_path / "model.ckpt"), w=[2.0, -1.0], b=0.5)
    assert "global_step" not in dict(tf.train.list_variables(checkpoint))
    path = saved_model_writer.write_saved_model(lambda: _build_signatures(in_loop), checkpoint,
                                                str(tmp_path / "export"))
    with tf.Graph().as_default(), tf.Session() as session:
        meta_graph = tf.saved_model.loader.load(session, ["serve"], path)
        signature = meta_graph.signature_def["serving_default"]
        y = session.run(signature.outputs["y"].name,
                        {signature.inputs["x"].name: [[1.0, 1.0], [3.0, 2.0]]})
        np.testing.assert_allclose(y, [[2.5, -0.5], [6.5, -1.5]])
        values = {v.op.name: v for v in tf.global_variables()}
        assert session.run(values["global_step"]) == 0
        np.testing.assert_array_equal(session.run(values["pooler"]), [7.0] * 3)


@pytest.mark.parametrize("in_loop", [False, True])
def test_a_read_variable_missing_fails_in_one_line(tmp_path, in_loop):
    checkpoint = _checkpoint(str(tmp_path / "model.ckpt"), w=[2.0, -1.0])
    export_dir = str(tmp_path / "export")
    with pytest.raises(InputError) as raised:
        saved_model_writer.write_saved_model(lambda: _build_signatures(in_loop), checkpoint,
                                             export_dir)
    assert str(raised.value) == ("checkpoint %s lacks 1 variable(s) the export reads, e.g. b"
                                 % checkpoint)
    assert not os.path.exists(export_dir)


def test_a_failed_write_removes_its_temporary_folder(tmp_path):
    """A write that fails after the SavedModel is in its temp-<stamp> folder
    (an assets.extra file that is not there) raises and leaves nothing in
    the export folder."""
    checkpoint = _checkpoint(str(tmp_path / "model.ckpt"), w=[2.0, -1.0], b=0.5)
    export_dir = tmp_path / "export"
    with pytest.raises(tf.errors.NotFoundError):
        saved_model_writer.write_saved_model(
            _build_signatures, checkpoint, str(export_dir),
            assets_extra=[str(tmp_path / "absent.json")])
    assert os.listdir(export_dir) == []


def test_an_interrupted_write_removes_only_its_own_temporary_folder(tmp_path, monkeypatch):
    """Ctrl-C at the last step (the fingerprint) removes this write's
    temp-<stamp> folder; another writer's folder of the same second stays,
    and this write took the next free stamp."""
    checkpoint = _checkpoint(str(tmp_path / "model.ckpt"), w=[2.0, -1.0], b=0.5)
    export_dir = tmp_path / "export"
    (export_dir / "temp-1000").mkdir(parents=True)
    (export_dir / "temp-1000" / "theirs").write_text("x")
    monkeypatch.setattr(saved_model_writer.time, "time", lambda: 1000.4)
    seen = []

    def interrupt(path):
        seen.append((os.path.basename(path), sorted(os.listdir(path))))
        raise KeyboardInterrupt

    monkeypatch.setattr(saved_model_writer, "_write_fingerprint", interrupt)
    with pytest.raises(KeyboardInterrupt):
        saved_model_writer.write_saved_model(_build_signatures, checkpoint, str(export_dir))
    assert seen == [("temp-1001", ["saved_model.pb", "variables"])]
    assert os.listdir(export_dir) == ["temp-1000"]
    assert os.listdir(export_dir / "temp-1000") == ["theirs"]
