"""session_runner.SessionRunner, the execution layer used where TensorFlow has no
Estimator: checkpoints, resuming after kill -9, evaluation, streaming
prediction, SavedModel export, TPU strategy selection.

The runner is tested directly on every TensorFlow (it needs no Estimator), on
a linear model whose results NumPy can recompute; the scripts' end-to-end
tests exercise it through whichever runner `runtime` selected.
"""

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from scriptkit import checkpoints
from scriptkit import runners
from scriptkit import runtime
from scriptkit import session_runner

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# y = 3 x + 1 on 10 examples; ids let the tests check order and coverage.
X = np.linspace(-1.0, 1.0, 10).astype(np.float32)
Y = (3.0 * X + 1.0).astype(np.float32)

# The model and data, as source shared by the in-process tests and the
# subprocess of the kill -9 test.
MODEL_SOURCE = textwrap.dedent('''
    import time

    import numpy as np
    import tensorflow.compat.v1 as tf

    from scriptkit import runtime
    from scriptkit import session_runner

    X = np.linspace(-1.0, 1.0, 10).astype(np.float32)
    Y = (3.0 * X + 1.0).astype(np.float32)


    class SlowHook(tf.train.SessionRunHook):
        def __init__(self, seconds):
            self.seconds = seconds

        def after_run(self, run_context, run_values):
            time.sleep(self.seconds)


    def model_fn(features, labels, mode, params, step_seconds=0.0):
        w = tf.get_variable("w", [], initializer=tf.zeros_initializer())
        b = tf.get_variable("b", [], initializer=tf.zeros_initializer())
        prediction = w * features["x"] + b
        if mode == runtime.ModeKeys.PREDICT:
            return runtime.TPUEstimatorSpec(
                mode=mode, predictions={"id": features["id"], "y": prediction},
                export_outputs={"serving_default": runtime.PredictOutput({"y": prediction})})
        loss = tf.reduce_mean(tf.square(prediction - features["y"]))
        if mode == runtime.ModeKeys.TRAIN:
            train_op = tf.train.GradientDescentOptimizer(0.1).minimize(
                loss, global_step=tf.train.get_global_step())
            hooks = [SlowHook(step_seconds)] if step_seconds else []
            return runtime.TPUEstimatorSpec(mode=mode, loss=loss, train_op=train_op,
                                            training_hooks=hooks)

        def metric_fn(prediction, y):
            return {"mse": tf.metrics.mean_squared_error(y, prediction)}

        return runtime.TPUEstimatorSpec(mode=mode, loss=loss,
                                        eval_metrics=(metric_fn, [prediction, features["y"]]))


    def input_fn(params, repeat=False):
        dataset = tf.data.Dataset.from_tensor_slices(
            {"id": np.arange(10, dtype=np.int32), "x": X, "y": Y})
        if repeat:
            dataset = dataset.repeat()
        return dataset.batch(params["batch_size"])


    def make_runner(model_dir, step_seconds=0.0, keep=3):
        config = session_runner.RunConfig(model_dir=model_dir, save_checkpoints_steps=10,
                                   keep_checkpoint_max=keep)
        return session_runner.SessionRunner(
            lambda f, l, m, p: model_fn(f, l, m, p, step_seconds), config,
            train_batch_size=4, eval_batch_size=4, predict_batch_size=4)
''')

namespace = {}
exec(compile(MODEL_SOURCE, "<test model>", "exec"), namespace)
make_runner = namespace["make_runner"]
input_fn = namespace["input_fn"]


def train_input_fn(params):
    return input_fn(params, repeat=True)


def _weights(checkpoint):
    return (float(tf.train.load_variable(checkpoint, "w")),
            float(tf.train.load_variable(checkpoint, "b")))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    model_dir = str(tmp_path_factory.mktemp("runner"))
    make_runner(model_dir).train(train_input_fn, max_steps=30)
    return model_dir


def test_training_writes_estimator_style_checkpoints(trained):
    assert tf.train.latest_checkpoint(trained) == os.path.join(trained, "model.ckpt-30")
    state = tf.train.get_checkpoint_state(trained)
    # Steps 0 (start), 10, 20, 30: the last three are kept.
    assert [os.path.basename(p) for p in state.all_model_checkpoint_paths] == [
        "model.ckpt-10", "model.ckpt-20", "model.ckpt-30"]
    assert not os.path.exists(os.path.join(trained, "model.ckpt-0.index"))
    names = {name for name, _ in tf.train.list_variables(os.path.join(trained, "model.ckpt-30"))}
    assert names == {"w", "b", "global_step"}
    assert os.path.exists(os.path.join(trained, "graph.pbtxt"))
    assert tf.train.load_variable(os.path.join(trained, "model.ckpt-30"), "global_step") == 30


def test_training_matches_numpy_gradient_descent(trained):
    w = b = 0.0
    batches = [np.arange(i, i + 4) % 10 for i in range(0, 120, 4)]
    # The repeated dataset is batched across epoch boundaries: 0-3, 4-7, 8 9 0 1, ...
    for indexes in batches[:30]:
        x, y = X[indexes].astype(np.float64), Y[indexes].astype(np.float64)
        error = w * x + b - y
        w, b = w - 0.1 * np.mean(2 * error * x), b - 0.1 * np.mean(2 * error)
    np.testing.assert_allclose(_weights(tf.train.latest_checkpoint(trained)), (w, b),
                               rtol=1e-5)


def test_training_past_max_steps_is_skipped(trained):
    before = sorted(os.listdir(trained))
    make_runner(trained).train(train_input_fn, max_steps=30)
    assert sorted(os.listdir(trained)) == before


def test_evaluate_returns_metrics_loss_and_global_step(trained):
    result = make_runner(trained).evaluate(lambda params: input_fn(params))
    assert set(result) == {"mse", "loss", "global_step"}
    w, b = _weights(os.path.join(trained, "model.ckpt-30"))
    errors = (w * X + b - Y).astype(np.float64) ** 2
    assert result["global_step"] == 30
    assert result["mse"] == pytest.approx(errors.mean(), rel=1e-5)
    # "loss" is the mean of the per-batch losses (batches of 4, 4 and 2).
    assert result["loss"] == pytest.approx(
        np.mean([errors[:4].mean(), errors[4:8].mean(), errors[8:].mean()]), rel=1e-5)
    # A step limit and an older checkpoint.
    older = os.path.join(trained, "model.ckpt-10")
    w, b = _weights(older)
    result = make_runner(trained).evaluate(lambda params: input_fn(params), steps=1,
                                           checkpoint_path=older)
    assert result["global_step"] == 10
    assert result["mse"] == pytest.approx(np.mean((w * X[:4] + b - Y[:4]) ** 2), rel=1e-5)
    assert os.listdir(os.path.join(trained, "eval"))


def test_predict_streams_every_example_once(trained):
    w, b = _weights(tf.train.latest_checkpoint(trained))
    predictions = list(make_runner(trained).predict(lambda params: input_fn(params)))
    # Batches of 4, 4 and a partial batch of 2.
    assert [int(p["id"]) for p in predictions] == list(range(10))
    np.testing.assert_allclose([p["y"] for p in predictions], w * X + b, rtol=1e-5)
    batches = list(make_runner(trained).predict(lambda params: input_fn(params),
                                                yield_single_examples=False))
    assert [len(batch["id"]) for batch in batches] == [4, 4, 2]


def test_predict_without_checkpoint_uses_initial_weights(tmp_path):
    predictions = list(make_runner(str(tmp_path)).predict(lambda params: input_fn(params)))
    assert [float(p["y"]) for p in predictions] == [0.0] * 10


def test_export_saved_model_serves_the_checkpoint(trained, tmp_path):
    export_base = str(tmp_path / "export")

    def receiver_fn():
        x = tf.placeholder(tf.float32, [None], name="x")
        return runtime.ServingInputReceiver({"x": x, "id": tf.zeros_like(x, tf.int32)},
                                            {"x": x})

    path = make_runner(trained).export_saved_model(export_base, receiver_fn)
    assert os.listdir(export_base) == [os.path.basename(path)]
    w, b = _weights(tf.train.latest_checkpoint(trained))
    with tf.Graph().as_default(), tf.Session() as session:
        meta = tf.saved_model.loader.load(session, ["serve"], path)
        signature = meta.signature_def["serving_default"]
        assert set(signature.inputs) == {"x"} and set(signature.outputs) == {"y"}
        served = session.run(signature.outputs["y"].name, {signature.inputs["x"].name: X})
    np.testing.assert_allclose(served, w * X + b, rtol=1e-5)


@pytest.mark.slow
def test_resumes_after_kill_9(tmp_path):
    """A training process killed with SIGKILL mid-run: the rerun restores the
    last checkpoint, continues from its step and ends at max_steps."""
    model_dir = str(tmp_path / "model")
    script = MODEL_SOURCE + textwrap.dedent('''
        import sys
        tf.logging.set_verbosity(tf.logging.INFO)
        runner = make_runner(sys.argv[1], step_seconds=float(sys.argv[2]), keep=10)
        runner.train(lambda params: input_fn(params, repeat=True), max_steps=60)
        print("FINISHED")
    ''')
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    first = subprocess.Popen([sys.executable, "-c", script, model_dir, "0.1"], cwd=ROOT,
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.time() + 240
    # Poll the `checkpoint` state file, which is what the rerun resumes from:
    # the saver writes model.ckpt-N.index a few ms before it rewrites that
    # file, so a kill timed on the .index alone can leave the state one
    # checkpoint behind.
    while checkpoints.checkpoint_step(tf.train.latest_checkpoint(model_dir)) < 20:
        assert first.poll() is None, first.stdout.read().decode()[-3000:]
        assert time.time() < deadline, "no checkpoint 20 within 240 s"
        time.sleep(0.2)
    first.send_signal(signal.SIGKILL)
    first.wait()
    killed_at = tf.train.load_variable(tf.train.latest_checkpoint(model_dir), "global_step")
    assert 20 <= killed_at < 60
    second = subprocess.run([sys.executable, "-c", script, model_dir, "0"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "FINISHED" in second.stdout
    assert "Resuming training from %s" % os.path.join(model_dir, "model.ckpt-%d" % killed_at) \
        in second.stderr
    assert tf.train.latest_checkpoint(model_dir) == os.path.join(model_dir, "model.ckpt-60")


class _FakeResolver:
    made = []

    def __init__(self, tpu, zone, project):
        self.args = (tpu, zone, project)
        _FakeResolver.made.append(self)

    def master(self):
        return "grpc://10.0.0.2:8470" if self.args[0] else "local"


class _FakeTPUStrategy:
    num_replicas_in_sync = 8

    def __init__(self, resolver):
        self.resolver = resolver


def test_tpu_strategy_from_flags_with_stand_ins():
    config = session_runner.RunConfig(model_dir=None, use_tpu=True, tpu_name="my-tpu",
                               tpu_zone="us-central1-b", gcp_project="proj")
    strategy = session_runner.make_tpu_strategy(config, _FakeResolver, _FakeTPUStrategy)
    assert strategy.resolver.args == ("my-tpu", "us-central1-b", "proj")
    assert strategy.tpu_master == "grpc://10.0.0.2:8470"
    # A TPU VM or Colab: no name, the resolver finds the local TPU.
    config = config.replace(tpu_name=None, tpu_zone=None, gcp_project=None)
    strategy = session_runner.make_tpu_strategy(config, _FakeResolver, _FakeTPUStrategy)
    assert strategy.resolver.args == ("", None, None) and strategy.tpu_master == "local"


def test_session_runner_takes_the_tpu_strategy(monkeypatch):
    monkeypatch.setattr(session_runner, "make_tpu_strategy",
                        lambda config: _FakeTPUStrategy(_FakeResolver("t", None, None)))
    config = session_runner.RunConfig(model_dir=None, use_tpu=True, tpu_name="t")
    runner = session_runner.SessionRunner(lambda *args: None, config, train_batch_size=64)
    assert runner._replicas == 8
    assert runner._params(runtime.ModeKeys.TRAIN) == {"batch_size": 8}
    with pytest.raises(runtime.ConfigError, match="divisible by the 8 replicas"):
        session_runner.SessionRunner(lambda *args: None, config, train_batch_size=12)


def test_run_config_replace():
    config = session_runner.RunConfig(model_dir="/m", save_checkpoints_steps=7)
    seeded = config.replace(tf_random_seed=3)
    assert (seeded.tf_random_seed, seeded.save_checkpoints_steps, config.tf_random_seed) == (
        3, 7, None)
    with pytest.raises(ValueError, match="no attribute"):
        config.replace(no_such_option=1)


def test_runtime_choice(monkeypatch):
    monkeypatch.setattr(runtime, "_estimator_available", lambda: False)
    monkeypatch.delenv("BERT_RUNTIME", raising=False)
    assert runtime._choose_runtime() == "session"
    monkeypatch.setenv("BERT_RUNTIME", "estimator")
    with pytest.raises(runtime.RuntimeChoiceError, match="has no Estimator"):
        runtime._choose_runtime()
    monkeypatch.setenv("BERT_RUNTIME", "keras")
    with pytest.raises(runtime.RuntimeChoiceError, match="expected 'estimator' or 'session'"):
        runtime._choose_runtime()
    monkeypatch.setattr(runtime, "_estimator_available", lambda: True)
    monkeypatch.setenv("BERT_RUNTIME", "session")
    assert runtime._choose_runtime() == "session"
    monkeypatch.delenv("BERT_RUNTIME")
    assert runtime._choose_runtime() == "estimator"


def test_default_runtime_follows_tensorflow():
    has_estimator = hasattr(tf, "estimator") and hasattr(tf.estimator, "tpu")
    if os.environ.get("BERT_RUNTIME"):
        pytest.skip("BERT_RUNTIME is set")
    assert runtime.RUNTIME == ("estimator" if has_estimator else "session")


@pytest.mark.parametrize("reads_own_share, expected",
                         [(False, [1, 3, 5]), (True, [0, 1, 2, 3, 4, 5])])
def test_input_of_several_workers(reads_own_share, expected):
    """The input_fn of worker 1 of 2 learns its share in params; unless it
    says it read only that share, the runner gives it every 2nd batch."""
    received = {}

    def input_fn(params):
        received.update(params)
        if reads_own_share:
            params[runtime.INPUT_SHARDED] = True
        return tf.data.Dataset.range(6)

    context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1,
                                         num_replicas_in_sync=2)
    with tf.Graph().as_default(), tf.Session() as sess:
        dataset = runtime.call_input_fn(input_fn, {"batch_size": 1},
                                         runtime.ModeKeys.TRAIN, context)
        next_value = tf.data.make_one_shot_iterator(dataset).get_next()
        values = [int(sess.run(next_value)) for _ in range(len(expected))]
        with pytest.raises(tf.errors.OutOfRangeError):
            sess.run(next_value)
    assert received[runtime.INPUT_PIPELINE] == (2, 1)
    assert values == expected


def test_every_runner_reads_its_input_without_autotuning(tmp_path, monkeypatch):
    """train, evaluate and predict read their input_fn's dataset with
    tf.data's autotuning off, on whichever runner `runtime` chose here
    (a TPUEstimator where TensorFlow has the Estimator): the autotuning
    thread's sleep held up the end of a 35 s prediction by 12 s."""
    seen = []
    read = runtime.read_dataset

    def spy(fn, params):
        dataset = read(fn, params)
        seen.append(dataset.options().autotune.enabled)
        return dataset

    monkeypatch.setattr(runtime, "read_dataset", spy)
    def model_fn(features, labels, mode, params):
        return namespace["model_fn"](features, labels, mode, params)

    runner = runners.make_estimator(
        model_fn, runners.make_run_config(str(tmp_path), 10), use_tpu=False,
        train_batch_size=4, eval_batch_size=4, predict_batch_size=4)
    runner.train(train_input_fn, max_steps=2)
    runner.evaluate(input_fn, steps=1)
    assert len(list(runner.predict(input_fn))) == 10
    assert len(seen) >= 3 and not any(seen)


def test_sessions_rewrite_graphs_in_two_rounds(tmp_path):
    """Off TPUs the run config asks grappler for two rounds of rewrites
    (an Estimator's default is one, and oneDNN's fusion of GELU into the
    matmul happens in the second), with soft placement as an Estimator's
    default has; on a TPU, TPUEstimator keeps its own."""
    from tensorflow.core.protobuf import rewriter_config_pb2
    config = runners.make_run_config(str(tmp_path), 10).session_config
    assert (config.graph_options.rewrite_options.meta_optimizer_iterations
            == rewriter_config_pb2.RewriterConfig.TWO)
    assert config.allow_soft_placement
    assert runners._session_config(use_xla=False, num_cpus=1, use_tpu=True) is None
