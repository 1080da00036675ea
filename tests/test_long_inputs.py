"""Real text lengths in the classifier: inputs longer than --max_seq_length
read in windows (--doc_stride, --max_windows, --window_aggregation), and
batches padded to their longest input (--dynamic_padding,
--length_buckets)."""

import io
import json
import os
import random

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from scriptkit import checkpoints
from scriptkit import classifier_features
from scriptkit import errors
from scriptkit import input_packing
from scriptkit import input_pipeline
from scriptkit import long_inputs
import modeling
import run_classifier
from scriptkit import serving
from scriptkit import settings as settings_lib
import test_run_classifier
import tiny
import tokenization
from scriptkit import training

FILLER = ["w%d" % i for i in range(40)]
SIGNALS = ["alpha", "beta"]


# ---------------------------------------------------------------------------
# Window arithmetic and the combination of window outputs, hand-worked.

def test_window_spans_hand_worked():
    assert input_packing.window_spans(10, 4, 2) == [(0, 4), (2, 4), (4, 4), (6, 4)]
    assert input_packing.window_spans(10, 4, 2, max_windows=2) == [(0, 4), (2, 4)]
    assert input_packing.window_spans(10, 4, 9) == [(0, 4), (4, 4), (8, 2)]
    assert input_packing.window_spans(4, 4, 2) == [(0, 4)]
    assert input_packing.window_spans(0, 4, 2) == []


def test_first_text_windows_keep_the_second_text_whole():
    a = ["a%d" % i for i in range(10)]
    # One text: 8 - 2 = 6 pieces a window, starting 3 apart.
    assert long_inputs.first_text_windows(a, None, 8, 3) == [a[0:6], a[3:9], a[6:10]]
    # A pair: 8 - 3 - 2 = 3 pieces of the first text next to the second.
    assert long_inputs.first_text_windows(a, ["b0", "b1"], 8, 3) == [
        a[0:3], a[3:6], a[6:9], a[9:10]]
    assert long_inputs.first_text_windows(a[:2], None, 8, 3) == [a[:2]]
    assert long_inputs.first_text_windows([], None, 8, 3) == [[]]
    # No room left by the second text: None (the caller cuts instead).
    assert long_inputs.first_text_windows(a, ["b"] * 5, 8, 3) is None


def test_graph_windows_equal_the_scripts(tmp_path):
    """serving.first_text_windows (the exports') makes the windows of
    long_inputs.first_text_windows (--do_predict's), input by input:
    single texts, pairs, pairs whose second text leaves no room, empty
    texts, with and without --max_windows."""
    rng = random.Random(5)
    cases = []
    for _ in range(60):
        a = ["a%d" % i for i in range(rng.choice([0, 1, 5, 9, 14, 23, 40]))]
        b = ["b%d" % i for i in range(rng.choice([0, 0, 1, 3, 6, 9, 12]))]
        cases.append((a, b))
    vocab = {t: i for i, t in enumerate(sorted({t for a, b in cases for t in a + b}))}
    for max_seq_length, stride, max_windows in ((12, 4, 0), (12, 9, 0), (16, 3, 2)):
        with tf.Graph().as_default(), tf.Session() as sess:
            pieces = [tf.ragged.constant([[vocab[t] for t in x] for x in side], dtype=tf.int32,
                                         ragged_rank=1)
                      for side in zip(*cases)]
            windows_a, windows_b, example_of_window = sess.run(serving.first_text_windows(
                pieces[0], pieces[1], max_seq_length, stride, max_windows))
        expected_a, expected_b, expected_index = [], [], []
        for index, (a, b) in enumerate(cases):
            windows = long_inputs.first_text_windows(a, b, max_seq_length, stride,
                                                     max_windows) or [a]
            expected_a += [[vocab[t] for t in w] for w in windows]
            expected_b += [[vocab[t] for t in b]] * len(windows)
            expected_index += [index] * len(windows)
        assert example_of_window.tolist() == expected_index
        assert windows_a.to_list() == expected_a
        assert windows_b.to_list() == expected_b


def test_aggregate_windows_hand_worked():
    values = [[1.0, 5.0], [3.0, 1.0], [7.0, 0.0], [2.0, 2.0], [0.0, 0.0]]
    example_of_record = [0, 0, 1, 2, -1]  # The last is padding.
    assert long_inputs.aggregate_windows(values, example_of_record, 3, "mean").tolist() == [
        [2.0, 3.0], [7.0, 0.0], [2.0, 2.0]]
    assert long_inputs.aggregate_windows(values, example_of_record, 3, "max").tolist() == [
        [3.0, 5.0], [7.0, 0.0], [2.0, 2.0]]
    assert long_inputs.aggregate_windows(values, example_of_record, 3, "first").tolist() == [
        [1.0, 5.0], [7.0, 0.0], [2.0, 2.0]]
    assert long_inputs.aggregate_windows([0.5, 1.5, 4.0], [0, 0, 1], 2,
                                         "mean").tolist() == [1.0, 4.0]


def test_example_losses_equal_the_model_heads():
    class Task:
        is_regression = False
        is_multi_label = False

    logits = np.array([[2.0, -1.0, 0.5], [0.0, 0.0, 3.0]])
    labels = np.array([0, 1])
    probabilities = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    expected = -np.log(probabilities[[0, 1], labels])
    np.testing.assert_allclose(
        long_inputs.example_losses(probabilities, logits, labels, Task), expected)
    Task.is_multi_label = True
    p = np.array([[0.9, 0.2]])
    np.testing.assert_allclose(long_inputs.example_losses(p, None, np.array([[1, 0]]), Task),
                               [-(np.log(0.9) + np.log(0.8)) / 2])
    Task.is_multi_label, Task.is_regression = False, True
    np.testing.assert_allclose(
        long_inputs.example_losses(np.array([1.5, 2.0]), None, np.array([1.0, 4.0]), Task),
        [0.25, 4.0])


def test_windows_of_fitting_inputs_are_the_cut_features(tmp_path):
    """With --doc_stride, an input that fits gives byte for byte the record
    it gives without; a long one gives windows with the whole second text."""
    vocab = tiny.write_vocab(str(tmp_path), FILLER + SIGNALS)
    tokenizer = tokenization.FullTokenizer(vocab, do_lower_case=True)
    short = run_classifier.InputExample("a-0", "w1 w2 w3", "w4 w5", "0")
    long = run_classifier.InputExample("a-1", " ".join(FILLER[:20]), "w4 w5", "1")
    paths = {}
    for name, stride in (("cut", None), ("windows", 4)):
        paths[name] = str(tmp_path / name)
        index = run_classifier.file_based_convert_examples_to_features(
            [short, long], ["0", "1"], 12, tokenizer, paths[name], doc_stride=stride)
        # 12 - 3 - 2 = 7 pieces a window, starting 4 apart: 0, 4, 8, 12, 16.
        assert index == ([0, 1] if stride is None else [0, 1, 1, 1, 1, 1])
    cut = list(tf.io.tf_record_iterator(paths["cut"]))
    windows = list(tf.io.tf_record_iterator(paths["windows"]))
    assert windows[0] == cut[0]
    features, was_cut = classifier_features.convert_example(1, long, ["0", "1"], 12, tokenizer,
                                                            doc_stride=4)
    assert not was_cut
    ids = tokenizer.convert_tokens_to_ids
    for k, feature in enumerate(features):
        piece_ids = ids(FILLER[4 * k:min(4 * k + 7, 20)])
        expected = ids(["[CLS]"]) + piece_ids + ids(["[SEP]", "w4", "w5", "[SEP]"])
        assert feature.input_ids == expected + [0] * (12 - len(expected))
        assert feature.segment_ids[:len(expected)] == [0] * (len(piece_ids) + 2) + [1] * 3
    _, was_cut = classifier_features.convert_example(
        1, run_classifier.InputExample("a-2", "w1", " ".join(FILLER[:12]), "1"), ["0", "1"],
        12, tokenizer, doc_stride=4)
    assert was_cut


def _problem(kind):
    """A stand-in DataProcessor of a problem type: "single", "multi" or
    "regression"."""
    class Task:
        is_regression = kind == "regression"
        is_multi_label = kind == "multi"
    return Task


@pytest.mark.parametrize("how", ["mean", "max"])
@pytest.mark.parametrize("kind", ["single", "multi", "regression"])
def test_document_losses_equal_those_of_the_combined_predictions(kind, how):
    """--window_loss=document's loss in the graph is the loss that
    evaluation computes on the combined outputs of --do_predict (NumPy),
    padding windows left out whatever their outputs."""
    rng = np.random.RandomState(4)
    counts = [1, 4, 2]
    num_labels = 1 if kind == "regression" else 3
    window_logits = rng.normal(0, 2, [3, 4, num_labels])
    window_mask = np.arange(4)[None, :] < np.array(counts)[:, None]
    # Padding windows with outputs that would dominate any combination.
    window_logits[~window_mask] = 50.0
    labels = {"single": np.array([2, 0, 1]), "regression": np.array([0.5, -1.0, 2.0]),
              "multi": np.array([[1, 0, 1], [0, 0, 1], [1, 1, 0]])}[kind]
    with tf.Graph().as_default(), tf.Session() as sess:
        losses = sess.run(long_inputs.document_losses(
            tf.constant(window_logits, tf.float32), tf.constant(window_mask),
            tf.constant(labels), how, is_regression=kind == "regression",
            multi_label=kind == "multi"))
    # The model_fn's predictions of each real window, in input order.
    predictions = []
    for b, count in enumerate(counts):
        for w in range(count):
            logits = window_logits[b, w]
            predictions.append({"logits": logits, "scores": logits[0],
                                "probabilities": 1 / (1 + np.exp(-logits))})
    example_of_record = [b for b, count in enumerate(counts) for _ in range(count)]
    outputs, logits = long_inputs.example_outputs(
        predictions, example_of_record, 3, _problem(kind), long_inputs.Windows(1, 0, how))
    expected = long_inputs.example_losses(outputs, logits, labels, _problem(kind))
    np.testing.assert_allclose(losses, expected, rtol=1e-5, atol=1e-6)


def test_document_model_is_the_window_model_combined():
    """create_document_model gives the per-window model's outputs combined:
    its loss equals that of create_model's logits of each real window,
    combined in NumPy; running the real windows only (CPU/GPU) and every
    window (fixed shapes, TPU) give the same loss and gradients."""
    config = modeling.BertConfig.from_dict(tiny.tiny_config_dict(30))
    rng = np.random.RandomState(0)
    counts, num_windows, seq_length = [1, 4, 2], 4, 8
    features = np.zeros([3, 3, num_windows, seq_length], np.int32)  # ids, mask, segments
    for b, count in enumerate(counts):
        for w in range(count):
            n = rng.randint(3, seq_length + 1)
            features[:, b, w, :n] = [rng.randint(5, 30, n), np.ones(n), rng.randint(0, 2, n)]
    labels = np.array([0, 1, 1])
    results = {}
    for fixed_shapes in (False, True):
        with tf.Graph().as_default():
            tf.set_random_seed(1)
            loss, per_example_loss = run_classifier.create_document_model(
                config, False, *map(tf.constant, features), tf.constant(labels), 2, False,
                "max", fixed_shapes=fixed_shapes)
            gradients = [tf.convert_to_tensor(g)
                         for g in tf.gradients(loss, tf.trainable_variables())]
            tf.get_variable_scope().reuse_variables()
            _, _, window_logits, _ = run_classifier.create_model(
                config, False, *[tf.constant(f.reshape(-1, seq_length)) for f in features],
                tf.zeros([3 * num_windows], tf.int32), 2, False)
            with tf.Session() as sess:
                sess.run(tf.global_variables_initializer())
                results[fixed_shapes] = sess.run(
                    [per_example_loss, gradients, window_logits])
    per_example_loss, _, window_logits = results[False]
    window_logits = window_logits.reshape(3, num_windows, 2)
    combined = np.stack([window_logits[b, :count].max(axis=0)
                         for b, count in enumerate(counts)])
    np.testing.assert_allclose(per_example_loss, long_inputs.example_losses(
        None, combined, labels, _problem("single")), rtol=1e-5)
    np.testing.assert_allclose(results[True][0], per_example_loss, rtol=1e-5)
    for fixed, gathered in zip(results[True][1], results[False][1]):
        np.testing.assert_allclose(fixed, gathered, rtol=1e-4, atol=1e-6)


def test_one_window_documents_train_as_cut_inputs(tmp_path):
    """--window_loss=document with --max_windows=1 is the original's cut
    training: the same training stream (the input seed's order, batch for
    batch), each input's one window being its cut features, with its own
    label, and the same loss. (Document training that learns less than cut
    training from the first windows alone would differ here.)"""
    vocab = tiny.write_vocab(str(tmp_path), FILLER + SIGNALS)
    tokenizer = tokenization.FullTokenizer(vocab, do_lower_case=True)
    rng = random.Random(3)
    # Inputs that fit and inputs cut after their first 10 pieces, labels mixed.
    examples = [run_classifier.InputExample(
        "t-%d" % i, " ".join(rng.choice(FILLER) for _ in range(rng.randint(3, 25))), None,
        str(rng.randint(0, 1))) for i in range(10)]
    paths = {name: str(tmp_path / name) for name in ("cut", "documents")}
    run_classifier.file_based_convert_examples_to_features(
        examples, ["0", "1"], 12, tokenizer, paths["cut"])
    run_classifier.file_based_convert_examples_to_features(
        examples, ["0", "1"], 12, tokenizer, paths["documents"], doc_stride=4, max_windows=1,
        windows_per_record=1)
    batches = {}
    for name, windows_per_record in (("cut", 0), ("documents", 1)):
        input_fn = run_classifier.file_based_input_fn_builder(
            paths[name], 12, is_training=True, drop_remainder=True,
            windows_per_record=windows_per_record)
        # 24 inputs: more than two passes over the file.
        batches[name] = _batches(
            lambda params, f=input_fn: f(dict(params, **{input_pipeline.INPUT_SEED: 5})), 4, 6)
    assert len(batches["cut"]) == len(batches["documents"]) == 6
    # The stream is shuffled (not the file's order) and holds both labels.
    first_ids = [list(ids) for ids in batches["cut"][0]["input_ids"]]
    assert len({tuple(ids) for ids in first_ids}) > 1
    assert {int(x) for b in batches["cut"] for x in b["label_ids"]} == {0, 1}
    for cut, document in zip(batches["cut"], batches["documents"]):
        for name in ("input_ids", "input_mask", "segment_ids"):
            assert document[name].shape == (4, 1, 12)
            np.testing.assert_array_equal(document[name][:, 0], cut[name])
        np.testing.assert_array_equal(document["label_ids"], cut["label_ids"])
    config = modeling.BertConfig.from_dict(tiny.tiny_config_dict(len(FILLER) + 7))
    with tf.Graph().as_default():
        features = [tf.constant(np.concatenate([b[name] for b in batches["documents"]]))
                    for name in ("input_ids", "input_mask", "segment_ids", "label_ids")]
        _, document_losses = run_classifier.create_document_model(
            config, False, *[tf.cast(f, tf.int32) for f in features], 2, False, "max")
        tf.get_variable_scope().reuse_variables()
        _, cut_losses, _, _ = run_classifier.create_model(
            config, False, *[tf.cast(f[:, 0] if f.shape.ndims == 3 else f, tf.int32)
                             for f in features], 2, False)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            document_losses, cut_losses = sess.run([document_losses, cut_losses])
    np.testing.assert_allclose(document_losses, cut_losses, rtol=1e-5)


def test_document_records_hold_their_windows(tmp_path):
    """With windows_per_record, each input is one record: its window records
    one after another, then all-zero windows; the input_fn reads them as
    [batch, windows, seq_length]."""
    vocab = tiny.write_vocab(str(tmp_path), FILLER + SIGNALS)
    tokenizer = tokenization.FullTokenizer(vocab, do_lower_case=True)
    examples = [run_classifier.InputExample("a-0", " ".join(FILLER[:20]), None, "1"),
                run_classifier.InputExample("a-1", "w1 w2 w3", None, "0")]
    paths = {name: str(tmp_path / name) for name in ("windows", "documents")}
    by_window = run_classifier.file_based_convert_examples_to_features(
        examples, ["0", "1"], 12, tokenizer, paths["windows"], doc_stride=4, max_windows=3)
    by_document = run_classifier.file_based_convert_examples_to_features(
        examples, ["0", "1"], 12, tokenizer, paths["documents"], doc_stride=4, max_windows=3,
        windows_per_record=3)
    assert by_window == [0, 0, 0, 1] and by_document == [0, 1]

    def parse(path):
        return [tf.train.Example.FromString(r).features.feature
                for r in tf.io.tf_record_iterator(path)]

    windows, documents = parse(paths["windows"]), parse(paths["documents"])
    for name in ("input_ids", "input_mask", "segment_ids"):
        def values(record):
            return list(record[name].int64_list.value)
        assert values(documents[0]) == sum(map(values, windows[:3]), [])
        assert values(documents[1]) == values(windows[3]) + [0] * 24
    for document, window in ((documents[0], windows[0]), (documents[1], windows[3])):
        assert document["label_ids"] == window["label_ids"]
        assert document["is_real_example"] == window["is_real_example"]
    input_fn = run_classifier.file_based_input_fn_builder(
        paths["documents"], 12, is_training=False, drop_remainder=False, windows_per_record=3)
    (batch,) = _batches(input_fn, 2, 2)
    assert batch["input_ids"].shape == (2, 3, 12)
    assert batch["input_mask"][1].sum(axis=-1).tolist() == [5, 0, 0]


# ---------------------------------------------------------------------------
# Learning from text past the first window.

def _long_document(rng, label):
    """30 filler words, the label's signal word somewhere in the last 12:
    nothing in the first window (14 pieces) tells the label."""
    words = [rng.choice(FILLER) for _ in range(30)]
    words[rng.randrange(18, 30)] = SIGNALS[label]
    return " ".join(words)


def _write_long_task(data_dir, seed=0, num_train=160, num_dev=64, num_test=6):
    rng = random.Random(seed)
    os.makedirs(data_dir)
    for split, n in (("train", num_train), ("dev", num_dev), ("test", num_test)):
        with open(os.path.join(data_dir, split + ".csv"), "w") as f:
            f.write("id,text,label\n")
            for i in range(n):
                label = i % 2 if split == "test" else rng.randint(0, 1)
                f.write("%s-%d,%s,%s\n" % (split, i, _long_document(rng, label),
                                           ["no", "yes"][label]))


def _generic_flags(**overrides):
    return tiny.fine_tuning_flags(**dict(dict(
        test_run_classifier.CLASSIFIER_FLAGS, task_name="generic", max_seq_length=16,
        id_column="id", train_batch_size=32, num_train_epochs=6.0, learning_rate=2e-3),
        **overrides))


@pytest.fixture(scope="module")
def long_task(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("long")
    data_dir = str(tmp / "data")
    _write_long_task(data_dir)
    vocab = tiny.write_vocab(str(tmp), FILLER + SIGNALS)
    # No dropout and wider initial weights than the tiny config's 0.02: the
    # short runs below then learn the signal word with every graph seed, not
    # just with the one the tests fix.
    config = tiny.write_config(str(tmp), vocab_size=len(FILLER) + 7, **tiny.LEARNABLE)
    return dict(tmp=tmp, data_dir=data_dir, vocab=vocab, config=config)


def test_windows_learn_what_truncation_cannot_see(long_task):
    """Inputs whose label is told only past their first window: cut, the
    model stays at chance; read in windows (combined by their maximum), it
    learns the task, and its export reads raw text in the same windows."""
    results = {}
    export_dir = str(long_task["tmp"] / "export")
    for name, windows in (("cut", {}), ("windows", dict(doc_stride=7, window_aggregation="max",
                                                         export_dir=export_dir))):
        output_dir = str(long_task["tmp"] / name)
        tiny.run_main_seeded(run_classifier.main, _generic_flags(
            data_dir=long_task["data_dir"], vocab_file=long_task["vocab"],
            bert_config_file=long_task["config"], output_dir=output_dir, do_train=True,
            do_eval=True, do_predict=True, learning_rate=1e-3, **windows))
        results[name] = tiny.read_eval_results(os.path.join(output_dir, "eval_results.txt"))
        with open(os.path.join(output_dir, "predictions.tsv")) as f:
            predictions = [line.rstrip("\n").split("\t") for line in f]
        # One row per input, in input order, whatever its number of windows.
        assert [row[0] for row in predictions] == ["id"] + ["test-%d" % i for i in range(6)]
        with open(os.path.join(output_dir, "test_results.tsv")) as f:
            probabilities = np.loadtxt(f)
        assert probabilities.shape == (6, 2)
        if name == "windows":
            right = [row[1] for row in predictions[1:]] == np.array(["no", "yes"] * 3)
            assert right.sum() >= 5
            import test_serving
            (path,) = [os.path.join(export_dir, d) for d in os.listdir(export_dir)]
            with open(os.path.join(long_task["data_dir"], "test.csv")) as f:
                texts = [line.split(",")[1] for line in f.readlines()[1:]]
            served = test_serving._run_signature(path, "serving_default", {"text_a": texts})
            np.testing.assert_allclose(served["probabilities"], probabilities, atol=1e-5)
            assert [x.decode() for x in served["labels"]] == [row[1] for row in predictions[1:]]
    # 64 dev inputs: chance is 0.5 +- 0.0625.
    assert results["cut"]["eval_accuracy"] <= 0.7
    assert results["windows"]["eval_accuracy"] >= 0.9
    assert set(results["windows"]) == set(results["cut"])
    # A prediction run in the training run's folder reads windows as it did,
    # from its run record.
    output_dir = str(long_task["tmp"] / "windows")
    with open(os.path.join(output_dir, "test_results.tsv")) as f:
        trained = f.read()
    os.remove(os.path.join(output_dir, "test_results.tsv"))
    with open(os.path.join(output_dir, "run_config.json")) as f:
        recorded = json.load(f)["flags"]
    assert (recorded["doc_stride"], recorded["max_windows"],
            recorded["window_aggregation"]) == (7, 0, "max")
    tiny.run_main_seeded(run_classifier.main, dict(
        output_dir=output_dir, data_dir=long_task["data_dir"], do_predict=True))
    _assert_same_probabilities(os.path.join(output_dir, "test_results.tsv"), trained)


def _assert_same_probabilities(path, trained):
    """The probabilities in `path` are those of the text `trained`, to float
    rounding: a run that only predicts builds its model for inference (GELU
    run by oneDNN inside the matmul, not compiled), the training run's
    predictions came from the training choice of kernels."""
    with open(path) as f:
        np.testing.assert_allclose(np.loadtxt(f), np.loadtxt(io.StringIO(trained)),
                                   rtol=0, atol=1e-6)


def test_document_loss_learns_from_the_combined_windows(long_task):
    """--window_loss=document: each input's windows are trained together, on
    their combination (max), and the model learns the label told past the
    first window. The run record keeps the setting; a prediction run in
    the folder reads the windows as --do_predict did (window by window,
    combined)."""
    output_dir = str(long_task["tmp"] / "document")
    tiny.run_main_seeded(run_classifier.main, _generic_flags(
        data_dir=long_task["data_dir"], vocab_file=long_task["vocab"],
        bert_config_file=long_task["config"], output_dir=output_dir, do_train=True,
        do_eval=True, do_predict=True, doc_stride=7, max_windows=4, window_loss="document",
        window_aggregation="max", train_batch_size=8, num_train_epochs=8.0,
        learning_rate=1e-3))
    result = tiny.read_eval_results(os.path.join(output_dir, "eval_results.txt"))
    assert result["eval_accuracy"] >= 0.9, result
    # Steps count inputs, not windows: 160 in batches of 8, 8 epochs.
    assert result["global_step"] == 160, result
    with open(os.path.join(output_dir, "run_config.json")) as f:
        recorded = json.load(f)["flags"]
    assert (recorded["window_loss"], recorded["max_windows"],
            recorded["window_aggregation"]) == ("document", 4, "max")
    with open(os.path.join(output_dir, "test_results.tsv")) as f:
        trained = f.read()
    os.remove(os.path.join(output_dir, "test_results.tsv"))
    tiny.run_main_seeded(run_classifier.main, dict(
        output_dir=output_dir, data_dir=long_task["data_dir"], do_predict=True))
    _assert_same_probabilities(os.path.join(output_dir, "test_results.tsv"), trained)


def _one_place_task(data_dir, seed):
    """96 training and 100 dev inputs of 70 to 110 filler words, whose
    label's signal word sits once, after word 45: past the first window of
    --max_seq_length=32, in one or two of 4 to 6 windows."""
    rng = random.Random(seed)
    os.makedirs(data_dir)
    for split, n in (("train", 96), ("dev", 100)):
        with open(os.path.join(data_dir, split + ".csv"), "w") as f:
            f.write("text,label\n")
            for _ in range(n):
                label = rng.randint(0, 1)
                words = [rng.choice(FILLER) for _ in range(rng.randint(70, 110))]
                words[rng.randrange(45, len(words))] = SIGNALS[label]
                f.write("%s,%s\n" % (" ".join(words), ["no", "yes"][label]))


def two_run_accuracy(tmp, seed):
    """docs/classifier.md's recipe for a model learning from scratch a label
    one place decides: 3 epochs with --window_loss=window, then 7 with
    --window_loss=document (max) from that run's checkpoint. Returns the
    second run's dev accuracy."""
    data_dir = os.path.join(tmp, "data")
    _one_place_task(data_dir, seed)
    vocab = tiny.write_vocab(tmp, FILLER + SIGNALS)
    config = tiny.write_config(tmp, vocab_size=len(FILLER) + 7, hidden_size=128,
                               num_attention_heads=2, intermediate_size=512)
    common = dict(task_name="generic", train_file=os.path.join(data_dir, "train.csv"),
                  dev_file=os.path.join(data_dir, "dev.csv"), vocab_file=vocab,
                  bert_config_file=config, max_seq_length=32, doc_stride=16, max_windows=6,
                  learning_rate=3e-4, train_batch_size=4, do_train=True, id_column=None)
    first = os.path.join(tmp, "windows")
    tiny.run_main_seeded(run_classifier.main, _generic_flags(
        output_dir=first, num_train_epochs=3.0, **common), seed=seed)
    second = os.path.join(tmp, "document")
    tiny.run_main_seeded(run_classifier.main, _generic_flags(
        output_dir=second, init_checkpoint=first, num_train_epochs=7.0, do_eval=True,
        window_loss="document", window_aggregation="max", **common), seed=seed)
    return tiny.read_eval_results(os.path.join(second, "eval_results.txt"))["eval_accuracy"]


@pytest.mark.slow
def test_two_runs_learn_one_place_from_scratch(tmp_path):
    """A random model whose label one word past the first window decides
    learns it with the two-run recipe (100 dev inputs: chance is about 0.5).
    On this task it learned (1.0) on seeds 1 to 8 but 6 with TensorFlow 2.21
    (seed 6 stayed at chance with 3, 4 or 5 epochs of the first run) and on
    seeds 1 to 5 with 2.15, so the test asks it of one of two seeds, the
    second tried only where the first stays short."""
    assert any(two_run_accuracy(str(tmp_path / str(seed)), seed) >= 0.9 for seed in (1, 2))


def test_document_loss_with_training_options(long_task):
    """--window_loss=document trains with dynamic padding, gradient
    accumulation and bf16 (a few steps)."""
    output_dir = str(long_task["tmp"] / "document_options")
    tiny.run_main_seeded(run_classifier.main, _generic_flags(
        data_dir=long_task["data_dir"], vocab_file=long_task["vocab"],
        bert_config_file=long_task["config"], output_dir=output_dir, do_train=True,
        doc_stride=7, max_windows=4, window_loss="document", train_batch_size=4,
        max_train_steps=3, dynamic_padding=True, length_buckets=["8"],
        gradient_accumulation_steps=2, precision="bf16"))
    assert checkpoints.checkpoint_step(tf.train.latest_checkpoint(output_dir)) == 3


def test_window_flags_given_without_doc_stride_are_refused_at_any_value():
    """Without --doc_stride, a window flag the command line gives is refused
    even at its default (it would be ignored), as is one that differs from
    its default (a run record's); unset, they make no Windows."""
    assert long_inputs.Windows.from_settings(run_classifier.Settings()) is None
    for name, value in (("window_aggregation", "mean"), ("max_windows", 0)):
        with pytest.raises(errors.InputError, match="--%s is for --doc_stride" % name):
            long_inputs.Windows.from_settings(run_classifier.Settings(
                **{name: value}, given=frozenset({name})))
    with pytest.raises(errors.InputError, match="--window_loss is for --doc_stride"):
        long_inputs.Windows.from_settings(run_classifier.Settings(window_loss="document"))
    windows = long_inputs.Windows.from_settings(run_classifier.Settings(
        doc_stride=8, max_windows=2, window_aggregation="max", given=frozenset({"doc_stride"})))
    assert (windows.doc_stride, windows.max_windows, windows.aggregation, windows.loss) == (
        8, 2, "max", "window")


def test_window_flags_need_doc_stride(long_task):
    common = dict(data_dir=long_task["data_dir"], vocab_file=long_task["vocab"],
                  bert_config_file=long_task["config"],
                  output_dir=str(long_task["tmp"] / "refused"), do_train=True)
    tiny.assert_input_error(lambda **f: tiny.run_main_seeded(run_classifier.main, f),
                            _generic_flags(max_windows=2, **common),
                            "--max_windows is for --doc_stride")
    tiny.assert_input_error(lambda **f: tiny.run_main_seeded(run_classifier.main, f),
                            _generic_flags(doc_stride=0, **common), "--doc_stride=0")
    tiny.assert_input_error(lambda **f: tiny.run_main_seeded(run_classifier.main, f),
                            _generic_flags(doc_stride=8, max_windows=-1, **common),
                            "--max_windows=-1")
    tiny.assert_input_error(lambda **f: tiny.run_main_seeded(run_classifier.main, f),
                            _generic_flags(window_loss="document", **common),
                            "--window_loss is for --doc_stride")
    tiny.assert_input_error(lambda **f: tiny.run_main_seeded(run_classifier.main, f),
                            _generic_flags(doc_stride=8, window_loss="document", **common),
                            "--window_loss=document needs --max_windows")
    tiny.assert_input_error(lambda **f: tiny.run_main_seeded(run_classifier.main, f),
                            _generic_flags(doc_stride=8, max_windows=4, window_loss="document",
                                           window_aggregation="first", **common),
                            "--window_loss=document needs --window_aggregation=mean or max")


# ---------------------------------------------------------------------------
# Dynamic padding.

def _write_records(path, lengths, seq_length):
    """Records whose input_ids are 100 * index + position on `lengths[i]`
    positions, then zeros."""
    with tf.io.TFRecordWriter(path) as writer:
        for i, length in enumerate(lengths):
            ids = [100 * i + p + 1 for p in range(length)] + [0] * (seq_length - length)
            mask = [1] * length + [0] * (seq_length - length)
            writer.write(tf.train.Example(features=tf.train.Features(feature={
                "input_ids": input_pipeline.int64_feature(ids),
                "input_mask": input_pipeline.int64_feature(mask),
                "segment_ids": input_pipeline.int64_feature([0] * seq_length),
                "label_ids": input_pipeline.int64_feature([i]),
            })).SerializeToString())


def _batches(input_fn, batch_size, count):
    with tf.Graph().as_default():
        tf.set_random_seed(7)
        next_batch = tf.data.make_one_shot_iterator(
            input_fn({"batch_size": batch_size})).get_next()
        with tf.Session() as sess:
            out = []
            for _ in range(count):
                try:
                    out.append(sess.run(next_batch))
                except tf.errors.OutOfRangeError:
                    break
            return out


def test_default_length_buckets():
    def buckets(max_seq_length, **values):
        from absl.testing import flagsaver
        with flagsaver.flagsaver(dynamic_padding=True, max_seq_length=max_seq_length,
                                 use_tpu=False, **values):
            return input_pipeline.length_buckets_of(
                settings_lib.from_flags(run_classifier.Settings))

    run_classifier  # noqa: B018  (defines the flags)
    assert buckets(128) == (16, 32, 48, 64, 80, 96, 112, 128)
    assert buckets(512) == (64, 128, 192, 256, 320, 384, 448, 512)
    assert buckets(100) == (16, 32, 40, 56, 64, 80, 88, 100)
    assert buckets(128, length_buckets=["32", "64"]) == (32, 64, 128)
    for bad in (["64", "32"], ["0"], ["200"], ["x"]):
        with pytest.raises(errors.InputError, match="--length_buckets"):
            buckets(128, length_buckets=bad)
    with pytest.raises(errors.InputError, match="--length_buckets"):
        from absl.testing import flagsaver
        with flagsaver.flagsaver(dynamic_padding=False, length_buckets=["32"]):
            input_pipeline.length_buckets_of(settings_lib.from_flags(run_classifier.Settings))
    from absl.testing import flagsaver
    with flagsaver.flagsaver(dynamic_padding=True, max_seq_length=128, use_tpu=True,
                             length_buckets=None):
        assert input_pipeline.length_buckets_of(
            settings_lib.from_flags(run_classifier.Settings)) is None


def test_dynamic_batches_read_the_same_inputs_cut_to_a_bucket(tmp_path):
    rng = random.Random(3)
    seq_length, batch_size = 32, 4
    pool = batch_size * input_pipeline.LENGTH_POOL_BATCHES
    lengths = [rng.choice([3, 5, 9, 14, 20, 31, 32]) for _ in range(pool + 50)]
    path = str(tmp_path / "records")
    _write_records(path, lengths, seq_length)
    names = {name: tf.io.FixedLenFeature([seq_length], tf.int64)
             for name in ("input_ids", "input_mask", "segment_ids")}
    names["label_ids"] = tf.io.FixedLenFeature([], tf.int64)
    buckets = (8, 16, 24, 32)

    def input_fn(is_training, length_buckets):
        return input_pipeline.tfrecord_input_fn(path, names, is_training,
                                                drop_remainder=is_training,
                                                length_buckets=length_buckets)

    # Training: the first pool of batches holds the same inputs as the padded
    # batches, each batch cut to the first bucket that holds its longest.
    count = 2 * input_pipeline.LENGTH_POOL_BATCHES
    padded = _batches(input_fn(True, None), batch_size, count)
    dynamic = _batches(input_fn(True, buckets), batch_size, count)
    for first in (0, input_pipeline.LENGTH_POOL_BATCHES):
        window = slice(first, first + input_pipeline.LENGTH_POOL_BATCHES)
        assert sorted(i for b in padded[window] for i in b["label_ids"]) == \
            sorted(i for b in dynamic[window] for i in b["label_ids"])
    spread = []
    for batch in dynamic:
        batch_lengths = [lengths[i] for i in batch["label_ids"]]
        width = batch["input_ids"].shape[1]
        assert width == min(b for b in buckets if b >= max(batch_lengths))
        spread.append(max(batch_lengths) - min(batch_lengths))
        for row, i in zip(batch["input_ids"], batch["label_ids"]):
            expected = [100 * i + p + 1 for p in range(lengths[i])]
            assert row.tolist() == (expected + [0] * width)[:width]
    # Inputs of like length go together, so batches are narrower than padded.
    assert np.mean(spread) < 5
    # Evaluation: the file's order, batch by batch.
    in_order = _batches(input_fn(False, buckets), batch_size, 1000)
    assert [i for b in in_order for i in b["label_ids"]] == list(range(len(lengths)))
    assert in_order[0]["input_ids"].shape[1] == min(
        b for b in buckets if b >= max(lengths[:batch_size]))


# Tolerances relative to each tensor's largest value. bf16's unit roundoff
# is 2**-8, so bf16 gets four of its units. Cutting the padding only drops
# exact zeros from sums: the two agree to about 2e-7 of each tensor's largest
# value in both precisions (CPU, TensorFlow 2.15 and 2.21).
@pytest.mark.parametrize("precision,tolerance", [("fp32", 1e-5), ("bf16", 2.0 ** -6)])
def test_padding_is_inert_in_loss_gradients_and_outputs(precision, tolerance):
    """The classifier's loss, its gradients and its probabilities on a batch
    padded to 32 equal those on the same batch cut to its longest input.

    The weights are drawn wide (initializer_range 0.2, output weights of
    standard deviation 1) so that the probabilities spread over (0, 1) and
    the gradients are far from zero. What it catches: with the attention
    mask removed (modeling.BertModel passing all ones to
    create_attention_mask_from_input_mask) the bf16 case fails on each of
    the three: the loss moves by 0.17, the probabilities by up to 0.19, and
    every gradient but the key biases' by 4.6 to thousands of times its
    tolerance. With the default initialization the probabilities stay
    within 0.004 of 0.5 and nearly all gradients below 2e-2, so an absolute
    tolerance of that size passes a model that attends to its padding.
    """
    config = modeling.BertConfig(vocab_size=30, hidden_size=32, num_hidden_layers=2,
                                 num_attention_heads=4, intermediate_size=64,
                                 max_position_embeddings=64, initializer_range=0.2)
    rng = np.random.RandomState(0)
    lengths = [5, 9, 3, 7]
    ids = np.zeros([4, 32], np.int32)
    mask = np.zeros([4, 32], np.int32)
    segments = np.zeros([4, 32], np.int32)
    for row, length in enumerate(lengths):
        ids[row, :length] = rng.randint(5, 30, length)
        mask[row, :length] = 1
        segments[row, length // 2:length] = 1
    labels = np.array([0, 1, 1, 0], np.int32)
    output_weights = rng.normal(0.0, 1.0, [2, 32])

    def run(width):
        with tf.Graph().as_default():
            tf.set_random_seed(1)
            inputs = [tf.constant(x[:, :width]) for x in (ids, mask, segments)]
            loss, _, _, probabilities = run_classifier.create_model(
                config, False, *inputs, tf.constant(labels), 2, False,
                options=training.TrainingOptions(precision=precision))
            variables = tf.trainable_variables()
            grads = [tf.convert_to_tensor(g) for g in tf.gradients(loss, variables)]
            with tf.Session() as sess:
                sess.run(tf.global_variables_initializer())
                weights, = [v for v in variables if v.op.name == "output_weights"]
                sess.run(weights.assign(output_weights))
                return sess.run([loss, probabilities, grads]), [v.op.name for v in variables]

    (full, names), (cut, _) = run(32), run(max(lengths))
    # The setup's outputs move: confident probabilities both ways.
    assert full[1].min() < 0.05 and full[1].max() > 0.95
    np.testing.assert_allclose(cut[0], full[0], rtol=tolerance)
    np.testing.assert_allclose(cut[1], full[1], atol=tolerance)
    largest = max(np.abs(g).max() for g in full[2])
    for name, a, b in zip(names, cut[2], full[2]):
        # A key bias adds the same amount to all of a query's scores, which
        # the softmax ignores: its gradient is rounding noise around zero,
        # measured against the largest gradient instead of its own.
        scale = largest if name.endswith("key/bias") else np.abs(b).max()
        assert scale > 0, name
        np.testing.assert_allclose(a, b, atol=tolerance * scale, rtol=0, err_msg=name)


def test_dynamic_padding_end_to_end_gives_the_padded_results(tmp_path):
    """Training with --dynamic_padding (and gradient accumulation) learns the
    task; evaluating and predicting the same checkpoint with and without it
    gives the same metrics and probabilities."""
    data_dir = str(tmp_path / "data")
    test_run_classifier._write_mrpc_task(data_dir, num_train=128)
    vocab, config = test_run_classifier._model_files(tmp_path)
    output_dir = str(tmp_path / "output")
    common = dict(task_name="mrpc", data_dir=data_dir, vocab_file=vocab,
                  bert_config_file=config, max_seq_length=32)
    test_run_classifier.run_main(output_dir=output_dir, do_train=True, do_eval=True,
                                 do_predict=True, dynamic_padding=True,
                                 length_buckets=["8", "16"], gradient_accumulation_steps=2,
                                 train_batch_size=8, num_train_epochs=8.0, **common)
    dynamic = tiny.read_eval_results(os.path.join(output_dir, "eval_results.txt"))
    assert dynamic["eval_accuracy"] >= 0.9
    with open(os.path.join(output_dir, "test_results.tsv")) as f:
        dynamic_probabilities = np.loadtxt(f)
    padded_dir = str(tmp_path / "padded")
    test_run_classifier.run_main(output_dir=padded_dir, do_eval=True, do_predict=True,
                                 init_checkpoint=tf.train.latest_checkpoint(output_dir),
                                 **common)
    padded = tiny.read_eval_results(os.path.join(padded_dir, "eval_results.txt"))
    for key in ("eval_accuracy", "eval_f1", "eval_loss"):
        assert padded[key] == pytest.approx(dynamic[key], abs=1e-5)
    with open(os.path.join(padded_dir, "test_results.tsv")) as f:
        np.testing.assert_allclose(np.loadtxt(f), dynamic_probabilities, atol=1e-5)
