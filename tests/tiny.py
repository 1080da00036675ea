"""Small shared builders for tests: a tiny vocabulary and BERT config."""

import json
import os

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def write_vocab(directory, tokens, name="vocab.txt"):
    """Writes SPECIAL_TOKENS + tokens (one per line) and returns the path."""
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8") as f:
        for token in SPECIAL_TOKENS + [t for t in tokens if t not in SPECIAL_TOKENS]:
            f.write(token + "\n")
    return path


def tiny_config_dict(vocab_size, **overrides):
    """A small, fast BERT config as a dict (2 layers, hidden 32, 4 heads)."""
    config = {
        "vocab_size": vocab_size,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 64,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1,
        "max_position_embeddings": 64,
        "type_vocab_size": 2,
        "initializer_range": 0.02,
    }
    config.update(overrides)
    return config


def write_config(directory, vocab_size, name="bert_config.json", **overrides):
    """Writes a tiny bert_config.json and returns its path."""
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        json.dump(tiny_config_dict(vocab_size, **overrides), f, indent=2)
    return path


def run_main_seeded(main, flag_values, seed=1234):
    """Runs a script's `main([])` in this process with exactly `flag_values`
    (a dict of every flag it reads), and the runner's graph-level random
    seed fixed (initialisation, dropout, shuffling): the tiny models
    sometimes sit on their initial loss plateau for longer than the tests'
    short runs, so unseeded runs would be flaky."""
    import pytest
    from absl import flags
    from absl.testing import flagsaver

    import run_common
    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
    make_run_config = run_common.make_run_config

    def seeded_run_config(*args, **kwargs):
        return make_run_config(*args, **kwargs).replace(tf_random_seed=seed)

    with flagsaver.flagsaver(**flag_values):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(run_common, "make_run_config", seeded_run_config)
            main([])
