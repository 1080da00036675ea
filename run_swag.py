"""BERT fine-tuning for multiple choice: SWAG, and any task that picks one of
a fixed number of endings for a context.

The method of the BERT paper's SWAG experiment: each choice is packed as
``[CLS] context [SEP] question + ending [SEP]``; the pooled ``[CLS]``
output of each choice is scored by one weight vector shared by all choices,
and a softmax over the choices' scores gives their probabilities.

Data, in ``--data_dir`` or given by ``--train_file``/``--dev_file``/
``--test_file``:

* the SWAG CSV files as released (train.csv, val.csv, test.csv): the header
  ``,video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,
  ending2,ending3,label`` (test.csv without ``label``); the unnamed first
  column is the example id, ``sent1`` the context and ``sent2`` the start of
  every ending (the "question");
* JSON Lines, one example per line: ``{"id": ..., "context": ...,
  "question": ... (optional), "endings": [...], "label": ...}`` with the same
  number of endings on every line of a file (train.jsonl, dev.jsonl or
  val.jsonl, test.jsonl).

Outputs in ``--output_dir``: ``eval_results.txt`` (eval_accuracy, eval_loss),
``test_results.tsv`` (a header, then id, predicted choice and one probability
per choice for each test example) and, with ``--export_dir``, a SavedModel.
See docs/swag.md.
"""

import collections
import dataclasses
import csv
import io
import os

import numpy as np
from scriptkit import quiet_tf  # noqa: F401  (first: imports TensorFlow without its start-up noise)
import tensorflow.compat.v1 as tf

from scriptkit import file_io
from scriptkit import evaluation
from scriptkit import fine_tuning
from scriptkit import task_model
from scriptkit import input_packing
from scriptkit import input_pipeline
import modeling
from scriptkit import output_lock
from scriptkit import runtime
from scriptkit import script_runner
from scriptkit import serving
from scriptkit import settings as settings_lib
from scriptkit import shared_flags
from scriptkit import training
from scriptkit import training_progress
from scriptkit.errors import InputError

# ---------------------------------------------------------------------------
# Settings and flags.

@dataclasses.dataclass(frozen=True)
class Settings(settings_lib.FineTuning):
    """This script's flags, with its defaults (read in main by
    `settings_lib.from_flags`)."""

    input_format: str = "auto"


shared_flags.define_settings_flags(Settings, helps={
    "data_dir": "Folder with the data files, found by their usual names (train.csv, "
                "val.csv, test.csv; or train.jsonl, dev.jsonl or val.jsonl, test.jsonl).",
    "input_format": "Format of the data files: swag_csv (the SWAG release), jsonl (one "
                    "JSON object per line) or auto (by the file name's extension: .csv, "
                    ".jsonl or .json)."})

# The formats of --input_format that SWAG's data come in.
INPUT_FORMATS = ("auto", "swag_csv", "jsonl")


# ---------------------------------------------------------------------------
# Reading data.

# Usual file names in --data_dir, in order of preference.
TRAIN_NAMES = ("train.csv", "train.jsonl")
DEV_NAMES = ("val.csv", "dev.csv", "dev.jsonl", "val.jsonl")
TEST_NAMES = ("test.csv", "test.jsonl")

# The SWAG release's columns (the first, unnamed, is the example id), and
# its number of endings.
SWAG_COLUMNS = ("", "video-id", "fold-ind", "startphrase", "sent1", "sent2", "gold-source",
                "ending0", "ending1", "ending2", "ending3")
SWAG_ENDINGS = 4

# example_id: str; context: str; question: str (may be empty); endings: list
# of str; label: index of the right ending, or None (unlabelled).
MultipleChoiceExample = collections.namedtuple(
    "MultipleChoiceExample", ["example_id", "context", "question", "endings", "label"])


def _parse_label(value, num_choices, path, line):
    """A label cell or field -> int in [0, num_choices). Raises InputError."""
    number = value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        number = int(value.strip())
    if isinstance(number, bool) or not isinstance(number, int) or not 0 <= number < num_choices:
        raise InputError("%s, line %d: label %r is not a choice number from 0 to %d"
                         % (path, line, value, num_choices - 1))
    return number


def read_swag_csv(path, flag_name="data_dir"):
    """Reads a SWAG CSV file as released.

    Args:
      path: train.csv, val.csv or test.csv (test.csv has no label column).
      flag_name: the flag that named the file (for a missing file's error).

    Returns:
      list of MultipleChoiceExample (4 endings each; label None without a
      label column).

    Raises:
      InputError: missing or empty file, a header that is not SWAG's, a row
        with the wrong number of columns or a bad label (naming the line).
    """
    text = file_io.read_text(path, flag_name)
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
    except StopIteration:
        raise InputError("%s: empty file" % path)
    except csv.Error as e:
        raise InputError("%s, line 1: %s" % (path, e))
    expected = list(SWAG_COLUMNS)
    if header[:len(expected)] != expected or header[len(expected):] not in ([], ["label"]):
        raise InputError(
            "%s, line 1: not the header of a SWAG CSV file (expected %r, optionally "
            "followed by 'label'; found %r)" % (path, ",".join(expected), ",".join(header)))
    column = {name: i for i, name in enumerate(header)}
    has_label = "label" in column
    examples = []
    while True:
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as e:
            raise InputError("%s, line %d: %s" % (path, reader.line_num, e))
        line = reader.line_num
        if not row:
            continue
        if len(row) != len(header):
            raise InputError("%s, line %d: expected %d comma-separated columns, found %d"
                             % (path, line, len(header), len(row)))
        endings = [row[column["ending%d" % i]] for i in range(SWAG_ENDINGS)]
        label = _parse_label(row[column["label"]], 4, path, line) if has_label else None
        examples.append(MultipleChoiceExample(
            example_id=row[0], context=row[column["sent1"]], question=row[column["sent2"]],
            endings=endings, label=label))
    if not examples:
        raise InputError("%s: no examples (only a header)" % path)
    return examples


def read_jsonl(path, flag_name="data_dir"):
    """Reads multiple-choice examples from JSON Lines.

    Each non-blank line: {"id": str or number (optional: the line number),
    "context": str, "question": str (optional), "endings": [str, ...],
    "label": int (optional)}. Every line has the same number of endings (at
    least 2), and either every line has a label or none has.

    Returns:
      list of MultipleChoiceExample.

    Raises:
      InputError: naming the file and line of the first bad one.
    """
    text = file_io.read_text(path, flag_name)
    examples = []
    first = None  # (line, number of endings, has a label)
    for line, obj in file_io.json_lines(text, path):
        context, endings = obj.get("context"), obj.get("endings")
        question = obj.get("question") or ""
        if not isinstance(context, str):
            raise InputError("%s, line %d: \"context\" must be a string" % (path, line))
        if not isinstance(question, str):
            raise InputError("%s, line %d: \"question\" must be a string" % (path, line))
        if (not isinstance(endings, list) or len(endings) < 2
                or not all(isinstance(e, str) for e in endings)):
            raise InputError("%s, line %d: \"endings\" must be a list of at least 2 strings"
                             % (path, line))
        has_label = obj.get("label") is not None
        if first is None:
            first = (line, len(endings), has_label)
        elif len(endings) != first[1]:
            raise InputError("%s, line %d: %d endings, but line %d has %d (every example of "
                             "a file needs the same number)"
                             % (path, line, len(endings), first[0], first[1]))
        elif has_label != first[2]:
            raise InputError("%s, line %d: %s, unlike line %d" % (
                path, line, "a label" if has_label else "no label", first[0]))
        label = _parse_label(obj["label"], len(endings), path, line) if has_label else None
        example_id = obj.get("id", line)
        examples.append(MultipleChoiceExample(str(example_id), context, question,
                                              list(endings), label))
    if not examples:
        raise InputError("%s: no examples (an empty file?)" % path)
    return examples


def read_examples(path, input_format="auto", flag_name="data_dir"):
    """Reads a data file in `input_format` (auto: by extension, .csv for
    SWAG's CSV, anything else JSON Lines)."""
    if input_format == "auto":
        input_format = "swag_csv" if path.lower().endswith(".csv") else "jsonl"
    if input_format == "swag_csv":
        return read_swag_csv(path, flag_name)
    return read_jsonl(path, flag_name)


# ---------------------------------------------------------------------------
# Features.

# input_ids, input_mask, segment_ids: one list of max_seq_length ints per
# choice; label_id: int (0 without a label); is_real_example: False for the
# padding that fills TPU batches.
InputFeatures = collections.namedtuple(
    "InputFeatures", ["input_ids", "input_mask", "segment_ids", "label_id",
                      "is_real_example"])


def convert_example(example, max_seq_length, tokenizer):
    """One example -> InputFeatures: per choice, [CLS] context [SEP]
    question + ending [SEP] (the longer side truncated first), as ids."""
    context = tokenizer.tokenize(example.context)
    question = example.question.strip()
    input_ids, input_mask, segment_ids = [], [], []
    for ending in example.endings:
        second = tokenizer.tokenize((question + " " + ending) if question else ending)
        _, ids, mask, segments = input_packing.pack_sequence_pair(
            list(context), second, max_seq_length, tokenizer)
        input_ids.append(ids)
        input_mask.append(mask)
        segment_ids.append(segments)
    label = example.label if example.label is not None else 0
    return InputFeatures(input_ids, input_mask, segment_ids, label, True)


def padding_features(num_choices, max_seq_length):
    """All-zero features of an example that counts nowhere (TPU padding)."""
    zeros = [[0] * max_seq_length for _ in range(num_choices)]
    return InputFeatures(zeros, zeros, zeros, 0, False)


def write_features(examples, max_seq_length, tokenizer, output_file, pad_to_multiple=1):
    """Converts examples and writes them as tf.train.Examples to a TFRecord
    file, atomically: input_ids, input_mask, segment_ids (int64
    [num_choices * max_seq_length]), label_ids and is_real_example (int64
    [1]); with pad_to_multiple > 1, padding examples make the count a
    multiple of it.

    Returns:
      the number of records written.
    """
    num_choices = len(examples[0].endings)
    features = [convert_example(e, max_seq_length, tokenizer) for e in examples]
    for i, (example, feature) in enumerate(zip(examples[:3], features)):
        length = sum(feature.input_mask[0])
        input_pipeline.log_example(
            [("id", example.example_id),
             ("tokens (choice 0)", tokenizer.convert_ids_to_tokens(
                 feature.input_ids[0][:length])),
             ("length (choice 0)", length),
             ("label", "none" if example.label is None else example.label)],
            debug=i > 0,
            ids=[("input_ids (choice 0)", feature.input_ids[0]),
                 ("segment_ids (choice 0)", feature.segment_ids[0])])
    features += [padding_features(num_choices, max_seq_length)] * \
        input_pipeline.padding_count(len(features), pad_to_multiple)
    with file_io.atomic_path(output_file) as tmp_file:
        with tf.io.TFRecordWriter(tmp_file) as writer:
            for feature in features:
                record = {
                    "input_ids": input_pipeline.int64_feature(sum(feature.input_ids, [])),
                    "input_mask": input_pipeline.int64_feature(sum(feature.input_mask, [])),
                    "segment_ids": input_pipeline.int64_feature(sum(feature.segment_ids, [])),
                    "label_ids": input_pipeline.int64_feature([feature.label_id]),
                    "is_real_example": input_pipeline.int64_feature(
                        [int(feature.is_real_example)]),
                }
                writer.write(tf.train.Example(
                    features=tf.train.Features(feature=record)).SerializeToString())
    return len(features)


def file_based_input_fn_builder(input_file, num_choices, seq_length, is_training,
                                drop_remainder, length_buckets=None):
    """An input_fn over a file of `write_features` (`length_buckets`: dynamic
    padding, input_pipeline.tfrecord_input_fn).

    Returns:
      input_fn(params) -> tf.data.Dataset of dicts: input_ids, input_mask,
      segment_ids int32 [batch, num_choices, seq_length]; label_ids,
      is_real_example int32 [batch]. Training repeats and shuffles.
    """
    name_to_features = {
        "input_ids": tf.io.FixedLenFeature([num_choices, seq_length], tf.int64),
        "input_mask": tf.io.FixedLenFeature([num_choices, seq_length], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([num_choices, seq_length], tf.int64),
        "label_ids": tf.io.FixedLenFeature([], tf.int64),
        "is_real_example": tf.io.FixedLenFeature([], tf.int64),
    }

    return input_pipeline.tfrecord_input_fn(input_file, name_to_features, is_training,
                                            drop_remainder, shuffle_buffer=1000,
                                            length_buckets=length_buckets)


# ---------------------------------------------------------------------------
# Model.

def create_model(bert_config, is_training, input_ids, input_mask, segment_ids, labels,
                 use_one_hot_embeddings, options=None):
    """Scores every choice from its pooled [CLS] output with one shared
    weight vector, and a softmax over the choices.

    Args:
      input_ids, input_mask, segment_ids: int32 [batch, num_choices,
        seq_length] (num_choices may be unknown until run time).
      labels: int32 [batch], the right choice.
      options: training.TrainingOptions (None: the defaults).

    Returns:
      (loss scalar, per_example_loss [batch], logits [batch, num_choices],
      probabilities [batch, num_choices]), from `swag/output_weights`
      [1, hidden] and `swag/output_bias` [1].
    """
    batch_size, num_choices, seq_length = modeling.get_shape_list(input_ids, expected_rank=3)

    def flat(t):
        return tf.reshape(t, [-1, seq_length])

    model = training.bert_model(bert_config, is_training, flat(input_ids), flat(input_mask),
                                flat(segment_ids), use_one_hot_embeddings, options)
    pooled = model.get_pooled_output()  # [batch * num_choices, hidden]
    hidden_size = modeling.get_shape_list(pooled)[-1]
    output_weights = tf.get_variable(
        "swag/output_weights", [1, hidden_size],
        initializer=tf.truncated_normal_initializer(stddev=0.02))
    output_bias = tf.get_variable("swag/output_bias", [1], initializer=tf.zeros_initializer())
    if is_training and bert_config.hidden_dropout_prob > 0:
        # The model's own dropout rate (0.1 in Google's models).
        pooled = tf.nn.dropout(pooled, rate=bert_config.hidden_dropout_prob)
    scores = tf.nn.bias_add(tf.matmul(pooled, output_weights, transpose_b=True), output_bias)
    logits = tf.reshape(scores, [batch_size, num_choices])
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    one_hot = tf.one_hot(labels, depth=num_choices, dtype=tf.float32)
    per_example_loss = -tf.reduce_sum(one_hot * log_probs, axis=-1)
    return (tf.reduce_mean(per_example_loss), per_example_loss, logits,
            tf.nn.softmax(logits, axis=-1))


def model_fn_builder(bert_config, init_checkpoint, learning_rate, num_train_steps,
                     num_warmup_steps, use_tpu, use_one_hot_embeddings, options=None):
    """Returns the `model_fn` for the runner (`options`: as for
    `create_model`).

    TRAIN and EVAL (eval_accuracy, eval_loss over the real examples) read
    label_ids too; PREDICT returns {"probabilities": [batch, num_choices]}
    (plus label_ids and is_real_example when given), and the serving
    signature returns the probabilities.
    """

    def build_head(features, mode):
        label_ids, is_real_example = task_model.example_labels(features)
        total_loss, per_example_loss, logits, probabilities = create_model(
            bert_config, mode == runtime.ModeKeys.TRAIN, features["input_ids"],
            features["input_mask"], features["segment_ids"], label_ids,
            use_one_hot_embeddings, options)
        return task_model.Head(
            loss=total_loss,
            eval_metrics=(task_model.loss_and_accuracy(),
                          [per_example_loss, label_ids, logits, is_real_example]),
            predictions={"probabilities": probabilities},
            export_outputs={"probabilities": probabilities})

    return task_model.task_model_fn(
        build_head, init_checkpoint, learning_rate, num_train_steps, num_warmup_steps,
        use_tpu, options, passed_through=("label_ids", "is_real_example"))


# ---------------------------------------------------------------------------
# Steps of main.

def write_test_results(path, examples, probabilities):
    """test_results.tsv: a header, then per example its id, the predicted
    choice (0-based) and each choice's probability, tab-separated."""
    num_choices = len(examples[0].endings)
    with file_io.atomic_output(path) as writer:
        writer.write("\t".join(["id", "prediction"] + ["probability_%d" % i
                                                       for i in range(num_choices)]) + "\n")
        for example, probs in zip(examples, probabilities):
            writer.write("\t".join([example.example_id, str(int(np.argmax(probs)))] +
                                   ["%.6f" % p for p in probs]) + "\n")
    file_io.report_output(path, "%d predictions" % len(examples))


def export_model(source):
    """Exports a SavedModel for serving (see serving.py) of the
    `serving.ExportSource` `source` and returns its directory (timestamped,
    in source.export_dir).

    serving_default takes tf.string context [batch], question [batch] and
    endings [batch, num_choices] (any number of choices), packed as
    `convert_example` packs them, and returns probabilities [batch,
    num_choices] and label_ids [batch] (the most probable choice).
    serving_ids takes int32 input_ids, input_mask and segment_ids [batch,
    num_choices, seq_length] and returns probabilities, as exports did
    before."""
    model_fn = model_fn_builder(bert_config=source.bert_config,
                                **task_model.export_builder_args(source.options))

    def text_signature(tokenizer):
        inputs = {"context": serving.string_input("context"),
                  "question": serving.string_input("question"),
                  "endings": serving.string_input("endings", rank=2)}
        num_choices = tf.shape(inputs["endings"])[1]
        endings = tf.reshape(inputs["endings"], [-1])  # [batch * num_choices]
        example = tf.range(tf.size(endings)) // num_choices
        context = tf.gather(tokenizer.tokenize(inputs["context"]), example)
        # The pieces of question + " " + ending are those of the two apart.
        second = [tf.gather(tokenizer.tokenize(inputs["question"]), example),
                  tokenizer.tokenize(endings)]
        flat = serving.pack(context, second, source.max_seq_length, tokenizer.cls_id,
                            tokenizer.sep_id)
        features = {name: tf.reshape(t, [-1, num_choices, tf.shape(t)[1]])
                    for name, t in flat.items()}

        def outputs(predictions):
            probabilities = predictions["probabilities"]
            return {"probabilities": probabilities,
                    "label_ids": tf.argmax(probabilities, axis=-1, output_type=tf.int32)}

        return inputs, features, outputs

    # The SWAG release's columns hold the inputs too (predict.py reads its
    # CSV files as they are).
    fields = {"context": "sent1", "question": "sent2",
              "endings": ["ending%d" % i for i in range(SWAG_ENDINGS)]}
    return serving.export(model_fn, source, text_signature, id_rank=3,
                          settings={"max_seq_length": source.max_seq_length,
                                    "input_fields": fields}, onnx_head=("choice", None))


def _check_flags(settings):
    """Raises InputError for an --input_format that SWAG data do not come
    in."""
    if settings.input_format not in INPUT_FORMATS:
        raise InputError("--input_format=%s: SWAG data are %s" % (
            settings.input_format, ", ".join(INPUT_FORMATS[1:])))


def _read_data(run):
    """Reads every data file of the run, before any work.

    Returns:
      (train, dev, test): example lists (`read_examples`), or None where not
      read.

    Raises:
      InputError: a bad file, or training or dev data without labels.
    """
    settings, input_format = run.settings, run.settings.input_format
    train = dev = test = None
    if settings.do_train:
        train = read_examples(run.data_file("train_file", TRAIN_NAMES, "--do_train"),
                              input_format, "train_file")
    if settings.do_eval:
        dev = read_examples(run.data_file("dev_file", DEV_NAMES, "--do_eval"),
                            input_format, "dev_file")
    if settings.do_predict:
        test = read_examples(run.data_file("test_file", TEST_NAMES, "--do_predict"),
                             input_format, "test_file")
    for name, examples in (("training", train), ("dev", dev)):
        if examples is not None and examples[0].label is None:
            raise InputError("The %s data need labels (a 'label' column or field)" % name)
    return train, dev, test


@output_lock.releases_output_lock
def main(_):
    # Every input is checked before anything is trained or written.
    run = fine_tuning.prepare_run(
        settings_lib.from_flags(Settings), "run_swag.py", min_seq_length=4,
        check_flags=_check_flags, head_variable="swag/output_weights",
        needs=lambda settings: ((), fine_tuning.data_file_flags(
            settings, ("do_train", "train_file"), ("do_eval", "dev_file"),
            ("do_predict", "test_file"))))
    settings = run.settings
    train, dev, test = _read_data(run)
    run.check_output_dir({"swag/output_weights": [1, run.bert_config.hidden_size],
                          "swag/output_bias": [1]})
    num_train_steps = num_warmup_steps = None
    if settings.do_train:
        num_train_steps, num_warmup_steps = run.train_schedule(len(train))
    run.check_export_checkpoint()

    run.start_output("multiple_choice", ["do_lower_case", "max_seq_length", "vocab_file"])
    trainer = run.trainer(model_fn_builder(**run.model_fn_args(num_train_steps,
                                                               num_warmup_steps)))
    if settings.do_train:
        run.train(trainer, _train_input(run, train), num_train_steps, [
            ("Num examples", len(train)), ("Num choices", len(train[0].endings))])

    checkpoint = run.checkpoint()
    if settings.do_eval:
        num_records, input_fn = _eval_input(run, dev, "eval.tf_record", "Running evaluation",
                                            settings.eval_batch_size)
        evaluation.write_eval_results(run.evaluate(trainer, input_fn, num_records, checkpoint),
                                       run.output_dir, headline="eval_accuracy")

    if settings.do_predict:
        num_records, input_fn = _eval_input(run, test, "predict.tf_record",
                                            "Running prediction", settings.predict_batch_size)
        predictions = run.predict(trainer, input_fn, num_records, len(test), checkpoint)
        write_test_results(os.path.join(run.output_dir, "test_results.tsv"), test,
                           [p["probabilities"] for p in predictions])

    if settings.export_dir:
        export_model(run.export_source(checkpoint))


def _train_input(run, examples):
    """Writes the training features of `examples` to train.tf_record in
    --output_dir; their input_fn."""
    train_file = os.path.join(run.output_dir, "train.tf_record")
    write_features(examples, run.settings.max_seq_length, run.tokenizer, train_file)
    return file_based_input_fn_builder(
        train_file, len(examples[0].endings), run.settings.max_seq_length, is_training=True,
        drop_remainder=True, length_buckets=run.options.length_buckets)


def _eval_input(run, examples, name, phase, batch_size):
    """Writes the features of `examples` to `name` in --output_dir (padded
    to whole batches on a TPU, where padding examples fill them and count
    nowhere) and logs the `phase`.

    Returns:
      (number of records, input_fn).
    """
    path = os.path.join(run.output_dir, name)
    num_records = write_features(examples, run.settings.max_seq_length, run.tokenizer, path,
                                 pad_to_multiple=batch_size if run.fixed_batches else 1)
    training_progress.log_phase(phase, [
        ("Num examples", "%d (%d actual)" % (num_records, len(examples))),
        ("Batch size", batch_size)])
    return num_records, file_based_input_fn_builder(
        path, len(examples[0].endings), run.settings.max_seq_length, is_training=False,
        drop_remainder=run.fixed_batches, length_buckets=run.options.length_buckets)


if __name__ == "__main__":
    script_runner.run_script(main)
