"""Learns a WordPiece vocabulary (vocab.txt) from a plain-text corpus.

The corpus is split into words exactly as tokenization.BasicTokenizer splits
text (cleaning, CJK characters, punctuation, and with --do_lower_case lower
casing and accent stripping), the words are counted, and WordPiece pieces are
learned from the counts with the learner of TensorFlow Text (the one behind
its `bert_vocab_from_dataset`): a top-down algorithm that keeps every
substring occurring at least a threshold number of times (as a word start, or
as a `##` continuation), re-counting with the greedy longest-match
segmentation of tokenization.WordpieceTokenizer for a few iterations, and
binary-searches the threshold for the requested size.

The output, one token per line, is:

    [PAD] [UNK] [CLS] [SEP] [MASK]      (ids 0-4)
    [unused0] ... [unused<N-1>]         (--num_unused_tokens, default 0)
    the alphabet: each character c, then each ##c
    the other pieces, most frequent first

so every character of the corpus (the --max_unique_chars most frequent)
tokenizes to something other than [UNK] at any position of a word, and the
file has at most --vocab_size lines. Same corpus and flags: the same file.
"""

import collections
import dataclasses
import importlib.util
import os
from typing import Optional

from absl import flags, logging

from scriptkit import errors
from scriptkit import file_io
from scriptkit import script_runner
from scriptkit import settings as settings_lib
from scriptkit import shared_flags
import tokenization


@dataclasses.dataclass(frozen=True)
class Settings(settings_lib.Common):
    """This script's flags, with its defaults (read in main by
    `settings_lib.from_flags`)."""

    input_file: Optional[str] = None
    output_file: Optional[str] = None
    do_lower_case: bool = True
    vocab_size: int = 30522
    num_unused_tokens: int = 0
    min_piece_count: int = 5
    max_unique_chars: int = 1000
    max_word_length: int = 50
    num_iterations: int = 4
    slack_ratio: float = 0.05


shared_flags.define_settings_flags(Settings)

flags.DEFINE_integer("vocab_size", 30522,
                     "Maximum number of tokens in the vocabulary (special and "
                     "unused tokens included).")

flags.DEFINE_integer("num_unused_tokens", 0,
                     "Number of [unused<i>] placeholder tokens after the special "
                     "tokens, which a later task can turn into its own tokens.")

flags.DEFINE_integer("min_piece_count", 5,
                     "Lower bound of the search for the count threshold above "
                     "which pieces are kept (TF Text's lower_thresh); the search "
                     "may still go below it when the vocabulary stays smaller "
                     "than --vocab_size.")

flags.DEFINE_integer("max_unique_chars", 1000,
                     "Size of the alphabet: the most frequent characters kept. "
                     "Words with rarer characters become [UNK].")

flags.DEFINE_integer("max_word_length", 50,
                     "Longest piece (in characters) to learn; longer words are "
                     "still split into shorter pieces.")

flags.DEFINE_integer("num_iterations", 4,
                     "Re-counting iterations of the learner.")

flags.DEFINE_float("slack_ratio", 0.05,
                   "Accept a vocabulary this fraction smaller than --vocab_size "
                   "instead of searching further.")

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _load_learner():
    """The module `tensorflow_text.tools.wordpiece_vocab.
    wordpiece_tokenizer_learner_lib` (pure Python).

    It is loaded from its file rather than imported through the package, whose
    __init__ loads TF Text's compiled ops and tensorflow_hub, neither of which
    the learner uses.
    """
    spec = importlib.util.find_spec("tensorflow_text")
    if spec is None or not spec.submodule_search_locations:
        raise errors.InputError(
            "create_vocab.py needs TensorFlow Text's vocabulary learner: "
            "pip install 'tensorflow-text==2.15.*'")
    path = os.path.join(spec.submodule_search_locations[0], "tools", "wordpiece_vocab",
                        "wordpiece_tokenizer_learner_lib.py")
    module_spec = importlib.util.spec_from_file_location("_tf_text_wordpiece_learner", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def count_words(input_files, do_lower_case):
    """Counts the BasicTokenizer words of the files.

    Args:
      input_files: list of paths (one sentence per line; blank lines ignored).
      do_lower_case: as for tokenization.BasicTokenizer.

    Returns:
      collections.Counter: word -> count.

    Raises:
      InputError: a file is not UTF-8 (names the file and line).
    """
    from scriptkit import quiet_tf  # noqa: F401
    import tensorflow.compat.v1 as tf

    basic = tokenization.BasicTokenizer(do_lower_case=do_lower_case)
    counts = collections.Counter()
    for path in input_files:
        with tf.io.gfile.GFile(path, "rb") as reader:
            for line_number, line in enumerate(reader, 1):
                try:
                    text = line.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise errors.InputError(
                        "--input_file: %s line %d is not UTF-8 (%s)" % (path, line_number, e))
                counts.update(basic.tokenize(text))
    return counts


def alphabet(word_counts, max_unique_chars):
    """The `max_unique_chars` most frequent characters (ties: by character),
    as a sorted list."""
    char_counts = collections.Counter()
    for word, count in word_counts.items():
        for char in word:
            char_counts[char] += count
    ranked = sorted(char_counts.items(), key=lambda item: (-item[1], item[0]))
    return sorted(char for char, _ in ranked[:max_unique_chars])


def learn_vocab(word_counts, vocab_size, num_unused_tokens=0, min_piece_count=5,
                max_unique_chars=1000, max_word_length=50, num_iterations=4,
                slack_ratio=0.05):
    """Learns a WordPiece vocabulary.

    Args:
      word_counts: dict word -> count (words as BasicTokenizer produces them).
      vocab_size: maximum number of tokens returned.
      num_unused_tokens, min_piece_count, max_unique_chars, max_word_length,
        num_iterations, slack_ratio: see the flags.

    Returns:
      List of tokens: special, unused, alphabet (c then ##c), other pieces by
      decreasing frequency.

    Raises:
      InputError: vocab_size cannot hold the special tokens and the alphabet.
    """
    if not word_counts:
        raise errors.InputError("--input_file: the corpus has no words")
    reserved = SPECIAL_TOKENS + ["[unused%d]" % i for i in range(num_unused_tokens)]
    chars = alphabet(word_counts, max_unique_chars)
    head = reserved + chars + ["##" + c for c in chars]
    if len(head) > vocab_size:
        raise errors.InputError(
            "--vocab_size=%d is too small: the %d special/unused tokens and the "
            "alphabet of %d characters (each alone and as ##) need %d; raise "
            "--vocab_size or lower --max_unique_chars" % (
                vocab_size, len(reserved), len(chars), len(head)))

    learner = _load_learner()
    # Sorted input makes the result independent of the files' order of words.
    sorted_counts = sorted(word_counts.items(), key=lambda item: (-item[1], item[0]))
    learned = learner.learn(
        sorted_counts,
        vocab_size=vocab_size,
        reserved_tokens=reserved,
        lower_thresh=min_piece_count,
        num_iterations=num_iterations,
        max_input_tokens=-1,
        max_token_length=max_word_length,
        max_unique_chars=max_unique_chars,
        slack_ratio=slack_ratio,
        include_joiner_token=True,
        joiner="##")

    # The learner lists reserved tokens and bare characters first, then the
    # pieces by decreasing count; its ##characters may come last and its size
    # may exceed the target when the threshold search runs out. Put the whole
    # alphabet first and cut the rarest pieces.
    seen = set(head)
    vocab = list(head)
    for token in learned:
        if token not in seen and len(vocab) < vocab_size:
            seen.add(token)
            vocab.append(token)
    return vocab


def main(_):
    logging.set_verbosity(logging.INFO)
    s = settings_lib.from_flags(Settings)
    settings_lib.require(s, "input_file", "output_file")
    if s.vocab_size <= len(SPECIAL_TOKENS):
        raise errors.InputError("--vocab_size=%d is too small" % s.vocab_size)
    input_files = file_io.expand_file_patterns("input_file", s.input_file)
    logging.info("*** Reading from input files ***")
    for path in input_files:
        logging.info("  %s", path)

    word_counts = count_words(input_files, s.do_lower_case)
    logging.info("%d words, %d distinct", sum(word_counts.values()), len(word_counts))

    vocab = learn_vocab(
        word_counts, s.vocab_size, num_unused_tokens=s.num_unused_tokens,
        min_piece_count=s.min_piece_count, max_unique_chars=s.max_unique_chars,
        max_word_length=s.max_word_length, num_iterations=s.num_iterations,
        slack_ratio=s.slack_ratio)

    with file_io.atomic_output(s.output_file) as writer:
        for token in vocab:
            writer.write(token + "\n")
    file_io.report_output(s.output_file, "%d tokens" % len(vocab))


if __name__ == "__main__":
    script_runner.run_script(main)
