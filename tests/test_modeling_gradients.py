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


def test_fused_bfloat16_gelu_and_gradient_round_the_exact_values(monkeypatch):
    """In bfloat16 the compiled GELU and its input gradient are within two
    bfloat16 steps (2^-7 relative) of the float64 values at the same bfloat16
    inputs (they compute in float32 and round once, so within half a step);
    near zero, within float32's cancellation in 1 + tanh. (Written out in
    bfloat16 ops, 1 + tanh cancels at bfloat16's precision instead.)"""
    monkeypatch.setenv(modeling.FUSED_GELU_VARIABLE, "1")
    x = np.linspace(-6.0, 6.0, 481)
    weights = np.random.RandomState(0).uniform(0.5, 2.0, x.size)
    with tf.Graph().as_default():
        xt = tf.cast(tf.constant(x, tf.float32), tf.bfloat16)
        wt = tf.cast(tf.constant(weights, tf.float32), tf.bfloat16)
        y = modeling.gelu(xt)
        (grad,) = tf.gradients(y, [xt], grad_ys=wt)
        with tf.Session() as sess:
            values = sess.run([tf.cast(t, tf.float64) for t in (xt, wt, y, grad)])
    x_rounded, w_rounded, y_value, grad_value = values
    step = 2.0 ** -7
    np.testing.assert_allclose(y_value, np_gelu(x_rounded), rtol=2 * step, atol=1e-6)
    np.testing.assert_allclose(grad_value, w_rounded * np_gelu_slope(x_rounded),
                               rtol=2 * step, atol=2 * step)


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
        # Inside portable_ops, always separate ops.
        with modeling.portable_ops():
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


def test_compiled_and_written_out_models_train_alike(monkeypatch):
    """A small BERT's loss and gradients agree between GELU and LayerNorm as
    compiled loops and as separate ops, to float32 rounding."""
    config = modeling.BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=2,
                                 num_attention_heads=2, intermediate_size=24)
    ids = np.random.RandomState(4).randint(0, 30, (3, 5))
    results = {}
    for setting in ("1", "0"):
        for variable in modeling.COMPILED_LOOP_VARIABLES:
            monkeypatch.setenv(variable, setting)
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


@pytest.fixture(params=["fused", "written_out"])
def dropout_kind(request, monkeypatch):
    """Runs a test with dropout's 16-bit draws and compiled loops, and with
    tf.nn.dropout's draw and separate ops."""
    monkeypatch.setenv(modeling.FUSED_DROPOUT_VARIABLE,
                       "1" if request.param == "fused" else "0")
    return request.param


@pytest.mark.parametrize("seeded", [False, True])
def test_dropout_values_gradient_and_what_it_keeps(seeded, dropout_kind):
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
    assert bool(_compiled_calls(forward)) == (dropout_kind == "fused")


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_dropout_drops_at_the_rate_and_draws_anew(dtype, dropout_kind):
    """Over 2^20 values the dropped fraction is the rate within 5 standard
    deviations (1.5e-3 at rate 0.1, far below bfloat16's 2^-7 step); kept
    values are scaled by 1 / (1 - rate) in the input's dtype; each run draws
    a new mask, and a stateless seed gives the same mask every run."""
    rate = 0.1
    shape = (1024, 1024)
    with tf.Graph().as_default():
        x = tf.ones(shape, dtype)
        unseeded = modeling.dropout(x, rate)
        with modeling.stateless_dropout_seed(tf.constant([3, 9])):
            seeded = modeling.dropout(x, rate)
        with tf.Session() as sess:
            first, first_seeded = sess.run([tf.cast(unseeded, tf.float32),
                                            tf.cast(seeded, tf.float32)])
            second, second_seeded = sess.run([tf.cast(unseeded, tf.float32),
                                              tf.cast(seeded, tf.float32)])
            scale = sess.run(tf.cast(tf.constant(1.0 / (1.0 - rate), dtype), tf.float32))
    for values in (first, first_seeded):
        assert set(np.unique(values)) == {0.0, scale}
        assert abs((values == 0).mean() - rate) < 5 * np.sqrt(rate * (1 - rate) / values.size)
    assert (first != second).mean() > 0.1
    np.testing.assert_array_equal(first_seeded, second_seeded)


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


# ---------------------------------------------------------------------------
# LayerNorm.

def np_layer_norm(x, gamma, beta):
    mean = x.mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(x.var(-1, keepdims=True) + 1e-12) * gamma + beta


def np_layer_norm_gradients(x, gamma, grad):
    """Closed-form gradients of sum(grad * layer_norm(x)) for x, gamma, beta."""
    std = np.sqrt(x.var(-1, keepdims=True) + 1e-12)
    normalized = (x - x.mean(-1, keepdims=True)) / std
    g = grad * gamma
    grad_x = (g - g.mean(-1, keepdims=True)
              - normalized * (g * normalized).mean(-1, keepdims=True)) / std
    rows = tuple(range(x.ndim - 1))
    return grad_x, (grad * normalized).sum(rows), grad.sum(rows)


@pytest.fixture(params=["fused", "written_out"])
def layer_norm_kind(request, monkeypatch):
    """Runs a test with LayerNorm as XLA-compiled loops and as separate ops."""
    monkeypatch.setenv(modeling.FUSED_LAYER_NORM_VARIABLE,
                       "1" if request.param == "fused" else "0")
    return request.param


@pytest.mark.parametrize("shape", [(6, 32), (2, 3, 32)])
def test_layer_norm_values_and_gradients(shape, layer_norm_kind):
    """Values and the gradients of input, gamma and beta against NumPy's
    float64 closed forms, for matrices and the embeddings' rank 3."""
    rng = np.random.RandomState(5)
    x = (rng.randn(*shape) * 3.0 + 1.0).astype(np.float32)
    gamma = rng.uniform(0.5, 1.5, shape[-1]).astype(np.float32)
    beta = rng.randn(shape[-1]).astype(np.float32)
    grad = rng.randn(*shape).astype(np.float32)
    with tf.Graph().as_default() as graph:
        xt = tf.placeholder(tf.float32, shape)
        before = set(graph.get_operations())
        y = modeling.layer_norm(xt, name="ln")
        forward = _new_ops(graph, before)
        assert bool(_compiled_calls(forward)) == (layer_norm_kind == "fused")
        gamma_var, beta_var = (tf.global_variables("ln/gamma")[0],
                               tf.global_variables("ln/beta")[0])
        grads = tf.gradients(y, [xt, gamma_var, beta_var], grad_ys=grad)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            gamma_var.load(gamma, sess)
            beta_var.load(beta, sess)
            values = sess.run([y] + grads, {xt: x})
    x64, gamma64 = x.astype(np.float64), gamma.astype(np.float64)
    expected = [np_layer_norm(x64, gamma64, beta)] + list(
        np_layer_norm_gradients(x64, gamma64, grad.astype(np.float64)))
    for value, reference in zip(values, expected):
        assert value.shape == reference.shape
        np.testing.assert_allclose(value, reference, rtol=1e-5, atol=1e-5)


def test_bfloat16_layer_norm_backward_keeps_the_bfloat16_input(layer_norm_kind):
    """bfloat16 LayerNorm: the values round the float32 ones; the fused
    backward pass keeps the bfloat16 input and two per-row statistics, the
    written-out one a float32 copy of the input."""
    x = np.random.RandomState(6).randn(8, 64).astype(np.float32)
    with tf.Graph().as_default() as graph:
        xt = tf.placeholder(tf.float32, x.shape)
        x16 = tf.cast(xt, tf.bfloat16)
        before = set(graph.get_operations())
        y = modeling.layer_norm(x16)
        forward = _new_ops(graph, before)
        assert y.dtype == tf.bfloat16
        (grad,) = tf.gradients(tf.reduce_sum(tf.cast(y, tf.float32) ** 2), [x16])
        read = forward_tensors_read_by([grad], forward)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            y_value, x_rounded = sess.run([tf.cast(y, tf.float32), tf.cast(x16, tf.float32)],
                                          {xt: x})
    np.testing.assert_allclose(y_value, np_layer_norm(x_rounded.astype(np.float64), 1.0, 0.0),
                               rtol=2.0 ** -7, atol=2.0 ** -7)
    full_size = {t.dtype for t in read | {x16} if t.shape.as_list() == [8, 64]}
    if layer_norm_kind == "fused":
        assert full_size == {tf.bfloat16}
        assert sorted(t.shape.as_list() for t in read if t.dtype == tf.float32
                      and t.shape.ndims == 2) == [[8, 1], [8, 1]]
    else:
        assert tf.float32 in full_size


def test_layer_norm_separate_inside_portable_ops(monkeypatch):
    monkeypatch.setenv(modeling.FUSED_LAYER_NORM_VARIABLE, "1")
    with tf.Graph().as_default() as graph:
        x = tf.placeholder(tf.float32, [4, 8])
        with modeling.portable_ops():
            modeling.layer_norm(x)
        assert not _compiled_calls(graph.get_operations())
        modeling.layer_norm(x)
        assert _compiled_calls(graph.get_operations())
