"""Tests of own data (own_data.py, run_classifier.py --task_name=generic):
CSV, TSV and JSON Lines readers with and without headers, label inference
and labels.txt, multi-label metrics against hand-worked numbers, and main
end to end on a tiny seeded model (three classes, multi-label, regression),
with predictions, SavedModel export and bad input."""

import json
import os
import random
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
from absl import flags
from absl.testing import flagsaver

from scriptkit import classifier_metrics
from scriptkit import errors
import modeling
from scriptkit import own_data
import run_classifier
from scriptkit import script_runner
import test_run_classifier
import tiny
import tokenization

FLAGS = flags.FLAGS


def _write(path, text, mode="w"):
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    with open(str(path), mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
        f.write(text)
    return str(path)


def _processor(**settings):
    return own_data.GenericProcessor(own_data.Settings(**settings))


def _triples(examples):
    return [(e.guid, e.text_a, e.text_b, e.label) for e in examples]


# ---------------------------------------------------------------------------
# Readers.

def test_csv_with_header_quotes_commas_and_multiline_fields(tmp_path):
    path = _write(tmp_path / "train.csv",
                  "id,text,label\n"
                  "a1,\"Good, really good.\",positive\n"
                  "\n"
                  "a2,\"She said \"\"no\"\".\",negative\n"
                  "a3,\"Two\nlines\",neutral\n"
                  "a4,plain,neutral\n")
    table = own_data.read_table(path)
    assert table.data_format == "csv"
    assert table.header == ["id", "text", "label"]
    # Line numbers are where each row starts; the blank line is skipped.
    assert table.rows == [(2, ["a1", "Good, really good.", "positive"]),
                          (4, ["a2", "She said \"no\".", "negative"]),
                          (5, ["a3", "Two\nlines", "neutral"]),
                          (7, ["a4", "plain", "neutral"])]
    examples = _processor(data_dir=str(tmp_path), id_column="id", do_train=True) \
        .get_train_examples(str(tmp_path))
    assert _triples(examples) == [
        ("train-a1", "Good, really good.", None, "positive"),
        ("train-a2", "She said \"no\".", None, "negative"),
        ("train-a3", "Two\nlines", None, "neutral"),
        ("train-a4", "plain", None, "neutral")]


def test_tsv_sst2_layout_with_words_as_labels(tmp_path):
    """The issue's case: SST-2's layout with positive/negative/neutral."""
    _write(tmp_path / "train.tsv", "sentence\tlabel\n"
                                   "it 's a \"charming\" trip \tpositive\n"
                                   "dull\tnegative\n"
                                   "a film\tneutral\n")
    processor = _processor(data_dir=str(tmp_path), text_column="sentence", do_train=True)
    # Quotes are ordinary characters in TSV; rows are numbered from 0.
    assert _triples(processor.get_train_examples(str(tmp_path))) == [
        ("train-0", "it 's a \"charming\" trip ", None, "positive"),
        ("train-1", "dull", None, "negative"),
        ("train-2", "a film", None, "neutral")]
    assert processor.get_labels() == ["negative", "neutral", "positive"]


@pytest.mark.parametrize("extension, separator", [(".csv", ","), (".tsv", "\t")])
def test_without_header_columns_by_number(tmp_path, extension, separator):
    _write(tmp_path / ("train" + extension),
           "\n".join(separator.join(row) for row in [["7", "first a", "first b", "1"],
                                                      ["8", "second a", "second b", "0"]]))
    processor = _processor(data_dir=str(tmp_path), has_header=False, text_column="1",
                           text_b_column="2", label_column="3", id_column="0", do_train=True)
    assert _triples(processor.get_train_examples(str(tmp_path))) == [
        ("train-7", "first a", "first b", "1"), ("train-8", "second a", "second b", "0")]
    # Names are not column numbers without a header.
    processor = _processor(data_dir=str(tmp_path), has_header=False, do_train=True)
    with pytest.raises(errors.InputError,
                       match=r"--label_column=label: without a header row .* numbers"):
        processor.get_train_examples(str(tmp_path))
    processor = _processor(data_dir=str(tmp_path), has_header=False, text_column="1",
                           label_column="4", do_train=True)
    with pytest.raises(errors.InputError,
                       match=r"--label_column=4: .*train\%s has only 4 columns" % extension):
        processor.get_train_examples(str(tmp_path))


def test_jsonl_fields_numbers_and_byte_order_mark(tmp_path):
    # A byte-order mark (as some editors write) and a JSON number label.
    _write(tmp_path / "train.jsonl",
           "\ufeff" + json.dumps({"text": "café au lait", "label": 1, "id": 5}) + "\n\n"
           + json.dumps({"id": "x", "label": "0", "text": "tea", "other": [1, 2]}) + "\n",
           )
    processor = _processor(data_dir=str(tmp_path), id_column="id", do_train=True)
    assert _triples(processor.get_train_examples(str(tmp_path))) == [
        ("train-5", "café au lait", None, "1"), ("train-x", "tea", None, "0")]
    # The header flag means nothing to JSON Lines.
    processor = _processor(data_dir=str(tmp_path), has_header=False, do_train=True)
    assert len(processor.get_train_examples(str(tmp_path))) == 2


def test_format_from_extension_or_flag(tmp_path):
    assert own_data.detect_format("a/train.CSV") == "csv"
    assert own_data.detect_format("train.tsv") == "tsv"
    assert own_data.detect_format("train.ndjson") == "jsonl"
    assert own_data.detect_format("train.txt", "tsv") == "tsv"
    with pytest.raises(errors.InputError, match=r"train\.txt: cannot tell the format.*"
                                                    r"--data_format"):
        own_data.detect_format("train.txt")
    path = _write(tmp_path / "reviews.txt", "text\tlabel\na\tx\nb\ty\n")
    processor = _processor(train_file=path, data_format="tsv", do_train=True)
    assert [e.label for e in processor.get_train_examples(None)] == ["x", "y"]


def test_data_files_found_in_data_dir(tmp_path):
    d = str(tmp_path)
    _write(tmp_path / "train.csv", "text,label\na,x\nb,y\n")
    _write(tmp_path / "val.jsonl", '{"text": "c", "label": "y"}\n')
    _write(tmp_path / "test.tsv", "text\nd\n")
    processor = _processor(data_dir=d, do_train=True)
    assert [e.text_a for e in processor.get_dev_examples(d)] == ["c"]
    # Test files need no label column; their examples get a placeholder.
    assert _triples(processor.get_test_examples(d)) == [("test-0", "d", None, "x")]
    _write(tmp_path / "test.csv", "text\ne\n")
    with pytest.raises(errors.InputError,
                       match=r"several test files \(test\.csv, test\.tsv\).*--test_file"):
        processor.get_test_examples(d)
    with pytest.raises(errors.InputError, match=r"No dev file in --data_dir=.*empty.*dev / "
                                                    r"val.*--dev_file"):
        processor.get_dev_examples(str(tmp_path / "empty"))


# ---------------------------------------------------------------------------
# Labels: inferred, given, saved and reused.

def test_labels_inferred_sorted_and_saved(tmp_path):
    _write(tmp_path / "data" / "train.csv", "text,label\na,10\nb,2\nc,9\nd,2\n")
    output_dir = str(tmp_path / "out")
    processor = _processor(data_dir=str(tmp_path / "data"), output_dir=output_dir,
                           do_train=True)
    # Integers sort as numbers.
    assert processor.get_labels() == ["2", "9", "10"]
    os.makedirs(output_dir)
    path = processor.write_labels(output_dir)
    assert path == os.path.join(output_dir, "labels.txt")
    with open(path) as f:
        assert f.read() == "2\n9\n10\n"
    assert own_data.sort_labels(["b", "a", "C"]) == ["C", "a", "b"]

    # Without training, labels.txt wins over the (now different) training file.
    _write(tmp_path / "data" / "train.csv", "text,label\na,1\nb,2\n")
    processor = _processor(data_dir=str(tmp_path / "data"), output_dir=output_dir)
    assert processor.get_labels() == ["2", "9", "10"]
    # ... also when it lies next to --init_checkpoint.
    processor = _processor(output_dir=str(tmp_path / "other"),
                           init_checkpoint=os.path.join(output_dir, "model.ckpt-5"))
    assert processor.get_labels() == ["2", "9", "10"]
    # --labels: as given, in that order.
    processor = _processor(labels="pos, neg ,neu", output_dir=str(tmp_path / "new"))
    assert processor.get_labels() == ["pos", "neg", "neu"]
    # Nothing to go by.
    processor = _processor(output_dir=str(tmp_path / "new"), test_file="t.csv")
    with pytest.raises(errors.InputError, match=r"No labels: give them with --labels"):
        processor.get_labels()


def test_labels_must_match_the_model_in_output_dir(tmp_path):
    _write(tmp_path / "train.csv", "text,label\na,x\nb,y\nc,z\n")
    output_dir = str(tmp_path / "out")
    os.makedirs(output_dir)
    own_data.write_label_file(os.path.join(output_dir, "labels.txt"), ["x", "y"])
    # No checkpoint yet: the file is simply replaced later.
    assert _processor(data_dir=str(tmp_path), output_dir=output_dir,
                      do_train=True).get_labels() == ["x", "y", "z"]
    _write(os.path.join(output_dir, "checkpoint"), 'model_checkpoint_path: "model.ckpt-1"\n')
    _write(os.path.join(output_dir, "model.ckpt-1.index"), "")
    with pytest.raises(errors.InputError,
                       match=r"trained with the labels x, y .* are x, y, z.*new --output_dir"):
        _processor(data_dir=str(tmp_path), output_dir=output_dir, do_train=True).get_labels()


def test_multi_label_parsing(tmp_path):
    _write(tmp_path / "train.jsonl",
           "\n".join(json.dumps(r) for r in [
               {"text": "a", "label": ["sport", "news"]},
               {"text": "b", "label": "news | weather"},
               {"text": "c", "label": ""},
               {"text": "d", "label": ["news", "news"]}]))
    processor = _processor(data_dir=str(tmp_path), multi_label=True, do_train=True)
    assert processor.get_labels() == ["news", "sport", "weather"]
    assert [e.label for e in processor.get_train_examples(str(tmp_path))] == [
        ("sport", "news"), ("news", "weather"), (), ("news",)]
    assert processor.main_metric == "eval_micro_f1"
    # A label list without --multi_label is an error.
    with pytest.raises(errors.InputError, match=r"train\.jsonl, line 1: the label is a "
                                                    r"list; .*--multi_label"):
        _processor(data_dir=str(tmp_path), do_train=True).get_labels()
    # Multi-hot label ids, and the all-zero padding example.
    tokenizer = tokenization.FullTokenizer(tiny.write_vocab(str(tmp_path), ["a"]))
    example = run_classifier.InputExample("x", "a", label=("weather", "news"))
    feature = run_classifier.convert_single_example(
        0, example, ["news", "sport", "weather"], 8, tokenizer, multi_label=True)
    assert feature.label_id == [1, 0, 1]
    padding = run_classifier.convert_single_example(
        0, run_classifier.PaddingInputExample(), ["news", "sport", "weather"], 8, tokenizer,
        multi_label=True)
    assert padding.label_id == [0, 0, 0] and not padding.is_real_example


# ---------------------------------------------------------------------------
# Multi-label metrics and model, against hand-worked numbers.

def test_multi_label_f1_hand_worked():
    labels = [[1, 0, 1], [0, 1, 0], [1, 1, 0], [0, 0, 0]]
    predictions = [[1, 0, 0], [0, 1, 1], [1, 0, 0], [0, 0, 0]]
    # Per label: 0: TP=2 FP=0 FN=0 -> F1 1; 1: TP=1 FP=0 FN=1 -> 2/3;
    # 2: TP=0 FP=1 FN=1 -> 0. Pooled: TP=3 FP=1 FN=2 -> 6/9.
    assert classifier_metrics.micro_f1(labels, predictions) == pytest.approx(2 / 3)
    assert classifier_metrics.macro_f1(labels, predictions) == pytest.approx((1 + 2 / 3 + 0) / 3)
    # A fourth label nobody has or predicts counts 0 in the macro mean only.
    labels4 = [row + [0] for row in labels]
    predictions4 = [row + [0] for row in predictions]
    assert classifier_metrics.micro_f1(labels4, predictions4) == pytest.approx(2 / 3)
    assert classifier_metrics.macro_f1(labels4, predictions4) == pytest.approx((1 + 2 / 3) / 4)
    assert classifier_metrics.micro_f1([[0, 0]], [[0, 0]]) == 0.0

    # compute_metrics thresholds the probabilities (>= 0.5) and drops padding.
    probabilities = [[0.9, 0.2, 0.49], [0.1, 0.5, 0.7], [0.6, 0.3, 0.1], [0.2, 0.1, 0.3],
                     [0.9, 0.9, 0.9]]
    result = classifier_metrics.compute_metrics(
        ("micro_f1", "macro_f1"), labels + [[0, 0, 0]], probabilities, [1, 1, 1, 1, 0],
        is_regression=False, threshold=0.5)
    assert result == {"eval_micro_f1": pytest.approx(2 / 3),
                      "eval_macro_f1": pytest.approx(5 / 9)}
    # At 0.8 only row 0's first label is predicted: TP=1 FP=0 FN=4 -> 2/6.
    result = classifier_metrics.compute_metrics(
        ("micro_f1",), labels, probabilities[:4], [1, 1, 1, 1], False, threshold=0.8)
    assert result["eval_micro_f1"] == pytest.approx(1 / 3)


def test_multi_label_head_is_sigmoids_with_mean_cross_entropy(tmp_path):
    config = modeling.BertConfig(**tiny.tiny_config_dict(20))
    rng = np.random.RandomState(0)
    labels = np.array([[1, 0, 1], [0, 0, 1]], dtype=np.int32)
    with tf.Graph().as_default():
        tf.set_random_seed(1)
        input_ids = tf.constant(rng.randint(5, 20, size=(2, 6)), dtype=tf.int32)
        loss, per_example, logits, probabilities = run_classifier.create_model(
            config, False, input_ids, tf.ones_like(input_ids), tf.zeros_like(input_ids),
            tf.constant(labels), 3, False, multi_label=True)
        # Give the output layer some weight, so that logits are not all ~0.
        weights = [v for v in tf.global_variables() if v.name == "output_weights:0"][0]
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(weights.assign(rng.normal(size=(3, 32)).astype(np.float32)))
            loss, per_example, logits, probabilities = sess.run(
                [loss, per_example, logits, probabilities])
    assert probabilities.shape == (2, 3)
    np.testing.assert_allclose(probabilities, 1 / (1 + np.exp(-logits)), rtol=1e-5)
    # Independent probabilities: rows need not sum to 1.
    assert not np.allclose(probabilities.sum(axis=1), 1.0)
    cross_entropy = -(labels * np.log(probabilities) + (1 - labels) * np.log(1 - probabilities))
    np.testing.assert_allclose(per_example, cross_entropy.mean(axis=1), rtol=1e-4)
    assert loss == pytest.approx(cross_entropy.mean(), rel=1e-4)


# ---------------------------------------------------------------------------
# main, end to end on a tiny model.

WORDS = ["the", "a", "cat", "dog", "sat", "ran", "on", "mat", "fast", "slow", "big", "red",
         "blue", "green", "house", "tree"]
SENTIMENT = ["positive", "negative", "neutral"]
TOPICS = {"animal": {"cat"}, "color": {"red"}, "place": {"house"}}


def _sentiment_sentence(rng, label):
    """Five random words; "good" in one place for positive, "bad" for
    negative, neither for neutral."""
    words = rng.sample(WORDS, 5)
    if label != "neutral":
        words[rng.randrange(5)] = "good" if label == "positive" else "bad"
    return " ".join(words)


def _write_sentiment(data_dir, seed=0, num_train=256, num_dev=48):
    """A learnable three-class task as CSV with a header and an id column;
    the first three rows of train and dev, and every test row, cycle
    positive, negative, neutral (so that every label occurs)."""
    rng = random.Random(seed)
    for split, n in (("train", num_train), ("dev", num_dev), ("test", 9)):
        lines = ["id,text,label" if split != "test" else "id,text"]
        for i in range(n):
            label = SENTIMENT[i % 3] if split == "test" or i < 3 else rng.choice(SENTIMENT)
            # A comma inside the quoted text: CSV quoting must work.
            row = ["%s-%d" % (split, i), "\"%s, it said\"" % _sentiment_sentence(rng, label)]
            lines.append(",".join(row + ([] if split == "test" else [label])))
        _write(os.path.join(data_dir, split + ".csv"), "\n".join(lines) + "\n")


def _write_topics(data_dir, seed=1, num_train=256, num_dev=48):
    """Multi-label JSON Lines: a row has each topic whose words occur in it
    (labels as a JSON list in train, "a|b" strings in dev)."""
    rng = random.Random(seed)
    for split, n in (("train", num_train), ("dev", num_dev), ("test", 8)):
        lines = []
        for i in range(n):
            words = rng.sample(WORDS, 4)
            if split == "test":
                # Known answers: animal only, color only, both, neither.
                words = [["cat", "sat", "fast", "on"], ["red", "big", "sat", "a"],
                         ["cat", "red", "slow", "the"], ["sat", "fast", "big", "on"]][i % 4]
            topics = sorted(t for t, ws in TOPICS.items() if ws & set(words))
            record = {"text": " ".join(words), "id": i}
            if split == "train":
                record["labels"] = topics
            elif split == "dev":
                record["labels"] = "|".join(topics)
            lines.append(json.dumps(record))
        _write(os.path.join(data_dir, split + ".jsonl"), "\n".join(lines) + "\n")


def _write_scores(data_dir, seed=2, num_train=256, num_dev=48):
    """Regression as TSV without a header: id, text, score; the score is 1.5
    times the number of "good" in the text."""
    rng = random.Random(seed)
    for split, n in (("train", num_train), ("dev", num_dev), ("test", 4)):
        lines = []
        for i in range(n):
            k = i % 4 if split == "test" else rng.randint(0, 3)
            words = rng.sample(WORDS, 6)
            for j in range(k):
                words[j] = "good"
            rng.shuffle(words)
            lines.append("\t".join(["s%d" % i, " ".join(words), "%.1f" % (1.5 * k)]))
        _write(os.path.join(data_dir, split + ".tsv"), "\n".join(lines) + "\n")


def _model_files(directory, **config):
    return tiny.write_model_files(directory, WORDS + ["good", "bad", "it", "said", ","],
                                  **config)


# The end-to-end runs' model: no dropout, initial weights wider than the
# tiny config's 0.02 and layers of 64. With the tiny config, 160 steps learnt
# the three classes with some graph seeds only (0.25 to 0.65 accuracy with
# others); at 32 wide, one seed never told "good" from neutral, whatever the
# learning rate or number of steps.
_LEARNING_CONFIG = dict(tiny.LEARNABLE, hidden_size=64, intermediate_size=128)


def _flag_values(**overrides):
    """Every flag main reads, set explicitly (shared flags' defaults depend
    on which script was imported first)."""
    return tiny.fine_tuning_flags(**dict(
        dict(test_run_classifier.CLASSIFIER_FLAGS, task_name="generic", max_seq_length=16,
             learning_rate=2e-3, num_train_epochs=10.0), **overrides))


def run_main(**overrides):
    """run_classifier.main with these flags (the rest at the tests' values), seeded
    (see tiny.run_main_seeded)."""
    tiny.run_main_seeded(run_classifier.main, _flag_values(**overrides))


def _read_tsv(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n").split("\t") for line in f]


_run_saved_model = test_run_classifier._run_saved_model


def _run_text_signature(export_dir, examples):
    """The export's text signature (one text: text_a) on the examples."""
    import test_serving
    (path,) = [os.path.join(export_dir, d) for d in os.listdir(export_dir)]
    return test_serving._run_signature(path, "serving_default",
                                       {"text_a": [e.text_a for e in examples]})


def _test_features(processor, data_dir, vocab, multi_label=False):
    tokenizer = tokenization.FullTokenizer(vocab, do_lower_case=True)
    return run_classifier.convert_examples_to_features(
        processor.get_test_examples(data_dir), processor.get_labels(), 16, tokenizer,
        multi_label=multi_label)


def _full_run(tmp, write_data, config=None, **overrides):
    """Writes a task's data (`write_data(data_dir)`) and the tiny model's
    files (its config with the entries of `config`) under `tmp`, then runs
    main there: train, eval, predict and export, with these flags. Returns
    the run's paths: {tmp, data_dir, vocab, config, output_dir,
    export_dir}."""
    paths = dict(tmp=tmp, data_dir=str(tmp / "data"), output_dir=str(tmp / "output"),
                 export_dir=str(tmp / "export"))
    write_data(paths["data_dir"])
    paths["vocab"], paths["config"] = _model_files(tmp, **(config or {}))
    run_main(data_dir=paths["data_dir"], vocab_file=paths["vocab"],
             bert_config_file=paths["config"], output_dir=paths["output_dir"],
             do_train=True, do_eval=True, do_predict=True, export_dir=paths["export_dir"],
             **overrides)
    return paths


@pytest.fixture(scope="module")
def sentiment_run(tmp_path_factory):
    """Fine-tunes the tiny model on the three-class CSV task: train, eval,
    predict and export."""
    # 256 examples / 16 * 10 epochs = 160 steps (at 2e-3, this model can
    # settle on one class).
    return _full_run(tmp_path_factory.mktemp("sentiment"), _write_sentiment, _LEARNING_CONFIG,
                     id_column="id", learning_rate=1e-3)


@pytest.mark.slow
def test_three_classes_learned_far_above_majority(sentiment_run):
    output_dir = sentiment_run["output_dir"]
    result = tiny.read_eval_results(os.path.join(output_dir, "eval_results.txt"))
    assert set(result) == {"eval_accuracy", "eval_loss", "global_step", "loss"}
    assert result["global_step"] == 160
    with open(os.path.join(sentiment_run["data_dir"], "dev.csv")) as f:
        dev_labels = [line.rstrip("\n").rsplit(",", 1)[1] for line in f][1:]
    majority = max(dev_labels.count(label) for label in SENTIMENT) / len(dev_labels)
    assert majority < 0.5
    assert result["eval_accuracy"] >= 0.9
    assert result["eval_accuracy"] >= majority + 0.4

    with open(os.path.join(output_dir, "labels.txt")) as f:
        assert f.read() == "negative\nneutral\npositive\n"
    probabilities = np.array(_read_tsv(os.path.join(output_dir, "test_results.tsv")),
                             dtype=np.float64)
    assert probabilities.shape == (9, 3)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)
    rows = _read_tsv(os.path.join(output_dir, "predictions.tsv"))
    assert rows[0] == ["id", "prediction"]
    assert rows[1:] == [["test-%d" % i, SENTIMENT[i % 3]] for i in range(9)]
    # The names are the argmax of test_results.tsv in labels.txt's order.
    assert [["negative", "neutral", "positive"][i] for i in np.argmax(probabilities, axis=1)] \
        == [SENTIMENT[i % 3] for i in range(9)]


@pytest.mark.slow
def test_predict_reads_the_training_runs_own_files(sentiment_run, tmp_path):
    """predict.py labels the run's own dev.csv and test.csv (column "text",
    the default --text_column) with no flag: the export names the columns
    its training run read; each line carries its row's id, in order."""
    import test_predict
    processor = _processor(data_dir=sentiment_run["data_dir"], id_column="id",
                           output_dir=sentiment_run["output_dir"])
    for split, examples in (("dev", processor.get_dev_examples(sentiment_run["data_dir"])),
                            ("test", processor.get_test_examples(sentiment_run["data_dir"]))):
        out = test_predict._predict(sentiment_run["export_dir"],
                                    input_file=os.path.join(sentiment_run["data_dir"],
                                                            split + ".csv"),
                                    output_file=str(tmp_path / (split + ".jsonl")))
        assert [o["id"] for o in out] == ["%s-%d" % (split, i) for i in range(len(examples))]
        expected = _run_text_signature(sentiment_run["export_dir"], examples)
        np.testing.assert_allclose([o["probabilities"] for o in out],
                                   expected["probabilities"], atol=1e-5)
    # Another id column, named by the flag, goes through under its name.
    out = test_predict._predict(sentiment_run["export_dir"], id_column="text",
                                input_file=os.path.join(sentiment_run["data_dir"], "test.csv"),
                                output_file=str(tmp_path / "by_text.jsonl"))
    assert out[0]["text"].endswith(", it said") and "id" not in out[0]


@pytest.mark.slow
def test_saved_model_and_prediction_without_training(sentiment_run, tmp_path):
    """The SavedModel gives test_results.tsv's probabilities; a later run
    that only predicts, from the checkpoint by --init_checkpoint and the test
    file by --test_file (no --data_dir, no training file), finds the labels
    in labels.txt next to the checkpoint and writes the same predictions."""
    processor = _processor(data_dir=sentiment_run["data_dir"], id_column="id",
                           output_dir=sentiment_run["output_dir"])
    features = _test_features(processor, sentiment_run["data_dir"], sentiment_run["vocab"])
    predicted = np.array(_read_tsv(os.path.join(sentiment_run["output_dir"],
                                                "test_results.tsv")), dtype=np.float64)
    served = _run_saved_model(sentiment_run["export_dir"], features, "probabilities")
    np.testing.assert_allclose(served, predicted, atol=1e-5)
    text = _run_text_signature(sentiment_run["export_dir"],
                               processor.get_test_examples(sentiment_run["data_dir"]))
    np.testing.assert_allclose(text["probabilities"], predicted, atol=1e-4)
    assert [x.decode() for x in text["labels"]] == [SENTIMENT[i % 3] for i in range(9)]

    checkpoint = tf.train.latest_checkpoint(sentiment_run["output_dir"])
    output_dir = str(tmp_path / "predict")
    export_dir = str(tmp_path / "export")
    run_main(test_file=os.path.join(sentiment_run["data_dir"], "test.csv"),
             vocab_file=sentiment_run["vocab"], bert_config_file=sentiment_run["config"],
             output_dir=output_dir, init_checkpoint=checkpoint, do_predict=True,
             id_column="id", export_dir=export_dir)
    with open(os.path.join(output_dir, "labels.txt")) as f:
        assert f.read() == "negative\nneutral\npositive\n"
    assert _read_tsv(os.path.join(output_dir, "predictions.tsv")) == _read_tsv(
        os.path.join(sentiment_run["output_dir"], "predictions.tsv"))
    np.testing.assert_allclose(
        np.array(_read_tsv(os.path.join(output_dir, "test_results.tsv")), dtype=np.float64),
        predicted, atol=1e-5)
    np.testing.assert_allclose(_run_saved_model(export_dir, features, "probabilities"),
                               served, atol=1e-6)


@pytest.mark.slow
def test_multi_label_end_to_end(tmp_path):
    run = _full_run(tmp_path, _write_topics, _LEARNING_CONFIG, multi_label=True,
                    label_column="labels", id_column="id", num_train_epochs=64.0)
    data_dir, vocab, output_dir, export_dir = (
        run[key] for key in ("data_dir", "vocab", "output_dir", "export_dir"))
    result = tiny.read_eval_results(os.path.join(output_dir, "eval_results.txt"))
    assert set(result) == {"eval_loss", "eval_micro_f1", "eval_macro_f1", "global_step",
                           "loss"}
    assert result["eval_micro_f1"] >= 0.9
    assert result["eval_macro_f1"] >= 0.85
    with open(os.path.join(output_dir, "labels.txt")) as f:
        assert f.read() == "animal\ncolor\nplace\n"
    probabilities = np.array(_read_tsv(os.path.join(output_dir, "test_results.tsv")),
                             dtype=np.float64)
    assert probabilities.shape == (8, 3)
    # Independent sigmoids: both "animal" and "color" can be near 1.
    assert probabilities[2, 0] > 0.5 and probabilities[2, 1] > 0.5
    expected = ["animal", "color", "animal|color", ""] * 2
    assert _read_tsv(os.path.join(output_dir, "predictions.tsv")) == (
        [["id", "prediction"]] + [[str(i), labels] for i, labels in enumerate(expected)])
    # The eval F1 is the F1 of the thresholded dev probabilities.
    processor = _processor(data_dir=data_dir, output_dir=output_dir, multi_label=True,
                           label_column="labels")
    dev = processor.get_dev_examples(data_dir)
    tokenizer = tokenization.FullTokenizer(vocab, do_lower_case=True)
    dev_features = run_classifier.convert_examples_to_features(
        dev, processor.get_labels(), 16, tokenizer, multi_label=True)
    served = _run_saved_model(export_dir, dev_features, "probabilities")
    gold = np.array([f.label_id for f in dev_features])
    assert result["eval_micro_f1"] == pytest.approx(
        classifier_metrics.micro_f1(gold, served >= 0.5), abs=1e-6)
    assert result["eval_macro_f1"] == pytest.approx(
        classifier_metrics.macro_f1(gold, served >= 0.5), abs=1e-6)
    # The text signature: the test texts' probabilities, and the labels at
    # or above the threshold, in label order, then "".
    text = _run_text_signature(export_dir, processor.get_test_examples(data_dir))
    np.testing.assert_allclose(text["probabilities"], probabilities, atol=1e-4)
    assert ["|".join(x.decode() for x in row if x) for row in text["labels"]] == expected
    assert [[i for i in row if i >= 0] for row in text["label_ids"]] == [
        [["animal", "color", "place"].index(x) for x in labels.split("|") if x]
        for labels in expected]


@pytest.mark.slow
def test_regression_end_to_end(tmp_path):
    # TSV without a header: columns by number. At the other tests' learning
    # rate (2e-3) the tiny model stayed on the constant-prediction plateau in
    # about half of the seeds (either dropout); at 1e-3 it reached Pearson
    # 0.87-0.98 in all of 14 seeds tried.
    run = _full_run(tmp_path, _write_scores, regression=True, has_header=False,
                    id_column="0", text_column="1", label_column="2", num_train_epochs=6.0,
                    learning_rate=1e-3)
    data_dir, vocab, output_dir, export_dir = (
        run[key] for key in ("data_dir", "vocab", "output_dir", "export_dir"))
    result = tiny.read_eval_results(os.path.join(output_dir, "eval_results.txt"))
    assert set(result) == {"eval_loss", "eval_pearson", "eval_spearman", "global_step", "loss"}
    assert result["eval_pearson"] > 0.8
    assert not os.path.exists(os.path.join(output_dir, "labels.txt"))
    scores = [float(row[0]) for row in _read_tsv(os.path.join(output_dir, "test_results.tsv"))]
    rows = _read_tsv(os.path.join(output_dir, "predictions.tsv"))
    assert rows[0] == ["id", "prediction"]
    assert [row[0] for row in rows[1:]] == ["s0", "s1", "s2", "s3"]
    np.testing.assert_allclose([float(row[1]) for row in rows[1:]], scores, rtol=1e-6)
    # Test rows have 0, 1, 2, 3 times "good": scores rise with them.
    assert scores == sorted(scores)
    processor = _processor(data_dir=data_dir, regression=True, has_header=False,
                           id_column="0", text_column="1", label_column="2")
    served = _run_saved_model(export_dir, _test_features(processor, data_dir, vocab), "scores")
    np.testing.assert_allclose(served, scores, atol=1e-5)
    text = _run_text_signature(export_dir, processor.get_test_examples(data_dir))
    assert set(text) == {"scores"}
    np.testing.assert_allclose(text["scores"], scores, atol=1e-4)


# ---------------------------------------------------------------------------
# Bad input: one InputError naming the file and line, before anything is
# written.

@pytest.fixture
def good_inputs(tmp_path):
    data_dir = str(tmp_path / "data")
    _write_sentiment(data_dir, num_train=8, num_dev=4)
    vocab, config = _model_files(tmp_path)
    return dict(data_dir=data_dir, vocab_file=vocab, bert_config_file=config,
                output_dir=str(tmp_path / "output"), do_train=True, do_eval=True,
                do_predict=True, id_column="id")


def _append(path, text, mode="a"):
    with open(path, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
        f.write(text)


@pytest.mark.parametrize("change, message", [
    # A row without the label column.
    (lambda d: _append(os.path.join(d, "train.csv"), "x,no label\n"),
     r"train\.csv, line 10: expected 3 comma-separated columns \(as the header\), found 2"),
    # Unquoted commas split the text.
    (lambda d: _append(os.path.join(d, "dev.csv"), "x,good, bad, fine,positive\n"),
     r"dev\.csv, line 6: expected 3 .* found 5 \(a field with a comma in it must be in "
     r"double quotes\)"),
    (lambda d: _append(os.path.join(d, "dev.csv"), "x,\"a text\",great\n"),
     r"dev\.csv, line 6: label 'great' is not one of the labels negative, neutral, "
     r"positive \(from .*train\.csv\)"),
    (lambda d: _append(os.path.join(d, "dev.csv"), "x,\"a text\",\n"),
     r"dev\.csv, line 6: empty label"),
    (lambda d: _append(os.path.join(d, "test.csv"), b"x,caf\xe9\n", "ab"),
     r"test\.csv, line 11: not UTF-8 text \(byte 0xe9\); save the file as UTF-8"),
    (lambda d: _append(os.path.join(d, "test.csv"), "id,words\nx,y\n", "w"),
     r"test\.csv has no column 'text' \(--text_column\); its header has: 'id', 'words'"),
    (lambda d: _append(os.path.join(d, "train.csv"), "x,\"open quote,positive\n"),
     r"train\.csv, line \d+: unexpected end of data"),
    (lambda d: os.remove(os.path.join(d, "dev.csv")),
     r"No dev file in --data_dir=.*--dev_file"),
])
def test_bad_rows_stop_before_anything_is_written(good_inputs, change, message):
    change(good_inputs["data_dir"])
    tiny.assert_input_error(run_main, good_inputs, message)


def test_bad_jsonl_and_regression_rows(good_inputs, tmp_path):
    data_dir = str(tmp_path / "jsonl")
    _write(os.path.join(data_dir, "train.jsonl"),
           '{"text": "a", "label": 1.5}\n{"text": "b", "label": "high"}\n')
    good_inputs.update(data_dir=data_dir, do_eval=False, do_predict=False, id_column=None,
                       regression=True)
    with pytest.raises(errors.InputError,
                       match=r"train\.jsonl, line 2: label 'high' is not a number "
                             r"\(--regression\)"):
        run_main(**good_inputs)
    _write(os.path.join(data_dir, "train.jsonl"), '{"text": "a", "label": 1.5}\n{"label": 2}\n')
    with pytest.raises(errors.InputError, match=r"train\.jsonl, line 2: no field 'text'"):
        run_main(**good_inputs)
    _write(os.path.join(data_dir, "train.jsonl"), '{"text": "a", "label": 1.5}\n{"text": \n')
    with pytest.raises(errors.InputError, match=r"train\.jsonl, line 2: not valid JSON"):
        run_main(**good_inputs)
    _write(os.path.join(data_dir, "train.jsonl"), '[1, 2]\n')
    with pytest.raises(errors.InputError,
                       match=r"train\.jsonl, line 1: expected one JSON object"):
        run_main(**good_inputs)
    assert not os.path.exists(good_inputs["output_dir"])


@pytest.mark.parametrize("change, message", [
    (dict(regression=True, multi_label=True), r"--regression and --multi_label exclude"),
    (dict(labels="positive"), r"--labels: a classifier needs at least two labels"),
    (dict(labels="a,b,a"), r"--labels: label\(s\) given twice: a"),
    (dict(multi_label=True, multi_label_threshold=1.5),
     r"--multi_label_threshold must be between 0 and 1"),
    (dict(task_name="MRPC", text_column="sentence"),
     r"--text_column is for --task_name=generic"),
    (dict(data_dir=None), r"^Missing required flag\(s\): --data_dir \(or --train_file"),
    (dict(label_column="stars"),
     r"train\.csv has no column 'stars' \(--label_column\); its header has: 'id', 'text', "
     r"'label'"),
])
def test_bad_flags(good_inputs, change, message):
    good_inputs.update(change)
    tiny.assert_input_error(run_main, good_inputs, message)


def test_own_data_flags_for_another_task_are_refused_against_the_scripts_defaults():
    """check_flags_unused compares with the defaults of the script's
    settings: a flag of own data that differs from its default is refused
    for a GLUE task; at its default, or for generic, it passes."""
    own_data.check_flags_unused("mrpc", run_classifier.Settings(task_name="mrpc"))
    own_data.check_flags_unused("generic", run_classifier.Settings(text_column="review"))
    for change in (dict(text_column="review"), dict(multi_label_threshold=0.7),
                   dict(train_file="t.csv")):
        name = next(iter(change))
        with pytest.raises(errors.InputError, match="--%s is for --task_name=generic" % name):
            own_data.check_flags_unused("mrpc", run_classifier.Settings(**change))


def test_one_label_in_training_file(good_inputs):
    _write(os.path.join(good_inputs["data_dir"], "train.csv"), "id,text,label\n1,a,yes\n")
    with pytest.raises(errors.InputError,
                       match=r"train\.csv has only one label \(yes\).*--labels"):
        run_main(**good_inputs)


def test_command_line_error_is_one_line(good_inputs, monkeypatch, capsys):
    _append(os.path.join(good_inputs["data_dir"], "dev.csv"), "x,\"a text\",great\n")
    args = ["--%s=%s" % (k, v) for k, v in good_inputs.items()]
    monkeypatch.setattr(sys, "argv", ["run_classifier.py", "--task_name=generic",
                                      "--max_seq_length=16"] + args)
    with flagsaver.flagsaver():
        with pytest.raises(SystemExit) as e:
            script_runner.run_script(run_classifier.main)
    assert e.value.code == 1
    err = capsys.readouterr().err
    assert "ERROR: " in err and "dev.csv, line 6: label 'great'" in err
    assert "Traceback" not in err
    assert not os.path.exists(good_inputs["output_dir"])


def test_flags_listed_in_help():
    """The own-data flags are run_classifier's, so its --help shows them."""
    names = {flag.name for flag in FLAGS.get_key_flags_for_module(run_classifier)}
    assert {"text_column", "label_column", "multi_label", "regression",
            "data_format", "has_header"} <= names


# ---------------------------------------------------------------------------
# The manual's example, as written there.

def _documented_example_blocks():
    """The shell blocks of docs/own_data.md's three-class example: writing
    the data, fine-tuning, and predicting without training."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "docs", "own_data.md")
    with open(path, encoding="utf-8") as f:
        page = f.read()
    blocks = re.findall(r"```bash\n(.*?)```", page, flags=re.S)
    assert "cat > reviews/train.csv" in blocks[0]
    assert "--data_dir=reviews" in blocks[1] and "--do_train=true" in blocks[1]
    assert "--test_file=reviews/test.csv" in blocks[2]
    return blocks[:3]


def _write_tiny_google_model(directory):
    """vocab.txt, bert_config.json and bert_model.ckpt of a tiny model, laid
    out as in Google's zips (max_position_embeddings 128 for the page's
    --max_seq_length=128)."""
    os.makedirs(directory)
    words = ["a", "film", "the", "it", "was", "great", "dull", "loved", "boring", "two",
             "hours", "friday", "cast", "music", "acting", "wonderful", "slow", "."]
    vocab = tiny.write_vocab(directory, words)
    config_path = tiny.write_config(directory, vocab_size=len(tiny.SPECIAL_TOKENS) + len(words),
                                    max_position_embeddings=128)
    with tf.Graph().as_default():
        modeling.BertModel(modeling.BertConfig.from_json_file(config_path), is_training=False,
                           input_ids=tf.zeros([1, 4], tf.int32))
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            tf.train.Saver().save(sess, os.path.join(directory, "bert_model.ckpt"))
    return vocab


@pytest.mark.slow
def test_documented_three_class_example_runs(tmp_path):
    """docs/own_data.md's commands, run as a reader would (with this test's
    interpreter for .venv/bin/python and a tiny model as $BERT_BASE_DIR),
    write the files the page lists."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    _write_tiny_google_model(str(tmp_path / "model"))
    env = dict(os.environ, BERT_BASE_DIR=str(tmp_path / "model"))
    for block in _documented_example_blocks():
        script = block.replace(".venv/bin/python run_classifier.py",
                               "%s %s" % (sys.executable, os.path.join(root, "run_classifier.py")))
        proc = subprocess.run(["bash", "-euc", script], cwd=str(tmp_path), env=env,
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "reviews_output"
    with open(out / "labels.txt") as f:
        assert f.read() == "negative\nneutral\npositive\n"
    assert set(tiny.read_eval_results(str(out / "eval_results.txt"))) == {
        "eval_accuracy", "eval_loss", "global_step", "loss"}
    rows = _read_tsv(str(out / "predictions.tsv"))
    assert rows[0] == ["id", "prediction"]
    assert [row[0] for row in rows[1:]] == ["s1", "s2", "s3"]
    assert all(row[1] in ("negative", "neutral", "positive") for row in rows[1:])
    assert np.array(_read_tsv(str(out / "test_results.tsv")), dtype=np.float64).shape == (3, 3)
    # The predict-only run read the labels next to the checkpoint and gives
    # the same predictions.
    again = tmp_path / "reviews_predictions"
    assert _read_tsv(str(again / "predictions.tsv")) == rows
