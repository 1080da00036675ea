"""convert_checkpoint.py on tiny Hugging Face models: every tensor
round-trips to Google's variable names (transposed where due), the converted
model computes what the Hugging Face model computes, old/other file layouts,
and bad input.

The Hugging Face side is stored in tests/fixtures/convert_checkpoint/, written
once by `transformers` (test-only reference) with
`python tests/fixtures/make_hf_fixtures.py`: each model directory holds the
config.json and model.safetensors of `save_pretrained`, and reference.npz
holds the models' state dicts (taken from PyTorch, not from the files) and
their outputs. So these tests need neither torch nor transformers, except the
one that writes a pytorch_model.bin (torch only).

The expected Google names below are written out from Google's released
checkpoints' layout, independently of the converter's mapping tables.
"""

import json
import os
import re
import shutil
import sys

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import convert_checkpoint
import modeling
from scriptkit import hf_weights
from scriptkit.errors import InputError

safetensors_numpy = pytest.importorskip("safetensors.numpy")

HIDDEN, LAYERS, INTERMEDIATE, VOCAB_SIZE, POSITIONS = 16, 2, 24, 40, 32
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures",
                        "convert_checkpoint")
REGENERATE = "regenerate with: python tests/fixtures/make_hf_fixtures.py"

# Inputs of the parity test (also fed to the Hugging Face models by the
# fixture generator): one padded example, one two-segment example.
PARITY_IDS = np.array([[2, 7, 9, 11, 3, 0], [2, 5, 3, 12, 13, 3]], dtype=np.int64)
PARITY_MASK = np.array([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]], dtype=np.int64)
PARITY_TYPES = np.array([[0, 0, 0, 0, 0, 0], [0, 0, 0, 1, 1, 1]], dtype=np.int64)


def hf_config_values(**overrides):
    """The tiny models' Hugging Face BertConfig arguments (a dict), for the
    fixture generator; `overrides` replace entries."""
    values = dict(vocab_size=VOCAB_SIZE, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                  num_attention_heads=2, intermediate_size=INTERMEDIATE,
                  max_position_embeddings=POSITIONS, type_vocab_size=2, hidden_act="gelu")
    values.update(overrides)
    return values


def write_vocab(directory, size=VOCAB_SIZE):
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokens += ["tok%d" % i for i in range(size - len(tokens))]
    with open(os.path.join(directory, "vocab.txt"), "w") as f:
        f.write("\n".join(tokens) + "\n")


def hf_model_dir(name, destination):
    """Copies fixture model `name` (config.json and model.safetensors as
    transformers' save_pretrained wrote them) to the new directory
    `destination`, adds a vocab.txt, and returns `destination` (a str)."""
    destination = str(destination)
    shutil.copytree(os.path.join(FIXTURES, name), destination)
    write_vocab(destination)
    return destination


@pytest.fixture(scope="module")
def reference():
    """reference.npz as a dict: "state:<model>:<name>" (the PyTorch state
    dicts), "out:<model>:hidden_states" / "out:<model>:pooler_output" and
    "bf16:<name>" (see make_hf_fixtures.py)."""
    with np.load(os.path.join(FIXTURES, "reference.npz")) as data:
        return {key: data[key] for key in data.files}


def state_dict(reference, model):
    """The stored PyTorch state dict (name -> np.ndarray) of fixture `model`."""
    prefix = "state:%s:" % model
    state = {k[len(prefix):]: v for k, v in reference.items() if k.startswith(prefix)}
    assert state, "no state dict for %s in reference.npz; %s" % (model, REGENERATE)
    return state


@pytest.fixture(scope="module")
def hf_pretraining(tmp_path_factory, reference):
    """A random BertForPreTraining saved as safetensors (a directory), and
    its state dict."""
    directory = hf_model_dir("pretraining", tmp_path_factory.mktemp("hf") / "pretraining")
    return directory, state_dict(reference, "pretraining")


# The parts of a Transformer layer: Hugging Face's name -> Google's.
LAYER_DENSES = [("attention.self.query", "attention/self/query"),
                ("attention.self.key", "attention/self/key"),
                ("attention.self.value", "attention/self/value"),
                ("attention.output.dense", "attention/output/dense"),
                ("intermediate.dense", "intermediate/dense"),
                ("output.dense", "output/dense")]
LAYER_NORMS = [("attention.output.LayerNorm", "attention/output/LayerNorm"),
               ("output.LayerNorm", "output/LayerNorm")]


def expected_google_tensors(state):
    """Google name -> expected value, from a Hugging Face state dict
    (BertForPreTraining names), written out by hand."""
    def t(name):
        return np.asarray(state[name])

    out = {
        "bert/embeddings/word_embeddings": t("bert.embeddings.word_embeddings.weight"),
        "bert/embeddings/position_embeddings": t("bert.embeddings.position_embeddings.weight"),
        "bert/embeddings/token_type_embeddings":
            t("bert.embeddings.token_type_embeddings.weight"),
        "bert/embeddings/LayerNorm/gamma": t("bert.embeddings.LayerNorm.weight"),
        "bert/embeddings/LayerNorm/beta": t("bert.embeddings.LayerNorm.bias"),
        "bert/pooler/dense/kernel": t("bert.pooler.dense.weight").T,
        "bert/pooler/dense/bias": t("bert.pooler.dense.bias"),
        "cls/predictions/transform/dense/kernel":
            t("cls.predictions.transform.dense.weight").T,
        "cls/predictions/transform/dense/bias": t("cls.predictions.transform.dense.bias"),
        "cls/predictions/transform/LayerNorm/gamma":
            t("cls.predictions.transform.LayerNorm.weight"),
        "cls/predictions/transform/LayerNorm/beta":
            t("cls.predictions.transform.LayerNorm.bias"),
        "cls/predictions/output_bias": t("cls.predictions.bias"),
        # [2, hidden] in both layouts: not transposed.
        "cls/seq_relationship/output_weights": t("cls.seq_relationship.weight"),
        "cls/seq_relationship/output_bias": t("cls.seq_relationship.bias"),
    }
    for n in range(LAYERS):
        hf = "bert.encoder.layer.%d." % n
        g = "bert/encoder/layer_%d/" % n
        for hf_part, g_part in LAYER_DENSES:
            out[g + g_part + "/kernel"] = t(hf + hf_part + ".weight").T
            out[g + g_part + "/bias"] = t(hf + hf_part + ".bias")
        for hf_part, g_part in LAYER_NORMS:
            out[g + g_part + "/gamma"] = t(hf + hf_part + ".weight")
            out[g + g_part + "/beta"] = t(hf + hf_part + ".bias")
    return out


def read_checkpoint(prefix):
    reader = tf.train.load_checkpoint(prefix)
    return {name: reader.get_tensor(name) for name, _ in tf.train.list_variables(prefix)}


@pytest.fixture(scope="module")
def converted(hf_pretraining, tmp_path_factory):
    directory, _ = hf_pretraining
    output_dir = str(tmp_path_factory.mktemp("converted"))
    result = convert_checkpoint.convert(directory, output_dir)
    return output_dir, result


def test_every_tensor_round_trips(hf_pretraining, converted):
    _, state = hf_pretraining
    output_dir, result = converted
    assert sorted(os.listdir(output_dir)) == [
        "bert_config.json", "bert_model.ckpt.data-00000-of-00001", "bert_model.ckpt.index",
        "vocab.txt"]
    assert result["warnings"] == []
    variables = read_checkpoint(os.path.join(output_dir, "bert_model.ckpt"))
    expected = expected_google_tensors(state)
    assert sorted(variables) == sorted(expected)
    for name, value in expected.items():
        assert variables[name].dtype == np.float32, name
        np.testing.assert_array_equal(variables[name], value, err_msg=name)


def test_config_and_vocab(hf_pretraining, converted):
    directory, _ = hf_pretraining
    output_dir, _ = converted
    with open(os.path.join(output_dir, "bert_config.json")) as f:
        config = json.load(f)
    assert config == {
        "vocab_size": VOCAB_SIZE, "hidden_size": HIDDEN, "num_hidden_layers": LAYERS,
        "num_attention_heads": 2, "intermediate_size": INTERMEDIATE,
        # Hugging Face "gelu" is the exact erf form.
        "hidden_act": "gelu_exact", "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1, "max_position_embeddings": POSITIONS,
        "type_vocab_size": 2, "initializer_range": 0.02}
    with open(os.path.join(directory, "vocab.txt")) as a, \
            open(os.path.join(output_dir, "vocab.txt")) as b:
        assert a.read() == b.read()


def test_casing_is_recorded_next_to_the_vocabulary(hf_pretraining, tmp_path):
    """A Hugging Face model's tokenizer_config.json casing goes next to the
    converted vocabulary, where the scripts hold --do_lower_case against it
    (one error line naming the flag); converting a model without one there
    removes the stale file, with --overwrite."""
    from scriptkit import checkpoints
    from scriptkit import errors
    source = str(tmp_path / "hf")
    shutil.copytree(hf_pretraining[0], source)
    with open(os.path.join(source, "tokenizer_config.json"), "w") as f:
        json.dump({"do_lower_case": False, "model_max_length": 512}, f)
    output_dir = str(tmp_path / "converted")
    convert_checkpoint.convert(source, output_dir)
    with open(os.path.join(output_dir, "tokenizer_config.json")) as f:
        assert json.load(f) == {"do_lower_case": False}
    vocab = os.path.join(output_dir, "vocab.txt")
    assert checkpoints.load_tokenizer(vocab, False).basic_tokenizer.do_lower_case is False
    with pytest.raises(errors.InputError, match=(
            r"^--do_lower_case=True, but .*tokenizer_config\.json says the model's vocabulary "
            r"is used with do_lower_case=False: pass --do_lower_case=False$")):
        checkpoints.load_tokenizer(vocab, True)
    # The same model without a casing: its removal replaces what is there.
    with pytest.raises(errors.InputError, match=(
            r"^--output_dir %s holds tokenizer_config\.json, which this conversion would "
            r"remove \(the model records none\): --overwrite replaces it, or choose another "
            r"folder$" % re.escape(output_dir))):
        convert_checkpoint.convert(hf_pretraining[0], output_dir)
    assert os.path.exists(os.path.join(output_dir, "tokenizer_config.json"))
    convert_checkpoint.convert(hf_pretraining[0], output_dir, overwrite=True)
    assert not os.path.exists(os.path.join(output_dir, "tokenizer_config.json"))


def test_a_hugging_face_folder_is_not_converted_into(hf_pretraining, tmp_path):
    """Both layouts keep their casing in tokenizer_config.json: converting
    into a folder holding a Hugging Face model (the model's own folder, an
    earlier --to_hf output) is refused before anything is written, so its
    tokenizer_config.json keeps model_max_length and the rest; an earlier
    conversion's folder is converted into as before."""
    source = str(tmp_path / "hf")
    shutil.copytree(hf_pretraining[0], source)
    hf_tokenizer = {"do_lower_case": True, "model_max_length": 512,
                    "tokenizer_class": "BertTokenizer", "unk_token": "[UNK]"}
    with open(os.path.join(source, "tokenizer_config.json"), "w") as f:
        json.dump(hf_tokenizer, f)

    def contents(folder):
        names = sorted(os.listdir(folder))
        return names, [open(os.path.join(folder, n), "rb").read() for n in names]

    before = contents(source)
    with pytest.raises(InputError, match=(
            r"^--output_dir %s holds a Hugging Face model \(config\.json, model\.safetensors, "
            r"tokenizer_config\.json\), whose tokenizer_config\.json and vocab\.txt the "
            r"converted files would replace: choose another folder$" % re.escape(source))):
        convert_checkpoint.convert(source, source)
    assert contents(source) == before

    google = str(tmp_path / "google")
    convert_checkpoint.convert(source, google)
    back = str(tmp_path / "back")
    convert_checkpoint.convert_to_hf(google, back)
    before = contents(back)
    with pytest.raises(InputError, match="holds a Hugging Face model"):
        convert_checkpoint.convert(source, back)
    assert contents(back) == before
    # A Hugging Face tokenizer's files alone count too.
    tokenizer_only = str(tmp_path / "tokenizer")
    os.makedirs(tokenizer_only)
    shutil.copy(os.path.join(source, "tokenizer_config.json"), tokenizer_only)
    with pytest.raises(InputError, match=r"\(tokenizer_config\.json\)"):
        convert_checkpoint.convert(source, tokenizer_only)
    # The converter's own folder (its casing file) is not a Hugging Face one.
    convert_checkpoint.convert(source, google)
    with open(os.path.join(google, "tokenizer_config.json")) as f:
        assert json.load(f) == {"do_lower_case": True}


def another_vocabulary_refusal(folder, theirs, ours):
    """The pattern of the one line that refuses to write a model into
    `folder`, whose vocab.txt has `theirs` tokens, for a model of `ours`."""
    return (r"^--output_dir %s holds vocab\.txt of another vocabulary \(%d tokens, sha256 "
            r"[0-9a-f]{12}\.\.\.; this model's: %d tokens, sha256 [0-9a-f]{12}\.\.\.\): a "
            r"vocabulary is never replaced; choose another folder$"
            % (re.escape(folder), theirs, ours))


def _folder_contents(folder):
    names = sorted(os.listdir(folder))
    return names, [open(os.path.join(folder, n), "rb").read() for n in names]


def test_another_models_folder_is_not_converted_into(hf_pretraining, tmp_path):
    """A folder holding another model's converted files (another config, or
    another vocabulary) is refused before anything is written, in one line
    naming the file; --overwrite replaces the config and weights, never a
    vocabulary; the same model again is written without it."""
    output_dir = str(tmp_path / "google")
    convert_checkpoint.convert(hf_pretraining[0], output_dir)
    before = _folder_contents(output_dir)
    # The same model again.
    convert_checkpoint.convert(hf_pretraining[0], output_dir)
    assert _folder_contents(output_dir)[0] == before[0]

    wider = copy_model(hf_pretraining[0], str(tmp_path / "wider"),
                       config_overrides={"initializer_range": 0.05})
    with pytest.raises(InputError, match=(
            r"^--output_dir %s holds bert_config\.json of another model \(initializer_range: "
            r"0\.02 there, 0\.05 here\): --overwrite replaces it, or choose another folder$"
            % re.escape(output_dir))):
        convert_checkpoint.convert(wider, output_dir)
    assert _folder_contents(output_dir) == before
    convert_checkpoint.convert(wider, output_dir, overwrite=True)
    with open(os.path.join(output_dir, "bert_config.json")) as f:
        assert json.load(f)["initializer_range"] == 0.05

    other_vocab = copy_model(hf_pretraining[0], str(tmp_path / "other_vocab"))
    write_vocab(other_vocab, size=VOCAB_SIZE - 1)
    before = _folder_contents(output_dir)
    for overwrite in (False, True):
        with pytest.raises(InputError, match=another_vocabulary_refusal(
                output_dir, VOCAB_SIZE, VOCAB_SIZE - 1)):
            convert_checkpoint.convert(other_vocab, output_dir, overwrite=overwrite)
        assert _folder_contents(output_dir) == before

    # Weights alone: whose they are cannot be told.
    weights_only = str(tmp_path / "weights_only")
    os.makedirs(weights_only)
    shutil.copy(os.path.join(output_dir, "bert_model.ckpt.index"), weights_only)
    with pytest.raises(InputError, match=(
            r"holds bert_model\.ckpt\.index, the weights of a model without its config beside "
            r"them: --overwrite replaces it")):
        convert_checkpoint.convert(hf_pretraining[0], weights_only)
    assert os.listdir(weights_only) == ["bert_model.ckpt.index"]


def test_variable_names_are_those_bert_model_builds(converted):
    output_dir, _ = converted
    config = modeling.BertConfig.from_json_file(os.path.join(output_dir, "bert_config.json"))
    with tf.Graph().as_default():
        modeling.BertModel(config, is_training=False,
                           input_ids=tf.zeros([1, 4], dtype=tf.int32))
        model_vars = {v.op.name: v.shape.as_list() for v in tf.global_variables()}
    variables = read_checkpoint(os.path.join(output_dir, "bert_model.ckpt"))
    converted_bert = {k: list(v.shape) for k, v in variables.items() if k.startswith("bert/")}
    assert converted_bert == model_vars


@pytest.mark.slow
@pytest.mark.parametrize("hf_act", ["gelu", "gelu_new"])
def test_converted_model_computes_what_hugging_face_computes(tmp_path, reference, hf_act):
    # hidden_act matters: "gelu" (erf) and "gelu_new" (tanh) differ by ~1e-3,
    # more than the tolerance, so a wrong mapping fails here. The fixture's
    # outputs are transformers' BertModel on PARITY_* (output_hidden_states).
    directory = hf_model_dir("bert_" + hf_act, tmp_path / "hf")
    output_dir = str(tmp_path / "tf")
    convert_checkpoint.convert(directory, output_dir)
    hf_hidden = reference["out:bert_%s:hidden_states" % hf_act]
    hf_pooled = reference["out:bert_%s:pooler_output" % hf_act]
    assert hf_hidden.shape == (LAYERS + 1,) + PARITY_IDS.shape + (HIDDEN,), REGENERATE

    ids, mask, types = PARITY_IDS, PARITY_MASK, PARITY_TYPES
    config = modeling.BertConfig.from_json_file(os.path.join(output_dir, "bert_config.json"))
    with tf.Graph().as_default():
        bert = modeling.BertModel(config, is_training=False, input_ids=tf.constant(ids, tf.int32),
                                  input_mask=tf.constant(mask, tf.int32),
                                  token_type_ids=tf.constant(types, tf.int32))
        tf.train.init_from_checkpoint(os.path.join(output_dir, "bert_model.ckpt"),
                                      {"bert/": "bert/"})
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            layers, pooled = sess.run([bert.get_all_encoder_layers(), bert.get_pooled_output()])
    real = mask.astype(bool)
    assert len(layers) == LAYERS
    for n, layer in enumerate(layers):
        np.testing.assert_allclose(layer[real], hf_hidden[n + 1][real],
                                   atol=1e-4, rtol=0, err_msg="layer %d" % n)
    np.testing.assert_allclose(pooled, hf_pooled, atol=1e-4, rtol=0)


def test_pytorch_bin_with_old_layer_norm_names(hf_pretraining, converted, tmp_path):
    # pytorch-pretrained-bert era checkpoints: pytorch_model.bin, LayerNorm
    # gamma/beta, the MLM bias under cls.predictions.decoder.bias and a
    # position_ids buffer. Writing (and the converter reading) a .bin takes
    # PyTorch itself.
    torch = pytest.importorskip(
        "torch", reason="writing and reading a pytorch_model.bin needs PyTorch")
    source, stored = hf_pretraining
    state = {}
    for name, value in stored.items():
        name = name.replace("LayerNorm.weight", "LayerNorm.gamma").replace(
            "LayerNorm.bias", "LayerNorm.beta")
        state[name] = torch.from_numpy(np.array(value))
    state["cls.predictions.decoder.bias"] = state.pop("cls.predictions.bias")
    state["bert.embeddings.position_ids"] = torch.arange(POSITIONS)[None]
    directory = tmp_path / "bin"
    directory.mkdir()
    torch.save(state, str(directory / "pytorch_model.bin"))
    shutil.copy(os.path.join(source, "config.json"), str(directory / "config.json"))
    write_vocab(str(directory))
    convert_checkpoint.convert(str(directory), str(tmp_path / "out"))
    a = read_checkpoint(str(tmp_path / "out" / "bert_model.ckpt"))
    b = read_checkpoint(os.path.join(converted[0], "bert_model.ckpt"))
    assert sorted(a) == sorted(b)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_pytorch_bin_without_torch_asks_for_safetensors(tmp_path, monkeypatch):
    directory = tmp_path / "bin"
    directory.mkdir()
    (directory / "pytorch_model.bin").write_bytes(b"not read")
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    with pytest.raises(InputError, match="PyTorch is not installed.*safetensors"):
        hf_weights.load_hf_weights(str(directory))


def test_bfloat16_safetensors(reference):
    # bf16.safetensors was written by safetensors.torch (BF16 and F16
    # tensors); the expected values are PyTorch's float32/float16 casts.
    loaded = hf_weights._load_safetensors(os.path.join(FIXTURES, "bf16.safetensors"))
    assert sorted(loaded) == ["f16", "w"]
    assert reference["bf16:w"].dtype == np.float32
    assert reference["bf16:f16"].dtype == np.float16
    np.testing.assert_array_equal(loaded["w"], reference["bf16:w"])
    np.testing.assert_array_equal(loaded["f16"], reference["bf16:f16"])


def test_bert_model_without_prefix_and_without_heads(tmp_path, reference):
    # BertModel (and sentence-transformers) checkpoints have no "bert." prefix
    # and no pre-training heads; the heads are left out with a warning.
    directory = hf_model_dir("bert_relu", tmp_path / "hf")
    result = convert_checkpoint.convert(directory, str(tmp_path / "out"))
    variables = read_checkpoint(result["checkpoint"])
    assert not [n for n in variables if n.startswith("cls/")]
    state = state_dict(reference, "bert_relu")
    np.testing.assert_array_equal(variables["bert/encoder/layer_1/output/dense/kernel"],
                                  state["encoder.layer.1.output.dense.weight"].T)
    assert any("masked LM head" in w for w in result["warnings"])
    with open(result["bert_config_file"]) as f:
        assert json.load(f)["hidden_act"] == "relu"


# ---------------------------------------------------------------------------
# Bad input: a clear InputError, and nothing written.

def copy_model(source, destination, config_overrides=None, drop=(), replace=None):
    """Copies a Hugging Face model directory with edits to its config/tensors."""
    os.makedirs(destination)
    with open(os.path.join(source, "config.json")) as f:
        config = json.load(f)
    config.update(config_overrides or {})
    with open(os.path.join(destination, "config.json"), "w") as f:
        json.dump(config, f)
    tensors = safetensors_numpy.load_file(os.path.join(source, "model.safetensors"))
    for name in drop:
        del tensors[name]
    tensors.update(replace or {})
    safetensors_numpy.save_file(tensors, os.path.join(destination, "model.safetensors"))
    write_vocab(destination)
    return destination


def assert_conversion_fails(directory, tmp_path, match):
    output_dir = tmp_path / "out"
    with pytest.raises(InputError, match=match):
        convert_checkpoint.convert(str(directory), str(output_dir))
    assert not output_dir.exists() or os.listdir(str(output_dir)) == []


@pytest.mark.parametrize("overrides,match", [
    ({"model_type": "roberta"}, "model_type is 'roberta'.*only \"bert\""),
    ({"model_type": "distilbert"}, "model_type is 'distilbert'"),
    ({"hidden_act": "silu"}, "hidden_act 'silu' is not supported"),
    ({"position_embedding_type": "relative_key"}, "position_embedding_type"),
    ({"layer_norm_eps": 1e-5}, "layer_norm_eps"),
])
def test_unsupported_config(hf_pretraining, tmp_path, overrides, match):
    directory = copy_model(hf_pretraining[0], str(tmp_path / "hf"), config_overrides=overrides)
    assert_conversion_fails(directory, tmp_path, match)


def test_missing_tensor(hf_pretraining, tmp_path):
    name = "bert.encoder.layer.1.attention.self.key.weight"
    directory = copy_model(hf_pretraining[0], str(tmp_path / "hf"), drop=[name])
    assert_conversion_fails(directory, tmp_path, "missing 1 tensor.*" + name.replace(".", r"\."))


def test_shape_mismatch_with_config(hf_pretraining, tmp_path):
    directory = copy_model(hf_pretraining[0], str(tmp_path / "hf"),
                           config_overrides={"intermediate_size": INTERMEDIATE * 2})
    assert_conversion_fails(directory, tmp_path,
                            r"bert\.encoder\.layer\.0\.intermediate\.dense\.weight has shape "
                            r"\[24, 16\], but config\.json implies \[48, 16\]")


def test_more_layers_than_config(hf_pretraining, tmp_path):
    directory = copy_model(hf_pretraining[0], str(tmp_path / "hf"),
                           config_overrides={"num_hidden_layers": 1})
    assert_conversion_fails(directory, tmp_path,
                            r"1-layer BERT encoder does not have.*num_hidden_layers.*"
                            r"bert\.encoder\.layer\.1\.")


def test_missing_files(hf_pretraining, tmp_path):
    assert_conversion_fails(tmp_path / "nowhere", tmp_path, "directory not found")
    directory = copy_model(hf_pretraining[0], str(tmp_path / "hf"))
    os.remove(os.path.join(directory, "vocab.txt"))
    assert_conversion_fails(directory, tmp_path, "vocab.txt")
    write_vocab(directory)
    os.remove(os.path.join(directory, "model.safetensors"))
    assert_conversion_fails(directory, tmp_path, "holds no weights")
    os.remove(os.path.join(directory, "config.json"))
    assert_conversion_fails(directory, tmp_path, "config.json")


def test_corrupt_safetensors(hf_pretraining, tmp_path):
    directory = copy_model(hf_pretraining[0], str(tmp_path / "hf"))
    with open(os.path.join(directory, "model.safetensors"), "r+b") as f:
        f.truncate(1000)
    assert_conversion_fails(directory, tmp_path, "not a readable safetensors file")
