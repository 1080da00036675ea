"""A tiny pre-trained BERT for the fill-mask tests, rebuilt the same from a
NumPy seed on every run (no stored checkpoint): a small uncased vocabulary
with "##" pieces, 2 layers of hidden size 32, and weights drawn wider than
BERT's initialisation so that the masked-LM head's probabilities are far
from uniform (ranks stable under float rounding).

tests/fixtures/make_fill_mask_fixture.py converts the same model to Hugging
Face (convert_checkpoint.py --to_hf) and stores what transformers'
fill-mask pipeline answers; tests/test_fill_mask_export.py compares the
export with it. `digest` identifies the weights, so that a change here is
caught as a stale fixture rather than as a wrong result.
"""

import hashlib
import os

import numpy as np

import convert_checkpoint
import tiny

WORDS = ["the", "a", "dog", "cat", "is", "was", "hairy", "happy", "walk", "run", "##ing",
         "##s", "##ed", "##ly", "home", "park", "to", "in", ".", ",", "!", "?", "i", "my",
         "went", "he", "she", "it", "and", "big", "small", "red", "blue", "house", "car",
         "paris", "france", "capital", "of", "city", "quick", "brown", "fox", "jump",
         "over", "lazy", "man", "woman", "[", "]"]
MAX_POSITIONS = 64
SEED = 46


def write_model(directory):
    """Writes vocab.txt, bert_config.json and the checkpoint model.ckpt
    (encoder, pooler and both pre-training heads) into `directory`.

    Returns:
      dict: vocab_file, bert_config_file, init_checkpoint (paths) and
      digest (a SHA-256 of the weights, in name order).
    """
    vocab_file = tiny.write_vocab(directory, WORDS)
    with open(vocab_file, encoding="utf-8") as f:
        vocab_size = len(f.read().splitlines())
    config = tiny.tiny_config_dict(vocab_size, max_position_embeddings=MAX_POSITIONS,
                                   hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    bert_config_file = tiny.write_config(directory, vocab_size,
                                         max_position_embeddings=MAX_POSITIONS,
                                         hidden_dropout_prob=0.0,
                                         attention_probs_dropout_prob=0.0)
    rng = np.random.RandomState(SEED)
    weights, digest = {}, hashlib.sha256()
    for name, shape in convert_checkpoint.expected_variables(config).items():
        if name.endswith("LayerNorm/gamma"):
            value = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name.endswith("LayerNorm/beta") or name.endswith("bias"):
            value = 0.1 * rng.standard_normal(shape)
        else:
            value = 0.3 * rng.standard_normal(shape)
        weights[name] = value.astype(np.float32)
    for name in sorted(weights):
        digest.update(name.encode() + weights[name].tobytes())
    init_checkpoint = os.path.join(directory, "model.ckpt")
    convert_checkpoint.write_tf_checkpoint(weights, init_checkpoint)
    return {"vocab_file": vocab_file, "bert_config_file": bert_config_file,
            "init_checkpoint": init_checkpoint, "digest": digest.hexdigest()}
