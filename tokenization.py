"""BERT's text tokenization: BasicTokenizer, WordpieceTokenizer, FullTokenizer.

The rules are those of Google's BERT release, and the tokens produced are the
same, token for token (the test suite compares them on fuzzed text and on
every code point of the Basic Multilingual Plane):

1. Cleaning: NUL, U+FFFD and control/format characters (Unicode Cc, Cf) are
   deleted; tab, newline, carriage return and space separators (Zs) become
   spaces. Every CJK ideograph gets a space on either side.
2. The text is split on whitespace. With ``do_lower_case`` each piece is
   lower-cased and its accents removed (NFD, then combining marks, Mn, are
   dropped). Each punctuation character (Unicode P*, and every ASCII
   character that is neither a letter, a digit nor a space) becomes a token
   of its own.
3. WordPiece: each token is cut, left to right, into the longest vocabulary
   entries that match ("##" marks a piece that continues a word); a token
   that cannot be cut completely, or is longer than 200 characters, becomes
   one ``[UNK]``.

Differences from the original:

The tokens are the same; the throughput is about five times, and
TensorFlow is needed only for remote vocabularies:

* Step 1 is a single ``str.translate`` through a table that classifies each
  distinct character once, on first sight; printable ASCII skips it.
* Step 2 works on one whitespace-separated chunk at a time and remembers the
  result per chunk; steps 2 and 3 together are remembered per chunk in
  `FullTokenizer`, step 3 per token in `WordpieceTokenizer`. Natural text
  repeats its words, so most chunks cost one dictionary look-up. The caches
  are emptied when they reach `_MAX_CACHE_ENTRIES`, which bounds memory.
* WordPiece never tries a substring longer than the vocabulary's longest
  entry.
* TensorFlow is imported only to read a vocabulary from a non-local path
  (gs://...); tokenizing local data does not load it.
"""

import collections
import os
import re
import unicodedata

# Above this many entries a cache is emptied: every word form of a large
# corpus fits, and memory stays bounded however much text goes through.
_MAX_CACHE_ENTRIES = 200000

# Google's released checkpoints live in folders named after the model, e.g.
# uncased_L-12_H-768_A-12/bert_model.ckpt; the name says whether the
# vocabulary was lower-cased.
_RELEASE_DIR = re.compile(r"([A-Za-z0-9_-]+)/bert_model.ckpt")
_SIZE_SUFFIX = r"_L-\d+_H-\d+_A-\d+"
_LOWER_CASED_RELEASES = re.compile(
    r"(?:(?:wwm_)?uncased|multilingual|chinese)" + _SIZE_SUFFIX)
_CASED_RELEASES = re.compile(r"(?:(?:wwm_)?cased|multi_cased)" + _SIZE_SUFFIX)


def validate_case_matches_checkpoint(do_lower_case, init_checkpoint):
    """Checks `do_lower_case` against the casing of a Google checkpoint.

    Args:
      do_lower_case: the casing the user asked for (truthy: lower-case).
      init_checkpoint: checkpoint path, or None/empty. Only paths ending in
        ``<release>/bert_model.ckpt...``, where ``<release>`` names one of
        Google's models (the original seven, the ``wwm_`` whole-word-masking
        ones, and the 24 small ``uncased_L-N_H-M_A-K`` ones), are judged;
        any other path passes.

    Raises:
      ValueError: the release was trained with the other casing; the message
        names the flag value to use instead.
    """
    if not init_checkpoint:
        return
    found = _RELEASE_DIR.search(init_checkpoint)
    if found is None:
        return
    release = found.group(1)
    if _LOWER_CASED_RELEASES.fullmatch(release):
        release_is_lower_cased = True
    elif _CASED_RELEASES.fullmatch(release):
        release_is_lower_cased = False
    else:
        return
    if bool(do_lower_case) == release_is_lower_cased:
        return
    raise ValueError(
        "`--do_lower_case=%s` does not fit `--init_checkpoint=%s`: `%s` is %s model. "
        "Pass `--do_lower_case=%s` so that fine-tuning sees text cased as in "
        "pre-training." % (
            bool(do_lower_case), init_checkpoint, release,
            "an uncased (lower-cased)" if release_is_lower_cased else "a cased",
            release_is_lower_cased))


def vocab_casing(vocab):
    """Whether a WordPiece vocabulary was made from lower-cased text.

    Bracketed special tokens ([CLS], [unused0], ...) aside, an uncased
    vocabulary has no token that lower-casing would change; a cased one has
    many (capitalised words and their pieces). Letters without a lower-case
    form (such as U+211D) change nothing and do not count.

    Args:
      vocab: the tokens (a dict token -> id, or any iterable of tokens).

    Returns:
      "uncased", "cased", or None where the vocabulary is too small (fewer
      than 100 tokens with letters) or too mixed to tell.
    """
    tokens = [t for t in vocab if not (t.startswith("[") and t.endswith("]"))]
    with_letters = sum(1 for t in tokens if any(c.isalpha() for c in t))
    changed = sum(1 for t in tokens if t != t.lower())
    if with_letters < 100:
        return None
    if changed == 0:
        return "uncased"
    if changed >= max(50, with_letters // 100):
        return "cased"
    return None


def convert_to_unicode(text):
    """Returns `text` as a `str`.

    A `str` is returned unchanged; `bytes` are decoded as UTF-8, dropping
    bytes that do not decode.

    Raises:
      ValueError: `text` is neither `str` nor `bytes`.
    """
    if isinstance(text, bytes):
        return text.decode("utf-8", errors="ignore")
    if not isinstance(text, str):
        raise ValueError("Unsupported string type: %s" % type(text))
    return text


def printable_text(text):
    """Returns `text` (`str` or UTF-8 `bytes`) as a `str` fit for logging."""
    return convert_to_unicode(text)


def load_vocab(vocab_file):
    """Reads a WordPiece vocabulary: one token per line, its id the line's index.

    Args:
      vocab_file: local path, or any path `tf.io.gfile` can open (gs://...).

    Returns:
      `collections.OrderedDict` token -> id, in file order. Trailing
      whitespace (including "\\r") is removed from each token; an empty line
      in the middle is the token "", while a final newline adds nothing.

    Raises:
      ValueError: the file is missing, unreadable or empty (the message names
        it).
    """
    if not vocab_file:
        raise ValueError("Vocabulary file not found: %r (pass --vocab_file)" % (vocab_file,))
    if "://" in vocab_file:
        import tensorflow.compat.v1 as tf
        exists, open_file = tf.io.gfile.exists, tf.io.gfile.GFile
        read_errors = (tf.errors.OpError, OSError)
    else:
        exists, open_file, read_errors = os.path.exists, open, (OSError,)
    if not exists(vocab_file):
        raise ValueError("Vocabulary file not found: %r (pass --vocab_file)" % (vocab_file,))
    try:
        with open_file(vocab_file, "rb") as f:
            content = f.read().decode("utf-8", errors="ignore")
    except read_errors as e:
        raise ValueError("Cannot read vocabulary file %s: %s" % (vocab_file, e))
    lines = content.split("\n")
    if lines[-1] == "":
        del lines[-1]  # The newline that ends the last line.
    vocab = collections.OrderedDict((line.strip(), i) for i, line in enumerate(lines))
    if not vocab:
        raise ValueError("Vocabulary file %s is empty" % vocab_file)
    return vocab


def convert_by_vocab(vocab, items):
    """Maps each of `items` through the dict `vocab`; returns a list.

    Raises:
      KeyError: an item is missing from `vocab`; the message names it.
    """
    try:
        return [vocab[item] for item in items]
    except KeyError as e:
        raise KeyError("%r is not in the vocabulary" % (e.args[0],)) from None


def convert_tokens_to_ids(vocab, tokens):
    """Ids of `tokens` under `vocab` (token -> id)."""
    return convert_by_vocab(vocab, tokens)


def convert_ids_to_tokens(inv_vocab, ids):
    """Tokens of `ids` under `inv_vocab` (id -> token)."""
    return convert_by_vocab(inv_vocab, ids)


def whitespace_tokenize(text):
    """Splits `text` on runs of whitespace; returns a list of non-empty strings."""
    return text.split()


def _bounded_put(cache, key, value):
    """Stores `value` in the dict `cache`, emptying it first when full."""
    if len(cache) >= _MAX_CACHE_ENTRIES:
        cache.clear()
    cache[key] = value


class FullTokenizer:
    """Text to WordPiece tokens: `BasicTokenizer`, then `WordpieceTokenizer`.

    Args:
      vocab_file: the vocabulary, read with `load_vocab`.
      do_lower_case: lower-case and strip accents (for uncased models).

    Attributes:
      vocab: OrderedDict token -> id. inv_vocab: dict id -> token.
      basic_tokenizer, wordpiece_tokenizer: the two stages.
    """

    def __init__(self, vocab_file, do_lower_case=True):
        self.vocab = load_vocab(vocab_file)
        self.inv_vocab = {index: token for token, index in self.vocab.items()}
        self.basic_tokenizer = BasicTokenizer(do_lower_case=do_lower_case)
        self.wordpiece_tokenizer = WordpieceTokenizer(vocab=self.vocab)
        # Whitespace-separated chunk of cleaned text -> its WordPiece tokens.
        self._chunk_cache = {}

    def tokenize(self, text):
        """Returns the WordPiece tokens (a new list of `str`) of `text`, a
        `str` or UTF-8 `bytes`."""
        tokens = []
        cache = self._chunk_cache
        for chunk in self.basic_tokenizer._clean_and_split(text):
            pieces = cache.get(chunk)
            if pieces is None:
                pieces = self._tokenize_chunk(chunk)
            tokens += pieces
        return tokens

    def _tokenize_chunk(self, chunk):
        """WordPiece tokens of one chunk (no whitespace in it); cached."""
        split_word = self.wordpiece_tokenizer._tokenize_word
        pieces = []
        for word in self.basic_tokenizer._split_chunk(chunk):
            pieces += split_word(word)
        _bounded_put(self._chunk_cache, chunk, pieces)
        return pieces

    def convert_tokens_to_ids(self, tokens):
        """Ids of `tokens`; KeyError for a token outside the vocabulary."""
        return convert_by_vocab(self.vocab, tokens)

    def convert_ids_to_tokens(self, ids):
        """Tokens of `ids`; KeyError for an id outside the vocabulary."""
        return convert_by_vocab(self.inv_vocab, ids)


_SPACE_CHARS = frozenset(" \t\n\r")

# ASCII characters other than letters, digits and the space count as
# punctuation, although some ("$", "+", "^", "`", ...) are Unicode symbols.
_ASCII_PUNCTUATION = frozenset(chr(cp) for cp in range(33, 127) if not chr(cp).isalnum())

# Blocks of CJK ideographs (inclusive code point ranges): the main block,
# extensions A to E, and the compatibility ideographs and their supplement.
# Hangul, hiragana and katakana are not among them: those scripts separate
# words with spaces.
CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
               (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def _is_whitespace(char):
    """Whether the one-character string `char` separates tokens: space, tab,
    newline, carriage return, or a Unicode space separator (Zs)."""
    return char in _SPACE_CHARS or unicodedata.category(char) == "Zs"


def _is_control(char):
    """Whether `char` is deleted by cleaning: a control or format character
    (Cc, Cf), except tab, newline and carriage return, which are whitespace."""
    if char in _SPACE_CHARS:
        return False
    return unicodedata.category(char) in ("Cc", "Cf")


def is_punctuation(char):
    """Whether `char` becomes a token by itself: Unicode punctuation (P*) or
    any ASCII character that is not a letter, digit or whitespace."""
    return char in _ASCII_PUNCTUATION or unicodedata.category(char).startswith("P")


# The original's name, which its unit tests call.
_is_punctuation = is_punctuation


def _is_chinese_char(cp):
    """Whether the code point `cp` (an int) is a CJK ideograph (`CJK_RANGES`)."""
    return any(low <= cp <= high for low, high in CJK_RANGES)


def cleaned(char):
    """What cleaning turns the character `char` into: None (deleted), a
    space, the character with a space on either side (CJK), or itself."""
    code_point = ord(char)
    if code_point == 0 or code_point == 0xFFFD or _is_control(char):
        return None
    if _is_whitespace(char):
        return " "
    if _is_chinese_char(code_point):
        return " %s " % char
    return char


class _CleaningTable(dict):
    """`str.translate` table: code point -> `cleaned` of its character.

    Filled on demand (`__missing__`), so only the characters actually seen
    are classified, each once.
    """

    def __missing__(self, code_point):
        self[code_point] = replacement = cleaned(chr(code_point))
        return replacement


_CLEANING_TABLE = _CleaningTable()

# The same for ASCII, complete, as a list (faster to index than a dict).
_ASCII_CLEANING_TABLE = [cleaned(chr(code_point)) for code_point in range(128)]

# One ASCII punctuation character (see `is_punctuation`), and a
# tokenization of ASCII text into such characters and the runs between them.
_ASCII_PUNCTUATION_RE = re.compile(r"[!-/:-@\[-`{-~]")
_ASCII_TOKEN_RE = re.compile(r"[!-/:-@\[-`{-~]|[^!-/:-@\[-`{-~]+")


class BasicTokenizer:
    """Cleaning, whitespace and punctuation splitting, optional lower-casing.

    Args:
      do_lower_case: lower-case the text and strip its accents.
    """

    def __init__(self, do_lower_case=True):
        self.do_lower_case = do_lower_case
        # Whitespace-separated chunk of cleaned text -> its tokens.
        self._cache = {}

    def tokenize(self, text):
        """Returns the basic tokens (a new list of `str`) of `text`, a `str` or
        UTF-8 `bytes`."""
        tokens = []
        cache = self._cache
        for chunk in self._clean_and_split(text):
            chunk_tokens = cache.get(chunk)
            if chunk_tokens is None:
                chunk_tokens = self._split_chunk(chunk)
                _bounded_put(cache, chunk, chunk_tokens)
            tokens += chunk_tokens
        return tokens

    def _clean_and_split(self, text):
        """Cleans `text` (step 1 in the module docstring) and returns its
        whitespace-separated chunks."""
        text = convert_to_unicode(text)
        if not text.isascii():
            return text.translate(_CLEANING_TABLE).split()
        # Printable ASCII is already clean, and its only whitespace is " ".
        if not text.isprintable():
            text = text.translate(_ASCII_CLEANING_TABLE)
        return text.split()

    def _split_chunk(self, chunk):
        """Tokens of one chunk: lower-cased and accent-stripped if asked,
        then split around punctuation."""
        if chunk.isascii():
            if self.do_lower_case:
                chunk = chunk.lower()
            if _ASCII_PUNCTUATION_RE.search(chunk) is None:
                return [chunk]
            return _ASCII_TOKEN_RE.findall(chunk)
        if self.do_lower_case:
            chunk = self._run_strip_accents(chunk.lower())
        return self._run_split_on_punc(chunk)

    def _run_strip_accents(self, text):
        """`text` in NFD with its combining marks (category Mn) removed."""
        return "".join(char for char in unicodedata.normalize("NFD", text)
                       if unicodedata.category(char) != "Mn")

    def _run_split_on_punc(self, text):
        """Splits `text` (no whitespace in it) into punctuation characters,
        one token each, and the non-empty runs of other characters between
        them. Returns the list of tokens."""
        tokens = []
        run_start = 0
        for i, char in enumerate(text):
            if is_punctuation(char):
                if run_start < i:
                    tokens.append(text[run_start:i])
                tokens.append(char)
                run_start = i + 1
        if run_start < len(text):
            tokens.append(text[run_start:])
        return tokens


class WordpieceTokenizer:
    """Cuts tokens into WordPieces, greedily taking the longest match first.

    A token is cut left to right: at each position the longest vocabulary
    entry that matches the rest of the token is taken, spelt with a "##"
    prefix except at the token's start. With the vocabulary
    {"un", "##aff", "##able"}, "unaffable" gives ["un", "##aff", "##able"].
    A token with a part that matches nothing, or longer than
    `max_input_chars_per_word`, gives [`unk_token`] alone.

    Args:
      vocab: the vocabulary (a dict or set of tokens; only membership is used).
      unk_token: the token standing for an unknown word.
      max_input_chars_per_word: longer tokens are unknown words.
    """

    def __init__(self, vocab, unk_token="[UNK]", max_input_chars_per_word=200):
        self.vocab = vocab
        self.unk_token = unk_token
        self.max_input_chars_per_word = max_input_chars_per_word
        # Longer substrings cannot match, so are never tried.
        self._longest_entry = max(map(len, vocab), default=0)
        self._cache = {}

    def tokenize(self, text):
        """Returns the WordPieces (a list of `str`) of the whitespace-separated
        tokens of `text` (`str` or UTF-8 `bytes`), which should be the output
        of `BasicTokenizer`."""
        pieces = []
        for token in convert_to_unicode(text).split():
            pieces += self._tokenize_word(token)
        return pieces

    def _tokenize_word(self, token):
        """WordPieces of one token (no whitespace in it); cached."""
        pieces = self._cache.get(token)
        if pieces is None:
            pieces = self._cut(token)
            _bounded_put(self._cache, token, pieces)
        return pieces

    def _cut(self, token):
        """The greedy longest-match-first cut of `token` (see the class)."""
        if len(token) > self.max_input_chars_per_word:
            return [self.unk_token]
        pieces = []
        start = 0
        while start < len(token):
            prefix = "##" if start else ""
            # Try the longest candidate first, then ever shorter ones.
            for end in range(min(len(token), start + self._longest_entry), start, -1):
                piece = prefix + token[start:end]
                if piece in self.vocab:
                    break
            else:
                return [self.unk_token]
            pieces.append(piece)
            start = end
        return pieces
