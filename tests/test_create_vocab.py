"""Tests of create_vocab.py: the learned vocab.txt works with tokenization.py
(special tokens first, ## pieces, no [UNK] for seen characters), respects
--vocab_size and --do_lower_case, is deterministic, and bad input gives clear
errors without leaving an output file."""

import os
import random

import pytest
from absl import flags
from absl.testing import flagsaver

import create_vocab
from scriptkit import errors
import tokenization

FLAGS = flags.FLAGS
VOCAB_SIZE = 130

STEMS = ["run", "jump", "walk", "talk", "believ", "read", "play", "work", "zebra"]
SUFFIXES = ["", "s", "ed", "ing", "er", "ers", "able"]
# Stems and suffixes combine into more words than a small vocabulary holds,
# so pieces such as "##ing" must be learned; plus case, accents, CJK and
# punctuation for BasicTokenizer's splitting.
WORDS = [stem + suffix for stem in STEMS for suffix in SUFFIXES] + [
    "the", "quick", "THE", "Quick", "Über", "Café", "naïve", "résumé", "北京", "hello,",
    "world!", "don't", "xylophone"]


def write_corpus(path, num_lines=600, seed=0, words=WORDS):
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for i in range(num_lines):
            f.write(" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) + "\n")
            if i % 40 == 39:
                f.write("\n")  # Document boundary, as in pre-training corpora.
    return path


def run_main(**flag_values):
    argv = ["create_vocab"] + ["--%s=%s" % (k, v) for k, v in flag_values.items()]
    with flagsaver.flagsaver():
        FLAGS.unparse_flags()
        FLAGS(argv)
        create_vocab.main([])


def read_vocab(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def corpus_chars(path, do_lower_case):
    basic = tokenization.BasicTokenizer(do_lower_case=do_lower_case)
    with open(path, encoding="utf-8") as f:
        return {c for line in f for word in basic.tokenize(line) for c in word}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("vocab")
    return {"dir": d, "a": write_corpus(str(d / "a.txt"), seed=1),
            "b": write_corpus(str(d / "b.txt"), seed=2)}


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_vocab_tokenizes_the_corpus_without_unk(corpus, tmp_path, do_lower_case):
    output = str(tmp_path / "vocab.txt")
    # Comma-separated list with a glob, as for the other scripts.
    run_main(input_file="%s,%s" % (corpus["a"], os.path.join(corpus["dir"], "b*.txt")),
             output_file=output, vocab_size=VOCAB_SIZE, do_lower_case=do_lower_case,
             num_unused_tokens=3)
    vocab = read_vocab(output)
    assert vocab[:8] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
                         "[unused0]", "[unused1]", "[unused2]"]
    assert len(vocab) <= VOCAB_SIZE
    assert len(vocab) == len(set(vocab))

    # Every character is a piece both at the start of a word and as ##.
    chars = corpus_chars(corpus["a"], do_lower_case) | corpus_chars(corpus["b"], do_lower_case)
    for c in chars:
        assert c in vocab and "##" + c in vocab, c
    # Whole frequent words and multi-character continuations were learned.
    assert "the" in vocab and "##ing" in vocab and "##er" in vocab

    tokenizer = tokenization.FullTokenizer(output, do_lower_case=do_lower_case)
    with open(corpus["a"], encoding="utf-8") as f:
        text = f.read()
    tokens = tokenizer.tokenize(text)
    assert "[UNK]" not in tokens
    # Pieces are mostly longer than characters.
    assert len(tokens) < 0.5 * sum(len(w) for w in tokenizer.basic_tokenizer.tokenize(text))

    upper = {t for t in vocab if not t.startswith("[") and t != t.lower()}
    if do_lower_case:
        # Lower-cased and accents stripped, as BasicTokenizer does.
        assert not upper
        assert "cafe" in vocab and "café" not in vocab and "é" not in vocab
    else:
        assert "THE" in vocab and "Ü" in vocab and "##é" in vocab


def test_vocab_size_is_respected_and_output_deterministic(corpus, tmp_path):
    first, second = str(tmp_path / "v1.txt"), str(tmp_path / "v2.txt")
    run_main(input_file=corpus["a"], output_file=first, vocab_size=90)
    run_main(input_file=corpus["a"], output_file=second, vocab_size=90)
    with open(first, "rb") as f1, open(second, "rb") as f2:
        assert f1.read() == f2.read()
    vocab = read_vocab(first)
    assert 80 <= len(vocab) <= 90
    tokenizer = tokenization.FullTokenizer(first, do_lower_case=True)
    with open(corpus["a"], encoding="utf-8") as f:
        assert "[UNK]" not in tokenizer.tokenize(f.read())

    # The order of lines in the corpus does not matter, only the counts.
    with open(corpus["a"], encoding="utf-8") as f:
        lines = f.readlines()
    shuffled = str(tmp_path / "shuffled.txt")
    with open(shuffled, "w", encoding="utf-8") as f:
        f.writelines(reversed(lines))
    third = str(tmp_path / "v3.txt")
    run_main(input_file=shuffled, output_file=third, vocab_size=90)
    assert read_vocab(third) == vocab


def test_learn_vocab_learns_shared_pieces_when_words_do_not_fit():
    # 64 rare words (1 to 7 times each), all ending in "ing", and one
    # frequent word: 34 tokens cannot hold the rare words, while "##ing"
    # occurs 256 times.
    letters = "abcdefgh"
    pairs = [(a, b) for a in letters for b in letters]
    counts = {a + b + "ing": 1 + (i * 5) % 7 for i, (a, b) in enumerate(pairs)}
    counts["the"] = 500
    vocab = create_vocab.learn_vocab(counts, vocab_size=34, min_piece_count=2)
    alphabet = sorted(set(letters + "ingt"))
    head = create_vocab.SPECIAL_TOKENS + alphabet + ["##" + c for c in alphabet]
    assert vocab[:len(head)] == head
    assert len(vocab) <= 34
    assert vocab[len(head)] == "the"  # The most frequent piece first.
    assert "##ing" in vocab
    assert not any(word in vocab for word in counts if word != "the")
    wordpiece = tokenization.WordpieceTokenizer(
        {token: i for i, token in enumerate(vocab)})
    assert wordpiece.tokenize("ching") == ["c", "##h", "##ing"]


def test_bad_input_gives_clear_errors_and_no_output(corpus, tmp_path):
    output = str(tmp_path / "vocab.txt")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n  \n")
    bad_utf8 = tmp_path / "latin1.txt"
    bad_utf8.write_bytes(b"fine line\nna\xefve caf\xe9\n")
    cases = [
        ({"input_file": str(tmp_path / "missing*.txt")}, "--input_file: no file matches"),
        ({"input_file": str(empty)}, "no words"),
        ({"input_file": str(bad_utf8)}, "latin1.txt line 2 is not UTF-8"),
        ({"input_file": corpus["a"], "vocab_size": 40}, "--vocab_size=40 is too small"),
        ({"input_file": corpus["a"], "vocab_size": 3}, "--vocab_size=3 is too small"),
        ({"output_file": ""}, "--output_file"),
    ]
    for overrides, message in cases:
        values = {"input_file": corpus["a"], "output_file": output, "vocab_size": 100}
        values.update(overrides)
        with pytest.raises(errors.InputError, match=message):
            run_main(**values)
        assert not os.listdir(tmp_path) or not os.path.exists(output)
