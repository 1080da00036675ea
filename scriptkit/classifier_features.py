"""The classifier's model inputs: an `InputExample` turned into
`InputFeatures` (`convert_example`: one, or one per window of a long input;
`convert_single_example`, the original's, cuts instead), written to a
TFRecord file (`file_based_convert_examples_to_features`) and read back by
an input_fn (`file_based_input_fn_builder`), or held in memory
(`convert_examples_to_features`, `input_fn_builder`). run_classifier.py
imports the original's names, under which code written against Google's
run_classifier.py finds them.

In: examples, the labels, a tokenizer. Out: features, TFRecord files of
tf.train.Examples, input_fns. Imports TensorFlow.
"""

import itertools
import os

import tensorflow.compat.v1 as tf

import tokenization
from scriptkit import file_io
from scriptkit import input_packing
from scriptkit import input_pipeline
from scriptkit import logs
from scriptkit import long_inputs
from scriptkit.classifier_data import InputFeatures
from scriptkit.classifier_data import PaddingInputExample


def convert_single_example(ex_index, example, label_list, max_seq_length, tokenizer,
                           multi_label=False):
    """Turns one `InputExample` into the model's `InputFeatures` (one),
    cutting what does not fit: `convert_example` without a doc_stride, with
    the same arguments."""
    return convert_example(ex_index, example, label_list, max_seq_length, tokenizer,
                           multi_label=multi_label)[0][0]


def convert_example(ex_index, example, label_list, max_seq_length, tokenizer,
                    multi_label=False, doc_stride=None, max_windows=0):
    """Turns one `InputExample` into the model's `InputFeatures`: one, or
    one per window with a `doc_stride`.

    Args:
      ex_index: position of the example (the first 5 are logged).
      example: InputExample, or PaddingInputExample for all-zero features
        with is_real_example False.
      label_list: the task's labels; None for regression (the label is then
        parsed as a float).
      max_seq_length: length of the feature lists.
      tokenizer: FullTokenizer.
      multi_label: the example's label is a tuple of labels (multi-label
        task).
      doc_stride: None: a text that does not fit is cut. Else the first
        text is read in windows that start this many
        pieces apart (`long_inputs.first_text_windows`), each with the whole
        second text.
      max_windows: with doc_stride, the most windows (0: all).

    Returns:
      (features, cut): features is a list of InputFeatures, one per window:
      [CLS] A [SEP] (B [SEP]) as ids, zero-padded to max_seq_length, with
      input_mask (1 for real tokens) and segment_ids (0 for A, 1 for B);
      label_id is the label's index in label_list (its float value for
      regression; for multi-label a list of len(label_list) ints, 1 for each
      of the example's labels). cut is True when windows were asked for but
      the second text alone leaves no room, so the pair was cut instead.
    """
    if isinstance(example, PaddingInputExample):
        zeros = [0] * max_seq_length
        if label_list is None:
            label_id = 0.0
        else:
            label_id = [0] * len(label_list) if multi_label else 0
        return [InputFeatures(input_ids=zeros, input_mask=list(zeros),
                              segment_ids=list(zeros), label_id=label_id,
                              is_real_example=False)], False

    tokens_a = tokenizer.tokenize(example.text_a)
    tokens_b = tokenizer.tokenize(example.text_b) if example.text_b else None
    windows = None
    if doc_stride is not None:
        windows = long_inputs.first_text_windows(tokens_a, tokens_b, max_seq_length,
                                                 doc_stride, max_windows)
    cut = doc_stride is not None and windows is None
    if label_list is None:
        label_id = float(example.label)
    elif multi_label:
        label_id = [int(label in example.label) for label in label_list]
    else:
        label_id = label_list.index(example.label)

    features = []
    for window_a in windows or [tokens_a]:
        # The classifier reads the final vector of [CLS] (the pooled output):
        # fine-tuning the whole model makes it a summary of the input.
        tokens, input_ids, input_mask, segment_ids = input_packing.pack_sequence_pair(
            list(window_a), list(tokens_b) if tokens_b else None, max_seq_length, tokenizer)
        if ex_index < 5 and not features:
            # Test sets carry a placeholder label ("test..." guids, see
            # DataProcessor._create_examples).
            label = ("none (test data)" if example.guid.startswith("test")
                     else "%s (id = %s)" % (example.label, label_id))
            fields = [("guid", example.guid),
                      ("tokens", [tokenization.printable_text(t) for t in tokens]),
                      ("length", len(tokens)), ("label", label)]
            if windows and len(windows) > 1:
                fields.append(("windows", len(windows)))
            input_pipeline.log_example(fields, debug=ex_index > 0,
                                       ids=[("input_ids", input_ids), ("input_mask", input_mask),
                                        ("segment_ids", segment_ids)])
        features.append(InputFeatures(input_ids=input_ids, input_mask=input_mask,
                                      segment_ids=segment_ids, label_id=label_id,
                                      is_real_example=True))
    return features, cut


def file_based_convert_examples_to_features(
        examples, label_list, max_seq_length, tokenizer, output_file, multi_label=False,
        doc_stride=None, max_windows=0, pad_to_multiple=1, windows_per_record=0):
    """Converts `InputExample`s (see `convert_example`) into a TFRecord
    file, written atomically, of one tf.train.Example per input (per window
    with a doc_stride): int64 input_ids, input_mask, segment_ids
    [max_seq_length], label_ids [1] (float for regression, label_list None;
    [len(label_list)] 0/1 with multi_label) and is_real_example [1].

    Args:
      doc_stride, max_windows: the windows of long inputs (`convert_example`).
      pad_to_multiple: all-zero records (is_real_example 0) follow until the
        number of records is a multiple of this (full batches for TPUs).
      windows_per_record: 0: a record per window. Else (with a doc_stride
        and max_windows no larger) one record per input, holding its windows
        one after another in input_ids, input_mask and segment_ids
        [windows_per_record * max_seq_length], then all-zero windows (input
        mask 0) up to windows_per_record (--window_loss=document).

    Returns:
      list with the index in `examples` of each record's input (-1 for the
      padding records), in file order: an input's windows are consecutive.
    """
    label_feature = (input_pipeline.float_feature if label_list is None
                     else input_pipeline.int64_feature)
    progress = logs.Progress("Converting examples for %s" % os.path.basename(output_file),
                             len(examples))
    example_of_record = []
    cut = []

    def padding():
        # Counted once the inputs' records are written (a padding input makes one).
        for _ in range(input_pipeline.padding_count(len(example_of_record), pad_to_multiple)):
            yield -1, PaddingInputExample()

    with file_io.atomic_path(output_file) as tmp_file, \
            tf.io.TFRecordWriter(tmp_file) as writer:
        for ex_index, example in itertools.chain(enumerate(examples), padding()):
            if ex_index >= 0:
                progress.update()
            features, was_cut = convert_example(
                ex_index, example, label_list, max_seq_length, tokenizer,
                multi_label=multi_label, doc_stride=doc_stride, max_windows=max_windows)
            if was_cut:
                cut.append(example.guid)
            # The windows of each record: one, or all of the input's.
            records = [features] if windows_per_record else [[f] for f in features]
            for record_windows in records:
                feature = record_windows[0]
                label_ids = feature.label_id if multi_label else [feature.label_id]
                record = tf.train.Example(features=tf.train.Features(feature={
                    "input_ids": _windows_feature(record_windows, "input_ids",
                                                  windows_per_record, max_seq_length),
                    "input_mask": _windows_feature(record_windows, "input_mask",
                                                   windows_per_record, max_seq_length),
                    "segment_ids": _windows_feature(record_windows, "segment_ids",
                                                    windows_per_record, max_seq_length),
                    "label_ids": label_feature(label_ids),
                    "is_real_example": input_pipeline.int64_feature(
                        [int(feature.is_real_example)]),
                }))
                writer.write(record.SerializeToString())
                example_of_record.append(ex_index)
    progress.done()
    if cut:
        tf.logging.warning(
            "%d inputs of %s (the first: %s) have a second text that leaves no room for "
            "the first in --max_seq_length=%d: they are cut, not read in windows",
            len(cut), os.path.basename(output_file), cut[0], max_seq_length)
    return example_of_record


def _windows_feature(windows, name, num_windows, max_seq_length):
    """An int64 tf.train.Feature of the InputFeatures `windows`' list `name`
    (input_ids, ...), one window after another, then all-zero windows up to
    `num_windows` (0: none)."""
    values = [value for window in windows for value in getattr(window, name)]
    return input_pipeline.int64_feature(
        values + [0] * (max_seq_length * max(num_windows - len(windows), 0)))


def file_based_input_fn_builder(input_file, seq_length, is_training, drop_remainder,
                                is_regression=False, num_multi_labels=0,
                                length_buckets=None, windows_per_record=0):
    """Builds the `input_fn` reading a file of
    `file_based_convert_examples_to_features` for the runner.

    Args:
      input_file: the TFRecord file.
      seq_length: the max_seq_length it was written with.
      is_training: read the file over and over, shuffled.
      drop_remainder: drop a last partial batch (TPU).
      is_regression: label_ids are floats.
      num_multi_labels: a multi-label task's number of labels (label_ids are
        then 0/1 vectors of that length); 0 for other tasks.
      length_buckets: dynamic padding (input_pipeline.tfrecord_input_fn).
      windows_per_record: the file holds inputs of this many windows each
        (file_based_convert_examples_to_features); 0: single sequences.

    Returns:
      input_fn(params) -> tf.data.Dataset of dicts of int32 tensors
      [batch, seq_length] (input_ids, input_mask, segment_ids; with
      length_buckets, [batch, a bucket's length]; with windows_per_record,
      [batch, windows_per_record, ...]) and [batch] (label_ids, float32 for
      regression, [batch, num_multi_labels] for multi-label;
      is_real_example).
    """
    label_shape = [num_multi_labels] if num_multi_labels else []
    sequence_shape = [windows_per_record, seq_length] if windows_per_record else [seq_length]
    name_to_features = {
        "input_ids": tf.io.FixedLenFeature(sequence_shape, tf.int64),
        "input_mask": tf.io.FixedLenFeature(sequence_shape, tf.int64),
        "segment_ids": tf.io.FixedLenFeature(sequence_shape, tf.int64),
        "label_ids": tf.io.FixedLenFeature(label_shape,
                                           tf.float32 if is_regression else tf.int64),
        "is_real_example": tf.io.FixedLenFeature([], tf.int64),
    }

    return input_pipeline.tfrecord_input_fn(input_file, name_to_features, is_training,
                                            drop_remainder, length_buckets=length_buckets)


def input_fn_builder(features, seq_length, is_training, drop_remainder):
    """Builds an `input_fn` serving a list of `InputFeatures` from memory,
    as constant tensors: for small data sets and notebooks. `main` goes
    through TFRecord files instead.

    Returns:
      input_fn(params) -> tf.data.Dataset of dicts of int32 input_ids,
      input_mask, segment_ids [batch, seq_length] and label_ids [batch]
      (float32 when the labels are floats: regression; [batch, num_labels]
      when they are lists: multi-label); repeated and shuffled for training.
    """
    num_examples = len(features)
    label_ids = [f.label_id for f in features]
    label_dtype = tf.float32 if any(isinstance(x, float) for x in label_ids) else tf.int32
    label_shape = [len(label_ids[0])] if label_ids and isinstance(label_ids[0], list) else []
    columns = {
        "input_ids": ([f.input_ids for f in features], tf.int32),
        "input_mask": ([f.input_mask for f in features], tf.int32),
        "segment_ids": ([f.segment_ids for f in features], tf.int32),
        "label_ids": (label_ids, label_dtype),
    }

    def input_fn(params):
        """See input_fn_builder."""
        d = tf.data.Dataset.from_tensor_slices({
            name: tf.constant(values, dtype=dtype,
                              shape=[num_examples] + (label_shape if name == "label_ids"
                                                      else [seq_length]))
            for name, (values, dtype) in columns.items()})
        if is_training:
            d = d.repeat().shuffle(buffer_size=100)
        return d.batch(params["batch_size"], drop_remainder=drop_remainder)

    return input_fn


def convert_examples_to_features(examples, label_list, max_seq_length, tokenizer,
                                 multi_label=False):
    """`convert_single_example` of every example: a list of `InputFeatures`,
    in order (held in memory, for `input_fn_builder`)."""
    features = []
    for ex_index, example in enumerate(examples):
        if ex_index % 10000 == 0:
            tf.logging.info("Converting example %d of %d", ex_index, len(examples))
        features.append(convert_single_example(ex_index, example, label_list,
                                               max_seq_length, tokenizer,
                                               multi_label=multi_label))
    return features
