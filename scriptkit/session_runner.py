"""The session runner: runs the scripts' TPUEstimator-style `model_fn` and
`input_fn` pairs with `tf.compat.v1` sessions where TensorFlow has no
Estimator (2.16 and later), and writes the Estimator's files.

`runners.make_run_config` and `runners.make_estimator` return this module's
`RunConfig` and `SessionRunner` there; the scripts never import it. The
contract's names (`ModeKeys`, `TPUEstimatorSpec`, `PredictOutput`) and the
input reading both runners share (`runtime.read_dataset`,
`runtime.shard_for_worker`) come from `runtime`.
"""

import os

import numpy as np
import tensorflow.compat.v1 as tf

from scriptkit import runtime
from scriptkit import saved_model_writer


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
        runtime.check_divisible(train_batch_size, self._replicas)
        self._batch_sizes = {runtime.ModeKeys.TRAIN: train_batch_size,
                             runtime.ModeKeys.EVAL: eval_batch_size,
                             runtime.ModeKeys.PREDICT: predict_batch_size}

    @property
    def model_dir(self):
        return self.config.model_dir

    # -- graph building ------------------------------------------------------

    def _params(self, mode):
        return {"batch_size": runtime.per_replica_batch(self._batch_sizes, mode, self._replicas)}

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
                runtime.read_dataset(input_fn, self._params(mode)))
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
            params = self._params(runtime.ModeKeys.TRAIN)

            def dataset_fn(input_context):
                return runtime.shard_for_worker(runtime.read_dataset(input_fn, dict(params)),
                                                runtime.ModeKeys.TRAIN, input_context)

            iterator = strategy.make_input_fn_iterator(dataset_fn)
            replica_hooks = []

            def replica_fn(batch):
                features, labels = _features_and_labels(batch)
                spec = self._call_model_fn(features, labels, runtime.ModeKeys.TRAIN)
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
            spec = runtime.TPUEstimatorSpec(
                mode=runtime.ModeKeys.TRAIN, loss=loss, train_op=train_op,
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
            model = self._build(input_fn, runtime.ModeKeys.TRAIN)
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
            tf.logging.info(runtime.LAST_LOSS_LINE, loss)
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
        model = self._build(input_fn, runtime.ModeKeys.EVAL)
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
        model = self._build(input_fn, runtime.ModeKeys.PREDICT)
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
        return _export_saved_model(self._model_fn, self._params(runtime.ModeKeys.PREDICT),
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
    runtime.PredictOutput) become the signatures; without them, its `predictions`
    become "serving_default"."""
    def build_signatures():
        receiver = serving_input_receiver_fn()
        spec = model_fn(receiver.features, None, runtime.ModeKeys.PREDICT, dict(params))
        if spec.scaffold_fn is not None:
            spec.scaffold_fn()
        default = tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY
        outputs = spec.export_outputs or {default: runtime.PredictOutput(spec.predictions)}
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
