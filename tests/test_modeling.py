"""Tests for modeling.py against independent references: hand-written
variable lists, a NumPy re-computation of the model, and Hugging Face
`transformers` BertModel (test-only; its outputs stored as a fixture) on the
same weights as a Google-named checkpoint."""

import json
import math
import os
import re

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import modeling
from tiny import tiny_config_dict

# ---------------------------------------------------------------------------
# NumPy reference implementation (float64) of the original BERT math.


def np_layer_norm(x, gamma, beta):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-12) * gamma + beta


def np_gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def np_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def np_bert(w, config, input_ids, input_mask, token_type_ids, word_vectors=None):
    """Returns (embedding_output, [layer outputs], pooled_output) computed from
    the Google-named weights `w` (dict name -> float64 array); `word_vectors`
    [batch, seq, hidden], if given, stand for the ids' word embeddings."""
    w = {k: np.asarray(v, np.float64) for k, v in w.items()}
    batch, seq = input_ids.shape
    heads = config["num_attention_heads"]
    width = config["hidden_size"]
    size = width // heads
    if word_vectors is None:
        word_vectors = w["bert/embeddings/word_embeddings"][input_ids]
    emb = (word_vectors +
           w["bert/embeddings/token_type_embeddings"][token_type_ids] +
           w["bert/embeddings/position_embeddings"][:seq][None])
    h = np_layer_norm(emb, w["bert/embeddings/LayerNorm/gamma"],
                      w["bert/embeddings/LayerNorm/beta"])
    embedding_output = h
    bias = (1.0 - input_mask[:, None, None, :].astype(np.float64)) * -10000.0
    layers = []
    for index in range(config["num_hidden_layers"]):
        prefix = "bert/encoder/layer_%d/" % index

        def dense(x, name, prefix=prefix):
            return x @ w[prefix + name + "/kernel"] + w[prefix + name + "/bias"]

        def heads_first(x):
            return x.reshape(batch, seq, heads, size).transpose(0, 2, 1, 3)

        q = heads_first(dense(h, "attention/self/query"))
        k = heads_first(dense(h, "attention/self/key"))
        v = heads_first(dense(h, "attention/self/value"))
        probs = np_softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(size) + bias)
        context = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, seq, width)
        attention = np_layer_norm(dense(context, "attention/output/dense") + h,
                                  w[prefix + "attention/output/LayerNorm/gamma"],
                                  w[prefix + "attention/output/LayerNorm/beta"])
        intermediate = np_gelu_tanh(dense(attention, "intermediate/dense"))
        h = np_layer_norm(dense(intermediate, "output/dense") + attention,
                          w[prefix + "output/LayerNorm/gamma"],
                          w[prefix + "output/LayerNorm/beta"])
        layers.append(h)
    pooled = np.tanh(h[:, 0] @ w["bert/pooler/dense/kernel"] + w["bert/pooler/dense/bias"])
    return embedding_output, layers, pooled


# ---------------------------------------------------------------------------
# Helpers.

def _google_variable_shapes(config):
    """The variables of Google's checkpoints (name -> shape), written out by
    hand from the released checkpoints' layout."""
    h, i = config["hidden_size"], config["intermediate_size"]
    shapes = {
        "bert/embeddings/word_embeddings": [config["vocab_size"], h],
        "bert/embeddings/token_type_embeddings": [config["type_vocab_size"], h],
        "bert/embeddings/position_embeddings": [config["max_position_embeddings"], h],
        "bert/embeddings/LayerNorm/beta": [h],
        "bert/embeddings/LayerNorm/gamma": [h],
        "bert/pooler/dense/kernel": [h, h],
        "bert/pooler/dense/bias": [h],
    }
    for n in range(config["num_hidden_layers"]):
        p = "bert/encoder/layer_%d/" % n
        for name in ("query", "key", "value"):
            shapes[p + "attention/self/%s/kernel" % name] = [h, h]
            shapes[p + "attention/self/%s/bias" % name] = [h]
        shapes[p + "attention/output/dense/kernel"] = [h, h]
        shapes[p + "attention/output/dense/bias"] = [h]
        shapes[p + "intermediate/dense/kernel"] = [h, i]
        shapes[p + "intermediate/dense/bias"] = [i]
        shapes[p + "output/dense/kernel"] = [i, h]
        shapes[p + "output/dense/bias"] = [h]
        for ln in ("attention/output/LayerNorm", "output/LayerNorm"):
            shapes[p + ln + "/beta"] = [h]
            shapes[p + ln + "/gamma"] = [h]
    return shapes


def _var_name(var):
    return re.sub(r":\d+$", "", var.name)


def _randomize(sess, rng, scale=0.2):
    """Gives every variable random values (LayerNorm gammas around 1), so that
    biases and LayerNorm parameters matter in the comparisons."""
    for var in tf.global_variables():
        shape = var.shape.as_list()
        value = rng.normal(0.0, scale, shape)
        if var.name.endswith("gamma:0"):
            value += 1.0
        if "embeddings" in var.name and "LayerNorm" not in var.name:
            value = rng.normal(0.0, 0.5, shape)
        var.load(value.astype(np.float32), sess)


def _inputs(batch=2, seq=8, vocab=40, seed=0):
    rng = np.random.RandomState(seed)
    ids = rng.randint(5, vocab, size=(batch, seq)).astype(np.int32)
    mask = np.ones((batch, seq), np.int32)
    mask[1, 5:] = 0  # Second example: three padding positions.
    ids[1, 5:] = 0
    types = np.zeros((batch, seq), np.int32)
    types[:, seq // 2:] = 1
    return ids, mask, types


class TinyModel(object):
    """A tiny BertModel with placeholders, in its own graph and session."""

    def __init__(self, seed=0, is_training=False, **overrides):
        self.config = tiny_config_dict(40, **overrides)
        self.graph = tf.Graph()
        with self.graph.as_default():
            self.ids = tf.placeholder(tf.int32, [None, None])
            self.mask = tf.placeholder(tf.int32, [None, None])
            self.types = tf.placeholder(tf.int32, [None, None])
            self.model = modeling.BertModel(
                modeling.BertConfig.from_dict(self.config), is_training=is_training,
                input_ids=self.ids, input_mask=self.mask, token_type_ids=self.types)
            self.sess = tf.Session(graph=self.graph)
            self.sess.run(tf.global_variables_initializer())
            _randomize(self.sess, np.random.RandomState(seed))
            self.weights = {_var_name(v): v for v in tf.global_variables()}

    def run(self, fetches, ids, mask, types):
        return self.sess.run(fetches, {self.ids: ids, self.mask: mask, self.types: types})

    def weight_values(self):
        return self.sess.run(self.weights)

    def outputs(self):
        m = self.model
        return [m.get_embedding_output(), m.get_all_encoder_layers(),
                m.get_pooled_output(), m.get_sequence_output()]


@pytest.fixture(scope="module")
def tiny():
    model = TinyModel()
    yield model
    model.sess.close()


# ---------------------------------------------------------------------------
# Variables of a BERT-Base-shaped model.

BERT_BASE = {"vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": 12,
             "num_attention_heads": 12, "intermediate_size": 3072,
             "max_position_embeddings": 512, "type_vocab_size": 2}


def test_bert_base_variable_names_and_shapes():
    with tf.Graph().as_default():
        ids = tf.placeholder(tf.int32, [2, 128])
        config = modeling.BertConfig(**BERT_BASE)
        model = modeling.BertModel(config, is_training=True, input_ids=ids)
        actual = {_var_name(v): v.shape.as_list() for v in tf.global_variables()}
        assert actual == _google_variable_shapes(BERT_BASE)
        assert len(actual) == 5 + 12 * 16 + 2
        assert set(actual) == {_var_name(v) for v in tf.trainable_variables()}
        # BERT-Base uncased has 109,482,240 parameters.
        assert sum(int(np.prod(s)) for s in actual.values()) == 109482240
        assert model.get_embedding_table().shape.as_list() == [30522, 768]
        assert model.get_sequence_output().shape.as_list() == [2, 128, 768]
        assert model.get_pooled_output().shape.as_list() == [2, 768]
        layers = model.get_all_encoder_layers()
        assert len(layers) == 12
        assert all(layer.shape.as_list() == [2, 128, 768] for layer in layers)
        assert all(t.dtype == tf.float32 for t in layers + [model.get_pooled_output()])


# ---------------------------------------------------------------------------
# Numerics.

def test_outputs_match_numpy_recomputation(tiny):
    ids, mask, types = _inputs()
    emb, layers, pooled, seq_out = tiny.run(tiny.outputs(), ids, mask, types)
    ref_emb, ref_layers, ref_pooled = np_bert(tiny.weight_values(), tiny.config, ids, mask,
                                              types)
    assert len(layers) == tiny.config["num_hidden_layers"] == len(ref_layers)
    np.testing.assert_allclose(emb, ref_emb, rtol=0, atol=1e-5)
    for got, want in zip(layers, ref_layers):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    np.testing.assert_allclose(pooled, ref_pooled, rtol=0, atol=1e-5)
    np.testing.assert_array_equal(seq_out, layers[-1])
    # The comparison is meaningful: outputs are O(1) and differ between layers.
    assert np.abs(layers[-1]).mean() > 0.3
    assert np.abs(layers[0] - layers[1]).max() > 0.1


def test_attention_mask_really_masks(tiny):
    ids, mask, types = _inputs()
    base = tiny.run(tiny.outputs()[:3], ids, mask, types)
    changed_ids = ids.copy()
    changed_ids[1, 5:] = [7, 8, 9]  # Only padded positions change.
    changed_types = types.copy()
    changed_types[1, 5:] = 0
    after = tiny.run(tiny.outputs()[:3], changed_ids, mask, changed_types)
    for layer_before, layer_after in zip(base[1], after[1]):
        np.testing.assert_array_equal(layer_before[:, :5], layer_after[:, :5])
        np.testing.assert_array_equal(layer_before[0], layer_after[0])
    np.testing.assert_array_equal(base[2], after[2])
    # Control: the same change with the mask all ones does change the outputs.
    full = np.ones_like(mask)
    a = tiny.run(tiny.model.get_sequence_output(), ids, full, types)
    b = tiny.run(tiny.model.get_sequence_output(), changed_ids, full, changed_types)
    assert np.abs(a[1, :5] - b[1, :5]).max() > 1e-3


def test_default_mask_and_token_types_are_ones_and_zeros():
    ids, _, _ = _inputs()
    graph = tf.Graph()
    with graph.as_default():
        config = modeling.BertConfig.from_dict(tiny_config_dict(40))
        ids_t = tf.constant(ids)
        explicit = modeling.BertModel(config, False, ids_t, tf.ones_like(ids_t),
                                      tf.zeros_like(ids_t), scope="bert")
        with tf.variable_scope(tf.get_variable_scope(), reuse=True):
            implicit = modeling.BertModel(config, False, ids_t, scope="bert")
            one_hot = modeling.BertModel(config, False, ids_t, use_one_hot_embeddings=True,
                                         scope="bert")
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            _randomize(sess, np.random.RandomState(3))
            a, b, c = sess.run([m.get_sequence_output() for m in (explicit, implicit, one_hot)])
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(a, c, rtol=0, atol=1e-5)


def test_word_lookup_leaves_the_table_shared_on_read():
    """Reads of the word table after a lookup return its buffer, not copies.

    TensorFlow's gather on a resource variable switches the variable to
    copy-on-read, after which every read copies the whole table (in
    pre-training the tied output layer reads it each step). A traced run
    shows, per read, the address of the tensor it returned and the bytes it
    allocated."""
    graph = tf.Graph()
    with graph.as_default():
        ids = tf.constant([[3, 1, 4], [1, 5, 9]])
        rows, table = modeling.embedding_lookup(ids, vocab_size=1000, embedding_size=64)
        with tf.control_dependencies([rows]):  # both reads come after the lookup
            first = table.read_value()
            second = table.read_value()
        total = tf.reduce_sum(first) + tf.reduce_sum(second) + tf.reduce_sum(rows)
        reads = {first.op.inputs[0].op.name, second.op.inputs[0].op.name}
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(total)  # copy-on-read, once set, lasts: trace a second run
            metadata = tf.RunMetadata()
            sess.run(total, options=tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE),
                     run_metadata=metadata)
    traced = [node for device in metadata.step_stats.dev_stats
              for node in device.node_stats if node.node_name in reads]
    assert len(traced) == 2
    addresses = {node.output[0].tensor_description.allocation_description.ptr
                 for node in traced}
    assert len(addresses) == 1, "the reads returned copies of the table"
    assert sum(m.total_bytes for node in traced for m in node.memory) == 0


def test_dropout_only_when_training():
    ids, mask, types = _inputs()
    for is_training in (False, True):
        model = TinyModel(is_training=is_training)
        first = model.run(model.model.get_sequence_output(), ids, mask, types)
        second = model.run(model.model.get_sequence_output(), ids, mask, types)
        model.sess.close()
        if is_training:
            assert np.abs(first - second).max() > 1e-3
        else:
            np.testing.assert_array_equal(first, second)


# ---------------------------------------------------------------------------
# Activations.

def test_get_activation_names_and_numerics():
    x = np.linspace(-5, 5, 101).astype(np.float32)
    exact = np.array([v * 0.5 * (1.0 + math.erf(v / math.sqrt(2.0))) for v in x.astype(float)])
    with tf.Graph().as_default(), tf.Session() as sess:
        xt = tf.constant(x)
        results = sess.run({name: modeling.get_activation(name)(xt)
                            for name in ("gelu", "GELU", "gelu_new", "gelu_exact", "relu",
                                         "tanh")})
    np.testing.assert_allclose(results["gelu"], np_gelu_tanh(x.astype(float)), atol=1e-6)
    np.testing.assert_array_equal(results["GELU"], results["gelu"])
    np.testing.assert_array_equal(results["gelu_new"], results["gelu"])
    np.testing.assert_allclose(results["gelu_exact"], exact, atol=1e-6)
    # The two forms really differ (by up to ~5e-4 near |x| = 2).
    assert np.abs(results["gelu"] - results["gelu_exact"]).max() > 1e-4
    np.testing.assert_allclose(results["gelu_exact"][60], 1.0 * 0.8413447, atol=1e-6)
    np.testing.assert_allclose(results["gelu"][60], 0.8411920, atol=1e-6)
    np.testing.assert_array_equal(results["relu"], np.maximum(x, 0))
    np.testing.assert_allclose(results["tanh"], np.tanh(x), atol=1e-6)
    assert modeling.get_activation("linear") is None
    assert modeling.get_activation("") is None
    assert modeling.get_activation(None) is None
    assert modeling.get_activation(tf.nn.softplus) is tf.nn.softplus
    with pytest.raises(ValueError, match="swishy"):
        modeling.get_activation("swishy")


def test_gelu_exact_config_changes_the_model():
    ids, mask, types = _inputs()
    outputs = []
    for act in ("gelu", "gelu_exact"):
        model = TinyModel(hidden_act=act)
        outputs.append(model.run(model.model.get_sequence_output(), ids, mask, types))
        model.sess.close()
    assert np.abs(outputs[0] - outputs[1]).max() > 1e-5


# ---------------------------------------------------------------------------
# Errors and helpers.

def test_hidden_size_not_divisible_by_heads():
    with tf.Graph().as_default():
        config = modeling.BertConfig.from_dict(tiny_config_dict(40, hidden_size=30))
        with pytest.raises(ValueError, match=r"hidden size \(30\).*heads \(4\)"):
            modeling.BertModel(config, False, tf.zeros([2, 8], tf.int32))


def test_sequence_longer_than_max_position_embeddings():
    config = modeling.BertConfig.from_dict(tiny_config_dict(40, max_position_embeddings=16))
    with tf.Graph().as_default():
        with pytest.raises(ValueError, match="max_position_embeddings"):
            modeling.BertModel(config, False, tf.zeros([2, 17], tf.int32))
    # Unknown length at graph time: checked when run.
    with tf.Graph().as_default():
        ids = tf.placeholder(tf.int32, [None, None])
        model = modeling.BertModel(config, False, ids)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(model.get_pooled_output(), {ids: np.zeros([1, 16], np.int32)})
            with pytest.raises(tf.errors.InvalidArgumentError, match="max_position_embeddings"):
                sess.run(model.get_pooled_output(), {ids: np.zeros([1, 17], np.int32)})


def test_wrong_input_rank():
    config = modeling.BertConfig.from_dict(tiny_config_dict(40))
    with tf.Graph().as_default():
        with pytest.raises(ValueError, match="rank"):
            modeling.BertModel(config, False, tf.zeros([2, 8, 1], tf.int32))
        with pytest.raises(ValueError, match="rank"):
            modeling.BertModel(config, False, tf.zeros([8], tf.int32))


def test_shape_helpers():
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [None, 5, 3])
        shape = modeling.get_shape_list(x, expected_rank=3)
        assert isinstance(shape[0], tf.Tensor) and shape[1:] == [5, 3]
        with pytest.raises(ValueError, match="expected rank `2`"):
            modeling.get_shape_list(x, expected_rank=2)
        modeling.assert_rank(x, [2, 3])
        matrix = modeling.reshape_to_matrix(x)
        assert matrix.shape.as_list() == [None, 3]
        back = modeling.reshape_from_matrix(matrix, shape)
        with tf.Session() as sess:
            value = np.arange(30, dtype=np.float32).reshape(2, 5, 3)
            m, b = sess.run([matrix, back], {x: value})
        np.testing.assert_array_equal(m, value.reshape(10, 3))
        np.testing.assert_array_equal(b, value)


def test_create_attention_mask_from_input_mask():
    with tf.Graph().as_default(), tf.Session() as sess:
        mask = modeling.create_attention_mask_from_input_mask(
            tf.zeros([2, 3], tf.int32), tf.constant([[1, 1, 0], [1, 0, 0]]))
        value = sess.run(mask)
    assert value.shape == (2, 3, 3)
    np.testing.assert_array_equal(value[0], [[1, 1, 0]] * 3)
    np.testing.assert_array_equal(value[1], [[1, 0, 0]] * 3)


def test_layer_norm_matches_numpy():
    rng = np.random.RandomState(1)
    x = rng.normal(3.0, 2.0, (4, 7)).astype(np.float32)
    with tf.Graph().as_default(), tf.Session() as sess:
        out = modeling.layer_norm(tf.constant(x))
        names = sorted(_var_name(v) for v in tf.global_variables())
        sess.run(tf.global_variables_initializer())
        value = sess.run(out)
    assert names == ["LayerNorm/beta", "LayerNorm/gamma"]
    np.testing.assert_allclose(value, np_layer_norm(x.astype(float), 1.0, 0.0), atol=1e-5)


def test_bert_config_json_round_trip_and_unknown_keys(tmp_path):
    data = dict(tiny_config_dict(40), model_type="bert", layer_norm_eps=1e-12,
                architectures=["BertForMaskedLM"], pad_token_id=0)
    path = tmp_path / "bert_config.json"
    path.write_text(json.dumps(data))
    config = modeling.BertConfig.from_json_file(str(path))
    assert config.vocab_size == 40 and config.hidden_size == 32
    assert config.num_attention_heads == 4 and config.hidden_act == "gelu"
    assert config.architectures == ["BertForMaskedLM"]
    assert json.loads(config.to_json_string()) == config.to_dict() == data
    # A config with unknown keys still builds a model.
    with tf.Graph().as_default():
        modeling.BertModel(config, False, tf.zeros([1, 4], tf.int32))
    # Defaults: the original's.
    default = modeling.BertConfig(vocab_size=10)
    assert (default.hidden_size, default.num_hidden_layers, default.num_attention_heads,
            default.intermediate_size, default.hidden_act, default.hidden_dropout_prob,
            default.attention_probs_dropout_prob, default.max_position_embeddings,
            default.type_vocab_size, default.initializer_range) == (
        768, 12, 12, 3072, "gelu", 0.1, 0.1, 512, 16, 0.02)


def test_bert_config_errors_name_the_file(tmp_path):
    with pytest.raises(ValueError, match="missing_config.json"):
        modeling.BertConfig.from_json_file(str(tmp_path / "missing_config.json"))
    bad = tmp_path / "bad_config.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="bad_config.json"):
        modeling.BertConfig.from_json_file(str(bad))


def _save_checkpoint(path, values):
    """Writes `values` (name -> array) as a TF checkpoint with those names."""
    with tf.Graph().as_default():
        variables = [tf.Variable(value, name=name) for name, value in values.items()]
        saver = tf.train.Saver(variables)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            return saver.save(sess, path, write_meta_graph=False)


def test_get_assignment_map_from_checkpoint(tmp_path):
    config = tiny_config_dict(40)
    shapes = _google_variable_shapes(config)
    rng = np.random.RandomState(0)
    values = {name: rng.normal(size=shape).astype(np.float32)
              for name, shape in shapes.items() if "pooler" not in name}
    values["cls/predictions/output_bias"] = np.zeros([40], np.float32)
    ckpt = _save_checkpoint(str(tmp_path / "model.ckpt"), values)

    with tf.Graph().as_default():
        modeling.BertModel(modeling.BertConfig.from_dict(config), False,
                           tf.zeros([1, 4], tf.int32))
        tf.get_variable("output_weights", [2, 32])
        tvars = tf.trainable_variables()
        assignment_map, initialized = modeling.get_assignment_map_from_checkpoint(tvars, ckpt)
        expected = sorted(n for n in shapes if "pooler" not in n)
        assert sorted(assignment_map) == expected
        assert all(k == v for k, v in assignment_map.items())
        assert set(initialized) == set(expected) | {n + ":0" for n in expected}
        tf.train.init_from_checkpoint(ckpt, assignment_map)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            table = [v for v in tvars if _var_name(v) == "bert/embeddings/word_embeddings"][0]
            np.testing.assert_array_equal(sess.run(table),
                                          values["bert/embeddings/word_embeddings"])

    # A vocabulary mismatch names the variable and both shapes.
    with tf.Graph().as_default():
        modeling.BertModel(modeling.BertConfig.from_dict(tiny_config_dict(41)), False,
                           tf.zeros([1, 4], tf.int32))
        with pytest.raises(ValueError, match=r"bert/embeddings/word_embeddings.*\[40, 32\]"
                                             r".*\[41, 32\]"):
            modeling.get_assignment_map_from_checkpoint(tf.trainable_variables(), ckpt)


# ---------------------------------------------------------------------------
# Parity with Hugging Face transformers, through a Google-named checkpoint.
# The Hugging Face side is stored in tests/fixtures/modeling_parity.npz:
# transformers' BertModel run once on the weights and inputs below by
# `python tests/fixtures/make_hf_fixtures.py` (so this test needs neither
# torch nor transformers). The weights and inputs are rebuilt here with NumPy.
HF_PARITY_FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures",
                                 "modeling_parity.npz")


def hf_parity_case():
    """The parity test's model and inputs, all from fixed NumPy seeds:
    (config dict, Google name -> float32 weights, (ids, mask, types) int32
    [3, 10]). Every weight is random and well away from the init (LayerNorm
    gammas around 1), so a swapped or misplaced tensor shows; the third
    example is padded after 3 tokens."""
    config = tiny_config_dict(40, intermediate_size=48, max_position_embeddings=24)
    rng = np.random.RandomState(0)
    values = {}
    for name, shape in sorted(_google_variable_shapes(config).items()):
        value = rng.standard_normal(shape) * (0.5 if "/embeddings/" in name else 0.2)
        if name.endswith("LayerNorm/gamma"):
            value += 1.0
        values[name] = value.astype(np.float32)
    ids, mask, types = _inputs(batch=3, seq=10, vocab=40, seed=5)
    mask[2, 3:] = 0
    return config, values, (ids, mask, types)


def test_parity_with_hugging_face_bert(tmp_path):
    config, values, (ids, mask, types) = hf_parity_case()
    with np.load(HF_PARITY_FIXTURE) as data:
        hf = {key: data[key] for key in data.files}
    # The fixture must have been made from these very weights and inputs.
    regenerate = "regenerate with: python tests/fixtures/make_hf_fixtures.py"
    for name, value in zip(("input_ids", "attention_mask", "token_type_ids"),
                           (ids, mask, types)):
        np.testing.assert_array_equal(hf[name], value, err_msg=regenerate)
    np.testing.assert_allclose(hf["weight_sums"],
                               [values[name].sum(dtype=np.float64) for name in sorted(values)],
                               rtol=1e-6, err_msg=regenerate)
    ckpt = _save_checkpoint(str(tmp_path / "bert_model.ckpt"), values)
    hf_hidden = hf["hidden_states"]  # Embedding output, then every layer.

    with tf.Graph().as_default():
        model = modeling.BertModel(modeling.BertConfig.from_dict(config), False,
                                   tf.constant(ids), tf.constant(mask), tf.constant(types))
        tvars = tf.trainable_variables()
        assignment_map, _ = modeling.get_assignment_map_from_checkpoint(tvars, ckpt)
        assert len(assignment_map) == len(tvars) == len(values)
        tf.train.init_from_checkpoint(ckpt, assignment_map)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            emb, layers, pooled, seq_out = sess.run([
                model.get_embedding_output(), model.get_all_encoder_layers(),
                model.get_pooled_output(), model.get_sequence_output()])

    np.testing.assert_allclose(emb, hf_hidden[0], rtol=0, atol=1e-4)
    assert len(layers) == len(hf_hidden) - 1
    for ours, theirs in zip(layers, hf_hidden[1:]):
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-4)
    np.testing.assert_allclose(seq_out, hf["last_hidden_state"], rtol=0, atol=1e-4)
    np.testing.assert_allclose(pooled, hf["pooler_output"], rtol=0, atol=1e-4)
    assert np.abs(seq_out).mean() > 0.3
