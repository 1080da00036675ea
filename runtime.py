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
  `SessionRunner`, which drives the same `model_fn` on the graph APIs that
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

import numpy as np
import tensorflow.compat.v1 as tf
from tensorflow.core.protobuf import rewriter_config_pb2

import saved_model_writer


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
      A `tf.estimator.tpu.RunConfig` (Estimator) or a `RunConfig` of this
      module (session runner); both have `.replace(**changes)`.
    """
    strategy = None if use_tpu else make_distribution_strategy(distribution_strategy,
                                                               num_gpus)
    num_cpus = len(tf.config.list_logical_devices("CPU")) if strategy is not None else 1
    session_config = _session_config(use_xla, num_cpus, use_tpu)
    if not USE_ESTIMATOR:
        return RunConfig(
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
    * Session runtime: a `SessionRunner`.
    """
    if not USE_ESTIMATOR:
        return SessionRunner(model_fn, run_config, train_batch_size=train_batch_size,
                             eval_batch_size=eval_batch_size,
                             predict_batch_size=predict_batch_size)
    if run_config.train_distribute is None:
        return _tpu_estimator_class()(
            use_tpu=use_tpu, model_fn=model_fn, config=run_config,
            train_batch_size=train_batch_size, eval_batch_size=eval_batch_size,
            predict_batch_size=predict_batch_size)
    return _DistributedEstimator(model_fn, run_config, train_batch_size,
                                 eval_batch_size, predict_batch_size)


def _tpu_estimator_class():
    """TPUEstimator, its train, evaluate and predict reading each input_fn's
    dataset through `_dataset` (defined here: only a TensorFlow with the
    Estimator has the base class)."""

    def read_through_dataset(input_fn):
        return lambda params: _dataset(input_fn, params)

    class TPUEstimator(tf.estimator.tpu.TPUEstimator):
        def train(self, input_fn, *args, **kwargs):
            return super().train(read_through_dataset(input_fn), *args, **kwargs)

        def evaluate(self, input_fn, *args, **kwargs):
            return super().evaluate(read_through_dataset(input_fn), *args, **kwargs)

        def predict(self, input_fn, *args, **kwargs):
            return super().predict(read_through_dataset(input_fn), *args, **kwargs)

    return TPUEstimator


def _per_replica_batch(batch_sizes, mode, replicas):
    batch = batch_sizes.get(mode)
    if mode == ModeKeys.TRAIN and batch:
        return batch // replicas
    return batch


def _check_divisible(train_batch_size, replicas):
    if train_batch_size and train_batch_size % replicas:
        raise ConfigError("--train_batch_size=%d must be divisible by the %d replicas"
                         % (train_batch_size, replicas))


def _dataset(input_fn, params):
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


def _shard_for_worker(dataset, mode, input_context):
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
    (`_shard_for_worker`)."""
    params = dict(params)
    if (mode == ModeKeys.TRAIN and input_context is not None
            and input_context.num_input_pipelines > 1):
        params[INPUT_PIPELINE] = (input_context.num_input_pipelines,
                                  input_context.input_pipeline_id)
    dataset = _dataset(input_fn, params)
    if params.get(INPUT_SHARDED):
        return dataset
    return _shard_for_worker(dataset, mode, input_context)


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
        _check_divisible(train_batch_size, self._replicas)

        def estimator_model_fn(features, labels, mode, params, config):
            params = dict(params or {})
            params["batch_size"] = _per_replica_batch(self._batch_sizes, mode, self._replicas)
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
        batch = _per_replica_batch(self._batch_sizes, mode, self._replicas)

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
# The session runner (TensorFlow without the Estimator).

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


class RunConfig:
    """The session runner's run configuration (the attributes the scripts
    and `SessionRunner` read of an Estimator RunConfig)."""

    def __init__(self, model_dir, save_checkpoints_steps=1000, keep_checkpoint_max=5,
                 session_config=None, train_distribute=None, iterations_per_loop=1000,
                 use_tpu=False, tpu_name=None, tpu_zone=None, gcp_project=None, master=None,
                 num_tpu_cores=8, tpu_job_name=None, tf_random_seed=None,
                 save_summary_steps=100):
        self.model_dir = model_dir
        self.save_checkpoints_steps = save_checkpoints_steps
        self.keep_checkpoint_max = keep_checkpoint_max
        self.session_config = session_config
        self.train_distribute = train_distribute
        self.iterations_per_loop = iterations_per_loop
        self.use_tpu = use_tpu
        self.tpu_name = tpu_name
        self.tpu_zone = tpu_zone
        self.gcp_project = gcp_project
        self.master = master
        self.num_tpu_cores = num_tpu_cores
        self.tpu_job_name = tpu_job_name
        self.tf_random_seed = tf_random_seed
        self.save_summary_steps = save_summary_steps

    def replace(self, **changes):
        """A copy with the named attributes changed."""
        unknown = set(changes) - set(vars(self))
        if unknown:
            raise ValueError("RunConfig has no attribute(s) %s" % ", ".join(sorted(unknown)))
        values = dict(vars(self))
        values.update(changes)
        return RunConfig(**values)



class _IteratorInitHook(tf.train.SessionRunHook):
    """Runs the input iterator's initializer once the session exists (and
    again after a recovered session is recreated)."""

    def __init__(self, iterator):
        self._iterator = iterator
        self._initializer = None

    def begin(self):
        # A tf.data iterator has `initializer`; a tf.distribute input
        # iterator makes its initializer ops with `initialize()`.
        initialize = getattr(self._iterator, "initialize", None)
        self._initializer = initialize() if callable(initialize) else self._iterator.initializer

    def after_create_session(self, session, coord):
        session.run(self._initializer)


class _Model:
    """A model_fn's graph for one mode: its spec and the ops to run."""

    def __init__(self, graph, spec, iterator=None):
        self.graph = graph
        self.spec = spec
        self.iterator = iterator
        self.hooks = [] if iterator is None else [_IteratorInitHook(iterator)]


def _features_and_labels(batch):
    """input_fn datasets yield features, or (features, labels)."""
    if isinstance(batch, tuple) and len(batch) == 2:
        return batch
    return batch, None


def _latest_step(model_dir):
    checkpoint = tf.train.latest_checkpoint(model_dir) if model_dir else None
    if not checkpoint:
        return 0, None
    return int(tf.train.load_variable(checkpoint, tf.GraphKeys.GLOBAL_STEP)), checkpoint


class SessionRunner:
    """Runs a TPUEstimator-style model_fn with tf.compat.v1 sessions.

    The interface is the part of TPUEstimator the scripts use: `train`,
    `evaluate`, `predict`, `export_saved_model` and `model_dir`. Files in
    `model_dir` are the Estimator's: `model.ckpt-<step>` checkpoints with the
    model_fn's variable names (a `checkpoint` state file, the last
    `keep_checkpoint_max` kept), `graph.pbtxt`, training summaries, and
    evaluation summaries under `eval/`.

    Training restores the latest checkpoint in `model_dir` if there is one
    (so a killed run resumes from its last checkpoint) and stops at
    `max_steps`. Under a tf.distribute strategy (`run_config.
    train_distribute`), the training model_fn runs once per replica with the
    per-replica batch size; evaluation and prediction run on one device.
    """

    def __init__(self, model_fn, run_config, train_batch_size=None, eval_batch_size=None,
                 predict_batch_size=None):
        self._model_fn = model_fn
        self.config = run_config
        self._strategy = run_config.train_distribute
        if run_config.use_tpu and self._strategy is None:
            self._strategy = make_tpu_strategy(run_config)
        self._replicas = self._strategy.num_replicas_in_sync if self._strategy else 1
        _check_divisible(train_batch_size, self._replicas)
        self._batch_sizes = {ModeKeys.TRAIN: train_batch_size,
                             ModeKeys.EVAL: eval_batch_size,
                             ModeKeys.PREDICT: predict_batch_size}

    @property
    def model_dir(self):
        return self.config.model_dir

    # -- graph building ------------------------------------------------------

    def _params(self, mode):
        return {"batch_size": _per_replica_batch(self._batch_sizes, mode, self._replicas)}

    def _new_graph(self):
        graph = tf.Graph()
        with graph.as_default():
            if self.config.tf_random_seed is not None:
                tf.set_random_seed(self.config.tf_random_seed)
            tf.train.get_or_create_global_step()
        return graph

    def _call_model_fn(self, features, labels, mode):
        spec = self._model_fn(features, labels, mode, self._params(mode))
        if spec.scaffold_fn is not None:
            spec.scaffold_fn()
        return spec

    def _build(self, input_fn, mode):
        """The model_fn's graph on one device, fed by `input_fn`'s dataset."""
        graph = self._new_graph()
        with graph.as_default():
            iterator = tf.data.make_initializable_iterator(
                _dataset(input_fn, self._params(mode)))
            features, labels = _features_and_labels(iterator.get_next())
            spec = self._call_model_fn(features, labels, mode)
        return _Model(graph, spec, iterator)

    def _build_distributed_training(self, input_fn):
        """The training graph with the model_fn called once per replica."""
        strategy = self._strategy
        graph = tf.Graph()
        with graph.as_default(), strategy.scope():
            if self.config.tf_random_seed is not None:
                tf.set_random_seed(self.config.tf_random_seed)
            tf.train.get_or_create_global_step()
            params = self._params(ModeKeys.TRAIN)

            def dataset_fn(input_context):
                return _shard_for_worker(_dataset(input_fn, dict(params)), ModeKeys.TRAIN,
                                         input_context)

            iterator = strategy.make_input_fn_iterator(dataset_fn)
            replica_hooks = []

            def replica_fn(batch):
                features, labels = _features_and_labels(batch)
                spec = self._call_model_fn(features, labels, ModeKeys.TRAIN)
                replica_hooks.append(spec.training_hooks)
                return spec.loss, spec.train_op

            # experimental_run: call_for_each_replica on the next batch, or
            # the replicated TPU computation under a TPUStrategy.
            per_replica_loss, per_replica_train_op = strategy.experimental_run(
                replica_fn, iterator)
            loss = strategy.reduce(tf.distribute.ReduceOp.MEAN, per_replica_loss, axis=None)
            train_op = strategy.group(per_replica_train_op)
            # The hooks of the first replica (as the Estimator does): each
            # replica's own would log the same step several times.
            spec = TPUEstimatorSpec(mode=ModeKeys.TRAIN, loss=loss, train_op=train_op,
                                    training_hooks=replica_hooks[0] if replica_hooks else [])
        return _Model(graph, spec, iterator)

    def _saver(self):
        return tf.train.Saver(sharded=True, max_to_keep=self.config.keep_checkpoint_max,
                              save_relative_paths=True)

    def _master(self):
        """The session master: the TPU's under a TPUStrategy, else local."""
        return getattr(self._strategy, "tpu_master", "")

    # -- train ----------------------------------------------------------------

    def train(self, input_fn, max_steps=None, hooks=None, steps=None):
        """Trains until the global step reaches `max_steps` (or for `steps`
        more steps), resuming from the latest checkpoint in model_dir.

        Checkpoints are written every `save_checkpoints_steps`, at the start
        (step 0 of a new run) and at the end; `hooks` are extra
        SessionRunHooks. Returns self.
        """
        if (max_steps is None) == (steps is None):
            raise ValueError("train: give exactly one of max_steps and steps")
        start_step, checkpoint = _latest_step(self.model_dir)
        if max_steps is not None and start_step >= max_steps:
            tf.logging.info("Skipping training: %s is already at step %d (max_steps %d)",
                            checkpoint, start_step, max_steps)
            return self
        if checkpoint:
            tf.logging.info("Resuming training from %s (step %d)", checkpoint, start_step)
        if self._strategy is not None:
            model = self._build_distributed_training(input_fn)
        else:
            model = self._build(input_fn, ModeKeys.TRAIN)
        spec = model.spec
        with model.graph.as_default():
            tf.summary.scalar("loss", spec.loss)
            stop_hook = (tf.train.StopAtStepHook(last_step=max_steps) if max_steps is not None
                         else tf.train.StopAtStepHook(num_steps=steps))
            all_hooks = (model.hooks + [stop_hook, tf.train.NanTensorHook(spec.loss)]
                         + list(spec.training_hooks) + list(hooks or ()))
            loss = None
            with tf.train.MonitoredTrainingSession(
                    master=self._master(), is_chief=True, checkpoint_dir=self.model_dir,
                    scaffold=tf.train.Scaffold(saver=self._saver()), hooks=all_hooks,
                    save_checkpoint_secs=None,
                    save_checkpoint_steps=self.config.save_checkpoints_steps,
                    save_summaries_steps=self.config.save_summary_steps,
                    save_summaries_secs=None, config=self.config.session_config,
                    log_step_count_steps=None) as session:
                while not session.should_stop():
                    _, loss = session.run([spec.train_op, spec.loss])
        if loss is not None:
            tf.logging.info("Loss for final step: %s.", loss)
        return self

    # -- evaluate -------------------------------------------------------------

    def _session_creator(self, checkpoint_path):
        return tf.train.ChiefSessionCreator(
            scaffold=tf.train.Scaffold(saver=tf.train.Saver(sharded=True)),
            checkpoint_filename_with_path=checkpoint_path, config=self.config.session_config)

    def evaluate(self, input_fn, steps=None, checkpoint_path=None, name=None, hooks=None):
        """Evaluates a checkpoint (default: the latest in model_dir) on the
        input_fn's data, for `steps` batches or until the data ends.

        Returns:
          dict: each metric of the spec's `eval_metrics`, "loss" (the mean
          of the spec's loss over the batches) and "global_step" (of the
          checkpoint), as NumPy values. The same scalars are written as
          summaries to model_dir/eval (or eval_<name>).
        """
        checkpoint_path = checkpoint_path or tf.train.latest_checkpoint(self.model_dir)
        model = self._build(input_fn, ModeKeys.EVAL)
        spec = model.spec
        with model.graph.as_default():
            metrics = {}
            if spec.eval_metrics is not None:
                metric_fn, tensors = spec.eval_metrics
                metrics = dict(metric_fn(**tensors) if isinstance(tensors, dict)
                               else metric_fn(*tensors))
            metrics["loss"] = tf.metrics.mean(spec.loss)
            values = {name_: value for name_, (value, _) in metrics.items()}
            values["global_step"] = tf.train.get_global_step()
            update_ops = [update for _, update in metrics.values()]
            final = _FinalValuesHook(values)
            batches = 0
            with tf.train.MonitoredSession(
                    session_creator=self._session_creator(checkpoint_path),
                    hooks=model.hooks + list(spec.evaluation_hooks) + list(hooks or ())
                    + [final]) as session:
                while not session.should_stop() and (steps is None or batches < steps):
                    session.run(update_ops)
                    batches += 1
        result = final.values
        self._write_eval_summaries(result, "eval" if not name else "eval_" + name)
        return result

    def _write_eval_summaries(self, result, directory):
        if not self.model_dir:
            return
        summary = tf.Summary()
        for key, value in sorted(result.items()):
            if key != "global_step" and np.ndim(value) == 0:
                summary.value.add(tag=key, simple_value=float(value))
        with tf.Graph().as_default():
            writer = tf.summary.FileWriter(os.path.join(self.model_dir, directory))
            writer.add_summary(summary, int(result["global_step"]))
            writer.close()

    # -- predict --------------------------------------------------------------

    def predict(self, input_fn, yield_single_examples=True, checkpoint_path=None, hooks=None):
        """Yields the model_fn's predictions for every example of the
        input_fn's data (a last partial batch included), one dict
        (name -> array without the batch dimension) per example, or one
        dict per batch with `yield_single_examples=False`.

        Uses `checkpoint_path`, else the latest checkpoint in model_dir, else
        the model_fn's initial weights (which it may take from a checkpoint of
        its own). The scripts name the weights (checkpoints.log_checkpoint_used).
        """
        checkpoint_path = checkpoint_path or tf.train.latest_checkpoint(self.model_dir)
        model = self._build(input_fn, ModeKeys.PREDICT)
        spec = model.spec
        with model.graph.as_default():
            # OutOfRangeError at the end of the data leaves the `with` and is
            # swallowed by MonitoredSession: the generator then ends.
            with tf.train.MonitoredSession(
                    session_creator=self._session_creator(checkpoint_path),
                    hooks=model.hooks + list(spec.prediction_hooks) + list(hooks or ())
                    ) as session:
                while not session.should_stop():
                    batch = session.run(spec.predictions)
                    if not yield_single_examples:
                        yield batch
                    elif isinstance(batch, dict):
                        sizes = {len(value) for value in batch.values()}
                        if len(sizes) != 1:
                            raise ValueError("predictions have different batch sizes: %s"
                                             % {k: len(v) for k, v in batch.items()})
                        for i in range(sizes.pop()):
                            yield {key: value[i] for key, value in batch.items()}
                    else:
                        yield from batch

    # -- export ---------------------------------------------------------------

    def export_saved_model(self, export_dir_base, serving_input_receiver_fn,
                           checkpoint_path=None):
        """Exports the PREDICT graph with a checkpoint's weights (default: the
        latest in model_dir). Returns the SavedModel's directory."""
        checkpoint_path = checkpoint_path or tf.train.latest_checkpoint(self.model_dir)
        return _export_saved_model(self._model_fn, self._params(ModeKeys.PREDICT),
                                   export_dir_base, serving_input_receiver_fn,
                                   checkpoint_path, self.config.session_config)


class _FinalValuesHook(tf.train.SessionRunHook):
    """Reads `fetches` once, when the session ends (the metric values after
    the last update)."""

    def __init__(self, fetches):
        self._fetches = fetches
        self.values = None

    def end(self, session):
        self.values = session.run(self._fetches)


def _export_saved_model(model_fn, params, export_dir_base, serving_input_receiver_fn,
                        checkpoint_path, session_config=None):
    """Writes a SavedModel (see `saved_model_writer.write_saved_model`) of
    model_fn's PREDICT graph: the spec's `export_outputs` (name ->
    PredictOutput) become the signatures; without them, its `predictions`
    become "serving_default"."""
    def build_signatures():
        receiver = serving_input_receiver_fn()
        spec = model_fn(receiver.features, None, ModeKeys.PREDICT, dict(params))
        if spec.scaffold_fn is not None:
            spec.scaffold_fn()
        outputs = spec.export_outputs or {
            tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY: PredictOutput(spec.predictions)}
        return {key: output.as_signature_def(receiver.receiver_tensors)
                for key, output in outputs.items()}

    return saved_model_writer.write_saved_model(build_signatures, checkpoint_path,
                                                export_dir_base, session_config)


# ---------------------------------------------------------------------------
# TPUs without the Estimator.

def make_tpu_strategy(run_config, resolver_class=None, strategy_class=None):
    """A TPUStrategy for --use_tpu on TensorFlow without the Estimator.

    The TPUClusterResolver takes --tpu_name (a Cloud TPU's name or a
    grpc:// address; empty on a TPU VM or Colab, where the TPU is found
    locally), --tpu_zone and --gcp_project. The TPU system is initialised
    before the strategy is made. `resolver_class` and `strategy_class`
    replace TensorFlow's classes (tests run without a TPU).

    Returns:
      The strategy; its session master is the resolver's.
    """
    resolver_class = resolver_class or tf.distribute.cluster_resolver.TPUClusterResolver
    strategy_class = strategy_class or tf.distribute.experimental.TPUStrategy
    resolver = resolver_class(tpu=run_config.tpu_name or "", zone=run_config.tpu_zone,
                              project=run_config.gcp_project)
    if strategy_class is tf.distribute.experimental.TPUStrategy:
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    strategy = strategy_class(resolver)
    strategy.tpu_master = resolver.master()
    return strategy
