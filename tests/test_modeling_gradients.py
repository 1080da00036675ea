"""The memory-saving gradients of modeling.py: their values, against NumPy
references, and what they keep of the forward pass.

GELU, the feed-forward output projection and dropout carry gradient
overrides (and recomputed layers an IdentityN whose gradient rebuilds the
layer). Values are checked in float64 against finite differences and closed
forms computed here. What a backward pass keeps alive is read off the graph:
the forward tensors that the ops needed for the requested gradients consume
(the ops a session would actually run for them, as it prunes the rest).
"""

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import modeling

# Ops that read only the metadata of their input: they run as soon as the
# input exists, so they do not keep it alive until the backward pass.
_METADATA_OPS = {"Shape", "ShapeN", "Size", "Rank"}


def np_gelu(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def np_gelu_slope(x, step=1e-5):
    """Central finite difference of `np_gelu` (float64)."""
    return (np_gelu(x + step) - np_gelu(x - step)) / (2 * step)


def forward_tensors_read_by(fetches, forward_ops):
    """Forward tensors that the ops computing `fetches` consume.

    Walks from `fetches` back through data and control inputs, stopping at
    forward ops, and returns the forward tensors read by the walked ops
    (ignoring metadata-only readers).
    """
    needed, stack = set(), [t.op for t in fetches]
    while stack:
        op = stack.pop()
        if op in needed or op in forward_ops:
            continue
        needed.add(op)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return {t for op in needed if op.type not in _METADATA_OPS
            for t in op.inputs if t.op in forward_ops}


def _new_ops(graph, before):
    return set(graph.get_operations()) - before


@pytest.fixture(params=["fused", "written_out"])
def gelu_kind(request, monkeypatch):
    """Runs a test with GELU as XLA-compiled loops and as separate ops."""
    monkeypatch.setenv(modeling.FUSED_GELU_VARIABLE,
                       "1" if request.param == "fused" else "0")
    return request.param


def _compiled_calls(ops):
    return [op for op in ops if op.type == "PartitionedCall"
            and op.get_attr("_XlaMustCompile")]


def test_gelu_gradient_matches_finite_differences(gelu_kind):
    x = np.linspace(-6.0, 6.0, 241)
    weights = np.random.RandomState(0).randn(x.size)
    with tf.Graph().as_default():
        xt = tf.constant(x)
        y = modeling.gelu(xt)
        (grad,) = tf.gradients(tf.reduce_sum(y * weights), [xt])
        with tf.Session() as sess:
            y_value, grad_value = sess.run([y, grad])
    np.testing.assert_allclose(y_value, np_gelu(x), rtol=0, atol=1e-12)
    np.testing.assert_allclose(grad_value, weights * np_gelu_slope(x), rtol=0, atol=1e-8)


def test_gelu_backward_keeps_only_the_input(gelu_kind):
    with tf.Graph().as_default() as graph:
        x = tf.placeholder(tf.float32, [8, 16])
        before = set(graph.get_operations())
        y = modeling.gelu(x)
        forward = _new_ops(graph, before)
        (grad,) = tf.gradients(y, [x], grad_ys=tf.ones_like(y))
        assert forward_tensors_read_by([grad], forward) == set()
        # Control: the textbook formula's gradient reads its intermediates.
        before = set(graph.get_operations())
        plain = 0.5 * x * (1.0 + tf.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))
        forward = _new_ops(graph, before)
        (plain_grad,) = tf.gradients(plain, [x], grad_ys=tf.ones_like(plain))
        assert len(forward_tensors_read_by([plain_grad], forward)) >= 3


def test_fused_gelu_dense_gradients_match_closed_form(gelu_kind):
    rng = np.random.RandomState(1)
    x = rng.randn(6, 5) * 2.0
    # The variables are float32: the reference uses the same rounded values.
    kernel = rng.randn(5, 3).astype(np.float32).astype(np.float64)
    bias = rng.randn(3).astype(np.float32).astype(np.float64)
    weights = rng.randn(6, 3)
    with tf.Graph().as_default():
        xt = tf.constant(x)
        output = modeling._gelu_dense(xt, 3)
        kernel_var, bias_var = tf.global_variables()
        loss = tf.reduce_sum(output * weights)
        grads = tf.gradients(loss, [xt, kernel_var, bias_var])
        with tf.Session() as sess:
            kernel_var.load(kernel, sess)
            bias_var.load(bias, sess)
            output_value, (d_x, d_kernel, d_bias) = sess.run([output, grads])
    np.testing.assert_allclose(output_value, np_gelu(x) @ kernel + bias, rtol=0, atol=1e-12)
    # The variables' gradients come back in their dtype, float32.
    np.testing.assert_allclose(d_kernel, np_gelu(x).T @ weights, rtol=1e-6)
    np.testing.assert_allclose(d_bias, weights.sum(0), rtol=1e-6)
    np.testing.assert_allclose(d_x, (weights @ kernel.T) * np_gelu_slope(x), rtol=0, atol=1e-8)


def test_fused_gelu_dense_backward_keeps_no_activation(gelu_kind):
    with tf.Graph().as_default() as graph:
        x = tf.placeholder(tf.float32, [8, 16])
        before = set(graph.get_operations())
        output = modeling._gelu_dense(x, 4)
        forward = _new_ops(graph, before)
        grads = tf.gradients(output, [x] + tf.trainable_variables(),
                             grad_ys=tf.ones_like(output))
        read = forward_tensors_read_by(grads, forward)
        # The kernel's value only: nothing of shape [8, 16] (the activation or
        # one of its intermediates).
        assert [t.shape.as_list() for t in read] == [[16, 4]]


def test_gelu_as_compiled_loops_or_as_separate_ops(gelu_kind):
    """Fused: the forward GELU is one XLA-compiled call and its backward
    another, with no tanh left outside them; written out: no calls."""
    with tf.Graph().as_default() as graph:
        x = tf.placeholder(tf.float32, [8, 16])
        y = modeling.gelu(x)
        forward = set(graph.get_operations())
        tf.gradients(y, [x], grad_ys=tf.ones_like(y))
        backward = set(graph.get_operations()) - forward
        if gelu_kind == "fused":
            assert len(_compiled_calls(forward)) == len(_compiled_calls(backward)) == 1
            assert not [op for op in graph.get_operations() if op.type == "Tanh"]
        else:
            assert not _compiled_calls(graph.get_operations())
            assert [op.type for op in forward].count("Tanh") == 1
        # Inside portable_gelu, always separate ops.
        with modeling.portable_gelu():
            before = set(graph.get_operations())
            modeling.gelu(x)
            assert not _compiled_calls(_new_ops(graph, before))


def test_fused_gelu_never_inside_an_xla_context(monkeypatch):
    """In an XLA context (a TPU computation) the ops stay separate: XLA
    compiles them there anyway."""
    from tensorflow.python.ops import control_flow_ops
    monkeypatch.setenv(modeling.FUSED_GELU_VARIABLE, "1")
    with tf.Graph().as_default() as graph:
        x = tf.placeholder(tf.float32, [4])
        context = control_flow_ops.XLAControlFlowContext()
        context.Enter()
        try:
            assert not modeling.fused_gelu_enabled()
            modeling.gelu(x)
        finally:
            context.Exit()
        assert not _compiled_calls(graph.get_operations())
        assert modeling.fused_gelu_enabled()


def test_fused_gelu_by_default_where_no_gpu_is_visible(monkeypatch):
    monkeypatch.delenv(modeling.FUSED_GELU_VARIABLE, raising=False)
    with tf.Graph().as_default():
        assert modeling.fused_gelu_enabled() == (not tf.config.list_physical_devices("GPU"))


def test_fused_and_written_out_gelu_train_alike(monkeypatch):
    """A small BERT's loss and gradients agree between the two GELUs to
    float32 rounding."""
    config = modeling.BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=2,
                                 num_attention_heads=2, intermediate_size=24)
    ids = np.random.RandomState(4).randint(0, 30, (3, 5))
    results = {}
    for setting in ("1", "0"):
        monkeypatch.setenv(modeling.FUSED_GELU_VARIABLE, setting)
        with tf.Graph().as_default():
            tf.set_random_seed(5)
            ids_t = tf.placeholder(tf.int32, [3, 5])
            model = modeling.BertModel(config, is_training=False, input_ids=ids_t)
            loss = tf.reduce_sum(tf.square(model.get_pooled_output()))
            grads = [tf.convert_to_tensor(g)
                     for g in tf.gradients(loss, tf.trainable_variables())]
            assert bool(_compiled_calls(tf.get_default_graph().get_operations())) == (
                setting == "1")
            with tf.Session() as sess:
                sess.run(tf.global_variables_initializer())
                results[setting] = sess.run([loss] + grads, {ids_t: ids})
    for fused, written_out in zip(*results.values()):
        np.testing.assert_allclose(fused, written_out, rtol=2e-5, atol=1e-7)


@pytest.mark.parametrize("seeded", [False, True])
def test_dropout_values_gradient_and_what_it_keeps(seeded):
    rate = 0.3
    x = np.random.RandomState(2).uniform(0.5, 1.5, (40, 50))  # No zeros.
    weights = np.random.RandomState(3).randn(40, 50)
    with tf.Graph().as_default() as graph:
        xt = tf.placeholder(tf.float64, x.shape)
        before = set(graph.get_operations())
        if seeded:
            with modeling.stateless_dropout_seed(tf.constant([7, 8])):
                y = modeling.dropout(xt, rate)
        else:
            y = modeling.dropout(xt, rate)
        forward = _new_ops(graph, before)
        (grad,) = tf.gradients(tf.reduce_sum(y * weights), [xt])
        read = forward_tensors_read_by([grad], forward)
        with tf.Session() as sess:
            y_value, grad_value = sess.run([y, grad], {xt: x})
    kept = y_value != 0
    assert 0.6 < kept.mean() < 0.8
    np.testing.assert_allclose(y_value, np.where(kept, x / (1 - rate), 0.0), rtol=1e-15)
    np.testing.assert_allclose(grad_value, np.where(kept, weights / (1 - rate), 0.0),
                               rtol=1e-15)
    # The boolean mask, besides the scalar scale.
    assert [t.dtype for t in read if t.shape.ndims] == [tf.bool]


def _bert_backward_reads(recompute_grad):
    """Forward tensors of a training BERT graph read by its gradients."""
    config = modeling.BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=2,
                                 num_attention_heads=2, intermediate_size=24)
    with tf.Graph().as_default() as graph:
        ids = tf.placeholder(tf.int32, [3, 5])
        model = modeling.BertModel(config, is_training=True, input_ids=ids,
                                   recompute_grad=recompute_grad)
        forward = set(graph.get_operations())
        loss = tf.reduce_sum(tf.square(model.get_pooled_output()))
        grads = tf.gradients(loss, tf.trainable_variables())
        assert all(g is not None for g in grads)
        return forward_tensors_read_by(grads, forward)


def test_bert_backward_keeps_one_intermediate_tensor_per_layer(gelu_kind):
    read = _bert_backward_reads(recompute_grad=False)
    intermediate = [t for t in read if t.shape.as_list() == [15, 24]]
    assert len(intermediate) == 2  # Each layer's pre-activation.
    assert all(t.op.name.endswith("intermediate/BiasAdd") for t in intermediate)


def test_recomputed_bert_backward_keeps_no_intermediate_tensor(gelu_kind):
    read = _bert_backward_reads(recompute_grad=True)
    assert not [t for t in read if 24 in t.shape.as_list()]
    assert not [t for t in read if t.shape.as_list() == [3, 2, 5, 5]]  # Attention.
    # Control: without recomputation the attention weights are kept.
    plain = _bert_backward_reads(recompute_grad=False)
    assert [t for t in plain if t.shape.as_list() == [3, 2, 5, 5]]
