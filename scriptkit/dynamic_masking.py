"""Masked-LM masks drawn in the input pipeline (dynamic masking).

create_pretraining_data.py --dynamic_masking writes sentence pairs without
masks; run_pretraining.py draws the masks each time it reads an example,
with the rules of create_pretraining_data.py's own masking:

* the candidates are the real positions (input_mask 1) that hold neither
  [CLS] nor [SEP]; with whole-word masking, a "##" piece belongs to the
  candidate word before it (across a [SEP] too, as the static masking does);
* the number to predict is min(max_predictions_per_seq,
  max(1, round(length * masked_lm_prob))), length counting [CLS] and the
  [SEP]s, rounded half to even as Python's round();
* the words are taken in a uniformly random order, each one whole if it
  still fits that number and skipped otherwise;
* each chosen position becomes [MASK] with probability 0.8, stays as it is
  with 0.1 and becomes a uniformly random entry of the vocabulary with 0.1.

The random numbers of an example are a function of (random seed, epoch,
file index, record index) only (`example_seed`), drawn by stateless ops:
any read order, worker split or resume draws the same masks for an example
in a given epoch. The random numbers are drawn per example (`draw`) and the
masks made per batch (`mask_batch`), where the work is vectorized.
"""

from scriptkit import quiet_tf  # noqa: F401  (TensorFlow without its start-up noise)
import tensorflow.compat.v1 as tf

from scriptkit import file_io
from scriptkit import pretraining_records
import tokenization

# Rows of the per-example random numbers (`draw`): the words' order, the
# [MASK]-or-not draw, the keep-or-random draw, the random word.
# tf.where with broadcasting (TensorFlow 2's).
where = tf.where_v2

_ORDER, _MASK_DRAW, _KEEP_DRAW, _WORD_DRAW = range(4)
NUM_DRAWS = 4


class MaskingVocab(pretraining_records.VocabTables):
    """What masking needs of the vocabulary (`pretraining_records.VocabTables`),
    read from a file.

    Args:
      vocab_file: the WordPiece vocabulary (one token a line), the one the
        data was made with.
      flag_name: the flag that named it, for errors.

    Raises:
      errors.InputError: the file cannot be read or lacks a special token.
    """

    def __init__(self, vocab_file, flag_name="vocab_file"):
        file_io.require_file(flag_name, vocab_file)
        try:
            vocab = tokenization.load_vocab(vocab_file)
        except UnicodeDecodeError:
            raise file_io.non_utf8_error(flag_name, vocab_file)
        super().__init__(vocab, vocab_file, flag_name=flag_name)


class Masking:
    """The settings of dynamic masking.

    Args:
      vocab: a `MaskingVocab`.
      masked_lm_prob: share of each sequence's tokens to predict.
      max_predictions_per_seq: the cap on predictions, and the length of
        the masked_lm_* features.
      whole_word: mask whole words (all pieces of a chosen word).
      random_seed: the seed of the masks.
    """

    def __init__(self, vocab, masked_lm_prob, max_predictions_per_seq, whole_word,
                 random_seed):
        self.vocab = vocab
        self.masked_lm_prob = float(masked_lm_prob)
        self.max_predictions_per_seq = int(max_predictions_per_seq)
        self.whole_word = bool(whole_word)
        self.random_seed = int(random_seed)


def example_seed(random_seed, epoch, file_index, record_index):
    """The stateless seed of one example's masks.

    Args:
      random_seed: int.
      epoch, file_index, record_index: int64 scalars (tensors or ints):
        the pass over the data, the file's index in the run's list of input
        files and the record's index in its file.

    Returns:
      int64 [2]: (random_seed * 2**32 + epoch, file_index * 2**40 +
      record_index), distinct for distinct examples below 2**32 epochs,
      2**23 files and 2**40 records a file (int64 arithmetic wraps for
      seeds beyond 2**31, which stays deterministic).
    """
    def as_int64(value):
        return tf.cast(value, tf.int64)
    # The seed is reduced to a signed 64-bit value first, so any Python int
    # becomes a constant.
    seed = (int(random_seed) + 2 ** 63) % 2 ** 64 - 2 ** 63
    first = tf.constant(seed, tf.int64) * (2 ** 32) + as_int64(epoch)
    second = as_int64(file_index) * (2 ** 40) + as_int64(record_index)
    return tf.stack([first, second])


def draw(seed, max_seq_length):
    """An example's random numbers: float64 [NUM_DRAWS, max_seq_length],
    uniform in [0, 1), from the stateless `seed` (int64 [2])."""
    return tf.random.stateless_uniform([NUM_DRAWS, max_seq_length], seed=seed,
                                       dtype=tf.float64)


def mask_batch(features, draws, masking):
    """Masks a batch of unmasked examples.

    Args:
      features: dict with "input_ids", "input_mask" (int32 [batch, seq]) and
        any others (passed through unchanged).
      draws: float64 [batch, NUM_DRAWS, seq], each example's `draw`.
      masking: a `Masking`.

    Returns:
      `features` with input_ids masked and the targets added, as a
      statically masked record gives them: masked_lm_positions (ascending,
      then zeros), masked_lm_ids (the original ids there, then zeros),
      int32 [batch, max_predictions_per_seq]; masked_lm_weights (1.0 per
      target, then 0.0), float32 [batch, max_predictions_per_seq].
    """
    vocab = masking.vocab
    ids = features["input_ids"]
    real = tf.cast(features["input_mask"], tf.bool)
    batch = tf.shape(ids)[0]
    seq = ids.shape.as_list()[1] or tf.shape(ids)[1]
    positions = tf.range(seq)
    candidate = real & tf.not_equal(ids, vocab.cls_id) & tf.not_equal(ids, vocab.sep_id)

    # How many to predict (float64 and half-to-even, as Python computes
    # max(1, round(len(tokens) * prob))), capped.
    length = tf.reduce_sum(tf.cast(real, tf.float64), axis=1)
    wanted = tf.maximum(tf.constant(1.0, tf.float64),
                        tf.round(length * tf.constant(masking.masked_lm_prob, tf.float64)))
    budget = tf.minimum(tf.cast(wanted, tf.int32), masking.max_predictions_per_seq)

    # Words: a candidate starts one unless it is a "##" piece with a
    # candidate before it. word[b, i] numbers the words of a row from 0
    # (non-candidates say 0 too: they add nothing to word 0's length or key,
    # and are never chosen).
    if masking.whole_word:
        continuation = tf.gather(tf.constant(vocab.is_continuation), ids)
        earlier = tf.cumsum(tf.cast(candidate, tf.int32), axis=1, exclusive=True) > 0
        starts = candidate & ~(continuation & earlier)
    else:
        starts = candidate
    word = where(candidate, tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1, 0)
    # Per word slot of a row: its length, and its random key (the draw at
    # its first piece).
    segments = tf.reshape(word + tf.range(batch)[:, None] * seq, [-1])

    def per_word(values):
        return tf.reshape(tf.math.unsorted_segment_sum(
            tf.reshape(values, [-1]), segments, batch * seq), [batch, seq])
    word_length = per_word(tf.cast(candidate, tf.int32))
    word_key = per_word(draws[:, _ORDER, :] * tf.cast(starts, tf.float64))
    # Empty slots sort after every word (keys are below 1).
    word_key = where(word_length > 0, word_key, tf.constant(2.0, tf.float64))
    # The words in random order (empty slots last) and their lengths.
    order = tf.argsort(word_key, axis=1, stable=True)
    ordered_length = tf.gather(word_length, order, batch_dims=1)

    if masking.whole_word:
        # Greedy, in order: a word is taken if it still fits the budget.
        def take_next(count, lengths):
            take = (lengths > 0) & (count + lengths <= budget)
            return count + where(take, lengths, 0)
        counts = tf.scan(take_next, tf.transpose(ordered_length),
                         initializer=tf.zeros([batch], tf.int32))
        before = tf.concat([tf.zeros([1, batch], tf.int32), counts[:-1]], axis=0)
        taken_in_order = tf.transpose(counts > before)
    else:
        # Words of one piece: the first `budget` of the order.
        taken_in_order = (ordered_length > 0) & (positions[None, :] < budget[:, None])
    # Back from the order to words, then to positions.
    rank = tf.argsort(order, axis=1, stable=True)
    word_taken = tf.gather(taken_in_order, rank, batch_dims=1)
    chosen = tf.gather(word_taken, word, batch_dims=1) & candidate

    # 80% [MASK], 10% unchanged, 10% a random vocabulary entry.
    word_ids = tf.constant(vocab.word_ids, tf.int32)
    random_word = tf.gather(word_ids, tf.minimum(
        tf.cast(draws[:, _WORD_DRAW, :] * len(vocab.word_ids), tf.int32),
        len(vocab.word_ids) - 1))
    replacement = where(draws[:, _MASK_DRAW, :] < 0.8,
                        vocab.mask_id,
                        where(draws[:, _KEEP_DRAW, :] < 0.5, ids, random_word))
    masked_ids = where(chosen, replacement, ids)

    # The targets, by ascending position, padded with zeros.
    max_predictions = masking.max_predictions_per_seq
    sort_key = where(chosen, positions[None, :], seq + positions[None, :])
    target_positions = tf.sort(sort_key, axis=1)[:, :max_predictions]
    num_chosen = tf.reduce_sum(tf.cast(chosen, tf.int32), axis=1, keepdims=True)
    valid = tf.range(max_predictions)[None, :] < num_chosen
    target_positions = where(valid, target_positions, 0)
    target_ids = where(valid, tf.gather(ids, target_positions, batch_dims=1), 0)
    out = dict(features)
    out["input_ids"] = masked_ids
    out["masked_lm_positions"] = target_positions
    out["masked_lm_ids"] = target_ids
    out["masked_lm_weights"] = tf.cast(valid, tf.float32)
    return out
