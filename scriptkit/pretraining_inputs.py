"""The checks of run_pretraining.py's input files, before any work: every
TFRecord file's framing, and the first record of each against the flags
(its features, their lengths, its token ids against the vocabulary), so
that a bad file stops the run with one line naming the flag and the file
rather than failing deep inside TensorFlow at the first batch.

In: the files of --input_file or --eval_file, the lengths and vocabulary
size the run reads them with. Out: `InputFiles` (the records per file and
the kind of records); errors.InputError. Imports TensorFlow.
"""

from typing import NamedTuple

import tensorflow.compat.v1 as tf

from scriptkit import errors
from scriptkit import logs
from scriptkit import pretraining_records


class InputFiles(NamedTuple):
    """What `check_input_files` found.

    Attributes:
      records_per_file: list of ints, one per file.
      kind: pretraining_records.MASKED or UNMASKED (written with
        --dynamic_masking), the same for all files.
    """

    records_per_file: list
    kind: str


def check_input_files(input_files, max_seq_length, max_predictions_per_seq, vocab_size,
                      flag_name="input_file"):
    """Checks the framing of every input file
    (`pretraining_records.check_tfrecord_file`), the first record of each
    (`check_input_file`: all must be of one kind) and logs the number of
    records (progress about every --log_every_seconds). `flag_name` is the
    flag that named the files (input_file or eval_file).

    Returns:
      An `InputFiles`.

    Raises:
      InputError: naming the flag and the file at fault.
    """
    what = "input" if flag_name == "input_file" else "evaluation"
    progress = logs.Progress("Checking the %s files" % what, len(input_files), "files")
    counts = []
    kinds = {}
    for path in input_files:
        counts.append(pretraining_records.check_tfrecord_file(flag_name, path))
        kind = check_input_file(path, max_seq_length, max_predictions_per_seq, vocab_size,
                                flag_name)
        kinds.setdefault(kind, path)
        if len(kinds) > 1:
            raise errors.InputError(
                "--%s mixes records with masks (%s) and records written with "
                "--dynamic_masking (%s): use files of one kind"
                % (flag_name, kinds[pretraining_records.MASKED],
                   kinds[pretraining_records.UNMASKED]))
        progress.update()
    kind = next(iter(kinds))
    tf.logging.info("%d %s file(s), %d records%s", len(input_files), what, sum(counts),
                    " without masks (masked as they are read)"
                    if kind == pretraining_records.UNMASKED else "")
    return InputFiles(counts, kind)


def check_input_file(input_file, max_seq_length, max_predictions_per_seq, vocab_size,
                     flag_name="input_file"):
    """Checks the first record of `input_file` (named by --`flag_name`)
    against the flags.

    Training would otherwise fail deep inside TensorFlow ("Key: input_ids.
    Can't parse serialized Example") or, for ids beyond the vocabulary, with
    an index error on the embedding lookup.

    Returns:
      The kind of its records: pretraining_records.MASKED, or UNMASKED for
      a file of create_pretraining_data.py --dynamic_masking (no masked_lm_*
      features).

    Raises:
      InputError: naming the file, the feature and the flag at fault.
    """
    try:
        record = next(iter(tf.io.tf_record_iterator(input_file)), None)
    except tf.errors.OpError as e:
        raise errors.InputError(
            "--%s: cannot read %s as TFRecord: %s" % (flag_name, input_file, e.message))
    if record is None:
        raise errors.InputError("--%s: %s holds no records" % (flag_name, input_file))
    try:
        example = tf.train.Example.FromString(record)
    except Exception:  # A protobuf DecodeError.
        raise errors.InputError(
            "--%s: the first record of %s is not a tf.train.Example "
            "(was it written by create_pretraining_data.py?)" % (flag_name, input_file))
    feature_map = example.features.feature
    kind = pretraining_records.record_kind(feature_map)
    for spec in pretraining_records.features_of(kind):
        name, kind_of_values = spec.name, spec.kind
        if name not in feature_map:
            raise errors.InputError(
                "--%s: the records of %s have no feature %r (was it written "
                "by create_pretraining_data.py?)" % (flag_name, input_file, name))
        if feature_map[name].WhichOneof("kind") != kind_of_values + "_list":
            raise errors.InputError(
                "--%s: feature %r of %s is not %s"
                % (flag_name, name, input_file, kind_of_values))
        found = len(getattr(feature_map[name], kind_of_values + "_list").value)
        expected = spec.size(max_seq_length, max_predictions_per_seq)
        if found == expected:
            continue
        if isinstance(spec.length, str):  # The name of the flag that sets it.
            flag = "--" + spec.length
            raise errors.InputError(
                "--%s: feature %r of %s has length %d but %s=%d: use "
                "the value the data was created with (%s=%d)"
                % (flag_name, name, input_file, found, flag, expected, flag, found))
        raise errors.InputError(
            "--%s: feature %r of %s has length %d, expected %d"
            % (flag_name, name, input_file, found, expected))
    ids = list(feature_map["input_ids"].int64_list.value)
    if kind == pretraining_records.MASKED:
        ids += list(feature_map["masked_lm_ids"].int64_list.value)
    largest_id = max(ids)
    if largest_id >= vocab_size:
        raise errors.InputError(
            "--%s: %s holds token id %d but vocab_size in --bert_config_file "
            "is %d: the data was made with another vocabulary"
            % (flag_name, input_file, largest_id, vocab_size))
    return kind
