"""run_pretraining.py --export_dir: a fill-mask SavedModel (fill_mask_export.py).

References: Hugging Face's fill-mask pipeline on the same checkpoint
converted with `convert_checkpoint.py --to_hf`, stored in
tests/fixtures/fill_mask_pipeline.json by
tests/fixtures/make_fill_mask_fixture.py (the model: tests/fill_mask_model.py,
rebuilt from a NumPy seed); hand-worked texts for the padding, truncation
and filling rules; the export's own answers one text at a time, and on the
text cut by hand where the model stops reading.
"""

import json
import os
import re
import threading

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from scriptkit import exported_model
from scriptkit import fill_mask_export
import fill_mask_model
from scriptkit import rest_server
from scriptkit import serving
import test_predict
import test_serving
import tiny
from scriptkit.errors import InputError
from test_run_pretraining import base_flags, run_main, setup  # noqa: F401  (a fixture)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "fill_mask_pipeline.json")
REGENERATE = ("regenerate with: python tests/fixtures/make_fill_mask_fixture.py "
              "--hf_python=PYTHON_WITH_TORCH_AND_TRANSFORMERS")

# The texts of the Hugging Face reference (each within MAX_SEQ_LENGTH).
PIPELINE_TEXTS = [
    "The dog is [MASK].",
    "I went [MASK] the park!",
    "She was walk[MASK] home.",
    "[MASK] [MASK] is a big city?",
    "The quick brown fox [MASK] over the lazy [MASK].",
    "THE CAT Was [MASK], and HAPPY.",
    "Paris is the capital of [MASK].",
]
TOP_K = 5
MAX_SEQ_LENGTH = 16


_SESSIONS = {}


def _signature(export_dir, texts):
    """serving_default on `texts`, in a TF1 session as TF Serving runs it
    (one session per export, kept for the module's tests)."""
    if export_dir not in _SESSIONS:
        graph = tf.Graph()
        with graph.as_default():
            session = tf.Session(graph=graph)
            meta = tf.saved_model.loader.load(session, ["serve"], export_dir)
        signature = meta.signature_def[serving.TEXT_SIGNATURE]
        _SESSIONS[export_dir] = (session, signature.inputs["text"].name, {
            name: info.name for name, info in signature.outputs.items()})
    session, text, fetches = _SESSIONS[export_dir]
    return session.run(fetches, {text: texts})


def _export_flags(model, export_dir, **overrides):
    values = {"export_dir": export_dir, "vocab_file": model["vocab_file"],
              "bert_config_file": model["bert_config_file"],
              "init_checkpoint": model["init_checkpoint"], "max_seq_length": MAX_SEQ_LENGTH,
              "top_k": TOP_K}
    values.update(overrides)
    return values


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return fill_mask_model.write_model(str(tmp_path_factory.mktemp("fill_mask_model")))


@pytest.fixture(scope="module")
def exported(model, tmp_path_factory):
    """The tiny model exported from --init_checkpoint alone (no training, no
    --input_file): the SavedModel's folder."""
    base = str(tmp_path_factory.mktemp("fill_mask_export") / "export")
    run_main(**_export_flags(model, base))
    (version,) = os.listdir(base)
    return os.path.join(base, version)


@pytest.fixture(scope="module")
def vocab(model):
    with open(model["vocab_file"], encoding="utf-8") as f:
        return f.read().splitlines()


# ---------------------------------------------------------------------------
# Hugging Face's pipeline.

@pytest.mark.slow
def test_export_equals_the_hugging_face_pipeline(model, exported, vocab):
    with open(FIXTURE, encoding="utf-8") as f:
        stored = json.load(f)
    assert stored["digest"] == model["digest"], "the model changed: " + REGENERATE
    assert (stored["texts"], stored["top_k"]) == (PIPELINE_TEXTS, TOP_K), REGENERATE
    outputs = _signature(exported, PIPELINE_TEXTS)
    assert outputs["tokens"].shape[2] == TOP_K
    for i, (text, masks) in enumerate(zip(PIPELINE_TEXTS, stored["results"])):
        assert outputs["num_masks"][i] == len(masks) == text.count("[MASK]"), text
        for j, candidates in enumerate(masks):
            ids = [c["token"] for c in candidates]
            assert outputs["token_ids"][i, j].tolist() == ids, text
            # transformers' token_str is the piece as decoded; the export's
            # token is the vocabulary's entry.
            assert [t.decode() for t in outputs["tokens"][i, j]] == [vocab[t] for t in ids]
            np.testing.assert_allclose(outputs["scores"][i, j],
                                       [c["score"] for c in candidates], atol=1e-4,
                                       err_msg=text)
    # The probabilities are a softmax over the whole vocabulary.
    assert np.all(outputs["scores"][0, 0] <= 1) and outputs["scores"][0, 0].sum() < 1


# ---------------------------------------------------------------------------
# The rules: padding, texts without masks, filling, truncation.

@pytest.mark.slow
def test_masks_are_padded_and_a_text_without_one_is_returned_as_it_is(exported):
    texts = ["The dog is [MASK].", "[MASK] [MASK] is a big city?", "no mask here", ""]
    batch = _signature(exported, texts)
    assert batch["num_masks"].tolist() == [1, 2, 0, 0]
    assert batch["tokens"].shape == batch["token_ids"].shape == batch["scores"].shape == (
        4, 2, TOP_K)
    for i, count in enumerate(batch["num_masks"]):
        assert batch["tokens"][i, count:].tolist() == [[b""] * TOP_K] * (2 - count)
        assert (batch["token_ids"][i, count:] == -1).all()
        assert (batch["scores"][i, count:] == 0).all()
        alone = _signature(exported, [texts[i]])
        assert alone["tokens"].shape[1] == count
        np.testing.assert_array_equal(alone["token_ids"][0], batch["token_ids"][i, :count])
        np.testing.assert_allclose(alone["scores"][0], batch["scores"][i, :count], atol=1e-6)
        assert alone["filled"][0] == batch["filled"][i]
    assert batch["filled"][2:].tolist() == [b"no mask here", b""]
    # A batch without any mask: a masks axis of length 0.
    none = _signature(exported, ["no mask here", ""])
    assert none["tokens"].shape == (2, 0, TOP_K) and none["num_masks"].tolist() == [0, 0]
    assert none["filled"].tolist() == [b"no mask here", b""]


@pytest.mark.slow
def test_filled_puts_the_best_piece_in_place_of_each_mask(exported):
    texts = ["She was walk[MASK] home.", "[MASK] [MASK] is a big city?",
             "Crème [MASK] brûlée!"]
    outputs = _signature(exported, texts)
    for text, tokens, filled in zip(texts, outputs["tokens"], outputs["filled"]):
        parts = text.split("[MASK]")
        expected = parts[0]
        for part, best in zip(parts[1:], tokens[:, 0]):
            best = best.decode()
            expected += (best[2:] if best.startswith("##") else best) + part
        assert filled.decode() == expected


def test_fill_joins_a_continuation_piece_to_its_word():
    """Hand-built best pieces: "##ing" loses its "##", a whole word does not;
    a mask not predicted stays [MASK]."""
    with tf.Graph().as_default(), tf.Session() as session:
        parts = fill_mask_export.split_at_masks(
            tf.constant(["walk[MASK] to the [MASK]", "[MASK] x [MASK] y [MASK]", "none"]))
        tokens = tf.constant([[["##ing", "a"], ["park", "b"], ["", ""]],
                              [["a", "b"], ["", ""], ["", ""]],
                              [["", ""], ["", ""], ["", ""]]])
        filled = session.run(fill_mask_export.fill(parts, tokens, tf.constant([2, 1, 0])))
    assert filled.tolist() == [b"walking to the park", b"a x [MASK] y [MASK]", b"none"]


@pytest.mark.slow
def test_masks_beyond_max_seq_length_are_not_predicted(exported):
    """14 pieces fit (MAX_SEQ_LENGTH 16 less [CLS] and [SEP]): the first
    mask is the 12th piece, the second the 15th."""
    read = "the dog is happy and the cat is happy and the dog [MASK] in the"
    text = read + " [MASK] ."
    outputs = _signature(exported, [text, read])
    assert outputs["num_masks"].tolist() == [1, 1]
    np.testing.assert_array_equal(outputs["token_ids"][0], outputs["token_ids"][1])
    np.testing.assert_allclose(outputs["scores"][0], outputs["scores"][1], atol=1e-6)
    best = outputs["tokens"][0, 0, 0].decode()
    best = best[2:] if best.startswith("##") else best
    assert outputs["filled"][0].decode() == text.replace("[MASK]", best, 1)
    assert outputs["filled"][0].decode().endswith(" [MASK] .")


@pytest.mark.slow
def test_ids_signature_finds_the_masks_in_the_ids(exported, vocab):
    text = "the dog is [MASK] ."
    ids = [vocab.index(t) for t in ["[CLS]", "the", "dog", "is", "[MASK]", ".", "[SEP]"]]
    by_ids = test_serving._run_signature(exported, serving.IDS_SIGNATURE, {
        "input_ids": np.array([ids], np.int32), "input_mask": np.ones([1, 7], np.int32),
        "segment_ids": np.zeros([1, 7], np.int32)})
    by_text = _signature(exported, [text])
    assert sorted(by_ids) == ["num_masks", "scores", "token_ids", "tokens"]
    np.testing.assert_array_equal(by_ids["tokens"], by_text["tokens"])
    for name in ("num_masks", "scores", "token_ids"):
        np.testing.assert_allclose(by_ids[name], by_text[name], atol=1e-6, err_msg=name)
    with open(os.path.join(exported, "assets", serving.CONFIG_ASSET)) as f:
        assert json.load(f) == {"do_lower_case": True, "mask_id": vocab.index("[MASK]"),
                                "mask_token": "[MASK]", "max_seq_length": MAX_SEQ_LENGTH,
                                "top_k": TOP_K}


@pytest.mark.slow
def test_export_loads_without_this_repository(exported, tmp_path):
    """Moved to another folder, the export loads with `python -I` (TensorFlow
    and TensorFlow Text only) and answers as in this process."""
    texts = ["The dog is [MASK].", "[MASK] [MASK] is a big city?"]
    loaded = tiny.serve_text_elsewhere(exported, texts, tmp_path, "fill_mask_export")
    here = _signature(exported, texts)
    assert sorted(loaded) == sorted(here)
    assert loaded["filled"] == here["filled"].astype(str).tolist()
    assert loaded["tokens"] == here["tokens"].astype(str).tolist()
    np.testing.assert_array_equal(loaded["token_ids"], here["token_ids"])
    np.testing.assert_allclose(loaded["scores"], here["scores"], atol=1e-6)


# ---------------------------------------------------------------------------
# predict.py: a file, and the server with the documented request.

@pytest.mark.slow
def test_predict_fills_masks_of_a_file(exported, tmp_path):
    texts = ["The dog is [MASK].", "[MASK] [MASK] is a big city?", "no mask here"]
    expected = _signature(exported, texts)
    (tmp_path / "in.txt").write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    out = test_predict._predict(os.path.dirname(exported), input_file=str(tmp_path / "in.txt"),
                                output_file=str(tmp_path / "out.jsonl"), batch_size=3)
    assert [sorted(o) for o in out] == [
        ["filled", "num_masks", "scores", "token_ids", "tokens"]] * 3
    for i, o in enumerate(out):
        count = expected["num_masks"][i]
        # Each text's own masks only, whatever its batch held.
        assert o["num_masks"] == count and len(o["tokens"]) == count
        assert o["token_ids"] == expected["token_ids"][i, :count].tolist()
        assert o["tokens"] == expected["tokens"][i, :count].astype(str).tolist()
        np.testing.assert_allclose(np.reshape(o["scores"], [count, TOP_K]),
                                   expected["scores"][i, :count], atol=1e-6)
        assert o["filled"] == expected["filled"][i].decode()


def _documented_request():
    """The curl request and the answer's comment of docs/serving.md's
    fill-mask section."""
    with open(os.path.join(ROOT, "docs", "serving.md"), encoding="utf-8") as f:
        page = f.read()
    section = page[page.index("A fill-mask export"):]
    match = re.search(r"curl -d '(.*?)' \\\n.*?\n# (.*?)\n", section, flags=re.S)
    return json.loads(match.group(1)), match.group(2)


@pytest.mark.slow
def test_server_answers_the_documented_request(exported):
    served = exported_model.Model(os.path.dirname(exported))
    http = rest_server.make_server(served, "127.0.0.1", 0, "fillmask")
    thread = threading.Thread(target=http.serve_forever, daemon=True)
    thread.start()
    try:
        url = "http://127.0.0.1:%d/v1/models/fillmask:predict" % http.server_address[1]
        request, comment = _documented_request()
        status, answer = test_predict._call(url, request)
        assert status == 200, answer
        texts = request["instances"]
        expected = _signature(exported, texts)
        assert len(answer["predictions"]) == len(texts)
        for i, prediction in enumerate(answer["predictions"]):
            assert sorted(prediction) == sorted(re.findall(r'"(\w+)":', comment)[1:])
            # As TensorFlow Serving answers: padded to the request's most masks.
            assert prediction["num_masks"] == expected["num_masks"][i]
            assert prediction["tokens"] == expected["tokens"][i].astype(str).tolist()
            assert prediction["token_ids"] == expected["token_ids"][i].tolist()
            assert prediction["filled"] == expected["filled"][i].decode()
        # The columnar format: the batch's arrays, padded.
        status, answer = test_predict._call(url, {"inputs": {"text": texts}})
        assert status == 200, answer
        assert answer["outputs"]["token_ids"] == expected["token_ids"].tolist()
        status, answer = test_predict._call(url, {"instances": [{"question": "x"}]})
        assert status == 400 and "takes text" in answer["error"], answer
    finally:
        http.shutdown()
        http.server_close()


# ---------------------------------------------------------------------------
# After training; bad flags.

@pytest.mark.slow
def test_export_after_training_holds_the_trained_weights(setup, tmp_path):  # noqa: F811
    output_dir = str(tmp_path / "trained")
    vocab_file = str(setup["dir"] / "vocab.txt")
    run_main(**base_flags(setup, output_dir, do_train=True, num_train_steps=3,
                          num_warmup_steps=1, vocab_file=vocab_file,
                          export_dir=str(tmp_path / "after"), top_k=3))
    # The same checkpoint exported alone, from the run's folder.
    run_main(export_dir=str(tmp_path / "alone"), vocab_file=vocab_file,
             bert_config_file=setup["config"], init_checkpoint=output_dir,
             max_seq_length=32, top_k=3)
    (after,), (alone,) = os.listdir(tmp_path / "after"), os.listdir(tmp_path / "alone")
    texts = ["w1 w2 [MASK] w4", "[MASK] w3"]
    trained = _signature(str(tmp_path / "after" / after), texts)
    again = _signature(str(tmp_path / "alone" / alone), texts)
    np.testing.assert_array_equal(trained["token_ids"], again["token_ids"])
    np.testing.assert_allclose(trained["scores"], again["scores"], atol=1e-6)
    assert trained["tokens"].shape == (2, 1, 3)


def _write_checkpoint_without_head(model, path):
    with tf.Graph().as_default():
        variables = [tf.Variable(tf.train.load_variable(model["init_checkpoint"], name),
                                 name=name)
                     for name, _ in tf.train.list_variables(model["init_checkpoint"])
                     if not name.startswith("cls/predictions")]
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            tf.train.Saver(variables).save(session, path, write_meta_graph=False)
    return path


def test_export_reads_this_scripts_max_seq_length_default(model, tmp_path):
    """A process that defined --max_seq_length for another script first
    (run_squad.py: 384) exports with this script's own default, 128, which
    the tiny model's 64 positions refuse by that number."""
    from absl import flags
    from absl.testing import flagsaver
    values = _export_flags(model, str(tmp_path / "export"))
    del values["max_seq_length"]
    with flagsaver.flagsaver():
        flags.FLAGS.set_default("max_seq_length", 384)
        with pytest.raises(InputError, match=r"\b128\b"):
            run_main(**values)
    assert not os.path.exists(tmp_path / "export")


@pytest.mark.parametrize("overrides, message", [
    (dict(vocab_file=""), "--vocab_file"),
    (dict(init_checkpoint=""), "--init_checkpoint"),
    (dict(top_k=0), "--top_k=0"),
    (dict(vocab_file="NO_MASK"), "has no \\[MASK\\]"),
    (dict(init_checkpoint="NO_HEAD"), "--init_checkpoint .* has no masked-LM head"),
    (dict(export_dir="FILE"), "--export_dir"),
    (dict(do_eval=True), "--input_file"),
    # Export, then evaluate: the evaluation's own checks come first too.
    (dict(do_eval=True, input_file="IN", output_dir="OUT", max_predictions_per_seq=0),
     "--max_predictions_per_seq=0"),
])
def test_bad_flags_are_refused_before_anything_is_written(model, tmp_path, overrides,
                                                          message):
    (tmp_path / "FILE").write_text("a file")
    if overrides.get("vocab_file") == "NO_MASK":
        overrides["vocab_file"] = tiny.write_vocab(str(tmp_path), [], name="no_mask.txt")
        with open(overrides["vocab_file"], encoding="utf-8") as f:
            kept = [t for t in f.read().splitlines() if t != "[MASK]"]
        with open(overrides["vocab_file"], "w", encoding="utf-8") as f:
            f.write("".join(t + "\n" for t in kept))
    if overrides.get("init_checkpoint") == "NO_HEAD":
        overrides["init_checkpoint"] = _write_checkpoint_without_head(
            model, str(tmp_path / "no_head" / "model.ckpt"))
    if overrides.get("export_dir") == "FILE":
        overrides["export_dir"] = str(tmp_path / "FILE")
    if overrides.get("input_file") == "IN":
        overrides["input_file"] = str(tmp_path / "FILE")
        overrides["output_dir"] = str(tmp_path / "out")
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(InputError, match=message):
        run_main(**dict(_export_flags(model, str(tmp_path / "export")), **overrides))
    assert sorted(os.listdir(tmp_path)) == before
