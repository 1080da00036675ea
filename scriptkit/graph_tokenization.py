"""BERT's tokenizer as TensorFlow ops, for SavedModels that take text.

`GraphTokenizer` turns strings into the WordPiece ids that
`tokenization.FullTokenizer` gives for them, id for id (the rules are listed
in tokenization.py's docstring). It is built only from TensorFlow ops and
TensorFlow Text's `WordpieceTokenizer`, so a SavedModel that holds it loads
with `tensorflow` and `tensorflow_text` alone; it works in TF1 graph mode
(run `tf.tables_initializer()` before use) and eagerly.

How the text is processed, per batch, on code points:

1. The bytes are decoded as UTF-8 with ``errors="ignore"``: bytes that are not
   valid UTF-8 are dropped, as `tokenization.convert_to_unicode` drops them
   (the test compares the two on random bytes).
2. Cleaning: each code point is looked up in a class table (deleted, space,
   CJK ideograph, punctuation, other). Deleted ones go, spaces separate.
3. With lower-casing: each code point is replaced by the NFD form of its
   lower-case form (one to four code points), capital sigma becomes a final
   sigma where `str.lower` would make it one, the result is put in canonical
   order (combining marks sorted by combining class, as NFD requires), and
   nonspacing marks (Mn) are deleted.
4. Words: runs of "other" code points; each punctuation character and each
   CJK ideograph is a word by itself.
5. WordPiece (TensorFlow Text), after words longer than 200 code points were
   replaced by "[UNK]".

Every Unicode table used (cleaning classes, lower-case and NFD mappings,
combining classes, what counts as cased and case-ignorable for the final
sigma) is computed in Python when the tokenizer is built, from
`tokenization`'s own predicates, `str.lower` and `unicodedata` (the standard
library's, at build time only), and stored in the graph as constants (about
0.4 MB with lower-casing, 0.05 MB without), once per tokenizer however often
it is called. The graph therefore tokenizes as `FullTokenizer` did under the
Python that built it, whatever TensorFlow version runs it later.
TensorFlow's own Unicode operations were measured against Python and differ,
which is why they are not used:

* `tf.strings.lower(encoding="utf-8")` uses case tables of Unicode 13 (in
  TensorFlow 2.15 and 2.21 alike): 40 letters added in Unicode 14 (U+2C2F,
  U+A7C0, U+A7D0, U+A7D6, U+A7D8, U+10570-U+10595) stay upper-case, and a
  string is cut at its first NUL.
* `tensorflow_text.normalize_utf8(..., "NFD")` decomposes U+11938
  differently from Python 3.11 (TF Text 2.15), and in TF Text 2.21 decomposes
  20 Unicode 16 characters that Python 3.13 (Unicode 15.1) does not know.
* RE2's ``\\p{...}`` classes in TensorFlow 2.15 follow Unicode 15, Python
  3.11 Unicode 14 (7 Cf, 23 P and 35 Mn characters differ).
"""

import functools
import sys
import unicodedata

import tensorflow.compat.v1 as tf

import tokenization

# Words longer than this many code points are unknown (FullTokenizer's rule).
MAX_CHARS_PER_WORD = 200

# TensorFlow Text caps words in bytes; a UTF-8 code point has at most 4.
_MAX_BYTES_PER_WORD = 4 * MAX_CHARS_PER_WORD

# Cleaning classes of a code point.
_OTHER, _DELETED, _SPACE, _CJK, _PUNCT = range(5)

# Kinds of a code point when words are formed: inside a word, a word by
# itself, or a separator.
_IN_WORD, _ALONE, _SEPARATOR = range(3)

# For the final sigma: neither, case-ignorable, cased (and not ignorable).
_NEITHER, _IGNORABLE, _CASED = range(3)

_CAPITAL_SIGMA, _FINAL_SIGMA = 0x3A3, 0x3C2

_SPECIAL_TOKENS = ("[CLS]", "[SEP]", "[UNK]")


# ---------------------------------------------------------------------------
# Tables, computed once per process from Python's Unicode data.

def _runs(values):
    """(starts, values) of the runs of equal entries of `values`, a list
    indexed by code point: a compact table for `_lookup_runs`."""
    starts, run_values = [0], [values[0]]
    for code_point, value in enumerate(values):
        if value != run_values[-1]:
            starts.append(code_point)
            run_values.append(value)
    return starts, run_values


def _cleaning_class(char):
    """`char`'s class for cleaning and splitting, by `tokenization`'s rules."""
    cleaned = tokenization.cleaned(char)
    if cleaned is None:
        return _DELETED
    # str.split() also splits on what cleaning keeps but Python counts as
    # whitespace: U+2028 and U+2029.
    if cleaned == " " or (cleaned == char and char.isspace()):
        return _SPACE
    if cleaned != char:
        return _CJK
    if tokenization.is_punctuation(char):
        return _PUNCT
    return _OTHER


@functools.lru_cache(maxsize=None)
def _class_table():
    """Runs of `_cleaning_class` over all code points."""
    low = min(low for low, _ in tokenization.CJK_RANGES)
    high = max(high for _, high in tokenization.CJK_RANGES)
    # (A shortcut, as asking takes a second: for an unassigned code point
    # outside the span of the CJK blocks, each of tokenization's predicates
    # says no.)
    classes = [_OTHER if unicodedata.category(char) == "Cn" and not low <= cp <= high
               else _cleaning_class(char)
               for cp, char in ((cp, chr(cp)) for cp in range(sys.maxunicode + 1))]
    return _runs(classes)


def _assigned(char):
    return unicodedata.category(char) not in ("Cn", "Co", "Cs")


@functools.lru_cache(maxsize=None)
def _lower_case_tables():
    """The tables that lower-casing with accent stripping needs.

    Returns a dict:
      fold: (keys, starts, lengths, values): code point keys[i] becomes
        values[starts[i]:starts[i] + lengths[i]], the NFD form of its
        `str.lower` (capital sigma: small sigma); other code points stay.
      marks: runs over all code points of combining class + 256 * (is Mn).
      context: runs of _NEITHER/_IGNORABLE/_CASED, the classes `str.lower`
        looks at to choose the final sigma.
    """
    keys, starts, lengths, values = [], [], [], []
    marks = [0] * (sys.maxunicode + 1)
    context = [_NEITHER] * (sys.maxunicode + 1)
    for code_point in range(sys.maxunicode + 1):
        char = chr(code_point)
        if not _assigned(char):
            continue
        folded = unicodedata.normalize("NFD", char.lower())
        if folded != char:
            keys.append(code_point)
            starts.append(len(values))
            lengths.append(len(folded))
            values.extend(ord(c) for c in folded)
        marks[code_point] = (unicodedata.combining(char)
                             + 256 * (unicodedata.category(char) == "Mn"))
        # str.lower() makes a capital sigma final when, skipping
        # case-ignorable characters, a cased one comes before it and none
        # after; its own notions of both are read from its behaviour.
        if (char + "\u03a3").lower().endswith("\u03c2"):
            context[code_point] = _CASED
        elif ("A" + char + "\u03a3").lower().endswith("\u03c2"):
            context[code_point] = _IGNORABLE
    return {"fold": (keys, starts, lengths, values), "marks": _runs(marks),
            "context": _runs(context)}


# ---------------------------------------------------------------------------
# Graph pieces on flat code point vectors.

def _constant_tables(do_lower_case):
    """The tables `GraphTokenizer` needs, as int32 constants in the current
    graph: a dict name -> tuple of 1-D tensors (the parts of `_runs` tables
    or of the "fold" table)."""
    tables = {"class": _class_table()}
    if do_lower_case:
        tables.update(_lower_case_tables())
    with tf.name_scope("unicode_tables"):
        return {name: tuple(tf.constant(part, tf.int32, name="%s_%d" % (name, i))
                            for i, part in enumerate(parts))
                for name, parts in tables.items()}


def _lookup_runs(table, code_points):
    """The value of each of `code_points` (int32 [n]) in `table` (a `_runs`
    table as constants)."""
    starts, values = table
    return tf.gather(values, tf.searchsorted(starts, code_points, side="right") - 1)


def _shifted(values, fill):
    """`values` [n] moved one place right, `fill` first: the previous entry."""
    return tf.concat([tf.fill([1], fill), values[:-1]], axis=0)


def _final_sigmas(code_points, rows, context):
    """Which capital sigmas `str.lower` makes final (bool [n]).

    Args:
      code_points: int32 [n], the cleaned text of all rows, one after another.
      rows: int64 [n], each code point's row (text).
      context: int32 [n], each code point's _NEITHER/_IGNORABLE/_CASED
        (_NEITHER for spaces and CJK, which end a chunk).
    """
    n = tf.size(code_points, out_type=tf.int64)
    anchored = tf.not_equal(context, _IGNORABLE)
    # Positions of the code points that are not case-ignorable, then one past
    # the end (a sentinel in no row).
    anchors = tf.concat([tf.where(anchored)[:, 0], tf.reshape(n, [1])], axis=0)
    rows = tf.concat([rows, tf.fill([1], tf.constant(-1, tf.int64))], axis=0)
    cased = tf.concat([tf.equal(context, _CASED), [False]], axis=0)
    count = tf.cumsum(tf.cast(anchored, tf.int64))  # Anchors up to here.
    before = count - tf.cast(anchored, tf.int64)  # Anchors before here.
    previous = tf.where(before > 0, tf.gather(anchors, tf.maximum(before - 1, 0)),
                        tf.fill(tf.shape(before), n))
    following = tf.gather(anchors, count)
    own_row = rows[:-1]

    def cased_in_row(position):
        return tf.logical_and(tf.gather(cased, position),
                              tf.equal(tf.gather(rows, position), own_row))

    return tf.logical_and(
        tf.equal(code_points, _CAPITAL_SIGMA),
        tf.logical_and(cased_in_row(previous), tf.logical_not(cased_in_row(following))))


def _expand(code_points, fold):
    """Replaces code points by their `fold` sequences (see `_lower_case_tables`;
    here as constants).

    Returns:
      (new code points int32 [m], source int32 [m]: the index in
      `code_points` each comes from).
    """
    keys, starts, lengths, values = fold
    index = tf.minimum(tf.searchsorted(keys, code_points), tf.size(keys) - 1)
    found = tf.equal(tf.gather(keys, index), code_points)
    out_lengths = tf.where(found, tf.gather(lengths, index), tf.ones_like(code_points))
    source = tf.repeat(tf.range(tf.size(code_points)), out_lengths)
    within = tf.range(tf.size(source)) - tf.gather(
        tf.cumsum(out_lengths, exclusive=True), source)
    mapped = tf.gather(values, tf.gather(tf.gather(starts, index), source) + within)
    return tf.where(tf.gather(found, source), mapped, tf.gather(code_points, source)), source


def _canonical_order(rows, marks):
    """The permutation that puts combining marks in canonical order: within
    each run of code points of nonzero combining class, a stable sort by
    class (NFD's last step). `marks` int32 [n] from the "marks" table; rows
    int64 [n]."""
    combining = tf.math.floormod(marks, 256)
    run_start = tf.logical_or(tf.equal(combining, 0),
                              tf.not_equal(rows, _shifted(rows, tf.constant(-1, tf.int64))))
    group = tf.cumsum(tf.cast(run_start, tf.int64))
    return tf.argsort(group * 256 + tf.cast(combining, tf.int64), stable=True)


def _form_words(code_points, rows, kinds, extra=None):
    """Groups code points into words.

    Args:
      code_points: int32 [n], rows: int64 [n] (non-decreasing), kinds: int32
        [n] (_IN_WORD, _ALONE, _SEPARATOR).
      extra: optional int [n] (character positions).

    Returns:
      words (string [w]), word_rows (int64 [w]), the number of code points of
      each word (int64 [w]), and, with `extra`, its first and last values per
      word (int [w] each).
    """
    in_word = tf.equal(kinds, _IN_WORD)
    continues = tf.logical_and(
        in_word, tf.logical_and(_shifted(in_word, False),
                                tf.equal(rows, _shifted(rows, tf.constant(-1, tf.int64)))))
    member = tf.not_equal(kinds, _SEPARATOR)
    starts = tf.logical_and(member, tf.logical_not(continues))
    word_index = tf.boolean_mask(tf.cumsum(tf.cast(starts, tf.int64)) - 1, member)
    num_words = tf.reduce_sum(tf.cast(starts, tf.int64))
    chars = tf.RaggedTensor.from_value_rowids(
        tf.boolean_mask(code_points, member), word_index, nrows=num_words, validate=False)
    # (errors="ignore": every code point here is a valid scalar value, but
    # TensorFlow 2.15's default, "replace", also replaces the 66
    # noncharacters, U+FDD0 and U+FFFE among them, by U+FFFD.)
    words = tf.strings.unicode_encode(chars, "UTF-8", errors="ignore")
    result = [words, tf.boolean_mask(rows, starts), chars.row_lengths()]
    if extra is not None:
        result.append(tf.boolean_mask(extra, starts))
        result.append(tf.math.segment_max(tf.boolean_mask(extra, member), word_index))
    return result


def _decode(texts):
    """texts: string [n] -> (code points int32 [c], rows int64 [c], positions
    int64 [c]: each code point's index in its decoded text)."""
    decoded = tf.strings.unicode_decode(texts, "UTF-8", errors="ignore")
    rows = decoded.value_rowids()
    positions = (tf.range(tf.size(decoded.flat_values, out_type=tf.int64))
                 - tf.gather(decoded.row_starts(), rows))
    return decoded.flat_values, rows, positions


def _as_text_vector(texts):
    texts = tf.convert_to_tensor(texts, tf.string)
    texts.shape.assert_has_rank(1)
    return texts


# ---------------------------------------------------------------------------

def _check_vocab_file(vocab_file, vocab):
    """Raises ValueError where a lookup table read with TextFileInitializer
    (one entry per line, a final "\\r" dropped, nothing else stripped) would
    differ from `tokenization.load_vocab`'s `vocab`, or could not be built."""
    with tf.io.gfile.GFile(vocab_file, "rb") as f:
        lines = f.read().split(b"\n")
    if lines[-1] == b"":
        del lines[-1]
    for number, line in enumerate(lines, 1):
        key = line[:-1] if line.endswith(b"\r") else line
        try:
            token = key.decode("utf-8")
        except UnicodeDecodeError:
            token = None
        if not token or token != token.strip() or vocab.get(token) != number - 1:
            raise ValueError(
                "%s, line %d (%r): a vocabulary for GraphTokenizer needs one distinct, "
                "non-empty UTF-8 token per line, without surrounding whitespace"
                % (vocab_file, number, line))


def check_vocab(vocab_file):
    """Reads `vocab_file` (`tokenization.load_vocab`) and checks that
    `GraphTokenizer` can use it: [CLS], [SEP] and [UNK] in it, and a table
    read line by line equal to it (see `_check_vocab_file`). Returns the
    vocabulary; raises ValueError naming the file (and line) otherwise."""
    vocab = tokenization.load_vocab(vocab_file)
    missing = [token for token in _SPECIAL_TOKENS if token not in vocab]
    if missing:
        raise ValueError("%s has no %s" % (vocab_file, " or ".join(missing)))
    _check_vocab_file(vocab_file, vocab)
    return vocab


class GraphTokenizer:
    """`tokenization.FullTokenizer` as TensorFlow ops.

    Args:
      vocab_file: a BERT vocab.txt: one token per line, its id the line's
        index (as `tokenization.load_vocab`). Each line must hold a distinct,
        non-empty token without surrounding whitespace (a final "\\r" is
        allowed); ValueError otherwise, and where [CLS], [SEP] or [UNK] is
        missing.
      do_lower_case: lower-case and strip accents, as for uncased models.

    The vocabulary is a `tf.lookup.StaticHashTable` read from `vocab_file`
    by a `TextFileInitializer`: in graph mode it must be initialised
    (`tf.tables_initializer()`), and the file is registered as an asset
    (`tf.GraphKeys.ASSET_FILEPATHS`), so a SavedModel carries it. Build the
    tokenizer in the graph that uses it: the table and the Unicode tables
    (constants) are made there, once, and shared by every call.

    Attributes:
      do_lower_case: bool.
      cls_id, sep_id, unk_id: ints, the ids of [CLS], [SEP] and [UNK].
      pad_id: 0, the id the scripts pad with ([PAD] in BERT's vocabularies).
    """

    def __init__(self, vocab_file, do_lower_case):
        # Imported here, not with the module: TensorFlow Text adds about
        # 118 MiB to a process on TensorFlow 2.21 (12 MiB on 2.15), and the
        # scripts import this module whether or not they export a model.
        import tensorflow_text

        vocab = check_vocab(vocab_file)
        self.do_lower_case = bool(do_lower_case)
        self.cls_id, self.sep_id, self.unk_id = (vocab[token] for token in _SPECIAL_TOKENS)
        self.pad_id = 0
        initializer = tf.lookup.TextFileInitializer(
            vocab_file, tf.string, tf.lookup.TextFileIndex.WHOLE_LINE,
            tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER)
        self._table = tf.lookup.StaticHashTable(initializer, default_value=-1)
        # Longer candidates cannot match: TensorFlow Text need not try them.
        longest = max(len(token) for token in vocab)
        self._wordpiece = tensorflow_text.WordpieceTokenizer(
            self._table, suffix_indicator="##", max_bytes_per_word=_MAX_BYTES_PER_WORD,
            max_chars_per_token=longest, token_out_type=tf.int32, unknown_token="[UNK]")
        self._tables = _constant_tables(self.do_lower_case)

    def tokenize(self, texts):
        """WordPiece ids of texts.

        Args:
          texts: tf.string [batch] (UTF-8; invalid bytes are dropped).

        Returns:
          tf.RaggedTensor int32 [batch, (pieces)]: for each text, the ids of
          `FullTokenizer(vocab_file, do_lower_case).tokenize(text)`.
        """
        texts = _as_text_vector(texts)
        words, word_rows, lengths = self._basic_words(texts)
        pieces = self._word_ids(words, lengths)
        return tf.RaggedTensor.from_value_rowids(
            pieces.values, tf.gather(word_rows, pieces.value_rowids()),
            nrows=tf.size(texts, out_type=tf.int64), validate=False)

    def split_words(self, texts):
        """The words of `tokenization.BasicTokenizer(do_lower_case=False)`,
        with their places in the text.

        Words are what cleaning and splitting leave: the text without NUL,
        U+FFFD and control or format characters, split on whitespace, each
        punctuation character and each CJK ideograph a word by itself. No
        lower-casing, whatever `do_lower_case` says.

        Args:
          texts: tf.string [batch] (UTF-8; invalid bytes are dropped, and do
            not count in the offsets).

        Returns:
          (words, starts, ends): RaggedTensors [batch, (words)] of tf.string
          and int32. Offsets count code points of the text (Python `str`
          indices): text[start:end] runs from the word's first character to
          its last, so deleted characters between them (U+200B, say) lie
          inside it.
        """
        texts = _as_text_vector(texts)
        code_points, rows, positions = _decode(texts)
        classes = _lookup_runs(self._tables["class"], code_points)
        kept = tf.not_equal(classes, _DELETED)
        code_points, rows, positions, classes = (
            tf.boolean_mask(t, kept) for t in (code_points, rows, positions, classes))
        words, word_rows, _, starts, lasts = _form_words(
            code_points, rows, self._kinds(classes, classes), extra=positions)
        nrows = tf.size(texts, out_type=tf.int64)

        def per_text(values):
            return tf.RaggedTensor.from_value_rowids(values, word_rows, nrows=nrows,
                                                     validate=False)

        return (per_text(words), per_text(tf.cast(starts, tf.int32)),
                per_text(tf.cast(lasts + 1, tf.int32)))

    def word_pieces(self, words):
        """WordPiece ids of each word.

        Args:
          words: tf.string RaggedTensor [batch, (words)] (e.g. `split_words`'
            words).

        Returns:
          RaggedTensor int32 [batch, (words), (pieces)]: each word's ids from
          `FullTokenizer.tokenize(word)`, or [unk_id] alone for a word that
          gives none (one of only combining marks when lower-casing, say).
          Each word is tokenized alone: a capital sigma at a word's end is
          final even where the text goes on after it with a letter
          (FullTokenizer on the whole text looks across punctuation).
        """
        if not isinstance(words, tf.RaggedTensor):
            words = tf.RaggedTensor.from_tensor(tf.convert_to_tensor(words, tf.string))
        ids = self.tokenize(words.flat_values)
        # Rows of at least one id; an empty row gets [unk_id]. (Built with
        # gathers: a ragged concat logs a oneDNN warning about int64.)
        lengths = ids.row_lengths()
        new_lengths = tf.maximum(lengths, 1)
        rows = tf.repeat(tf.range(tf.size(lengths, out_type=tf.int64)), new_lengths)
        within = (tf.range(tf.reduce_sum(new_lengths))
                  - tf.gather(tf.cumsum(new_lengths, exclusive=True), rows))
        has_ids = tf.gather(tf.greater(lengths, 0), rows)
        values = tf.concat([ids.values, tf.fill([1], tf.constant(self.unk_id, tf.int32))], 0)
        source = tf.where(has_ids, tf.gather(ids.row_starts(), rows) + within,
                          tf.fill(tf.shape(rows), tf.size(ids.values, out_type=tf.int64)))
        pieces = tf.RaggedTensor.from_row_lengths(tf.gather(values, source), new_lengths,
                                                  validate=False)
        return words.with_flat_values(pieces)

    # -- internals ----------------------------------------------------------

    @staticmethod
    def _kinds(classes, classes_now):
        """Word-forming kinds from the cleaning classes of the text as
        cleaned (`classes`) and as now, after lower-casing (`classes_now`):
        spaces and CJK ideographs are decided at cleaning, punctuation after
        lower-casing and NFD (which can make some, e.g. U+037E -> ";")."""
        alone = tf.logical_or(tf.equal(classes, _CJK), tf.equal(classes_now, _PUNCT))
        return tf.where(tf.equal(classes, _SPACE), tf.fill(tf.shape(classes), _SEPARATOR),
                        tf.where(alone, tf.fill(tf.shape(classes), _ALONE),
                                 tf.fill(tf.shape(classes), _IN_WORD)))

    def _basic_words(self, texts):
        """`BasicTokenizer(do_lower_case)` on texts [n]: words (string [w]),
        their rows (int64 [w]) and lengths in code points (int64 [w])."""
        code_points, rows, _ = _decode(texts)
        tables = self._tables
        classes = _lookup_runs(tables["class"], code_points)
        kept = tf.not_equal(classes, _DELETED)
        code_points, rows, classes = (
            tf.boolean_mask(t, kept) for t in (code_points, rows, classes))
        classes_now = classes
        if self.do_lower_case:
            # Capital sigmas are decided on the cleaned text, where spaces and
            # CJK ideographs separate the chunks that str.lower() sees.
            boundary = tf.logical_or(tf.equal(classes, _SPACE), tf.equal(classes, _CJK))
            context = tf.where(boundary, tf.zeros_like(classes),
                               _lookup_runs(tables["context"], code_points))
            final = _final_sigmas(code_points, rows, context)
            code_points, source = _expand(code_points, tables["fold"])
            code_points = tf.where(tf.gather(final, source),
                                   tf.fill(tf.shape(code_points), _FINAL_SIGMA), code_points)
            rows, classes = tf.gather(rows, source), tf.gather(classes, source)
            marks = _lookup_runs(tables["marks"], code_points)
            order = _canonical_order(rows, marks)
            code_points, rows, classes, marks = (
                tf.gather(t, order) for t in (code_points, rows, classes, marks))
            not_mn = tf.less(marks, 256)
            code_points, rows, classes = (
                tf.boolean_mask(t, not_mn) for t in (code_points, rows, classes))
            classes_now = _lookup_runs(tables["class"], code_points)
        words, word_rows, lengths = _form_words(code_points, rows,
                                                self._kinds(classes, classes_now))
        return words, word_rows, lengths

    def _word_ids(self, words, lengths):
        """WordPiece ids (RaggedTensor int32 [w, (pieces)]) of words [w] whose
        lengths in code points are `lengths`."""
        too_long = tf.greater(lengths, MAX_CHARS_PER_WORD)
        words = tf.where(too_long, tf.fill(tf.shape(words), "[UNK]"), words)
        return self._wordpiece.tokenize(words)
