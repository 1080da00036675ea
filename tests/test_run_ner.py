"""Tests of run_ner.py: readers on the real file layouts (CoNLL-2003 with
-DOCSTART-, two-column Chinese-style files, IOB1/IOB2/BIOES), the conlleval
metric against hand-worked cases and seqeval, documents in windows with
maximal context, and the script end to end on a tiny model (a task that can
only be solved from context), its outputs, SavedModel and bad input."""

import functools
import json
import os
import random

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
from absl import flags

from scriptkit import ner_tags
from scriptkit import errors
import run_ner
import tiny
import tokenization

FLAGS = flags.FLAGS
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _write(path, text):
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    with open(str(path), "w", encoding="utf-8") as f:
        f.write(text)
    return str(path)


# ---------------------------------------------------------------------------
# Readers.

# The CoNLL-2003 layout: token POS chunk NER, IOB1 tags (an entity starts
# with I- unless it follows one of its own type), -DOCSTART- lines.
CONLL = """-DOCSTART- -X- -X- O

Mara NNP B-NP I-PER
Lind NNP I-NP I-PER
visited VBD B-VP O
Pinecombe NNP B-NP I-LOC
. . O O

Bakers NNPS B-NP I-ORG
Union NNP I-NP I-ORG
Fishers NNPS I-NP B-ORG
Guild NNP I-NP I-ORG
met VBD B-VP O

-DOCSTART- -X- -X- O

Hugo NNP B-NP I-PER
left VBD B-VP O
"""


def test_conll_2003_layout(tmp_path):
    path = _write(tmp_path / "eng.train", CONLL)
    f = run_ner.read_conll_file(path)
    assert f.tagged and f.has_docstart
    assert len(f.documents) == 2
    assert [len(d) for d in f.documents] == [2, 1]
    first, second = f.documents[0]
    assert first.words == ["Mara", "Lind", "visited", "Pinecombe", "."]
    assert first.tags == ["I-PER", "I-PER", "O", "I-LOC", "O"]
    assert first.lines == [3, 4, 5, 6, 7]
    assert second.tags == ["I-ORG", "I-ORG", "B-ORG", "I-ORG", "O"]
    assert f.documents[1][0].words == ["Hugo", "left"]
    assert ner_tags.detect_scheme(s.tags for s in run_ner.iter_sentences(f)) == "iob1"


def test_two_column_chinese_style_file(tmp_path):
    # One character per line, tab or space separated; U+3000 is a token.
    text = "中\tB-LOC\n国\tI-LOC\n很\tO\n大\tO\n\n王 B-PER\n五 I-PER\n\u3000 O\n\n好 O\n"
    path = _write(tmp_path / "train.txt", text)
    f = run_ner.read_conll_file(path)
    assert not f.has_docstart and f.tagged
    # Without -DOCSTART-, each sentence is a document of its own...
    assert [[s.words for s in d] for d in f.documents] == [
        [["中", "国", "很", "大"]], [["王", "五", "\u3000"]], [["好"]]]
    assert ner_tags.detect_scheme(s.tags for s in run_ner.iter_sentences(f)) == "iob2"
    # ... unless a flag groups consecutive sentences.
    grouped = run_ner.read_conll_file(path, sentences_per_document=2)
    assert [len(d) for d in grouped.documents] == [2, 1]


def test_untagged_file_and_windows_line_endings(tmp_path):
    path = _write(tmp_path / "test.txt", "\ufeffOne\r\nword\r\n\r\nper\r\nline\r\n")
    f = run_ner.read_conll_file(path)
    assert not f.tagged
    assert [s.words for s in run_ner.iter_sentences(f)] == [["One", "word"], ["per", "line"]]
    assert all(s.tags is None for s in run_ner.iter_sentences(f))


def test_plain_text_reader(tmp_path):
    basic = tokenization.BasicTokenizer(do_lower_case=False)
    path = _write(tmp_path / "raw.txt",
                  "Mara Lind visited Pinecombe.\n王五在北京\n\nHugo left, sadly.\n")
    f = run_ner.read_text_file(path, basic)
    assert [[s.words for s in d] for d in f.documents] == [
        [["Mara", "Lind", "visited", "Pinecombe", "."], ["王", "五", "在", "北", "京"]],
        [["Hugo", "left", ",", "sadly", "."]]]
    # Without blank lines: one document per line unless grouped.
    path = _write(tmp_path / "raw2.txt", "a b\nc\nd e\n")
    assert [len(d) for d in run_ner.read_text_file(path, basic).documents] == [1, 1, 1]
    assert [len(d) for d in run_ner.read_text_file(path, basic, 2).documents] == [2, 1]


def test_schemes_detected_and_converted():
    assert ner_tags.detect_scheme([["B-PER", "I-PER", "O", "B-LOC"]]) == "iob2"
    assert ner_tags.detect_scheme([["O", "I-PER"], ["B-LOC"]]) == "iob1"
    # An I- at the start of a sentence, or after another type, is IOB1.
    assert ner_tags.detect_scheme([["I-PER", "O"]]) == "iob1"
    assert ner_tags.detect_scheme([["B-PER", "I-LOC"]]) == "iob1"
    assert ner_tags.detect_scheme([["B-PER", "E-PER", "S-LOC"]]) == "bioes"
    assert ner_tags.detect_scheme([["O", "O"]]) == "iob2"
    iob1 = ["I-PER", "I-PER", "B-PER", "O", "I-LOC", "I-ORG", "B-ORG"]
    iob2 = ["B-PER", "I-PER", "B-PER", "O", "B-LOC", "B-ORG", "B-ORG"]
    assert ner_tags.iob1_to_iob2(iob1) == iob2
    assert ner_tags.iob2_to_iob1(iob2) == iob1
    # Predictions the model may make (I- after O) keep their meaning.
    assert ner_tags.iob2_to_iob1(["O", "I-PER", "B-PER"]) == ["O", "I-PER", "B-PER"]
    assert ner_tags.label_list_for(["PER", "LOC"], "iob1") == [
        "O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    assert ner_tags.label_list_for(["PER"], "bioes") == ["O", "B-PER", "I-PER", "E-PER",
                                                         "S-PER"]
    assert ner_tags.parse_labels_flag("O,B-PER,I-PER,B-LOC,I-LOC") == ["PER", "LOC"]
    assert ner_tags.parse_labels_flag("MISC, ORG") == ["MISC", "ORG"]


# ---------------------------------------------------------------------------
# The metric: hand-worked cases.

def test_metric_hand_worked_iob2():
    gold = [["B-PER", "I-PER", "O", "B-LOC"]]
    predicted = [["B-PER", "I-PER", "O", "B-ORG"]]
    r = ner_tags.evaluate_tags(gold, predicted)
    # Gold PER(0-1), LOC(3); predicted PER(0-1), ORG(3): 1 of 2 right.
    assert (r["precision"], r["recall"], r["f1"]) == (0.5, 0.5, 0.5)
    assert r["accuracy"] == 0.75
    assert (r["precision_PER"], r["recall_PER"], r["f1_PER"]) == (1.0, 1.0, 1.0)
    assert (r["precision_LOC"], r["recall_LOC"], r["f1_LOC"]) == (0.0, 0.0, 0.0)
    assert (r["precision_ORG"], r["recall_ORG"], r["f1_ORG"]) == (0.0, 0.0, 0.0)


def test_metric_hand_worked_boundaries():
    # A partly found entity counts as wrong; an entity does not continue
    # into the next sentence.
    gold = [["B-PER", "I-PER", "I-PER"], ["I-PER", "O"]]
    predicted = [["B-PER", "I-PER", "O"], ["I-PER", "O"]]
    r = ner_tags.evaluate_tags(gold, predicted)
    assert (r["num_gold_entities"], r["num_predicted_entities"],
            r["num_correct_entities"]) == (2, 2, 1)
    assert r["f1"] == 0.5
    assert r["accuracy"] == pytest.approx(4 / 5)


def test_metric_hand_worked_iob1_and_ill_formed():
    # IOB1: B- splits two adjacent entities of one type.
    assert ner_tags.extract_entities([["I-ORG", "I-ORG", "B-ORG", "I-ORG", "O"]]) == {
        ("ORG", 0, 0, 1), ("ORG", 0, 2, 3)}
    # conlleval's reading of ill-formed sequences: I- after O starts an
    # entity, a change of type starts another.
    assert ner_tags.extract_entities([["O", "I-LOC", "I-LOC", "I-PER", "B-PER"]]) == {
        ("LOC", 0, 1, 2), ("PER", 0, 3, 3), ("PER", 0, 4, 4)}
    assert ner_tags.extract_entities([["B-PER", "I-LOC"]]) == {("PER", 0, 0, 0),
                                                              ("LOC", 0, 1, 1)}
    # BIOES: S- is a one-word entity, E- ends one.
    assert ner_tags.extract_entities([["S-PER", "S-PER", "B-LOC", "I-LOC", "E-LOC",
                                      "E-LOC"]]) == {
        ("PER", 0, 0, 0), ("PER", 0, 1, 1), ("LOC", 0, 2, 4), ("LOC", 0, 5, 5)}
    # No predictions at all: precision 0, not an error.
    r = ner_tags.evaluate_tags([["B-PER"]], [["O"]])
    assert (r["precision"], r["recall"], r["f1"], r["accuracy"]) == (0.0, 0.0, 0.0, 0.0)


# ---------------------------------------------------------------------------
# The metric against seqeval (its default mode reads tags as conlleval does).

def _random_tags(rng, prefixes, types, n):
    tags = []
    for _ in range(n):
        if rng.random() < 0.35:
            tags.append("O")
        else:
            tags.append("%s-%s" % (rng.choice(prefixes), rng.choice(types)))
    return tags


@pytest.mark.parametrize("prefixes", [("B", "I"), ("I",), ("B", "I", "E", "S")])
def test_metric_matches_seqeval(prefixes):
    seqeval_metrics = pytest.importorskip("seqeval.metrics")
    from seqeval.metrics.sequence_labeling import precision_recall_fscore_support
    rng = random.Random(len(prefixes))
    types = ["PER", "LOC", "ORG-GOV"]
    for trial in range(200):
        lengths = [rng.randint(1, 8) for _ in range(rng.randint(1, 5))]
        gold = [_random_tags(rng, prefixes, types, n) for n in lengths]
        # Predictions: mostly the gold tags, with some changed.
        predicted = [[t if rng.random() < 0.7 else _random_tags(rng, prefixes, types, 1)[0]
                      for t in sentence] for sentence in gold]
        ours = ner_tags.evaluate_tags(gold, predicted)
        assert ours["precision"] == pytest.approx(
            seqeval_metrics.precision_score(gold, predicted, zero_division=0)), trial
        assert ours["recall"] == pytest.approx(
            seqeval_metrics.recall_score(gold, predicted, zero_division=0)), trial
        assert ours["f1"] == pytest.approx(
            seqeval_metrics.f1_score(gold, predicted, zero_division=0)), trial
        assert ours["accuracy"] == pytest.approx(
            seqeval_metrics.accuracy_score(gold, predicted)), trial
        p, r, f, _ = precision_recall_fscore_support(gold, predicted, average=None,
                                                     zero_division=0)
        names = sorted({e[0] for e in ner_tags.extract_entities(gold) |
                        ner_tags.extract_entities(predicted)})
        assert len(names) == len(p)
        for name, pi, ri, fi in zip(names, p, r, f):
            assert (ours["precision_" + name], ours["recall_" + name],
                    ours["f1_" + name]) == pytest.approx((pi, ri, fi)), (trial, name)


# ---------------------------------------------------------------------------
# Windows and maximal context.

@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    vocab = tiny.write_vocab(str(tmp_path_factory.mktemp("vocab")),
                             ["mr", "in", "at", "alpha", "beta", "jack", "##son", "the",
                              "went", "saw", "and", ".", "中", "国", "x", "##x"])
    return tokenization.FullTokenizer(vocab, do_lower_case=True)


def test_window_spans_and_max_context_hand_worked():
    # 10 pieces, windows of 4 starting every 2 pieces.
    spans = run_ner.window_spans(10, 4, 2)
    assert spans == [(0, 4), (2, 4), (4, 4), (6, 4)]
    # Score: min(pieces left, pieces right) in the span. Piece 2: 1 in span 0
    # vs 0 in span 1; piece 3: min(3, 0) = 0 in span 0 vs min(1, 2) = 1 in
    # span 1; piece 6: min(2, 1) = 1 in span 2 vs 0 in span 3; piece 7:
    # min(3, 0) = 0 in span 2 vs min(1, 2) = 1 in span 3.
    assert run_ner.max_context_spans(spans, list(range(10))) == [0, 0, 0, 1, 1, 2, 2, 3, 3, 3]
    # Piece 1: min(1, 1) in (0, 3) beats min(0, 2) in (1, 3); piece 2 the
    # other way round. Equal min(): the longer span wins, then the first.
    assert run_ner.max_context_spans([(0, 3), (1, 3)], [1, 2]) == [0, 1]
    assert run_ner.max_context_spans([(0, 3), (0, 4)], [1]) == [1]
    assert run_ner.max_context_spans([(0, 3), (0, 3)], [1]) == [0]
    assert run_ner.window_spans(3, 4, 2) == [(0, 3)]
    assert run_ner.window_spans(0, 4, 2) == []
    # A stride longer than a window still covers every piece.
    assert run_ner.window_spans(7, 3, 5) == [(0, 3), (3, 3), (6, 1)]


def test_convert_document_hand_worked(tokenizer):
    pieces = run_ner.WordPieceCache(tokenizer)
    # Ids: [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 mr=5 in=6 alpha=8 jack=10 ##son=11
    # went=13.
    words = ["Mr", "Jackson", "went", "in"]
    windows = run_ner.convert_document(words, [1, 2, 0, 0], pieces, max_seq_length=8,
                                       doc_stride=4, is_training=False)
    assert len(windows) == 1
    w = windows[0]
    assert w.input_ids == [2, 5, 10, 11, 13, 6, 3, 0]
    assert w.input_mask == [1] * 7 + [0]
    assert w.segment_ids == [0] * 8
    # The first piece of each word carries its label; ##son is ignored.
    assert w.label_ids == [0, 1, 2, 0, 0, 0, 0, 0]
    assert w.label_mask == [0, 1, 1, 0, 1, 1, 0, 0]
    assert w.word_positions == [(1, 0), (2, 1), (4, 2), (5, 3)]


def test_every_word_gets_exactly_one_prediction(tokenizer):
    """Random documents with words longer than a window and words that
    yield no piece: each word is placed once, at its first piece."""
    pieces = run_ner.WordPieceCache(tokenizer)
    rng = random.Random(0)
    vocabulary = ["mr", "alpha", "Jackson", "the", "\u200b", "\u00ad", "x" * 15, "中国",
                  "zzz", "."]
    for max_seq_length, stride in [(5, 1), (6, 2), (8, 3), (12, 20), (3, 1)]:
        for _ in range(30):
            words = [rng.choice(vocabulary) for _ in range(rng.randint(1, 25))]
            labels = [rng.randint(0, 4) for _ in words]
            for training in (False, True):
                windows = run_ner.convert_document(words, labels, pieces, max_seq_length,
                                                   stride, is_training=training)
                placed = sorted(w for window in windows for _, w in window.word_positions)
                assert placed == list(range(len(words)))
                for window in windows:
                    assert len(window.input_ids) == max_seq_length
                    for position, w in window.word_positions:
                        assert window.input_ids[position] == pieces[words[w]][0]
                        assert window.label_ids[position] == labels[w]
                        assert window.label_mask[position] == 1
                scored = sum(sum(window.label_mask) for window in windows)
                if not training:
                    assert scored == len(words)
                else:
                    assert scored >= len(words)


class _PieceIds(dict):
    """The stand-in for WordPieceCache that `convert_document` needs: words
    are tuples of piece ids already."""
    special_ids = (2, 3)

    def __missing__(self, word):
        return word


def test_text_windows_are_those_of_convert_document():
    """The export's windows and each word's window (in the graph, by
    arithmetic on positions) are `convert_document`'s, over random batches
    of documents: words longer than a window, empty documents, strides
    longer than a window, and documents of one-piece words of every length
    from one window to three, where the last window is short: with windows
    of 100 pieces and more, the 0.01 per piece of length can outweigh a
    piece of context there."""
    rng = random.Random(0)
    settings = [(3, 1), (4, 1), (5, 2), (6, 2), (8, 3), (9, 7), (10, 8), (12, 20), (16, 4),
                (16, 14), (102, 1), (130, 64), (130, 37), (130, 110), (256, 110)]
    for max_seq_length, stride in settings:
        longest = max_seq_length + 3
        documents = [[(5,)] * size for size in range(
            max_seq_length - 2, max_seq_length + 2 * min(stride, max_seq_length - 2))]
        for _ in range(12):
            size = rng.choice([0, 1, 3, rng.randint(1, 4 * longest)])
            documents.append([])
            for _ in range(size):
                length = rng.choice([1, 1, 1, 2, 3, rng.randint(1, longest)])
                documents[-1].append(tuple(rng.randint(5, 99) for _ in range(length)))
        pieces = tf.RaggedTensor.from_nested_row_lengths(
            tf.constant([i for words in documents for word in words for i in word], tf.int32),
            [[len(words) for words in documents],
             [len(word) for words in documents for word in words]])
        got = run_ner.text_windows(pieces, max_seq_length, stride)
        expected_pieces, expected_positions = [], []
        for words in documents:
            windows = run_ner.convert_document(words, None, _PieceIds(), max_seq_length,
                                               stride, is_training=False)
            owner = {w: (len(expected_pieces) + k, position)
                     for k, window in enumerate(windows)
                     for position, w in window.word_positions}
            expected_positions += [owner[w] for w in range(len(words))]
            expected_pieces += [window.input_ids[1:sum(window.input_mask) - 1]
                                for window in windows]
        assert got.pieces.to_list() == (expected_pieces or [[]]), (max_seq_length, stride)
        assert got.word_positions.numpy().tolist() == [list(p) for p in expected_positions], (
            max_seq_length, stride)


def test_text_windows_take_memory_linear_in_the_text():
    """No tensor of the word-to-window assignment grows with words x
    windows: on one document of 2,000 one-piece words in windows of 3
    pieces at stride 1 (1,998 windows), the largest tensor the graph
    computes is a few values per word (comparing every word with every
    window took 32 MB, 2,000 x 1,998 float64)."""
    num_words, max_seq_length = 2000, 5
    with tf.Graph().as_default(), tf.Session() as session:
        # Lengths fed at run time: constant ones would be folded away.
        lengths = tf.placeholder(tf.int64, [None])
        pieces = tf.RaggedTensor.from_nested_row_lengths(
            tf.fill([tf.reduce_sum(lengths)], 7), [tf.size(lengths, out_type=tf.int64)[None],
                                                   lengths])
        windows = run_ner.text_windows(pieces, max_seq_length, 1)
        metadata = tf.RunMetadata()
        positions = session.run(
            windows.word_positions, {lengths: [1] * num_words},
            options=tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE),
            run_metadata=metadata)
    assert positions.shape == (num_words, 2)
    sizes = [output.tensor_description.allocation_description.requested_bytes
             for device in metadata.step_stats.dev_stats for node in device.node_stats
             for output in node.output]
    assert len(sizes) > 20  # The trace saw the graph's tensors.
    assert max(sizes) <= 8 * 8 * num_words * max_seq_length


def test_word_predictions_from_max_context_window(tokenizer):
    pieces = run_ner.WordPieceCache(tokenizer)
    words = ["the", "mr", "alpha", "went", "in", "beta", "."]
    windows = run_ner.convert_document(words, None, pieces, max_seq_length=5, doc_stride=1,
                                       is_training=False)
    # Window k's output at every position: a one-hot of label k.
    outputs = [np.tile(np.eye(len(windows))[k], (5, 1)) for k in range(len(windows))]
    probabilities = run_ner.word_predictions(windows, outputs, len(words))
    owner = {w: k for k, window in enumerate(windows) for _, w in window.word_positions}
    assert list(np.argmax(probabilities, axis=1)) == [owner[w] for w in range(len(words))]
    # Middle words come from a window where they are in the middle.
    assert owner[3] == 2


def test_check_tags_names_file_and_line(tmp_path):
    path = _write(tmp_path / "dev.txt", "a B-PER\nb I-PER\n\nc B-FOO\n")
    f = run_ner.read_conll_file(path)
    with pytest.raises(errors.InputError,
                       match=r"dev\.txt, line 4: label 'B-FOO' is not one of the model's "
                             r"labels \(IOB2 tags of the types PER\)"):
        run_ner.check_tags(f, ["PER"], "iob2")
    path = _write(tmp_path / "dev2.txt", "a B-PER\nb PER\n")
    with pytest.raises(errors.InputError, match=r"dev2\.txt, line 2: malformed tag 'PER'"):
        run_ner.check_tags(run_ner.read_conll_file(path), ["PER"], "iob2")
    path = _write(tmp_path / "dev3.txt", "a S-PER\n")
    with pytest.raises(errors.InputError, match=r"dev3\.txt, line 1: label 'S-PER'"):
        run_ner.check_tags(run_ner.read_conll_file(path), ["PER"], "iob1")


# ---------------------------------------------------------------------------
# main, end to end on a tiny model.

NAMES = ["alpha", "beta", "gamma", "delta", "jackson", "kingston"]
FILLER = ["the", "a", "went", "saw", "and", "then", "big", "red", "house", "tree"]
TRIGGERS = {"mr": "PER", "dr": "PER", "in": "LOC", "at": "LOC"}
# Second words of two-word entities ("mr alpha jr", "in gamma bay").
SUFFIXES = {"PER": "jr", "LOC": "bay"}


def _sentence(rng):
    """Words and IOB1 tags: each name is a person after mr/dr, a place after
    in/at and nothing after other words, so only the context tells its tag.
    Some entities have a second word (jr, bay)."""
    words, tags = [], []
    for _ in range(rng.randint(2, 4)):
        for _ in range(rng.randint(1, 2)):
            words.append(rng.choice(FILLER))
            tags.append("O")
        if rng.random() < 0.7:
            trigger = rng.choice(sorted(TRIGGERS))
            entity_type = TRIGGERS[trigger]
            words += [trigger, rng.choice(NAMES)]
            tags += ["O", "I-" + entity_type]
            if rng.random() < 0.25:
                words.append(SUFFIXES[entity_type])
                tags.append("I-" + entity_type)
        else:
            words.append(rng.choice(NAMES))
            tags.append("O")
    words.append(".")
    tags.append("O")
    return words, tags


def _write_conll(path, rng, num_documents, tagged=True):
    """A CoNLL-2003-layout file (4 columns, IOB1, -DOCSTART-); returns its
    sentences as (words, tags)."""
    lines = []
    sentences = []
    for _ in range(num_documents):
        lines.append("-DOCSTART- -X- -X- O\n\n")
        for _ in range(rng.randint(2, 4)):
            words, tags = _sentence(rng)
            sentences.append((words, tags))
            for word, tag in zip(words, tags):
                word = word.capitalize() if rng.random() < 0.2 else word
                lines.append("%s NN I-NP %s\n" % (word, tag) if tagged else word + "\n")
            lines.append("\n")
    _write(path, "".join(lines))
    return sentences


def _model_files(tmp_path):
    words = FILLER + list(TRIGGERS) + list(SUFFIXES.values()) + [
        "alpha", "beta", "gamma", "delta", "jack", "##son", "king", "##ston", "."]
    vocab = tiny.write_vocab(str(tmp_path), words)
    # Two heads of 16, no dropout and initial weights wider than the tiny
    # config's 0.02: the tiny model learns to attend to the previous word
    # within a few hundred steps (with 0.02, some graph seeds reached an F1 of
    # only 0.72).
    config = tiny.write_config(str(tmp_path), vocab_size=len(words) + 5,
                               num_attention_heads=2, **tiny.LEARNABLE)
    return vocab, config


# Every flag main reads, set explicitly (shared flags' defaults depend on
# which script was imported first); keywords override.
_flag_values = functools.partial(
    tiny.fine_tuning_flags, predict_text_file=None, max_seq_length=24, doc_stride=8,
    tag_scheme="auto", labels=None, document_context=True, sentences_per_document=1,
    explain_steps=0)  # (test_explain tests the tagger's explain signature.)


def run_main(**overrides):
    """run_ner.main with these flags (the rest at the tests' values), seeded
    (see tiny.run_main_seeded)."""
    tiny.run_main_seeded(run_ner.main, _flag_values(**overrides))


def _read_columns(path):
    """CoNLL output -> (sentences as lists of column lists, number of
    -DOCSTART- lines)."""
    sentences, current, docstarts = [], [], 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            if not fields:
                if current:
                    sentences.append(current)
                current = []
            elif fields[0] == "-DOCSTART-":
                docstarts += 1
            else:
                current.append(fields)
    if current:
        sentences.append(current)
    return sentences, docstarts


# Three documents. The third one's 7 entities are there so that one wrong
# tag (such as on the comma, a word training never shows) costs little of
# the F1 the tests ask for.
RAW_TEXT = ("Mr Alpha went in Kingston.\nThe big house saw Delta.\n\nDr Jackson, at Beta.\n\n"
            "The house in Gamma and then Dr Alpha saw Mr Delta Jr.\n"
            "A tree at Kingston Bay then Mr Beta went in Jackson.\nBig Delta saw Dr Gamma.\n")


@pytest.fixture(scope="module")
def ner_run(tmp_path_factory):
    """Trains the tiny model on the context task through main (IOB1
    CoNLL-layout files), then evaluates, predicts (an untagged test file and
    raw text) and exports."""
    tmp = tmp_path_factory.mktemp("ner")
    data_dir = tmp / "data"
    rng = random.Random(0)
    _write_conll(data_dir / "train.txt", rng, 160)
    dev = _write_conll(data_dir / "valid.txt", rng, 25)
    test = _write_conll(data_dir / "test.txt", rng, 6, tagged=False)
    raw = _write(tmp / "raw.txt", RAW_TEXT)
    vocab, config = _model_files(tmp)
    output_dir = str(tmp / "output")
    export_dir = str(tmp / "export")
    # About 1000 steps of 8 windows of 24 pieces, stopped by a SIGTERM at
    # step 300 and resumed (training.ResumableTrainer).
    stopped = tiny.run_main_interrupted(run_ner.main, _flag_values(
        data_dir=str(data_dir), vocab_file=vocab, bert_config_file=config,
        output_dir=output_dir, do_train=True, do_eval=True, do_predict=True,
        predict_text_file=raw, export_dir=export_dir, train_batch_size=8,
        num_train_epochs=15.0, learning_rate=3e-3), at=300)
    assert stopped.endswith("model.ckpt-300")
    return dict(data_dir=str(data_dir), vocab=vocab, config=config, output_dir=output_dir,
                export_dir=export_dir, dev=dev, test=test)


@pytest.mark.slow
def test_learns_tags_from_context(ner_run):
    result = tiny.read_eval_results(os.path.join(ner_run["output_dir"], "eval_results.txt"))
    for key in ("eval_precision", "eval_recall", "eval_f1", "eval_accuracy", "eval_loss",
                "global_step", "eval_f1_PER", "eval_f1_LOC", "eval_precision_PER",
                "eval_recall_LOC"):
        assert key in result, key
    assert result["eval_f1"] >= 0.9
    assert result["eval_accuracy"] >= 0.95
    # Majority tag per word (ignoring context) would be far worse: every
    # name is a person, a place or nothing equally often.
    assert result["eval_f1_PER"] >= 0.85 and result["eval_f1_LOC"] >= 0.85


@pytest.mark.slow
def test_dynamic_padding_tags_the_same(ner_run, tmp_path):
    """Evaluating and predicting the trained model with --dynamic_padding
    gives the same scores and tags."""
    output_dir = str(tmp_path / "dynamic")
    run_main(data_dir=ner_run["data_dir"], vocab_file=ner_run["vocab"],
             bert_config_file=ner_run["config"], output_dir=output_dir, do_eval=True,
             do_predict=True, dynamic_padding=True, length_buckets=["8", "16"],
             init_checkpoint=tf.train.latest_checkpoint(ner_run["output_dir"]))
    padded = tiny.read_eval_results(os.path.join(ner_run["output_dir"], "eval_results.txt"))
    dynamic = tiny.read_eval_results(os.path.join(output_dir, "eval_results.txt"))
    for key in ("eval_f1", "eval_accuracy", "eval_loss"):
        assert dynamic[key] == pytest.approx(padded[key], abs=1e-5), key
    for name in ("eval_predictions.txt", "test_predictions.txt"):
        assert _read_columns(os.path.join(output_dir, name)) == _read_columns(
            os.path.join(ner_run["output_dir"], name))


@pytest.mark.slow
def test_run_record(ner_run):
    """The training run's record: the tags the model outputs, in order, and
    the settings that shape its windows."""
    with open(os.path.join(ner_run["output_dir"], "run_config.json")) as f:
        record = json.load(f)
    with open(os.path.join(ner_run["output_dir"], run_ner.LABELS_FILE)) as f:
        assert record["labels"] == json.load(f)["labels"]
    assert record["problem_type"] == "token_classification"
    assert record["flags"] == {"do_lower_case": True, "max_seq_length": 24,
                               "doc_stride": 8, "document_context": True,
                               "vocab_file": os.path.abspath(ner_run["vocab"])}


@pytest.mark.slow
def test_eval_predictions_file_reproduces_the_scores(ner_run):
    path = os.path.join(ner_run["output_dir"], "eval_predictions.txt")
    sentences, docstarts = _read_columns(path)
    assert docstarts == 25
    assert len(sentences) == len(ner_run["dev"])
    for columns, (words, tags) in zip(sentences, ner_run["dev"]):
        assert [c[0].lower() for c in columns] == words
        assert [c[1] for c in columns] == tags          # gold as given (IOB1)
        assert all(len(c) == 3 for c in columns)
    predicted = [[c[2] for c in columns] for columns in sentences]
    # Predictions are written in the input's scheme, IOB1: no B- except
    # right after an entity of the same type.
    assert ner_tags.iob2_to_iob1(ner_tags.iob1_to_iob2(predicted[0])) == predicted[0]
    assert all(ner_tags.iob2_to_iob1(ner_tags.iob1_to_iob2(p)) == p for p in predicted)
    gold = [[c[1] for c in columns] for columns in sentences]
    result = tiny.read_eval_results(os.path.join(ner_run["output_dir"], "eval_results.txt"))
    ours = ner_tags.evaluate_tags(gold, predicted)
    assert result["eval_f1"] == pytest.approx(ours["f1"])
    seqeval_metrics = pytest.importorskip("seqeval.metrics")
    assert result["eval_f1"] == pytest.approx(seqeval_metrics.f1_score(gold, predicted))
    assert result["eval_precision"] == pytest.approx(
        seqeval_metrics.precision_score(gold, predicted))
    assert result["eval_accuracy"] == pytest.approx(
        seqeval_metrics.accuracy_score(gold, predicted))


@pytest.mark.slow
def test_test_and_text_predictions(ner_run):
    sentences, docstarts = _read_columns(os.path.join(ner_run["output_dir"],
                                                      "test_predictions.txt"))
    assert docstarts == 6
    assert [[c[0].lower() for c in s] for s in sentences] == [w for w, _ in ner_run["test"]]
    assert all(c[1] == "O" for s in sentences for c in s)     # no gold in the file
    predicted = [[c[2] for c in s] for s in sentences]
    gold = [t for _, t in ner_run["test"]]
    assert ner_tags.evaluate_tags(gold, predicted)["f1"] >= 0.8
    assert not os.path.exists(os.path.join(ner_run["output_dir"], "test_results.txt"))

    lines = open(os.path.join(ner_run["output_dir"], "text_predictions.txt"),
                 encoding="utf-8").read().split("\n\n")
    rows = [[line.split(" ") for line in block.splitlines()] for block in lines if block]
    assert [[r[0] for r in s] for s in rows] == [
        ["Mr", "Alpha", "went", "in", "Kingston", "."],
        ["The", "big", "house", "saw", "Delta", "."],
        ["Dr", "Jackson", ",", "at", "Beta", "."],
        ["The", "house", "in", "Gamma", "and", "then", "Dr", "Alpha", "saw", "Mr", "Delta", "Jr",
         "."],
        ["A", "tree", "at", "Kingston", "Bay", "then", "Mr", "Beta", "went", "in", "Jackson", "."],
        ["Big", "Delta", "saw", "Dr", "Gamma", "."]]
    # The tiny model's training is seeded but not bit-deterministic across
    # runs (multi-threaded sums): its tags are scored as the test file's are,
    # by entity F1, instead of word for word.
    expected = [["O", "I-PER", "O", "O", "I-LOC", "O"], ["O"] * 6,
                ["O", "I-PER", "O", "O", "I-LOC", "O"],
                ["O", "O", "O", "I-LOC", "O", "O", "O", "I-PER", "O", "O", "I-PER", "I-PER", "O"],
                ["O", "O", "O", "I-LOC", "I-LOC", "O", "O", "I-PER", "O", "O", "I-LOC", "O"],
                ["O", "O", "O", "O", "I-PER", "O"]]
    assert ner_tags.evaluate_tags(expected, [[r[1] for r in s] for s in rows])["f1"] >= 0.8


@pytest.mark.slow
def test_saved_model_as_the_docs_use_it(ner_run):
    """docs/ner.md: words -> windows -> the signature -> a tag per word."""
    tokenizer = tokenization.FullTokenizer(ner_run["vocab"], do_lower_case=True)
    pieces = run_ner.WordPieceCache(tokenizer)
    test = run_ner.read_conll_file(os.path.join(ner_run["data_dir"], "test.txt"))
    words = [w for w in test.documents[0][0].words]
    windows = run_ner.convert_document(words, None, pieces, max_seq_length=24, doc_stride=8,
                                       is_training=False)
    outputs, path = tiny.serving_ids_probabilities(ner_run["export_dir"], windows)
    with open(os.path.join(path, "assets.extra", "ner_labels.json")) as f:
        saved = json.load(f)
    # The model's tags are IOB2 (O, then B-/I- per type); the data were IOB1.
    assert saved == {"scheme": "iob1", "entity_types": ["LOC", "PER"],
                     "labels": ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]}
    assert outputs.shape == (len(windows), 24, 5)
    probabilities = run_ner.word_predictions(windows, outputs, len(words))
    tags = ner_tags.from_model_tags([saved["labels"][i] for i in probabilities.argmax(-1)],
                                   saved["scheme"])
    # The first test sentence alone, as its own document, against the run's
    # predictions (made in the document's context) for the same words.
    sentences, _ = _read_columns(os.path.join(ner_run["output_dir"], "test_predictions.txt"))
    gold = ner_run["test"][0][1]
    assert ner_tags.evaluate_tags([gold], [tags])["accuracy"] >= 0.8
    assert len(tags) == len(sentences[0])


@pytest.mark.slow
def test_two_column_bioes_files_end_to_end(tmp_path):
    """Chinese-style two-column BIOES files, grouped two sentences per
    document: a short run writes its outputs in BIOES and labels the model
    with B-, I-, E-, S- tags."""
    rng = random.Random(5)
    data_dir = tmp_path / "data"
    vocab = tiny.write_vocab(str(tmp_path), list("王五在北京上海很大好"))
    config = tiny.write_config(str(tmp_path), vocab_size=15)

    def sentence():
        words, tags = [], []
        for _ in range(rng.randint(1, 3)):
            words += ["在"] + rng.choice([["北", "京"], ["上", "海", "京"], ["京"]])
            tags += ["O"] + {2: ["B-LOC", "E-LOC"], 3: ["B-LOC", "I-LOC", "E-LOC"],
                             1: ["S-LOC"]}[len(words) - len(tags) - 1]
            words += ["王"]
            tags += ["S-PER"]
        return words, tags

    for name, n in (("train.txt", 40), ("dev.txt", 6)):
        lines = []
        for _ in range(n):
            words, tags = sentence()
            lines += ["%s\t%s\n" % wt for wt in zip(words, tags)] + ["\n"]
        _write(data_dir / name, "".join(lines))
    output_dir = str(tmp_path / "out")
    run_main(data_dir=str(data_dir), vocab_file=vocab, bert_config_file=config,
             output_dir=output_dir, do_train=True, do_eval=True, num_train_epochs=2.0,
             sentences_per_document=2)
    with open(os.path.join(output_dir, "ner_labels.json")) as f:
        assert json.load(f) == {"scheme": "bioes", "entity_types": ["LOC", "PER"],
                                "labels": ["O", "B-LOC", "I-LOC", "E-LOC", "S-LOC",
                                           "B-PER", "I-PER", "E-PER", "S-PER"]}
    sentences, docstarts = _read_columns(os.path.join(output_dir, "eval_predictions.txt"))
    assert docstarts == 0 and len(sentences) == 6
    dev = run_ner.read_conll_file(str(data_dir / "dev.txt"))
    assert [[c[:2] for c in s] for s in sentences] == [
        [[w, t] for w, t in zip(s.words, s.tags)] for s in run_ner.iter_sentences(dev)]
    result = tiny.read_eval_results(os.path.join(output_dir, "eval_results.txt"))
    predicted = [[c[2] for c in s] for s in sentences]
    gold = [[c[1] for c in s] for s in sentences]
    assert result["eval_f1"] == pytest.approx(ner_tags.evaluate_tags(gold, predicted)["f1"])
    # One training example per window: documents of two sentences in windows
    # of 22 pieces every 8.
    train = run_ner.read_conll_file(str(data_dir / "train.txt"), sentences_per_document=2)
    assert len(train.documents) == 20
    windows, _ = run_ner.convert_file(train, run_ner.WordPieceCache(
        tokenization.FullTokenizer(vocab)), 24, 8, is_training=True)
    assert len(windows) > 20
    assert result["global_step"] == int(len(windows) / 16 * 2)


# ---------------------------------------------------------------------------
# Bad input: one clear error before anything is trained or written.

@pytest.fixture
def good_inputs(tmp_path):
    data_dir = tmp_path / "data"
    rng = random.Random(3)
    for name, n in (("train.txt", 4), ("valid.txt", 2), ("test.txt", 2)):
        _write_conll(data_dir / name, rng, n)
    vocab, config = _model_files(tmp_path)
    return dict(data_dir=str(data_dir), vocab_file=vocab, bert_config_file=config,
                output_dir=str(tmp_path / "output"), do_train=True, do_eval=True,
                do_predict=True)


@pytest.mark.parametrize("file_name, text, message", [
    ("train.txt", "a NN I-NP O\nb NN O\n", r"train\.txt, line 2: expected 4 columns \(as on "
                                            r"line 1\), found 3"),
    ("valid.txt", "", r"valid\.txt: no sentences"),
    ("valid.txt", "\n-DOCSTART- -X- -X- O\n\n", r"valid\.txt: no sentences"),
    ("valid.txt", "a NN I-NP O\nb NN I-NP I-FOO\n",
     r"valid\.txt, line 2: label 'I-FOO' is not one of the model's labels \(IOB1 tags of "
     r"the types LOC, PER\)"),
    ("test.txt", "a NN I-NP I-ORG\n", r"test\.txt, line 1: label 'I-ORG'"),
    ("train.txt", "a NN I-NP O\nb NN I-NP PER\n", r"train\.txt, line 2: malformed tag 'PER'"),
    ("valid.txt", "a\nb\n", r"valid\.txt: --do_eval needs tags"),
    ("train.txt", b"a NN I-NP O\n\xff NN I-NP O\n", r"train\.txt, line 2: not valid UTF-8"),
    ("valid.txt", None, r"--do_eval needs --dev_file or a data file in --data_dir=.*"
                        r"\(valid\.txt, dev\.txt, eng\.testa\)"),
])
def test_bad_data_stops_before_anything_is_written(good_inputs, file_name, text, message):
    path = os.path.join(good_inputs["data_dir"], file_name)
    if text is None:
        os.remove(path)
    elif isinstance(text, bytes):
        with open(path, "wb") as f:
            f.write(text)
    else:
        _write(path, text)
    tiny.assert_input_error(run_main, good_inputs, message)


@pytest.mark.parametrize("change, message", tiny.shared_flag_errors("/nonexistent/conll") + [
    (dict(doc_stride=0), r"--doc_stride must be at least 1"),
    (dict(do_predict=False, predict_text_file="x.txt"), r"--predict_text_file needs "
                                                         r"--do_predict"),
    (dict(predict_text_file="/nonexistent/raw.txt"), r"--predict_text_file: file not found"),
    (dict(labels="PER,LOC,B-"), r"--labels: 'B-' is neither a type nor a tag"),
    (dict(labels="PER"), r"train\.txt, line \d+: label 'I-LOC' is not one of the model's "
                         r"labels \(IOB1 tags of the types PER\)"),
    (dict(export_dir=__file__), r"--export_dir .*test_run_ner\.py is a file, not a "
                                r"directory"),
])
def test_bad_flags(good_inputs, change, message):
    good_inputs.update(change)
    tiny.assert_input_error(run_main, good_inputs, message)


def test_no_label_set_and_nothing_to_export(good_inputs):
    os.remove(os.path.join(good_inputs["data_dir"], "train.txt"))
    with pytest.raises(errors.InputError, match=r"No label set: give --labels"):
        run_main(**dict(good_inputs, do_train=False))
    with pytest.raises(errors.InputError, match=r"--export_dir: no fine-tuned checkpoint"):
        run_main(**dict(good_inputs, do_train=False, do_eval=False, do_predict=False,
                        labels="PER,LOC", export_dir=good_inputs["output_dir"] + "_export"))
    assert not os.path.exists(good_inputs["output_dir"])


def test_command_line_error_is_one_line(good_inputs, monkeypatch, capsys):
    """From the shell, bad input gives one ERROR line and exit status 1."""
    os.remove(os.path.join(good_inputs["data_dir"], "valid.txt"))
    # (--doc_stride too: a shared flag's default is that of the first script
    # this test process imported.)
    err = tiny.shell_error(run_ner.main, ["run_ner.py", "--max_seq_length=24", "--doc_stride=64"],
                           good_inputs, monkeypatch, capsys)
    assert "ERROR: --do_eval needs --dev_file or a data file in --data_dir=" in err


# ---------------------------------------------------------------------------
# As a library, with the flags never parsed.

_LIBRARY_SCRIPT = tiny.LIBRARY_PRELUDE + r"""
import run_ner
from scriptkit import ner_tags

vocab_file, config_file, data_file, record_file, checkpoint = sys.argv[1:6]
ner_file = run_ner.read_conll_file(data_file)
tags = [s.tags for s in run_ner.iter_sentences(ner_file)]
scheme = ner_tags.detect_scheme(tags)
labels = ner_tags.label_list_for(ner_tags.entity_types_of(t for s in tags for t in s), scheme)
label_map = {label: i for i, label in enumerate(labels)}
pieces = run_ner.WordPieceCache(tokenization.FullTokenizer(vocab_file))
train, num_words = run_ner.convert_file(ner_file, pieces, 12, 4, is_training=True,
                                        label_map=label_map, scheme=scheme)
run_ner.write_windows(train, record_file)
config = modeling.BertConfig.from_json_file(config_file)
out = {"scheme": scheme, "labels": labels, "num_words": num_words,
       "windows": [list(w[:5]) for w in train]}


def batch(is_training):
    input_fn = run_ner.file_based_input_fn_builder(record_file, 12, is_training=is_training,
                                                   drop_remainder=False)
    return tf.data.make_one_shot_iterator(input_fn({"batch_size": len(train)})).get_next()


params = {"batch_size": len(train)}
out["predict"] = tiny.run_spec(
    run_ner.model_fn_builder(config, len(labels), None, 1e-3, 10, 1, False, False),
    lambda: batch(False), runtime.ModeKeys.PREDICT, params, save_to=checkpoint)
# One batch: the loss of the forward pass before the update.
out["train"] = tiny.run_spec(
    run_ner.model_fn_builder(config, len(labels), checkpoint, 1e-3, 10, 1, False, False),
    lambda: batch(False), runtime.ModeKeys.TRAIN, params)
out["parsed"] = flags.FLAGS.is_parsed()
print("JSON" + json.dumps(out))
"""


def test_building_blocks_work_as_a_library_with_flags_unparsed(tmp_path):
    """In a fresh process that never parses flags: read a CoNLL file, detect
    its scheme, convert it to windows, feed the model_fn's PREDICT and TRAIN
    specs; the training loss is the cross-entropy of the first pieces."""
    data = _write(tmp_path / "train.txt", "mr NN I-NP O\njackson NN I-NP I-PER\nwent NN I-NP O\n"
                                         "in NN I-NP O\nalpha NN I-NP I-LOC\n. . O O\n\n"
                                         "the NN I-NP O\nbeta NN I-NP O\n")
    vocab, _ = _model_files(tmp_path)
    config = tiny.write_config(str(tmp_path), vocab_size=40, hidden_dropout_prob=0.0,
                               attention_probs_dropout_prob=0.0)
    out = tiny.run_library_script(_LIBRARY_SCRIPT, vocab, config, data,
                                  tmp_path / "train.tf_record", tmp_path / "model.ckpt")
    assert not out["parsed"]
    assert out["scheme"] == "iob1"
    assert out["labels"] == ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
    assert out["num_words"] == 8
    ids = {w: i for i, w in enumerate(
        tiny.SPECIAL_TOKENS + [line.strip() for line in open(vocab)][5:])}
    # Without -DOCSTART-, each sentence is a document: two windows.
    (first_ids, _, _, first_labels, first_mask), (second_ids, _, _, _, second_mask) = \
        out["windows"]
    assert first_ids == [ids[t] for t in ["[CLS]", "mr", "jack", "##son", "went", "in",
                                          "alpha", ".", "[SEP]"]] + [0] * 3
    # IOB1 I-PER / I-LOC start entities: trained as B-PER (3) and B-LOC (1).
    assert first_labels == [0, 0, 3, 0, 0, 0, 1, 0, 0, 0, 0, 0]
    assert first_mask == [0, 1, 1, 0, 1, 1, 1, 1, 0, 0, 0, 0]
    assert second_ids[:4] == [ids["[CLS]"], ids["the"], ids["beta"], ids["[SEP]"]]
    assert second_mask[:4] == [0, 1, 1, 0]
    probabilities = np.array(out["predict"]["probabilities"])
    assert probabilities.shape == (2, 12, 5)
    np.testing.assert_allclose(probabilities.sum(axis=-1), 1.0, rtol=1e-5)
    # The TRAIN loss, from the saved weights: mean cross-entropy over the
    # masked positions only.
    losses = []
    for window, probs in zip(out["windows"], probabilities):
        for position, (label, mask) in enumerate(zip(window[3], window[4])):
            if mask:
                losses.append(-np.log(probs[position][label]))
    assert len(losses) == 8
    assert out["train"] == {"losses": [pytest.approx(np.mean(losses), rel=1e-5)], "step": 1}


@pytest.mark.slow
def test_text_signature_tags_as_the_script_does(ner_run):
    """The export's serving_default, given each document of the raw-text
    file as one text, tags its words as text_predictions.txt does (IOB1,
    the data's scheme)."""
    import test_serving
    (path,) = [os.path.join(ner_run["export_dir"], d) for d in os.listdir(ner_run["export_dir"])]
    documents = [block.strip() for block in RAW_TEXT.split("\n\n")]
    served = test_serving._run_signature(path, "serving_default", {"text": documents})
    sentences, _ = _read_columns(os.path.join(ner_run["output_dir"], "text_predictions.txt"))
    expected = []
    for document in documents:
        n = len(document.splitlines())
        expected.append(sum(sentences[:n], []))
        sentences = sentences[n:]
    assert not sentences
    for i, words in enumerate(expected):
        n = served["num_words"][i]
        assert [w.decode() for w in served["words"][i, :n]] == [w for w, _ in words]
        assert [t.decode() for t in served["tags"][i, :n]] == [t for _, t in words]
    assert {t for _, t in expected[0]} >= {"I-PER", "I-LOC", "O"}
