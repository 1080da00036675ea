"""Fine-tunes BERT on a sentence or sentence-pair task (classification, or
regression for STS-B), evaluates it and predicts.

Differences from the original:

Nothing of it is removed: its flags (names, meanings, defaults), building
blocks (`convert_single_example`, `create_model`, `model_fn_builder`, ...;
new arguments are keywords with defaults), variable names and output files
(``eval_results.txt``, ``test_results.tsv``) stay. Added:

* processors for the whole GLUE benchmark in the standard GLUE download
  layout (CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI, RTE, WNLI) and XNLI in
  any language (``--xnli_language``); STS-B is a regression task;
* the metrics each task is reported with (F1 for MRPC/QQP, Matthews
  correlation for CoLA, Pearson/Spearman for STS-B) in ``eval_results.txt``;
* predictions in the GLUE submission format (``MRPC.tsv`` etc.);
* evaluation during training (``--eval_every_n_steps``) and keeping the best
  checkpoint (``--keep_best_checkpoint``);
* a SavedModel for serving (``--export_dir``);
* inputs longer than ``--max_seq_length`` read in overlapping windows
  (``--doc_stride``) instead of cut;
* clear errors for bad input before training starts;
* your own data without code (``--task_name=generic``, see own_data.py and
  docs/own_data.md): CSV, TSV or JSON Lines files with the columns named by
  flags; classification, multi-label classification or regression.
"""

import contextlib
import dataclasses
import functools
import os
from typing import Optional

import numpy as np
from scriptkit import quiet_tf  # noqa: F401  (first: imports TensorFlow without its start-up noise)
import tensorflow.compat.v1 as tf
from absl import flags

from scriptkit import attributions
from scriptkit import checkpoints
from scriptkit import classifier_metrics
from scriptkit import errors
from scriptkit import evaluation
from scriptkit import file_io
from scriptkit import fine_tuning
from scriptkit import input_packing
from scriptkit import long_inputs
import modeling
from scriptkit import output_lock
from scriptkit import own_data
from scriptkit import runtime
from scriptkit import script_runner
from scriptkit import serving
from scriptkit import settings as settings_lib
from scriptkit import shared_flags
from scriptkit import task_model
from scriptkit import training
from scriptkit import training_progress
# The original's examples, processors and input functions, under the names
# that code written against Google's run_classifier.py (and docs/own_task.md)
# imports from here.
from scriptkit.classifier_data import (  # noqa: F401
    ColaProcessor, DataProcessor, InputExample, InputFeatures, MnliProcessor, MrpcProcessor,
    PaddingInputExample, QnliProcessor, QqpProcessor, RteProcessor, Sst2Processor,
    StsbProcessor, WnliProcessor, XnliProcessor)
from scriptkit.classifier_features import (  # noqa: F401
    convert_examples_to_features, convert_single_example,
    file_based_convert_examples_to_features, file_based_input_fn_builder, input_fn_builder)

# The name that code written against Google's run_classifier.py calls.
_truncate_seq_pair = input_packing.truncate_seq_pair


# ---------------------------------------------------------------------------
# Settings and flags.

@dataclasses.dataclass(frozen=True)
class Settings(own_data.Settings):
    """This script's flags, with its defaults (read in main by
    `settings_lib.from_flags`): the fine-tuning flags and own data's
    (--task_name=generic), which `own_data.Settings` holds, and the
    classifier's own."""

    skip_malformed_rows: bool = False
    doc_stride: Optional[int] = None
    task_name: Optional[str] = None
    xnli_language: str = "zh"
    eval_every_n_steps: int = 0
    keep_best_checkpoint: bool = False
    best_checkpoint_metric: Optional[str] = None
    max_windows: int = 0
    window_aggregation: str = "mean"
    window_loss: str = "window"
    diagnostic_file: Optional[str] = None
    explain_steps: int = attributions.DEFAULT_STEPS


# The shared flags, with this script's defaults and help texts.
shared_flags.define_settings_flags(Settings, helps={
    "doc_stride": "Read an input too long for --max_seq_length in overlapping windows "
                  "instead of cutting it: windows of the first text (a pair's second "
                  "text is kept whole in each) that start this many word pieces apart. "
                  "Training learns each window with the input's label, or each input "
                  "from its combined windows (--window_loss); evaluation and "
                  "prediction combine the windows' outputs per input "
                  "(--window_aggregation). Unset: inputs are cut, as the original.",
    "data_dir": "Directory with the task's data files (train.tsv, dev.tsv, test.tsv "
                "for GLUE tasks, as the GLUE download lays them out).",
    "export_dir": "If set, export a SavedModel for serving under this directory (in a "
                  "timestamped subdirectory). Its serving_default signature takes raw "
                  "text, tf.string text_a [batch] (and text_b [batch] for pair tasks), "
                  "and returns probabilities [batch, num_labels], label_ids and labels "
                  "(scores [batch] for regression); serving_ids takes int32 input_ids, "
                  "input_mask and segment_ids [batch, max_seq_length] instead. See "
                  "docs/serving.md.",
    "train_file": "--task_name=generic: the training file (instead of "
                  "train.csv/.tsv/.jsonl in --data_dir).",
    "dev_file": "--task_name=generic: the dev (evaluation) file (instead of dev.* or "
                "val.* in --data_dir).",
    "test_file": "--task_name=generic: the file to predict with --do_predict (instead "
                 "of test.* in --data_dir).",
    "labels": "--task_name=generic: the labels, comma-separated, in the order of the "
              "model's outputs. Default: those of the training file, sorted (or, "
              "without --do_train, labels.txt of the training run in --output_dir or "
              "next to --init_checkpoint).",
})

flags.DEFINE_string(
    "task_name", None,
    "The task: cola, sst-2, mrpc, sts-b, qqp, mnli, qnli, rte, wnli or xnli "
    "(any letter case); or generic: your own CSV, TSV or JSON Lines files (see "
    "--text_column, --label_column and docs/own_data.md). Without --do_train it "
    "defaults to the training run's task (from its run_config.json).")

# This script's own flags: XNLI's language, evaluation during training,
# windows over long inputs.
flags.DEFINE_string(
    "xnli_language", "zh",
    "XNLI only: the language to train and evaluate on (zh, de, fr, ...).")

flags.DEFINE_integer(
    "eval_every_n_steps", 0,
    "With --do_train and --do_eval: also evaluate the dev set every N training "
    "steps (logging loss and metrics), not only at the end. 0: only at the end "
    "(or every --save_checkpoints_steps with --keep_best_checkpoint).")

flags.DEFINE_bool(
    "keep_best_checkpoint", False,
    "With --do_train and --do_eval: evaluate periodically and copy the "
    "checkpoint with the best dev score (the task's main metric, or "
    "--best_checkpoint_metric) to <output_dir>/best/. --do_predict and "
    "--export_dir then use that checkpoint.")

flags.DEFINE_string(
    "best_checkpoint_metric", None,
    "Metric from eval_results.txt that decides the best checkpoint (default: "
    "the task's main metric: eval_matthews_corr for CoLA, eval_f1 for MRPC and "
    "QQP, eval_spearman for STS-B, eval_accuracy otherwise). Higher is better, "
    "except for metrics whose name contains 'loss'.")

flags.DEFINE_integer(
    "max_windows", 0,
    "With --doc_stride: read at most this many windows of each input (its "
    "first ones); 0: as many as it takes (not with --window_loss=document).")

flags.DEFINE_enum(
    "window_aggregation", "mean", ["mean", "max", "first"],
    "With --doc_stride: how an input's prediction is made from its windows': "
    "the mean or the maximum of their logits (of their probabilities for "
    "multi-label tasks), or the first window's.")

flags.DEFINE_enum(
    "window_loss", "window", ["window", "document"],
    "With --doc_stride and --do_train: what the training loss is computed on. "
    "window: each window on its own, with its input's label. document: an "
    "input's windows (at most --max_windows, which this needs) go through the "
    "model together and the loss is computed on their combination by "
    "--window_aggregation (mean or max), as evaluation, prediction and the "
    "export combine them: for labels that one place of a long text decides. "
    "--train_batch_size then counts inputs, each of up to --max_windows windows.")

flags.DEFINE_string(
    "diagnostic_file", None,
    "MNLI only, with --do_predict: the GLUE diagnostic set "
    "(glue_data/diagnostic/diagnostic.tsv), predicted into AX.tsv.")

# Own data's flags (--task_name=generic), defined in own_data.py with their
# settings: listed by this script's --help.
flags.adopt_module_key_flags(own_data)


# ---------------------------------------------------------------------------
# The tasks, by --task_name (the processors: classifier_data.py, own_data.py).

PROCESSORS = {
    own_data.TASK_NAME: own_data.GenericProcessor,
    "cola": ColaProcessor,
    "sst-2": Sst2Processor,
    "mrpc": MrpcProcessor,
    "sts-b": StsbProcessor,
    "qqp": QqpProcessor,
    "mnli": MnliProcessor,
    "qnli": QnliProcessor,
    "rte": RteProcessor,
    "wnli": WnliProcessor,
    "xnli": XnliProcessor,
}
# Other spellings users type for the same tasks.
_TASK_ALIASES = {"sst2": "sst-2", "sst": "sst-2", "stsb": "sts-b", "sts": "sts-b"}


def get_processor(task_name, xnli_language="zh", settings=None):
    """The DataProcessor for a task name (case-insensitive); own data read
    as the `own_data.Settings` `settings` say (a run's settings; None: the
    defaults).

    Raises:
      errors.InputError: unknown task; the message lists the known ones.
    """
    name = (task_name or "").strip().lower()
    name = _TASK_ALIASES.get(name, name)
    if name not in PROCESSORS:
        raise errors.InputError(
            "--task_name: unknown task %r; known tasks: %s"
            % (task_name, ", ".join(sorted(PROCESSORS))))
    if name == "xnli":
        return XnliProcessor(language=xnli_language)
    if name == own_data.TASK_NAME:
        return own_data.GenericProcessor(settings)
    return PROCESSORS[name]()


# ---------------------------------------------------------------------------
# Model.

def create_model(bert_config, is_training, input_ids, input_mask, segment_ids,
                 labels, num_labels, use_one_hot_embeddings, is_regression=False,
                 multi_label=False, options=None):
    """BERT with a classification (or regression) layer on the pooled output.

    Variables: BERT's (bert/...), plus output_weights [num_labels, hidden]
    and output_bias [num_labels] at the top level: Google's names, so that
    fine-tuned checkpoints load in either code.

    Args:
      bert_config: modeling.BertConfig.
      is_training: apply dropout.
      input_ids, input_mask, segment_ids: int32 [batch, seq_length].
      labels: int32 [batch] label ids (float32 scores for regression; int32
        [batch, num_labels] 0/1 for multi-label).
      num_labels: number of classes (1 for regression).
      use_one_hot_embeddings: embedding lookup by one-hot product (TPUs).
      is_regression: predict a score, with a squared-error loss.
      multi_label: num_labels independent yes/no decisions: sigmoid
        probabilities, and the loss is the sigmoid cross-entropy averaged over
        the labels.
      options: training.TrainingOptions (None: the defaults).

    Returns:
      (loss, per_example_loss [batch], logits [batch, num_labels],
      probabilities [batch, num_labels]); for regression the last is the
      predicted score [batch] and the loss is the mean squared error.
    """
    with _classifier_logits(bert_config, is_training, input_ids, input_mask, segment_ids,
                            num_labels, use_one_hot_embeddings, options) as logits:
        if is_regression:
            scores = tf.squeeze(logits, axis=-1)
            per_example_loss = tf.square(scores - tf.cast(labels, tf.float32))
            return tf.reduce_mean(per_example_loss), per_example_loss, logits, scores

        if multi_label:
            # Each label on its own: no softmax competition between them.
            probabilities = tf.sigmoid(logits)
            per_example_loss = tf.reduce_mean(
                tf.nn.sigmoid_cross_entropy_with_logits(
                    labels=tf.cast(labels, logits.dtype), logits=logits), axis=-1)
            return tf.reduce_mean(per_example_loss), per_example_loss, logits, probabilities

        probabilities = tf.nn.softmax(logits, axis=-1)
        # Cross-entropy: minus the log-probability of the true label.
        log_probs = tf.nn.log_softmax(logits, axis=-1)
        one_hot_labels = tf.one_hot(labels, depth=num_labels, dtype=tf.float32)
        per_example_loss = -tf.reduce_sum(one_hot_labels * log_probs, axis=-1)
        return tf.reduce_mean(per_example_loss), per_example_loss, logits, probabilities


@contextlib.contextmanager
def _classifier_logits(bert_config, is_training, input_ids, input_mask, segment_ids,
                       num_labels, use_one_hot_embeddings, options):
    """The classifier's logits [batch, num_labels] (float32) of inputs
    [batch, seq_length] (see `create_model`), given inside the "loss" name
    scope, where the losses are built on them."""
    model = training.bert_model(bert_config, is_training, input_ids, input_mask,
                                segment_ids, use_one_hot_embeddings, options)

    # Sentence-level tasks classify the pooled output (from the final [CLS]
    # vector); a token-level task would take model.get_sequence_output().
    pooled = model.get_pooled_output()
    output_weights = tf.get_variable(
        "output_weights", [num_labels, pooled.shape[-1]],
        initializer=tf.truncated_normal_initializer(stddev=0.02))
    output_bias = tf.get_variable("output_bias", [num_labels],
                                  initializer=tf.zeros_initializer())

    with tf.variable_scope("loss"):
        if is_training:
            pooled = tf.nn.dropout(pooled, rate=0.1)
        yield tf.nn.bias_add(tf.matmul(pooled, output_weights, transpose_b=True),
                             output_bias)


def create_document_model(bert_config, is_training, input_ids, input_mask, segment_ids,
                          labels, num_labels, use_one_hot_embeddings, how,
                          is_regression=False, multi_label=False, options=None,
                          fixed_shapes=False):
    """`create_model` for inputs of several windows, trained on the
    combination of their windows' outputs (--window_loss=document). The
    variables are `create_model`'s, so that evaluation, prediction and the
    export read the model window by window.

    Args:
      input_ids, input_mask, segment_ids: int32 [batch, windows,
        seq_length]; padding windows are all zero.
      labels: one per input, as for `create_model`.
      how: "mean" or "max", the --window_aggregation.
      fixed_shapes: run every window, padding included (TPUs). Otherwise
        only the real ones run, with a few padding windows that round their
        number up to a multiple of the batch size, so that the model meets
        few distinct shapes.
      Others: as for `create_model`.

    Returns:
      (loss, per_example_loss [batch]).
    """
    batch_size, num_windows, seq_length = modeling.get_shape_list(input_ids, expected_rank=3)
    window_mask = tf.reduce_max(input_mask, axis=-1) > 0
    # The windows of all inputs, one after another: [batch * windows, ...].
    sequences = [tf.reshape(t, [-1, seq_length]) for t in (input_ids, input_mask, segment_ids)]
    if not fixed_shapes:
        real = tf.reshape(window_mask, [-1])
        # The real windows first, each input's in order.
        order = tf.argsort(tf.cast(tf.logical_not(real), tf.int32), stable=True)
        count = tf.reduce_sum(tf.cast(real, tf.int32))
        chosen = order[:(count + batch_size - 1) // batch_size * batch_size]
        sequences = [tf.gather(t, chosen) for t in sequences]
    with _classifier_logits(bert_config, is_training, *sequences, num_labels,
                            use_one_hot_embeddings, options) as logits:
        if not fixed_shapes:
            logits = tf.scatter_nd(chosen[:, tf.newaxis], logits,
                                   [batch_size * num_windows, num_labels])
        window_logits = tf.reshape(logits, [batch_size, num_windows, num_labels])
        per_example_loss = long_inputs.document_losses(
            window_logits, window_mask, labels, how, is_regression=is_regression,
            multi_label=multi_label)
        return tf.reduce_mean(per_example_loss), per_example_loss


def model_fn_builder(bert_config, num_labels, init_checkpoint, learning_rate,
                     num_train_steps, num_warmup_steps, use_tpu,
                     use_one_hot_embeddings, is_regression=False, multi_label=False,
                     options=None, document_windows=None):
    """Builds the classifier's `model_fn` for the runner (TPUEstimator API).

    Args:
      bert_config, num_labels, use_one_hot_embeddings, is_regression,
        multi_label, options: as for `create_model`.
      init_checkpoint: checkpoint to start from, or None.
      learning_rate, num_train_steps, num_warmup_steps: the optimizer's
        schedule (see optimization.create_optimizer; TRAIN only).
      use_tpu: build for TPUEstimator (restore through a scaffold).
      document_windows: None, or "mean" or "max": TRAIN features are inputs
        of several windows, input_ids, input_mask and segment_ids [batch,
        windows, seq_length], and the loss is that of their combined
        outputs (`create_document_model`). EVAL and PREDICT features are
        single windows all the same.

    Returns:
      model_fn(features, labels, mode, params) -> runtime.TPUEstimatorSpec.
      `features` holds int32 input_ids, input_mask and segment_ids
      [batch, seq_length], and label_ids [batch] (float32 for regression;
      [batch, num_labels] for multi-label) and is_real_example [batch] when
      the data has them (a serving request has neither). TRAIN: the mean
      loss and its train_op. EVAL: eval_loss and (single-label
      classification only) eval_accuracy over the real examples. PREDICT:
      "probabilities" [batch, num_labels] ("scores" [batch] for
      regression) and "logits" [batch, num_labels], plus "label_ids" and
      "is_real_example" when the features have them; the serving signature
      returns only the first.
    """

    def build_head(features, mode):
        input_ids = features["input_ids"]
        label_ids, is_real_example = task_model.example_labels(
            features, [num_labels] if multi_label else (),
            dtype=tf.float32 if is_regression else tf.int32)
        if document_windows and mode == runtime.ModeKeys.TRAIN:
            total_loss, _ = create_document_model(
                bert_config, True, input_ids, features["input_mask"], features["segment_ids"],
                label_ids, num_labels, use_one_hot_embeddings, document_windows,
                is_regression=is_regression, multi_label=multi_label, options=options,
                fixed_shapes=use_tpu)
            return task_model.Head(loss=total_loss)
        total_loss, per_example_loss, logits, probabilities = create_model(
            bert_config, mode == runtime.ModeKeys.TRAIN, input_ids,
            features["input_mask"], features["segment_ids"], label_ids, num_labels,
            use_one_hot_embeddings, is_regression=is_regression, multi_label=multi_label,
            options=options)
        output_name = "scores" if is_regression else "probabilities"
        # Multi-label metrics (F1) come from the NumPy pass in `evaluate`.
        metric_fn = task_model.loss_and_accuracy(not (is_regression or multi_label))
        return task_model.Head(
            loss=total_loss,
            eval_metrics=(metric_fn, [per_example_loss, label_ids, logits, is_real_example]),
            # The logits too: windows of one input are combined over them.
            predictions={output_name: probabilities, "logits": logits},
            export_outputs={output_name: probabilities})

    return task_model.task_model_fn(
        build_head, init_checkpoint, learning_rate, num_train_steps, num_warmup_steps,
        use_tpu, options, count_tokens=False, passed_through=("label_ids", "is_real_example"))


# ---------------------------------------------------------------------------
# Steps of main.

@dataclasses.dataclass
class _Task:
    """The run's task: its `DataProcessor` (what it reads and how it is
    scored), its labels in the order of the model's outputs (None for
    regression) and how inputs too long for --max_seq_length are read
    (`long_inputs.Windows`; None: cut)."""

    processor: DataProcessor
    label_list: list
    windows: long_inputs.Windows = None

    @property
    def num_labels(self):
        """The model's outputs: one per label, one score for regression."""
        return 1 if self.processor.is_regression else len(self.label_list)

    @property
    def per_document(self):
        """Whether training takes each input's windows together
        (--window_loss=document)."""
        return bool(self.windows and self.windows.per_document)

    def model_fn_args(self):
        """The task's arguments of `model_fn_builder`."""
        return dict(num_labels=self.num_labels, is_regression=self.processor.is_regression,
                    multi_label=self.processor.is_multi_label,
                    document_windows=self.windows.aggregation if self.per_document else None)

    def convert_args(self, training=False):
        """The task's arguments of `file_based_convert_examples_to_features`
        (`training`: for the training file)."""
        args = dict(multi_label=self.processor.is_multi_label,
                    **(self.windows.convert_args() if self.windows else {}))
        if training:
            args["windows_per_record"] = self.windows.max_windows if self.per_document else 0
        return args

    def input_fn_args(self, training=False):
        """The task's arguments of `file_based_input_fn_builder` (`training`:
        for the training file)."""
        return dict(is_regression=self.processor.is_regression,
                    num_multi_labels=(len(self.label_list) if self.processor.is_multi_label
                                      else 0),
                    windows_per_record=(self.windows.max_windows
                                        if training and self.per_document else 0))


def _lcm(a, b):
    return a * b // np.gcd(a, b)


def _count_with_padding(num_examples, num_actual):
    return "%d (%d actual, %d padding)" % (num_examples, num_actual, num_examples - num_actual)


def _count_records(example_of_record, num_actual, windows):
    """The "Num examples" of the logs for the records of
    file_based_convert_examples_to_features (windows: the Windows or None)."""
    if not windows:
        return _count_with_padding(len(example_of_record), num_actual)
    num_windows = sum(1 for index in example_of_record if index >= 0)
    return "%d in %d windows (%d padding records)" % (
        num_actual, num_windows, len(example_of_record) - num_windows)


class _EvalSet:
    """A dev set written to a TFRecord file, ready to evaluate."""

    def __init__(self, run, suffix, examples, task):
        self.suffix = suffix
        self.num_actual = len(examples)
        self.windows = task.windows
        settings = run.settings
        multiple = 1
        if run.fixed_batches:
            # Full batches only: all-zero records fill the last one. They
            # have weight 0 in every metric. The predict pass for the task's
            # own metrics reads the same file, so the count must suit both
            # batch sizes.
            multiple = settings.eval_batch_size
            if task.processor.metric_names or task.windows:
                multiple = _lcm(settings.eval_batch_size, settings.predict_batch_size)
        name = "eval.tf_record" if not suffix else "eval_%s.tf_record" % suffix
        self.file = os.path.join(settings.output_dir, name)
        self.example_of_record = file_based_convert_examples_to_features(
            examples, task.label_list, settings.max_seq_length, run.tokenizer, self.file,
            pad_to_multiple=multiple, **task.convert_args())
        self.num_examples = len(self.example_of_record)
        self.input_fn = file_based_input_fn_builder(
            input_file=self.file, seq_length=settings.max_seq_length, is_training=False,
            drop_remainder=run.fixed_batches, length_buckets=run.options.length_buckets,
            **task.input_fn_args())

    @property
    def results_file(self):
        """eval_results.txt, or eval_results_<suffix>.txt."""
        return "eval_results_%s.txt" % self.suffix if self.suffix else "eval_results.txt"

    def describe_count(self):
        """The "Num examples" of the logs."""
        return _count_records(self.example_of_record, self.num_actual, self.windows)


def evaluate(estimator, run, eval_set, processor, checkpoint_path=None):
    """Evaluates one checkpoint of the `fine_tuning.Run` `run` on a dev set:
    `checkpoint_path`, else the latest in --output_dir, else the run's
    --init_checkpoint (a fine-tuned model).

    Returns:
      dict with the estimator's eval_accuracy, eval_loss, loss and
      global_step, plus the task's metrics (computed in NumPy over a predict
      pass on the same data, padding rows excluded).
    """
    training_progress.log_phase("Running evaluation", [
        ("Num examples", eval_set.describe_count()),
        ("Batch size", run.settings.eval_batch_size)])
    checkpoint_path = checkpoint_path or tf.train.latest_checkpoint(run.output_dir)
    if eval_set.windows:
        return _evaluate_windows(estimator, run, eval_set, processor, checkpoint_path)
    result = run.evaluate(estimator, eval_set.input_fn, eval_set.num_examples, checkpoint_path)
    if processor.metric_names:
        output_name = "scores" if processor.is_regression else "probabilities"
        label_ids, outputs, is_real = [], [], []
        for prediction in run.iter_predictions(
                estimator, eval_set.input_fn, eval_set.num_examples, eval_set.num_examples,
                checkpoint_path, phase="Computing the task's metrics", name_weights=False):
            label_ids.append(prediction["label_ids"])
            outputs.append(prediction[output_name])
            is_real.append(prediction["is_real_example"])
        threshold = processor.multi_label_threshold if processor.is_multi_label else None
        result.update(classifier_metrics.compute_metrics(
            processor.metric_names, label_ids, outputs, is_real, processor.is_regression,
            threshold=threshold))
    return result


def _evaluate_windows(estimator, run, eval_set, processor, checkpoint_path):
    """`evaluate` of a dev set read in windows: every metric over the inputs'
    combined outputs (`long_inputs.example_outputs`), one value per input."""
    predictions = run.predict(estimator, eval_set.input_fn, eval_set.num_examples,
                              eval_set.num_examples, checkpoint_path, phase="Evaluating",
                              what="windows")
    outputs, logits = long_inputs.example_outputs(
        predictions, eval_set.example_of_record, eval_set.num_actual, processor,
        eval_set.windows)
    label_ids = long_inputs.aggregate_windows([p["label_ids"] for p in predictions],
                                              eval_set.example_of_record, eval_set.num_actual,
                                              "first")
    if not processor.is_regression:
        label_ids = label_ids.astype(np.int64)
    loss = float(np.mean(long_inputs.example_losses(outputs, logits, label_ids, processor)))
    result = {"eval_loss": loss, "loss": loss, "global_step": checkpoints.checkpoint_step(
        checkpoint_path or run.init_checkpoint)}
    real = np.ones(len(outputs))
    if not (processor.is_regression or processor.is_multi_label):
        result.update(classifier_metrics.compute_metrics(["accuracy"], label_ids, outputs,
                                                         real, False))
    threshold = processor.multi_label_threshold if processor.is_multi_label else None
    result.update(classifier_metrics.compute_metrics(
        processor.metric_names, label_ids, outputs, real, processor.is_regression,
        threshold=threshold))
    return result


def train_and_evaluate(estimator, run, train_input_fn, num_train_steps, eval_sets,
                       processor, eval_every_n_steps, keep_best, best_metric):
    """Trains to num_train_steps, evaluating the first dev set every
    eval_every_n_steps (and at the end), and with keep_best copies the best
    checkpoint to <output_dir>/best/ (`evaluation.train_and_evaluate`).

    Args:
      run: the `fine_tuning.Run`.
      train_input_fn: the training input_fn; each chunk of training goes on
        in it where the previous one stopped (training.ResumableTrainer).

    Returns:
      (results of the last evaluation, best checkpoint path or None).
    """
    best = evaluation.BestCheckpoint(best_metric, os.path.join(run.output_dir, "best")) \
        if keep_best else None

    def evaluate_fn(checkpoint, step):
        result = evaluate(estimator, run, eval_sets[0], processor, checkpoint)
        training_progress.log_phase("Eval results at step %d" % step,
                                    [(key, result[key]) for key in sorted(result)])
        return result

    steps = list(range(eval_every_n_steps, num_train_steps, eval_every_n_steps))
    result, _ = evaluation.train_and_evaluate(estimator, train_input_fn,
                                              steps + [num_train_steps], evaluate_fn, best)
    return result, best.path if best else None



def write_predictions(estimator, run, task, examples, suffix, submission_name,
                      checkpoint_path=None):
    """Predicts a test set; writes test_results[_<suffix>].tsv (one line of
    tab-separated class probabilities, or one score, per example, in input
    order) and, for GLUE tasks, <submission_name>.tsv ("index\\tprediction");
    for own data (own_data.GenericProcessor), predictions[_<suffix>].tsv (id
    and predicted label names). With the `_Task` `task`'s windows, each
    example's line combines its windows' outputs
    (`long_inputs.example_outputs`).
    """
    processor, label_list, windows = task.processor, task.label_list, task.windows
    num_actual = len(examples)
    settings = run.settings
    name = "predict.tf_record" if not suffix else "predict_%s.tf_record" % suffix
    predict_file = os.path.join(run.output_dir, name)
    # Full batches only on TPUs; the padding records' predictions are dropped.
    example_of_record = file_based_convert_examples_to_features(
        examples, label_list, settings.max_seq_length, run.tokenizer, predict_file,
        pad_to_multiple=settings.predict_batch_size if run.fixed_batches else 1,
        **task.convert_args())
    num_records = len(example_of_record)
    num_real = sum(1 for index in example_of_record if index >= 0)

    training_progress.log_phase("Running prediction", [
        ("Num examples", _count_records(example_of_record, num_actual, windows)),
        ("Batch size", settings.predict_batch_size)])
    input_fn = file_based_input_fn_builder(
        input_file=predict_file, seq_length=settings.max_seq_length, is_training=False,
        drop_remainder=run.fixed_batches, length_buckets=run.options.length_buckets,
        **task.input_fn_args())
    # In input order; the padding records come last.
    predictions = run.predict(estimator, input_fn, num_records, num_real, checkpoint_path,
                              what="inputs")
    if windows:
        outputs = list(long_inputs.example_outputs(predictions, example_of_record[:num_real],
                                                   num_actual, processor, windows)[0])
    else:
        output_name = "scores" if processor.is_regression else "probabilities"
        outputs = [prediction[output_name] for prediction in predictions]

    name = "test_results.tsv" if not suffix else "test_results_%s.tsv" % suffix
    output_predict_file = os.path.join(run.output_dir, name)
    with file_io.atomic_output(output_predict_file) as writer:
        for output in outputs:
            values = [output] if processor.is_regression else output
            writer.write("\t".join(str(v) for v in values) + "\n")
    file_io.report_output(output_predict_file, "%d predictions" % num_actual)

    if submission_name:
        submission_file = os.path.join(run.output_dir, submission_name + ".tsv")
        with file_io.atomic_output(submission_file) as writer:
            writer.write("index\tprediction\n")
            for example, output in zip(examples, outputs):
                index = example.guid.split("-", 1)[1]
                if processor.is_regression:
                    prediction = str(float(output))
                else:
                    prediction = label_list[int(np.argmax(output))]
                writer.write("%s\t%s\n" % (index, prediction))
        file_io.report_output(submission_file, "the GLUE submission file")

    if isinstance(processor, own_data.GenericProcessor):
        name = own_data.PREDICTIONS_FILE
        if suffix:
            name = name.replace(".tsv", "_%s.tsv" % suffix)
        path = os.path.join(run.output_dir, name)
        processor.write_predictions_file(path, examples[:num_actual], outputs, label_list)
        file_io.report_output(path, "the predicted labels")


def export_model(source, processor, label_list, windows=None,
                 explain_steps=attributions.DEFAULT_STEPS):
    """Exports a SavedModel (tag "serve") for serving (see serving.py) of the
    `serving.ExportSource` `source` and returns its directory (timestamped,
    in source.export_dir).

    serving_default takes tf.string text_a [batch] (and text_b [batch] for
    pair tasks, `processor.text_pairs`; an empty text_b gives a single-text
    input, as --do_predict does), and returns:

    * single-label: probabilities [batch, num_labels], label_ids [batch]
      (the most probable) and labels [batch] (its name);
    * multi-label: probabilities [batch, num_labels], and label_ids and
      labels [batch, num_labels]: the labels at or above the threshold, in
      label order, then -1 and "" for the rest;
    * regression: scores [batch].

    serving_ids takes int32 input_ids, input_mask and segment_ids [batch,
    seq_length] and returns probabilities (scores for regression), as
    exports did before.

    The model_fn is the training one, run on the CPU without a TPU
    wrapper, so the export has no TPU graph whatever --use_tpu says.
    Inputs longer than source.max_seq_length are cut as for training.

    Args:
      processor: the task's DataProcessor (problem type, threshold, pairs).
      label_list: the label names (the model's outputs, in order).
      windows: a `long_inputs.Windows`: longer texts are read in windows
        instead, and each text's outputs combine its windows' as
        --do_predict does.
      explain_steps: the points of the explain signature's integral
        (`_explain_signature`); 0: no explain signature. An export that
        reads windows has none.
    """
    max_seq_length = source.max_seq_length
    model_fn = model_fn_builder(
        bert_config=source.bert_config,
        num_labels=1 if processor.is_regression else len(label_list),
        is_regression=processor.is_regression, multi_label=processor.is_multi_label,
        **task_model.export_builder_args(source.options))

    def text_signature(tokenizer):
        inputs = {"text_a": serving.string_input("text_a")}
        if processor.text_pairs:
            inputs["text_b"] = serving.string_input("text_b")
        pieces_a = tokenizer.tokenize(inputs["text_a"])
        pieces_b = tokenizer.tokenize(inputs["text_b"]) if processor.text_pairs else None
        combine = None
        if windows:
            pieces_a, pieces_b, example_of_window = serving.first_text_windows(
                pieces_a, pieces_b, max_seq_length, windows.doc_stride, windows.max_windows)

            def combine(predictions):
                return long_inputs.combine_window_predictions(
                    predictions, example_of_window, processor, windows.aggregation)

        features = serving.pack(pieces_a, pieces_b, max_seq_length, tokenizer.cls_id,
                                tokenizer.sep_id)
        return inputs, features, lambda predictions: _text_outputs(
            combine(predictions) if combine else predictions, processor, label_list)

    config = {"max_seq_length": max_seq_length}
    fields = {name: field for name, field in processor.input_fields.items()
              if field and field != name and (name == "text_a" or processor.text_pairs)}
    if fields:
        config["input_fields"] = fields
    if windows:
        config.update(doc_stride=windows.doc_stride, max_windows=windows.max_windows,
                      window_aggregation=windows.aggregation)
    explain = None
    if explain_steps and not windows:
        explain = functools.partial(_explain_signature, max_seq_length=max_seq_length,
                                    processor=processor, label_list=label_list,
                                    steps=explain_steps)
        config.update(explain_steps=explain_steps, optional_inputs=["label"])
    head = ("regression" if processor.is_regression
            else "sigmoid" if processor.is_multi_label else "softmax")
    return serving.export(model_fn, source, text_signature, settings=config,
                          explain_signature=explain, onnx_head=("classifier", head))


def _explain_signature(tokenizer, max_seq_length, processor, label_list, steps):
    """The export's explain signature (`serving.export`'s explain_signature):
    the text signature's inputs, and for classifiers a label (tf.string
    [batch]: a label's name, or "" for the predicted one); per instance, the
    words of its texts with their attributions to the label's probability
    (to the score for regression) by integrated gradients over `steps`
    points (attributions.py), and that output at the input ("output") and
    at the baseline ("baseline_output"), whose difference the attributions
    sum to, the label's id and name."""
    inputs = {"text_a": serving.string_input("text_a")}
    if processor.text_pairs:
        inputs["text_b"] = serving.string_input("text_b")
    if not processor.is_regression:
        inputs["label"] = serving.string_input("label")
    features, words_fn = attributions.pack_texts(
        tokenizer, [inputs[name] for name in ("text_a", "text_b") if name in inputs],
        max_seq_length)

    def outputs_fn(features, model):
        if processor.is_regression:
            targets = tf.zeros_like(features["input_ids"][:, 0])
        else:
            predicted = tf.argmax(serving.run_in_chunks(model, features)["probabilities"],
                                  axis=-1, output_type=tf.int32)
            targets = attributions.chosen_labels(inputs["label"], predicted, label_list)

        def explained_output(predictions, targets):
            if processor.is_regression:
                return predictions["scores"]
            return tf.gather(predictions["probabilities"], targets, batch_dims=1)

        pieces, output, baseline_output = attributions.integrated_gradients(
            model, features, (tokenizer.cls_id, tokenizer.sep_id), targets, explained_output,
            steps)
        outputs = dict(words_fn(pieces), output=output, baseline_output=baseline_output)
        if not processor.is_regression:
            outputs.update(label_ids=targets, labels=tf.gather(tf.constant(label_list), targets))
        return outputs

    return inputs, features, outputs_fn


def _text_outputs(predictions, processor, label_list):
    """The outputs of the text signature (see `export_model`) from the
    model_fn's predictions."""
    if processor.is_regression:
        return {"scores": predictions["scores"]}
    probabilities = predictions["probabilities"]
    names = tf.constant(label_list)
    if not processor.is_multi_label:
        label_ids = tf.argmax(probabilities, axis=-1, output_type=tf.int32)
        return {"probabilities": probabilities, "label_ids": label_ids,
                "labels": tf.gather(names, label_ids)}
    # Compared in float64, as the NumPy of --do_predict compares them.
    chosen = tf.cast(probabilities, tf.float64) >= processor.multi_label_threshold
    # The chosen labels' ids first (a stable sort keeps label order).
    order = tf.argsort(tf.cast(tf.logical_not(chosen), tf.int32), axis=-1, stable=True)
    label_ids = tf.where(tf.gather(chosen, order, batch_dims=1), order,
                         -tf.ones_like(order))
    labels = tf.where(label_ids >= 0, tf.gather(names, tf.maximum(label_ids, 0)),
                      tf.fill(tf.shape(label_ids), ""))
    return {"probabilities": probabilities, "label_ids": label_ids, "labels": labels}


def problem_type(processor):
    """The run record's problem type of a task (run_record.PROBLEM_TYPES)."""
    if processor.is_regression:
        return "regression"
    if processor.is_multi_label:
        return "multi_label_classification"
    return "single_label_classification"


def write_run_record(run, processor, label_list):
    """Writes the run record of a training run (`fine_tuning.Run.write_record`):
    the task, the labels and the flags that shape the model's inputs."""
    names = ["task_name", "do_lower_case", "max_seq_length", "vocab_file"]
    if run.settings.doc_stride is not None:
        # Later runs read and combine windows as this one did.
        names += ["doc_stride", "max_windows", "window_aggregation"]
        if run.settings.window_loss != "window":
            # Recorded where it differs from the default only, so that other
            # runs' records stay as they were.
            names.append("window_loss")
    if isinstance(processor, XnliProcessor):
        names.append("xnli_language")
    if isinstance(processor, own_data.GenericProcessor):
        names += ["regression", "multi_label", "multi_label_threshold", "label_separator",
                  "has_header", "text_column", "text_b_column"]
    run.write_record(problem_type(processor), names, labels=label_list)


def _checkpoint_to_export(run, best_checkpoint=None):
    """The checkpoint --export_dir exports (`fine_tuning.Run.checkpoint`, with
    the classifier's output layer). Raises InputError if there is none."""
    checkpoint = run.checkpoint(best_checkpoint)
    if checkpoint:
        return checkpoint
    if run.init_checkpoint:
        raise errors.InputError(
            "--export_dir: --init_checkpoint=%s has no classifier layer (output_weights): "
            "fine-tune it first with --do_train" % run.init_checkpoint)
    raise errors.InputError(
        "--export_dir: no checkpoint in --output_dir=%s to export (train first with "
        "--do_train)" % run.output_dir)



def _needs(settings):
    """The flags a run requires besides the model's, and the data file flags
    it reads (`fine_tuning.prepare_run`). Own data may name each file
    (--train_file etc.) instead of a --data_dir; an export alone reads no
    data. A run that does nothing yet needs a --data_dir too (whatever the
    actions, a GLUE task reads its files there): named with the other
    missing flags, not after them."""
    reads_data = settings.do_train or settings.do_eval or settings.do_predict
    data_dir_flag, data_files = (), ()
    if own_data.is_generic_task(settings.task_name):
        data_files = fine_tuning.data_file_flags(
            settings, ("do_train", "train_file"), ("do_eval", "dev_file"),
            ("do_predict", "test_file"))
    elif reads_data or not settings.export_dir:
        data_dir_flag = ("data_dir",)
    return data_dir_flag + ("task_name",), data_files


def _check_flags(settings):
    """The classifier's checks of its flags (`fine_tuning.prepare_run`).

    Returns:
      (processor, windows): the task's DataProcessor, and its
      `long_inputs.Windows` or None.
    """
    own_data.check_flags_unused(settings.task_name, settings)
    processor = get_processor(settings.task_name, settings.xnli_language, settings)
    processor.skip_malformed_rows = settings.skip_malformed_rows
    if settings.diagnostic_file:
        if not isinstance(processor, MnliProcessor):
            raise errors.InputError("--diagnostic_file is for --task_name=MNLI only")
        file_io.require_file("diagnostic_file", settings.diagnostic_file)
        processor.diagnostic_file = settings.diagnostic_file
    windows = long_inputs.Windows.from_settings(settings)
    periodic_eval = settings.eval_every_n_steps > 0 or settings.keep_best_checkpoint
    if periodic_eval and not (settings.do_train and settings.do_eval):
        raise errors.InputError(
            "--eval_every_n_steps and --keep_best_checkpoint need --do_train and --do_eval")
    if settings.eval_every_n_steps < 0:
        raise errors.InputError("--eval_every_n_steps must be >= 0")
    if settings.explain_steps < 0:
        raise errors.InputError("--explain_steps must be >= 0, not %d" % settings.explain_steps)
    return processor, windows


def _read_data(run, processor):
    """Reads every data set the run needs, before any work, so that a bad
    file stops it before training.

    Returns:
      (training examples or None, the dev sets to evaluate, the test sets
      to predict): `DataProcessor.get_eval_sets` and `get_predict_sets`, or
      empty lists.
    """
    settings, data_dir = run.settings, run.settings.data_dir
    return (processor.get_train_examples(data_dir) if settings.do_train else None,
            processor.get_eval_sets(data_dir) if settings.do_eval else [],
            processor.get_predict_sets(data_dir) if settings.do_predict else [])


def _start_output(run, task):
    """Makes --output_dir (`fine_tuning.Run.start_output`) and writes what
    later runs read: own data's labels.txt (the label order of the model's
    outputs, for later runs and for users) and a training run's record."""
    run.start_output()
    if isinstance(task.processor, own_data.GenericProcessor):
        task.processor.write_labels(run.output_dir)
    if run.settings.do_train:
        write_run_record(run, task.processor, task.label_list)


def _write_train_file(run, task, train_examples):
    """Writes the training inputs to train.tf_record in --output_dir.

    Returns:
      (path, number of records).
    """
    train_file = os.path.join(run.output_dir, "train.tf_record")
    num_records = len(file_based_convert_examples_to_features(
        train_examples, task.label_list, run.settings.max_seq_length, run.tokenizer,
        train_file, **task.convert_args(training=True)))
    return train_file, num_records


def _train(trainer, run, task, train_file, num_records, num_examples, num_train_steps,
           eval_sets):
    """Trains on `train_file` (`num_records` records of `num_examples`
    inputs), with periodic evaluation on the first of `eval_sets` where the
    flags ask for it (`fine_tuning.Run.train`).

    Returns:
      (results of the last evaluation or None, best checkpoint path or None).
    """
    settings, windows = run.settings, task.windows
    count = [("Num examples", num_examples)]
    if task.per_document:
        count.append(("Windows", "up to %d per example, trained together"
                      % windows.max_windows))
    elif windows:
        count.append(("Num windows", num_records))
    train_input_fn = file_based_input_fn_builder(
        input_file=train_file, seq_length=settings.max_seq_length, is_training=True,
        drop_remainder=True, length_buckets=run.options.length_buckets,
        **task.input_fn_args(training=True))
    periodic = None
    if settings.eval_every_n_steps > 0 or settings.keep_best_checkpoint:
        every = settings.eval_every_n_steps or settings.save_checkpoints_steps

        def periodic():
            return train_and_evaluate(
                trainer, run, train_input_fn, num_train_steps, eval_sets, task.processor,
                every, settings.keep_best_checkpoint,
                settings.best_checkpoint_metric or task.processor.main_metric)

    return run.train(trainer, train_input_fn, num_train_steps, count,
                     train=periodic) or (None, None)


@output_lock.releases_output_lock
def main(_):
    # Every input is checked before anything is trained or written.
    run = fine_tuning.prepare_run(
        settings_lib.from_flags(Settings), "run_classifier.py", min_seq_length=3,
        needs=_needs, check_flags=_check_flags, head_variable="output_weights")
    settings, (processor, windows) = run.settings, run.task
    task = _Task(processor, processor.get_labels(), windows)
    run.check_output_dir({"output_weights": [task.num_labels, run.bert_config.hidden_size],
                          "output_bias": [task.num_labels]})
    train_examples, eval_sets, predict_sets = _read_data(run, processor)
    num_train_steps = num_warmup_steps = None
    if settings.do_train:
        # With windows, a check only: the windows, counted once converted,
        # make the steps (and the line that gives them).
        num_train_steps, num_warmup_steps = run.train_schedule(
            len(train_examples), announce=windows is None)
    if settings.export_dir and not settings.do_train:
        _checkpoint_to_export(run)

    _start_output(run, task)
    if settings.do_train:
        train_file, num_train_records = _write_train_file(run, task, train_examples)
        if windows and not windows.per_document:
            # Each window is a training example.
            num_train_steps, num_warmup_steps = run.train_schedule(
                num_train_records, what="training windows")
    trainer = run.trainer(model_fn_builder(
        **task.model_fn_args(), **run.model_fn_args(num_train_steps, num_warmup_steps)))
    eval_sets = [_EvalSet(run, suffix, examples, task) for suffix, examples in eval_sets]

    last_result = best_checkpoint = None
    if settings.do_train:
        last_result, best_checkpoint = _train(
            trainer, run, task, train_file, num_train_records, len(train_examples),
            num_train_steps, eval_sets)

    for eval_set in eval_sets:
        # The first set's last evaluation during training is its result.
        result = (last_result if eval_set is eval_sets[0] and last_result is not None
                  else evaluate(trainer, run, eval_set, processor))
        evaluation.write_eval_results(result, run.output_dir, file_name=eval_set.results_file,
                                      headline=processor.main_metric)

    for suffix, examples, submission_name in predict_sets:
        write_predictions(trainer, run, task, examples, suffix, submission_name,
                          checkpoint_path=best_checkpoint)

    if settings.export_dir:
        source = run.export_source(_checkpoint_to_export(run, best_checkpoint))
        export_model(source, processor, task.label_list, windows, settings.explain_steps)


if __name__ == "__main__":
    script_runner.run_script(main)
