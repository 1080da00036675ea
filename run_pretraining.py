# coding=utf-8
# Copyright 2018 The Google AI Language Team Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""Run masked LM/next sentence masked_lm pre-training for BERT.

Reads the TFRecord files written by create_pretraining_data.py and trains (or
evaluates) the masked-LM and next-sentence heads on top of BertModel, with
the original's flags, variable names (`cls/predictions/*`,
`cls/seq_relationship/*`, so Google's checkpoints restore fully) and output
files (checkpoints and eval_results.txt in --output_dir).
"""

import os

import tensorflow.compat.v1 as tf
from absl import flags

import modeling
import run_common
import runtime

FLAGS = flags.FLAGS

run_common.define_flags(
    "bert_config_file", "input_file", "output_dir", "init_checkpoint",
    "max_seq_length", "max_predictions_per_seq", "do_train", "do_eval",
    "train_batch_size", "eval_batch_size", "learning_rate",
    "save_checkpoints_steps", "iterations_per_loop",
    run_common.TPU_FLAGS, run_common.TRAINING_OPTION_FLAGS,
    max_seq_length=128)

flags.DEFINE_integer("num_train_steps", 100000, "Number of training steps.")

flags.DEFINE_integer("num_warmup_steps", 10000, "Number of warmup steps.")

flags.DEFINE_integer("max_eval_steps", 100, "Maximum number of eval steps.")

flags.DEFINE_bool(
    "eval_at_start", False,
    "With --do_train: before training, evaluate the model training starts "
    "from (the --init_checkpoint weights or the random initialisation, saved "
    "as checkpoint 0 of --output_dir; or the latest checkpoint when resuming) "
    "and write eval_results_at_start.txt, to compare with eval_results.txt "
    "after training (--do_eval).")

# Names, dtypes (int64 or float) and lengths of the features of one record:
# "seq" is --max_seq_length, "pred" --max_predictions_per_seq.
_FEATURES = (
    ("input_ids", "int64", "seq"),
    ("input_mask", "int64", "seq"),
    ("segment_ids", "int64", "seq"),
    ("masked_lm_positions", "int64", "pred"),
    ("masked_lm_ids", "int64", "pred"),
    ("masked_lm_weights", "float", "pred"),
    ("next_sentence_labels", "int64", 1),
)

START_RESULTS_FILE = "eval_results_at_start.txt"


# ---------------------------------------------------------------------------
# Model.

def model_fn_builder(bert_config, init_checkpoint, learning_rate,
                     num_train_steps, num_warmup_steps, use_tpu,
                     use_one_hot_embeddings):
    """Returns `model_fn` closure for TPUEstimator."""

    def model_fn(features, labels, mode, params):  # pylint: disable=unused-argument
        """The `model_fn` for TPUEstimator."""

        run_common.log_features(features)

        input_ids = features["input_ids"]
        input_mask = features["input_mask"]
        segment_ids = features["segment_ids"]
        masked_lm_positions = features["masked_lm_positions"]
        masked_lm_ids = features["masked_lm_ids"]
        masked_lm_weights = features["masked_lm_weights"]
        next_sentence_labels = features["next_sentence_labels"]

        is_training = (mode == runtime.ModeKeys.TRAIN)

        model = modeling.BertModel(
            config=bert_config,
            is_training=is_training,
            input_ids=input_ids,
            input_mask=input_mask,
            token_type_ids=segment_ids,
            use_one_hot_embeddings=use_one_hot_embeddings,
            **run_common.model_options())

        (masked_lm_loss,
         masked_lm_example_loss, masked_lm_log_probs) = get_masked_lm_output(
             bert_config, model.get_sequence_output(), model.get_embedding_table(),
             masked_lm_positions, masked_lm_ids, masked_lm_weights)

        (next_sentence_loss, next_sentence_example_loss,
         next_sentence_log_probs) = get_next_sentence_output(
             bert_config, model.get_pooled_output(), next_sentence_labels)

        total_loss = masked_lm_loss + next_sentence_loss

        scaffold_fn = run_common.init_from_checkpoint(init_checkpoint, use_tpu)

        output_spec = None
        if mode == runtime.ModeKeys.TRAIN:
            train_op = run_common.create_train_op(
                total_loss, learning_rate, num_train_steps, num_warmup_steps, use_tpu)
            batch_size = params["batch_size"]
            seq_length = modeling.get_shape_list(input_ids, expected_rank=2)[1]
            output_spec = runtime.TPUEstimatorSpec(
                mode=mode,
                loss=total_loss,
                train_op=train_op,
                training_hooks=run_common.training_hooks(
                    total_loss, examples_per_step=batch_size,
                    tokens_per_step=batch_size * seq_length, use_tpu=use_tpu),
                scaffold_fn=scaffold_fn)
        elif mode == runtime.ModeKeys.EVAL:
            eval_metrics = (metric_fn, [
                masked_lm_example_loss, masked_lm_log_probs, masked_lm_ids,
                masked_lm_weights, next_sentence_example_loss,
                next_sentence_log_probs, next_sentence_labels
            ])
            output_spec = runtime.TPUEstimatorSpec(
                mode=mode,
                loss=total_loss,
                eval_metrics=eval_metrics,
                scaffold_fn=scaffold_fn)
        else:
            raise ValueError("Only TRAIN and EVAL modes are supported: %s" % (mode))

        return output_spec

    return model_fn


def metric_fn(masked_lm_example_loss, masked_lm_log_probs, masked_lm_ids,
              masked_lm_weights, next_sentence_example_loss,
              next_sentence_log_probs, next_sentence_labels):
    """Computes the loss and accuracy of the model.

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
    masked_lm_log_probs = tf.reshape(masked_lm_log_probs,
                                     [-1, masked_lm_log_probs.shape[-1]])
    masked_lm_predictions = tf.argmax(masked_lm_log_probs, axis=-1, output_type=tf.int32)
    masked_lm_example_loss = tf.reshape(masked_lm_example_loss, [-1])
    masked_lm_ids = tf.reshape(masked_lm_ids, [-1])
    masked_lm_weights = tf.reshape(masked_lm_weights, [-1])
    masked_lm_accuracy = tf.metrics.accuracy(
        labels=masked_lm_ids,
        predictions=masked_lm_predictions,
        weights=masked_lm_weights)
    masked_lm_mean_loss = tf.metrics.mean(
        values=masked_lm_example_loss, weights=masked_lm_weights)

    next_sentence_log_probs = tf.reshape(
        next_sentence_log_probs, [-1, next_sentence_log_probs.shape[-1]])
    next_sentence_predictions = tf.argmax(
        next_sentence_log_probs, axis=-1, output_type=tf.int32)
    next_sentence_labels = tf.reshape(next_sentence_labels, [-1])
    next_sentence_accuracy = tf.metrics.accuracy(
        labels=next_sentence_labels, predictions=next_sentence_predictions)
    next_sentence_mean_loss = tf.metrics.mean(values=next_sentence_example_loss)

    return {
        "masked_lm_accuracy": masked_lm_accuracy,
        "masked_lm_loss": masked_lm_mean_loss,
        "next_sentence_accuracy": next_sentence_accuracy,
        "next_sentence_loss": next_sentence_mean_loss,
    }


def get_masked_lm_output(bert_config, input_tensor, output_weights, positions,
                         label_ids, label_weights):
    """Get loss and log probs for the masked LM.

    Args:
      bert_config: BertConfig.
      input_tensor: float [batch, seq_length, hidden], the sequence output.
      output_weights: float [vocab_size, hidden], the word embedding table
        (the output layer is tied to it).
      positions: int32 [batch, max_predictions_per_seq].
      label_ids: int32 [batch, max_predictions_per_seq].
      label_weights: float [batch, max_predictions_per_seq].

    Returns:
      (loss, per_example_loss [batch * max_predictions_per_seq],
       log_probs [batch * max_predictions_per_seq, vocab_size]).
    """
    input_tensor = gather_indexes(input_tensor, positions)

    with tf.variable_scope("cls/predictions"):
        # We apply one more non-linear transformation before the output layer.
        # This matrix is not used after pre-training.
        with tf.variable_scope("transform"):
            input_tensor = modeling.dense(
                input_tensor,
                units=bert_config.hidden_size,
                activation=modeling.get_activation(bert_config.hidden_act),
                kernel_initializer=modeling.create_initializer(
                    bert_config.initializer_range),
                name="dense")
            input_tensor = modeling.layer_norm(input_tensor)

        # The output weights are the same as the input embeddings, but there is
        # an output-only bias for each token.
        output_bias = tf.get_variable(
            "output_bias",
            shape=[bert_config.vocab_size],
            initializer=tf.zeros_initializer())
        logits = tf.matmul(input_tensor, output_weights, transpose_b=True)
        logits = tf.nn.bias_add(logits, output_bias)
        log_probs = tf.nn.log_softmax(logits, axis=-1)

        label_ids = tf.reshape(label_ids, [-1])
        label_weights = tf.reshape(label_weights, [-1])

        one_hot_labels = tf.one_hot(label_ids, depth=bert_config.vocab_size, dtype=tf.float32)

        # The `positions` tensor might be zero-padded (if the sequence is too
        # short to have the maximum number of predictions). The `label_weights`
        # tensor has a value of 1.0 for every real prediction and 0.0 for the
        # padding predictions.
        per_example_loss = -tf.reduce_sum(log_probs * one_hot_labels, axis=[-1])
        numerator = tf.reduce_sum(label_weights * per_example_loss)
        denominator = tf.reduce_sum(label_weights) + 1e-5
        loss = numerator / denominator

    return (loss, per_example_loss, log_probs)


def get_next_sentence_output(bert_config, input_tensor, labels):
    """Get loss and log probs for the next sentence prediction.

    Args:
      bert_config: BertConfig.
      input_tensor: float [batch, hidden], the pooled output.
      labels: int32 [batch, 1]; 0 = actual next sentence, 1 = random.

    Returns:
      (loss, per_example_loss [batch], log_probs [batch, 2]).
    """
    # Simple binary classification. Note that 0 is "next sentence" and 1 is
    # "random sentence". This weight matrix is not used after pre-training.
    with tf.variable_scope("cls/seq_relationship"):
        output_weights = tf.get_variable(
            "output_weights",
            shape=[2, bert_config.hidden_size],
            initializer=modeling.create_initializer(bert_config.initializer_range))
        output_bias = tf.get_variable(
            "output_bias", shape=[2], initializer=tf.zeros_initializer())

        logits = tf.matmul(input_tensor, output_weights, transpose_b=True)
        logits = tf.nn.bias_add(logits, output_bias)
        log_probs = tf.nn.log_softmax(logits, axis=-1)
        labels = tf.reshape(labels, [-1])
        one_hot_labels = tf.one_hot(labels, depth=2, dtype=tf.float32)
        per_example_loss = -tf.reduce_sum(one_hot_labels * log_probs, axis=-1)
        loss = tf.reduce_mean(per_example_loss)
        return (loss, per_example_loss, log_probs)


def gather_indexes(sequence_tensor, positions):
    """Gathers the vectors at the specific positions over a minibatch.

    Args:
      sequence_tensor: float [batch, seq_length, width].
      positions: int32 [batch, n], positions within each sequence.

    Returns:
      float [batch * n, width].
    """
    sequence_shape = modeling.get_shape_list(sequence_tensor, expected_rank=3)
    batch_size = sequence_shape[0]
    seq_length = sequence_shape[1]
    width = sequence_shape[2]

    flat_offsets = tf.reshape(tf.range(0, batch_size, dtype=tf.int32) * seq_length, [-1, 1])
    flat_positions = tf.reshape(positions + flat_offsets, [-1])
    flat_sequence_tensor = tf.reshape(sequence_tensor, [batch_size * seq_length, width])
    output_tensor = tf.gather(flat_sequence_tensor, flat_positions)
    return output_tensor


# ---------------------------------------------------------------------------
# Input.

def input_fn_builder(input_files,
                     max_seq_length,
                     max_predictions_per_seq,
                     is_training,
                     num_cpu_threads=4):
    """Creates an `input_fn` closure to be passed to TPUEstimator.

    The input_fn yields batches of params["batch_size"] examples (the
    remainder dropped: TPUs need fixed shapes), each feature an int32 (or, for
    masked_lm_weights, float32) tensor [batch, length].
    """

    def input_fn(params):
        """The actual input function."""
        batch_size = params["batch_size"]

        name_to_features = {
            "input_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
            "input_mask": tf.io.FixedLenFeature([max_seq_length], tf.int64),
            "segment_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
            "masked_lm_positions": tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64),
            "masked_lm_ids": tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64),
            "masked_lm_weights": tf.io.FixedLenFeature([max_predictions_per_seq], tf.float32),
            "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
        }

        # For training, we want a lot of parallel reading and shuffling.
        # For eval, we want no shuffling and parallel reading doesn't matter.
        if is_training:
            d = tf.data.Dataset.from_tensor_slices(tf.constant(input_files))
            d = d.repeat()
            d = d.shuffle(buffer_size=len(input_files))

            # `cycle_length` is the number of parallel files that get read.
            cycle_length = min(num_cpu_threads, len(input_files))

            # Non-deterministic interleaving (the original's `sloppy` mode)
            # returns whichever file's records are ready first, which adds
            # even more randomness to the training pipeline.
            d = d.interleave(
                tf.data.TFRecordDataset,
                cycle_length=cycle_length,
                num_parallel_calls=cycle_length,
                deterministic=False)
            d = d.shuffle(buffer_size=100)
        else:
            d = tf.data.TFRecordDataset(input_files)
            # Since we evaluate for a fixed number of steps we don't want to
            # encounter out-of-range exceptions.
            d = d.repeat()

        # We must `drop_remainder` on training because the TPU requires fixed
        # size dimensions. For eval, we assume we are evaluating on the CPU or
        # GPU and we *don't* want to drop the remainder, otherwise we wont
        # cover every sample (the eval input repeats, so nothing is lost).
        d = d.map(lambda record: run_common.decode_record(record, name_to_features),
                  num_parallel_calls=num_cpu_threads)
        d = d.batch(batch_size, drop_remainder=True)
        return d.prefetch(tf.data.AUTOTUNE)

    return input_fn


def check_input_file(input_file, max_seq_length, max_predictions_per_seq, vocab_size):
    """Checks the first record of `input_file` against the flags.

    Training would otherwise fail deep inside TensorFlow ("Key: input_ids.
    Can't parse serialized Example") or, for ids beyond the vocabulary, with
    an index error on the embedding lookup.

    Raises:
      InputError: naming the file, the feature and the flag at fault.
    """
    try:
        record = next(iter(tf.io.tf_record_iterator(input_file)), None)
    except tf.errors.OpError as e:
        raise run_common.InputError(
            "--input_file: cannot read %s as TFRecord: %s" % (input_file, e.message))
    if record is None:
        raise run_common.InputError("--input_file: %s holds no records" % input_file)
    try:
        example = tf.train.Example.FromString(record)
    except Exception:  # A protobuf DecodeError.
        raise run_common.InputError(
            "--input_file: the first record of %s is not a tf.train.Example "
            "(was it written by create_pretraining_data.py?)" % input_file)
    lengths = {"seq": (max_seq_length, "--max_seq_length"),
               "pred": (max_predictions_per_seq, "--max_predictions_per_seq")}
    feature_map = example.features.feature
    for name, kind, length in _FEATURES:
        if name not in feature_map:
            raise run_common.InputError(
                "--input_file: the records of %s have no feature %r (was it written "
                "by create_pretraining_data.py?)" % (input_file, name))
        values = getattr(feature_map[name], kind + "_list").value
        if feature_map[name].WhichOneof("kind") != kind + "_list":
            raise run_common.InputError(
                "--input_file: feature %r of %s is not %s" % (name, input_file, kind))
        expected, flag = lengths.get(length, (length, None))
        if len(values) != expected:
            if flag:
                raise run_common.InputError(
                    "--input_file: feature %r of %s has length %d but %s=%d: use "
                    "the value the data was created with (%s=%d)"
                    % (name, input_file, len(values), flag, expected, flag, len(values)))
            raise run_common.InputError(
                "--input_file: feature %r of %s has length %d, expected %d"
                % (name, input_file, len(values), expected))
    largest_id = max(list(feature_map["input_ids"].int64_list.value)
                     + list(feature_map["masked_lm_ids"].int64_list.value))
    if largest_id >= vocab_size:
        raise run_common.InputError(
            "--input_file: %s holds token id %d but vocab_size in --bert_config_file "
            "is %d: the data was made with another vocabulary"
            % (input_file, largest_id, vocab_size))


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


def ensure_checkpoint(estimator, train_input_fn):
    """Makes sure --output_dir holds a checkpoint to evaluate.

    Without one, saves the initial model as checkpoint 0 through a training
    run stopped before its first step (the Estimator can only evaluate
    checkpoints). Returns the checkpoint path.
    """
    latest = tf.train.latest_checkpoint(FLAGS.output_dir)
    if latest:
        return latest
    if FLAGS.init_checkpoint:
        tf.logging.info("Saving the --init_checkpoint weights as checkpoint 0 of %s",
                        FLAGS.output_dir)
    else:
        tf.logging.info("No checkpoint in %s and no --init_checkpoint: saving the "
                        "random initialisation as checkpoint 0", FLAGS.output_dir)
    estimator.train(input_fn=train_input_fn, max_steps=max(1, FLAGS.num_train_steps),
                    hooks=[_StopAtStartHook()])
    return tf.train.latest_checkpoint(FLAGS.output_dir)


def evaluate(estimator, input_files, checkpoint_path, file_name, header):
    """Evaluates `checkpoint_path` for --max_eval_steps batches and writes
    output_dir/file_name. Returns the result dict."""
    tf.logging.info("***** Running evaluation *****")
    tf.logging.info("  Checkpoint = %s", checkpoint_path)
    tf.logging.info("  Batch size = %d", FLAGS.eval_batch_size)

    eval_input_fn = input_fn_builder(
        input_files=input_files,
        max_seq_length=FLAGS.max_seq_length,
        max_predictions_per_seq=FLAGS.max_predictions_per_seq,
        is_training=False)

    result = estimator.evaluate(input_fn=eval_input_fn, steps=FLAGS.max_eval_steps,
                                checkpoint_path=checkpoint_path)
    run_common.write_eval_results(result, FLAGS.output_dir, file_name=file_name,
                                  header=header)
    return result


# ---------------------------------------------------------------------------

def main(_):
    tf.logging.set_verbosity(tf.logging.INFO)

    if not FLAGS.do_train and not FLAGS.do_eval:
        raise run_common.InputError("At least one of `do_train` or `do_eval` must be True.")
    run_common.require_flags("input_file", "bert_config_file", "output_dir")
    if FLAGS.max_predictions_per_seq <= 0 or FLAGS.max_predictions_per_seq > FLAGS.max_seq_length:
        raise run_common.InputError(
            "--max_predictions_per_seq=%d must be between 1 and --max_seq_length=%d"
            % (FLAGS.max_predictions_per_seq, FLAGS.max_seq_length))

    bert_config = run_common.load_bert_config(FLAGS.bert_config_file,
                                              max_seq_length=FLAGS.max_seq_length)
    run_common.require_checkpoint("init_checkpoint", FLAGS.init_checkpoint)

    input_files = run_common.expand_file_patterns("input_file", FLAGS.input_file)

    tf.logging.info("*** Input Files ***")
    for input_file in input_files:
        tf.logging.info("  %s" % input_file)
    check_input_file(input_files[0], FLAGS.max_seq_length, FLAGS.max_predictions_per_seq,
                     bert_config.vocab_size)

    tf.io.gfile.makedirs(FLAGS.output_dir)

    run_config = run_common.make_run_config(
        FLAGS.output_dir, FLAGS.save_checkpoints_steps, FLAGS.iterations_per_loop,
        FLAGS.use_tpu, FLAGS.tpu_name, FLAGS.tpu_zone, FLAGS.gcp_project,
        FLAGS.master, FLAGS.num_tpu_cores)

    model_fn = model_fn_builder(
        bert_config=bert_config,
        init_checkpoint=FLAGS.init_checkpoint,
        learning_rate=FLAGS.learning_rate,
        num_train_steps=FLAGS.num_train_steps,
        num_warmup_steps=FLAGS.num_warmup_steps,
        use_tpu=FLAGS.use_tpu,
        use_one_hot_embeddings=FLAGS.use_tpu)

    # If TPU is not available, this will fall back to normal Estimator on CPU
    # or GPU.
    estimator = run_common.make_estimator(
        model_fn, run_config, FLAGS.use_tpu,
        train_batch_size=FLAGS.train_batch_size,
        eval_batch_size=FLAGS.eval_batch_size)

    train_input_fn = input_fn_builder(
        input_files=input_files,
        max_seq_length=FLAGS.max_seq_length,
        max_predictions_per_seq=FLAGS.max_predictions_per_seq,
        is_training=True)

    if FLAGS.do_train:
        if FLAGS.eval_at_start:
            checkpoint = ensure_checkpoint(estimator, train_input_fn)
            evaluate(estimator, input_files, checkpoint, START_RESULTS_FILE,
                     "***** Eval results at start (%s) *****" % os.path.basename(checkpoint))
        tf.logging.info("***** Running training *****")
        tf.logging.info("  Batch size = %d", FLAGS.train_batch_size)
        estimator.train(input_fn=train_input_fn, max_steps=FLAGS.num_train_steps)

    if FLAGS.do_eval:
        # The original evaluates the latest checkpoint of --output_dir. With
        # none there (a --do_eval-only run on a fresh directory, e.g. to score
        # --init_checkpoint on new data), the initial model becomes
        # checkpoint 0 first instead of failing.
        checkpoint = ensure_checkpoint(estimator, train_input_fn)
        evaluate(estimator, input_files, checkpoint, "eval_results.txt",
                 "***** Eval results *****")


if __name__ == "__main__":
    run_common.run_script(main)
