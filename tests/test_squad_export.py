"""run_squad.py --export_dir (squad_export.py): a SavedModel that takes a
question and a context and returns the answer.

References: run_squad's own Python predict phase (`_check_is_max_context`,
`convert_examples_to_features`, `compute_predictions`, tested against
Google's original in test_run_squad.py) on the same logits; a case worked
out by hand; and, end to end, predictions.json and eval_results.json of
--do_predict with the same weights.
"""

import json
import os
import re
import threading
from unittest import mock

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from scriptkit import exported_model
from scriptkit import graph_tokenization
from scriptkit import input_packing
from scriptkit import rest_api
from scriptkit import rest_server
import run_squad
from scriptkit import serving
from scriptkit import squad_answers
import serving_exports
import squad_evaluate
from scriptkit import squad_export
import test_predict
import test_serving
import tiny
import tokenization
from scriptkit.errors import InputError
from scriptkit.exported_model import RequestError
from test_run_squad import _corpus, _main_flags, _run_main, _write_squad
from tiny import write_vocab

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---------------------------------------------------------------------------
# The windows' max-context rule, against the original's scoring of every
# window.

def test_max_context_window_equals_the_original():
    cases = []
    for num_pieces in range(1, 40):
        for room in (1, 2, 3, 5, 8, 13):
            for stride in (1, 2, 3, 4, 7, 16):
                step = min(room, stride)
                spans = input_packing.window_spans(num_pieces, room, stride)
                for position in range(num_pieces):
                    expected = next(i for i in range(len(spans)) if
                                    run_squad._check_is_max_context(spans, i, position))
                    cases.append((position, num_pieces, room, step, len(spans), expected))
    cases = np.array(cases, np.int32)

    with tf.Graph().as_default(), tf.Session() as session:
        windows = squad_export.max_context_window(*tf.unstack(tf.constant(cases[:, :5]), axis=1))
        np.testing.assert_array_equal(session.run(windows), cases[:, 5])


# ---------------------------------------------------------------------------
# The span search on given logits: the same windows, n-best and answers as
# run_squad's Python code.

EXPORT_SETTINGS = dict(max_seq_length=48, doc_stride=16, max_query_length=8,
                       n_best_size=5, max_answer_length=10)


def _signature_on_logits(vocab, export_settings, questions, contexts, logits_of, runs=1):
    """serving_default's post-processing in a graph, on logits given by
    `logits_of(features, run)` -> float32 [windows, 2, length], for each run
    in range(runs): [(features, outputs)]."""
    with tf.Graph().as_default(), tf.Session() as session:
        tokenizer = graph_tokenization.GraphTokenizer(vocab, do_lower_case=True)
        inputs, features, outputs_fn = squad_export.text_signature(
            tokenizer, squad_export.vocab_piece_lengths(vocab), export_settings)
        start = tf.placeholder(tf.float32, [None, None])
        end = tf.placeholder(tf.float32, [None, None])
        outputs = outputs_fn({"start_logits": start, "end_logits": end})
        session.run(tf.tables_initializer())
        feed = {inputs["question"]: [q.encode("utf-8") for q in questions],
                inputs["context"]: [c.encode("utf-8") for c in contexts]}
        values = session.run(features, feed)
        results = []
        for run in range(runs):
            logits = logits_of(values, run)
            results.append((values, session.run(outputs, {**feed, start: logits[:, 0],
                                                          end: logits[:, 1]})))
        return results


def _nbest(outputs, i):
    count = outputs["num_answers"][i]
    return ([a.decode("utf-8") for a in outputs["answers"][i][:count]],
            outputs["answer_scores"][i][:count])


def _split_words(directory, words):
    """A vocabulary of `words` in which each word of 6 or more letters is
    only there as two pieces, its first 3 letters and "##" the rest (so
    that many spans start or end inside a word); a word the tokenizer would
    not cut so (another entry is a longer start of it) stays whole.
    Returns the vocabulary file."""
    long = {w for w in words if len(w) >= 6 and w.isalpha()}
    pieces = sorted(set(words) - long) + sorted({p for w in long for p in (w[:3], "##" + w[3:])})
    tokenizer = tokenization.FullTokenizer(write_vocab(directory, pieces), True)
    whole = [w for w in long if tokenizer.tokenize(w) != [w[:3], "##" + w[3:]]]
    assert len(whole) < len(long) / 2, whole
    return write_vocab(directory, pieces + whole)


@pytest.mark.parametrize("version_2", [False, True])
def test_span_search_equals_the_scripts_predictions(tmp_path, version_2):
    """Random logits rounded to one decimal (ties happen) over windowed
    contexts whose longer words are two pieces each (`_split_words`): the
    export's features are eval.tf_record's (cut to the batch's longest
    window), and its answers, offsets and n-best those of
    compute_predictions when the logits of the padding are lowest (the
    export does not pad to max_seq_length). Some answers start or end
    inside a word."""
    _, dev_v1, _, dev_v2, words = _corpus()
    dev = dev_v2 if version_2 else dev_v1
    vocab = _split_words(str(tmp_path), words)
    examples = run_squad.read_squad_examples(_write_squad(tmp_path / "dev.json", dev), False,
                                             version_2)
    features = []
    s = EXPORT_SETTINGS
    run_squad.convert_examples_to_features(
        examples, tokenization.FullTokenizer(vocab, True), s["max_seq_length"],
        s["doc_stride"], s["max_query_length"], False, features.append)
    qas = [(qa["question"], p["context"]) for a in dev for p in a["paragraphs"]
           for qa in p["qas"]]
    export_settings = dict(s, version_2_with_negative=version_2,
                           null_score_diff_threshold=-0.5)
    length = s["max_seq_length"]
    all_logits = np.round(np.random.RandomState(0).randn(3, len(features), 2, length) * 3,
                          1).astype(np.float32)
    for i, feature in enumerate(features):
        all_logits[:, i, :, len(feature.tokens):] = -1e4
    runs = _signature_on_logits(vocab, export_settings, [q for q, _ in qas],
                                [c for _, c in qas],
                                lambda f, run: all_logits[run, :, :, :f["input_ids"].shape[1]],
                                runs=len(all_logits))
    inside_words = 0  # answers that start or end inside a word of the context
    for seed, (logits, (graph_features, outputs)) in enumerate(zip(all_logits, runs)):
        assert len(graph_features["input_ids"]) == len(features)  # contexts were windowed
        for name in serving.FEATURE_NAMES:
            cut = graph_features[name].shape[1]
            np.testing.assert_array_equal(graph_features[name],
                                          [getattr(f, name)[:cut] for f in features])
        predictions, nbest, _ = squad_answers.compute_predictions(
            examples, features,
            [run_squad.RawResult(f.unique_id, logits[i, 0], logits[i, 1])
             for i, f in enumerate(features)],
            s["n_best_size"], s["max_answer_length"], True, version_2, -0.5)
        for i, example in enumerate(examples):
            texts, scores = _nbest(outputs, i)
            assert texts == [e["text"] for e in nbest[example.qas_id]], (seed, i)
            np.testing.assert_allclose(scores, [e["probability"] for e in
                                                nbest[example.qas_id]], atol=1e-6)
            answer = outputs["answer"][i].decode("utf-8")
            assert answer == predictions[example.qas_id], (seed, i)
            start, end = outputs["answer_start"][i], outputs["answer_end"][i]
            assert answer == (qas[i][1][start:end] if answer else "")
            assert (start == -1) == (end == -1) == (answer == "")
            chosen = texts.index(answer)
            assert outputs["score"][i] == pytest.approx(scores[chosen], abs=1e-6)
            for begin, stop in zip(outputs["answer_starts"][i][:len(texts)],
                                   outputs["answer_ends"][i][:len(texts)]):
                context = qas[i][1]
                inside_words += begin >= 0 and (context[begin - 1:begin].isalpha()
                                                or context[stop:stop + 1].isalpha())
    assert inside_words >= 10


def test_hand_worked_answers_and_offsets(tmp_path):
    """One window each. Context "Then  JOHNSON (1895-1943) l\u00e9ft." with the
    vocabulary below tokenizes (lower-cased) as

        position: 4    5    6     7  8    9  10   11 12     13
        piece:    then john ##son (  1895 -  1943 )  [UNK]  .

    after "[CLS] who [UNK] [SEP]" (0-3; "?" is unknown), [SEP] at 14.
    Offsets in the context: Then 0-4, JOHNSON 6-13 (john 6-10 and ##son
    10-13: 4 + 3 letters fill the word), ( 14-15, 1895 15-19, 1943 20-24,
    ) 24-25.

    Logits: start 2 at john (5) and 1 at 1895 (8), end 3 at ##son (6) and
    1.5 at 1943 (10), 0 elsewhere but [CLS]: -1 and -1 in the first input,
    4 and 1 in the second (SQuAD 2.0, n_best_size 3). The three best starts
    and ends include [CLS] or "who" (invalid: not in the context), so the
    valid spans are 5-6 (5.0), 5-10 (3.5) and 8-10 (2.5); 8-6 ends before
    it starts. First input: null score -2, below all three, appended last;
    null odds -2 - 5 = -7: "JOHNSON". Second input: null score 5 ties with
    5-6 and ranks after it, taking the third span's place; null odds 5 - 5
    = 0, not above the threshold 0: "JOHNSON"; above -0.5: no answer."""
    vocab = write_vocab(str(tmp_path), ["who", "then", "john", "##son", "(", "1895", "-",
                                        "1943", ")", "."])
    context = "Then  JOHNSON (1895-1943) l\u00e9ft."

    def logits_of(features, start_inside=False):
        assert features["input_ids"].shape[1] == 15
        logits = np.zeros((len(features["input_ids"]), 2, 15), np.float32)
        logits[:, 0, 5], logits[:, 0, 8] = 2.0, 1.0
        logits[:, 1, 6], logits[:, 1, 10] = 3.0, 1.5
        logits[0, :, 0] = -1.0
        logits[1:, :, 0] = [4.0, 1.0]
        if start_inside:
            logits[:, 0, 6] = 9.0
        return logits

    def softmax(*values):
        exps = np.exp(np.array(values) - max(values))
        return (exps / exps.sum()).tolist()

    for threshold, second in ((0.0, "JOHNSON"), (-0.5, "")):
        export_settings = dict(max_seq_length=16, doc_stride=8, max_query_length=4,
                               n_best_size=3, max_answer_length=6,
                               version_2_with_negative=True,
                               null_score_diff_threshold=threshold)
        ((_, outputs),) = _signature_on_logits(vocab, export_settings, ["Who?"] * 2,
                                               [context] * 2, lambda f, _: logits_of(f))
        assert [a.decode() for a in outputs["answer"]] == ["JOHNSON", second]
        assert outputs["answers"].tolist() == [
            [b"JOHNSON", b"JOHNSON (1895-1943", b"1895-1943", b""],
            [b"JOHNSON", b"", b"JOHNSON (1895-1943", b""]]
        assert outputs["answer_starts"].tolist() == [[6, 6, 15, -1], [6, -1, 6, -1]]
        assert outputs["answer_ends"].tolist() == [[13, 24, 24, -1], [13, -1, 24, -1]]
        assert outputs["num_answers"].tolist() == [4, 3]
        first_scores, second_scores = softmax(5, 3.5, 2.5, -2), softmax(5, 5, 3.5)
        np.testing.assert_allclose(outputs["answer_scores"],
                                   [first_scores, second_scores + [0.0]], rtol=1e-6)
        assert outputs["answer_start"].tolist() == [6, 6 if second else -1]
        assert outputs["answer_end"].tolist() == [13, 13 if second else -1]
        np.testing.assert_allclose(outputs["score"], [
            first_scores[0], second_scores[0 if second else 1]], rtol=1e-6)

    # SQuAD 1.1; the best start inside a word, at ##son (9): 6-6 (12.0), 6-10
    # (10.5), 5-6 (5.0).
    export_settings = dict(export_settings, version_2_with_negative=False)
    ((_, outputs),) = _signature_on_logits(vocab, export_settings, ["Who?"], [context],
                                           lambda f, _: logits_of(f, start_inside=True))
    assert outputs["answer"].tolist() == [b"SON"]
    assert (outputs["answer_start"][0], outputs["answer_end"][0]) == (10, 13)
    assert outputs["answers"].tolist() == [[b"SON", b"SON (1895-1943", b"JOHNSON"]]

    # The best end inside a word, at john (5), end logit 9: 5-5 "JOHN" (2 + 9
    # = 11.0) ends at character 10, the end of john's 4 letters, not of
    # JOHNSON; then 5-6 (5.0), 5-10 (3.5).
    def end_inside(features, _):
        logits = logits_of(features)
        logits[:, 1, 5] = 9.0
        return logits

    ((_, outputs),) = _signature_on_logits(vocab, export_settings, ["Who?"], [context],
                                           end_inside)
    assert outputs["answer"].tolist() == [b"JOHN"]
    assert (outputs["answer_start"][0], outputs["answer_end"][0]) == (6, 10)
    assert outputs["answers"].tolist() == [[b"JOHN", b"JOHNSON", b"JOHNSON (1895-1943"]]
    assert outputs["answer_ends"].tolist() == [[10, 13, 24]]


# ---------------------------------------------------------------------------
# End to end: trained, predicted and exported by main; served by predict.py.

EPOCHS = 30


def _export_answers(export_dir, dev):
    qas = [(qa["id"], qa["question"], p["context"]) for a in dev for p in a["paragraphs"]
           for qa in p["qas"]]
    outputs = test_serving._run_signature(export_dir, serving.TEXT_SIGNATURE, {
        "question": [q.encode() for _, q, _ in qas], "context": [c.encode() for _, _, c in qas]})
    return {qid: outputs["answer"][i].decode("utf-8") for i, (qid, _, _) in enumerate(qas)}


def _check_parity(out, export_dir, dev, version_2, name="predictions.json", threshold=None):
    with open(os.path.join(out, name)) as f:
        predictions = json.load(f)
    ours = _export_answers(export_dir, dev)
    if threshold is not None:
        # Tuning picks a threshold equal to one question's null-score
        # difference, so that question sits exactly on the boundary, where
        # float rounding (the export's batch and float32 sums against the
        # script's) decides the side: either of its two answers is right.
        with open(os.path.join(out, "null_odds.json")) as f:
            null_odds = json.load(f)
        for qid, text in predictions.items():
            if abs(null_odds[qid] - threshold) <= 1e-4 * (1 + abs(threshold)):
                assert ours[qid] in ("", text), (qid, ours[qid], text)
                ours[qid] = text
    same = sum(ours[qid] == text for qid, text in predictions.items())
    assert same >= 0.99 * len(predictions), (ours, predictions)
    evaluate = squad_evaluate.evaluate_v2 if version_2 else squad_evaluate.evaluate_v1
    theirs, mine = evaluate(dev, predictions), evaluate(dev, ours)
    for name in ("f1", "exact" if version_2 else "exact_match"):
        assert abs(theirs[name] - mine[name]) <= 0.1, (theirs, mine)


def _only_export(out):
    (version,) = os.listdir(out)
    return os.path.join(out, version)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny SQuAD 2.0 model trained, predicted with a tuned threshold and
    exported in one run of main; then, with its checkpoint and
    --do_train=false, predicted and exported as SQuAD 1.1."""
    tmp = tmp_path_factory.mktemp("squad_export")
    # Trained long enough for the tiny model to point at the context (after
    # a few steps its best positions are all outside it: "empty").
    values, dev_v2 = _main_flags(tmp, version_2=True, export_dir=str(tmp / "export_v2"),
                                 num_train_epochs=EPOCHS, n_best_size=5)
    del values["null_score_diff_threshold"]  # not given: the export takes the tuned one
    tiny.run_main_seeded(run_squad.main, values)
    checkpoint = tf.train.latest_checkpoint(values["output_dir"])
    _, dev_v1, _, _, _ = _corpus()
    v1 = dict(values, do_train=False, version_2_with_negative=False, tune_null_threshold=False,
              init_checkpoint=checkpoint, output_dir=str(tmp / "v1"),
              predict_file=_write_squad(tmp / "dev_v1.json", dev_v1),
              export_dir=str(tmp / "export_v1"))
    tiny.run_main_seeded(run_squad.main, v1)
    return dict(v2=(values, dev_v2, _only_export(values["export_dir"])),
                v1=(v1, dev_v1, _only_export(v1["export_dir"])), checkpoint=checkpoint)


@pytest.mark.slow
def test_export_answers_as_predictions_json(trained):
    values, dev, export_dir = trained["v1"]
    _check_parity(values["output_dir"], export_dir, dev, False)
    # The v2 export uses the tuned threshold, which the run record keeps:
    # its answers are those of predictions_best_threshold.json.
    values, dev, export_dir = trained["v2"]
    with open(os.path.join(values["output_dir"], "eval_results_best_threshold.json")) as f:
        tuned = json.load(f)["null_score_diff_threshold"]
    _check_parity(values["output_dir"], export_dir, dev, True,
                  "predictions_best_threshold.json", threshold=tuned)
    with open(os.path.join(export_dir, "assets", serving.CONFIG_ASSET)) as f:
        config = json.load(f)
    assert config["null_score_diff_threshold"] == tuned
    assert config["version_2_with_negative"] and config["doc_stride"] == 16
    with open(os.path.join(values["output_dir"], "run_config.json")) as f:
        record = json.load(f)[squad_export.TUNED_THRESHOLD_KEY]
    assert record["value"] == tuned and record["checkpoint"] == trained["checkpoint"]


@pytest.mark.slow
def test_export_alone_takes_the_recorded_threshold(trained, tmp_path):
    """--export_dir alone (no --do_train, no --do_predict) on the trained
    output dir: the threshold tuned there, unless the flag is given."""
    values, _, _ = trained["v2"]
    with open(os.path.join(values["output_dir"], "run_config.json")) as f:
        tuned = json.load(f)[squad_export.TUNED_THRESHOLD_KEY]["value"]
    for overrides, expected in ((dict(), tuned), (dict(null_score_diff_threshold=2.5), 2.5)):
        export = str(tmp_path / ("export%d" % len(overrides)))
        _run_main(dict(values, do_train=False, do_predict=False, tune_null_threshold=False,
                       export_dir=export, **overrides))
        with open(os.path.join(_only_export(export), "assets", serving.CONFIG_ASSET)) as f:
            assert json.load(f)["null_score_diff_threshold"] == expected


def test_export_without_a_fine_tuned_checkpoint_fails_first(tmp_path):
    values, _ = _main_flags(tmp_path, version_2=False, do_train=False, do_predict=False,
                            export_dir=str(tmp_path / "export"))
    with pytest.raises(InputError, match="--export_dir: no fine-tuned checkpoint in "
                                         "--output_dir=.* to export"):
        _run_main(values)
    assert not os.path.exists(tmp_path / "export")


@pytest.fixture(scope="module")
def random_export(tmp_path_factory):
    """serving_exports.py's question answering export (random weights;
    max_seq_length 24, doc_stride 6, max_query_length 6), its vocabulary
    and settings."""
    folder = tmp_path_factory.mktemp("random_squad")
    files = test_serving.write_model_files(folder)
    files["squad"] = test_serving._random_checkpoint(
        str(folder / "squad.ckpt"), files["config"],
        lambda c: run_squad.create_model(c, False, *[tf.zeros([1, 8], tf.int32)] * 3, False))
    with tf.Graph().as_default():
        path, _ = serving_exports.EXPORTS["question_answering"](folder / "export", files)
    with open(os.path.join(path, "assets", serving.CONFIG_ASSET)) as f:
        return path, files["vocab"], json.load(f)


def test_server_counts_a_context_s_windows_before_the_model_runs(random_export):
    """--max_windows_per_request: a request whose contexts give more
    windows than the limit (as many as run_squad makes features of them)
    is a 400 naming the flag, before the model runs; one at the limit is
    answered."""
    path, vocab, settings = random_export
    questions = ["Where is the film?", "what"]
    contexts = ["The film went to Kingston! " * 12, "中文 cafe ends well."]
    examples = [run_squad.SquadExample(qas_id=str(i), question_text=q,
                                       doc_tokens=run_squad.split_paragraph(c)[0])
                for i, (q, c) in enumerate(zip(questions, contexts))]
    features = []
    run_squad.convert_examples_to_features(
        examples, tokenization.FullTokenizer(vocab, True), settings["max_seq_length"],
        settings["doc_stride"], settings["max_query_length"], False, features.append)
    windows = len(features)
    assert windows >= 10
    model = exported_model.Model(path)
    body = {"instances": [{"question": q, "context": c} for q, c in zip(questions, contexts)]}
    limits = rest_api.DEFAULT_LIMITS._replace(max_windows_per_request=windows)
    answer, _ = rest_api.predict_response(model, body, limits)
    assert [len(p["answers"]) for p in answer["predictions"]] == [4, 4]
    with mock.patch.object(exported_model.Signature, "run", side_effect=AssertionError):
        with pytest.raises(RequestError, match=r"^the request would have the model run %d "
                                               r"windows .*; this server runs at most %d per "
                                               r"request \(--max_windows_per_request\)$"
                                               % (windows, windows - 1)):
            rest_api.predict_response(model, body, limits._replace(
                max_windows_per_request=windows - 1))


def test_server_reads_the_whole_context_and_the_question_s_first_words():
    config = {"max_seq_length": 384, "doc_stride": 128, "max_query_length": 64,
              "n_best_size": 20}
    assert rest_api.words_read(config, "context") is None
    assert rest_api.words_read(config, "question") == 64


QUESTIONS = [("Who led the company?",
              "The company's leader, Steve Smith, sold it in 1943 to a large bank."),
             ("When was the wing added?", "A new wing for letters was added in 1977.")]


@pytest.mark.slow
def test_predict_answers_a_file(trained, tmp_path):
    _, _, export_dir = trained["v1"]
    # A two-piece context has three spans: fewer than n_best_size (5).
    questions = QUESTIONS + [("Who led the company?", "Steve.")]
    expected = test_serving._run_signature(export_dir, serving.TEXT_SIGNATURE, {
        "question": [q.encode() for q, _ in questions],
        "context": [c.encode() for _, c in questions]})
    (tmp_path / "in.jsonl").write_text("".join(
        json.dumps({"id": i, "question": q, "context": c}) + "\n"
        for i, (q, c) in enumerate(questions)), encoding="utf-8")
    (tmp_path / "in.tsv").write_text("question\tcontext\n" + "".join(
        "%s\t%s\n" % qc for qc in questions), encoding="utf-8")
    for name in ("in.jsonl", "in.tsv"):
        out = test_predict._predict(os.path.dirname(export_dir), input_file=str(tmp_path / name),
                                    output_file=str(tmp_path / (name + ".out")))
        assert [o["answer"] for o in out] == [a.decode() for a in expected["answer"]], name
        assert [o["answer_start"] for o in out] == expected["answer_start"].tolist()
        assert len(out) == len(questions)
        for i, (o, (_, context)) in enumerate(zip(out, questions)):
            assert o["answer"] == context[o["answer_start"]:o["answer_end"]]
            # The n-best is cut to its num_answers (the signature pads it).
            count = int(expected["num_answers"][i])
            assert 1 <= o["num_answers"] == count
            assert o["answers"] == [a.decode() for a in expected["answers"][i, :count]]
            np.testing.assert_allclose(o["answer_scores"], expected["answer_scores"][i, :count],
                                       atol=1e-6)
            assert o["answer_starts"] == expected["answer_starts"][i, :count].tolist()
            assert o["answer_ends"] == expected["answer_ends"][i, :count].tolist()
        # The signature padded the short one's, so there was a cut.
        assert expected["num_answers"][-1] < expected["answers"].shape[1]


def _documented_curl():
    """The request body of docs/serving.md's question answering curl
    example, and the answer shown under it (with its "..." lists made
    empty)."""
    with open(os.path.join(ROOT, "docs", "serving.md"), encoding="utf-8") as f:
        page = f.read()
    match = re.search(r"curl -d '(.*?)' \\\n  http://localhost:8501/v1/models/squad:predict"
                      r"\n# (.*)\n", page)
    return json.loads(match.group(1)), json.loads(match.group(2).replace("[...]", "[]"))


@pytest.mark.slow
def test_server_answers_rows_and_columns(trained):
    _, _, export_dir = trained["v2"]
    expected = test_serving._run_signature(export_dir, serving.TEXT_SIGNATURE, {
        "question": [q.encode() for q, _ in QUESTIONS],
        "context": [c.encode() for _, c in QUESTIONS]})
    http = rest_server.make_server(exported_model.Model(os.path.dirname(export_dir)),
                                   "127.0.0.1", 0, "squad")
    threading.Thread(target=http.serve_forever, daemon=True).start()
    try:
        url = "http://127.0.0.1:%d/v1/models/squad:predict" % http.server_address[1]
        status, answer = test_predict._call(url, {"instances": [
            {"question": q, "context": c} for q, c in QUESTIONS]})
        assert status == 200, answer
        assert [p["answer"] for p in answer["predictions"]] == [
            a.decode() for a in expected["answer"]]
        np.testing.assert_allclose([p["answer_scores"] for p in answer["predictions"]],
                                   expected["answer_scores"], atol=1e-6)
        status, answer = test_predict._call(url, {"inputs": {
            "question": [q for q, _ in QUESTIONS], "context": [c for _, c in QUESTIONS]}})
        assert status == 200, answer
        assert answer["outputs"]["answer_end"] == expected["answer_end"].tolist()
        # docs/serving.md's curl request, answered with the fields it shows.
        request, shown = _documented_curl()
        status, answer = test_predict._call(url, request)
        assert status == 200, answer
        (prediction,) = answer["predictions"]
        assert sorted(prediction) == sorted(shown["predictions"][0])
        context = request["instances"][0]["context"]
        assert prediction["answer"] == context[prediction["answer_start"]:
                                               prediction["answer_end"]]
        # n_best_size 5, and one more place for SQuAD 2.0's null answer.
        assert 1 <= prediction["num_answers"] <= len(prediction["answers"]) == 6
        # A long context is read whole (not cut to max_seq_length words).
        long_context = " ".join(["The river town is quiet and green."] * 40 + [QUESTIONS[1][1]])
        status, answer = test_predict._call(url, {"instances": [
            {"question": QUESTIONS[1][0], "context": long_context}]})
        assert status == 200, answer
        whole = test_serving._run_signature(export_dir, serving.TEXT_SIGNATURE, {
            "question": [QUESTIONS[1][0].encode()], "context": [long_context.encode()]})
        assert answer["predictions"][0]["answer_start"] == whole["answer_start"][0]
        assert answer["predictions"][0]["answers"] == [a.decode() for a in whole["answers"][0]]
    finally:
        http.shutdown()
        http.server_close()
