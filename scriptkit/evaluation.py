"""Evaluation of a trainer's checkpoints, written once for the scripts: one
evaluation pass with its log lines (`evaluate`), and training with an
evaluation every so many steps (`train_and_evaluate`), which can keep a copy
of the best checkpoint (`BestCheckpoint`).

In: a `training.ResumableTrainer` (or what `training.make_estimator`
returns), input_fns, the script's `evaluate_fn`. Out: the evaluation
results (dicts of metric name -> value); with `BestCheckpoint`, a checkpoint
copy and its eval_results.txt; and the eval_results.txt file itself
(`write_eval_results`). Imports TensorFlow.
"""

import os

from scriptkit import quiet_tf  # noqa: F401  (first: imports TensorFlow without its start-up noise)
import tensorflow.compat.v1 as tf

from scriptkit import checkpoints
from scriptkit import file_io
from scriptkit import training_progress
from scriptkit.errors import InputError


def evaluate(trainer, input_fn, num_batches, checkpoint=None, init_checkpoint=None,
             steps=None, name_weights=True):
    """One evaluation pass of `trainer` on `input_fn`, with a progress line
    per --log_every_seconds and a last one with the time it took.

    Args:
      num_batches: the batches the pass takes (for the progress lines), or
        None where unknown.
      checkpoint: the checkpoint to evaluate; None: the latest in the
        trainer's model_dir (else `init_checkpoint`, the model_fn's).
      steps: the batches to evaluate; None: until the data runs out.
      name_weights: whether to log first "Evaluating with the weights of
        ..." (`checkpoints.log_checkpoint_used`).

    Returns:
      The runner's result: dict of metric name -> value, with loss and
      global_step.
    """
    if name_weights:
        checkpoints.log_checkpoint_used("Evaluating", checkpoint, trainer.model_dir,
                                        init_checkpoint)
    return trainer.evaluate(input_fn=input_fn, steps=steps, checkpoint_path=checkpoint,
                            hooks=[training_progress.ProgressHook("Evaluating", num_batches)])


def _is_better(metric, value, best_value):
    """Whether `value` of `metric` beats `best_value` (None: nothing yet):
    lower for a loss, higher for anything else."""
    if best_value is None:
        return True
    if "loss" in metric:
        return value < best_value
    return value > best_value


def copy_checkpoint(checkpoint_path, target_dir):
    """Copies a checkpoint's files into `target_dir` (replacing any
    checkpoint there) and writes its `checkpoint` state file. Returns the
    new path."""
    tf.io.gfile.makedirs(target_dir)
    for old in tf.io.gfile.glob(os.path.join(target_dir, "model.ckpt-*")):
        tf.io.gfile.remove(old)
    name = os.path.basename(checkpoint_path)
    for source in tf.io.gfile.glob(checkpoint_path + ".*"):
        tf.io.gfile.copy(source, os.path.join(target_dir, os.path.basename(source)),
                         overwrite=True)
    # Written last, so that it only ever names complete files.
    with file_io.atomic_output(os.path.join(target_dir, "checkpoint")) as writer:
        writer.write('model_checkpoint_path: "%s"\nall_model_checkpoint_paths: "%s"\n'
                     % (name, name))
    return os.path.join(target_dir, name)


class BestCheckpoint:
    """The best checkpoint of one training run by one metric, copied to a
    directory of its own with its results (eval_results.txt) as each new
    best comes.

    Args:
      metric: the result's metric to compare (a loss: lower is better; any
        other: higher), from --best_checkpoint_metric.
      directory: where the copy goes (<output_dir>/best).

    Attributes:
      path: the copy of the best checkpoint so far, or None.
      value: its value of `metric`, or None.
    """

    def __init__(self, metric, directory):
        self.metric = metric
        self.directory = directory
        self.path = None
        self.value = None

    def consider(self, result, checkpoint, step):
        """Keeps `checkpoint` (at global `step`, evaluated as `result`) if
        it beats the best so far.

        Raises:
          InputError: the result has no such metric.
        """
        if self.metric not in result:
            raise InputError("--best_checkpoint_metric=%s is not among the eval metrics: %s"
                             % (self.metric, ", ".join(sorted(result))))
        value = float(result[self.metric])
        if not _is_better(self.metric, value, self.value):
            return
        self.value = value
        self.path = copy_checkpoint(checkpoint, self.directory)
        write_eval_results(result, self.directory,
                                       header="***** Best eval results *****",
                                       headline=self.metric)
        tf.logging.info("New best checkpoint: step %d, %s = %s (copied to %s)",
                        step, self.metric, value, self.directory)

    def report(self):
        """Names the best checkpoint among the run's outputs, if one was
        kept."""
        if self.path:
            file_io.report_output(self.path, "the best checkpoint, %s = %s"
                                  % (self.metric, self.value))


def train_and_evaluate(trainer, train_input_fn, steps, evaluate_fn, best=None, stop=None,
                       evaluate_when_done=False):
    """Trains `trainer` to the last of `steps`, evaluating the checkpoint of
    each of `steps` as training reaches it.

    A run resumed from a checkpoint (`training.ResumableTrainer`) goes on
    from its step: the steps it has passed are not evaluated again. A signal
    that stops training ends the run there (`training.TrainingInterrupted`).

    Args:
      trainer: the `training.ResumableTrainer`; its model_dir holds the
        checkpoints.
      train_input_fn: the training input_fn; each stretch of training goes
        on in it where the previous one stopped.
      steps: the global steps after which to evaluate, ascending, the last
        one the end of training.
      evaluate_fn: (checkpoint path, global step) -> result (dict of metric
        name -> value): evaluates, and logs, one checkpoint.
      best: a `BestCheckpoint` that considers each result, or None; it is
        reported at the end.
      stop: result -> bool: whether to stop training after this evaluation;
        None: never.
      evaluate_when_done: where the latest checkpoint is already at the last
        step or beyond: evaluate it all the same (True) or not (False).

    Returns:
      (the last result, the checkpoint it is of): (None, None) where nothing
      was evaluated.
    """
    done = checkpoints.checkpoint_step(tf.train.latest_checkpoint(trainer.model_dir))
    trainer.evaluations_at(steps[:-1])
    targets = [step for step in steps if step > done]
    if not targets and evaluate_when_done:
        targets = steps[-1:]
    result = checkpoint = None
    for target in targets:
        trainer.train(input_fn=train_input_fn, max_steps=target)
        checkpoint = tf.train.latest_checkpoint(trainer.model_dir)
        step = checkpoints.checkpoint_step(checkpoint)
        result = evaluate_fn(checkpoint, step)
        if best is not None:
            best.consider(result, checkpoint, step)
        if stop is not None and stop(result):
            break
    if best is not None:
        best.report()
    return result, checkpoint


def write_eval_results(result, output_dir, file_name="eval_results.txt",
                       header="***** Eval results *****", headline=None):
    """Logs `result` (name -> value) under `header` and writes it to
    output_dir/file_name as "key = value" lines sorted by key (the
    original's eval_results.txt format), reported with its `headline`
    metric (`file_io.report_output`).

    Returns:
      The path written.
    """
    path = os.path.join(output_dir, file_name)
    with file_io.atomic_output(path) as writer:
        tf.logging.info(header)
        for key in sorted(result):
            line = "%s = %s" % (key, result[key])
            tf.logging.info("  %s", line)
            writer.write(line + "\n")
    file_io.report_output(path, "%s = %s" % (headline, result[headline])
                          if headline in result else "")
    return path
