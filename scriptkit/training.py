"""Training a model: the training options of the flags (precision, fused
kernels, gradient accumulation, optimizer, devices), the model built with
them, the train op and the step count, and the runner (runtime.py's
Estimator or session runner) that resumes where the latest checkpoint
stopped and saves a checkpoint when a SIGINT or SIGTERM stops it.

In: a script's model_fn, the parsed flags and `TrainingOptions`. Out: the
TRAIN spec of a model_fn, and a `ResumableTrainer`. Imports TensorFlow.
"""

import contextlib
import dataclasses
import os
import re
import signal

from scriptkit import quiet_tf  # noqa: F401  (first: imports TensorFlow without its start-up noise)
import tensorflow.compat.v1 as tf

import bert_ops
from scriptkit import checkpoints
from scriptkit import input_pipeline
from scriptkit import interrupts
from scriptkit import mixed_precision
import modeling
import optimization
from scriptkit import output_lock
from scriptkit import runners
from scriptkit import runtime
from scriptkit import script_runner
from scriptkit import training_progress
from scriptkit.errors import InputError


# ---------------------------------------------------------------------------
# Training options (the training-option flags) and the model.

_COMPUTE_TYPES = {"fp32": tf.float32, "fp16": tf.float16, "bf16": tf.bfloat16}


@dataclasses.dataclass(frozen=True)
class TrainingOptions:
    """The memory, speed and device options of a run (the flags of
    TRAINING_OPTION_FLAGS), as one value that a script's main hands to its
    model_fn builder and to the runner. The defaults are the original's
    behaviour, which a library call gets without flags.

    Attributes:
      precision: "fp32", "fp16" or "bf16", the encoder's compute type
        (fp16 trains with dynamic loss scaling).
      recompute_grad: recompute each Transformer layer in the backward pass.
      fused_ops: bert_ops.FusedOps, or None for bert_ops' "auto".
      gradient_accumulation_steps: micro-batches per optimizer update.
      use_xla: XLA auto-clustering of the whole graph.
      distribution_strategy: "none", "mirrored" or "multi_worker_mirrored".
      num_gpus: GPUs for "mirrored" (0: all).
      optimizer: "adamw" or "lamb" (optimization.create_optimizer's
        optimizer_name).
      poly_power, start_warmup_step: the learning-rate schedule's decay power
        and the step its warm-up begins at.
      length_buckets: with dynamic padding, the increasing lengths a batch
        may be padded to (the last is max_seq_length); None: every batch is
        padded to max_seq_length (see `input_pipeline.tfrecord_input_fn`).
      input_seed: the seed of the training input's order, or None for an
        unseeded order (see `ResumableTrainer`).
    """

    precision: str = "fp32"
    recompute_grad: bool = False
    fused_ops: bert_ops.FusedOps = None
    gradient_accumulation_steps: int = 1
    use_xla: bool = False
    distribution_strategy: str = "none"
    num_gpus: int = 0
    optimizer: str = "adamw"
    poly_power: float = 1.0
    start_warmup_step: int = 0
    length_buckets: tuple = None
    input_seed: int = None

    def model_kwargs(self):
        """The keyword arguments of `modeling.BertModel` these options set."""
        return {"compute_type": _COMPUTE_TYPES[self.precision],
                "recompute_grad": self.recompute_grad, "fused_ops": self.fused_ops}

    def describe(self):
        """The options in effect, for the logs: "precision fp32, fused
        gelu,layer_norm,dropout" and whichever others are on."""
        parts = ["precision %s" % self.precision]
        if self.recompute_grad:
            parts.append("recompute_grad")
        parts.append("fused %s" % (self.fused_ops if self.fused_ops is not None else "auto"))
        if self.use_xla:
            parts.append("XLA")
        if self.distribution_strategy != "none":
            parts.append("%s strategy" % self.distribution_strategy)
        if self.optimizer != "adamw":
            parts.append("optimizer %s" % self.optimizer)
        if self.poly_power != 1.0:
            parts.append("decay power %g" % self.poly_power)
        if self.start_warmup_step:
            parts.append("warm-up from step %d" % self.start_warmup_step)
        if self.length_buckets:
            parts.append("dynamic padding to %s" % ",".join(map(str, self.length_buckets)))
        return ", ".join(parts)

    def for_export(self):
        """These options for a SavedModel's graph: no recomputation, and every
        kernel written out (a model server may lack XLA)."""
        return dataclasses.replace(self, recompute_grad=False, fused_ops=bert_ops.FusedOps())


def training_options(settings, training=True):
    """The `TrainingOptions` of `settings` (a training script's settings,
    which hold `scriptkit.settings.TrainingOptions`' flags), for a run that
    trains (`training`) or only
    evaluates and predicts. Applies the process-wide ones now, before any
    session: --limit_memory_fragmentation, and XLA's start for fused kernels
    (`choose_fused_ops`)."""
    if not settings.poly_power > 0:
        raise InputError("--poly_power=%s must be positive" % settings.poly_power)
    if settings.limit_memory_fragmentation:
        script_runner.limit_memory_fragmentation()
    # A multi-worker strategy must configure TensorFlow's collective ops
    # before anything starts TensorFlow's runtime, as XLA's start would.
    multi_worker = settings.distribution_strategy == "multi_worker_mirrored"
    return TrainingOptions(
        precision=settings.precision, recompute_grad=settings.recompute_grad,
        fused_ops=choose_fused_ops(settings.fused_ops, start_xla=not multi_worker,
                                   training=training),
        gradient_accumulation_steps=max(1, settings.gradient_accumulation_steps or 1),
        use_xla=settings.use_xla, distribution_strategy=settings.distribution_strategy,
        num_gpus=settings.num_gpus, optimizer=settings.optimizer,
        poly_power=settings.poly_power, start_warmup_step=settings.start_warmup_step,
        length_buckets=input_pipeline.length_buckets_of(settings),
        input_seed=settings.input_seed or None)


def choose_fused_ops(setting, start_xla=True, training=True):
    """The bert_ops.FusedOps of --fused_ops=`setting` for graphs that are
    trained (`training`) or only infer. Where any kernel is
    fused, XLA is started here with `start_xla` (`quiet_tf.start_xla_quietly`:
    its start-up lines caught now rather than at the first step); where XLA
    does not work, every kernel is written out.

    Raises:
      InputError: an unknown value, naming --fused_ops.
    """
    try:
        fused_ops = bert_ops.choose_fused_ops(setting, training=training)
    except ValueError as e:
        raise InputError("--fused_ops: %s" % e)
    if start_xla and fused_ops != bert_ops.FusedOps() and not quiet_tf.start_xla_quietly():
        return bert_ops.FusedOps()
    return fused_ops


def bert_model(bert_config, is_training, input_ids, input_mask, segment_ids,
               use_one_hot_embeddings, options=None):
    """`modeling.BertModel` with the `TrainingOptions` `options` (None: the
    defaults), for the scripts' create_model functions.

    Args:
      input_ids, input_mask, segment_ids: int32 [batch, seq_length].

    Returns:
      The modeling.BertModel.
    """
    # "bert" by name, not as the default name (which a second model in the
    # graph would get as "bert_1"): an export builds the model twice on the
    # same variables (serving.py).
    return modeling.BertModel(
        config=bert_config, is_training=is_training, input_ids=input_ids,
        input_mask=input_mask, token_type_ids=segment_ids,
        use_one_hot_embeddings=use_one_hot_embeddings, scope="bert",
        **(options or TrainingOptions()).model_kwargs())


# ---------------------------------------------------------------------------
# The train op and the step count.

def create_train_op(loss, learning_rate, num_train_steps, num_warmup_steps, use_tpu,
                    options=None):
    """`optimization.create_optimizer` with the `TrainingOptions` `options`
    applied (optimizer and schedule shape, gradient accumulation, dynamic
    loss scaling for fp16)."""
    options = options or TrainingOptions()
    loss_scale = None
    if options.precision == "fp16":
        loss_scale = mixed_precision.DynamicLossScale()
    return optimization.create_optimizer(
        loss, learning_rate, num_train_steps, num_warmup_steps, use_tpu,
        gradient_accumulation_steps=options.gradient_accumulation_steps,
        loss_scale_manager=loss_scale, optimizer_name=options.optimizer,
        poly_power=options.poly_power, start_warmup_step=options.start_warmup_step,
        # LAMB's update is an XLA loop where the model's kernels are.
        fused_update=(None if options.fused_ops is None
                      else options.fused_ops != bert_ops.FusedOps()),
        count_batches=_TRAINING_RUN["count_batches"])


def train_spec(loss, learning_rate, num_train_steps, num_warmup_steps, use_tpu, options,
               examples_per_step, tokens_per_step=None, scaffold_fn=None):
    """The TRAIN spec of the scripts' model_fns: `create_train_op` and the
    progress hooks (`training_progress.training_hooks`).

    Args:
      loss: the scalar loss.
      learning_rate, num_train_steps, num_warmup_steps: the schedule.
      use_tpu: built for TPUEstimator.
      options: `TrainingOptions` (None: the defaults).
      examples_per_step, tokens_per_step: what one batch holds.
      scaffold_fn: from `checkpoints.init_from_checkpoint`.
    """
    return runtime.TPUEstimatorSpec(
        mode=runtime.ModeKeys.TRAIN, loss=loss,
        train_op=create_train_op(loss, learning_rate, num_train_steps, num_warmup_steps,
                                 use_tpu, options),
        training_hooks=training_progress.training_hooks(
            loss, examples_per_step, tokens_per_step, use_tpu=use_tpu,
            num_train_steps=num_train_steps,
            runs_per_step=(options or TrainingOptions()).gradient_accumulation_steps),
        scaffold_fn=scaffold_fn)


def num_train_steps(num_examples, train_batch_size, num_train_epochs,
                    gradient_accumulation_steps=1):
    """Number of optimizer updates for `num_train_epochs` over `num_examples`.

    One update consumes `train_batch_size * gradient_accumulation_steps`
    examples, so with accumulation the schedule (warm-up, decay, max_steps)
    stays in optimizer updates while covering the same epochs.
    """
    accumulation = max(1, gradient_accumulation_steps or 1)
    return int(num_examples / (train_batch_size * accumulation) * num_train_epochs)


def train_schedule(num_examples, train_batch_size, num_train_epochs, max_train_steps,
                   warmup_proportion, gradient_accumulation_steps=1,
                   what="training examples", announce=True):
    """(num_train_steps, num_warmup_steps) for `num_examples` with
    --train_batch_size, --num_train_epochs and --warmup_proportion, the
    steps capped by --max_train_steps (if positive; logged with the full
    count, unless `announce` is False: for an early check whose count the
    caller replaces later). `what` names the examples in messages.

    Raises:
      InputError: the flags make no training step.
    """
    steps = num_train_steps(num_examples, train_batch_size, num_train_epochs,
                            gradient_accumulation_steps)
    if steps < 1:
        raise InputError(
            "%d %s, --train_batch_size=%d and --num_train_epochs=%s make 0 training steps"
            % (num_examples, what, train_batch_size, num_train_epochs))
    if 0 < max_train_steps < steps and announce:
        tf.logging.info("Training %d of the %d steps of %s epochs (--max_train_steps)",
                        max_train_steps, steps, num_train_epochs)
    if 0 < max_train_steps < steps:
        steps = max_train_steps
    return steps, int(steps * warmup_proportion)


# ---------------------------------------------------------------------------
# Run configuration and the runner (the execution layer lives in runtime.py).

def make_run_config(output_dir, save_checkpoints_steps, iterations_per_loop=1000,
                    use_tpu=False, tpu_name=None, tpu_zone=None, gcp_project=None,
                    master=None, num_tpu_cores=8, keep_checkpoint_max=5,
                    tpu_job_name=None, options=None):
    """`runners.make_run_config` with the `TrainingOptions` `options` applied
    (XLA, the distribution strategy, GPUs); on the Estimator without a TPU,
    its own step logging off (ThroughputHook's lines replace it)."""
    options = options or TrainingOptions()
    with _config_errors_as_input_errors():
        config = runners.make_run_config(
            output_dir, save_checkpoints_steps, iterations_per_loop=iterations_per_loop,
            use_tpu=use_tpu, tpu_name=tpu_name, tpu_zone=tpu_zone, gcp_project=gcp_project,
            master=master, num_tpu_cores=num_tpu_cores,
            keep_checkpoint_max=keep_checkpoint_max, tpu_job_name=tpu_job_name,
            use_xla=options.use_xla, distribution_strategy=options.distribution_strategy,
            num_gpus=options.num_gpus)
    if runtime.USE_ESTIMATOR and not use_tpu:
        # The Estimator's own "loss = ..., step = ..." and "global_step/sec"
        # lines every 100 steps repeat what ThroughputHook logs.
        config = config.replace(log_step_count_steps=None)
    return config


def make_estimator(model_fn, run_config, use_tpu, train_batch_size=None,
                   eval_batch_size=None, predict_batch_size=None):
    """`runners.make_estimator`: the runner for the scripts' model_fn."""
    with _config_errors_as_input_errors():
        return runners.make_estimator(model_fn, run_config, use_tpu,
                                      train_batch_size=train_batch_size,
                                      eval_batch_size=eval_batch_size,
                                      predict_batch_size=predict_batch_size)


def make_trainer(model_fn, options, settings, **batch_sizes):
    """The runner of a training script's model_fn, configured by `settings`
    (the script's: --output_dir, --save_checkpoints_steps,
    --iterations_per_loop, the TPU flags) and the
    `TrainingOptions` `options`, as a `ResumableTrainer`.

    Args:
      **batch_sizes: train_batch_size, eval_batch_size, predict_batch_size.
    """
    s = settings
    run_config = make_run_config(
        s.output_dir, s.save_checkpoints_steps, s.iterations_per_loop, s.use_tpu, s.tpu_name,
        s.tpu_zone, s.gcp_project, s.master, s.num_tpu_cores, tpu_job_name=s.tpu_job_name,
        options=options)
    return ResumableTrainer(make_estimator(model_fn, run_config, s.use_tpu, **batch_sizes),
                            options, batch_sizes.get("train_batch_size"))


@contextlib.contextmanager
def _config_errors_as_input_errors():
    try:
        yield
    except runtime.ConfigError as e:
        raise InputError(str(e))


# ---------------------------------------------------------------------------
# Interrupted and resumed training.

# What the train op built during a `ResumableTrainer.train` call may do,
# set by that call for its time: count the batches it reads
# (optimization.BATCHES_READ_VARIABLE, `create_train_op`), in a new run or
# one resumed from a checkpoint that holds the count. A checkpoint without
# it (of an earlier version) could not restore the variable, so such a run
# goes on without. Outside a training call (an export, an evaluation), no
# train op counts.
_TRAINING_RUN = {"count_batches": False}


class TrainingInterrupted(interrupts.InterruptedExit):
    """Training stopped by SIGINT or SIGTERM after a checkpoint was saved;
    the exit status is 128 + the signal's number."""


class ResumableTrainer:
    """A runner of `make_estimator` (all its methods pass through) whose
    `train` goes on where the latest checkpoint stopped, and stops cleanly
    when the process is told to.

    * Before training, a latest checkpoint that is cut short or unreadable
      is set aside for the newest intact one (`checkpoints.use_intact_checkpoint`).
    * The input_fn gets params[START_RECORD] (the records that the
      checkpoint's steps have consumed, `checkpoints.consumed_batches` times the
      training batch) and params[INPUT_SEED], so that it can start at the
      next unseen batch (`input_pipeline.tfrecord_input_fn`): with a seed, the run then
      trains on exactly the batches of an uninterrupted run. A float16
      train op counts the batches it reads (`_TRAINING_RUN`), as steps
      skipped for overflow do not move the global step.
    * SIGINT (Ctrl-C) or SIGTERM during training: the running step is
      finished, a checkpoint of that step is saved (`InterruptHook`), one
      line names it, and `TrainingInterrupted` ends the run. A second signal
      stops at once.

    Args:
      runner: what `make_estimator` returns.
      options: the run's `TrainingOptions` (gradient accumulation, seed).
      train_batch_size: examples per training step (all replicas).
    """

    def __init__(self, runner, options, train_batch_size):
        self._runner = runner
        self._options = options
        self._train_batch_size = train_batch_size or 0
        self._clock = training_progress.TrainingClock()

    def evaluations_at(self, steps):
        """Tells the progress lines' ETA the global steps after which the
        caller evaluates between two `train` calls (see `training_progress.TrainingClock`)."""
        self._clock.evaluation_steps = tuple(sorted(steps))

    def __getattr__(self, name):
        return getattr(self._runner, name)

    def train(self, input_fn, max_steps=None, hooks=None, steps=None):
        """`runner.train` from the next unseen batch; see the class."""
        # A signal whose KeyboardInterrupt was lost stops the run here.
        interrupts.raise_if_interrupted()
        model_dir = self._runner.model_dir
        chief = output_lock.is_training_chief()
        if chief:  # The holder of the directory's lock; other workers only read.
            _remove_failed_saves(model_dir)
        checkpoint = checkpoints.use_intact_checkpoint(model_dir, rewrite=chief)
        start_batch = checkpoints.consumed_batches(model_dir,
                                                   self._options.gradient_accumulation_steps)
        start_record = start_batch * self._train_batch_size
        seed = self._options.input_seed
        count_batches = checkpoint is None or tf.train.load_checkpoint(checkpoint).has_tensor(
            optimization.BATCHES_READ_VARIABLE)

        def positioned_input_fn(params):
            params = dict(params)
            params[input_pipeline.START_RECORD] = start_record
            params[input_pipeline.INPUT_SEED] = seed
            return input_fn(params)

        hook = InterruptHook(model_dir, save=chief)
        training_progress.TRAINING_CLOCK["current"] = self._clock
        _TRAINING_RUN["count_batches"] = count_batches
        try:
            with interrupts.interrupts_held(on_hold=hook.stop_soon, raise_after=False), \
                    checkpoints.runner_restores(checkpoint):
                self._runner.train(positioned_input_fn, max_steps=max_steps,
                                   hooks=list(hooks or ()) + [hook], steps=steps)
        finally:
            training_progress.TRAINING_CLOCK["current"] = None
            _TRAINING_RUN["count_batches"] = False
        if hook.signum is not None:
            checkpoint = tf.train.latest_checkpoint(model_dir)
            step = hook.step
            if step is None:  # The signal came after the hooks had ended.
                step = checkpoints.checkpoint_step(checkpoint)
            tf.logging.warning(
                "Training stopped by %s at step %d: checkpoint %s saved; the same command "
                "resumes from it", hook.signal_name, step, checkpoint)
            raise TrainingInterrupted(128 + hook.signum)
        return self

    def _restored_checkpoint(self, checkpoint_path):
        """The checkpoint an evaluation or prediction restores: the one
        given, else the latest of model_dir (None: the model_fn's
        initialisation gives the weights)."""
        model_dir = self._runner.model_dir
        return checkpoint_path or (tf.train.latest_checkpoint(model_dir) if model_dir
                                   else None)

    def evaluate(self, *args, **kwargs):
        """`runner.evaluate`, its checkpoint named by the model_fn's log."""
        with checkpoints.runner_restores(self._restored_checkpoint(kwargs.get("checkpoint_path"))):
            return self._runner.evaluate(*args, **kwargs)

    def predict(self, *args, **kwargs):
        """`runner.predict` (a generator), its checkpoint named by the
        model_fn's log."""
        predictions = iter(self._runner.predict(*args, **kwargs))
        # The graph is built when the first prediction is asked for.
        with checkpoints.runner_restores(self._restored_checkpoint(kwargs.get("checkpoint_path"))):
            first = next(predictions, _NO_PREDICTION)
        if first is _NO_PREDICTION:
            return
        yield first
        yield from predictions


_NO_PREDICTION = object()  # The end of `ResumableTrainer.predict`'s first next().


def _remove_failed_saves(model_dir):
    """Removes what checkpoint saves that failed (a full disk) left in
    `model_dir`: the saver's "<prefix>-<step>_temp..." folders of partial
    files, which take the room the next save needs."""
    if not model_dir or not tf.io.gfile.isdir(model_dir):
        return
    for name in tf.io.gfile.listdir(model_dir):
        name = name.rstrip("/")
        path = os.path.join(model_dir, name)
        if re.fullmatch(r".+-\d+_temp(_[0-9a-f]+)?", name) and tf.io.gfile.isdir(path):
            tf.io.gfile.rmtree(path)
            tf.logging.info("Removed %s: the partial files of a checkpoint save that failed",
                            path)


def _graph_variable(name):
    """The graph's global variable called `name`, or None."""
    for variable in tf.global_variables():
        if variable.op.name == name:
            return variable
    return None


class InterruptHook(tf.train.SessionRunHook):
    """Stops training after the running step once `stop_soon` was called (by
    the signal handler of `ResumableTrainer.train`), with a checkpoint of
    that step.

    The runner's own saver writes a checkpoint at the end of training when
    the global step has moved since its last one. In the middle of a
    gradient accumulation cycle it may not have: this hook then saves the
    accumulated micro-batches itself (under the same step's name), so that
    none of them is trained on twice.

    Args:
      model_dir: where checkpoints go.
      save: whether this process saves checkpoints (the chief of a cluster;
        the others only stop).
    """

    def __init__(self, model_dir, save=True):
        self._model_dir = model_dir
        self._save = save
        self.signum = None
        self.step = None
        self._micro_step = None
        self._saver = None

    @property
    def signal_name(self):
        return signal.Signals(self.signum).name if self.signum else None

    def stop_soon(self, signum):
        """Asks training to stop after the running step (called once)."""
        self.signum = signum
        tf.logging.warning("Got %s: stopping after the running step to save a checkpoint "
                           "(a second signal stops at once, without one)", self.signal_name)

    def begin(self):
        self._global_step = tf.train.get_global_step()
        self._micro_step = _graph_variable(optimization.MICRO_STEP_VARIABLE)
        if self._micro_step is not None and self._save:
            self._saver = tf.train.Saver(sharded=True, save_relative_paths=True)

    def after_run(self, run_context, run_values):
        if self.signum is not None:
            run_context.request_stop()

    def end(self, session):
        if self.signum is None:
            return
        self.step = int(session.run(self._global_step))
        if self._saver is None:
            return
        micro_step = int(session.run(self._micro_step))
        latest = tf.train.latest_checkpoint(self._model_dir)
        if latest and micro_step:
            reader = tf.train.load_checkpoint(latest)
            saved = (int(reader.get_tensor(tf.GraphKeys.GLOBAL_STEP)),
                     int(reader.get_tensor(optimization.MICRO_STEP_VARIABLE)))
            if saved != (self.step, micro_step) and saved[0] == self.step:
                # Same name as the latest: the state file needs no change.
                self._saver.save(session, latest, write_meta_graph=False, write_state=False)
