"""The execution layer: runs the scripts' `model_fn`/`input_fn` pairs.

Every script is written against one contract, the TPUEstimator's: a
`model_fn(features, labels, mode, params)` returning a `TPUEstimatorSpec`,
and `input_fn(params)` returning a `tf.data.Dataset`, with the batch size in
`params["batch_size"]`. This module is the only place that knows what runs
that contract:

* TensorFlow <= 2.15 ships the Estimator: `make_estimator` returns a
  TPUEstimator (one device or TPU), or a plain Estimator under a
  tf.distribute strategy.
* TensorFlow >= 2.16 has no Estimator. `make_estimator` then returns a
  `session_runner.SessionRunner`, which drives the same `model_fn` on the graph APIs that
  remain (`tf.compat.v1` sessions, `MonitoredTrainingSession`, `Saver`,
  SessionRunHooks, `tf.compat.v1.metrics`, `tf.data`, `tf.distribute`), and
  writes the same checkpoints, summaries and SavedModels.

The environment variable BERT_RUNTIME=session selects the session runner on a
TensorFlow that still has the Estimator (for comparisons and tests);
BERT_RUNTIME=estimator insists on the Estimator.

Scripts import the mode keys, the spec and the export helpers from here
(`runtime.ModeKeys`, `runtime.TPUEstimatorSpec`, `runtime.PredictOutput`,
`runtime.ServingInputReceiver`), never from `tf.estimator`.
"""

import collections
import os

import tensorflow.compat.v1 as tf
from tensorflow.core.protobuf import rewriter_config_pb2



class ConfigError(ValueError):
    """A run configuration that cannot work (the scripts report it as bad
    input, in one line)."""


class RuntimeChoiceError(ConfigError):
    """BERT_RUNTIME names a runner this TensorFlow cannot provide."""


def _estimator_available():
    try:
        return hasattr(tf, "estimator") and hasattr(tf.estimator, "tpu")
    except ImportError:  # A TF 2.15 install without tensorflow_estimator.
        return False


def _choose_runtime():
    choice = os.environ.get("BERT_RUNTIME", "").strip().lower() or "auto"
    available = _estimator_available()
    if choice == "auto":
        return "estimator" if available else "session"
    if choice == "estimator" and not available:
        raise RuntimeChoiceError(
            "BERT_RUNTIME=estimator: TensorFlow %s has no Estimator (removed in 2.16); "
            "unset BERT_RUNTIME or install TensorFlow 2.15" % tf.__version__)
    if choice not in ("estimator", "session"):
        raise RuntimeChoiceError("BERT_RUNTIME=%s: expected 'estimator' or 'session'" % choice)
    return choice


RUNTIME = _choose_runtime()
USE_ESTIMATOR = RUNTIME == "estimator"

if USE_ESTIMATOR:
    # TensorFlow's wrapper of the tf.compat.v1.estimator.tpu module names it
    # "estimator.tpu" however it is reached, so its first attribute read
    # from this file warned "The name tf.estimator.tpu.TPUEstimatorSpec is
    # deprecated. Please use tf.compat.v1.estimator.tpu.TPUEstimatorSpec
    # instead": the very name used here. That module's rename warnings (only
    # those; every one of them would be the same mistake) are turned off.
    tf.estimator.tpu._tfmw_print_deprecation_warnings = False
    ModeKeys = tf.estimator.ModeKeys
    TPUEstimatorSpec = tf.estimator.tpu.TPUEstimatorSpec
    PredictOutput = tf.estimator.export.PredictOutput
    ServingInputReceiver = tf.estimator.export.ServingInputReceiver

    class TPUEstimator(tf.estimator.tpu.TPUEstimator):
        """TPUEstimator, reading each input_fn's dataset through
        `read_dataset`. The name must stay: an Estimator refuses subclasses
        that override its methods, except those named TPUEstimator."""

        def train(self, input_fn, *args, **kwargs):
            return super().train(_read_through(input_fn), *args, **kwargs)

        def evaluate(self, input_fn, *args, **kwargs):
            return super().evaluate(_read_through(input_fn), *args, **kwargs)

        def predict(self, input_fn, *args, **kwargs):
            return super().predict(_read_through(input_fn), *args, **kwargs)


def _read_through(input_fn):
    """`input_fn`, its dataset read through `read_dataset`."""
    return lambda params: read_dataset(input_fn, params)


# ---------------------------------------------------------------------------
# Run configuration (both runners).

def _session_config(use_xla, num_cpus, use_tpu=False):
    """ConfigProto of the scripts' sessions off TPUs: soft placement, as in
    an Estimator's default; grappler's graph rewrites in two rounds,
    TensorFlow's default (an Estimator's own is one, and oneDNN's fusion of
    GELU into the matmul before it happens in the second); XLA
    auto-clustering with --use_xla; several logical CPUs. None on a TPU
    (TPUEstimator's own)."""
    if use_tpu:
        return None
    config = tf.ConfigProto(allow_soft_placement=True)
    config.graph_options.rewrite_options.meta_optimizer_iterations = (
        rewriter_config_pb2.RewriterConfig.TWO)
    if use_xla:
        # Auto-clustering covers GPUs only unless these XLA flags are set
        # before the first session starts; with them the CPU graph is
        # compiled too.
        os.environ.setdefault("TF_XLA_FLAGS", "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit")
        config.graph_options.optimizer_options.global_jit_level = tf.OptimizerOptions.ON_1
    if num_cpus > 1:
        # A v1 Session creates one CPU device unless told otherwise; the
        # strategy mirrors onto the process's logical CPUs.
        config.device_count["CPU"] = num_cpus
    return config


def make_distribution_strategy(name, num_gpus=0):
    """The tf.distribute strategy named by --distribution_strategy, or None.

    Args:
      name: "none", "mirrored" or "multi_worker_mirrored".
      num_gpus: with "mirrored", how many GPUs (0: all visible ones, or every
        logical CPU when there is no GPU).
    """
    if name in (None, "", "none"):
        return None
    if name == "mirrored":
        devices = None
        if num_gpus:
            devices = ["/gpu:%d" % i for i in range(num_gpus)]
        elif not tf.config.list_logical_devices("GPU"):
            devices = [d.name for d in tf.config.list_logical_devices("CPU")]
        return tf.distribute.MirroredStrategy(devices=devices)
    if name == "multi_worker_mirrored":
        if not USE_ESTIMATOR:
            raise ConfigError(
                "--distribution_strategy=multi_worker_mirrored needs the Estimator "
                "(TensorFlow 2.15, BERT_TF=2.15); on TensorFlow %s the session runner "
                "trains on one machine (mirrored: its GPUs or logical CPUs)" % tf.__version__)
        return tf.distribute.experimental.MultiWorkerMirroredStrategy()
    raise ConfigError("--distribution_strategy: unknown value %r" % name)


def make_run_config(output_dir, save_checkpoints_steps, iterations_per_loop=1000,
                    use_tpu=False, tpu_name=None, tpu_zone=None, gcp_project=None,
                    master=None, num_tpu_cores=8, keep_checkpoint_max=5,
                    tpu_job_name=None, use_xla=False, distribution_strategy="none",
                    num_gpus=0):
    """The run configuration of either runner.

    Args:
      output_dir: model directory (checkpoints, summaries).
      save_checkpoints_steps: checkpoint every this many global steps.
      iterations_per_loop: TPU steps per host round trip.
      use_tpu, tpu_name, tpu_zone, gcp_project, master, num_tpu_cores,
        tpu_job_name: where the TPU is (see the shared flags).
      keep_checkpoint_max: how many recent checkpoints to keep.
      use_xla: compile with XLA auto-clustering (CPU/GPU).
      distribution_strategy, num_gpus: tf.distribute without a TPU.

    Returns:
      A `tf.estimator.tpu.RunConfig` (Estimator) or a
      `session_runner.RunConfig`; both have `.replace(**changes)`.
    """
    strategy = None if use_tpu else make_distribution_strategy(distribution_strategy,
                                                               num_gpus)
    num_cpus = len(tf.config.list_logical_devices("CPU")) if strategy is not None else 1
    session_config = _session_config(use_xla, num_cpus, use_tpu)
    if not USE_ESTIMATOR:
        import session_runner  # It imports this module's shared names.
        return session_runner.RunConfig(
            model_dir=output_dir, save_checkpoints_steps=save_checkpoints_steps,
            keep_checkpoint_max=keep_checkpoint_max, session_config=session_config,
            train_distribute=strategy, iterations_per_loop=iterations_per_loop,
            use_tpu=use_tpu, tpu_name=tpu_name, tpu_zone=tpu_zone, gcp_project=gcp_project,
            master=master, num_tpu_cores=num_tpu_cores, tpu_job_name=tpu_job_name)
    tpu_cluster_resolver = None
    if use_tpu and tpu_name:
        tpu_cluster_resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
            tpu_name, zone=tpu_zone, project=gcp_project)
    return tf.estimator.tpu.RunConfig(
        cluster=tpu_cluster_resolver, master=master, model_dir=output_dir,
        save_checkpoints_steps=save_checkpoints_steps, keep_checkpoint_max=keep_checkpoint_max,
        session_config=session_config, train_distribute=strategy,
        tpu_config=tf.estimator.tpu.TPUConfig(
            tpu_job_name=tpu_job_name, iterations_per_loop=iterations_per_loop,
            num_shards=num_tpu_cores,
            per_host_input_for_training=tf.estimator.tpu.InputPipelineConfig.PER_HOST_V2))


def make_estimator(model_fn, run_config, use_tpu, train_batch_size=None,
                   eval_batch_size=None, predict_batch_size=None):
    """The runner for a TPUEstimator-style `model_fn`.

    Returns an object with `train`, `evaluate`, `predict`,
    `export_saved_model` and `model_dir`, which passes the batch size to
    `model_fn` and the `input_fn`s in `params["batch_size"]` as TPUEstimator
    does (per replica under a tf.distribute strategy):

    * Estimator runtime: a TPUEstimator, or `_DistributedEstimator` when
      `run_config` has a strategy.
    * Session runtime: a `session_runner.SessionRunner`.
    """
    if not USE_ESTIMATOR:
        import session_runner  # It imports this module's shared names.
        return session_runner.SessionRunner(
            model_fn, run_config, train_batch_size=train_batch_size,
            eval_batch_size=eval_batch_size, predict_batch_size=predict_batch_size)
    if run_config.train_distribute is None:
        return TPUEstimator(
            use_tpu=use_tpu, model_fn=model_fn, config=run_config,
            train_batch_size=train_batch_size, eval_batch_size=eval_batch_size,
            predict_batch_size=predict_batch_size)
    return _DistributedEstimator(model_fn, run_config, train_batch_size,
                                 eval_batch_size, predict_batch_size)


def per_replica_batch(batch_sizes, mode, replicas):
    batch = batch_sizes.get(mode)
    if mode == ModeKeys.TRAIN and batch:
        return batch // replicas
    return batch


def check_divisible(train_batch_size, replicas):
    if train_batch_size and train_batch_size % replicas:
        raise ConfigError("--train_batch_size=%d must be divisible by the %d replicas"
                         % (train_batch_size, replicas))


def read_dataset(input_fn, params):
    """`input_fn(params)`'s dataset, with tf.data's autotuning off.

    Autotuning's thread sleeps between rounds for a period that doubles up
    to a minute, and the dataset's iterator, when its session closes, waits
    for the sleep to end: a prediction whose input lasted 35 s sat idle for
    another 12 s before it ended (TensorFlow 2.15 and 2.21). The scripts'
    pipelines have nothing to tune: they parse records and batch them, and
    a prefetch buffer keeps its own sizing without the autotuner.
    """
    options = tf.data.Options()
    options.autotune.enabled = False
    return input_fn(params).with_options(options)


def shard_for_worker(dataset, mode, input_context):
    """Each worker of several takes every n-th training batch, so together
    they consume the stream that one process would."""
    if (mode == ModeKeys.TRAIN and input_context is not None
            and input_context.num_input_pipelines > 1):
        dataset = dataset.shard(input_context.num_input_pipelines,
                                input_context.input_pipeline_id)
    return dataset


# The params key that tells a training input_fn of several workers its share
# of the input: (number of input pipelines, this one's index). An input_fn
# that reads only its share itself (distinct files, say) sets
# params[INPUT_SHARDED] = True in the dict it was given; the batches it
# returns are then not sharded again.
INPUT_PIPELINE = "input_pipeline"
INPUT_SHARDED = "input_sharded"


def _call_input_fn(input_fn, params, mode, input_context):
    """`input_fn(params)` for one worker: with several input pipelines in
    training, params[INPUT_PIPELINE] is set, and unless the input_fn
    reports it read its own share, each worker takes every n-th batch
    (`shard_for_worker`)."""
    params = dict(params)
    if (mode == ModeKeys.TRAIN and input_context is not None
            and input_context.num_input_pipelines > 1):
        params[INPUT_PIPELINE] = (input_context.num_input_pipelines,
                                  input_context.input_pipeline_id)
    dataset = read_dataset(input_fn, params)
    if params.get(INPUT_SHARDED):
        return dataset
    return shard_for_worker(dataset, mode, input_context)


class _DistributedEstimator:
    """A plain Estimator running a TPUEstimator-style model_fn under a
    tf.distribute strategy (Estimator runtime only).

    Each input_fn gets the per-replica batch size (the global batch divided
    by the number of replicas in sync), so one step consumes
    `train_batch_size` examples in all, as with a single device.
    """

    def __init__(self, model_fn, run_config, train_batch_size, eval_batch_size,
                 predict_batch_size):
        self._batch_sizes = {ModeKeys.TRAIN: train_batch_size,
                             ModeKeys.EVAL: eval_batch_size,
                             ModeKeys.PREDICT: predict_batch_size}
        self._replicas = run_config.train_distribute.num_replicas_in_sync
        check_divisible(train_batch_size, self._replicas)

        def estimator_model_fn(features, labels, mode, params, config):
            params = dict(params or {})
            params["batch_size"] = per_replica_batch(self._batch_sizes, mode, self._replicas)
            spec = model_fn(features, labels, mode, params)
            if hasattr(spec, "as_estimator_spec"):
                if spec.scaffold_fn is not None:
                    spec.scaffold_fn()
                spec = spec._replace(scaffold_fn=None).as_estimator_spec()
            return spec

        plain_config = tf.estimator.RunConfig(
            model_dir=run_config.model_dir,
            save_checkpoints_steps=run_config.save_checkpoints_steps,
            keep_checkpoint_max=run_config.keep_checkpoint_max,
            session_config=run_config.session_config,
            train_distribute=run_config.train_distribute,
            log_step_count_steps=run_config.log_step_count_steps,
            tf_random_seed=run_config.tf_random_seed)
        self._estimator = tf.estimator.Estimator(model_fn=estimator_model_fn,
                                                 config=plain_config)

    def _wrap(self, input_fn, mode):
        batch = per_replica_batch(self._batch_sizes, mode, self._replicas)

        def wrapped(params=None, input_context=None):
            params = dict(params or {})
            params["batch_size"] = batch
            return _call_input_fn(input_fn, params, mode, input_context)
        return wrapped

    def train(self, input_fn, max_steps=None, hooks=None, steps=None):
        train_input_fn = self._wrap(input_fn, ModeKeys.TRAIN)
        if not self._estimator.config.cluster_spec:
            return self._estimator.train(train_input_fn, max_steps=max_steps, steps=steps,
                                         hooks=hooks)
        # Several workers (TF_CONFIG): the Estimator trains them only through
        # train_and_evaluate (independent-worker mode). Its evaluation needs
        # an "evaluator" task, which the scripts do not use: they evaluate
        # after training, as on one machine.
        if steps is not None:
            raise ConfigError("multi-worker training takes max_steps, not steps")
        tf.estimator.train_and_evaluate(
            self._estimator,
            tf.estimator.TrainSpec(train_input_fn, max_steps=max_steps, hooks=hooks),
            tf.estimator.EvalSpec(train_input_fn, steps=1))
        return self

    def evaluate(self, input_fn, steps=None, checkpoint_path=None, name=None, hooks=None):
        return self._estimator.evaluate(self._wrap(input_fn, ModeKeys.EVAL),
                                        steps=steps, checkpoint_path=checkpoint_path,
                                        name=name, hooks=hooks)

    def predict(self, input_fn, yield_single_examples=True, checkpoint_path=None, hooks=None):
        return self._estimator.predict(self._wrap(input_fn, ModeKeys.PREDICT),
                                       yield_single_examples=yield_single_examples,
                                       checkpoint_path=checkpoint_path, hooks=hooks)

    def export_saved_model(self, *args, **kwargs):
        return self._estimator.export_saved_model(*args, **kwargs)

    @property
    def model_dir(self):
        return self._estimator.model_dir


# ---------------------------------------------------------------------------
# The contract's names without the Estimator (the session runner's).

if not USE_ESTIMATOR:
    class ModeKeys:
        """The three modes a model_fn is called in (the Estimator's values)."""
        TRAIN = "train"
        EVAL = "eval"
        PREDICT = "infer"

    _SPEC_FIELDS = ("mode", "predictions", "loss", "train_op", "eval_metrics",
                    "export_outputs", "scaffold_fn", "host_call", "training_hooks",
                    "evaluation_hooks", "prediction_hooks")

    class TPUEstimatorSpec(collections.namedtuple("TPUEstimatorSpec", _SPEC_FIELDS)):
        """What a model_fn returns, with the fields and defaults of
        `tf.estimator.tpu.TPUEstimatorSpec`.

        `eval_metrics` is `(metric_fn, tensors)`: `metric_fn(*tensors)` (or
        `metric_fn(**tensors)` for a dict) returns name -> (value, update_op)
        from `tf.metrics`. `scaffold_fn`, if set, is called once the graph is
        built (it initialises variables from a checkpoint on TPU).
        """

        def __new__(cls, mode, predictions=None, loss=None, train_op=None, eval_metrics=None,
                    export_outputs=None, scaffold_fn=None, host_call=None, training_hooks=None,
                    evaluation_hooks=None, prediction_hooks=None):
            return super().__new__(cls, mode, predictions, loss, train_op, eval_metrics,
                                   export_outputs, scaffold_fn, host_call,
                                   list(training_hooks or ()), list(evaluation_hooks or ()),
                                   list(prediction_hooks or ()))

    class PredictOutput:
        """A SavedModel signature returning `outputs` (name -> tensor, or one
        tensor, named "output")."""

        def __init__(self, outputs):
            self.outputs = outputs if isinstance(outputs, dict) else {"output": outputs}

        def as_signature_def(self, receiver_tensors):
            return tf.saved_model.predict_signature_def(receiver_tensors, self.outputs)

    class ServingInputReceiver(
            collections.namedtuple("ServingInputReceiver", ("features", "receiver_tensors"))):
        """Serving inputs: `features` go to the model_fn, `receiver_tensors`
        (name -> placeholder) are the signature's inputs."""

        def __new__(cls, features, receiver_tensors):
            if not isinstance(receiver_tensors, dict):
                receiver_tensors = {"input": receiver_tensors}
            return super().__new__(cls, features, receiver_tensors)
