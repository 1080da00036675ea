"""Tests for run_squad.py and squad_evaluate.py: data pipeline, predictions,
official metrics, threshold tuning, bad input, and tiny end-to-end runs for
SQuAD 1.1 and 2.0.

Expected values are worked out by hand in the comments, or come from Google's
original run_squad.py (run in a subprocess, since its absl flags clash with
ours).
"""

import collections
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
from absl import flags
from absl.testing import flagsaver

import run_squad
from scriptkit import squad_answers
import squad_evaluate
import tiny
import tokenization
from scriptkit.errors import InputError
from tiny import write_config, write_vocab

FLAGS = flags.FLAGS
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = sys.executable

UNIT_WORDS = (
    "who what year was the leader john smith ( 1895 - 1943 ) . steve ' s car "
    "japanese japan electronics industry cafe ##son").split() + [
        "t%d" % i for i in range(12)]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    vocab = write_vocab(str(tmp_path_factory.mktemp("vocab")), UNIT_WORDS)
    return tokenization.FullTokenizer(vocab, do_lower_case=True)


def _write_squad(path, articles, version=None):
    data = {"data": articles}
    if version:
        data["version"] = version
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f)
    return str(path)


def _qa(qid, question, context=None, answer=None, impossible=None, answers=None):
    """A SQuAD question; `answer` is located in `context` by str.find."""
    qa = {"id": qid, "question": question}
    if answers is not None:
        qa["answers"] = answers
    elif answer is not None:
        qa["answers"] = [{"text": answer, "answer_start": context.find(answer)}]
    if impossible is not None:
        qa["is_impossible"] = impossible
    return qa


# ---------------------------------------------------------------------------
# Reading: whitespace split, char offsets, answer alignment, skipped answers.

def test_split_paragraph_whitespace_and_offsets():
    # Leading whitespace maps to -1, whitespace to the word before it; tab,
    # newline and U+202F (narrow no-break space) separate words.
    tokens, offsets = run_squad.split_paragraph(" ab  c\td\u202fe\n")
    assert tokens == ["ab", "c", "d", "e"]
    assert offsets == [-1, 0, 0, 0, 0, 1, 1, 2, 2, 3, 3]


def test_read_squad_examples_answer_alignment(tmp_path):
    context = "The leader was John Smith (1895-1943).  Steve  Smith's\tcar"
    qas = [
        _qa("born", "What year?", context, "1895"),
        # Double space inside the answer, matching the context.
        _qa("steve", "Who?", context, "Steve  Smith"),
        # Trailing space: its last character maps back to "John".
        _qa("john", "Who?", context, "John "),
        # Wrong answer_start: the words at offset 0 ("The le" -> The leader)
        # contain "leader": kept, as the original's check only asks that.
        _qa("lenient", "Who?", answers=[{"text": "leader", "answer_start": 0}]),
        # Wrong answer_start: the words at "Steve" do not contain "leader".
        _qa("bad_offset", "Who?", answers=[{"text": "leader",
                                            "answer_start": context.find("Steve")}]),
        # answer_start past the end of the context.
        _qa("past_end", "Who?", answers=[{"text": "car", "answer_start": 500}]),
    ]
    path = _write_squad(tmp_path / "train.json",
                        [{"title": "T", "paragraphs": [{"context": context, "qas": qas}]}])
    examples, skipped = run_squad.read_squad_examples_and_skipped(
        path, is_training=True, version_2_with_negative=False)

    assert skipped == ["bad_offset", "past_end"]
    by_id = {e.qas_id: e for e in examples}
    assert list(by_id) == ["born", "steve", "john", "lenient"]
    words = ["The", "leader", "was", "John", "Smith", "(1895-1943).", "Steve",
             "Smith's", "car"]
    assert by_id["born"].doc_tokens == words
    assert (by_id["born"].start_position, by_id["born"].end_position) == (5, 5)
    assert (by_id["steve"].start_position, by_id["steve"].end_position) == (6, 7)
    assert (by_id["john"].start_position, by_id["john"].end_position) == (3, 3)
    assert (by_id["lenient"].start_position, by_id["lenient"].end_position) == (0, 1)
    # The public function returns the same examples.
    assert [e.qas_id for e in run_squad.read_squad_examples(path, True, False)] == list(by_id)


def test_improve_answer_span_in_features(tokenizer, tmp_path):
    context = "The leader was John Smith (1895-1943).  Steve  Smith's\tcar"
    qas = [_qa("born", "What year?", context, "1895"),
           _qa("steve", "Who?", context, "Steve  Smith")]
    path = _write_squad(tmp_path / "train.json",
                        [{"paragraphs": [{"context": context, "qas": qas}]}])
    examples = run_squad.read_squad_examples(path, True, False)
    features = []
    run_squad.convert_examples_to_features(examples, tokenizer, 32, 8, 8, True, features.append)
    # [CLS] what year ? [SEP] the leader was john smith ( 1895 - 1943 ) . ...
    # ("?" is not in the vocabulary: [UNK], still one token.)
    born = features[0]
    assert born.tokens[born.start_position:born.end_position + 1] == ["1895"]
    assert born.start_position == 5 + 6
    steve = features[1]
    assert steve.tokens[steve.start_position:steve.end_position + 1] == ["steve", "smith"]


def test_improve_answer_span_cases(tokenizer):
    # "(1895-1943)." -> ( 1895 - 1943 ) . : the answer "1895" is piece 1.
    doc = ["(", "1895", "-", "1943", ")", "."]
    assert run_squad._improve_answer_span(doc, 0, 5, tokenizer, "1895") == (1, 1)
    assert run_squad._improve_answer_span(doc, 0, 5, tokenizer, "1943)") == (3, 4)
    # "Japan" is a character sub-span of "Japanese": no better match.
    doc = ["the", "japanese", "electronics", "industry"]
    assert run_squad._improve_answer_span(doc, 1, 1, tokenizer, "Japan") == (1, 1)


def test_sub_word_answer_is_kept(tmp_path):
    context = "The Japanese electronics industry"
    qas = [_qa("q", "What?", context, "Japan")]
    path = _write_squad(tmp_path / "t.json", [{"paragraphs": [{"context": context,
                                                                 "qas": qas}]}])
    (example,) = run_squad.read_squad_examples(path, True, False)
    assert (example.start_position, example.end_position) == (1, 1)


def test_version_2_impossible_and_prediction_reading(tmp_path):
    context = "John Smith was the leader"
    qas = [_qa("yes", "Who?", context, "John Smith", impossible=False),
           _qa("no", "What year?", answers=[], impossible=True)]
    path = _write_squad(tmp_path / "t.json", [{"paragraphs": [{"context": context,
                                                                 "qas": qas}]}])
    ex = run_squad.read_squad_examples(path, True, version_2_with_negative=True)
    assert [(e.start_position, e.end_position, e.is_impossible, e.orig_answer_text)
            for e in ex] == [(0, 1, False, "John Smith"), (-1, -1, True, "")]
    # For prediction, answers are not read at all.
    ex = run_squad.read_squad_examples(path, False, version_2_with_negative=True)
    assert [(e.start_position, e.orig_answer_text) for e in ex] == [(None, None)] * 2


def test_predict_file_is_read_once(tmp_path, monkeypatch):
    context = "John Smith was the leader"
    qas = [_qa("yes", "Who?", context, "John Smith"), _qa("no", "What year?", answers=[],
                                                         impossible=True)]
    path = _write_squad(tmp_path / "t.json", [{"paragraphs": [{"context": context,
                                                                 "qas": qas}]}])
    expected = run_squad.read_squad_examples(path, False, version_2_with_negative=True)
    reads = []
    read_json = run_squad.file_io.read_json
    monkeypatch.setattr(run_squad.file_io, "read_json",
                        lambda *args: reads.append(args) or read_json(*args))
    settings = collections.namedtuple("S", "predict_file version_2_with_negative")(path, True)
    examples, dataset = run_squad._read_predict_file(settings)
    assert reads == [(path, "predict_file")]
    assert dataset == json.load(open(path, encoding="utf-8"))
    assert ([(e.qas_id, e.question_text, e.doc_tokens, e.is_impossible) for e in examples]
            == [(e.qas_id, e.question_text, e.doc_tokens, e.is_impossible) for e in expected])


# ---------------------------------------------------------------------------
# Windows and max context.

def test_windows_token_maps_and_max_context(tokenizer):
    # 12 words, "johnson" -> john ##son: 13 pieces, piece -> word
    # 0 1 2 3 4 4 5 6 7 8 9 10 11. Query "who" (1 piece), max_seq_length 10:
    # 10 - 1 - 3 = 6 pieces per window, stride 3 -> windows of pieces
    # [0,6) [3,9) [6,12) [9,13).
    words = "t0 t1 t2 t3 johnson t5 t6 t7 t8 t9 t10 t11".split()
    example = run_squad.SquadExample("q", "who", words, "johnson t5", 4, 5)
    features = []
    n = run_squad.convert_examples_to_features([example], tokenizer, 10, 3, 64, True,
                                               features.append)
    assert n == 4 and len(features) == 4
    assert [f.doc_span_index for f in features] == [0, 1, 2, 3]
    assert [f.unique_id for f in features] == [1000000000 + i for i in range(4)]

    assert features[0].tokens == ["[CLS]", "who", "[SEP]", "t0", "t1", "t2", "t3", "john",
                                  "##son", "[SEP]"]
    assert features[3].tokens == ["[CLS]", "who", "[SEP]", "t8", "t9", "t10", "t11", "[SEP]"]
    assert features[3].input_mask == [1] * 8 + [0, 0]
    assert features[3].input_ids[8:] == [0, 0]
    assert features[0].segment_ids == [0, 0, 0, 1, 1, 1, 1, 1, 1, 1]

    # Document pieces start at token 3 ([CLS] who [SEP]).
    assert [f.token_to_orig_map for f in features] == [
        {3: 0, 4: 1, 5: 2, 6: 3, 7: 4, 8: 4},
        {3: 3, 4: 4, 5: 4, 6: 5, 7: 6, 8: 7},
        {3: 5, 4: 6, 5: 7, 6: 8, 7: 9, 8: 10},
        {3: 8, 4: 9, 5: 10, 6: 11},
    ]
    # Score = min(left, right context) + 0.01 * window length; ties go to the
    # earlier window. E.g. piece 4 (john): window 0 min(4,1)=1, window 1
    # min(1,4)=1 -> window 0; piece 5 (##son): window 0 min(5,0)=0, window 1
    # min(2,3)=2 -> window 1; piece 11: window 2 min(5,0)=0, window 3
    # min(2,1)=1 (+0.04 vs +0.06) -> window 3.
    T, F = True, False
    assert [f.token_is_max_context for f in features] == [
        {3: T, 4: T, 5: T, 6: T, 7: T, 8: F},
        {3: F, 4: F, 5: T, 6: T, 7: T, 8: F},
        {3: F, 4: F, 5: T, 6: T, 7: T, 8: F},
        {3: F, 4: F, 5: T, 6: T},
    ]
    # The answer john ##son t5 (pieces 4-6) fits only in window 1 (pieces
    # 3-8): positions 4-3+3=4 .. 6-3+3=6. Elsewhere the target is [CLS].
    assert [(f.start_position, f.end_position) for f in features] == [
        (0, 0), (4, 6), (0, 0), (0, 0)]
    assert features[1].tokens[4:7] == ["john", "##son", "t5"]


def test_query_truncated_to_max_query_length(tokenizer):
    example = run_squad.SquadExample("q", "who what year was", ["t0", "t1"])
    features = []
    run_squad.convert_examples_to_features([example], tokenizer, 12, 4, 2, False,
                                           features.append)
    assert features[0].tokens == ["[CLS]", "who", "what", "[SEP]", "t0", "t1", "[SEP]"]
    assert features[0].start_position is None


# ---------------------------------------------------------------------------
# get_final_text.

@pytest.mark.parametrize("pred_text, orig_text, do_lower_case, expected", [
    # The original's example: drop the "'s" that the tokenizer split off.
    ("steve smith", "Steve Smith's", True, "Steve Smith"),
    # Lower-casing and accent stripping are undone through the alignment.
    ("cafe", "Café", True, "Café"),
    ("naive cafe", "The Naïve Café!", True, "Naïve Café"),
    # Punctuation split by the tokenizer (extra spaces in tok_text).
    ("1895", "(1895-1943).", True, "1895"),
    ("1895 - 1943", "(1895-1943).", True, "1895-1943"),
    # Cased model: no lower-casing.
    ("Smith", "John Smith's", False, "Smith"),
    # Failure fallbacks return orig_text: text not found (cased mismatch)...
    ("steve", "Steve", False, "Steve"),
    ("nothing", "John Smith", True, "John Smith"),
    # ...and lengths differing after removing spaces (the zero-width space is
    # deleted by the tokenizer's text cleaning).
    ("abc", "ab\u200bc", True, "ab\u200bc"),
])
def test_get_final_text(pred_text, orig_text, do_lower_case, expected):
    assert squad_answers.get_final_text(pred_text, orig_text, do_lower_case) == expected


# ---------------------------------------------------------------------------
# Predictions from hand-made logits.

def _feature(unique_id, example_index, tokens, doc_start, orig_index, max_context=None):
    """A PredictionFeature whose tokens from `doc_start` on (up to the final
    [SEP]) map to the words `orig_index[i]`."""
    n_doc = len(tokens) - doc_start - 1
    token_to_orig_map = {doc_start + i: orig_index[i] for i in range(n_doc)}
    if max_context is None:
        max_context = [True] * n_doc
    token_is_max_context = {doc_start + i: max_context[i] for i in range(n_doc)}
    return run_squad.PredictionFeature(unique_id, example_index, 0, tokens,
                                       token_to_orig_map, token_is_max_context)


def _logits(n, values):
    x = [-10.0] * n
    for i, v in values.items():
        x[i] = v
    return x


def test_compute_predictions_v1_nbest_order_and_filters():
    words = ["John", "Smith's", "car", "(red)."]
    tokens = ["[CLS]", "who", "[SEP]", "john", "smith", "'", "s", "car", "(", "red", ")",
              ".", "[SEP]"]
    feature = _feature(7, 0, tokens, 3, [0, 1, 1, 1, 2, 3, 3, 3, 3],
                       max_context=[True] * 8 + [False])
    example = run_squad.SquadExample("q1", "who", words)
    start = _logits(13, {3: 5.0, 4: 1.0, 9: 3.0, 1: 9.0, 11: 8.0, 0: 7.0})
    end = _logits(13, {4: 4.0, 9: 2.0, 3: 0.5, 1: 9.0, 11: 8.0, 0: 7.0})
    result = run_squad.RawResult(7, np.array(start, np.float32), end)
    preds, nbest, null_odds = squad_answers.compute_predictions(
        [example], [feature], [result], n_best_size=4, max_answer_length=3,
        do_lower_case=True, version_2_with_negative=False, verbose_logging=False)
    # Top-4 starts: 1 (question: invalid), 11 (not max context), 0 ([CLS]:
    # not in the document), 3; top-4 ends: 1, 11, 0, 4. Valid pairs: only
    # start 3 with end 4 (3 with 11 is 9 tokens > max_answer_length 3).
    assert preds == {"q1": "John Smith"}
    assert [e["text"] for e in nbest["q1"]] == ["John Smith"]
    assert nbest["q1"][0]["probability"] == 1.0
    assert nbest["q1"][0]["start_logit"] == 5.0 and nbest["q1"][0]["end_logit"] == 4.0
    assert null_odds == {}

    # With n_best_size 13 every pair is considered. Best: (9,11) 3+8=11
    # "red)." (the alignment keeps the original's "red)." of "(red)."), (3,4)
    # 9 "John Smith", (3,3) 5+0.5 "John", then the ties at 5.0 in the order
    # the pairs were made (starts by decreasing logit): (9,9) "red", (4,4)
    # "Smith". Equal texts are kept once.
    preds, nbest, _ = squad_answers.compute_predictions(
        [example], [feature], [result], n_best_size=13, max_answer_length=3,
        do_lower_case=True, version_2_with_negative=False, verbose_logging=False)
    texts = [e["text"] for e in nbest["q1"]]
    scores = [e["start_logit"] + e["end_logit"] for e in nbest["q1"]]
    assert texts[:5] == ["red).", "John Smith", "John", "red", "Smith"]
    assert scores == sorted(scores, reverse=True)
    assert len(texts) == len(set(texts)) <= 13
    probs = np.exp(np.array(scores) - max(scores))
    np.testing.assert_allclose([e["probability"] for e in nbest["q1"]],
                               probs / probs.sum(), rtol=1e-12)


def test_compute_predictions_v2_null_and_threshold():
    words = ["John", "Smith"]
    tokens = ["[CLS]", "who", "[SEP]", "john", "smith", "[SEP]"]
    feature = _feature(1, 0, tokens, 3, [0, 1])
    example = run_squad.SquadExample("q", "who", words)
    # Null score 2+1=3; best span (3,4): 2+0.5=2.5 -> null odds 0.5.
    result = run_squad.RawResult(1, _logits(6, {0: 2.0, 3: 2.0}), _logits(6, {0: 1.0, 4: 0.5}))
    for threshold, expected in [(0.0, ""), (0.5, "John Smith"), (1.0, "John Smith")]:
        preds, nbest, null_odds = squad_answers.compute_predictions(
            [example], [feature], [result], 20, 30, True, version_2_with_negative=True,
            null_score_diff_threshold=threshold, verbose_logging=False)
        assert preds == {"q": expected}
        assert null_odds == {"q": 0.5}
    assert nbest["q"][0] == collections.OrderedDict(
        [("text", ""), ("probability", nbest["q"][0]["probability"]),
         ("start_logit", 2.0), ("end_logit", 1.0)])
    assert nbest["q"][1]["text"] == "John Smith"


def test_compute_predictions_v2_only_null_does_not_crash(tmp_path):
    # n_best_size 1: the best start and end are both [CLS], so there is no
    # valid span and the n-best holds only the null answer. The original
    # crashed (best_non_null_entry None); now: "" and null odds 1e6.
    tokens = ["[CLS]", "who", "[SEP]", "john", "[SEP]"]
    feature = _feature(1, 0, tokens, 3, [0])
    example = run_squad.SquadExample("q", "who", ["John"])
    result = run_squad.RawResult(1, _logits(5, {0: 3.0}), _logits(5, {0: 3.0}))
    out = [str(tmp_path / n) for n in ("p.json", "n.json", "o.json")]
    preds, nbest, null_odds = run_squad.write_predictions(
        [example], [feature], [result], 1, 30, True, *out, version_2_with_negative=True,
        null_score_diff_threshold=0.0, verbose_logging=False)
    assert preds == {"q": ""}
    assert [e["text"] for e in nbest["q"]] == [""]
    assert null_odds == {"q": squad_answers.NO_ANSWER_NULL_ODDS}
    for path, value in zip(out, (preds, nbest, null_odds)):
        with open(path) as f:
            text = f.read()
        assert text == json.dumps(value, indent=4) + "\n"
    # At any threshold tuning keeps it null.
    assert squad_evaluate.apply_null_threshold(
        squad_evaluate.best_non_null_predictions(nbest), null_odds, 1e5) == {"q": ""}


def test_windows_pick_max_context_prediction():
    # The same document piece in two windows: only the window where it has
    # max context may start an answer.
    words = ["a", "b"]
    f0 = run_squad.PredictionFeature(1, 0, 0, ["[CLS]", "[SEP]", "a", "b", "[SEP]"],
                                     {2: 0, 3: 1}, {2: True, 3: False})
    f1 = run_squad.PredictionFeature(2, 0, 1, ["[CLS]", "[SEP]", "b", "[SEP]"],
                                     {2: 1}, {2: True})
    example = run_squad.SquadExample("q", "", words)
    r0 = run_squad.RawResult(1, _logits(5, {3: 9.0}), _logits(5, {3: 9.0}))
    r1 = run_squad.RawResult(2, _logits(4, {2: 1.0}), _logits(4, {2: 1.0}))
    preds, nbest, _ = squad_answers.compute_predictions(
        [example], [f0, f1], [r0, r1], 20, 30, False, version_2_with_negative=False,
        verbose_logging=False)
    assert nbest["q"][0]["start_logit"] == 1.0  # from window 1, not 9.0
    assert preds == {"q": "b"}


def test_get_best_indexes_and_softmax():
    assert squad_answers._get_best_indexes([1.0, 3.0, 2.0, 3.0], 3) == [1, 3, 2]
    probs = squad_answers._compute_softmax([1.0, 2.0, 3.0])
    expected = np.exp([1.0, 2.0, 3.0]) / np.exp([1.0, 2.0, 3.0]).sum()
    np.testing.assert_allclose(probs, expected, rtol=1e-12)
    assert squad_answers._compute_softmax([]) == []


# ---------------------------------------------------------------------------
# Official metrics (squad_evaluate.py), hand-computed.

def test_squad_evaluate_needs_neither_tensorflow_nor_run_squad():
    # Imported alone, in a fresh interpreter: no TensorFlow, no run_squad.
    code = ("import sys, squad_evaluate\n"
            "print(sorted(m for m in ('tensorflow', 'run_squad') if m in sys.modules))")
    proc = subprocess.run([PYTHON, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_normalize_and_f1_v1():
    assert squad_evaluate.normalize_answer("The  Cat, an apple!") == "cat apple"
    assert squad_evaluate.normalize_answer("theory") == "theory"  # "the" inside a word
    # pred "the big red dog" -> big red dog; gold "a red dog barks" -> red dog
    # barks; common 2: P 2/3, R 2/3, F1 2/3.
    assert squad_evaluate.f1_score_v1("the big red dog", "a red dog barks") == pytest.approx(2 / 3)
    assert squad_evaluate.f1_score_v1("", "") == 0  # 1.1: no overlap -> 0
    assert squad_evaluate.compute_f1("", "") == 1  # 2.0: both empty -> 1
    assert squad_evaluate.compute_f1("cat", "") == 0
    assert squad_evaluate.compute_exact("The Cat.", "cat") == 1


def _dataset(qas):
    return {"data": [{"title": "x", "paragraphs": [{"context": "c", "qas": qas}]}]}


def test_evaluate_v1_hand_computed():
    dataset = _dataset([
        {"id": "a", "question": "?", "answers": [{"text": "red dog"}, {"text": "dog"}]},
        {"id": "b", "question": "?", "answers": [{"text": "John Smith"}]},
        {"id": "c", "question": "?", "answers": [{"text": "x"}]},
    ])
    # a: "the dog" -> exact with gold 2 (1), F1 1; b: "Smith" -> exact 0,
    # F1 P 1 R 1/2 = 2/3; c: missing -> 0. EM 1/3, F1 (1 + 2/3) / 3.
    result = squad_evaluate.evaluate(dataset, {"a": "the dog", "b": "Smith"})
    assert list(result) == ["exact_match", "f1"]
    assert result["exact_match"] == pytest.approx(100 / 3)
    assert result["f1"] == pytest.approx(100 * (1 + 2 / 3) / 3)


V2_QAS = [
    # has answer, correct answer, null odds -2
    {"id": "h1", "question": "?", "answers": [{"text": "red dog"}]},
    # has answer, half right (F1 2/3, exact 0), null odds 1.5
    {"id": "h2", "question": "?", "answers": [{"text": "big cat"}]},
    # no answer, predicted "", null odds 0.5
    {"id": "n1", "question": "?", "answers": [], "is_impossible": True},
    # no answer, wrongly answered, null odds -1
    {"id": "n2", "question": "?", "answers": [], "is_impossible": True},
]
V2_PREDS = {"h1": "red dog", "h2": "cat", "n1": "", "n2": "tree"}
V2_ODDS = {"h1": -2.0, "h2": 1.5, "n1": 0.5, "n2": -1.0}


def test_evaluate_v2_hand_computed():
    dataset = _dataset(V2_QAS)
    result = squad_evaluate.evaluate_v2(dataset, V2_PREDS)
    # exact 1,0,1,0 -> 50; F1 1, 2/3, 1, 0 -> (8/3)/4.
    assert result == pytest.approx(collections.OrderedDict([
        ("exact", 50.0), ("f1", 100 * (8 / 3) / 4), ("total", 4),
        ("HasAns_exact", 50.0), ("HasAns_f1", 100 * (5 / 3) / 2), ("HasAns_total", 2),
        ("NoAns_exact", 50.0), ("NoAns_f1", 50.0), ("NoAns_total", 2)]))
    assert list(result) == ["exact", "f1", "total", "HasAns_exact", "HasAns_f1",
                            "HasAns_total", "NoAns_exact", "NoAns_f1", "NoAns_total"]

    # With null odds: na_prob_thresh 1.0 makes h2 (1.5 > 1) count as null
    # (F1 0). Best-threshold search, ascending odds h1 -2, n2 -1, n1 0.5,
    # h2 1.5, from all-null = 2 (the two no-answer questions):
    # F1: +1 -> 3 (best, thresh -2), -1 -> 2, +0 -> 2, +2/3 -> 2.67.
    # exact: +1 -> 3 (best at -2), -1, 0, +0 -> 2.
    result = squad_evaluate.evaluate(dataset, V2_PREDS, na_probs=V2_ODDS,
                                version_2_with_negative=True)
    assert result["exact"] == 50.0
    assert result["f1"] == pytest.approx(100 * 2 / 4)
    assert result["HasAns_f1"] == pytest.approx(50.0)
    assert result["best_exact"] == pytest.approx(75.0)
    assert result["best_exact_thresh"] == -2.0
    assert result["best_f1"] == pytest.approx(75.0)
    assert result["best_f1_thresh"] == -2.0


@pytest.mark.parametrize("version_2", [False, True])
def test_written_results_name_the_metric_as_the_log_and_file_do(tmp_path, version_2):
    """eval_results.json, its log lines and its "Wrote" line use the official
    scripts' name of the exact-match score: exact_match (SQuAD 1.1), exact
    (2.0)."""
    from scriptkit import file_io
    if version_2:
        dataset, predictions = _dataset(V2_QAS), V2_PREDS
    else:
        dataset, predictions = _dataset(V2_QAS[:2]), {"h1": "red dog", "h2": "cat"}
    file_io.forget_outputs()
    result = squad_evaluate.run_evaluation(dataset, str(tmp_path), "the test set",
                                           all_predictions=predictions,
                                           version_2_with_negative=version_2)
    name = "exact" if version_2 else "exact_match"
    assert list(result)[:2] == [name, "f1"]
    written = json.loads((tmp_path / "eval_results.json").read_text())
    assert list(written)[:2] == [name, "f1"]
    ((path, what),) = file_io.reported_outputs()
    file_io.forget_outputs()
    assert path == str(tmp_path / "eval_results.json")
    assert what == "%s = %s, f1 = %s" % (name, written[name], written["f1"])


def test_find_best_thresh_later_threshold():
    # n2 answered "" now: ascending h1 +1 (3), n2 +0 (3), n1 +0 (3), h2 +2/3
    # (3.67, best, threshold 1.5).
    preds = dict(V2_PREDS, n2="")
    qid_to_has_ans = {"h1": True, "h2": True, "n1": False, "n2": False}
    exact, f1 = squad_evaluate.get_raw_scores(_dataset(V2_QAS), preds)
    assert squad_evaluate.find_best_thresh(preds, f1, V2_ODDS, qid_to_has_ans) == (
        pytest.approx(100 * (3 + 2 / 3) / 4), 1.5)
    # All-null best: the official script reports threshold 0.0.
    bad = {"h1": "no", "h2": "no", "n1": "x", "n2": "y"}
    _, f1 = squad_evaluate.get_raw_scores(_dataset(V2_QAS), bad)
    assert squad_evaluate.find_best_thresh(bad, f1, V2_ODDS, qid_to_has_ans) == (50.0, 0.0)
    assert squad_evaluate.search_null_threshold(bad, f1, V2_ODDS, qid_to_has_ans) == (50.0, None)


def _nbest(first, *more):
    return [{"text": t, "probability": 0.0, "start_logit": 0.0, "end_logit": 0.0}
            for t in (first,) + more]


def test_tune_null_threshold_sign_convention():
    # The best non-null answers (first non-empty n-best text) are scored, not
    # predictions.json: h2's "cat" is reachable even though a threshold of 0
    # predicted "" for it.
    nbest = {"h1": _nbest("red dog"), "h2": _nbest("", "cat"), "n1": _nbest("", "dog"),
             "n2": _nbest("tree", "")}
    threshold, preds, result = squad_evaluate.tune_null_threshold(_dataset(V2_QAS), nbest, V2_ODDS)
    # Ascending odds: h1 -2 (+1 -> 3), n2 -1 (-1 -> 2), n1 0.5 (-1 -> 1),
    # h2 1.5 (+2/3 -> 1.67): best is 3 at threshold -2.
    assert threshold == -2.0
    # null where odds > threshold, as the original's null_score_diff_threshold.
    assert preds == {"h1": "red dog", "h2": "", "n1": "", "n2": ""}
    assert result["f1"] == pytest.approx(75.0)
    assert result["null_score_diff_threshold"] == -2.0

    # Brute force over every threshold gives the same best F1.
    def f1_at(t):
        p = squad_evaluate.apply_null_threshold(
            squad_evaluate.best_non_null_predictions(nbest), V2_ODDS, t)
        return squad_evaluate.evaluate_v2(_dataset(V2_QAS), p)["f1"]
    candidates = list(V2_ODDS.values()) + [-100.0, 100.0]
    assert max(f1_at(t) for t in candidates) == pytest.approx(result["f1"])

    # A positive best threshold: h2 must be answered.
    odds = dict(V2_ODDS, n2=3.0, n1=4.0)
    threshold, preds, result = squad_evaluate.tune_null_threshold(_dataset(V2_QAS), nbest, odds)
    assert threshold == 1.5
    assert preds == {"h1": "red dog", "h2": "cat", "n1": "", "n2": ""}
    assert result["f1"] == pytest.approx(100 * (1 + 2 / 3 + 2) / 4)

    # All-null best: a threshold below every odds.
    bad = {k: _nbest("zzz") for k in nbest}
    threshold, preds, result = squad_evaluate.tune_null_threshold(_dataset(V2_QAS), bad, V2_ODDS)
    assert threshold < -2.0
    assert set(preds.values()) == {""}


def _run_squad_evaluate(tmp_path, dataset, predictions, *options):
    data_file, pred_file = tmp_path / "data.json", tmp_path / "pred.json"
    data_file.write_text(json.dumps(dataset))
    pred_file.write_text(json.dumps(predictions))
    return subprocess.run([PYTHON, "squad_evaluate.py", str(data_file), str(pred_file)]
                          + list(options), cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def test_squad_evaluate_from_the_shell(tmp_path):
    # SQuAD 2.0 (the questions carry "is_impossible"), with the null odds:
    # the numbers of test_evaluate_v2_hand_computed.
    odds_file = tmp_path / "odds.json"
    odds_file.write_text(json.dumps(V2_ODDS))
    proc = _run_squad_evaluate(tmp_path, _dataset(V2_QAS), V2_PREDS,
                               "--na-prob-file", str(odds_file), "-o", str(tmp_path / "o.json"))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout, object_pairs_hook=collections.OrderedDict)
    assert result == squad_evaluate.evaluate_v2(_dataset(V2_QAS), V2_PREDS, na_probs=V2_ODDS)
    assert (result["best_f1"], result["best_f1_thresh"]) == (pytest.approx(75.0), -2.0)
    assert json.loads((tmp_path / "o.json").read_text()) == result

    # SQuAD 1.1: the numbers of test_evaluate_v1_hand_computed (c unanswered).
    dataset = _dataset([
        {"id": "a", "question": "?", "answers": [{"text": "red dog"}, {"text": "dog"}]},
        {"id": "b", "question": "?", "answers": [{"text": "John Smith"}]},
        {"id": "c", "question": "?", "answers": [{"text": "x"}]}])
    proc = _run_squad_evaluate(tmp_path, dataset, {"a": "the dog", "b": "Smith"})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == pytest.approx(
        {"exact_match": 100 / 3, "f1": 100 * (1 + 2 / 3) / 3})
    assert "Unanswered questions will receive score 0: 1" in proc.stderr

    # Bad input: one line, exit status 1.
    proc = _run_squad_evaluate(tmp_path, _dataset(V2_QAS), {"h1": "red dog"})
    assert proc.returncode == 1
    assert proc.stderr == "ERROR: The predictions miss 3 of the 4 questions (first: 'h2')\n"


# ---------------------------------------------------------------------------
# Bad input.

@pytest.mark.parametrize("content, message", [
    ("{not json", "is not a JSON file"),
    ('{"version": "1.1"}', 'top-level "data"'),
    ('{"data": [{"title": "T"}]}', 'article 0 (\'T\'): missing field "paragraphs"'),
    ('{"data": [{"paragraphs": [{"qas": []}]}]}', 'paragraph 0: missing field "context"'),
    ('{"data": [{"paragraphs": [{"context": "c"}]}]}', 'missing field "qas"'),
    ('{"data": [{"paragraphs": [{"context": "c", "qas": [{"question": "q"}]}]}]}',
     'question 0: missing field "id"'),
    ('{"data": [{"paragraphs": [{"context": "c", "qas": [{"id": "x1"}]}]}]}',
     "question id 'x1': missing field \"question\""),
    ('{"data": [{"paragraphs": [{"context": "c", "qas": [{"id": "x2", "question": "q"}]}]}]}',
     "question id 'x2': missing field \"answers\""),
    ('{"data": [{"paragraphs": [{"context": "c", "qas": [{"id": "x3", "question": "q", '
     '"answers": [{"text": "c"}]}]}]}]}', "question id 'x3', answer: missing field "
     "\"answer_start\""),
    ('{"data": [{"paragraphs": [{"context": "c", "qas": [{"id": "x4", "question": "q", '
     '"answers": []}]}]}]}', "question id 'x4': for training, each question should have "
     "exactly 1 answer"),
])
def test_bad_training_file_errors(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(InputError) as e:
        run_squad.read_squad_examples(str(path), is_training=True,
                                      version_2_with_negative=False)
    assert message in str(e.value)
    assert "--train_file %s" % path in str(e.value)


def test_missing_file_error(tmp_path):
    with pytest.raises(InputError, match="--predict_file: file not found"):
        run_squad.read_squad_examples(str(tmp_path / "nope.json"), False, False)


# ---------------------------------------------------------------------------
# run_squad as a library: the building blocks work with the flags unparsed
# (as in the original's Colab recipes), so nothing may read FLAGS.x.

_LIBRARY_SCRIPT = r"""
import json, os, sys
root, tmp = sys.argv[1], sys.argv[2]
sys.path[:0] = [root, os.path.join(root, "tests")]
import numpy as np
import tensorflow.compat.v1 as tf
from absl import flags
import modeling, run_squad, tokenization
from scriptkit import runtime
from tiny import write_config, write_vocab

def unparsed():
    assert not flags.FLAGS.is_parsed()

unparsed()
words = "who what is the red car of john smith a blue boat".split()
vocab = write_vocab(tmp, words)
config = modeling.BertConfig.from_json_file(write_config(tmp, len(words) + 5))
tokenizer = tokenization.FullTokenizer(vocab, do_lower_case=True)
context = "the red car of john smith is a blue boat of the red car of john"
squad = {"data": [{"paragraphs": [{"context": context, "qas": [
    {"id": "a", "question": "what is the car of john smith", "is_impossible": False,
     "answers": [{"text": "blue boat", "answer_start": context.find("blue boat")}]},
    {"id": "n", "question": "who", "is_impossible": True, "answers": []}]}]}]}
path = os.path.join(tmp, "squad.json")
with open(path, "w") as f:
    json.dump(squad, f)

# Reading: the defaults are the flags' defaults (SQuAD 1.1: "is_impossible"
# is not read, so a question without answers is an error for training).
examples = run_squad.read_squad_examples(path, is_training=True,
                                         version_2_with_negative=True)
assert [(e.qas_id, e.is_impossible, e.start_position) for e in examples] == [
    ("a", False, 8), ("n", True, -1)], examples
try:
    run_squad.read_squad_examples(path, is_training=True)
    raise AssertionError("SQuAD 1.1 default read an unanswerable question")
except run_squad.InputError as e:
    assert "exactly 1 answer" in str(e)
unparsed()

# Features through FeatureWriter and input_fn: 16 tokens, 2 windows each.
seq_length = 16
record_file = os.path.join(tmp, "train.tf_record")
writer = run_squad.FeatureWriter(record_file, is_training=True)
features = []
def keep(feature):
    writer.process_feature(feature)
    features.append(feature)
run_squad.convert_examples_to_features(examples, tokenizer, seq_length, 4, 8, True, keep)
writer.close()
assert len(features) > len(examples)
answer = [f for f in features if f.start_position > 0]
assert answer and all(f.tokens[f.start_position:f.end_position + 1] == ["blue", "boat"]
                      for f in answer)

with tf.Graph().as_default():
    tf.set_random_seed(0)
    dataset = run_squad.input_fn_builder(record_file, seq_length, True, True)(
        {"batch_size": 2})
    batch = tf.data.make_one_shot_iterator(dataset).get_next()
    model_fn = run_squad.model_fn_builder(config, None, 1e-3, 10, 1, False, False)
    spec = model_fn(batch, None, runtime.ModeKeys.TRAIN, {"batch_size": 2})
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        losses = [sess.run([spec.train_op, spec.loss])[1] for _ in range(3)]
        step = sess.run(tf.train.get_global_step())
    assert np.all(np.isfinite(losses)) and step == 3, (losses, step)
unparsed()

# create_model: the head is one dense layer over BERT's sequence output.
ids = np.array([f.input_ids for f in features[:3]], np.int32)
mask = np.array([f.input_mask for f in features[:3]], np.int32)
segments = np.array([f.segment_ids for f in features[:3]], np.int32)
with tf.Graph().as_default():
    start, end = run_squad.create_model(config, False, tf.constant(ids), tf.constant(mask),
                                        tf.constant(segments), False)
    with tf.variable_scope(tf.get_variable_scope(), reuse=True):
        encoder = modeling.BertModel(config, False, tf.constant(ids), tf.constant(mask),
                                     tf.constant(segments), scope="bert")
        weights = tf.get_variable("cls/squad/output_weights")
        bias = tf.get_variable("cls/squad/output_bias")
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(bias.assign([0.5, -0.25]))
        start, end, hidden, w, b = sess.run(
            [start, end, encoder.get_sequence_output(), weights, bias])
assert start.shape == end.shape == (3, seq_length)
reference = hidden @ w.T + b  # [3, seq_length, 2]
np.testing.assert_allclose(start, reference[..., 0], rtol=1e-5, atol=1e-5)
np.testing.assert_allclose(end, reference[..., 1], rtol=1e-5, atol=1e-5)
unparsed()

# Predictions with the defaults: SQuAD 1.1, no null_odds.json.
predict_examples = run_squad.read_squad_examples(path, is_training=False)
predict_features = []
run_squad.convert_examples_to_features(predict_examples, tokenizer, seq_length, 4, 8, False,
                                       predict_features.append)
rng = np.random.RandomState(0)
results = [run_squad.RawResult(f.unique_id, rng.randn(seq_length), rng.randn(seq_length))
           for f in predict_features]
files = [os.path.join(tmp, n) for n in ("p.json", "n.json", "o.json")]
predictions, nbest, null_odds = run_squad.write_predictions(
    predict_examples, predict_features, results, 5, 4, True, *files)
assert list(predictions) == ["a", "n"] and null_odds == {}
assert all(text in context for text in predictions.values()), predictions
assert os.path.exists(files[0]) and not os.path.exists(files[2])
unparsed()
print("library use ok")
"""


@pytest.mark.slow
def test_library_use_with_flags_unparsed(tmp_path):
    proc = subprocess.run([PYTHON, "-c", _LIBRARY_SCRIPT, ROOT, str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "library use ok" in proc.stdout


# ---------------------------------------------------------------------------
# Differential test of the data pipeline and write_predictions against
# Google's original, in a subprocess.

_ORIGINAL_SCRIPT = r"""
import json, sys, types
sys.path.insert(0, sys.argv[1])
# The original modeling/optimization need tf.contrib; the data functions
# under test do not use them.
sys.modules["bert.modeling"] = types.ModuleType("bert.modeling")
sys.modules["bert.optimization"] = types.ModuleType("bert.optimization")
from reference import load_original
rs = load_original("run_squad")
rs.FLAGS(["run_squad"])
spec = json.load(open(sys.argv[2]))
out = {}
for run in spec["runs"]:
    rs.FLAGS.version_2_with_negative = run["v2"]
    rs.FLAGS.null_score_diff_threshold = run["threshold"]
    tok = rs.tokenization.FullTokenizer(spec["vocab"], do_lower_case=True)
    examples = rs.read_squad_examples(run["file"], is_training=run["training"])
    features = []
    rs.convert_examples_to_features(examples, tok, spec["max_seq_length"],
                                    spec["doc_stride"], spec["max_query_length"],
                                    run["training"], features.append)
    out[run["name"]] = {
        "examples": [[e.qas_id, e.doc_tokens, e.orig_answer_text, e.start_position,
                      e.end_position, e.is_impossible] for e in examples],
        "features": [[f.unique_id, f.example_index, f.doc_span_index, f.tokens,
                      sorted(f.token_to_orig_map.items()),
                      sorted(f.token_is_max_context.items()), f.input_ids, f.input_mask,
                      f.segment_ids, f.start_position, f.end_position] for f in features],
    }
    if not run["training"]:
        logits = spec["logits"][run["name"]]
        results = [rs.RawResult(f.unique_id, logits[str(f.unique_id)][0],
                                logits[str(f.unique_id)][1]) for f in features]
        d = run["out_dir"]
        rs.write_predictions(examples, features, results, spec["n_best_size"],
                             spec["max_answer_length"], True, d + "/predictions.json",
                             d + "/nbest_predictions.json", d + "/null_odds.json")
out["final_texts"] = [rs.get_final_text(pred, orig, lower)
                      for pred, orig, lower in spec["final_text_cases"]]
json.dump(out, open(sys.argv[3], "w"))
"""


def _final_text_cases():
    """(pred_text, orig_text, do_lower_case) for get_final_text: texts with
    accents, punctuation, no-break and zero-width spaces; predictions mostly
    runs of their tokens (sometimes cut inside a token), else unrelated."""
    rng = np.random.RandomState(1)
    parts = ["ab", "AB", "c", "'s", ".", "-", "(", ")", "\u00e9", "Caf\u00e9", "Na\u00efve",
             "(1895-1943).", "Smith's", "\u00a0", "\u200b", "x y", "  "]
    cases = []
    for _ in range(600):
        orig = " ".join("".join(rng.choice(parts, size=rng.randint(1, 4)))
                        for _ in range(rng.randint(1, 4)))
        lower = bool(rng.rand() < 0.7)
        tokens = tokenization.BasicTokenizer(do_lower_case=lower).tokenize(orig)
        if tokens and rng.rand() < 0.85:
            first = rng.randint(len(tokens))
            pred = " ".join(tokens[first:rng.randint(first, len(tokens)) + 1])
            if rng.rand() < 0.3:
                cut = rng.randint(len(pred) + 1)
                pred = pred[cut:] if rng.rand() < 0.5 else pred[:cut]
        else:
            pred = "".join(rng.choice(parts, size=rng.randint(0, 3)))
        cases.append([pred, orig, lower])
    return cases


def _corpus():
    """Contexts and questions for the differential and end-to-end tests.

    Returns:
      (train_v1, dev_v1, train_v2, dev_v2) article lists, and the vocabulary.
    """
    topics = [
        ("Johnson founded the red company in 1895 near the river. Workers built "
         "boats, carts and (wooden) houses for the town. The company's leader, "
         "Steve Smith, sold it in 1943 to a large bank. Later the bank closed the "
         "old factory and the workers moved to the city to build new houses. "
         "Today the river town is quiet and green, and visitors walk along "
         "the water to see the old boats."),
        ("The museum keeps maps, coins and letters from the early city. Its "
         "first director, Anna Berg, opened the doors in 1921 after a long "
         "winter. Children visit the museum every spring to see the coins and "
         "the maps. A new wing for letters was added in 1977 by the city "
         "council. The wing is small but bright, with windows facing the park "
         "and a garden of tall trees behind it."),
    ]
    answerable = [
        [("When was the company founded?", "1895"), ("Who led the company?", "Steve Smith"),
         ("What did workers build?", "boats, carts and (wooden) houses"),
         ("Where do visitors walk?", "along the water")],
        [("Who was the first director?", "Anna Berg"), ("When was the wing added?", "1977"),
         ("What does the museum keep?", "maps, coins and letters"),
         ("What is behind the wing?", "a garden of tall trees")],
    ]
    impossible = [["Who bought the boats?", "What color is the bank?"],
                  ["Who closed the museum?", "When did Anna Berg die?"]]

    def articles(version_2, dev):
        result = []
        for t, (context, qs) in enumerate(zip(topics, answerable)):
            qas = []
            for i, (question, answer) in enumerate(qs):
                start = context.find(answer)
                assert start >= 0
                answers = [{"text": answer, "answer_start": start}]
                if dev:  # a second, differently worded gold answer
                    answers.append({"text": "the " + answer, "answer_start": start})
                qa = {"id": "t%dq%d" % (t, i), "question": question, "answers": answers}
                if version_2:
                    qa["is_impossible"] = False
                qas.append(qa)
            if version_2:
                for i, question in enumerate(impossible[t]):
                    qas.append({"id": "t%dn%d" % (t, i), "question": question, "answers": [],
                                "is_impossible": True})
            result.append({"title": "topic%d" % t,
                           "paragraphs": [{"context": context, "qas": qas}]})
        return result

    words = set()
    basic = tokenization.BasicTokenizer(do_lower_case=True)
    for text in topics + [q for qs in answerable for q, _ in qs] + [
            q for qs in impossible for q in qs]:
        words.update(basic.tokenize(text))
    # Some words only as word pieces, so answers span "##" pieces.
    words -= {"johnson", "director", "wooden"}
    vocab = sorted(words) + ["john", "##son", "direct", "##or", "wood", "##en"]
    return (articles(False, False), articles(False, True), articles(True, False),
            articles(True, True), vocab)


@pytest.mark.slow
def test_pipeline_and_predictions_match_original(tmp_path):
    train_v1, dev_v1, train_v2, dev_v2, words = _corpus()
    vocab = write_vocab(str(tmp_path), words)
    files = {}
    for name, articles in [("train_v1", train_v1), ("dev_v1", dev_v1),
                           ("train_v2", train_v2), ("dev_v2", dev_v2)]:
        files[name] = _write_squad(tmp_path / (name + ".json"), articles)
    tok = tokenization.FullTokenizer(vocab, do_lower_case=True)
    lengths = dict(max_seq_length=48, doc_stride=16, max_query_length=8)
    runs = [
        dict(name="train_v1", file=files["train_v1"], training=True, v2=False, threshold=0.0),
        dict(name="train_v2", file=files["train_v2"], training=True, v2=True, threshold=0.0),
        dict(name="dev_v1", file=files["dev_v1"], training=False, v2=False, threshold=0.0),
        dict(name="dev_v2", file=files["dev_v2"], training=False, v2=True, threshold=-0.5),
    ]
    rng = np.random.RandomState(0)
    ours = {}
    logits = {}
    for run in runs:
        run["out_dir"] = str(tmp_path / ("orig_" + run["name"]))
        os.makedirs(run["out_dir"])
        examples = run_squad.read_squad_examples(run["file"], run["training"], run["v2"])
        features = []
        run_squad.convert_examples_to_features(examples, tok, lengths["max_seq_length"],
                                               lengths["doc_stride"],
                                               lengths["max_query_length"],
                                               run["training"], features.append)
        ours[run["name"]] = {
            "examples": [[e.qas_id, e.doc_tokens, e.orig_answer_text, e.start_position,
                          e.end_position, e.is_impossible] for e in examples],
            "features": [[f.unique_id, f.example_index, f.doc_span_index, f.tokens,
                          [list(x) for x in sorted(f.token_to_orig_map.items())],
                          [list(x) for x in sorted(f.token_is_max_context.items())],
                          f.input_ids, f.input_mask, f.segment_ids, f.start_position,
                          f.end_position] for f in features],
        }
        if not run["training"]:
            assert len(features) > len(examples)  # windows happened
            # float32 logits, sometimes with ties.
            logits[run["name"]] = {
                str(f.unique_id): np.round(rng.randn(2, 48) * 3, 1).astype(np.float32).tolist()
                for f in features}
            our_dir = tmp_path / ("ours_" + run["name"])
            our_dir.mkdir()
            results = [run_squad.RawResult(f.unique_id,
                                           np.array(logits[run["name"]][str(f.unique_id)][0],
                                                    np.float32),
                                           logits[run["name"]][str(f.unique_id)][1])
                       for f in features]
            run_squad.write_predictions(
                examples, features, results, 5, 10, True, str(our_dir / "predictions.json"),
                str(our_dir / "nbest_predictions.json"), str(our_dir / "null_odds.json"),
                version_2_with_negative=run["v2"], null_score_diff_threshold=run["threshold"],
                verbose_logging=False)

    final_text_cases = _final_text_cases()
    spec = dict(runs=runs, vocab=vocab, logits=logits, n_best_size=5, max_answer_length=10,
                final_text_cases=final_text_cases, **lengths)
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(spec))
    out_path = tmp_path / "original.json"
    subprocess.run([PYTHON, "-c", _ORIGINAL_SCRIPT, os.path.join(ROOT, "tests"),
                    str(spec_path), str(out_path)], check=True, cwd=ROOT,
                   capture_output=True, timeout=300)
    original = json.loads(out_path.read_text())
    ours_final_texts = [squad_answers.get_final_text(*case) for case in final_text_cases]
    assert ours_final_texts == original["final_texts"]
    # The cases exercise both the alignment and its fallback to orig_text.
    trimmed = sum(text != case[1] for text, case in zip(ours_final_texts, final_text_cases))
    assert 100 < trimmed < len(final_text_cases) - 100
    for run in runs:
        assert ours[run["name"]] == original[run["name"]], run["name"]
        if not run["training"]:
            names = ["predictions.json", "nbest_predictions.json"]
            if run["v2"]:
                names.append("null_odds.json")
            for name in names:
                ours_text = (tmp_path / ("ours_" + run["name"]) / name).read_text()
                original_text = (tmp_path / ("orig_" + run["name"]) / name).read_text()
                assert ours_text == original_text, (run["name"], name)
    # Training answers really were located (not all out of span).
    assert any(f[9] > 0 for f in ours["train_v1"]["features"])


# ---------------------------------------------------------------------------
# End to end: main with do_train and do_predict on a tiny model.

def _main_flags(tmp_path, version_2, **overrides):
    train_v1, dev_v1, train_v2, dev_v2, words = _corpus()
    train, dev = (train_v2, dev_v2) if version_2 else (train_v1, dev_v1)
    vocab = write_vocab(str(tmp_path), words)
    values = dict(
        vocab_file=vocab,
        bert_config_file=write_config(str(tmp_path), len(words) + 5),
        output_dir=str(tmp_path / "out"),
        train_file=_write_squad(tmp_path / "train.json", train),
        predict_file=_write_squad(tmp_path / "dev.json", dev),
        init_checkpoint=None, do_lower_case=True, do_train=True, do_predict=True,
        max_seq_length=64, doc_stride=16, max_query_length=16, train_batch_size=4,
        predict_batch_size=8, learning_rate=1e-3, num_train_epochs=2.0,
        warmup_proportion=0.1, save_checkpoints_steps=1000, iterations_per_loop=1000,
        n_best_size=20, max_answer_length=10, verbose_logging=False,
        version_2_with_negative=version_2, null_score_diff_threshold=0.0,
        evaluate_only=False, tune_null_threshold=version_2, use_tpu=False,
        gradient_accumulation_steps=1, recompute_grad=False, use_xla=False,
        precision="fp32", distribution_strategy="none", dynamic_padding=False,
        length_buckets=None, input_seed=0)
    values.update(overrides)
    return values, dev


def _run_main(values):
    """run_squad.main with exactly the flag `values`, its runs seeded."""
    tiny.run_main_seeded(run_squad.main, values)


def _read(path):
    with open(path) as f:
        text = f.read()
    value = json.loads(text, object_pairs_hook=collections.OrderedDict)
    assert text == json.dumps(value, indent=4) + "\n"  # the original's format
    return value


def _question_ids(articles):
    return [qa["id"] for a in articles for p in a["paragraphs"] for qa in p["qas"]]


def _check_common_outputs(out, dev, values):
    assert not [n for n in os.listdir(out) if ".tmp-" in n]  # no partial files
    n_records = sum(1 for _ in tf.data.TFRecordDataset(os.path.join(out, "eval.tf_record")))
    assert n_records > len(_question_ids(dev))  # documents were split into windows
    predictions = _read(os.path.join(out, "predictions.json"))
    nbest = _read(os.path.join(out, "nbest_predictions.json"))
    assert list(predictions) == _question_ids(dev) == list(nbest)
    contexts = " ".join(p["context"] for a in dev for p in a["paragraphs"])
    for qid, entries in nbest.items():
        assert 1 <= len(entries) <= values["n_best_size"] + 1
        assert [e["start_logit"] + e["end_logit"] for e in entries] == sorted(
            [e["start_logit"] + e["end_logit"] for e in entries], reverse=True) or (
            values["version_2_with_negative"])  # 2.0 appends the null answer last
        assert math.isclose(sum(e["probability"] for e in entries), 1.0, rel_tol=1e-9)
        for e in entries:
            # Answers are spans of the original text ("empty": the original's
            # placeholder when no span is valid).
            assert e["text"] in contexts or e["text"] == "empty"
    # The tiny model's best starts and ends favour the question's positions:
    # with the 20 best of each (the script's default) real spans are found.
    assert any(e["text"] not in ("empty", "") for entries in nbest.values() for e in entries)
    return predictions, nbest


@pytest.mark.slow
def test_main_squad_v1_train_predict_evaluate(tmp_path):
    values, dev = _main_flags(tmp_path, version_2=False)
    # Stopped by a SIGTERM at step 2 and resumed (training.ResumableTrainer).
    assert tiny.run_main_interrupted(run_squad.main, values, at=2).endswith("model.ckpt-2")
    out = values["output_dir"]
    assert os.path.exists(os.path.join(out, "train.tf_record"))
    assert tf.train.latest_checkpoint(out).endswith("model.ckpt-4")  # 8 questions, 2 ep, 4
    predictions, nbest = _check_common_outputs(out, dev, values)
    assert not os.path.exists(os.path.join(out, "null_odds.json"))
    for qid, text in predictions.items():
        assert text == nbest[qid][0]["text"]
    result = _read(os.path.join(out, "eval_results.json"))
    assert list(result) == ["exact_match", "f1"]
    assert result == squad_evaluate.evaluate_v1(dev, predictions)
    assert 0.0 <= result["exact_match"] <= result["f1"] <= 100.0

    # --evaluate_only rescoring the same files from the command line; a
    # prediction replaced by a gold answer raises the scores accordingly.
    qid = next(iter(predictions))
    predictions[qid] = dev[0]["paragraphs"][0]["qas"][0]["answers"][0]["text"]
    with open(os.path.join(out, "predictions.json"), "w") as f:
        f.write(json.dumps(predictions, indent=4) + "\n")
    proc = subprocess.run(
        [PYTHON, "run_squad.py", "--evaluate_only", "--predict_file=" + values["predict_file"],
         "--output_dir=" + out], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rescored = _read(os.path.join(out, "eval_results.json"))
    assert rescored == squad_evaluate.evaluate_v1(dev, predictions)
    assert rescored["exact_match"] >= result["exact_match"]

    # --dynamic_padding scores every span the same: the attention mask makes
    # padding inert. One window a batch, so the windows shorter than 60
    # pieces (57 to 58 here) are cut to 60. The n-best lists (and even the
    # best answer) may differ: padding positions can take places among the
    # padded run's 20 best starts or ends, places that real positions take
    # once that padding is cut; so only the spans both runs list compare.
    dynamic = dict(values, output_dir=str(tmp_path / "dynamic"), do_train=False,
                   init_checkpoint=tf.train.latest_checkpoint(out), dynamic_padding=True,
                   length_buckets=["24", "48", "60"], predict_batch_size=1)
    _run_main(dynamic)
    dynamic_nbest = _read(os.path.join(dynamic["output_dir"], "nbest_predictions.json"))
    for qid, entries in nbest.items():
        padded = {e["text"]: (e["start_logit"], e["end_logit"]) for e in entries}
        cut = {e["text"]: (e["start_logit"], e["end_logit"]) for e in dynamic_nbest[qid]}
        common = sorted(set(padded) & set(cut) - {"empty"})
        assert common, (entries, dynamic_nbest[qid])
        np.testing.assert_allclose([padded[t] for t in common], [cut[t] for t in common],
                                   atol=1e-5)


@pytest.mark.slow
def test_main_squad_v2_train_predict_tune(tmp_path):
    values, dev = _main_flags(tmp_path, version_2=True)
    _run_main(values)
    out = values["output_dir"]
    predictions, nbest = _check_common_outputs(out, dev, values)
    null_odds = _read(os.path.join(out, "null_odds.json"))
    assert list(null_odds) == list(predictions)
    non_null = squad_evaluate.best_non_null_predictions(nbest)
    for qid, text in predictions.items():
        assert "" in [e["text"] for e in nbest[qid]]
        # The original's rule: "" iff null odds > --null_score_diff_threshold.
        assert text == ("" if null_odds[qid] > 0.0 else non_null[qid])

    result = _read(os.path.join(out, "eval_results.json"))
    assert list(result) == [
        "exact", "f1", "total", "HasAns_exact", "HasAns_f1", "HasAns_total", "NoAns_exact",
        "NoAns_f1", "NoAns_total", "best_exact", "best_exact_thresh", "best_f1",
        "best_f1_thresh"]
    assert result["total"] == 12 and result["HasAns_total"] == 8
    assert result == squad_evaluate.evaluate_v2(dev, predictions, na_probs=null_odds)

    # Tuned predictions: the untuned predictions.json is kept, the tuned ones
    # apply the chosen threshold with the same rule, and no threshold does
    # better on this file.
    tuned = _read(os.path.join(out, "eval_results_best_threshold.json"))
    threshold = tuned["null_score_diff_threshold"]
    tuned_predictions = _read(os.path.join(out, "predictions_best_threshold.json"))
    assert tuned_predictions == {q: "" if null_odds[q] > threshold else non_null[q]
                                 for q in null_odds}
    thresholds = list(null_odds.values()) + [min(null_odds.values()) - 1]
    f1s = [squad_evaluate.evaluate_v2(
        dev, squad_evaluate.apply_null_threshold(non_null, null_odds, t))["f1"]
        for t in thresholds]
    assert tuned["f1"] == pytest.approx(max(f1s))
    assert tuned["f1"] >= result["f1"] - 1e-9

    # --evaluate_only in-process gives the same results from the files.
    os.remove(os.path.join(out, "eval_results.json"))
    _run_main(dict(values, evaluate_only=True, do_train=False, do_predict=False))
    assert _read(os.path.join(out, "eval_results.json")) == result
    assert _read(os.path.join(out, "eval_results_best_threshold.json")) == tuned


def test_main_flag_errors(tmp_path):
    values, _ = _main_flags(tmp_path, version_2=False)
    for overrides, message in [
            (dict(do_train=False, do_predict=False), "Nothing to do: set --do_train"),
            (dict(train_file=None), r"^Missing required flag\(s\): --train_file$"),
            (dict(predict_file=None), r"^Missing required flag\(s\): --predict_file$"),
            (dict(train_file=str(tmp_path / "missing.json")), "--train_file: file not found"),
            (dict(max_query_length=61), r"--max_seq_length \(64\) leaves no room .* "
             r"--max_query_length \(61\) \+ 3"),
            (dict(doc_stride=0), "--doc_stride must be at least 1, not 0"),
            (dict(max_seq_length=128), "Cannot use sequence length 128 because the BERT "
             r"model was only trained up to sequence length 64 \(--max_seq_length"),
            (dict(tune_null_threshold=True), "--tune_null_threshold needs"),
            (dict(vocab_file=None), "--vocab_file")]:
        with pytest.raises(InputError, match=message):
            _run_main(dict(values, **overrides))
    with pytest.raises(InputError, match="has no answers to evaluate"):
        no_answers = _write_squad(tmp_path / "q.json", [{"paragraphs": [{
            "context": "c", "qas": [{"id": "1", "question": "q"}]}]}])
        _run_main(dict(values, evaluate_only=True, predict_file=no_answers))


def test_script_defaults_hold_whichever_script_defined_the_shared_flags():
    """--max_seq_length and --doc_stride are shared flags, defined once per
    process by the first script imported; each script's run still takes its
    own defaults where the command line leaves them unset."""
    from scriptkit import settings as settings_lib
    import run_classifier
    if not FLAGS.is_parsed():
        FLAGS.mark_as_parsed()
    with flagsaver.flagsaver(do_train=True):
        squad = settings_lib.from_flags(run_squad.Settings)
        classifier = settings_lib.from_flags(run_classifier.Settings)
        with flagsaver.flagsaver(max_seq_length=64):
            given = settings_lib.from_flags(run_squad.Settings)
    assert (squad.max_seq_length, squad.doc_stride) == (384, 128)
    assert (classifier.max_seq_length, classifier.doc_stride) == (128, None)
    assert given.max_seq_length == 64
