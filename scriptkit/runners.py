"""The runner of a script's `model_fn`: its run configuration and the
runner itself (`make_run_config`, `make_estimator`), for the runtime
`runtime` chose: TensorFlow's TPUEstimator (or a plain Estimator under a
tf.distribute strategy) where TensorFlow has the Estimator, else the
session runner (`session_runner.SessionRunner`). Both follow the contract
of `runtime` (model_fn, input_fn, TPUEstimatorSpec).

In: a model_fn and the run's settings. Out: an object with `train`,
`evaluate`, `predict`, `export_saved_model` and `model_dir`. Imports
TensorFlow.
"""

import os

import tensorflow.compat.v1 as tf
from tensorflow.core.protobuf import rewriter_config_pb2

from scriptkit import runtime
from scriptkit import session_runner
from scriptkit.runtime import ConfigError, ModeKeys

if runtime.USE_ESTIMATOR:
    class TPUEstimator(tf.estimator.tpu.TPUEstimator):
        """TPUEstimator, reading each input_fn's dataset through
        `read_dataset`. The name must stay: an Estimator refuses subclasses
        that override its methods, except those named TPUEstimator."""

        def train(self, input_fn, *args, **kwargs):
            with runtime.last_loss_worded():
                return super().train(_read_through(input_fn), *args, **kwargs)

        def evaluate(self, input_fn, *args, **kwargs):
            return super().evaluate(_read_through(input_fn), *args, **kwargs)

        def predict(self, input_fn, *args, **kwargs):
            return super().predict(_read_through(input_fn), *args, **kwargs)



def _read_through(input_fn):
    """`input_fn`, its dataset read through `read_dataset`."""
    return lambda params: runtime.read_dataset(input_fn, params)


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
        if not runtime.USE_ESTIMATOR:
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
    if not runtime.USE_ESTIMATOR:
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
    if not runtime.USE_ESTIMATOR:
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
        runtime.check_divisible(train_batch_size, self._replicas)

        def estimator_model_fn(features, labels, mode, params, config):
            params = dict(params or {})
            params["batch_size"] = runtime.per_replica_batch(self._batch_sizes, mode,
                                                             self._replicas)
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
        batch = runtime.per_replica_batch(self._batch_sizes, mode, self._replicas)

        def wrapped(params=None, input_context=None):
            params = dict(params or {})
            params["batch_size"] = batch
            return runtime.call_input_fn(input_fn, params, mode, input_context)
        return wrapped

    def train(self, input_fn, max_steps=None, hooks=None, steps=None):
        with runtime.last_loss_worded():
            return self._train(input_fn, max_steps, hooks, steps)

    def _train(self, input_fn, max_steps, hooks, steps):
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
