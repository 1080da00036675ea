"""Tests of run_classifier.py: GLUE/XNLI processors on files in their real
layouts, feature conversion, metrics against hand-computed values, and the
script's main end to end (fine-tuning, evaluation during training, best
checkpoint, predictions, GLUE submission files, SavedModel, bad input)."""

import json
import logging
import os
import random
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
from absl import flags
from absl.testing import flagsaver

from scriptkit import classifier_metrics
from scriptkit import errors
from scriptkit import fine_tuning
from scriptkit import run_record
from scriptkit import settings as settings_lib
import modeling
import run_classifier
import tiny
import tokenization

FLAGS = flags.FLAGS
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _write_tsv(path, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write("\t".join(row) + "\n")
    return path


# ---------------------------------------------------------------------------
# Processors: one small sample per task in the standard GLUE download layout.

MNLI_TRAIN_HEADER = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse",
                     "sentence2_binary_parse", "sentence1_parse", "sentence2_parse",
                     "sentence1", "sentence2", "label1", "gold_label"]
MNLI_DEV_HEADER = MNLI_TRAIN_HEADER[:11] + ["label2", "label3", "label4", "label5",
                                            "gold_label"]
MNLI_TEST_HEADER = MNLI_TRAIN_HEADER[:10]


def _mnli_row(index, s1, s2, labels=()):
    return [str(index), "31193", "31193n", "government", "( ( bin", "( bin )", "(ROOT)",
            "(ROOT)", s1, s2] + list(labels)


def _write_glue(data_dir, task):
    """Writes train/dev/test files of `task` in the GLUE layout; returns the
    expected (text_a, text_b, label) per split and the test indices."""
    d = lambda name: os.path.join(data_dir, name)  # noqa: E731
    if task == "CoLA":
        # No header in train/dev: source, label, original label, sentence.
        _write_tsv(d("train.tsv"), [["gj04", "1", "", "Our friends won't buy this."],
                                    ["gj04", "0", "*", "They drank the pub."]])
        _write_tsv(d("dev.tsv"), [["clc95", "1", "", "The sailors rode the breeze."]])
        _write_tsv(d("test.tsv"), [["index", "sentence"], ["0", "Bill whistled."],
                                   ["1", "Bill \"quoted\" it."]])
        return ({"train": [("Our friends won't buy this.", None, "1"),
                           ("They drank the pub.", None, "0")],
                 "dev": [("The sailors rode the breeze.", None, "1")],
                 "test": [("Bill whistled.", None, "0"), ("Bill \"quoted\" it.", None, "0")]},
                ["0", "1"])
    if task == "SST-2":
        _write_tsv(d("train.tsv"), [["sentence", "label"], ["hide new secretions ", "0"],
                                    ["the greatest musicians ", "1"]])
        _write_tsv(d("dev.tsv"), [["sentence", "label"], ["it 's a charming trip . ", "1"]])
        _write_tsv(d("test.tsv"), [["index", "sentence"], ["0", "uneasy mishmash ."]])
        return ({"train": [("hide new secretions ", None, "0"),
                           ("the greatest musicians ", None, "1")],
                 "dev": [("it 's a charming trip . ", None, "1")],
                 "test": [("uneasy mishmash .", None, "0")]}, ["0"])
    if task == "MRPC":
        header = ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]
        _write_tsv(d("train.tsv"), [header, ["1", "702876", "702977", "Amrozi accused.",
                                             "Referring to him."],
                                    ["0", "2108705", "2108831", "Yucaipa owned.",
                                     "Yucaipa bought."]])
        _write_tsv(d("dev.tsv"), [header, ["1", "1355540", "1355592", "He said.",
                                           "\"The foodservice\" said."]])
        _write_tsv(d("test.tsv"), [["index"] + header[1:],
                                   ["0", "1089874", "1089925", "PCCW 's chief.",
                                    "Current Chief."],
                                   ["1", "3019446", "3019327", "World.", "Cup."]])
        return ({"train": [("Amrozi accused.", "Referring to him.", "1"),
                           ("Yucaipa owned.", "Yucaipa bought.", "0")],
                 "dev": [("He said.", "\"The foodservice\" said.", "1")],
                 "test": [("PCCW 's chief.", "Current Chief.", "0"),
                          ("World.", "Cup.", "0")]}, ["0", "1"])
    if task == "STS-B":
        header = ["index", "genre", "filename", "year", "old_index", "source1", "source2",
                  "sentence1", "sentence2", "score"]
        meta = ["main-captions", "MSRvid", "2012test", "0001", "none", "none"]
        _write_tsv(d("train.tsv"), [header, ["0"] + meta + ["A plane is taking off.",
                                                            "An air plane is taking off.",
                                                            "5.000"],
                                    ["1"] + meta + ["A man plays.", "A man cuts.", "0.500"]])
        _write_tsv(d("dev.tsv"), [header, ["0"] + meta + ["A man sings.", "A man talks.",
                                                          "1.750"]])
        _write_tsv(d("test.tsv"), [header[:-1], ["0"] + meta + ["A girl styles.",
                                                                 "A girl brushes."]])
        return ({"train": [("A plane is taking off.", "An air plane is taking off.", "5.000"),
                           ("A man plays.", "A man cuts.", "0.500")],
                 "dev": [("A man sings.", "A man talks.", "1.750")],
                 "test": [("A girl styles.", "A girl brushes.", "0")]}, ["0"])
    if task == "QQP":
        header = ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"]
        _write_tsv(d("train.tsv"), [header, ["133273", "213221", "213222", "How is life?",
                                             "Which level?", "0"]])
        _write_tsv(d("dev.tsv"), [header, ["201359", "303345", "303346", "Why are you?",
                                           "Why do you?", "1"]])
        _write_tsv(d("test.tsv"), [["id", "question1", "question2"],
                                   ["0", "Should I buy?", "Which is best?"],
                                   ["1", "How?", "Why?"]])
        return ({"train": [("How is life?", "Which level?", "0")],
                 "dev": [("Why are you?", "Why do you?", "1")],
                 "test": [("Should I buy?", "Which is best?", "0"), ("How?", "Why?", "0")]},
                ["0", "1"])
    if task == "MNLI":
        _write_tsv(d("train.tsv"), [MNLI_TRAIN_HEADER,
                                    _mnli_row(0, "Conceptually cream.", "Product and geo.",
                                              ["neutral", "neutral"])])
        _write_tsv(d("dev_matched.tsv"), [MNLI_DEV_HEADER,
                                          _mnli_row(0, "The new rights.", "Everyone loves.",
                                                    ["neutral"] * 5 + ["entailment"])])
        _write_tsv(d("dev_mismatched.tsv"), [MNLI_DEV_HEADER,
                                             _mnli_row(0, "Your contribution.", "It helped.",
                                                       ["contradiction"] * 6)])
        _write_tsv(d("test_matched.tsv"), [MNLI_TEST_HEADER,
                                           _mnli_row(0, "Hierbas.", "Hierbas is a name.")])
        _write_tsv(d("test_mismatched.tsv"), [MNLI_TEST_HEADER,
                                              _mnli_row(7, "What have you.", "What time.")])
        return ({"train": [("Conceptually cream.", "Product and geo.", "neutral")],
                 "dev": [("The new rights.", "Everyone loves.", "entailment")],
                 "test": [("Hierbas.", "Hierbas is a name.", "contradiction")]}, ["0"])
    if task in ("QNLI", "RTE", "WNLI"):
        names = {"QNLI": ["question", "sentence"], "RTE": ["sentence1", "sentence2"],
                 "WNLI": ["sentence1", "sentence2"]}[task]
        yes, no = ("1", "0") if task == "WNLI" else ("entailment", "not_entailment")
        _write_tsv(d("train.tsv"), [["index"] + names + ["label"], ["0", "A?", "B.", yes],
                                    ["1", "C?", "D.", no]])
        _write_tsv(d("dev.tsv"), [["index"] + names + ["label"], ["0", "E?", "F.", no]])
        _write_tsv(d("test.tsv"), [["index"] + names, ["0", "G?", "H."]])
        first = "0" if task == "WNLI" else "entailment"
        return ({"train": [("A?", "B.", yes), ("C?", "D.", no)], "dev": [("E?", "F.", no)],
                 "test": [("G?", "H.", first)]}, ["0"])
    raise ValueError(task)


GLUE_TASKS = ["CoLA", "SST-2", "MRPC", "STS-B", "QQP", "MNLI", "QNLI", "RTE", "WNLI"]


def _triples(examples):
    return [(e.text_a, e.text_b, e.label) for e in examples]


@pytest.mark.parametrize("task", GLUE_TASKS)
def test_glue_processor_reads_real_layout(tmp_path, task):
    expected, test_indices = _write_glue(str(tmp_path), task)
    processor = run_classifier.get_processor(task)
    assert _triples(processor.get_train_examples(str(tmp_path))) == expected["train"]
    assert _triples(processor.get_dev_examples(str(tmp_path))) == expected["dev"]
    test = processor.get_test_examples(str(tmp_path))
    assert _triples(test) == expected["test"]
    # The GLUE submission index is the test file's index column.
    assert [e.guid.split("-", 1)[1] for e in test] == test_indices
    assert processor.is_regression == (task == "STS-B")
    assert processor.submission_name == {"MNLI": "MNLI-m"}.get(task, task)


def test_task_names_are_case_insensitive_and_unknown_lists_known():
    assert isinstance(run_classifier.get_processor("mrpc"), run_classifier.MrpcProcessor)
    assert isinstance(run_classifier.get_processor("MnLi"), run_classifier.MnliProcessor)
    assert isinstance(run_classifier.get_processor("STS-B"), run_classifier.StsbProcessor)
    assert isinstance(run_classifier.get_processor("sst2"), run_classifier.Sst2Processor)
    with pytest.raises(errors.InputError) as e:
        run_classifier.get_processor("paraphrase")
    message = str(e.value)
    assert "paraphrase" in message
    for name in ["cola", "mnli", "mrpc", "qnli", "qqp", "rte", "sst-2", "sts-b", "wnli",
                 "xnli"]:
        assert name in message


def test_mnli_mismatched_and_diagnostic_sets(tmp_path):
    _write_glue(str(tmp_path), "MNLI")
    diagnostic = _write_tsv(str(tmp_path / "diagnostic.tsv"),
                            [["index", "sentence1", "sentence2"], ["0", "The cat sat.",
                                                                   "The cat did not sit."]])
    processor = run_classifier.get_processor("MNLI")
    processor.diagnostic_file = diagnostic
    eval_sets = processor.get_eval_sets(str(tmp_path))
    assert [s for s, _ in eval_sets] == ["", "mismatched"]
    assert _triples(eval_sets[1][1]) == [("Your contribution.", "It helped.",
                                          "contradiction")]
    predict_sets = processor.get_predict_sets(str(tmp_path))
    assert [(s, name) for s, _, name in predict_sets] == [
        ("", "MNLI-m"), ("mismatched", "MNLI-mm"), ("diagnostic", "AX")]
    assert [e.guid.split("-", 1)[1] for e in predict_sets[1][1]] == ["7"]
    assert _triples(predict_sets[2][1]) == [("The cat sat.", "The cat did not sit.",
                                             "contradiction")]


def _write_xnli(data_dir):
    _write_tsv(os.path.join(data_dir, "multinli", "multinli.train.de.tsv"),
               [["premise", "hypo", "label"], ["Ich bin.", "Du bist.", "contradictory"],
                ["Er ist.", "Sie ist.", "neutral"]])
    header = ["language", "gold_label", "sentence1_binaryparse", "sentence2_binaryparse",
              "sentence1_parse", "sentence2_parse", "sentence1", "sentence2", "promptID",
              "pairID", "genre", "label1", "label2", "label3", "label4", "label5",
              "sentence1_tokenized", "sentence2_tokenized", "match"]

    def row(language, label, s1, s2):
        return [language, label, "", "", "", "", s1, s2, "1", "1", "facetoface"] + \
            [label] * 5 + [s1, s2, "True"]
    for name in ("xnli.dev.tsv", "xnli.test.tsv"):
        _write_tsv(os.path.join(data_dir, name),
                   [header, row("en", "neutral", "I am.", "You are."),
                    row("de", "entailment", "Wir sind.", "Ihr seid.")])


def test_xnli_language_flag(tmp_path):
    _write_xnli(str(tmp_path))
    processor = run_classifier.get_processor("XNLI", xnli_language="de")
    assert _triples(processor.get_train_examples(str(tmp_path))) == [
        ("Ich bin.", "Du bist.", "contradiction"), ("Er ist.", "Sie ist.", "neutral")]
    assert _triples(processor.get_dev_examples(str(tmp_path))) == [
        ("Wir sind.", "Ihr seid.", "entailment")]
    assert len(processor.get_test_examples(str(tmp_path))) == 1
    assert run_classifier.get_processor("xnli").language == "zh"
    with pytest.raises(errors.InputError, match="no examples in language 'fr'.*de, en"):
        run_classifier.get_processor("xnli", "fr").get_dev_examples(str(tmp_path))


@pytest.mark.slow
def test_processors_and_features_match_the_original(tmp_path):
    """Google's run_classifier (in a subprocess: its flags clash with ours)
    reads the same MRPC, CoLA, MNLI and XNLI files into the same examples and
    features."""
    for task in ("MRPC", "CoLA", "MNLI"):
        _write_glue(str(tmp_path / task), task)
    _write_xnli(str(tmp_path / "XNLI"))
    vocab = tiny.write_vocab(str(tmp_path), ["amrozi", "accused", ".", "referring", "to",
                                             "him", "he", "said", "the", "new", "rights",
                                             "bill", "\"", "wir", "sind", "ihr"])
    script = r"""
import json, sys, types
sys.path.insert(0, %(tests)r)
sys.modules["bert.modeling"] = types.ModuleType("bert.modeling")
sys.modules["bert.optimization"] = types.ModuleType("bert.optimization")
import bert
bert.modeling = sys.modules["bert.modeling"]
bert.optimization = sys.modules["bert.optimization"]
import reference
rc = reference.load_original("run_classifier")
from absl import flags
flags.FLAGS(["original"])  # defaults (preserve_unused_tokens=False)
tok = rc.tokenization.FullTokenizer(%(vocab)r, do_lower_case=True)
out = {}
for task, cls in [("MRPC", rc.MrpcProcessor), ("CoLA", rc.ColaProcessor),
                  ("MNLI", rc.MnliProcessor), ("XNLI", rc.XnliProcessor)]:
    p = cls()
    d = %(data)r + "/" + task
    sets = {"train": p.get_train_examples(d), "dev": p.get_dev_examples(d)}
    if task != "XNLI":
        sets["test"] = p.get_test_examples(d)
    out[task] = {}
    for name, examples in sets.items():
        feats = [rc.convert_single_example(i, e, p.get_labels(), 12, tok)
                 for i, e in enumerate(examples)]
        out[task][name] = [[e.text_a, e.text_b, e.label, f.input_ids, f.input_mask,
                            f.segment_ids, f.label_id] for e, f in zip(examples, feats)]
print("JSON" + json.dumps(out))
""" % {"tests": os.path.join(ROOT, "tests"), "vocab": vocab, "data": str(tmp_path)}
    # The original XNLI processor is Chinese-only: give it a "zh" training file.
    shutil.copy(str(tmp_path / "XNLI" / "multinli" / "multinli.train.de.tsv"),
                str(tmp_path / "XNLI" / "multinli" / "multinli.train.zh.tsv"))
    for name in ("xnli.dev.tsv",):
        path = str(tmp_path / "XNLI" / name)
        with open(path) as f:
            text = f.read().replace("\nde\t", "\nzh\t")
        with open(path, "w") as f:
            f.write(text)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    original = json.loads(proc.stdout.split("JSON", 1)[1])

    tokenizer = tokenization.FullTokenizer(vocab, do_lower_case=True)
    for task in ("MRPC", "CoLA", "MNLI", "XNLI"):
        processor = run_classifier.get_processor(task)
        d = str(tmp_path / task)
        sets = {"train": processor.get_train_examples(d), "dev": processor.get_dev_examples(d)}
        if task != "XNLI":
            sets["test"] = processor.get_test_examples(d)
        for name, examples in sets.items():
            ours = []
            for i, e in enumerate(examples):
                f = run_classifier.convert_single_example(i, e, processor.get_labels(), 12,
                                                          tokenizer)
                ours.append([e.text_a, e.text_b, e.label, f.input_ids, f.input_mask,
                             f.segment_ids, f.label_id])
            assert ours == original[task][name], (task, name)


def test_bad_rows_name_file_and_line(tmp_path):
    _write_glue(str(tmp_path), "MRPC")
    path = str(tmp_path / "train.tsv")
    with open(path, "a") as f:
        f.write("1\t12\t13\tonly four columns\n")
    processor = run_classifier.get_processor("MRPC")
    with pytest.raises(errors.InputError,
                       match=r"train\.tsv, line 4: expected 5 tab-separated columns, found 4"):
        processor.get_train_examples(str(tmp_path))
    # The escape hatch skips such rows.
    processor.skip_malformed_rows = True
    assert len(processor.get_train_examples(str(tmp_path))) == 2

    _write_tsv(path, [["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"],
                      ["1", "1", "2", "a", "b"], ["yes", "1", "2", "a", "b"]])
    with pytest.raises(errors.InputError,
                       match=r"train\.tsv, line 3: label 'yes' is not one of the task's "
                             r"labels 0, 1"):
        processor.get_train_examples(str(tmp_path))

    with pytest.raises(errors.InputError, match=r"file not found: .*missing.*dev\.tsv"):
        processor.get_dev_examples(str(tmp_path / "missing"))

    # CoLA train has no header: a short row is line 1.
    _write_tsv(str(tmp_path / "cola" / "train.tsv"), [["gj04", "1", "A sentence."]])
    with pytest.raises(errors.InputError, match=r"train\.tsv, line 1: expected 4"):
        run_classifier.get_processor("cola").get_train_examples(str(tmp_path / "cola"))

    _write_glue(str(tmp_path / "stsb"), "STS-B")
    with open(str(tmp_path / "stsb" / "dev.tsv"), "a") as f:
        f.write("\t".join(["1", "g", "f", "y", "o", "s", "s", "A.", "B.", "high"]) + "\n")
    with pytest.raises(errors.InputError, match=r"dev\.tsv, line 3: label 'high' is not "
                                                    r"a number"):
        run_classifier.get_processor("sts-b").get_dev_examples(str(tmp_path / "stsb"))


# ---------------------------------------------------------------------------
# Features.

@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    vocab = tiny.write_vocab(str(tmp_path_factory.mktemp("vocab")),
                             ["a", "b", "c", "d", "e", "f", "g", "is", "this", "jack",
                              "##son", "##ville", "?", "no", "it", "not", "."])
    return tokenization.FullTokenizer(vocab, do_lower_case=True)


def test_convert_single_example_pair(tokenizer):
    # Ids: [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4 a=5 b=6 ... is=12 this=13
    # jack=14 ##son=15 ##ville=16 ?=17 no=18 it=19 not=20 .=21
    example = run_classifier.InputExample("dev-1", "Is this Jacksonville?", "No it is not.",
                                          label="1")
    f = run_classifier.convert_single_example(0, example, ["0", "1"], 16, tokenizer)
    # [CLS] is this jack ##son ##ville ? [SEP] no it is not . [SEP] + 2 padding
    assert f.input_ids == [2, 12, 13, 14, 15, 16, 17, 3, 18, 19, 12, 20, 21, 3, 0, 0]
    assert f.input_mask == [1] * 14 + [0] * 2
    assert f.segment_ids == [0] * 8 + [1] * 6 + [0] * 2
    assert f.label_id == 1
    assert f.is_real_example


def test_convert_single_example_truncates_longer_side_first(tokenizer):
    # A has 6 tokens, B has 2; 10 - 3 = 7 tokens fit: A loses its last 1.
    example = run_classifier.InputExample("x", "a b c d e f", "g g", label="0")
    f = run_classifier.convert_single_example(0, example, ["0", "1"], 10, tokenizer)
    assert f.input_ids == [2, 5, 6, 7, 8, 9, 3, 11, 11, 3]
    assert f.segment_ids == [0] * 7 + [1] * 3
    assert f.input_mask == [1] * 10
    assert f.label_id == 0
    # Both long: the longer side is popped until equal, then B before A.
    tokens_a, tokens_b = list("abcdef"), list("abcd")
    run_classifier._truncate_seq_pair(tokens_a, tokens_b, 5)
    assert (tokens_a, tokens_b) == (list("abc"), list("ab"))


def test_convert_single_example_single_sentence_and_padding(tokenizer):
    example = run_classifier.InputExample("x", "a b c d e f g", None, label="0")
    f = run_classifier.convert_single_example(0, example, ["0", "1"], 6, tokenizer)
    assert f.input_ids == [2, 5, 6, 7, 8, 3]       # cut to max_seq_length - 2
    assert f.segment_ids == [0] * 6
    pad = run_classifier.convert_single_example(1, run_classifier.PaddingInputExample(),
                                                ["0", "1"], 6, tokenizer)
    assert (pad.input_ids, pad.input_mask, pad.segment_ids, pad.label_id,
            pad.is_real_example) == ([0] * 6, [0] * 6, [0] * 6, 0, False)
    labels = ["contradiction", "entailment", "neutral"]
    example = run_classifier.InputExample("x", "a", "b", label="neutral")
    assert run_classifier.convert_single_example(0, example, labels, 8, tokenizer).label_id == 2
    # Regression (label_list None): the label is a float.
    example = run_classifier.InputExample("x", "a", "b", label="3.800")
    assert run_classifier.convert_single_example(0, example, None, 8, tokenizer).label_id == 3.8


# ---------------------------------------------------------------------------
# As a library, with the flags never parsed (the original's Colab and TF-Hub
# recipes import run_classifier and call its functions).

_LIBRARY_SCRIPT = tiny.LIBRARY_PRELUDE + r"""
import run_classifier

vocab_file, config_file, data_dir, checkpoint = sys.argv[1:5]
processor = run_classifier.MrpcProcessor()
examples = processor.get_train_examples(data_dir)
tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
features = run_classifier.convert_examples_to_features(
    examples, processor.get_labels(), 12, tokenizer)
config = modeling.BertConfig.from_json_file(config_file)
out = {"features": [[f.input_ids, f.input_mask, f.segment_ids, f.label_id]
                    for f in features]}


def first_batch(is_training=False):
    input_fn = run_classifier.input_fn_builder(features, 12, is_training=is_training,
                                               drop_remainder=is_training)
    return tf.data.make_one_shot_iterator(input_fn({"batch_size": 2})).get_next()


with tf.Graph().as_default():
    batch = first_batch()
    _, _, _, probabilities = run_classifier.create_model(
        config, False, batch["input_ids"], batch["input_mask"], batch["segment_ids"],
        batch["label_ids"], 2, False)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        out["create_model"] = sess.run(probabilities).tolist()
        tf.train.Saver().save(sess, checkpoint, write_meta_graph=False)

model_fn = run_classifier.model_fn_builder(config, 2, checkpoint, 1e-3, 10, 1, False, False)
for name, mode in (("predict", runtime.ModeKeys.PREDICT), ("eval", runtime.ModeKeys.EVAL),
                   ("train", runtime.ModeKeys.TRAIN)):
    out[name] = tiny.run_spec(model_fn, lambda: first_batch(mode == runtime.ModeKeys.TRAIN),
                              mode, {"batch_size": 2}, train_steps=2)
out["parsed"] = flags.FLAGS.is_parsed()
print("JSON" + json.dumps(out))
"""


def test_building_blocks_work_as_a_library_with_flags_unparsed(tmp_path):
    """In a fresh process that never parses flags: a processor reads MRPC
    files, convert_examples_to_features and input_fn_builder feed
    create_model, and model_fn_builder's PREDICT, EVAL and TRAIN specs run
    (starting from the weights create_model saved)."""
    data_dir = str(tmp_path / "MRPC")
    _write_glue(data_dir, "MRPC")
    words = ["amrozi", "accused", ".", "referring", "to", "him", "yucaipa", "owned",
             "bought"]
    vocab = tiny.write_vocab(str(tmp_path), words)
    config = tiny.write_config(str(tmp_path), vocab_size=len(tiny.SPECIAL_TOKENS) + len(words),
                               hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    out = tiny.run_library_script(_LIBRARY_SCRIPT, vocab, config, data_dir,
                                  tmp_path / "model.ckpt")
    assert not out["parsed"]

    # The two training rows, laid out by hand: [CLS] A [SEP] B [SEP], padded
    # to 12; ids are positions in the vocabulary file.
    ids = {w: i for i, w in enumerate(tiny.SPECIAL_TOKENS + words)}

    def pair(a, b):
        tokens = ["[CLS]"] + a.split() + ["[SEP]"] + b.split() + ["[SEP]"]
        segments = [0] * (len(a.split()) + 2) + [1] * (len(b.split()) + 1)
        padding = [0] * (12 - len(tokens))
        return [[ids[t] for t in tokens] + padding, [1] * len(tokens) + padding,
                segments + padding]

    assert out["features"] == [pair("amrozi accused .", "referring to him .") + [1],
                               pair("yucaipa owned .", "yucaipa bought .") + [0]]

    probabilities = np.array(out["create_model"])
    assert probabilities.shape == (2, 2)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-6)
    # model_fn_builder restored create_model's weights: the same predictions,
    # and the metrics of those predictions.
    np.testing.assert_allclose(out["predict"]["probabilities"], probabilities, rtol=1e-5)
    labels = np.array([1, 0])
    assert out["eval"]["eval_loss"] == pytest.approx(
        -np.mean(np.log(probabilities[[0, 1], labels])), rel=1e-5)
    assert out["eval"]["eval_accuracy"] == pytest.approx(
        np.mean(np.argmax(probabilities, axis=1) == labels))
    assert out["train"]["step"] == 2
    assert all(np.isfinite(out["train"]["losses"]))


# ---------------------------------------------------------------------------
# Metrics, against values computed by hand.

def test_metrics_hand_computed():
    labels = [1, 1, 0, 0, 1]
    predictions = [1, 0, 0, 1, 1]
    # TP=2 FP=1 FN=1 TN=1.
    assert classifier_metrics.accuracy(labels, predictions) == pytest.approx(0.6)
    assert classifier_metrics.f1_score(labels, predictions) == pytest.approx(4 / 6)
    # (2*1 - 1*1) / sqrt(3*3*2*2) = 1/6.
    assert classifier_metrics.matthews_corrcoef(labels, predictions) == pytest.approx(1 / 6)
    assert classifier_metrics.matthews_corrcoef([1, 0, 1], [1, 0, 1]) == pytest.approx(1.0)
    assert classifier_metrics.matthews_corrcoef([1, 0], [0, 1]) == pytest.approx(-1.0)
    assert classifier_metrics.matthews_corrcoef([1, 0, 1], [1, 1, 1]) == 0.0   # undefined
    assert classifier_metrics.f1_score([0, 0], [0, 0]) == 0.0                  # undefined
    # dx = [-1.5,-.5,.5,1.5], dy = [-3,-1,0,4]: 11 / sqrt(5 * 26).
    assert classifier_metrics.pearson_corr([1, 2, 3, 4], [2, 4, 5, 9]) == pytest.approx(
        11 / np.sqrt(130))
    assert classifier_metrics.pearson_corr([1, 1, 1], [1, 2, 3]) == 0.0
    # Ties get average ranks.
    assert list(classifier_metrics.average_ranks([10, 20, 10, 30, 20, 20])) == [
        1.5, 4, 1.5, 6, 4, 4]
    # Ranks x = [1, 2.5, 2.5, 4], y = [1, 3, 2, 4]: 4.5 / sqrt(4.5 * 5).
    assert classifier_metrics.spearman_corr([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(
        4.5 / np.sqrt(22.5))
    # Monotonic but non-linear: Spearman 1, Pearson below 1.
    assert classifier_metrics.spearman_corr([1, 2, 3, 4], [1, 4, 9, 100]) == pytest.approx(1.0)
    assert classifier_metrics.pearson_corr([1, 2, 3, 4], [1, 4, 9, 100]) < 0.9


def test_compute_metrics_excludes_padding():
    probabilities = [[0.1, 0.9], [0.8, 0.2], [0.3, 0.7], [0.9, 0.1]]
    labels = [1, 0, 0, 1]
    real = [1, 1, 1, 0]   # The last row is padding (and would be an error).
    result = classifier_metrics.compute_metrics(("f1", "matthews_corr"), labels,
                                                probabilities, real, is_regression=False)
    # Real rows: labels 1,0,0 predictions 1,0,1 -> TP=1 FP=1 TN=1 FN=0.
    assert result["eval_f1"] == pytest.approx(2 / 3)
    assert result["eval_matthews_corr"] == pytest.approx(1 / np.sqrt(2 * 1 * 2 * 1))
    result = classifier_metrics.compute_metrics(("pearson", "spearman"), [1.0, 2.0, 3.0, 0.0],
                                                [1.5, 2.5, 3.5, 99.0], [1, 1, 1, 0],
                                                is_regression=True)
    assert result == {"eval_pearson": pytest.approx(1.0), "eval_spearman": pytest.approx(1.0)}


# ---------------------------------------------------------------------------
# main, end to end on a tiny model.

WORDS = ["the", "a", "cat", "dog", "sat", "ran", "on", "mat", "fast", "slow", "big", "red",
         "blue", "green", "house", "tree"]


def _sentence(rng, good):
    """Five random words; with `good`, two of them replaced by "good"."""
    words = rng.sample(WORDS, 5)
    if good:
        for i in rng.sample(range(5), 2):
            words[i] = "good"
    return " ".join(words)


def _other(rng):
    """The second sentence: two random words (noise)."""
    return " ".join(rng.sample(WORDS, 2))


def _write_mrpc_task(data_dir, seed=0, num_train=256, num_dev=64, num_test=10):
    """A learnable MRPC-format task: label 1 iff "good" is in sentence 1.
    Test rows alternate with/without "good" and have indices 100, 101, ..."""
    rng = random.Random(seed)
    header = ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]
    for split, n in (("train", num_train), ("dev", num_dev)):
        rows = [header]
        for _ in range(n):
            label = rng.randint(0, 1)
            rows.append([str(label), "1", "2", _sentence(rng, label), _other(rng)])
        _write_tsv(os.path.join(data_dir, split + ".tsv"), rows)
    rows = [["index"] + header[1:]]
    for i in range(num_test):
        rows.append([str(100 + i), "1", "2", _sentence(rng, i % 2 == 1), _other(rng)])
    _write_tsv(os.path.join(data_dir, "test.tsv"), rows)


def _write_stsb_task(data_dir, seed=1, num_train=256, num_dev=48, num_test=6):
    """STS-B format: score = 1.5 * (number of "good" in sentence 1)."""
    rng = random.Random(seed)
    header = ["index", "genre", "filename", "year", "old_index", "source1", "source2",
              "sentence1", "sentence2", "score"]
    meta = ["main-captions", "MSRvid", "2012test", "0001", "none", "none"]
    for split, n in (("train", num_train), ("dev", num_dev), ("test", num_test)):
        rows = [header if split != "test" else header[:-1]]
        for i in range(n):
            k = rng.randint(0, 3)
            words = rng.sample(WORDS, 6)
            for j in range(k):
                words[j] = "good"
            rng.shuffle(words)
            row = [str(i)] + meta + [" ".join(words), _sentence(rng, False)]
            if split != "test":
                row.append("%.3f" % (1.5 * k))
            rows.append(row)
        _write_tsv(os.path.join(data_dir, split + ".tsv"), rows)


# run_classifier's own flags at the tests' values (own data's at their
# defaults), and its shared ones that differ from tiny.fine_tuning_flags.
CLASSIFIER_FLAGS = dict(
    task_name="MRPC", max_seq_length=24, learning_rate=1e-3, eval_every_n_steps=0,
    keep_best_checkpoint=False, best_checkpoint_metric=None, skip_malformed_rows=False,
    diagnostic_file=None, xnli_language="zh", labels=None, data_format="auto",
    has_header=True, text_column="text", text_b_column=None, label_column="label",
    id_column=None, regression=False, multi_label=False, label_separator="|",
    multi_label_threshold=0.5, doc_stride=None,
    # No explain signature in the exports (it triples an export's graph):
    # test_serving's export through main and test_explain test it.
    explain_steps=0, export_precision="fp32")


def _flag_values(**overrides):
    """Every flag main reads, set explicitly (shared flags' defaults depend
    on which script was imported first)."""
    return tiny.fine_tuning_flags(**dict(CLASSIFIER_FLAGS, **overrides))


def run_main(**overrides):
    """run_classifier.main with these flags (the rest at the tests' values), seeded
    (see tiny.run_main_seeded)."""
    tiny.run_main_seeded(run_classifier.main, _flag_values(**overrides))


def _model_files(tmp_path):
    """The vocabulary and config of the end-to-end runs: one layer, enough
    for the synthetic tasks, so each run builds a smaller graph."""
    return tiny.write_model_files(tmp_path, WORDS + ["good"], num_hidden_layers=1)


@pytest.fixture(scope="module")
def mrpc_run(tmp_path_factory):
    """Fine-tunes the tiny model on the synthetic MRPC task through main:
    train with evaluation every 64 steps and the best checkpoint kept, eval,
    predict and export."""
    tmp = tmp_path_factory.mktemp("mrpc")
    data_dir, output_dir, export_dir = (str(tmp / name) for name in ("data", "output", "export"))
    _write_mrpc_task(data_dir)
    vocab, config = _model_files(tmp)
    collector = tiny.LogMessages()
    logging.getLogger("tensorflow").addHandler(collector)
    try:
        # 256 examples / 16 * 8 epochs = 128 steps.
        run_main(task_name="mrpc", data_dir=data_dir, vocab_file=vocab, bert_config_file=config,
                 output_dir=output_dir, do_train=True, do_eval=True, do_predict=True,
                 eval_every_n_steps=64, keep_best_checkpoint=True, export_dir=export_dir,
                 learning_rate=2e-3)
    finally:
        logging.getLogger("tensorflow").removeHandler(collector)
    return dict(data_dir=data_dir, vocab=vocab, config=config, output_dir=output_dir,
                export_dir=export_dir, logs=collector.messages)


def _features(data_dir, task, split, vocab, max_seq_length=24):
    processor = run_classifier.get_processor(task)
    examples = {"dev": processor.get_dev_examples, "test": processor.get_test_examples}[
        split](data_dir)
    tokenizer = tokenization.FullTokenizer(vocab, do_lower_case=True)
    features = run_classifier.convert_examples_to_features(
        examples, processor.get_labels(), max_seq_length, tokenizer)
    return features


def _run_saved_model(export_dir, features, output_name):
    """Runs the export's id signature (serving_ids) in a TF1 session."""
    (path,) = [os.path.join(export_dir, d) for d in os.listdir(export_dir)]
    with tf.Graph().as_default(), tf.Session() as sess:
        meta = tf.saved_model.loader.load(sess, [tf.saved_model.tag_constants.SERVING], path)
        signature = meta.signature_def["serving_ids"]
        assert set(signature.inputs) == {"input_ids", "input_mask", "segment_ids"}
        assert set(signature.outputs) == {output_name}
        feed = {signature.inputs[name].name: np.array([getattr(f, name) for f in features],
                                                      dtype=np.int32)
                for name in ("input_ids", "input_mask", "segment_ids")}
        graph_def = meta.graph_def
        # Plain ops only (a model server may lack XLA), though training
        # compiled its GELUs.
        compiled = [node.name for node in graph_def.node if "_XlaMustCompile" in node.attr]
        compiled += [function.signature.name for function in graph_def.library.function
                     if "_XlaMustCompile" in function.attr]
        assert not compiled, compiled
        return sess.run(signature.outputs[output_name].name, feed)


@pytest.mark.slow
def test_fine_tuning_reaches_high_dev_accuracy(mrpc_run):
    result = tiny.read_eval_results(os.path.join(mrpc_run["output_dir"], "eval_results.txt"))
    assert set(result) == {"eval_accuracy", "eval_f1", "eval_loss", "global_step", "loss"}
    assert result["eval_accuracy"] >= 0.9
    assert result["eval_f1"] >= 0.9
    # 256 examples / batch 16 * 8 epochs.
    assert result["global_step"] == 128
    logs = "\n".join(mrpc_run["logs"])
    # The training loss is visible on CPU; evaluation ran during training.
    assert "loss = " in logs and "examples/s" in logs
    for step in (64, 128):
        assert "***** Eval results at step %d *****" % step in logs
    assert "***** Eval results *****" in logs


@pytest.mark.slow
def test_bf16_fine_tuning_reaches_the_float32_dev_metric(tmp_path):
    # The same seeded fine-tuning with float32 and with bfloat16 matmuls and
    # activations (variables, optimizer and loss stay float32): the reduced
    # precision must not cost accuracy on the learnable task.
    data_dir = str(tmp_path / "data")
    _write_mrpc_task(data_dir)
    vocab, config = _model_files(tmp_path)
    results = {}
    for precision in ("fp32", "bf16"):
        output_dir = str(tmp_path / precision)
        run_main(task_name="mrpc", data_dir=data_dir, vocab_file=vocab,
                 bert_config_file=config, output_dir=output_dir, do_train=True,
                 do_eval=True, learning_rate=2e-3, precision=precision)
        results[precision] = tiny.read_eval_results(os.path.join(output_dir, "eval_results.txt"))
    assert results["fp32"]["global_step"] == results["bf16"]["global_step"] == 128
    assert results["fp32"]["eval_accuracy"] >= 0.9
    assert results["bf16"]["eval_accuracy"] >= results["fp32"]["eval_accuracy"] - 0.01
    assert results["bf16"]["eval_f1"] >= results["fp32"]["eval_f1"] - 0.01


@pytest.mark.slow
def test_best_checkpoint_is_kept(mrpc_run):
    best_dir = os.path.join(mrpc_run["output_dir"], "best")
    best = tiny.read_eval_results(os.path.join(best_dir, "eval_results.txt"))
    final = tiny.read_eval_results(os.path.join(mrpc_run["output_dir"], "eval_results.txt"))
    assert best["eval_f1"] >= final["eval_f1"]
    step = int(best["global_step"])
    assert tf.train.latest_checkpoint(best_dir) == os.path.join(best_dir,
                                                                "model.ckpt-%d" % step)
    logs = "\n".join(mrpc_run["logs"])
    assert "Wrote %s: the best checkpoint" % os.path.join(best_dir, "model.ckpt-%d" % step) in logs


@pytest.mark.slow
def test_predictions_rows_order_and_glue_file(mrpc_run):
    with open(os.path.join(mrpc_run["output_dir"], "test_results.tsv")) as f:
        rows = [[float(x) for x in line.rstrip("\n").split("\t")] for line in f]
    assert len(rows) == 10
    probabilities = np.array(rows)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)
    # Test rows alternate without/with "good": the input order is kept.
    assert list(np.argmax(probabilities, axis=1)) == [0, 1] * 5
    with open(os.path.join(mrpc_run["output_dir"], "MRPC.tsv")) as f:
        lines = f.read().splitlines()
    assert lines[0] == "index\tprediction"
    assert lines[1:] == ["%d\t%d" % (100 + i, i % 2) for i in range(10)]


@pytest.mark.slow
def test_saved_model_reproduces_estimator_predictions(mrpc_run):
    # The export and the predictions both come from the best checkpoint.
    features = _features(mrpc_run["data_dir"], "MRPC", "test", mrpc_run["vocab"])
    served = _run_saved_model(mrpc_run["export_dir"], features, "probabilities")
    with open(os.path.join(mrpc_run["output_dir"], "test_results.tsv")) as f:
        predicted = np.array([[float(x) for x in line.split("\t")] for line in f])
    np.testing.assert_allclose(served, predicted, atol=1e-5)
    # And its dev predictions give the best checkpoint's metrics.
    dev = _features(mrpc_run["data_dir"], "MRPC", "dev", mrpc_run["vocab"])
    dev_predictions = np.argmax(_run_saved_model(mrpc_run["export_dir"], dev,
                                                 "probabilities"), axis=1)
    labels = [f.label_id for f in dev]
    best = tiny.read_eval_results(os.path.join(mrpc_run["output_dir"], "best", "eval_results.txt"))
    assert classifier_metrics.accuracy(labels, dev_predictions) == pytest.approx(
        best["eval_accuracy"], abs=1e-6)
    assert classifier_metrics.f1_score(labels, dev_predictions) == pytest.approx(
        best["eval_f1"], abs=1e-6)


@pytest.mark.slow
def test_text_signature_gives_the_predictions(mrpc_run):
    """The export's serving_default takes the test set's texts and gives
    test_results.tsv's probabilities (each batch padded only to its longest
    pair), and the label names."""
    import test_serving
    examples = run_classifier.get_processor("MRPC").get_test_examples(mrpc_run["data_dir"])
    (path,) = [os.path.join(mrpc_run["export_dir"], d)
               for d in os.listdir(mrpc_run["export_dir"])]
    served = test_serving._run_signature(path, "serving_default", {
        "text_a": [e.text_a for e in examples], "text_b": [e.text_b for e in examples]})
    with open(os.path.join(mrpc_run["output_dir"], "test_results.tsv")) as f:
        predicted = np.array([[float(x) for x in line.split("\t")] for line in f])
    np.testing.assert_allclose(served["probabilities"], predicted, atol=1e-4)
    assert list(served["label_ids"]) == list(np.argmax(predicted, axis=1))
    assert [label.decode() for label in served["labels"]] == [
        ["0", "1"][i] for i in np.argmax(predicted, axis=1)]


@pytest.mark.slow
def test_predict_and_export_from_a_fine_tuned_init_checkpoint(mrpc_run, tmp_path):
    """--do_predict and --export_dir with --init_checkpoint a fine-tuned
    classifier and a new --output_dir: the predictions and the export are
    the fine-tuned model's, and the log says so truly: every variable
    restored (counted once), the weights named, no warning of fresh ones."""
    best = tf.train.latest_checkpoint(os.path.join(mrpc_run["output_dir"], "best"))
    export_dir = str(tmp_path / "export")
    output_dir = str(tmp_path / "out")
    collector = tiny.LogMessages()
    logging.getLogger("tensorflow").addHandler(collector)
    try:
        run_main(task_name="MRPC", data_dir=mrpc_run["data_dir"], vocab_file=mrpc_run["vocab"],
                 bert_config_file=mrpc_run["config"], output_dir=output_dir,
                 init_checkpoint=best, do_predict=True, export_dir=export_dir)
    finally:
        logging.getLogger("tensorflow").removeHandler(collector)
    counts = [re.match(r"Trainable variables: (\d+), [\d,]+ parameters; (\d+) restored from "
                       + re.escape(best) + "$", m) for m in collector.messages]
    counts = [m.groups() for m in counts if m]
    assert counts and all(total == restored for total, restored in counts), counts
    assert "Predicting with the weights of %s" % best in collector.messages
    assert not [m for m in collector.messages if "freshly initialised" in m]
    with open(os.path.join(output_dir, "test_results.tsv")) as f:
        predicted = np.array([[float(x) for x in line.split("\t")] for line in f])
    with open(os.path.join(mrpc_run["output_dir"], "test_results.tsv")) as f:
        trained = np.array([[float(x) for x in line.split("\t")] for line in f])
    np.testing.assert_allclose(predicted, trained, atol=1e-6)
    features = _features(mrpc_run["data_dir"], "MRPC", "test", mrpc_run["vocab"])
    np.testing.assert_allclose(_run_saved_model(export_dir, features, "probabilities"),
                               _run_saved_model(mrpc_run["export_dir"], features,
                                                "probabilities"), atol=1e-6)


def _copy_best_checkpoint(mrpc_run, output_dir):
    """Copies the best checkpoint of `mrpc_run` into `output_dir`; returns
    the folder it came from."""
    best_dir = os.path.join(mrpc_run["output_dir"], "best")
    for name in os.listdir(best_dir):
        if name.startswith("model.ckpt") or name == "checkpoint":
            shutil.copy(os.path.join(best_dir, name), output_dir)
    return best_dir


@pytest.mark.slow
def test_predict_only_run_follows_the_run_record(mrpc_run, tmp_path):
    """The training run records its task, labels, model config and input
    settings; a prediction run given only --output_dir (holding that
    record and the checkpoint), --data_dir and --do_predict takes the rest
    from it and predicts what the training run predicted."""
    with open(os.path.join(mrpc_run["output_dir"], "run_config.json")) as f:
        record = json.load(f)
    with open(mrpc_run["config"]) as f:
        assert record["bert_config"] == json.load(f)
    assert record["problem_type"] == "single_label_classification"
    assert record["labels"] == ["0", "1"]
    assert record["flags"] == {"task_name": "mrpc", "do_lower_case": True,
                               "max_seq_length": 24,
                               "vocab_file": os.path.abspath(mrpc_run["vocab"])}
    output_dir = str(tmp_path / "predict")
    os.makedirs(output_dir)
    _copy_best_checkpoint(mrpc_run, output_dir)
    shutil.copy(os.path.join(mrpc_run["output_dir"], "run_config.json"), output_dir)
    collector = tiny.LogMessages()
    logging.getLogger("tensorflow").addHandler(collector)
    try:
        tiny.run_main_seeded(run_classifier.main, dict(
            output_dir=output_dir, data_dir=mrpc_run["data_dir"], do_predict=True))
    finally:
        logging.getLogger("tensorflow").removeHandler(collector)
    taken = [m for m in collector.messages if m.startswith("Settings of the training run")]
    assert taken == ["Settings of the training run, from %s: --do_lower_case=True "
                     "--max_seq_length=24 --task_name=mrpc --vocab_file=%s"
                     % (os.path.join(output_dir, "run_config.json"),
                        os.path.abspath(mrpc_run["vocab"]))]
    with open(os.path.join(output_dir, "test_results.tsv")) as f:
        followed = np.array([[float(x) for x in line.split("\t")] for line in f])
    with open(os.path.join(mrpc_run["output_dir"], "test_results.tsv")) as f:
        trained = np.array([[float(x) for x in line.split("\t")] for line in f])
    np.testing.assert_allclose(followed, trained, atol=1e-6)


@pytest.mark.slow
def test_evaluate_and_predict_under_a_distribution_strategy(mrpc_run, tmp_path):
    """Evaluation and prediction through MirroredStrategy (one CPU device)
    read the run's checkpoint and write what the run without one wrote."""
    output_dir = str(tmp_path / "mirrored")
    os.makedirs(output_dir)
    _copy_best_checkpoint(mrpc_run, output_dir)
    shutil.copy(os.path.join(mrpc_run["output_dir"], "run_config.json"), output_dir)
    tiny.run_main_seeded(run_classifier.main, dict(
        output_dir=output_dir, data_dir=mrpc_run["data_dir"], do_eval=True, do_predict=True,
        distribution_strategy="mirrored"))
    with open(os.path.join(output_dir, "test_results.tsv")) as f:
        mirrored = np.array([[float(x) for x in line.split("\t")] for line in f])
    with open(os.path.join(mrpc_run["output_dir"], "test_results.tsv")) as f:
        trained = np.array([[float(x) for x in line.split("\t")] for line in f])
    np.testing.assert_allclose(mirrored, trained, atol=1e-6)
    result = tiny.read_eval_results(os.path.join(output_dir, "eval_results.txt"))
    assert result["eval_accuracy"] > 0.9, result


def _follow_record():
    """The run record that a run without --do_train of the parsed flags
    follows, and its settings (what `fine_tuning.prepare_run` reads)."""
    settings = settings_lib.from_flags(run_classifier.Settings)
    record = run_record.read(settings.output_dir, settings.init_checkpoint,
                             "run_classifier.py")
    return record, run_record.follow(settings, record)


def test_another_scripts_record_beside_the_checkpoint_is_not_followed(tmp_path):
    """A run record next to --init_checkpoint made by another script (a
    pre-training run's, say) gives this script's run no settings; its own
    script's is followed."""
    checkpoint_dir = tmp_path / "pretrained"
    checkpoint_dir.mkdir()
    config = modeling.BertConfig.from_dict(tiny.tiny_config_dict(30))
    run_record.write(str(checkpoint_dir), "run_pretraining.py", "pretraining",
                                 config, {"max_seq_length": 16})
    if not FLAGS.is_parsed():
        FLAGS.mark_as_parsed()
    with flagsaver.flagsaver(output_dir=str(tmp_path / "new"), do_train=False,
                             init_checkpoint=str(checkpoint_dir)), \
            tiny.LogMessages.collecting() as log:
        record, settings = _follow_record()
        assert record is None and settings.max_seq_length == 128
        assert "Not following %s, the run record of run_pretraining.py" % (
            checkpoint_dir / "run_config.json") in log.text
        run_record.write(str(checkpoint_dir), "run_classifier.py",
                                     "single_label_classification", config,
                                     {"max_seq_length": 16}, labels=["0", "1"])
        record, settings = _follow_record()
        assert record.script == "run_classifier.py" and settings.max_seq_length == 16


def test_run_record_fills_unset_flags_and_warns_on_given_ones(tmp_path):
    """Without --do_train, flags the command line leaves unset take the
    record's values; a given flag keeps its value, with one warning line;
    a training run reads no record."""
    record = {"script": "run_classifier.py", "problem_type": "single_label_classification",
              "labels": ["0", "1"], "bert_config": {"vocab_size": 9},
              "flags": {"task_name": "mrpc", "max_seq_length": 24, "do_lower_case": False,
                        "vocab_file": str(tmp_path / "gone.txt")}}
    (tmp_path / "run_config.json").write_text(json.dumps(record))
    if not FLAGS.is_parsed():
        FLAGS.mark_as_parsed()
    collector = tiny.LogMessages()
    logging.getLogger("tensorflow").addHandler(collector)
    verbosity = tf.logging.get_verbosity()
    tf.logging.set_verbosity(tf.logging.INFO)
    try:
        with flagsaver.flagsaver(output_dir=str(tmp_path), do_train=False, task_name="sst-2",
                                 init_checkpoint=None):
            before = (FLAGS.max_seq_length, FLAGS.do_lower_case)
            read, settings = _follow_record()
            values = (settings.task_name, settings.max_seq_length, settings.do_lower_case,
                      settings.vocab_file)
            # The flags themselves keep their parsed values.
            after = (FLAGS.max_seq_length, FLAGS.do_lower_case)
        with flagsaver.flagsaver(output_dir=str(tmp_path), do_train=True):
            # The record's config would stand in for --bert_config_file.
            with pytest.raises(errors.InputError, match="--bert_config_file"):
                fine_tuning.prepare_run(settings_lib.from_flags(run_classifier.Settings),
                                        "run_classifier.py")
    finally:
        tf.logging.set_verbosity(verbosity)
        logging.getLogger("tensorflow").removeHandler(collector)
    assert read.labels == ["0", "1"] and read.bert_config == {"vocab_size": 9}
    # The missing vocabulary is not taken.
    assert values == ("sst-2", 24, False, FLAGS["vocab_file"].default)
    assert after == before and after != (24, False)
    path = str(tmp_path / "run_config.json")
    assert collector.messages == [
        "--task_name=sst-2 differs from the training run's mrpc in %s; using sst-2" % path,
        "%s names --vocab_file=%s, which does not exist (any more)"
        % (path, tmp_path / "gone.txt"),
        "Settings of the training run, from %s: --do_lower_case=False --max_seq_length=24"
        % path]


@pytest.mark.slow
def test_tpu_style_padding_changes_nothing(mrpc_run, tmp_path, monkeypatch):
    """With fixed-size batches (as on TPU) the sets are padded with
    PaddingInputExamples; metrics and predictions exclude them."""
    output_dir = str(tmp_path / "padded")
    os.makedirs(output_dir)
    best_dir = _copy_best_checkpoint(mrpc_run, output_dir)
    monkeypatch.setattr(fine_tuning.Run, "fixed_batches", property(lambda run: True))
    # 64 dev examples -> padded to lcm(5, 3) multiples = 75; 10 test -> 12.
    run_main(task_name="MRPC", data_dir=mrpc_run["data_dir"], vocab_file=mrpc_run["vocab"],
             bert_config_file=mrpc_run["config"], output_dir=output_dir, do_eval=True,
             do_predict=True, eval_batch_size=5, predict_batch_size=3)
    padded = tiny.read_eval_results(os.path.join(output_dir, "eval_results.txt"))
    best = tiny.read_eval_results(os.path.join(best_dir, "eval_results.txt"))
    for key in ("eval_accuracy", "eval_f1", "eval_loss", "global_step"):
        assert padded[key] == pytest.approx(best[key], abs=1e-5), key
    with open(os.path.join(output_dir, "test_results.tsv")) as f:
        padded_predictions = np.array([[float(x) for x in line.split("\t")] for line in f])
    with open(os.path.join(mrpc_run["output_dir"], "test_results.tsv")) as f:
        predictions = np.array([[float(x) for x in line.split("\t")] for line in f])
    assert padded_predictions.shape == (10, 2)
    np.testing.assert_allclose(padded_predictions, predictions, atol=1e-5)


@pytest.mark.slow
def test_stsb_regression_end_to_end(tmp_path):
    data_dir = str(tmp_path / "data")
    _write_stsb_task(data_dir)
    vocab, config = _model_files(tmp_path)
    output_dir = str(tmp_path / "output")
    export_dir = str(tmp_path / "export")
    # 256 / 16 * 6 = 96 steps.
    run_main(task_name="sts-b", data_dir=data_dir, vocab_file=vocab, bert_config_file=config,
             output_dir=output_dir, do_train=True, do_eval=True, do_predict=True,
             num_train_epochs=6.0, export_dir=export_dir)
    result = tiny.read_eval_results(os.path.join(output_dir, "eval_results.txt"))
    assert set(result) == {"eval_loss", "eval_pearson", "eval_spearman", "global_step",
                           "loss"}
    assert result["global_step"] == 96
    assert result["eval_pearson"] > 0.8
    # The metrics agree with NumPy over the exported model's dev scores.
    dev = _features(data_dir, "STS-B", "dev", vocab)
    scores = _run_saved_model(export_dir, dev, "scores")
    labels = np.array([f.label_id for f in dev])
    assert scores.shape == (48,)
    # eval_results.txt comes from the script's own predict pass (batches of
    # 8); these scores from the SavedModel (one batch of 48). The two float32
    # computations round differently, and the metrics (computed in float64
    # from each set of scores) move with that noise: Pearson by up to 3e-5
    # in repeated runs, so 1e-5 was flaky. The tolerances cover float32
    # run-to-run variation, two orders of magnitude below a real error.
    assert result["eval_loss"] == pytest.approx(np.mean((scores - labels) ** 2), rel=1e-4)
    assert result["eval_pearson"] == pytest.approx(
        classifier_metrics.pearson_corr(labels, scores), abs=2e-4)
    # Nearly tied scores may also swap ranks.
    assert result["eval_spearman"] == pytest.approx(
        classifier_metrics.spearman_corr(labels, scores), abs=1e-3)
    with open(os.path.join(output_dir, "test_results.tsv")) as f:
        test_scores = [float(line) for line in f]
    assert len(test_scores) == 6
    with open(os.path.join(output_dir, "STS-B.tsv")) as f:
        lines = f.read().splitlines()
    assert lines[0] == "index\tprediction"
    assert [line.split("\t")[0] for line in lines[1:]] == [str(i) for i in range(6)]
    np.testing.assert_allclose([float(line.split("\t")[1]) for line in lines[1:]],
                               test_scores, rtol=1e-6)


# ---------------------------------------------------------------------------
# Bad input: a clear error before anything is trained or written.

@pytest.fixture
def good_inputs(tmp_path):
    data_dir = str(tmp_path / "data")
    _write_mrpc_task(data_dir, num_train=8, num_dev=4, num_test=2)
    vocab, config = _model_files(tmp_path)
    return dict(task_name="MRPC", data_dir=data_dir, vocab_file=vocab, bert_config_file=config,
                output_dir=str(tmp_path / "output"), do_train=True, do_eval=True,
                do_predict=True)


@pytest.mark.parametrize("change, message", tiny.shared_flag_errors("/nonexistent/glue/MRPC") + [
    (dict(task_name="MRCP"), r"--task_name: unknown task 'MRCP'; known tasks: cola, "),
    (dict(init_checkpoint="/nonexistent/model.ckpt"), r"--init_checkpoint: no checkpoint at"),
    (dict(do_train=False, keep_best_checkpoint=True), r"need --do_train and --do_eval"),
    (dict(export_dir=__file__), r"--export_dir .*test_run_classifier\.py is a file, not a "
                                r"directory"),
])
def test_bad_flags(good_inputs, change, message):
    good_inputs.update(change)
    with pytest.raises(errors.InputError, match=message):
        run_main(**good_inputs)
    assert not os.path.exists(os.path.join(good_inputs["output_dir"], "train.tf_record"))


def test_export_with_a_vocabulary_the_graph_cannot_read_stops_first(good_inputs, tmp_path):
    """A vocabulary the export's in-graph tokenizer cannot read (here a
    token twice) stops the run before training, naming the line."""
    vocab = tmp_path / "twice.txt"
    with open(good_inputs["vocab_file"]) as f:
        vocab.write_text(f.read() + "good\n")
    tiny.assert_input_error(run_main, dict(good_inputs, vocab_file=str(vocab),
                                           export_dir=str(tmp_path / "export")),
                            r"--export_dir needs a --vocab_file .*twice\.txt, line \d+")


@pytest.mark.parametrize("file_name, rows, message", [
    ("dev.tsv", None, r"file not found: .*dev\.tsv"),
    ("test.tsv", [["index", "#1 ID", "#2 ID", "#1 String", "#2 String"], ["0", "1", "A."]],
     r"test\.tsv, line 2: expected 5 tab-separated columns, found 3"),
    ("dev.tsv", [["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"],
                 ["1", "1", "2", "a", "b"], ["2", "1", "2", "a", "b"]],
     r"dev\.tsv, line 3: label '2' is not one of the task's labels 0, 1"),
])
def test_bad_data_stops_before_training(good_inputs, file_name, rows, message):
    path = os.path.join(good_inputs["data_dir"], file_name)
    if rows is None:
        os.remove(path)
    else:
        _write_tsv(path, rows)
    tiny.assert_input_error(run_main, good_inputs, message)


def test_max_train_steps_cuts_the_run_short(good_inputs):
    """--max_train_steps=3 of 8 examples / 2 * 10 epochs = 40 steps: the run
    stops at step 3, and says so once."""
    collector = tiny.LogMessages()
    logging.getLogger("tensorflow").addHandler(collector)
    verbosity = tf.logging.get_verbosity()
    tf.logging.set_verbosity(tf.logging.INFO)
    try:
        run_main(**dict(good_inputs, do_eval=False, do_predict=False, train_batch_size=2,
                        num_train_epochs=10.0, max_train_steps=3))
    finally:
        tf.logging.set_verbosity(verbosity)
        logging.getLogger("tensorflow").removeHandler(collector)
    assert tf.train.latest_checkpoint(good_inputs["output_dir"]).endswith("model.ckpt-3")
    assert collector.messages.count(
        "Training 3 of the 40 steps of 10.0 epochs (--max_train_steps)") == 1


def test_command_line_error_is_one_line(good_inputs, monkeypatch, capsys):
    """From the shell (`script_runner.run_script`), bad input gives one ERROR
    line and exit status 1, no traceback."""
    inputs = {k: v for k, v in good_inputs.items() if k != "task_name"}
    err = tiny.shell_error(run_classifier.main, ["run_classifier.py", "--task_name=nope"],
                           inputs, monkeypatch, capsys)
    assert "ERROR: --task_name: unknown task 'nope'; known tasks:" in err
