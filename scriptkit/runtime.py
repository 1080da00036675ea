"""The contract every runner follows, and which runner this TensorFlow has.

Every script is written against one contract, the TPUEstimator's: a
`model_fn(features, labels, mode, params)` returning a `TPUEstimatorSpec`,
and `input_fn(params)` returning a `tf.data.Dataset`, with the batch size in
`params["batch_size"]`. This module holds the contract's names and picks
what runs it (`runners.make_estimator` builds it):

* TensorFlow <= 2.15 ships the Estimator: a TPUEstimator (one device or
  TPU), or a plain Estimator under a tf.distribute strategy; the names
  below are the Estimator's.
* TensorFlow >= 2.16 has no Estimator: `session_runner.SessionRunner`
  drives the same `model_fn` on the graph APIs that remain (`tf.compat.v1`
  sessions, `MonitoredTrainingSession`, `Saver`, SessionRunHooks,
  `tf.compat.v1.metrics`, `tf.data`, `tf.distribute`), and writes the same
  checkpoints, summaries and SavedModels; the names below are this
  module's own, with the Estimator's fields and values.

The environment variable BERT_RUNTIME=session selects the session runner on a
TensorFlow that still has the Estimator (for comparisons and tests);
BERT_RUNTIME=estimator insists on the Estimator.

Scripts import the mode keys, the spec and the export helpers from here
(`runtime.ModeKeys`, `runtime.TPUEstimatorSpec`, `runtime.PredictOutput`,
`runtime.ServingInputReceiver`), never from `tf.estimator`; both runners
read their input through `read_dataset` and `call_input_fn`.
"""

import collections
import contextlib
import logging
import os

import tensorflow.compat.v1 as tf

from scriptkit import logs


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


# The line that ends training, in both runners: the loss of the last batch
# trained (the Estimator's own words are "Loss for final step: %s.").
LAST_LOSS_LINE = "Training done: the last batch's loss was %s"
_ESTIMATOR_LAST_LOSS = "Loss for final step: %s."


class _LastLossWording(logging.Filter):
    """Gives the Estimator's last line of training `LAST_LOSS_LINE`'s words."""

    def filter(self, record):
        if record.msg == _ESTIMATOR_LAST_LOSS:
            record.msg = LAST_LOSS_LINE
        return True


@contextlib.contextmanager
def last_loss_worded():
    """While in the block, the Estimator's last line of training says what
    it means (`LAST_LOSS_LINE`)."""
    with logs.tensorflow_log_filter(_LastLossWording()):
        yield


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


def call_input_fn(input_fn, params, mode, input_context):
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
