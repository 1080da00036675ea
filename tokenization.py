"""Tokenization classes: BasicTokenizer, WordpieceTokenizer, FullTokenizer.

Same rules and outputs as Google's original BERT ``tokenization.py``, made fast:

* Text cleaning (control characters, NUL, U+FFFD), whitespace normalisation
  and CJK padding are one ``str.translate`` call through a lazily filled,
  per-character table, instead of a Python loop over characters.
* Each whitespace-separated chunk is lower-cased / accent-stripped /
  punctuation-split once and then cached; WordPiece results are cached per
  word. Prose repeats its words, so most chunks cost one dict lookup.
* WordPiece's greedy longest-match-first only tries substrings no longer than
  the longest vocabulary entry.

The caches are bounded (cleared when full), so memory does not grow with the
input.
"""

import collections
import os
import re
import unicodedata

# TensorFlow is imported only to read non-local (gs://...) vocabularies, so that
# tokenizing (e.g. create_pretraining_data.py) does not load it (~440 MB, ~3 s).

# Caches are cleared when they reach this many entries: enough for the working
# vocabulary of any corpus, small enough to bound memory.
_MAX_CACHE_ENTRIES = 200000


def validate_case_matches_checkpoint(do_lower_case, init_checkpoint):
    """Checks whether the casing config is consistent with the checkpoint name.

    Only paths of the form ``.../<model_dir>/bert_model.ckpt...`` are checked,
    where ``<model_dir>`` is the name of one of Google's releases: the
    original seven models, the whole-word-masking models (``wwm_...``) and the
    24 small models (``uncased_L-N_H-M_A-K``), recognised by pattern. Anything
    else passes silently.

    Raises:
      ValueError: `do_lower_case` contradicts the release's casing; the message
        names `--do_lower_case`.
    """
    # The casing has to be passed in by the user and there is no explicit
    # check as to whether it matches the checkpoint. The casing information
    # probably should have been stored in the bert_config.json file, but it's
    # not, so we have to heuristically detect it to validate.
    if not init_checkpoint:
        return

    m = re.match("^.*?([A-Za-z0-9_-]+)/bert_model.ckpt", init_checkpoint)
    if m is None:
        return

    model_name = m.group(1)
    dims = r"_L-\d+_H-\d+_A-\d+$"
    lower_patterns = [r"^(wwm_)?uncased" + dims, r"^multilingual" + dims, r"^chinese" + dims]
    cased_patterns = [r"^(wwm_)?cased" + dims, r"^multi_cased" + dims]

    is_bad_config = False
    if any(re.match(p, model_name) for p in lower_patterns) and not do_lower_case:
        is_bad_config = True
        actual_flag = "False"
        case_name = "lowercased"
        opposite_flag = "True"

    if any(re.match(p, model_name) for p in cased_patterns) and do_lower_case:
        is_bad_config = True
        actual_flag = "True"
        case_name = "cased"
        opposite_flag = "False"

    if is_bad_config:
        raise ValueError(
            "You passed in `--do_lower_case=%s` with `--init_checkpoint=%s`. "
            "However, `%s` seems to be a %s model, so you "
            "should pass in `--do_lower_case=%s` so that the fine-tuning matches "
            "how the model was pre-training. If this error is wrong, please "
            "just comment out this check." % (actual_flag, init_checkpoint,
                                              model_name, case_name, opposite_flag))


def convert_to_unicode(text):
    """Converts `text` to a `str`, decoding bytes as UTF-8 (errors ignored)."""
    if isinstance(text, str):
        return text
    elif isinstance(text, bytes):
        return text.decode("utf-8", "ignore")
    else:
        raise ValueError("Unsupported string type: %s" % (type(text)))


def printable_text(text):
    """Returns text encoded in a way suitable for print or `tf.logging`."""
    return convert_to_unicode(text)


def load_vocab(vocab_file):
    """Loads a vocabulary file into an ordered dictionary token -> id.

    One token per line; trailing whitespace is stripped, as in the original.

    Raises:
      ValueError: the file is missing or unreadable (the message names it).
    """
    vocab = collections.OrderedDict()
    if not vocab_file:
        raise ValueError("Vocabulary file not found: %r (pass --vocab_file)" % (vocab_file,))
    if "://" in vocab_file:
        import tensorflow.compat.v1 as tf
        exists, opener, errors = tf.io.gfile.exists, tf.io.gfile.GFile, (tf.errors.OpError,
                                                                          OSError)
    else:
        exists, opener, errors = os.path.exists, open, (OSError,)
    if not exists(vocab_file):
        raise ValueError("Vocabulary file not found: %r (pass --vocab_file)" % (vocab_file,))
    try:
        with opener(vocab_file, "rb") as reader:
            data = reader.read()
    except errors as e:
        raise ValueError("Cannot read vocabulary file %s: %s" % (vocab_file, e))
    # Same entries as the original's readline() loop: a final newline adds
    # no empty token, an empty line in the middle does.
    lines = data.decode("utf-8", "ignore").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for index, line in enumerate(lines):
        vocab[line.strip()] = index
    if not vocab:
        raise ValueError("Vocabulary file %s is empty" % vocab_file)
    return vocab


def convert_by_vocab(vocab, items):
    """Converts a sequence of [tokens|ids] using the vocab.

    Raises:
      KeyError: an item is not in the vocabulary; the message names it.
    """
    try:
        return [vocab[item] for item in items]
    except KeyError as e:
        raise KeyError("%r is not in the vocabulary" % (e.args[0],)) from None


def convert_tokens_to_ids(vocab, tokens):
    return convert_by_vocab(vocab, tokens)


def convert_ids_to_tokens(inv_vocab, ids):
    return convert_by_vocab(inv_vocab, ids)


def whitespace_tokenize(text):
    """Runs basic whitespace cleaning and splitting on a piece of text."""
    text = text.strip()
    if not text:
        return []
    tokens = text.split()
    return tokens


class FullTokenizer(object):
    """Runs end-to-end tokenization: BasicTokenizer, then WordPiece."""

    def __init__(self, vocab_file, do_lower_case=True):
        self.vocab = load_vocab(vocab_file)
        self.inv_vocab = {v: k for k, v in self.vocab.items()}
        self.basic_tokenizer = BasicTokenizer(do_lower_case=do_lower_case)
        self.wordpiece_tokenizer = WordpieceTokenizer(vocab=self.vocab)
        # Whitespace chunk -> its word pieces.
        self._chunk_cache = {}

    def tokenize(self, text):
        """Tokenizes `text` (str or UTF-8 bytes) into a list of word pieces."""
        cache = self._chunk_cache
        output = []
        for chunk in self.basic_tokenizer._clean_and_split(text):
            pieces = cache.get(chunk)
            if pieces is None:
                pieces = self._tokenize_chunk(chunk)
            output += pieces
        return output

    def _tokenize_chunk(self, chunk):
        """Word pieces of one whitespace-free chunk of cleaned text (cached)."""
        tokenize_word = self.wordpiece_tokenizer._tokenize_word
        tokens = self.basic_tokenizer._split_chunk(chunk)
        if len(tokens) == 1:
            pieces = tokenize_word(tokens[0])
        else:
            pieces = []
            for token in tokens:
                pieces += tokenize_word(token)
        cache = self._chunk_cache
        if len(cache) >= _MAX_CACHE_ENTRIES:
            cache.clear()
        cache[chunk] = pieces
        return pieces

    def convert_tokens_to_ids(self, tokens):
        return convert_by_vocab(self.vocab, tokens)

    def convert_ids_to_tokens(self, ids):
        return convert_by_vocab(self.inv_vocab, ids)


class _CleanTable(dict):
    """`str.translate` table doing `_clean_text` and CJK padding per character.

    Entries are computed on first use (``__missing__``) and kept, so each
    distinct character is classified once.
    """

    def __missing__(self, cp):
        char = chr(cp)
        if cp == 0 or cp == 0xFFFD or _is_control(char):
            value = None  # Deleted.
        elif _is_whitespace(char):
            value = " "
        elif _is_chinese_char(cp):
            value = " " + char + " "
        else:
            value = char
        self[cp] = value
        return value


_CLEAN_TABLE = _CleanTable()

# ASCII (a list indexed by code point): delete control characters, map
# \t \n \r to a space, keep the rest.
_ASCII_TABLE = [chr(cp) for cp in range(128)]
for _cp in list(range(0, 32)) + [127]:
    _ASCII_TABLE[_cp] = None
for _char in "\t\n\r":
    _ASCII_TABLE[ord(_char)] = " "
del _cp, _char

# ASCII punctuation per `_is_punctuation`: 33-47, 58-64, 91-96, 123-126.
_ASCII_PUNCT_RE = re.compile(r"[!-/:-@\[-`{-~]")
_ASCII_SPLIT_RE = re.compile(r"[!-/:-@\[-`{-~]|[^!-/:-@\[-`{-~]+")


class BasicTokenizer(object):
    """Runs basic tokenization (punctuation splitting, lower casing, etc.)."""

    def __init__(self, do_lower_case=True):
        """Constructs a BasicTokenizer.

        Args:
          do_lower_case: Whether to lower case the input (and strip accents).
        """
        self.do_lower_case = do_lower_case
        self._cache = {}

    def tokenize(self, text):
        """Tokenizes a piece of text into a list of basic tokens."""
        cache = self._cache
        output = []
        for chunk in self._clean_and_split(text):
            tokens = cache.get(chunk)
            if tokens is None:
                tokens = self._split_chunk(chunk)
                if len(cache) >= _MAX_CACHE_ENTRIES:
                    cache.clear()
                cache[chunk] = tokens
            output.extend(tokens)
        return output

    def _clean_and_split(self, text):
        """Cleans `text`, pads CJK characters and splits on whitespace.

        Equivalent to the original's `_clean_text`, `_tokenize_chinese_chars`
        and `whitespace_tokenize`.
        """
        if not isinstance(text, str):
            text = convert_to_unicode(text)
        if text.isascii():
            # Printable ASCII (0x20-0x7E) needs no cleaning: str.split() on
            # it splits on spaces only, as the original does.
            if text.isprintable():
                return text.split()
            return text.translate(_ASCII_TABLE).split()
        return text.translate(_CLEAN_TABLE).split()

    def _split_chunk(self, chunk):
        """Lower-cases, strips accents and splits one whitespace chunk on
        punctuation; returns its list of basic tokens."""
        if chunk.isascii():
            if self.do_lower_case:
                chunk = chunk.lower()
            if _ASCII_PUNCT_RE.search(chunk) is None:
                return [chunk]
            return _ASCII_SPLIT_RE.findall(chunk)
        if self.do_lower_case:
            chunk = chunk.lower()
            chunk = self._run_strip_accents(chunk)
        return whitespace_tokenize(" ".join(self._run_split_on_punc(chunk)))

    def _run_strip_accents(self, text):
        """Strips accents from a piece of text."""
        text = unicodedata.normalize("NFD", text)
        output = []
        for char in text:
            cat = unicodedata.category(char)
            if cat == "Mn":
                continue
            output.append(char)
        return "".join(output)

    def _run_split_on_punc(self, text):
        """Splits punctuation on a piece of text."""
        chars = list(text)
        i = 0
        start_new_word = True
        output = []
        while i < len(chars):
            char = chars[i]
            if _is_punctuation(char):
                output.append([char])
                start_new_word = True
            else:
                if start_new_word:
                    output.append([])
                start_new_word = False
                output[-1].append(char)
            i += 1

        return ["".join(x) for x in output]

    def _tokenize_chinese_chars(self, text):
        """Adds whitespace around any CJK character."""
        output = []
        for char in text:
            cp = ord(char)
            if _is_chinese_char(cp):
                output.append(" ")
                output.append(char)
                output.append(" ")
            else:
                output.append(char)
        return "".join(output)

    def _is_chinese_char(self, cp):
        """Checks whether CP is the codepoint of a CJK character."""
        return _is_chinese_char(cp)

    def _clean_text(self, text):
        """Performs invalid character removal and whitespace cleanup on text."""
        output = []
        for char in text:
            cp = ord(char)
            if cp == 0 or cp == 0xfffd or _is_control(char):
                continue
            if _is_whitespace(char):
                output.append(" ")
            else:
                output.append(char)
        return "".join(output)


class WordpieceTokenizer(object):
    """Runs WordPiece tokenization (greedy longest-match-first)."""

    def __init__(self, vocab, unk_token="[UNK]", max_input_chars_per_word=200):
        self.vocab = vocab
        self.unk_token = unk_token
        self.max_input_chars_per_word = max_input_chars_per_word
        # No vocabulary entry is longer than this, so longer substrings need
        # not be tried.
        self._max_piece_chars = max((len(t) for t in vocab), default=0)
        self._cache = {}

    def tokenize(self, text):
        """Tokenizes a piece of text into its word pieces.

        This uses a greedy longest-match-first algorithm to perform
        tokenization using the given vocabulary.

        For example:
          input = "unaffable"
          output = ["un", "##aff", "##able"]

        Args:
          text: A single token or whitespace separated tokens. This should have
            already been passed through `BasicTokenizer`.

        Returns:
          A list of wordpiece tokens.
        """
        output_tokens = []
        for token in whitespace_tokenize(convert_to_unicode(text)):
            output_tokens.extend(self._tokenize_word(token))
        return output_tokens

    def _tokenize_word(self, token):
        """Word pieces of one whitespace-free token (cached)."""
        pieces = self._cache.get(token)
        if pieces is not None:
            return pieces
        pieces = self._tokenize_word_uncached(token)
        if len(self._cache) >= _MAX_CACHE_ENTRIES:
            self._cache.clear()
        self._cache[token] = pieces
        return pieces

    def _tokenize_word_uncached(self, token):
        if len(token) > self.max_input_chars_per_word:
            return [self.unk_token]
        vocab = self.vocab
        max_chars = self._max_piece_chars
        sub_tokens = []
        start = 0
        n = len(token)
        while start < n:
            end = min(n, start + max_chars)
            cur_substr = None
            while start < end:
                substr = token[start:end]
                if start > 0:
                    substr = "##" + substr
                if substr in vocab:
                    cur_substr = substr
                    break
                end -= 1
            if cur_substr is None:
                return [self.unk_token]
            sub_tokens.append(cur_substr)
            start = end
        return sub_tokens


def _is_whitespace(char):
    """Checks whether `chars` is a whitespace character."""
    # \t, \n, and \r are technically control characters but we treat them
    # as whitespace since they are generally considered as such.
    if char == " " or char == "\t" or char == "\n" or char == "\r":
        return True
    cat = unicodedata.category(char)
    if cat == "Zs":
        return True
    return False


def _is_control(char):
    """Checks whether `chars` is a control character."""
    # These are technically control characters but we count them as whitespace
    # characters.
    if char == "\t" or char == "\n" or char == "\r":
        return False
    cat = unicodedata.category(char)
    if cat in ("Cc", "Cf"):
        return True
    return False


def _is_punctuation(char):
    """Checks whether `chars` is a punctuation character."""
    cp = ord(char)
    # We treat all non-letter/number ASCII as punctuation.
    # Characters such as "^", "$", and "`" are not in the Unicode
    # Punctuation class but we treat them as punctuation anyways, for
    # consistency.
    if ((cp >= 33 and cp <= 47) or (cp >= 58 and cp <= 64) or
            (cp >= 91 and cp <= 96) or (cp >= 123 and cp <= 126)):
        return True
    cat = unicodedata.category(char)
    if cat.startswith("P"):
        return True
    return False


def _is_chinese_char(cp):
    """Checks whether CP is the codepoint of a CJK character."""
    # This defines a "chinese character" as anything in the CJK Unicode block:
    #   https://en.wikipedia.org/wiki/CJK_Unified_Ideographs_(Unicode_block)
    #
    # Note that the CJK Unicode block is NOT all Japanese and Korean characters,
    # despite its name. The modern Korean Hangul alphabet is a different block,
    # as is Japanese Hiragana and Katakana. Those alphabets are used to write
    # space-separated words, so they are not treated specially and handled
    # like the all of the other languages.
    if ((cp >= 0x4E00 and cp <= 0x9FFF) or
            (cp >= 0x3400 and cp <= 0x4DBF) or
            (cp >= 0x20000 and cp <= 0x2A6DF) or
            (cp >= 0x2A700 and cp <= 0x2B73F) or
            (cp >= 0x2B740 and cp <= 0x2B81F) or
            (cp >= 0x2B820 and cp <= 0x2CEAF) or
            (cp >= 0xF900 and cp <= 0xFAFF) or
            (cp >= 0x2F800 and cp <= 0x2FA1F)):
        return True

    return False
