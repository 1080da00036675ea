"""Inputs longer than --max_seq_length, read in overlapping windows of
their first text (run_classifier.py's --doc_stride): how they are cut
(`first_text_windows`, `Windows`), and how the outputs of an input's
windows are combined into the input's own: in NumPy for evaluation and
prediction (`aggregate_windows`, `example_outputs`, `example_losses`), in
the graph for training on whole inputs (`combine_windows`,
`document_losses`, --window_loss=document) and for the export
(`combine_window_predictions`).

In: word pieces, the window flags of a run's settings, the model's
outputs per window. Out: windows, and outputs and losses per input.
Imports TensorFlow (the graph parts).
"""

import numpy as np
import tensorflow.compat.v1 as tf

from scriptkit import errors
from scriptkit import input_packing
from scriptkit import settings as settings_lib


def first_text_windows(tokens_a, tokens_b, max_seq_length, doc_stride, max_windows=0):
    """The first text's pieces, in the windows that fit next to the second
    text (kept whole) in `max_seq_length` (see input_packing.window_spans).

    Returns:
      list of piece lists (one, possibly empty, if the text fits); None if
      the second text leaves no room for any piece of the first.
    """
    room = max_seq_length - (3 + len(tokens_b) if tokens_b else 2)
    if room < 1:
        return None
    spans = input_packing.window_spans(len(tokens_a), room, doc_stride, max_windows)
    return [tokens_a[start:start + length] for start, length in spans] or [tokens_a]


class Windows:
    """How inputs too long for --max_seq_length are read
    (classifier_features.convert_example) and their windows' outputs
    combined (`aggregate_windows`); None: inputs are cut to fit."""

    def __init__(self, doc_stride, max_windows=0, aggregation="mean", loss="window"):
        self.doc_stride = doc_stride
        self.max_windows = max_windows
        self.aggregation = aggregation
        # "window" or "document" (--window_loss; training only).
        self.loss = loss

    @classmethod
    def from_settings(cls, settings):
        """The Windows of --doc_stride, --max_windows, --window_aggregation
        and --window_loss in a run's `settings`, or None without
        --doc_stride (then none of the three may be given, nor differ from
        its default).

        Raises:
          InputError: a value out of range, window flags without
            --doc_stride, or --window_loss=document for training without
            --max_windows or with --window_aggregation=first.
        """
        if settings.doc_stride is None:
            for name in ("max_windows", "window_aggregation", "window_loss"):
                if name in settings.given or (getattr(settings, name)
                                              != settings_lib.default_of(settings, name)):
                    raise errors.InputError("--%s is for --doc_stride, which is unset"
                                            % name)
            return None
        if settings.doc_stride < 1:
            raise errors.InputError("--doc_stride=%d: must be at least 1"
                                    % settings.doc_stride)
        if settings.max_windows < 0:
            raise errors.InputError("--max_windows=%d: must be 0 (all) or more"
                                    % settings.max_windows)
        # Runs without training may follow a record that says "document".
        if settings.window_loss == "document" and settings.do_train:
            if settings.window_aggregation == "first":
                raise errors.InputError(
                    "--window_loss=document needs --window_aggregation=mean or max: with "
                    "first, only the first window would be trained")
            if not settings.max_windows:
                raise errors.InputError(
                    "--window_loss=document needs --max_windows: the windows of an input "
                    "trained together (a training batch holds --train_batch_size times "
                    "that many)")
        return cls(settings.doc_stride, settings.max_windows, settings.window_aggregation,
                   settings.window_loss)

    def convert_args(self):
        """classifier_features.file_based_convert_examples_to_features'
        arguments."""
        return {"doc_stride": self.doc_stride, "max_windows": self.max_windows}

    @property
    def per_document(self):
        """Whether training takes each input's windows together
        (--window_loss=document)."""
        return self.loss == "document"


def aggregate_windows(values, example_of_record, num_examples, how):
    """Combines the outputs of each input's windows.

    Args:
      values: [num_records, ...] outputs, in record order.
      example_of_record: [num_records] input index of each record (-1:
        padding, left out), as classifier_features'
        file_based_convert_examples_to_features returns it; an input's
        windows are consecutive.
      num_examples: number of inputs; each has at least one window.
      how: "mean", "max" or "first" (over the windows, value by value).

    Returns:
      float64 array [num_examples, ...].
    """
    values = np.asarray(values, dtype=np.float64)
    index = np.asarray(example_of_record)
    values, index = values[index >= 0], index[index >= 0]
    if not num_examples:
        return values[:0]
    if not np.array_equal(np.unique(index), np.arange(num_examples)):
        raise RuntimeError("The windows do not cover inputs 0..%d" % (num_examples - 1))
    starts = np.flatnonzero(np.r_[True, index[1:] != index[:-1]])
    if how == "first":
        return values[starts]
    if how == "max":
        return np.maximum.reduceat(values, starts, axis=0)
    counts = np.diff(np.r_[starts, len(index)]).reshape((-1,) + (1,) * (values.ndim - 1))
    return np.add.reduceat(values, starts, axis=0) / counts


def example_outputs(predictions, example_of_record, num_examples, processor, windows):
    """Each input's output from its windows' predictions.

    Args:
      predictions: the model_fn's prediction dicts, one per record.
      example_of_record, num_examples: as for `aggregate_windows`.
      processor: the task's DataProcessor (its problem type).
      windows: the Windows (its aggregation).

    Returns:
      (outputs, logits): outputs [num_examples, num_labels] probabilities
      (a softmax of the combined logits; for multi-label the combined
      probabilities), or [num_examples] scores for regression; logits the
      combined logits of single-label tasks, else None.
    """
    how = windows.aggregation
    if processor.is_regression:
        return aggregate_windows([p["scores"] for p in predictions], example_of_record,
                                 num_examples, how), None
    if processor.is_multi_label:
        return aggregate_windows([p["probabilities"] for p in predictions],
                                 example_of_record, num_examples, how), None
    logits = aggregate_windows([p["logits"] for p in predictions], example_of_record,
                               num_examples, how)
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True), logits


def example_losses(outputs, logits, label_ids, processor):
    """[n] losses of combined outputs (`example_outputs`), as the model_fn
    computes them: cross-entropy, mean sigmoid cross-entropy over the labels
    (multi-label), or squared error (regression)."""
    label_ids = np.asarray(label_ids)
    if processor.is_regression:
        return np.square(outputs - label_ids)
    if processor.is_multi_label:
        p = np.clip(outputs, 1e-12, 1 - 1e-12)
        return -np.mean(label_ids * np.log(p) + (1 - label_ids) * np.log(1 - p), axis=-1)
    log_norm = np.log(np.sum(np.exp(logits - logits.max(axis=-1, keepdims=True)), axis=-1))
    chosen = np.take_along_axis(logits, label_ids.reshape(-1, 1), axis=-1)[:, 0]
    return logits.max(axis=-1) + log_norm - chosen


def combine_windows(values, window_mask, how):
    """Combines each input's window outputs in the graph, as
    `aggregate_windows` does in NumPy.

    Args:
      values: float [batch, windows, ...], one output per window.
      window_mask: bool [batch, windows], False for the padding windows
        (left out); each input has at least one real window.
      how: "mean" or "max" (value by value).

    Returns:
      float [batch, ...].
    """
    mask = tf.reshape(window_mask, tf.concat(
        [tf.shape(window_mask), tf.ones([values.shape.ndims - 2], tf.int32)], axis=0))
    if how == "max":
        return tf.reduce_max(tf.where(tf.broadcast_to(mask, tf.shape(values)), values,
                                      tf.fill(tf.shape(values), values.dtype.min)), axis=1)
    weights = tf.cast(mask, values.dtype)
    return tf.reduce_sum(values * weights, axis=1) / tf.maximum(
        tf.reduce_sum(weights, axis=1), 1.0)


def document_losses(window_logits, window_mask, labels, how, is_regression=False,
                    multi_label=False):
    """The loss of each input of windows on the combination of its windows'
    outputs (--window_loss=document), as `example_losses` computes it on
    `example_outputs`: cross-entropy of the combined logits; for multi-label
    tasks, the sigmoid cross-entropy of the combined probabilities, averaged
    over the labels; for regression, the squared error of the combined
    score.

    Args:
      window_logits: float32 [batch, windows, num_labels].
      window_mask: bool [batch, windows] (see `combine_windows`).
      labels: as for run_classifier.create_model, one per input.
      how: "mean" or "max".

    Returns:
      float32 [batch].
    """
    if is_regression:
        scores = combine_windows(window_logits[..., 0], window_mask, how)
        return tf.square(scores - tf.cast(labels, tf.float32))
    if multi_label:
        labels = tf.cast(labels, tf.float32)
        if how == "max":
            # The largest probability is the sigmoid of the largest logit.
            return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
                labels=labels, logits=combine_windows(window_logits, window_mask, how)),
                axis=-1)
        # The log of the mean of the windows' probabilities (and of their
        # complements) from their logs, which stay finite where they are tiny.
        mask = tf.broadcast_to(window_mask[..., tf.newaxis], tf.shape(window_logits))
        count = tf.reduce_sum(tf.cast(window_mask, tf.float32), axis=1, keepdims=True)

        def log_mean(log_values):
            masked = tf.where(mask, log_values, tf.fill(tf.shape(log_values), -1e30))
            return tf.reduce_logsumexp(masked, axis=1) - tf.math.log(count)

        log_p = log_mean(tf.math.log_sigmoid(window_logits))
        log_not_p = log_mean(tf.math.log_sigmoid(-window_logits))
        return -tf.reduce_mean(labels * log_p + (1.0 - labels) * log_not_p, axis=-1)
    log_probs = tf.nn.log_softmax(combine_windows(window_logits, window_mask, how), axis=-1)
    one_hot_labels = tf.one_hot(labels, depth=tf.shape(window_logits)[-1], dtype=tf.float32)
    return -tf.reduce_sum(one_hot_labels * log_probs, axis=-1)


def combine_window_predictions(predictions, example_of_window, processor, how):
    """`example_outputs` in the graph: the model_fn's predictions for
    windows ([windows, ...]) -> those of their inputs ([inputs, ...])."""
    def combine(values):
        if how == "first":
            position = tf.range(tf.shape(example_of_window)[0])
            return tf.gather(values, tf.math.segment_min(position, example_of_window))
        segment_fn = tf.math.segment_max if how == "max" else tf.math.segment_mean
        return segment_fn(values, example_of_window)

    if processor.is_regression:
        return {"scores": combine(predictions["scores"])}
    if processor.is_multi_label:
        return {"probabilities": combine(predictions["probabilities"])}
    return {"probabilities": tf.nn.softmax(combine(predictions["logits"]), axis=-1)}
