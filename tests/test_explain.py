"""The explain signature of classifier exports (attributions.py): integrated
gradients checked against a NumPy computation of the same model (its
gradients by central differences, in float64), completeness, the words'
places in the text, the label explained, and the request's bounds."""

import json
import pathlib
import re

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import serving_exports
import test_modeling
import test_predict
import tokenization
from scriptkit import attributions
from scriptkit import exported_model
from scriptkit import rest_api
from scriptkit import serving

TEXTS = {"text_a": ["The film is good.", "中文 film", "Jack went to Kingston!"],
         "text_b": ["Café Crème!", "", "the film ends well."]}


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """(model files, {task: SavedModel folder}) of the classifier, the
    regression, the multi-label, the question answering (SQuAD 2.0) and the
    tagger's export (random weights)."""
    tmp = tmp_path_factory.mktemp("explain")
    files = serving_exports.write_files(tmp / "model")
    made = {}
    for task in ("classifier", "regression", "multi_label", "question_answering", "ner"):
        with tf.Graph().as_default():
            made[task], _ = serving_exports.EXPORTS[task](
                tmp / task, files, explain_steps=attributions.DEFAULT_STEPS)
    return files, made


def _explain_in_session(export_dir, inputs):
    """The explain signature's outputs and its id features, run in a TF1
    session (as TF Serving runs it)."""
    with tf.Graph().as_default(), tf.Session() as session:
        meta = tf.saved_model.loader.load(session, ["serve"], export_dir)
        signature = meta.signature_def[serving.EXPLAIN_SIGNATURE]
        fetches = {name: info.name for name, info in signature.outputs.items()}
        fetches.update({"feature/" + name: serving.EXPLAIN_FEATURE_PREFIX + name + ":0"
                        for name in serving.FEATURE_NAMES})
        return session.run(fetches, {signature.inputs[name].name: value
                                     for name, value in inputs.items()})


def _numpy_output(weights, config, ids, mask, segments, vectors, label, regression):
    """The explained output (a label's probability, or the score) of inputs
    [rows, seq] whose word embeddings are `vectors` [rows, seq, hidden]."""
    rows = len(vectors)
    _, _, pooled = test_modeling.np_bert(
        weights, config, np.repeat(ids[None], rows, 0), np.repeat(mask[None], rows, 0),
        np.repeat(segments[None], rows, 0), word_vectors=vectors)
    logits = pooled @ weights["output_weights"].astype(np.float64).T + weights["output_bias"]
    if regression:
        return logits[:, 0]
    return test_modeling.np_softmax(logits)[:, label]


def _numpy_integrated_gradients(weights, config, ids, mask, segments, baseline, label,
                                regression, steps, eps=1e-5):
    """Per position attributions of one input (the integral's points placed
    as attributions.py places them), each gradient by central differences
    over every coordinate of the text's embeddings; and the output at the
    input and at the baseline."""
    table = weights["bert/embeddings/word_embeddings"].astype(np.float64)
    x, x0 = table[ids], table[baseline]
    changed = np.flatnonzero(ids != baseline)
    hidden = x.shape[-1]

    def output(vectors):
        return _numpy_output(weights, config, ids, mask, segments, vectors, label,
                             regression)

    # The path's output at evenly spaced points, and the integral's points
    # placed by it (attributions.adapted_points' rule, written here with
    # NumPy's interpolation).
    path = attributions.PATH_POINTS_PER_STEP * steps
    along = output(x0 + np.linspace(0, 1, path + 1)[:, None, None] * (x - x0))
    change = np.abs(np.diff(along))
    share = change / change.sum() if change.sum() > 0 else np.full(path, 1 / path)
    mass = attributions.CHANGE_SHARE * share + (1 - attributions.CHANGE_SHARE) / path
    bounds = np.interp(np.linspace(0, 1, steps + 1), np.concatenate([[0], np.cumsum(mass)]),
                       np.linspace(0, 1, path + 1))
    gradient_sum = np.zeros_like(x)
    for alpha, width in zip((bounds[1:] + bounds[:-1]) / 2, np.diff(bounds)):
        point = x0 + alpha * (x - x0)
        shifted = np.repeat(point[None], 2 * len(changed) * hidden, 0)
        index = 0
        for j in changed:
            for h in range(hidden):
                shifted[index, j, h] += eps
                shifted[index + 1, j, h] -= eps
                index += 2
        values = output(shifted)
        slopes = (values[0::2] - values[1::2]) / (2 * eps)
        gradient_sum[changed] += width * slopes.reshape(len(changed), hidden)
    attributions_ = (gradient_sum * (x - x0)).sum(-1)
    ends = output(np.stack([x, x0]))
    return attributions_, ends[0], ends[1]


@pytest.mark.parametrize("task", ["classifier", "regression"])
def test_attributions_are_numpy_integrated_gradients_and_complete(exports, task):
    files, made = exports
    regression = task == "regression"
    inputs = dict(TEXTS)
    if not regression:
        inputs["label"] = ["", "0", "1"]
    out = _explain_in_session(made[task], inputs)
    reader = tf.train.load_checkpoint(files["regression" if regression else "classifier"])
    weights = {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}
    with open(files["config"], encoding="utf-8") as f:
        config = json.load(f)
    tokenizer = tokenization.FullTokenizer(files["vocab"], do_lower_case=True)
    for row in range(3):
        mask = out["feature/input_mask"][row]
        length = int(mask.sum())
        ids, segments = (out["feature/" + name][row][:length]
                         for name in ("input_ids", "segment_ids"))
        baseline = np.where(np.isin(ids, [2, 3]), ids, 0)  # [CLS] 2 and [SEP] 3 kept.
        label = None if regression else int(out["label_ids"][row])
        expected, at_input, at_baseline = _numpy_integrated_gradients(
            weights, config, ids, mask[:length], segments, baseline, label, regression,
            attributions.DEFAULT_STEPS)
        np.testing.assert_allclose(out["output"][row], at_input, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(out["baseline_output"][row], at_baseline, rtol=1e-4,
                                   atol=1e-6)
        # Words: the sums of their pieces' attributions (text_a's pieces
        # at 1.., text_b's after its [SEP]).
        words = int(out["num_words"][row])
        total = out["attributions"][row][:words].sum()
        np.testing.assert_allclose(total, expected.sum(), rtol=1e-3, atol=1e-5)
        # Each word: the NumPy attributions of its pieces, summed.
        segments_of_words = (out["segments"][row][:words] if "segments" in out
                             else np.zeros(words, np.int32))
        at = {0: 1, 1: int(np.flatnonzero(ids == 3)[0]) + 1}  # after [CLS], after [SEP]
        per_word = []
        for word, segment in zip(out["words"][row][:words], segments_of_words):
            count = max(1, len(tokenizer.tokenize(word.decode())))
            per_word.append(expected[at[segment]:at[segment] + count].sum())
            at[segment] += count
        np.testing.assert_allclose(out["attributions"][row][:words], per_word, rtol=1e-3,
                                   atol=2e-5)
        # Completeness: the attributions sum to the output's difference.
        difference = at_input - at_baseline
        assert abs(total - difference) <= 0.05 * abs(difference), (row, total, difference)
        assert (out["attributions"][row][words:] == 0).all()
    if not regression:
        # The label explained: the predicted one for "", else the named one.
        predicted = exported_model.Model(made[task]).signature("serving_default")(
            dict(TEXTS))
        assert out["label_ids"].tolist() == [predicted["label_ids"][0], 0, 1]
        assert out["labels"].tolist() == [str(out["label_ids"][0]).encode(), b"0", b"1"]
        np.testing.assert_allclose(
            out["output"], [predicted["probabilities"][i][label]
                            for i, label in enumerate(out["label_ids"])], rtol=1e-5)


def test_multi_label_explains_one_labels_probability(exports):
    _, made = exports
    model = exported_model.Model(made["multi_label"])
    texts = ["The film is good.", "中文 film"]
    probabilities = model.signature("serving_default")({"text_a": texts})["probabilities"]
    out = model.signature("explain")({"text_a": texts, "label": ["", "news"]})
    # "": the most probable label; else the named one ("sport", "news").
    assert out["label_ids"].tolist() == [int(np.argmax(probabilities[0])), 1]
    np.testing.assert_allclose(out["output"], [probabilities[0].max(), probabilities[1][1]],
                               rtol=1e-5)
    assert "segments" not in out  # One text.
    for row in range(2):
        difference = out["output"][row] - out["baseline_output"][row]
        total = out["attributions"][row].sum()
        assert abs(total - difference) <= 0.05 * abs(difference), (row, total, difference)


def test_words_point_into_their_texts(exports):
    _, made = exports
    out = exported_model.Model(made["classifier"]).signature("explain")(
        dict(TEXTS, label=[""] * 3))
    for row in range(3):
        words = int(out["num_words"][row])
        segments = out["segments"][row][:words]
        texts = [TEXTS["text_a"][row], TEXTS["text_b"][row]]
        got = [texts[s][b:e] for s, b, e in zip(segments, out["start_offsets"][row],
                                                 out["end_offsets"][row])]
        assert got == [w.decode("utf-8") for w in out["words"][row][:words]]
        assert list(segments) == sorted(segments)  # text_a's words first
        assert (out["segments"][row][words:] == -1).all()
    assert out["words"][1][:3].tolist() == ["中".encode(), "文".encode(), b"film"]


def test_requests_leave_the_label_out_name_one_or_get_a_400(exports):
    _, made = exports
    model = exported_model.Model(made["classifier"])
    instance = {"text_a": "The film is good.", "text_b": "Café Crème!"}
    answer, _ = rest_api.predict_response(model, {"signature_name": "explain",
                                                  "instances": [instance]})
    (prediction,) = answer["predictions"]
    assert prediction["num_words"] == 8 and prediction["labels"] in ("0", "1")
    answer, _ = rest_api.predict_response(model, {"signature_name": "explain", "instances": [
        dict(instance, label="1")]})
    assert answer["predictions"][0]["label_ids"] == 1
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        model.signature("explain")({"text_a": ["a"], "text_b": [""], "label": ["nope"]})
    assert exported_model.op_error_message(error.value) == (
        "assertion failed: input label: nope is not a label of the model (0, 1; empty: the "
        "predicted label)")
    # The serving_default signature takes no label.
    with pytest.raises(exported_model.RequestError, match="unknown: label"):
        rest_api.predict_response(model, {"instances": [dict(instance, label="1")]})


def test_an_explanation_counts_the_rows_it_runs(exports):
    _, made = exports
    model = exported_model.Model(made["classifier"])
    arrays = {name: np.array([text.encode() for text in texts], dtype=object)
              for name, texts in dict(TEXTS, label=[""] * 3).items()}
    # One window each, and the integral's rows.
    rows = 3 + 3 * attributions.rows_per_text(attributions.DEFAULT_STEPS)
    assert model.signature("explain").windows(arrays) == rows
    limits = rest_api.DEFAULT_LIMITS._replace(max_windows_per_request=rows - 1)
    with pytest.raises(exported_model.RequestError, match="--max_windows_per_request"):
        rest_api.predict_response(model, {"signature_name": "explain", "inputs": {
            name: texts for name, texts in dict(TEXTS, label=[""] * 3).items()}}, limits)


def test_documented_request_is_answered_with_the_documented_fields(exports):
    """docs/serving.md's explain request, to a pair classifier, answered
    with the outputs its comment names, the attributions summing to
    output - baseline_output."""
    page = (pathlib.Path(__file__).parent.parent / "docs" / "serving.md").read_text()
    section = page.split("### Explaining a prediction")[1]
    match = re.search(r"curl -d '(.*?)' \\\n.*?\n# (.*?)\n", section, flags=re.S)
    request, shown = json.loads(match.group(1)), match.group(2)
    _, made = exports
    answer, _ = rest_api.predict_response(exported_model.Model(made["classifier"]), request)
    (prediction,) = answer["predictions"]
    assert sorted(prediction) == sorted(re.findall(r'"(\w+)":', shown)[1:])
    total = sum(prediction["attributions"][:prediction["num_words"]])
    difference = prediction["output"] - prediction["baseline_output"]
    assert abs(total - difference) <= 0.05 * abs(difference)
    assert prediction["labels"] == request["instances"][0]["label"]


QUESTIONS = {"question": ["Where is the film?", "what", "Who went?"],
             "context": ["The film went to Kingston! " * 6, "中文 cafe ends well.", ""]}


def test_question_answering_explains_its_answer_in_its_window(exports):
    files, made = exports
    out = _explain_in_session(made["question_answering"], QUESTIONS)
    answers = exported_model.Model(made["question_answering"]).signature("serving_default")(
        dict(QUESTIONS))
    for name in ("answer", "answer_start", "answer_end"):
        assert out[name].tolist() == answers[name].tolist(), name
    reader = tf.train.load_checkpoint(files["squad"])
    weights = {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}
    with open(files["config"], encoding="utf-8") as f:
        config = json.load(f)
    table = weights["bert/embeddings/word_embeddings"]
    # NumPy's start and end logits of every window (the features hold all
    # the questions' windows), at the input and at the baseline.
    windows = []
    for ids, mask, segments in zip(*(out["feature/" + name] for name in serving.FEATURE_NAMES)):
        baseline = np.where(np.isin(ids, [2, 3]) & (mask == 1), ids, 0)
        logits = []
        for used in (ids, baseline):
            _, layers, _ = test_modeling.np_bert(weights, config, ids[None], mask[None],
                                                 segments[None], word_vectors=table[used][None])
            logits.append(layers[-1][0] @ weights["cls/squad/output_weights"].T.astype(
                np.float64) + weights["cls/squad/output_bias"])
        windows.append((logits, mask, segments))
    for row in range(3):
        # The explained window and span: the one whose start and end logits
        # sum to the output (no other comes within float rounding of it).
        gaps = [np.abs(at[0][:, 0][:, None] + at[0][:, 1][None, :] - out["output"][row])
                for at, _, _ in windows]
        window = int(np.argmin([gap.min() for gap in gaps]))
        start, end = np.unravel_index(np.argmin(gaps[window]), gaps[window].shape)
        (at_input, at_baseline), mask, segments = windows[window]
        np.testing.assert_allclose(out["output"][row], at_input[start, 0] + at_input[end, 1],
                                   rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(out["baseline_output"][row],
                                   at_baseline[start, 0] + at_baseline[end, 1],
                                   rtol=1e-4, atol=1e-5)
        if out["answer"][row]:
            assert mask[start] == 1 and segments[start] == segments[end] == 1
        else:
            assert start == end == 0  # [CLS]: no answer
        words = int(out["num_words"][row])
        total = out["attributions"][row][:words].sum()
        difference = out["output"][row] - out["baseline_output"][row]
        assert abs(total - difference) <= 0.05 * abs(difference), (row, total, difference)
        # The question's words (segment 0), then the context's, in place.
        texts = [QUESTIONS["question"][row], QUESTIONS["context"][row]]
        segments_ = out["segments"][row][:words]
        assert [texts[t][b:e] for t, b, e in zip(segments_, out["start_offsets"][row],
                                                 out["end_offsets"][row])] == [
            w.decode() for w in out["words"][row][:words]]
    # A long context: the words outside the answer's window have no attribution.
    first = out["segments"][0].tolist().index(1)
    assert (out["attributions"][0][first:first + 5] == 0).all()
    assert (out["attributions"][0][first + 30:] != 0).any()


def test_tagger_explains_the_tags_of_one_entity(exports):
    _, made = exports
    model = exported_model.Model(made["ner"])
    texts = ["Jack went to Kingston!", "istanbul " * 24]
    # Its windows (the long text's 16-piece windows, 4 apart) and the integrals'.
    arrays = {"text": np.array([t.encode() for t in texts], dtype=object),
              "first_word": np.array([0, 20], np.int32), "last_word": np.array([3, 20], np.int32)}
    windows = model.signature("serving_default").windows({"text": arrays["text"]})
    assert windows > 2  # the short text one, the long one several
    assert model.signature("explain").windows(arrays) == windows + 2 * (
        attributions.rows_per_text(attributions.DEFAULT_STEPS))
    tagged = model.signature("serving_default")({"text": texts})
    out = model.signature("explain")({"text": texts, "first_word": [0, 20],
                                      "last_word": [3, 20]})
    # The mean of the probabilities of the words' tags (the short text is
    # one window; a one-word entity is in its own best window).
    best = tagged["probabilities"].max(axis=-1)
    np.testing.assert_allclose(out["output"], [best[0][:4].mean(), best[1][20]], rtol=1e-5)
    assert [t.decode() for t in out["tag"]] == [
        tag.decode() for tag in (tagged["tags"][0][0], tagged["tags"][1][20])]
    assert out["words"].tolist() == tagged["words"].tolist()
    for row in range(2):
        total = out["attributions"][row].sum()
        difference = out["output"][row] - out["baseline_output"][row]
        assert abs(total - difference) <= 0.05 * abs(difference), (row, total, difference)
    # The long text's window around word 20 (16 pieces, stride 4): the
    # first words are outside it.
    assert (out["attributions"][1][:8] == 0).all() and (out["attributions"][1][18:22] != 0).all()
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        model.signature("explain")({"text": ["Jack went"], "first_word": [1],
                                    "last_word": [2]})
    assert exported_model.op_error_message(error.value) == (
        "assertion failed: inputs first_word 1 and last_word 2: the first and last word of "
        "an entity, 0 <= first_word <= last_word < the number of words of the text, 2")


def test_predict_writes_each_lines_attributions(exports, tmp_path):
    """predict.py --signature_name=explain on a JSON Lines file: per line
    its words (cut to its own) with their attributions, the label left out
    on one line (the predicted one) and named on the other."""
    _, made = exports
    path = tmp_path / "in.jsonl"
    rows = [{"text_a": "The film is good.", "text_b": "Café Crème!", "id": 7},
            {"text_a": "中文 film", "text_b": "", "label": "0"}]
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows),
                    encoding="utf-8")
    lines = test_predict._predict(made["classifier"], input_file=str(path),
                                  output_file=str(tmp_path / "out.jsonl"),
                                  signature_name="explain", id_column="id")
    expected = exported_model.Model(made["classifier"]).signature("explain")(
        {"text_a": [r["text_a"] for r in rows], "text_b": [r["text_b"] for r in rows],
         "label": ["", "0"]})
    assert [line.get("id") for line in lines] == [7, None]
    for row, line in enumerate(lines):
        n = int(expected["num_words"][row])
        assert line["words"] == [w.decode() for w in expected["words"][row][:n]]
        np.testing.assert_allclose(line["attributions"], expected["attributions"][row][:n],
                                   rtol=1e-5, atol=1e-7)
    assert lines[1]["labels"] == "0"
