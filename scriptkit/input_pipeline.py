"""The model's input: tf.train.Example features, the input_fn that reads
them from a TFRecord file in batches (resumed where a checkpoint stopped,
and with --dynamic_padding cut to length buckets), and the log lines that
show a converted example and the features a model_fn gets.

In: a TFRecord file and its feature spec. Out: the runner's
input_fn(params), which gives dicts of int32/float tensors [batch, ...].
Imports TensorFlow.
"""

import random

from scriptkit import quiet_tf  # noqa: F401  (first: imports TensorFlow without its start-up noise)
import tensorflow.compat.v1 as tf

from scriptkit.errors import InputError


# ---------------------------------------------------------------------------
# tf.train.Example features.

def int64_feature(values):
    """A tf.train.Feature holding the ints `values`."""
    return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def float_feature(values):
    """A tf.train.Feature holding the floats `values`."""
    return tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))


def decode_record(record, name_to_features):
    """Parses one serialized tf.train.Example into a dict of tensors.

    tf.train.Example stores integers as int64 only, while TPUs work on int32:
    int64 features come back as int32. Float features are left as they are.

    Args:
      record: scalar string tensor.
      name_to_features: name -> tf.io.FixedLenFeature.

    Returns:
      dict name -> tensor of the feature's shape.
    """
    example = tf.io.parse_single_example(record, name_to_features)
    return {name: tf.cast(t, tf.int32) if t.dtype == tf.int64 else t
            for name, t in example.items()}


# ---------------------------------------------------------------------------
# The input_fn of a TFRecord file.

# The read buffer of the scripts' TFRecord readers, in bytes: TensorFlow
# 2.15's default, given explicitly because TensorFlow 2.16+ logs a line on
# every run whose reader leaves it unset.
TFRECORD_BUFFER_BYTES = 256 * 1024

# Dynamic padding sorts training inputs by length within pools of this many
# batches: enough for batches of like lengths, few enough that the order
# stays random.
LENGTH_POOL_BATCHES = 32

# The features that run along the sequence (their last axis is trimmed).
SEQUENCE_FEATURES = ("input_ids", "input_mask", "segment_ids")


# input_fn params that `ResumableTrainer.train` adds: how many records of the
# training stream (all workers' together) the checkpoint has trained on, and
# the run's input seed (None: unseeded).
START_RECORD = "start_record"
INPUT_SEED = "input_seed"


def tfrecord_input_fn(input_file, name_to_features, is_training, drop_remainder,
                      shuffle_buffer=100, length_buckets=None,
                      sequence_features=SEQUENCE_FEATURES):
    """The runner's input_fn(params) for a TFRecord file of tf.train.Examples
    (decoded by `decode_record`), in batches of params["batch_size"].

    Args:
      input_file: the file.
      name_to_features: name -> tf.io.FixedLenFeature.
      is_training: read the file over and over, shuffled `shuffle_buffer`
        records at a time; otherwise once, in order. A training run resumed
        from a checkpoint (params[START_RECORD] records in, see
        `training.ResumableTrainer`) goes on with the next batch of the same stream
        when params[INPUT_SEED] seeds the shuffle, and with the records
        after those already trained on when it is unseeded.
      drop_remainder: drop a last, smaller batch (TPU).
      length_buckets: dynamic padding (TrainingOptions.length_buckets):
        each batch's `sequence_features` are cut, on their last axis, to
        the first bucket that holds its longest input (by input_mask), and
        training batches are made of inputs of like length: the shuffled
        stream is read in pools of LENGTH_POOL_BATCHES batches, each pool
        sorted by length, cut into batches, and the batches shuffled. A pool
        holds the same inputs as the same batches without it, so each input
        is read as often. Evaluation and prediction keep the input order.
        None: every batch keeps the file's length.
      sequence_features: the features of one value per position.
    """
    def input_fn(params):
        batch_size = params["batch_size"]
        pooled = bool(length_buckets) and is_training
        start_record = params.get(START_RECORD, 0) if is_training else 0
        seed = params.get(INPUT_SEED) if is_training else None
        # Records skipped before decoding (cheap), and whole batches after.
        skip_records, skip_batches = start_record, 0
        if seed is not None and pooled:
            pool_records = batch_size * LENGTH_POOL_BATCHES
            skip_records = start_record // pool_records * pool_records
            skip_batches = (start_record - skip_records) // batch_size
        if start_record:
            tf.logging.info(
                "Resuming the training input after the %d examples that the checkpoint has "
                "trained on (%s)", start_record, "unseeded: the records after them, in a new "
                "order" if seed is None else "the same order, from the input seed")
        d = tf.data.TFRecordDataset(input_file, buffer_size=TFRECORD_BUFFER_BYTES)
        if is_training:
            d = d.repeat()
            if seed is None:
                d = d.skip(start_record).shuffle(buffer_size=shuffle_buffer)
            else:
                d = d.shuffle(buffer_size=shuffle_buffer, seed=seed).skip(skip_records)
        d = d.map(lambda record: decode_record(record, name_to_features),
                  num_parallel_calls=tf.data.AUTOTUNE)
        if pooled:
            # The batches' order within a pool: from the input seed, else the
            # run's graph seed, else random.
            pool_seed = seed if seed is not None else tf.get_seed(None)[1]
            pool_seed = random.randrange(2 ** 31) if pool_seed is None else pool_seed
            first_pool = skip_records // (batch_size * LENGTH_POOL_BATCHES)
            d = d.batch(batch_size * LENGTH_POOL_BATCHES, drop_remainder=True)
            d = tf.data.Dataset.zip((tf.data.Dataset.range(first_pool, 2 ** 62), d))
            d = d.flat_map(lambda index, pool: tf.data.Dataset.from_tensor_slices(
                _batches_by_length(pool, batch_size, [pool_seed, index])))
            d = d.skip(skip_batches)
        else:
            d = d.batch(batch_size, drop_remainder=drop_remainder)
        if length_buckets:
            d = d.map(lambda batch: _trim_to_bucket(batch, length_buckets,
                                                    sequence_features))
        return d.prefetch(tf.data.AUTOTUNE)

    return input_fn


def _input_lengths(features):
    """[n] lengths (real positions) of a batch of inputs; inputs of several
    sequences (multiple choice) count their longest."""
    lengths = tf.reduce_sum(tf.cast(features["input_mask"], tf.int32), axis=-1)
    while lengths.shape.ndims > 1:
        lengths = tf.reduce_max(lengths, axis=-1)
    return lengths


def _batches_by_length(pool, batch_size, seed):
    """A pool of inputs ([pool_batches * batch_size, ...] each) sorted by
    length, cut into batches and the batches shuffled (by the stateless
    `seed`, two integers): [pool_batches, batch_size, ...] each."""
    order = tf.argsort(_input_lengths(pool), stable=True)
    num_batches = tf.shape(order)[0] // batch_size
    shuffle = tf.argsort(tf.random.stateless_uniform(
        [num_batches], seed=tf.cast(tf.stack(seed), tf.int64)))
    order = tf.gather(tf.reshape(order, [num_batches, batch_size]), shuffle)
    return {name: tf.gather(values, order) for name, values in pool.items()}


def _trim_to_bucket(batch, length_buckets, sequence_features):
    """The batch with its sequence features cut to the first of
    `length_buckets` that holds its longest input."""
    buckets = tf.constant(length_buckets, dtype=tf.int32)
    longest = tf.reduce_max(_input_lengths(batch))
    length = tf.gather(buckets, tf.minimum(
        tf.searchsorted(buckets, tf.reshape(longest, [1]), side="left")[0],
        len(length_buckets) - 1))
    return {name: (values[..., :length] if name in sequence_features else values)
            for name, values in batch.items()}


# ---------------------------------------------------------------------------
# Length buckets (--dynamic_padding, --length_buckets).

def default_length_buckets(max_seq_length):
    """--length_buckets' default: 8 even steps up to max_seq_length, each
    rounded up to a multiple of 8 (which suits the matrix units of GPUs and
    CPUs alike)."""
    return tuple(sorted({min(max_seq_length, -(-max_seq_length * i // 64) * 8)
                         for i in range(1, 9)}))


def padding_count(num_records, batch_size):
    """How many padding records make `num_records` whole batches of
    `batch_size` (a TPU runs full batches only; the padding records'
    outputs count nowhere)."""
    return -num_records % batch_size


def length_buckets_of(settings):
    """TrainingOptions.length_buckets of --dynamic_padding and
    --length_buckets in `settings` (a script's settings; None for scripts
    without these flags).

    Raises:
      InputError: --length_buckets not increasing positive integers, or
        past --max_seq_length.
    """
    if not hasattr(settings, "dynamic_padding"):
        return None
    max_seq_length = settings.max_seq_length
    if not settings.dynamic_padding:
        if settings.length_buckets:
            raise InputError("--length_buckets is for --dynamic_padding, which is off")
        return None
    if settings.use_tpu:
        tf.logging.warning("--dynamic_padding is off on TPUs (they need fixed shapes): "
                           "batches are padded to --max_seq_length=%d", max_seq_length)
        return None
    if not settings.length_buckets:
        return default_length_buckets(max_seq_length)
    try:
        buckets = [int(value) for value in settings.length_buckets]
    except ValueError:
        raise InputError("--length_buckets=%s: expected comma-separated whole numbers"
                         % ",".join(settings.length_buckets))
    if any(b < 1 for b in buckets) or buckets != sorted(set(buckets)) or \
            buckets[-1] > max_seq_length:
        raise InputError("--length_buckets=%s: expected increasing lengths from 1 to "
                         "--max_seq_length=%d" % (",".join(settings.length_buckets),
                                                  max_seq_length))
    if buckets[-1] != max_seq_length:
        buckets.append(max_seq_length)
    return tuple(buckets)


# ---------------------------------------------------------------------------
# Log lines of the input.

def log_example(fields, debug=False, ids=()):
    """Logs one converted example (the scripts do so for their first few),
    for a reader to check the input: a "*** Example ***" line, then
    "name: value" per (name, value) of `fields` (the tokens, their number,
    the label), lists written space-separated; at DEBUG level with `debug`
    (for the examples after the first, which would fill a short run's log).
    The id lists `ids` ((name, list) pairs, max_seq_length long) come at
    DEBUG level only: --verbosity=1 shows them."""
    log = tf.logging.debug if debug else tf.logging.info
    log("*** Example ***")
    for name, value in fields:
        if isinstance(value, (list, tuple)):
            value = " ".join(str(v) for v in value)
        log("%s: %s", name, value)
    for name, value in ids:
        tf.logging.debug("%s: %s", name, " ".join(str(v) for v in value))


def log_features(features):
    """Logs the name and shape of every input feature (each model_fn
    starts with it)."""
    tf.logging.info("*** Features ***")
    for name in sorted(features):
        tf.logging.info("  name = %s, shape = %s", name, features[name].shape)
