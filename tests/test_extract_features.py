"""extract_features.py on a tiny random BERT: the original's JSON Lines schema
and order, sentence pairs, layer selection, the npz and TFRecord formats read
back, pooling, and bad input.

The reference values come from running `modeling.BertModel` directly on
hand-built token ids (not through the script's tokenization, input pipeline,
estimator or writers); pooled vectors are checked against a NumPy mean of
the JSON Lines token vectors.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
from absl import flags
from absl.testing import flagsaver

import extract_features
import modeling
import reference
import tiny
from scriptkit import settings as settings_lib
from scriptkit.errors import InputError

FLAGS = flags.FLAGS

VOCAB = ["the", "dog", "is", "hairy", ".", "this", "jack", "##son", "##ville", "?",
         "no", "it", "not", "hello", "world", "b"]
MAX_SEQ_LENGTH = 16

# Input lines and the word pieces (with [CLS]/[SEP]) and type ids expected for
# them, written out by hand.
LINES = [
    "The dog is hairy.",
    "is this jacksonville ? ||| no it is not .",
    "",
    "Hello, world",
    "hello xyzzy world",
]
EXPECTED_TOKENS = [
    ["[CLS]", "the", "dog", "is", "hairy", ".", "[SEP]"],
    ["[CLS]", "is", "this", "jack", "##son", "##ville", "?", "[SEP]",
     "no", "it", "is", "not", ".", "[SEP]"],
    ["[CLS]", "[SEP]"],
    # "," is not in the vocabulary: [UNK].
    ["[CLS]", "hello", "[UNK]", "world", "[SEP]"],
    ["[CLS]", "hello", "[UNK]", "world", "[SEP]"],
]
EXPECTED_TYPE_IDS = [
    [0] * 7,
    [0] * 8 + [1] * 6,
    [0] * 2,
    [0] * 5,
    [0] * 5,
]


def _flags_parsed():
    if not FLAGS.is_parsed():
        FLAGS.mark_as_parsed()


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A tiny random checkpoint, its files, and reference encoder outputs of
    every layer for EXPECTED_TOKENS: list (per line) of [layers, tokens, hidden]."""
    directory = tmp_path_factory.mktemp("tiny_bert")
    vocab_file = tiny.write_vocab(str(directory), VOCAB)
    config_file = tiny.write_config(str(directory), vocab_size=len(VOCAB) + 5,
                                    max_position_embeddings=64)
    checkpoint = str(directory / "bert_model.ckpt")
    vocab = {t: i for i, t in enumerate(tiny.SPECIAL_TOKENS + VOCAB)}

    ids = np.zeros([len(LINES), MAX_SEQ_LENGTH], np.int32)
    mask = np.zeros_like(ids)
    types = np.zeros_like(ids)
    for i, (tokens, type_ids) in enumerate(zip(EXPECTED_TOKENS, EXPECTED_TYPE_IDS)):
        ids[i, :len(tokens)] = [vocab[t] for t in tokens]
        mask[i, :len(tokens)] = 1
        types[i, :len(tokens)] = type_ids

    with tf.Graph().as_default():
        tf.set_random_seed(1)
        config = modeling.BertConfig.from_json_file(config_file)
        bert = modeling.BertModel(config, is_training=False, input_ids=tf.constant(ids),
                                  input_mask=tf.constant(mask),
                                  token_type_ids=tf.constant(types))
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            layers = sess.run(bert.get_all_encoder_layers())
            tf.train.Saver().save(sess, checkpoint, write_meta_graph=False)
    layers = np.stack(layers, axis=1)  # [lines, layers, seq, hidden]
    reference = [layers[i, :, :len(t)] for i, t in enumerate(EXPECTED_TOKENS)]

    input_file = directory / "input.txt"
    input_file.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return {"dir": directory, "vocab_file": vocab_file, "bert_config_file": config_file,
            "init_checkpoint": checkpoint, "input_file": str(input_file),
            "reference": reference}


def run_extract(model, output_file, **overrides):
    """Runs extract_features.main in this process with every flag set."""
    _flags_parsed()
    values = dict(input_file=model["input_file"], output_file=str(output_file),
                  vocab_file=model["vocab_file"], bert_config_file=model["bert_config_file"],
                  init_checkpoint=model["init_checkpoint"], do_lower_case=True,
                  max_seq_length=MAX_SEQ_LENGTH, layers="-1,-2", batch_size=2,
                  use_tpu=False, output_format="jsonl", pooling="none",
                  npz_dtype="float32", trim_padding=False, use_one_hot_embeddings=False,
                  precision="fp32", use_xla=False)
    values.update(overrides)
    with flagsaver.flagsaver(**values):
        extract_features.main([])
    return output_file


def test_max_seq_length_default_is_this_scripts(model, tmp_path):
    """A process that defined --max_seq_length for another script first
    (run_squad.py: 384) still runs this one with its own default, 128."""
    _flags_parsed()
    values = dict(input_file=model["input_file"], output_file=str(tmp_path / "out.jsonl"),
                  vocab_file=model["vocab_file"], bert_config_file=model["bert_config_file"],
                  init_checkpoint=model["init_checkpoint"], layers="-1,-2")
    with flagsaver.flagsaver():
        FLAGS.set_default("max_seq_length", 384)
        # The tiny model has 64 positions: the error names the length used.
        with flagsaver.flagsaver(**values), pytest.raises(
                InputError, match="Cannot use sequence length 128 because"):
            extract_features.prepare_run(settings_lib.from_flags(extract_features.Settings))
        with flagsaver.flagsaver(max_seq_length=MAX_SEQ_LENGTH, **values):
            run = extract_features.prepare_run(settings_lib.from_flags(extract_features.Settings))
            assert run.settings.max_seq_length == MAX_SEQ_LENGTH


def layer_position(index):
    """A --layers index -> position in the reference's layer axis (2 layers)."""
    return index % 2


@pytest.fixture(scope="module")
def jsonl_output(model):
    path = run_extract(model, model["dir"] / "features.jsonl", layers="-1,0")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return text


@pytest.mark.slow
def test_jsonl_schema_order_and_values(model, jsonl_output):
    lines = jsonl_output.splitlines()
    assert len(lines) == len(LINES)
    # Key order and formatting are the original's (json.dumps of OrderedDicts).
    assert lines[0].startswith(
        '{"linex_index": 0, "features": [{"token": "[CLS]", "layers": '
        '[{"index": -1, "values": [')
    for i, line in enumerate(lines):
        record = json.loads(line)
        assert list(record) == ["linex_index", "features"]
        assert record["linex_index"] == i
        assert [f["token"] for f in record["features"]] == EXPECTED_TOKENS[i]
        for t, feature in enumerate(record["features"]):
            assert list(feature) == ["token", "layers"]
            assert [layer["index"] for layer in feature["layers"]] == [-1, 0]
            for layer in feature["layers"]:
                values = layer["values"]
                assert len(values) == 32
                # Rounded to 6 decimals, as the original.
                assert values == [round(v, 6) for v in values]
                expected = model["reference"][i][layer_position(layer["index"]), t]
                np.testing.assert_allclose(values, expected, atol=6e-7, rtol=0)
    # Only the output file is left behind (no temporary files).
    assert not [n for n in os.listdir(model["dir"]) if ".tmp" in n]


@pytest.mark.slow
def test_pair_input_uses_second_segment(model, jsonl_output):
    # The pair line's second segment (type id 1) gives other vectors than the
    # same tokens as type 0: compare with the reference built with type ids.
    record = json.loads(jsonl_output.splitlines()[1])
    tokens = [f["token"] for f in record["features"]]
    assert tokens == EXPECTED_TOKENS[1]
    last = np.array([f["layers"][0]["values"] for f in record["features"]])
    np.testing.assert_allclose(last, model["reference"][1][1], atol=6e-7, rtol=0)


def read_npz(path):
    with np.load(path) as data:
        return {name: data[name] for name in data.files}


@pytest.mark.slow
def test_npz_round_trip(model, jsonl_output):
    path = run_extract(model, model["dir"] / "features.npz", layers="-1,0",
                       output_format="npz")
    data = read_npz(path)
    assert sorted(data) == ["layer_-1", "layer_0", "linex_index", "num_tokens", "tokens"]
    np.testing.assert_array_equal(data["linex_index"], np.arange(len(LINES)))
    np.testing.assert_array_equal(data["num_tokens"], [len(t) for t in EXPECTED_TOKENS])
    assert data["tokens"].tolist() == sum(EXPECTED_TOKENS, [])
    assert data["layer_-1"].dtype == np.float32
    offsets = np.concatenate([[0], np.cumsum(data["num_tokens"])])
    records = [json.loads(line) for line in jsonl_output.splitlines()]
    for i, record in enumerate(records):
        for j, index in enumerate([-1, 0]):
            from_json = np.array([f["layers"][j]["values"] for f in record["features"]])
            from_npz = data["layer_%d" % index][offsets[i]:offsets[i + 1]]
            np.testing.assert_allclose(from_npz, from_json, atol=6e-7, rtol=0)


@pytest.mark.slow
def test_tfrecord_round_trip(model):
    # With --trim_padding: batches of 2 run at their longest example's length.
    path = run_extract(model, model["dir"] / "features.tfrecord", layers="-2",
                       output_format="tfrecord", trim_padding=True)
    records = []
    for raw in tf.compat.v1.io.tf_record_iterator(str(path)):
        records.append(tf.train.Example.FromString(raw).features.feature)
    assert len(records) == len(LINES)
    for i, feature in enumerate(records):
        assert feature["linex_index"].int64_list.value == [i]
        tokens = [t.decode("utf-8") for t in feature["tokens"].bytes_list.value]
        assert tokens == EXPECTED_TOKENS[i]
        assert feature["num_tokens"].int64_list.value == [len(tokens)]
        values = np.array(feature["layer_-2"].float_list.value, np.float32).reshape(
            len(tokens), -1)
        # Float32 end to end, but shorter matmuls than the reference's: equal
        # up to float32 rounding.
        np.testing.assert_allclose(values, model["reference"][i][0], atol=1e-5, rtol=0)


@pytest.mark.slow
def test_mean_pooling_matches_numpy_mean_of_token_vectors(model, jsonl_output):
    path = run_extract(model, model["dir"] / "mean.jsonl", layers="-1,0", pooling="mean")
    with open(path, encoding="utf-8") as f:
        pooled = [json.loads(line) for line in f]
    records = [json.loads(line) for line in jsonl_output.splitlines()]
    assert [p["linex_index"] for p in pooled] == list(range(len(LINES)))
    for p, record in zip(pooled, records):
        assert list(p) == ["linex_index", "layers"]
        assert [layer["index"] for layer in p["layers"]] == [-1, 0]
        for j, layer in enumerate(p["layers"]):
            tokens = np.array([f["layers"][j]["values"] for f in record["features"]])
            # Mean over every real token, [CLS] and [SEP] included.
            np.testing.assert_allclose(layer["values"], tokens.mean(axis=0), atol=2e-6,
                                       rtol=0)


@pytest.mark.slow
def test_cls_pooling_npz_float16(model):
    path = run_extract(model, model["dir"] / "cls.npz", layers="-1", pooling="cls",
                       output_format="npz", npz_dtype="float16")
    data = read_npz(path)
    assert sorted(data) == ["layer_-1", "linex_index", "num_tokens"]
    assert data["layer_-1"].dtype == np.float16
    assert data["layer_-1"].shape == (len(LINES), 32)
    expected = np.stack([ref[1, 0] for ref in model["reference"]])
    np.testing.assert_allclose(data["layer_-1"].astype(np.float32), expected,
                               atol=2e-3, rtol=1e-3)


# ---------------------------------------------------------------------------
# As a library, with the flags never parsed.

_LIBRARY_SCRIPT = r"""
import json, sys
import tensorflow.compat.v1 as tf
from absl import flags
import extract_features, modeling, tokenization
from scriptkit import runtime

vocab_file, config_file, checkpoint, input_file, seq = sys.argv[1:5] + [int(sys.argv[5])]
assert not flags.FLAGS.is_parsed()
tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
examples = extract_features.read_examples(input_file)
features = extract_features.convert_examples_to_features(examples, seq, tokenizer)
config = modeling.BertConfig.from_json_file(config_file)
layer_indexes = extract_features.parse_layers("-1,0", config.num_hidden_layers)
model_fn = extract_features.model_fn_builder(config, checkpoint, layer_indexes, False, False)
out = {"tokens": [f.tokens for f in features], "layers": []}
with tf.Graph().as_default():
    input_fn = extract_features.input_fn_builder(features, seq)
    batch = tf.data.make_one_shot_iterator(input_fn({"batch_size": 8})).get_next()
    spec = model_fn(batch, None, runtime.ModeKeys.PREDICT, {"batch_size": 8})
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        predictions = sess.run(spec.predictions)
for i, tokens in enumerate(out["tokens"]):
    out["layers"].append([predictions["layer_output_%d" % j][i, :len(tokens)].tolist()
                          for j in range(len(layer_indexes))])
out["unique_ids"] = predictions["unique_id"].tolist()
out["parsed"] = flags.FLAGS.is_parsed()
print("JSON" + json.dumps(out))
"""


def test_building_blocks_work_as_a_library_with_flags_unparsed(model):
    """In a fresh process that never parses flags: read_examples,
    convert_examples_to_features, input_fn_builder and model_fn_builder give
    the reference vectors of every line."""
    out = tiny.run_library_script(_LIBRARY_SCRIPT, model["vocab_file"],
                                  model["bert_config_file"], model["init_checkpoint"],
                                  model["input_file"], MAX_SEQ_LENGTH)
    assert not out["parsed"]
    assert out["tokens"] == EXPECTED_TOKENS
    assert out["unique_ids"] == list(range(len(LINES)))
    for i, layers in enumerate(out["layers"]):
        for j, index in enumerate([-1, 0]):
            np.testing.assert_allclose(layers[j], model["reference"][i][layer_position(index)],
                                       atol=1e-5, rtol=0)


# ---------------------------------------------------------------------------
# Bad input: a clear InputError, and no output file.

def assert_input_error(model, tmp_path, match, **overrides):
    output = tmp_path / "out.jsonl"
    with pytest.raises(InputError, match=match):
        run_extract(model, output, **overrides)
    assert not output.exists()
    assert not [n for n in os.listdir(tmp_path) if ".tmp" in n]


def test_missing_input_file(model, tmp_path):
    assert_input_error(model, tmp_path, "--input_file: file not found",
                       input_file=str(tmp_path / "nope.txt"))


def test_missing_vocab_and_config(model, tmp_path):
    assert_input_error(model, tmp_path, "--vocab_file: file not found",
                       vocab_file=str(tmp_path / "vocab.txt"))
    assert_input_error(model, tmp_path, "--bert_config_file: file not found",
                       bert_config_file=str(tmp_path / "c.json"))


def test_missing_checkpoint(model, tmp_path):
    assert_input_error(model, tmp_path, "--init_checkpoint: no checkpoint at .*model.ckpt",
                       init_checkpoint=str(tmp_path / "model.ckpt"))


def test_empty_input_file(model, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert_input_error(model, tmp_path, "is empty", input_file=str(empty))
    empty.unlink()


def test_invalid_utf8_names_the_line(model, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine\nnot \xff utf-8\n")
    assert_input_error(model, tmp_path, "line 2 is not valid UTF-8", input_file=str(bad))
    bad.unlink()


@pytest.mark.parametrize("layers,match", [
    ("-1,x", "'x' is not an integer"),
    ("-1,,-2", "'' is not an integer"),
    ("2", "layer 2 does not exist; the model has 2 layers"),
    ("-3", "layer -3 does not exist"),
])
def test_malformed_layers(model, tmp_path, layers, match):
    assert_input_error(model, tmp_path, match, layers=layers)


def test_trim_padding_refused_on_tpu(model, tmp_path):
    assert_input_error(model, tmp_path, "--trim_padding needs dynamic shapes",
                       trim_padding=True, use_tpu=True)


def test_checkpoint_directory_without_state_file(tmp_path):
    # Google's zips and converted models have no "checkpoint" state file.
    (tmp_path / "bert_model.ckpt.index").write_bytes(b"")
    prefix = str(tmp_path / "bert_model.ckpt")
    assert extract_features.resolve_checkpoint(str(tmp_path)) == prefix
    assert extract_features.resolve_checkpoint(prefix) == prefix
    (tmp_path / "other.ckpt.index").write_bytes(b"")
    # Two checkpoints, neither named by a state file nor by a step number.
    with pytest.raises(InputError, match=r"holds several checkpoints \(bert_model.ckpt, "
                                         r"other.ckpt\) and no \"checkpoint\" file"):
        extract_features.resolve_checkpoint(str(tmp_path))
    (tmp_path / "bert_model.ckpt.index").unlink()
    (tmp_path / "other.ckpt.index").unlink()
    with pytest.raises(InputError, match="no checkpoint at"):
        extract_features.resolve_checkpoint(str(tmp_path))


def test_max_seq_length_beyond_position_embeddings(model, tmp_path):
    assert_input_error(model, tmp_path, "max_position_embeddings", max_seq_length=128)


@pytest.mark.slow
def test_checkpoint_of_another_model(model, tmp_path):
    # A checkpoint whose variables are not BERT's would give random features.
    other = str(tmp_path / "other.ckpt")
    with tf.Graph().as_default():
        var = tf.Variable(tf.zeros([3]), name="something/else")
        with tf.Session() as sess:
            sess.run(var.initializer)
            tf.train.Saver([var]).save(sess, other, write_meta_graph=False)
    output = tmp_path / "out.jsonl"
    with pytest.raises(InputError, match="holds no bert/embeddings/word_embeddings: not a "
                                         "BERT checkpoint"):
        run_extract(model, output, init_checkpoint=other)
    assert not output.exists()
    assert not [n for n in os.listdir(tmp_path) if ".tmp" in n]


# Runs Google's original extract_features.py (bert-tensorflow 1.0.4) with this
# codebase's modeling.py standing in for the original's, which needs tf.contrib.
# Its models compile GELU and LayerNorm (fused_ops="all"), as the run it is
# compared with does: a model that only infers otherwise leaves them to
# oneDNN, which fuses GELU into the matmul in grappler's second round of
# rewrites, and the original's Estimator runs one round, so the two would
# compute GELU differently (values equal to float rounding).
_RUN_ORIGINAL = """
import functools, sys
sys.path[:0] = [{root!r}, {tests!r}]
import bert, modeling
modeling.BertModel.__init__ = functools.partialmethod(modeling.BertModel.__init__,
                                                      fused_ops="all")
sys.modules["bert.modeling"] = bert.modeling = modeling
import reference
reference.run_original_script("extract_features", sys.argv[1:])
"""


@pytest.mark.slow
@pytest.mark.skipif(not reference.estimator_available(), reason="the original script runs on "
                    "the Estimator (TensorFlow <= 2.15); the TF 2.15 leg checks it")
def test_jsonl_is_byte_identical_to_the_original_script(model, tmp_path):
    ours = run_extract(model, tmp_path / "ours.jsonl", layers="-1,0", fused_ops="all")
    tests = os.path.dirname(os.path.abspath(__file__))
    code = _RUN_ORIGINAL.format(root=os.path.dirname(tests), tests=tests)
    output = tmp_path / "original.jsonl"
    subprocess.run(
        [sys.executable, "-c", code, "--input_file=" + model["input_file"],
         "--output_file=%s" % output, "--vocab_file=" + model["vocab_file"],
         "--bert_config_file=" + model["bert_config_file"],
         "--init_checkpoint=" + model["init_checkpoint"], "--layers=-1,0",
         "--max_seq_length=%d" % MAX_SEQ_LENGTH, "--batch_size=2"],
        check=True, capture_output=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
        timeout=300)
    assert output.read_text(encoding="utf-8") == ours.read_text(encoding="utf-8")
