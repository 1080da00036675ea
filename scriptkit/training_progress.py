"""The progress lines of training, evaluation and prediction: the header of
each phase, the training hook that logs step, loss, throughput and ETA
every --log_every_seconds (its ETA counting the evaluations still to
come), and the hook that counts the batches of an evaluation or prediction.

In: the loss tensor and what a batch holds. Out: log lines. Imports
TensorFlow.
"""

import time

from scriptkit import quiet_tf  # noqa: F401  (first: imports TensorFlow without its start-up noise)
import tensorflow.compat.v1 as tf

from scriptkit import logs


# ---------------------------------------------------------------------------
# The header of a phase.

def log_phase(title, details):
    """Logs the start of a phase of a run the way the original scripts do:
    "***** <title> *****", then "  <name> = <value>" per (name, value) of
    `details`."""
    tf.logging.info("***** %s *****", title)
    for name, value in details:
        tf.logging.info("  %s = %s", name, value)


def log_training(options, details, num_train_steps, train_batch_size):
    """Logs the start of training as `log_phase` does: `details` ((name,
    value) pairs: what the data holds), then the batch of `train_batch_size`
    (with gradient accumulation "16 × 2 accumulated = 32"), the number of
    optimizer steps and the memory and speed options in effect
    (`training.TrainingOptions`)."""
    batch, accumulation = train_batch_size, options.gradient_accumulation_steps
    batch_text = str(batch) if accumulation == 1 else "%d × %d accumulated = %d" % (
        batch, accumulation, batch * accumulation)
    log_phase("Running training", list(details) + [
        ("Batch size", batch_text), ("Num steps", num_train_steps),
        ("Options", options.describe())])


# ---------------------------------------------------------------------------
# Training: step, loss, throughput and ETA.

class TrainingClock:
    """The time of one training run, across the runner's `train` calls that
    its evaluations split it into, for the ETA of `ThroughputHook`.

    The first update of a `train` call holds its start-up (graph
    optimisation, XLA compilation, the input pipeline filling up, and with
    gradient accumulation the first run of the update's ops), which is no
    training step's time: the run's first one is left out, and from the
    second call on, the time from the previous call's last run to the end of
    this call's first update counts as a pause (the evaluation, and the
    restart of training after it).

    Args:
      evaluation_steps: the global steps after which training pauses for an
        evaluation (not the last step, after which training is over).

    Attributes:
      runs, run_seconds: session runs timed, and their wall time (from the
        end of the run before, so checkpoint saves and hooks count too).
      pauses, pause_seconds: pauses for evaluations so far, and their time.
    """

    def __init__(self, evaluation_steps=()):
        self.evaluation_steps = tuple(sorted(evaluation_steps))
        self.runs = 0
        self.run_seconds = 0.0
        self.pauses = 0
        self.pause_seconds = 0.0
        self.last_run_end = None  # Of the previous `train` call.

    def eta(self, step, num_train_steps, runs_per_step=1):
        """", ETA <time>" for the training from global step `step` to
        `num_train_steps` ("" before any run was timed): the remaining
        session runs at the mean time of a run so far, plus the
        evaluations still to come at the mean time of a pause so far
        ("with N evaluations"), or "+ N evaluations" when none was timed
        yet."""
        if not self.runs or step >= num_train_steps:
            return ""
        seconds = (num_train_steps - step) * runs_per_step * self.run_seconds / self.runs
        pending = sum(step <= e < num_train_steps for e in self.evaluation_steps)
        evaluations = "%d evaluation%s" % (pending, "" if pending == 1 else "s")
        if pending and self.pauses:
            return ", ETA %s with %s" % (logs.format_duration(
                seconds + pending * self.pause_seconds / self.pauses), evaluations)
        if pending:
            return ", ETA %s + %s" % (logs.format_duration(seconds), evaluations)
        return ", ETA %s" % logs.format_duration(seconds)


# The `TrainingClock` of the `ResumableTrainer.train` call under way (its
# hooks time the run on it), or None.
TRAINING_CLOCK = {"current": None}


class ThroughputHook(tf.train.SessionRunHook):
    """Logs the training progress about every --log_every_seconds of wall
    time: "step <global step>[ of <num_train_steps>]: loss = <the mean loss
    of the batches since the last line> (mean of <n> batches),
    <examples/s>[, <tokens/s>][, ETA <time>]", one line at the first step
    and one at the end. The rate leaves out the start-up in the first
    update (a line with no other run says how long it took), and the
    ETA counts the evaluations still to come (see `TrainingClock`; the
    clock of the `training.ResumableTrainer` training, else one of this hook's own).

    Args:
      loss: the loss tensor.
      examples_per_step: examples one session run consumes.
      tokens_per_step: tokens one session run consumes, or None.
      every_n_steps: log every this many runs instead of by time.
      num_train_steps: the global step training stops at, for the ETA.
      every_seconds: the interval (default: `log_every_seconds()`).
      runs_per_step: session runs per optimizer update (gradient
        accumulation): lines come only after a completed update, so that
        the step they give is the update just made.
    """

    def __init__(self, loss, examples_per_step, tokens_per_step=None, every_n_steps=None,
                 num_train_steps=None, every_seconds=None, runs_per_step=1):
        self._loss = loss
        self._examples_per_step = examples_per_step
        self._tokens_per_step = tokens_per_step
        self._every_n = every_n_steps
        self._every_seconds = logs.log_every_seconds() if every_seconds is None else every_seconds
        self._num_train_steps = num_train_steps
        self._runs_per_step = max(1, runs_per_step)
        self._clock = None
        self._runs = 0
        self._begin = None
        self._last_run_end = None
        self._interval_start = None
        self._interval_timed_runs = 0
        self._interval_seconds = 0.0
        self._losses = []

    def begin(self):
        self._global_step = tf.train.get_global_step()
        self._clock = TRAINING_CLOCK["current"] or TrainingClock()
        self._begin = time.time()

    def before_run(self, run_context):
        return tf.train.SessionRunArgs({"loss": self._loss, "step": self._global_step})

    def after_run(self, run_context, run_values):
        now = time.time()
        self._runs += 1
        self._losses.append(float(run_values.results["loss"]))
        clock = self._clock
        if self._runs < self._runs_per_step:
            pass  # The start-up (see below).
        elif self._runs == self._runs_per_step:
            # The first update: its first run holds the start-up, and with
            # gradient accumulation the first run that applies the update
            # starts its ops too. Not timed as a step; after an
            # evaluation, part of the pause.
            if clock.last_run_end is not None:
                clock.pauses += 1
                clock.pause_seconds += now - clock.last_run_end
            self._interval_start = now
        else:
            clock.runs += 1
            clock.run_seconds += now - self._last_run_end
            self._interval_timed_runs += 1
            self._interval_seconds += now - self._last_run_end
        self._last_run_end = now
        if self._every_n:
            due = self._runs % self._every_n == 0
        else:
            due = self._runs % self._runs_per_step == 0 and (
                self._runs == self._runs_per_step
                or now - self._interval_start >= self._every_seconds)
        if due:
            self._log(now, run_context.session)

    def end(self, session):
        if self._losses:
            self._log(time.time(), session)
        if self._last_run_end is not None:
            self._clock.last_run_end = self._last_run_end

    def _log(self, now, session):
        # The step fetched with the run may have been read before the
        # update: read it again.
        step = int(session.run(self._global_step))
        message = "step %d" % step
        if self._num_train_steps:
            message += " of %d" % self._num_train_steps
        batches = len(self._losses)
        message += ": loss = %.4f (%s)" % (
            sum(self._losses) / batches,
            "1 batch" if batches == 1 else "mean of %d batches" % batches)
        if self._interval_timed_runs:
            seconds = max(self._interval_seconds, 1e-9)
            message += ", %.2f examples/s" % (
                self._examples_per_step * self._interval_timed_runs / seconds)
            if self._tokens_per_step:
                message += ", %.0f tokens/s" % (
                    self._tokens_per_step * self._interval_timed_runs / seconds)
        else:
            message += ", %s with start-up" % logs.format_duration(now - self._begin)
        if self._num_train_steps:
            message += self._clock.eta(step, self._num_train_steps, self._runs_per_step)
        tf.logging.info("%s", message)
        self._losses = []
        self._interval_timed_runs = 0
        self._interval_seconds = 0.0
        self._interval_start = now


def training_hooks(loss, examples_per_step, tokens_per_step=None, use_tpu=False,
                   every_n_steps=None, num_train_steps=None, runs_per_step=1):
    """Hooks logging the training loss and throughput on CPU/GPU (see
    `ThroughputHook`; num_train_steps gives the ETA).

    On TPU, device tensors cannot be read by host hooks, so none are added
    (TPUEstimator logs loss and examples/s itself there).
    """
    if use_tpu:
        return []
    return [ThroughputHook(loss, examples_per_step, tokens_per_step,
                           every_n_steps=every_n_steps, num_train_steps=num_train_steps,
                           runs_per_step=runs_per_step)]


# ---------------------------------------------------------------------------
# Evaluation and prediction: batches done.

class ProgressHook(tf.train.SessionRunHook):
    """Logs the progress of an evaluation or prediction at the rhythm of
    training's lines (a `logs.Progress` of batches): "<what>: <n> of <total>
    batches (<rate>, ETA ...)", and a last line with the time it took.

    Args:
      what: "Evaluating", "Predicting", ...
      num_batches: the batches the run will take, or None where unknown.
    """

    def __init__(self, what, num_batches=None):
        self._what = what
        self._num_batches = num_batches
        self._progress = None

    def begin(self):
        self._progress = logs.Progress(self._what, self._num_batches, unit="batches")

    def after_run(self, run_context, run_values):
        self._progress.update()

    def end(self, session):
        self._progress.done()


def num_batches(num_examples, batch_size):
    """Batches of `batch_size` that `num_examples` fill (the last one may be
    partial)."""
    return -(-num_examples // batch_size)
