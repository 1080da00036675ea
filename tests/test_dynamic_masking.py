"""Tests of dynamic_masking.py: the masks drawn in the input pipeline have
the statistics of create_pretraining_data.py's own masking (its
`InstanceMaker._mask`, run many times with Python's random numbers, is the
reference), and the exact properties every draw must have."""

import random

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import create_pretraining_data
from scriptkit import dynamic_masking
import tiny

# A vocabulary with word-continuing "##" pieces.
WORDS = ["the", "cat", "sat", "on", "mat", "un", "##able", "##ness", "re", "##do", "big"]
VOCAB = tiny.SPECIAL_TOKENS + WORDS
IDS = {token: i for i, token in enumerate(VOCAB)}
SEQ = 24

# Sequences of [CLS] A [SEP] B [SEP]; the second has B start with a "##"
# piece, which joins the word before the [SEP] (as the static masking does).
SEQUENCES = [
    "[CLS] the cat un ##able ##ness sat on the mat [SEP] re ##do big the cat [SEP]",
    "[CLS] un ##able the big re [SEP] ##do ##ness cat sat [SEP]",
]
NUM_DRAWS = 12000


class _Vocab:
    """The `MaskingVocab` attributes, without a file."""

    def __init__(self):
        self.cls_id, self.sep_id, self.mask_id = IDS["[CLS]"], IDS["[SEP]"], IDS["[MASK]"]
        self.word_ids = list(range(len(VOCAB)))
        self.size = len(VOCAB)
        self.is_continuation = [t.startswith("##") for t in VOCAB]


def _graph_masks(tokens, masking, num_draws, seed):
    """Masks `num_draws` copies of `tokens` (a list of strings) in one batch:
    (masked input_ids [n, SEQ], positions, ids, weights [n, max_pred])."""
    ids = [IDS[t] for t in tokens] + [0] * (SEQ - len(tokens))
    mask = [1] * len(tokens) + [0] * (SEQ - len(tokens))
    with tf.Graph().as_default(), tf.Session() as sess:
        features = {"input_ids": tf.constant([ids] * num_draws, tf.int32),
                    "input_mask": tf.constant([mask] * num_draws, tf.int32)}
        draws = tf.random.stateless_uniform([num_draws, dynamic_masking.NUM_DRAWS, SEQ],
                                            seed=[seed, 0], dtype=tf.float64)
        out = sess.run(dynamic_masking.mask_batch(features, draws, masking))
    return out["input_ids"], out["masked_lm_positions"], out["masked_lm_ids"], \
        out["masked_lm_weights"]


def _reference_masks(tokens, masked_lm_prob, max_predictions, whole_word, num_draws, seed):
    """create_pretraining_data.py's masking of `tokens`, `num_draws` times:
    list of (output tokens, masked positions)."""
    maker = create_pretraining_data.InstanceMaker(
        create_pretraining_data._TokenStrings(VOCAB), SEQ, 0.0, masked_lm_prob,
        max_predictions, whole_word)
    rng = random.Random(seed)
    return [maker._mask(list(tokens), rng)[:2] for _ in range(num_draws)]


def _words(tokens):
    """The candidate words as lists of positions, as the static masking
    groups them."""
    words = []
    for i, token in enumerate(tokens):
        if token in ("[CLS]", "[SEP]"):
            continue
        if words and token.startswith("##"):
            words[-1].append(i)
        else:
            words.append([i])
    return words


@pytest.mark.parametrize("whole_word, masked_lm_prob, max_predictions", [
    (False, 0.15, 5),
    (True, 0.15, 5),
    # The cap binds: round(16 * 0.5) = 8 wanted, 3 allowed.
    (True, 0.5, 3),
])
def test_masks_have_the_statistics_of_the_static_masking(whole_word, masked_lm_prob,
                                                         max_predictions):
    masking = dynamic_masking.Masking(_Vocab(), masked_lm_prob, max_predictions,
                                      whole_word, random_seed=1)
    for number, text in enumerate(SEQUENCES):
        tokens = text.split()
        n = len(tokens)
        ids = np.array([IDS[t] for t in tokens])
        masked, positions, target_ids, weights = _graph_masks(tokens, masking, NUM_DRAWS,
                                                              seed=number)
        reference = _reference_masks(tokens, masked_lm_prob, max_predictions, whole_word,
                                     NUM_DRAWS, seed=number)

        # Exact, in every draw: targets ascending then zero padding, their
        # ids the original ones, weights 1 per target; no [CLS], [SEP] or
        # padding chosen; outside the targets nothing changes; whole words.
        counts = weights.sum(axis=1).astype(int)
        assert counts.max() <= max_predictions
        chosen = np.zeros((NUM_DRAWS, SEQ), bool)
        for row in range(NUM_DRAWS):
            k = counts[row]
            p = positions[row, :k]
            assert np.all(np.diff(p) > 0) and np.all(positions[row, k:] == 0)
            assert np.all(target_ids[row, k:] == 0) and np.all(weights[row, :k] == 1.0)
            np.testing.assert_array_equal(target_ids[row, :k], ids[p])
            chosen[row, p] = True
        assert not chosen[:, n:].any()
        assert not chosen[:, [i for i, t in enumerate(tokens) if t in ("[CLS]", "[SEP]")]].any()
        np.testing.assert_array_equal(masked[:, :n][~chosen[:, :n]],
                                      np.broadcast_to(ids, (NUM_DRAWS, n))[~chosen[:, :n]])
        words = _words(tokens) if whole_word else [[i] for w in _words(tokens) for i in w]
        for word in words:
            assert np.all(chosen[:, word].all(axis=1) == chosen[:, word].any(axis=1))

        # Statistics against the reference's draws.
        ref_counts = np.array([len(p) for _, p in reference])
        ref_chosen = np.zeros((NUM_DRAWS, SEQ), bool)
        for row, (_, p) in enumerate(reference):
            ref_chosen[row, p] = True
        if not whole_word:
            # One count: min(cap, max(1, round(n * prob))).
            assert set(counts) == set(ref_counts) == {
                min(max_predictions, max(1, round(n * masked_lm_prob)))}
        else:
            # The distribution of the count (words that do not fit are skipped).
            for value in set(ref_counts) | set(counts):
                assert np.mean(counts == value) == pytest.approx(
                    np.mean(ref_counts == value), abs=0.025)
        # How often each position is chosen (uniform over candidates without
        # whole words; shaped by the word lengths with them).
        np.testing.assert_allclose(chosen.mean(axis=0), ref_chosen.mean(axis=0), atol=0.02)
        # 80% [MASK], 10% unchanged, 10% random (which may draw the same).
        outcome = {"mask": [], "same": []}
        ref_outcome = {"mask": [], "same": []}
        for row in range(NUM_DRAWS):
            p = positions[row, :counts[row]]
            outcome["mask"].extend(masked[row, p] == IDS["[MASK]"])
            outcome["same"].extend(masked[row, p] == ids[p])
            out, p = reference[row]
            ref_outcome["mask"].extend(out[i] == "[MASK]" for i in p)
            ref_outcome["same"].extend(out[i] == tokens[i] for i in p)
        for key in outcome:
            assert np.mean(outcome[key]) == pytest.approx(np.mean(ref_outcome[key]), abs=0.015)
        assert np.mean(outcome["mask"]) == pytest.approx(0.8, abs=0.015)
        assert np.mean(outcome["same"]) == pytest.approx(0.1 + 0.1 / len(VOCAB), abs=0.015)
        # Random replacements come from the whole vocabulary, specials
        # included: every id but [MASK] shows up as a changed token.
        padded = np.broadcast_to(np.pad(ids, (0, SEQ - n)), masked.shape)
        replaced = set(masked[chosen & (masked != IDS["[MASK]"]) & (masked != padded)].tolist())
        assert replaced == set(range(len(VOCAB))) - {IDS["[MASK]"]}


def test_example_seed_depends_on_each_part():
    with tf.Graph().as_default(), tf.Session() as sess:
        seeds = sess.run([dynamic_masking.example_seed(*parts) for parts in [
            (1, 0, 0, 0), (2, 0, 0, 0), (1, 1, 0, 0), (1, 0, 1, 0), (1, 0, 0, 1),
            (2 ** 70 + 1, 0, 0, 0)]])
    assert len({tuple(s) for s in seeds[:5]}) == 5
    # Seeds beyond int64 wrap rather than fail.
    assert seeds[5].dtype == np.int64
