"""Pre-trains BERT: the masked language model and next-sentence heads on top
of `modeling.BertModel`, trained (or evaluated) on the TFRecord files that
create_pretraining_data.py writes.

Differences from the original:

The flags, the variable names (`cls/predictions/*` and
`cls/seq_relationship/*`, so that Google's pre-trained checkpoints restore
completely) and the output files (checkpoints and eval_results.txt in
--output_dir) are the same. Added:

* --eval_at_start; --do_eval on a fresh --output_dir (the initial model is
  saved as checkpoint 0 and evaluated); the input files checked before
  training starts;
* evaluation during training on --eval_file, with a stop at a target
  accuracy (--stop_threshold);
* distinct input files for each worker of several, and a seeded input
  stream (--input_seed) that a run from a checkpoint continues at its next
  batch;
* records written without masks (create_pretraining_data.py
  --dynamic_masking), masked as they are read (dynamic_masking.py);
* the training options (training.py), --optimizer=lamb among them, as in
  every training script; a fill-mask SavedModel (--export_dir,
  fill_mask_export.py).
"""

import dataclasses
import os
import time
from typing import Optional

from scriptkit import quiet_tf  # noqa: F401  (first: imports TensorFlow without its start-up noise)
import tensorflow.compat.v1 as tf
from absl import flags

from scriptkit import checkpoints
from scriptkit import dynamic_masking
from scriptkit import errors
from scriptkit import evaluation
from scriptkit import file_io
from scriptkit import fill_mask_export
from scriptkit import task_model
from scriptkit import run_record
from scriptkit import input_pipeline
from scriptkit import logs
import modeling
from scriptkit import output_lock
from scriptkit import pretraining_inputs
from scriptkit import pretraining_records
from scriptkit import runtime
from scriptkit import script_runner
from scriptkit import serving
from scriptkit import settings as settings_lib
from scriptkit import shared_flags
import tokenization
from scriptkit import training
from scriptkit import training_progress

# The name run records give this script (`run_record.write`).
SCRIPT = "run_pretraining.py"


# ---------------------------------------------------------------------------
# Settings and flags.

@dataclasses.dataclass(frozen=True)
class Settings(settings_lib.Training, settings_lib.Masking):
    """Pre-training's flags: training's, masking's (for data written with
    --dynamic_masking), the pre-training files, the schedule by steps and
    evaluation, with this script's defaults (read in main by
    `settings_lib.from_flags`)."""

    input_file: Optional[str] = None
    do_eval: bool = False
    eval_batch_size: int = 8
    num_train_steps: int = 100000
    num_warmup_steps: int = 10000
    max_eval_steps: int = 100
    eval_at_start: bool = False
    eval_file: Optional[str] = None
    samples_between_eval: int = 0
    samples_start_eval: int = 0
    stop_threshold: float = 0.0
    top_k: int = 5


shared_flags.define_settings_flags(Settings, helps={
    "vocab_file": "For data written with --dynamic_masking: the vocabulary it "
                  "was made with ([CLS], [SEP], [MASK], the '##' pieces that "
                  "continue a word, the random replacement words).",
    "random_seed": "For data written with --dynamic_masking: the seed of the "
                   "masks, which are a function of it, the epoch and the "
                   "example (its file and its place in the file).",
    "masked_lm_prob": "For data written with --dynamic_masking: share of each "
                      "sequence's tokens to mask (at most "
                      "--max_predictions_per_seq).",
    "do_whole_word_mask": "For data written with --dynamic_masking: mask all "
                          "WordPieces of a chosen word.",
    "do_lower_case": "With --export_dir: the casing of the export's tokenizer "
                     "(True for uncased models).",
    "export_dir": "If set, export a fill-mask SavedModel (text with [MASK] in, the "
                  "--top_k pieces per mask out; docs/pretraining.md) in a timestamped "
                  "folder here: of --init_checkpoint without --do_train (no "
                  "--input_file needed), else of the trained model. Needs "
                  "--vocab_file.",
    "input_seed": "If not 0: the seed of the training input's order (files, "
                  "interleaving and record shuffle in each epoch): one fixed "
                  "stream, and training that starts from a checkpoint (resumed, "
                  "or after an evaluation) goes on at the next batch of it that "
                  "the checkpoint has not trained on. 0: an unseeded order, read "
                  "as fast as the readers deliver (the original's); a resumed run "
                  "skips as many records as were trained on."})

flags.DEFINE_integer(
    "num_train_steps", 100000,
    "Optimizer updates to train for (training stops at this global step).")

flags.DEFINE_integer(
    "num_warmup_steps", 10000,
    "Updates over which the learning rate climbs linearly from 0 to "
    "--learning_rate.")

flags.DEFINE_integer(
    "max_eval_steps", 100,
    "Batches of --eval_batch_size to evaluate on (the input is repeated if "
    "it holds fewer).")

flags.DEFINE_bool(
    "eval_at_start", False,
    "With --do_train: before training, evaluate the model training starts "
    "from (the --init_checkpoint weights or the random initialisation, saved "
    "as checkpoint 0 of --output_dir; or the latest checkpoint when resuming) "
    "and write eval_results_at_start.txt, to compare with eval_results.txt "
    "after training (--do_eval).")

flags.DEFINE_string(
    "eval_file", None,
    "TFRecord file(s) of a fixed evaluation set (comma-separated files or "
    "globs, as --input_file). With --do_train: evaluated during training "
    "(--samples_between_eval) and at its end, each evaluation logged and "
    "written to TensorBoard, the last one to eval_results.txt; --do_eval "
    "evaluates it instead of --input_file.")

flags.DEFINE_integer(
    "samples_between_eval", 0,
    "With --eval_file: training examples (optimizer steps times the batch "
    "of one update) between two evaluations; 0: evaluate at the end only.")

flags.DEFINE_integer(
    "samples_start_eval", 0,
    "With --eval_file: no evaluation before this many training examples.")

flags.DEFINE_float(
    "stop_threshold", 0.0,
    "With --eval_file: stop training at the first evaluation whose "
    "masked_lm_accuracy is at least this (e.g. 0.72); a rerun whose latest "
    "checkpoint already reached it does not train (give 0 or a higher target "
    "to train on); 0: never stop early.")

flags.DEFINE_integer(
    "top_k", 5,
    "With --export_dir: the most likely word pieces the export returns per [MASK].")

RESULTS_FILE = "eval_results.txt"
START_RESULTS_FILE = "eval_results_at_start.txt"
# TensorBoard folder of the evaluations during training, with the number of
# training examples seen as the step (to compare runs of different batch
# sizes).
BY_EXAMPLES_DIR = "eval_by_examples"

# ---------------------------------------------------------------------------
# Model.

def model_fn_builder(bert_config, init_checkpoint, learning_rate,
                     num_train_steps, num_warmup_steps, use_tpu,
                     use_one_hot_embeddings, options=None):
    """Builds the pre-training `model_fn` for the runner (TPUEstimator API).

    Args:
      bert_config: modeling.BertConfig.
      init_checkpoint: checkpoint to start from, or None.
      learning_rate, num_train_steps, num_warmup_steps: the optimizer's
        schedule (see optimization.create_optimizer).
      use_tpu: build for TPUEstimator (restore through a scaffold).
      use_one_hot_embeddings: embedding lookup by one-hot product (TPUs).
      options: training.TrainingOptions (None: the defaults).

    Returns:
      model_fn(features, labels, mode, params) -> runtime.TPUEstimatorSpec,
      for TRAIN (loss = masked-LM loss + next-sentence loss) and EVAL (the
      metrics of `metric_fn`). `features` holds the
      `pretraining_records.FEATURES` as int32 (masked_lm_weights float32)
      tensors [batch, length].
    """

    def build_head(features, mode):
        masked_lm_ids = features["masked_lm_ids"]
        masked_lm_weights = features["masked_lm_weights"]
        next_sentence_labels = features["next_sentence_labels"]

        model = training.bert_model(
            bert_config, mode == runtime.ModeKeys.TRAIN, features["input_ids"],
            features["input_mask"], features["segment_ids"], use_one_hot_embeddings, options)

        masked_lm_loss, masked_lm_example_loss, masked_lm_log_probs = get_masked_lm_output(
            bert_config, model.get_sequence_output(), model.get_embedding_table(),
            features["masked_lm_positions"], masked_lm_ids, masked_lm_weights,
            fused_ops=model.fused_ops)
        (next_sentence_loss, next_sentence_example_loss,
         next_sentence_log_probs) = get_next_sentence_output(
            bert_config, model.get_pooled_output(), next_sentence_labels)
        metric_inputs = [masked_lm_example_loss, masked_lm_log_probs, masked_lm_ids,
                         masked_lm_weights, next_sentence_example_loss,
                         next_sentence_log_probs, next_sentence_labels]
        return task_model.Head(loss=masked_lm_loss + next_sentence_loss,
                                eval_metrics=(metric_fn, metric_inputs))

    return task_model.task_model_fn(
        build_head, init_checkpoint, learning_rate, num_train_steps, num_warmup_steps,
        use_tpu, options, modes=(runtime.ModeKeys.TRAIN, runtime.ModeKeys.EVAL))


def metric_fn(masked_lm_example_loss, masked_lm_log_probs, masked_lm_ids,
              masked_lm_weights, next_sentence_example_loss,
              next_sentence_log_probs, next_sentence_labels):
    """Streaming accuracy and mean loss of both heads.

    Args:
      masked_lm_example_loss: float [batch * max_predictions_per_seq].
      masked_lm_log_probs: float [batch * max_predictions_per_seq, vocab_size].
      masked_lm_ids: int32 [batch, max_predictions_per_seq].
      masked_lm_weights: float [batch, max_predictions_per_seq]; 0 for padding.
      next_sentence_example_loss: float [batch].
      next_sentence_log_probs: float [batch, 2].
      next_sentence_labels: int32 [batch, 1].

    Returns:
      Dict of name -> (value, update_op) streaming metrics; the masked-LM ones
      are weighted by masked_lm_weights, so padding predictions do not count.
    """
    def flat(tensor):
        return tf.reshape(tensor, [-1])

    def predictions(log_probs):
        return flat(tf.argmax(log_probs, axis=-1, output_type=tf.int32))

    weights = flat(masked_lm_weights)
    return {
        "masked_lm_accuracy": tf.metrics.accuracy(
            labels=flat(masked_lm_ids), predictions=predictions(masked_lm_log_probs),
            weights=weights),
        "masked_lm_loss": tf.metrics.mean(values=flat(masked_lm_example_loss),
                                          weights=weights),
        "next_sentence_accuracy": tf.metrics.accuracy(
            labels=flat(next_sentence_labels),
            predictions=predictions(next_sentence_log_probs)),
        "next_sentence_loss": tf.metrics.mean(values=next_sentence_example_loss),
    }


def get_masked_lm_output(bert_config, input_tensor, output_weights, positions,
                         label_ids, label_weights, fused_ops=None):
    """The masked-LM head: predicts the original token at each masked
    position.

    Variables (under cls/predictions): transform/dense/{kernel,bias},
    transform/LayerNorm/{beta,gamma} and output_bias [vocab_size]; the output
    projection is the word embedding table itself.

    Args:
      bert_config: BertConfig.
      input_tensor: float [batch, seq_length, hidden], the sequence output.
      output_weights: float [vocab_size, hidden], the word embedding table.
      positions: int32 [batch, max_predictions_per_seq], zero-padded.
      label_ids: int32 [batch, max_predictions_per_seq].
      label_weights: float [batch, max_predictions_per_seq]: 1.0 for a real
        prediction, 0.0 for padding.
      fused_ops: the encoder's bert_ops.FusedOps, for the transform's GELU
        and LayerNorm (None: bert_ops' "auto").

    Returns:
      (loss, per_example_loss [batch * max_predictions_per_seq],
       log_probs [batch * max_predictions_per_seq, vocab_size]); loss is the
      label_weights-weighted mean of per_example_loss.
    """
    hidden = gather_indexes(input_tensor, positions)

    with tf.variable_scope("cls/predictions"):
        # One more dense layer and LayerNorm between the encoder and the
        # vocabulary; it exists for pre-training only.
        with tf.variable_scope("transform"):
            hidden = modeling.dense(
                hidden,
                units=bert_config.hidden_size,
                activation=modeling.get_activation(bert_config.hidden_act, fused_ops),
                kernel_initializer=modeling.create_initializer(bert_config.initializer_range),
                name="dense")
            hidden = modeling.layer_norm(hidden, fused_ops=fused_ops)

        # Tied weights: scores against every word embedding, plus a bias of
        # the head's own per vocabulary entry.
        output_bias = tf.get_variable("output_bias", shape=[bert_config.vocab_size],
                                      initializer=tf.zeros_initializer())
        logits = tf.nn.bias_add(tf.matmul(hidden, output_weights, transpose_b=True),
                                output_bias)
        log_probs = tf.nn.log_softmax(logits, axis=-1)

        # Cross-entropy of each prediction. Sequences with fewer masked tokens
        # than max_predictions_per_seq are padded with weight 0; the small
        # constant keeps an all-padding batch from dividing by zero.
        one_hot_labels = tf.one_hot(tf.reshape(label_ids, [-1]),
                                    depth=bert_config.vocab_size, dtype=tf.float32)
        per_example_loss = -tf.reduce_sum(log_probs * one_hot_labels, axis=-1)
        weights = tf.reshape(label_weights, [-1])
        loss = tf.reduce_sum(weights * per_example_loss) / (tf.reduce_sum(weights) + 1e-5)

    return loss, per_example_loss, log_probs


def get_next_sentence_output(bert_config, input_tensor, labels):
    """The next-sentence head: a two-way classifier on the pooled output
    (label 0: B follows A in the text, 1: B is a random sentence).

    Variables (pre-training only): cls/seq_relationship/output_weights
    [2, hidden] and output_bias [2].

    Args:
      bert_config: BertConfig.
      input_tensor: float [batch, hidden], the pooled output.
      labels: int32 [batch, 1].

    Returns:
      (loss, per_example_loss [batch], log_probs [batch, 2]); loss is the
      mean cross-entropy.
    """
    with tf.variable_scope("cls/seq_relationship"):
        output_weights = tf.get_variable(
            "output_weights", shape=[2, bert_config.hidden_size],
            initializer=modeling.create_initializer(bert_config.initializer_range))
        output_bias = tf.get_variable("output_bias", shape=[2],
                                      initializer=tf.zeros_initializer())
        logits = tf.nn.bias_add(tf.matmul(input_tensor, output_weights, transpose_b=True),
                                output_bias)
        log_probs = tf.nn.log_softmax(logits, axis=-1)
        one_hot_labels = tf.one_hot(tf.reshape(labels, [-1]), depth=2, dtype=tf.float32)
        per_example_loss = -tf.reduce_sum(one_hot_labels * log_probs, axis=-1)
        return tf.reduce_mean(per_example_loss), per_example_loss, log_probs


def gather_indexes(sequence_tensor, positions):
    """Picks the vectors at `positions` of each sequence of a batch.

    Args:
      sequence_tensor: float [batch, seq_length, width].
      positions: int32 [batch, n], positions within each sequence.

    Returns:
      float [batch * n, width]: sequence 0's n vectors, then sequence 1's, ...
    """
    batch_size, seq_length, width = modeling.get_shape_list(sequence_tensor,
                                                            expected_rank=3)
    # In the [batch * seq_length, width] view, sequence b starts at row
    # b * seq_length.
    row_offsets = tf.range(batch_size, dtype=tf.int32)[:, None] * seq_length
    rows = tf.reshape(positions + row_offsets, [-1])
    return tf.gather(tf.reshape(sequence_tensor, [batch_size * seq_length, width]), rows)


# ---------------------------------------------------------------------------
# Input.

# A seeded training stream permutes its records in windows of this many
# (after interleaving the files), each window by its own stateless seed.
SHUFFLE_WINDOW = 256

# Epoch numbers run to this (never reached: a stream of epochs without end).
_EPOCHS = 2 ** 62


def _stream_position(skip_records, records_per_epoch):
    """Where to start `skip_records` records into a stream of epochs of
    `records_per_epoch` records (None: unknown).

    Returns:
      (first epoch, records to skip at the start of that epoch, records to
      skip of the stream of epochs from there on): whole epochs are skipped
      by count when their size is known; otherwise every record is skipped
      from the stream's start.
    """
    if not records_per_epoch:
        return 0, 0, skip_records
    first_epoch, in_epoch = divmod(skip_records, records_per_epoch)
    return first_epoch, in_epoch, 0


def _tagged_records(file_index, path):
    """(file index, record index, serialized record) of each record of a file."""
    return tf.data.TFRecordDataset(
        path, buffer_size=input_pipeline.TFRECORD_BUFFER_BYTES).enumerate().map(
        lambda index, record: (file_index, index, record))


def _window_permuted(dataset, seed, epoch):
    """`dataset` of (file, index, record) with each run of SHUFFLE_WINDOW
    elements permuted by a stateless seed of (seed, epoch, window number)."""
    def permute(window, batch):
        keys = tf.random.stateless_uniform(
            tf.shape(batch[0]), seed=dynamic_masking.example_seed(seed, epoch, -1, window))
        order = tf.argsort(keys, stable=True)
        return tuple(tf.gather(values, order) for values in batch)
    return dataset.batch(SHUFFLE_WINDOW).enumerate().map(
        lambda window, batch: permute(window, batch)).unbatch()


def input_fn_builder(input_files,
                     max_seq_length,
                     max_predictions_per_seq,
                     is_training,
                     num_cpu_threads=4,
                     seed=None,
                     masking=None,
                     records_per_file=None,
                     train_batch_size=None):
    """Builds the `input_fn` reading pre-training records for the runner.

    Args:
      input_files: list of TFRecord files of create_pretraining_data.py,
        all of one kind (`pretraining_records.record_kind`).
      max_seq_length, max_predictions_per_seq: the lengths they were
        written with (for unmasked records: the masked_lm_* lengths made).
      is_training: read the files epoch after epoch, each epoch in random
        file order, interleaved and shuffled; otherwise in order, repeated
        (evaluation runs a fixed number of steps).
      num_cpu_threads: parallel file readers and record parsers.
      seed: training only: an int makes the stream one fixed sequence (the
        order of the files, of the interleaved records and of the shuffle
        in each epoch are functions of (seed, epoch)); None: unseeded, and
        records taken as the readers deliver them.
      masking: a `dynamic_masking.Masking` for files written with
        --dynamic_masking: every example read is masked afresh, by the seed
        of (masking.random_seed, epoch, file index in `input_files`, record
        index in its file). None for files with masks.
      records_per_file: the number of records of each file (as
        `check_input_files` counts them), so that whole epochs are skipped
        by arithmetic; None: skipped records are read.
      train_batch_size: training only: the examples of one batch, all
        replicas together, to count the batches skipped in the log line
        (None: params["batch_size"] times the input pipelines).

    Training starts params[input_pipeline.START_RECORD] records into the
    stream (the records a checkpoint has trained on, all replicas together,
    that `training.ResumableTrainer` gives every training input_fn; none:
    from the start). Skipped records are neither parsed nor masked. Seeded,
    the stream goes on exactly where it would have; unseeded, the records
    are skipped before the shuffle.

    Several workers (params[runtime.INPUT_PIPELINE] = (n, i), set by the
    runner under multi_worker_mirrored): with at least n files, worker i
    reads only files i, i + n, i + 2n, ... of `input_files` and says so
    (params[runtime.INPUT_SHARDED]); with fewer, every worker reads all of
    them and the runner gives each every n-th batch. Masks depend only on
    the example and epoch, so they are the same whichever worker reads it.

    Returns:
      input_fn(params) -> tf.data.Dataset of dicts of the
      `pretraining_records.FEATURES`: int32 (masked_lm_weights float32)
      tensors [params["batch_size"], length]. Every batch is full (a static
      batch size, as TPUs need).
    """
    kind = pretraining_records.UNMASKED if masking else pretraining_records.MASKED
    name_to_features = pretraining_records.name_to_features(max_seq_length,
                                                            max_predictions_per_seq, kind)

    def parse(epoch, file_index, record_index, record):
        features = input_pipeline.decode_record(record, name_to_features)
        if masking is None:
            return features
        example = dynamic_masking.example_seed(masking.random_seed, epoch, file_index,
                                               record_index)
        return features, dynamic_masking.draw(example, max_seq_length)

    def input_fn(params):
        """See input_fn_builder."""
        if is_training:
            d = _training_stream(input_files, params, seed, records_per_file,
                                 train_batch_size, num_cpu_threads)
        else:
            d = _evaluation_stream(input_files)
        d = d.map(parse, num_parallel_calls=num_cpu_threads)
        # Both inputs repeat, so dropping a partial batch loses nothing.
        d = d.batch(params["batch_size"], drop_remainder=True)
        if masking is not None:
            d = d.map(lambda features, draws: dynamic_masking.mask_batch(
                features, draws, masking), num_parallel_calls=num_cpu_threads)
        return d.prefetch(tf.data.AUTOTUNE)

    return input_fn


def _training_stream(input_files, params, seed, records_per_file, train_batch_size,
                     num_cpu_threads):
    """The training input of `input_fn_builder` (see there for the
    arguments) for the runner's `params`: (epoch, file index, record index,
    serialized record) of epoch after epoch, from the record that
    params[input_pipeline.START_RECORD] names on; with several input
    pipelines, this one's share of the files where there are enough."""
    indices = list(range(len(input_files)))
    num_pipelines, index = params.get(runtime.INPUT_PIPELINE, (1, 0))
    # The records all pipelines together have trained on: steps times
    # the global batch, whatever the replicas per pipeline and the batch
    # each is given.
    skip_records = params.get(input_pipeline.START_RECORD, 0)
    skip_batches = skip_records // (train_batch_size or params["batch_size"] * num_pipelines)
    if num_pipelines > 1 and len(input_files) >= num_pipelines:
        # Distinct files for each worker: none reads another's, and each
        # has read its share of the records trained on.
        skip_records //= num_pipelines
        indices = indices[index::num_pipelines]
        params[runtime.INPUT_SHARDED] = True
        tf.logging.info("Input pipeline %d of %d reads %d of the %d input files, "
                        "from %s", index, num_pipelines, len(indices),
                        len(input_files), os.path.basename(input_files[indices[0]]))
    files = tf.constant([input_files[i] for i in indices])
    file_indices = tf.constant(indices, tf.int64)
    epoch_size = (sum(records_per_file[i] for i in indices)
                  if records_per_file is not None else None)
    first_epoch, skip_in_epoch, skip_in_stream = _stream_position(skip_records,
                                                                   epoch_size)
    if skip_records:
        tf.logging.info(
            "Resuming the training input after %d batches (%d records): %d whole "
            "epochs skipped by count, then %d records skipped unread", skip_batches,
            skip_records, first_epoch, skip_in_epoch + skip_in_stream)
    epoch_records = _training_epoch(files, file_indices, seed,
                                    min(num_cpu_threads, len(indices)), first_epoch,
                                    skip_in_epoch)
    d = tf.data.Dataset.range(first_epoch, _EPOCHS).flat_map(epoch_records)
    return d.skip(skip_in_stream) if skip_in_stream else d


def _training_epoch(files, file_indices, seed, readers, first_epoch, skip_in_epoch):
    """epoch_records(epoch) -> the dataset of one training epoch's (epoch,
    file index, record index, record): the `files` (string [n], their
    indices int64 [n]) in an order of the epoch, read by `readers` at once,
    the records shuffled; `skip_in_epoch` of them skipped in `first_epoch`.
    `seed` (or None) as for `input_fn_builder`."""

    def epoch_records(epoch):
        num_files = int(file_indices.shape[0])
        if seed is not None:
            keys = tf.random.stateless_uniform(
                [num_files], seed=dynamic_masking.example_seed(seed, epoch, -1, -1))
            order = tf.argsort(keys, stable=True)
        else:
            order = tf.random.shuffle(tf.range(num_files))
        d = tf.data.Dataset.from_tensor_slices((tf.gather(file_indices, order),
                                                tf.gather(files, order)))
        # Records of several files at once. Unseeded, taken in whatever
        # order the readers deliver them ("sloppy" interleave): faster,
        # and more mixing on top of the shuffles.
        # Seeded, in a fixed rotation over the open files.
        d = d.interleave(_tagged_records, cycle_length=readers,
                         num_parallel_calls=readers, deterministic=seed is not None)
        skip_here = tf.where(tf.equal(epoch, first_epoch),
                             tf.constant(skip_in_epoch, tf.int64),
                             tf.constant(0, tf.int64))
        if seed is not None:
            d = _window_permuted(d, seed, epoch).skip(skip_here)
        else:
            d = d.skip(skip_here).shuffle(buffer_size=100)
        return d.map(lambda f, r, record: (epoch, f, r, record))

    return epoch_records


def _evaluation_stream(input_files):
    """The evaluation input of `input_fn_builder`: (epoch, file index,
    record index, serialized record) of every file in order, repeated.
    Evaluation runs --max_eval_steps batches: repeating the input means it
    never runs out. Each repetition counts as an epoch."""
    def epoch_records(epoch):
        d = tf.data.Dataset.from_tensor_slices(
            (tf.range(len(input_files), dtype=tf.int64), tf.constant(input_files)))
        d = d.flat_map(_tagged_records)
        return d.map(lambda f, r, record: (epoch, f, r, record))
    return tf.data.Dataset.range(_EPOCHS).flat_map(epoch_records)


def head_variable_shapes(bert_config):
    """name -> shape of the variables of the two pre-training heads
    (cls/predictions, cls/seq_relationship)."""
    h = bert_config.hidden_size
    return {
        "cls/predictions/transform/dense/kernel": [h, h],
        "cls/predictions/transform/dense/bias": [h],
        "cls/predictions/transform/LayerNorm/beta": [h],
        "cls/predictions/transform/LayerNorm/gamma": [h],
        "cls/predictions/output_bias": [bert_config.vocab_size],
        "cls/seq_relationship/output_weights": [2, h],
        "cls/seq_relationship/output_bias": [2],
    }


# ---------------------------------------------------------------------------
# Evaluation of the model training starts from.

class _StopAtStartHook(tf.train.SessionRunHook):
    """Stops a training run as soon as its session exists, before any step.

    The Estimator's checkpoint saver writes the state at session creation
    (checkpoint 0: the --init_checkpoint weights or the random
    initialisation), which is all that is wanted from such a run.
    """

    def after_create_session(self, session, coord):
        coord.request_stop()


def ensure_checkpoint(run, estimator):
    """Makes sure `run.output_dir` holds a checkpoint to evaluate.

    Without one, saves the initial model (`run.init_checkpoint`'s weights or
    the random initialisation) as checkpoint 0 through a training run
    stopped before its first step (the Estimator can only evaluate
    checkpoints). Returns the checkpoint path.
    """
    latest = tf.train.latest_checkpoint(run.output_dir)
    if latest:
        return latest
    if run.init_checkpoint:
        tf.logging.info("Saving the --init_checkpoint weights as checkpoint 0 of %s",
                        run.output_dir)
    else:
        tf.logging.info("No checkpoint in %s and no --init_checkpoint: saving the "
                        "random initialisation as checkpoint 0", run.output_dir)
    estimator.train(input_fn=run.input_fn(True), max_steps=max(1, run.settings.num_train_steps),
                    hooks=[_StopAtStartHook()])
    return tf.train.latest_checkpoint(run.output_dir)


def evaluate(run, estimator, checkpoint_path, file_name, header):
    """Evaluates `checkpoint_path` on --max_eval_steps batches, logs the
    results and writes them to `run.output_dir`/file_name. Returns them."""
    s = run.settings
    training_progress.log_phase("Running evaluation", [("Checkpoint", checkpoint_path),
                                                       ("Batch size", s.eval_batch_size)])
    result = evaluation.evaluate(estimator, run.input_fn(False), s.max_eval_steps,
                                 checkpoint_path, steps=s.max_eval_steps, name_weights=False)
    evaluation.write_eval_results(result, run.output_dir, file_name=file_name,
                                   header=header, headline="masked_lm_accuracy")
    return result


# ---------------------------------------------------------------------------
# Evaluation during training, and the stop at a target accuracy.

def evaluation_steps(num_train_steps, examples_per_step, samples_start_eval,
                     samples_between_eval):
    """The global steps after which training is evaluated.

    Every `samples_between_eval` training examples (counted from 0, rounded
    up to whole steps), none before `samples_start_eval` examples, and
    always at `num_train_steps`.

    Args:
      num_train_steps: the last step (int > 0).
      examples_per_step: training examples per optimizer step (int > 0).
      samples_start_eval, samples_between_eval: ints >= 0 (the flags).

    Returns:
      Sorted list of distinct steps in [1, num_train_steps], ending with
      num_train_steps.
    """
    steps = []
    if samples_between_eval > 0:
        samples = samples_between_eval
        while True:
            step = -(-samples // examples_per_step)  # ceil
            if step >= num_train_steps:
                break
            if step * examples_per_step >= samples_start_eval and step not in steps:
                steps.append(step)
            samples += samples_between_eval
    return steps + [num_train_steps]


def write_summaries(directory, step, values):
    """Writes the scalars `values` (name -> number) at `step` to a
    TensorBoard event file in `directory`."""
    summary = tf.Summary()
    for key, value in sorted(values.items()):
        summary.value.add(tag=key, simple_value=float(value))
    with tf.Graph().as_default():
        writer = tf.summary.FileWriter(directory)
        writer.add_summary(summary, int(step))
        writer.close()


def train_with_evaluation(run, estimator):
    """Trains to --num_train_steps, evaluating on --eval_file at the
    `evaluation_steps`, and stops at the first evaluation whose
    masked_lm_accuracy reaches --stop_threshold (when set). Each
    segment's training input goes on from the checkpoint it starts from
    (see `input_fn_builder`).

    Each evaluation is logged and written to TensorBoard (output_dir/eval by
    step, output_dir/eval_by_examples by examples seen); the last one to
    eval_results.txt with global_step, examples_seen (global_step times
    `run.examples_per_step`) and wall_time_seconds (since this call began, the
    evaluations included), and with a stop threshold, whether it was reached.

    Returns:
      The checkpoint evaluated last.
    """
    started = time.time()
    s = run.settings
    examples_per_step = run.examples_per_step
    steps = evaluation_steps(s.num_train_steps, examples_per_step, s.samples_start_eval,
                             s.samples_between_eval)
    latest = tf.train.latest_checkpoint(run.output_dir)
    done = checkpoints.checkpoint_step(latest)
    met = stop_threshold_met(run.output_dir, done, s.stop_threshold)
    if met is not None and done < s.num_train_steps:
        tf.logging.info(
            "Not training: %s (step %d) already reached --stop_threshold=%g "
            "(masked_lm_accuracy = %.4f in %s); to train on, give --stop_threshold=0 or a "
            "higher target", latest, done, s.stop_threshold, met,
            os.path.join(run.output_dir, RESULTS_FILE))
        return latest

    def evaluate_fn(checkpoint, _):  # The step: the result's global_step.
        result = dict(estimator.evaluate(input_fn=run.input_fn(False),
                                         steps=s.max_eval_steps, checkpoint_path=checkpoint))
        step = int(result["global_step"])
        result["examples_seen"] = step * examples_per_step
        result["wall_time_seconds"] = round(time.time() - started, 1)
        reached = (s.stop_threshold > 0
                   and result["masked_lm_accuracy"] >= s.stop_threshold)
        tf.logging.info(
            "Evaluation at step %d (%d examples, %s): masked_lm_accuracy = %.4f, "
            "masked_lm_loss = %.4f%s", step, result["examples_seen"],
            logs.format_duration(result["wall_time_seconds"]),
            result["masked_lm_accuracy"], result["masked_lm_loss"],
            " (--stop_threshold=%g reached)" % s.stop_threshold if reached else "")
        write_summaries(os.path.join(run.output_dir, BY_EXAMPLES_DIR),
                        result["examples_seen"],
                        {"masked_lm_accuracy": result["masked_lm_accuracy"],
                         "masked_lm_loss": result["masked_lm_loss"],
                         "global_step": step,
                         "wall_time_seconds": result["wall_time_seconds"]})
        if s.stop_threshold > 0:
            result["stop_threshold"] = s.stop_threshold
            result["stop_threshold_reached"] = reached
        return result

    result, checkpoint = evaluation.train_and_evaluate(
        estimator, run.input_fn(True), steps, evaluate_fn,
        stop=lambda result: result.get("stop_threshold_reached", False),
        evaluate_when_done=True)
    evaluation.write_eval_results(result, run.output_dir, header="***** Eval results *****",
                                   headline="masked_lm_accuracy")
    return checkpoint


def stop_threshold_met(output_dir, step, stop_threshold):
    """The masked_lm_accuracy of the evaluation during training that
    <output_dir>/eval_results.txt holds, if it is of the checkpoint at
    `step`, was made with a --stop_threshold (its file records one) and
    reaches this run's `stop_threshold`; else None (also without a
    threshold now: 0)."""
    path = os.path.join(output_dir, RESULTS_FILE)
    if not stop_threshold > 0 or not tf.io.gfile.exists(path):
        return None
    values = {}
    with tf.io.gfile.GFile(path) as f:
        for line in f:
            key, _, value = line.strip().partition(" = ")
            values[key] = value
    try:
        accuracy = float(values["masked_lm_accuracy"])
        recorded = int(values["global_step"]) == step and "stop_threshold" in values
    except (KeyError, ValueError):
        return None
    return accuracy if recorded and accuracy >= stop_threshold else None


def load_masking(vocab_file, masked_lm_prob, max_predictions_per_seq, do_whole_word_mask,
                 random_seed, vocab_size):
    """The `dynamic_masking.Masking` of the flags of the same names, for data
    written with --dynamic_masking; `vocab_size` is the model's.

    Raises:
      InputError: --vocab_file is missing, unreadable or larger than the
        model's vocabulary, or --masked_lm_prob is out of range.
    """
    if not vocab_file:
        raise errors.InputError(
            "--vocab_file is needed: the data was written with --dynamic_masking and "
            "is masked as it is read, which needs the vocabulary it was made with")
    if not 0.0 <= masked_lm_prob <= 1.0:
        raise errors.InputError("--masked_lm_prob=%g must be in [0, 1]" % masked_lm_prob)
    vocab = dynamic_masking.MaskingVocab(vocab_file)
    if vocab.size > vocab_size:
        raise errors.InputError(
            "--vocab_file %s has ids up to %d but vocab_size in --bert_config_file is %d: "
            "use the vocabulary of the model" % (vocab_file, vocab.size - 1, vocab_size))
    tf.logging.info("Masking as the data is read: --masked_lm_prob=%g, "
                    "--max_predictions_per_seq=%d, --do_whole_word_mask=%s, --random_seed=%d",
                    masked_lm_prob, max_predictions_per_seq, do_whole_word_mask, random_seed)
    return dynamic_masking.Masking(vocab, masked_lm_prob, max_predictions_per_seq,
                                   do_whole_word_mask, random_seed)


def check_evaluation_flags(eval_file, samples_between_eval, samples_start_eval,
                           stop_threshold, do_train, distribution_strategy):
    """Checks --eval_file's companions (the flags of the same names) before
    any work.

    Raises:
      InputError: naming the flag at fault.
    """
    counts = (("samples_between_eval", samples_between_eval),
              ("samples_start_eval", samples_start_eval))
    for name, value in counts:
        if value < 0:
            raise errors.InputError("--%s=%d must be 0 or more" % (name, value))
    if not 0.0 <= stop_threshold <= 1.0:
        raise errors.InputError("--stop_threshold=%g must be between 0 and 1 (an "
                                "accuracy)" % stop_threshold)
    if not eval_file:
        for name, value in counts + (("stop_threshold", stop_threshold),):
            if value:
                raise errors.InputError("--%s needs --eval_file" % name)
        return
    if do_train and distribution_strategy == "multi_worker_mirrored":
        raise errors.InputError(
            "--eval_file: evaluation during training is not supported with "
            "--distribution_strategy=multi_worker_mirrored; evaluate the "
            "checkpoints afterwards with --do_eval")


# ---------------------------------------------------------------------------
# The run: its settings and what they name, checked once.

@dataclasses.dataclass
class PretrainingRun:
    """What the phases of `main` take, from `prepare_run`.

    Attributes:
      settings: the script's `Settings`.
      bert_config: the model's modeling.BertConfig.
      init_checkpoint: the checkpoint to start from (resolved), or None.
      options: the training.TrainingOptions.
      input_files, train_files: the --input_file files and what
        `pretraining_inputs.check_input_files` found in them.
      eval_files, eval_kind: the files evaluated (--eval_file's, else
        --input_file's) and the kind of their records.
      masking: a dynamic_masking.Masking where either kind is unmasked, else
        None.
    """

    settings: Settings
    bert_config: modeling.BertConfig
    init_checkpoint: Optional[str]
    options: training.TrainingOptions
    input_files: list
    train_files: pretraining_inputs.InputFiles
    eval_files: list
    eval_kind: str
    masking: Optional[dynamic_masking.Masking]

    @property
    def output_dir(self):
        """--output_dir."""
        return self.settings.output_dir

    @property
    def examples_per_step(self):
        """Training examples per optimizer update (gradient accumulation's
        micro-batches together)."""
        return self.settings.train_batch_size * self.options.gradient_accumulation_steps

    def input_fn(self, is_training):
        """The training or evaluation input_fn (`input_fn_builder`).

        Training that starts from a checkpoint (a resumed run, or the
        training after an evaluation) goes on with the first batch the
        checkpoint has not trained on: the runner gives the input_fn that
        position when it starts training.
        """
        s = self.settings
        if not is_training:
            return input_fn_builder(
                self.eval_files, s.max_seq_length, s.max_predictions_per_seq,
                is_training=False,
                masking=self.masking if self.eval_kind == pretraining_records.UNMASKED else None)
        return input_fn_builder(
            self.input_files, s.max_seq_length, s.max_predictions_per_seq,
            is_training=True, seed=s.input_seed or None,
            masking=(self.masking if self.train_files.kind == pretraining_records.UNMASKED
                     else None),
            records_per_file=self.train_files.records_per_file,
            train_batch_size=s.train_batch_size)

    def start_output(self):
        """Makes --output_dir; in a training run, first takes it for this
        run alone (`output_lock.lock_output_dir`) and writes its run record
        (`write_run_record`)."""
        if self.settings.do_train:  # The one training run of --output_dir.
            output_lock.lock_output_dir(self.output_dir)
        tf.io.gfile.makedirs(self.output_dir)
        if self.settings.do_train:
            write_run_record(self)

    def trainer(self):
        """The runner of the pre-training model_fn: a TPUEstimator's API,
        which runs on the CPU or GPU when --use_tpu is off."""
        s = self.settings
        model_fn = model_fn_builder(
            self.bert_config, init_checkpoint=self.init_checkpoint,
            learning_rate=s.learning_rate, num_train_steps=s.num_train_steps,
            num_warmup_steps=s.num_warmup_steps, use_tpu=s.use_tpu,
            use_one_hot_embeddings=s.use_tpu, options=self.options)
        return training.make_trainer(model_fn, self.options, s,
                                     train_batch_size=s.train_batch_size,
                                     eval_batch_size=s.eval_batch_size)


def prepare_run(settings):
    """Checks `settings` (the script's `Settings`) and the files they name,
    before anything is built or written.

    Returns:
      A `PretrainingRun`.

    Raises:
      InputError: one line naming the flag (and file) at fault.
    """
    s = settings
    serving.check_export_flags(s.vocab_file, s.export_dir, s.export_precision)
    settings_lib.require(s, "input_file", "bert_config_file", "output_dir")
    run_record.check_script(s.output_dir, SCRIPT)
    if not (s.do_train or s.do_eval):
        raise errors.InputError("Nothing to do: set --do_train, --do_eval and/or --export_dir.")
    max_seq_length, max_predictions = s.max_seq_length, s.max_predictions_per_seq
    if not 0 < max_predictions <= max_seq_length:
        raise errors.InputError(
            "--max_predictions_per_seq=%d must be between 1 and --max_seq_length=%d"
            % (max_predictions, max_seq_length))
    bert_config = checkpoints.load_bert_config(s.bert_config_file,
                                               max_seq_length=max_seq_length)
    file_io.check_output_dir(s.output_dir)
    init_checkpoint = checkpoints.resolve_checkpoint("init_checkpoint", s.init_checkpoint)
    if init_checkpoint:
        checkpoints.check_init_checkpoint("init_checkpoint", init_checkpoint, bert_config,
                                          s.bert_config_file)
    checkpoints.check_output_dir_checkpoint(s.output_dir, bert_config,
                                            head_variable_shapes(bert_config))
    input_files = file_io.expand_file_patterns("input_file", s.input_file)
    tf.logging.info("*** Input Files ***")
    for path in input_files:
        tf.logging.info("  %s", path)
    train_files = pretraining_inputs.check_input_files(input_files, max_seq_length,
                                                       max_predictions, bert_config.vocab_size)

    options = training.training_options(s, training=s.do_train)
    check_evaluation_flags(s.eval_file, s.samples_between_eval, s.samples_start_eval,
                           s.stop_threshold, s.do_train, options.distribution_strategy)
    eval_files, eval_kind = input_files, train_files.kind
    if s.eval_file:
        eval_files = file_io.expand_file_patterns("eval_file", s.eval_file)
        eval_kind = pretraining_inputs.check_input_files(
            eval_files, max_seq_length, max_predictions, bert_config.vocab_size,
            flag_name="eval_file").kind
    masking = None
    if pretraining_records.UNMASKED in (train_files.kind, eval_kind):
        masking = load_masking(s.vocab_file, s.masked_lm_prob, max_predictions,
                               s.do_whole_word_mask, s.random_seed, bert_config.vocab_size)
    return PretrainingRun(s, bert_config, init_checkpoint, options, input_files, train_files,
                          eval_files, eval_kind, masking)


def write_run_record(run):
    """Writes the run record (`run_record.write`) of a training
    run, for `convert_checkpoint.py --to_hf` and the scripts that start from
    the model: its config, sequence length, and the vocabulary and casing
    where the command line gives them (pre-training reads ids, so it has no
    say in either)."""
    s = run.settings
    given = {name: getattr(s, name) if name in s.given else None
             for name in ("vocab_file", "do_lower_case")}
    run_record.write(run.output_dir, SCRIPT, "pretraining", run.bert_config,
                     dict(given, max_seq_length=s.max_seq_length))


# ---------------------------------------------------------------------------
# The fill-mask export (--export_dir).

def check_export(settings):
    """The checks of --export_dir in `settings`, before any work: the flags
    it needs (--vocab_file and --bert_config_file; without --do_train the
    --init_checkpoint it exports, which must hold the masked-LM head; with
    --do_train or --do_eval the run's --input_file and --output_dir), a
    writable folder, a vocabulary with [MASK] and --top_k. Raises
    errors.InputError."""
    s = settings
    names = ["vocab_file", "bert_config_file"]
    if not s.do_train:
        names.append("init_checkpoint")
    if s.do_train or s.do_eval:  # The run's own inputs, checked first.
        names += ["input_file", "output_dir"]
    settings_lib.require(s, *names)
    fill_mask_export.check_export_flags(s.vocab_file, s.export_dir, s.top_k,
                                        s.export_precision)
    if not s.do_train:
        checkpoint = checkpoints.resolve_checkpoint("init_checkpoint", s.init_checkpoint,
                                                    required=True)
        bert_config = checkpoints.load_bert_config(s.bert_config_file,
                                                   max_seq_length=s.max_seq_length)
        checkpoints.check_init_checkpoint("init_checkpoint", checkpoint, bert_config,
                                          s.bert_config_file)
        fill_mask_export.check_masked_lm_head(checkpoint)


def export_fill_mask(settings, flag_name):
    """--export_dir: exports the checkpoint that --`flag_name` names
    (init_checkpoint; output_dir after training: its latest) with the
    tokenizer, --top_k, --precision and --max_seq_length of `settings`
    (`fill_mask_export.export_fill_mask`). Returns the SavedModel's
    directory."""
    s = settings
    checkpoint = checkpoints.resolve_checkpoint(flag_name, getattr(s, flag_name),
                                                required=True)
    fill_mask_export.check_masked_lm_head(checkpoint, flag_name)
    bert_config = checkpoints.load_bert_config(
        s.bert_config_file, max_seq_length=s.max_seq_length,
        vocab=tokenization.load_vocab(s.vocab_file), vocab_file=s.vocab_file)
    tf.logging.info("Exporting fill-mask (the top %d pieces per %s) with the weights of %s",
                    s.top_k, fill_mask_export.MASK_TOKEN, checkpoint)
    source = serving.ExportSource(bert_config, checkpoint, s.export_dir, s.vocab_file,
                                  s.do_lower_case, s.max_seq_length,
                                  training.TrainingOptions(precision=s.precision),
                                  s.export_precision)
    return fill_mask_export.export_fill_mask(source, get_masked_lm_output, top_k=s.top_k)


# ---------------------------------------------------------------------------

@output_lock.releases_output_lock
def main(_):
    tf.logging.set_verbosity(tf.logging.INFO)
    settings = settings_lib.from_flags(Settings)

    # Every input is checked before anything is built or written.
    if settings.export_dir:  # A fill-mask SavedModel (fill_mask_export.py).
        check_export(settings)
        if not (settings.do_train or settings.do_eval):  # Only the export.
            export_fill_mask(settings, "init_checkpoint")
            return
    run = prepare_run(settings)
    if settings.export_dir and not settings.do_train:  # Export, then evaluate.
        export_fill_mask(settings, "init_checkpoint")
    run.start_output()
    estimator = run.trainer()

    evaluated = None
    if settings.do_train:
        if settings.eval_at_start:
            checkpoint = ensure_checkpoint(run, estimator)
            evaluate(run, estimator, checkpoint, START_RESULTS_FILE,
                     "***** Eval results at start (%s) *****" % os.path.basename(checkpoint))
        training_progress.log_training(run.options, [], settings.num_train_steps,
                                       settings.train_batch_size)
        if settings.eval_file:  # Evaluations during training.
            evaluated = train_with_evaluation(run, estimator)
        else:
            estimator.train(input_fn=run.input_fn(True), max_steps=settings.num_train_steps)
        checkpoints.report_trained_checkpoint(run.output_dir)
        if settings.export_dir:
            export_fill_mask(settings, "output_dir")

    if settings.do_eval and evaluated and evaluated == tf.train.latest_checkpoint(
            run.output_dir):
        tf.logging.info("--do_eval: %s was evaluated on --eval_file during training "
                        "(eval_results.txt)", os.path.basename(evaluated))
    elif settings.do_eval:
        # --do_eval evaluates the latest checkpoint of --output_dir. With
        # none there (a --do_eval-only run on a fresh directory, e.g. to score
        # --init_checkpoint on new data), the initial model becomes
        # checkpoint 0 first instead of failing.
        checkpoint = ensure_checkpoint(run, estimator)
        evaluate(run, estimator, checkpoint, RESULTS_FILE, "***** Eval results *****")


if __name__ == "__main__":
    script_runner.run_script(main)
