"""The model_fn skeleton that each task script fills with its head
(`task_model_fn`, `Head`), written once: the features logged, the weights
to start from, the spec of each mode (training's train op, evaluation's
metrics, prediction's outputs and serving signature); with the labels of a
batch (`example_labels`), the loss-and-accuracy metrics (`loss_and_accuracy`)
and the builder arguments of an export (`export_builder_args`).

In: a task's head. Out: model_fn(features, labels, mode, params) for the
runner (`runtime`). Imports TensorFlow.
"""

import dataclasses

import tensorflow.compat.v1 as tf

import modeling
from scriptkit import checkpoints
from scriptkit import input_pipeline
from scriptkit import runtime
from scriptkit import training


@dataclasses.dataclass
class Head:
    """What a task's head builds for one mode of `task_model_fn`: the parts
    of that mode's spec.

    Attributes:
      loss: float32 scalar, the mean loss (TRAIN and EVAL).
      eval_metrics: (metric_fn, tensors), the EVAL metrics (see
        `runtime.TPUEstimatorSpec`).
      predictions: name -> tensor [batch, ...], what PREDICT returns.
      export_outputs: name -> tensor [batch, ...], the outputs of the
        default serving signature in PREDICT; None: none (the task exports
        otherwise).
    """

    loss: object = None
    eval_metrics: tuple = None
    predictions: dict = None
    export_outputs: dict = None


def task_model_fn(build_head, init_checkpoint, learning_rate, num_train_steps,
                  num_warmup_steps, use_tpu, options=None, count_tokens=True,
                  passed_through=(), modes=(runtime.ModeKeys.TRAIN, runtime.ModeKeys.EVAL,
                                            runtime.ModeKeys.PREDICT)):
    """A task's model_fn for the runner (TPUEstimator API), from its head:
    logs the features, builds the head, sets the trainable variables up to
    start from `init_checkpoint` (`checkpoints.init_from_checkpoint`, which
    logs them), then makes the spec of the mode: TRAIN, the train op of the
    head's loss (`training.train_spec`); EVAL, its metrics; PREDICT, its
    predictions and serving signature.

    Args:
      build_head: (features, mode) -> `Head`: the model and the task's head
        built on `features` (name -> tensor [batch, ...]) for `mode` (a
        `runtime.ModeKeys`; dropout in TRAIN only), with the parts that
        mode's spec takes.
      init_checkpoint: the checkpoint to start from, or None.
      learning_rate, num_train_steps, num_warmup_steps: the optimizer's
        schedule (TRAIN only).
      use_tpu: build for TPUEstimator (restore through a scaffold).
      options: `training.TrainingOptions` (None: the defaults).
      count_tokens: whether the progress lines count tokens: every position
        of input_ids [batch, ...] in a training batch.
      passed_through: names of features that PREDICT returns as they come,
        where the features have them (label_ids and is_real_example, to
        score the predictions by).
      modes: the modes the task has; another raises ValueError.

    Returns:
      model_fn(features, labels, mode, params) -> runtime.TPUEstimatorSpec.
      `labels` goes unused (the targets come among the features);
      params["batch_size"] is a training batch's size.
    """

    def model_fn(features, labels, mode, params):
        """See task_model_fn."""
        del labels  # The targets are among the features.
        if mode not in modes:
            raise ValueError("%s's model_fn supports %s, not %s"
                             % (build_head.__module__, " and ".join(modes), mode))
        input_pipeline.log_features(features)
        head = build_head(features, mode)
        scaffold_fn = checkpoints.init_from_checkpoint(init_checkpoint, use_tpu)

        if mode == runtime.ModeKeys.TRAIN:
            tokens_per_step = None
            if count_tokens:
                tokens_per_step = params["batch_size"]
                for size in modeling.get_shape_list(features["input_ids"])[1:]:
                    tokens_per_step = tokens_per_step * size
            return training.train_spec(
                head.loss, learning_rate, num_train_steps, num_warmup_steps, use_tpu,
                options, examples_per_step=params["batch_size"],
                tokens_per_step=tokens_per_step, scaffold_fn=scaffold_fn)

        if mode == runtime.ModeKeys.EVAL:
            return runtime.TPUEstimatorSpec(mode=mode, loss=head.loss,
                                            eval_metrics=head.eval_metrics,
                                            scaffold_fn=scaffold_fn)

        predictions = dict(head.predictions)
        for name in passed_through:
            if name in features:
                predictions[name] = features[name]
        export_outputs = None
        if head.export_outputs is not None:
            export_outputs = {tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY:
                              runtime.PredictOutput(head.export_outputs)}
        return runtime.TPUEstimatorSpec(mode=mode, predictions=predictions,
                                        export_outputs=export_outputs, scaffold_fn=scaffold_fn)

    return model_fn


def example_labels(features, label_shape=(), dtype=tf.int32):
    """The label_ids and is_real_example of `features` (input_ids [batch,
    ...] and, but in a serving request, label_ids and is_real_example
    [batch]); a serving request gets zero labels, each example real.

    Args:
      label_shape: the shape of one example's label ([num_labels] for
        multi-label tasks).
      dtype: the zero labels' dtype.

    Returns:
      (label_ids [batch, *label_shape], is_real_example float32 [batch]).
    """
    # The batch's shape only where it is needed: an op more in the graph
    # would shift the seeds of its random ops under a graph-level seed.
    if "label_ids" in features:
        label_ids = features["label_ids"]
    else:  # A serving request.
        shape = tf.shape(features["input_ids"])[:1]
        if label_shape:
            shape = tf.concat([shape, label_shape], axis=0)
        label_ids = tf.zeros(shape, dtype=dtype)
    if "is_real_example" in features:
        is_real_example = tf.cast(features["is_real_example"], dtype=tf.float32)
    else:
        is_real_example = tf.ones(tf.shape(features["input_ids"])[:1], dtype=tf.float32)
    return label_ids, is_real_example


def loss_and_accuracy(accuracy=True):
    """The EVAL metric_fn of a head that picks one of its logits:
    metric_fn(per_example_loss [batch], label_ids [batch], logits [batch,
    classes], is_real_example [batch]) -> {"eval_loss", and if `accuracy`
    "eval_accuracy" (of the argmax)}, streaming metrics over the real
    examples."""

    def metric_fn(per_example_loss, label_ids, logits, is_real_example):
        # Padding examples (TPU) have is_real_example 0: no weight.
        metrics = {"eval_loss": tf.metrics.mean(values=per_example_loss,
                                                weights=is_real_example)}
        if accuracy:
            predicted = tf.argmax(logits, axis=-1, output_type=tf.int32)
            metrics["eval_accuracy"] = tf.metrics.accuracy(
                labels=label_ids, predictions=predicted, weights=is_real_example)
        return metrics

    return metric_fn


def export_builder_args(options):
    """The arguments of a script's model_fn builder for an export: no
    checkpoint to start from (the export's own restores it), no training,
    no TPU, and the `training.TrainingOptions` `options` made fit for serving
    (`TrainingOptions.for_export`)."""
    return dict(init_checkpoint=None, learning_rate=0.0, num_train_steps=None,
                num_warmup_steps=None, use_tpu=False, use_one_hot_embeddings=False,
                options=(options or training.TrainingOptions()).for_export())
