"""The kernels of bert_ops.py and their memory-saving gradients, fused and
written out: their values, against NumPy references, and what they keep of
the forward pass; and the choice of fused kernels.

GELU, the feed-forward output projection, dropout and the fused LayerNorm
carry gradient overrides (and recomputed layers an IdentityN whose gradient
rebuilds the layer). Values are checked in float64 against finite differences and closed
forms computed here. What a backward pass keeps alive is read off the graph:
the forward tensors that the ops needed for the requested gradients consume
(the ops a session would actually run for them, as it prunes the rest).
"""

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import bert_ops
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


@pytest.fixture(params=[True, False], ids=["fused", "written_out"])
def fused(request):
    """Runs a test with a kernel as XLA-compiled loops and as separate ops."""
    return request.param


def _compiled_calls(ops):
    return [op for op in ops if op.type == "PartitionedCall"
            and op.get_attr("_XlaMustCompile")]


def test_gelu_gradient_matches_finite_differences(fused):
    x = np.linspace(-6.0, 6.0, 241)
    weights = np.random.RandomState(0).randn(x.size)
    with tf.Graph().as_default():
        xt = tf.constant(x)
        y = bert_ops.gelu(xt, fused)
        (grad,) = tf.gradients(tf.reduce_sum(y * weights), [xt])
        with tf.Session() as sess:
            y_value, grad_value = sess.run([y, grad])
    np.testing.assert_allclose(y_value, np_gelu(x), rtol=0, atol=1e-12)
    np.testing.assert_allclose(grad_value, weights * np_gelu_slope(x), rtol=0, atol=1e-8)


def test_fused_bfloat16_gelu_and_gradient_round_the_exact_values():
    """In bfloat16 the compiled GELU and its input gradient are within two
    bfloat16 steps (2^-7 relative) of the float64 values at the same bfloat16
    inputs (they compute in float32 and round once, so within half a step);
    near zero, within float32's cancellation in 1 + tanh. (Written out in
    bfloat16 ops, 1 + tanh cancels at bfloat16's precision instead.)"""
    x = np.linspace(-6.0, 6.0, 481)
    weights = np.random.RandomState(0).uniform(0.5, 2.0, x.size)
    with tf.Graph().as_default():
        xt = tf.cast(tf.constant(x, tf.float32), tf.bfloat16)
        wt = tf.cast(tf.constant(weights, tf.float32), tf.bfloat16)
        y = bert_ops.gelu(xt, fused=True)
        (grad,) = tf.gradients(y, [xt], grad_ys=wt)
        with tf.Session() as sess:
            values = sess.run([tf.cast(t, tf.float64) for t in (xt, wt, y, grad)])
    x_rounded, w_rounded, y_value, grad_value = values
    step = 2.0 ** -7
    np.testing.assert_allclose(y_value, np_gelu(x_rounded), rtol=2 * step, atol=1e-6)
    np.testing.assert_allclose(grad_value, w_rounded * np_gelu_slope(x_rounded),
                               rtol=2 * step, atol=2 * step)


def test_gelu_backward_keeps_only_the_input(fused):
    with tf.Graph().as_default() as graph:
        x = tf.placeholder(tf.float32, [8, 16])
        before = set(graph.get_operations())
        y = bert_ops.gelu(x, fused)
        forward = _new_ops(graph, before)
        (grad,) = tf.gradients(y, [x], grad_ys=tf.ones_like(y))
        assert forward_tensors_read_by([grad], forward) == set()
        # Control: the textbook formula's gradient reads its intermediates.
        before = set(graph.get_operations())
        plain = 0.5 * x * (1.0 + tf.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))
        forward = _new_ops(graph, before)
        (plain_grad,) = tf.gradients(plain, [x], grad_ys=tf.ones_like(plain))
        assert len(forward_tensors_read_by([plain_grad], forward)) >= 3


def test_fused_gelu_dense_gradients_match_closed_form(fused):
    rng = np.random.RandomState(1)
    x = rng.randn(6, 5) * 2.0
    # The variables are float32: the reference uses the same rounded values.
    kernel = rng.randn(5, 3).astype(np.float32).astype(np.float64)
    bias = rng.randn(3).astype(np.float32).astype(np.float64)
    weights = rng.randn(6, 3)
    with tf.Graph().as_default():
        xt = tf.constant(x)
        output = modeling._gelu_dense(xt, 3, fused_ops=bert_ops.FusedOps(gelu=fused))
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


def test_fused_gelu_dense_backward_keeps_no_activation(fused):
    with tf.Graph().as_default() as graph:
        x = tf.placeholder(tf.float32, [8, 16])
        before = set(graph.get_operations())
        output = modeling._gelu_dense(x, 4, fused_ops=bert_ops.FusedOps(gelu=fused))
        forward = _new_ops(graph, before)
        grads = tf.gradients(output, [x] + tf.trainable_variables(),
                             grad_ys=tf.ones_like(output))
        read = forward_tensors_read_by(grads, forward)
        # The kernel's value only: nothing of shape [8, 16] (the activation or
        # one of its intermediates).
        assert [t.shape.as_list() for t in read] == [[16, 4]]


def test_gelu_as_compiled_loops_or_as_separate_ops(fused):
    """Fused: the forward GELU is one XLA-compiled call and its backward
    another, with no tanh left outside them; written out: no calls."""
    with tf.Graph().as_default() as graph:
        x = tf.placeholder(tf.float32, [8, 16])
        y = bert_ops.gelu(x, fused)
        forward = set(graph.get_operations())
        tf.gradients(y, [x], grad_ys=tf.ones_like(y))
        backward = set(graph.get_operations()) - forward
        if fused:
            assert len(_compiled_calls(forward)) == len(_compiled_calls(backward)) == 1
            assert not [op for op in graph.get_operations() if op.type == "Tanh"]
        else:
            assert not _compiled_calls(graph.get_operations())
            assert [op.type for op in forward].count("Tanh") == 1


def test_bert_ops_never_fused_inside_an_xla_context():
    """In an XLA context (a TPU computation) the ops stay separate: XLA
    compiles them there anyway."""
    from tensorflow.python.ops import control_flow_ops
    with tf.Graph().as_default() as graph:
        x = tf.placeholder(tf.float32, [4, 8])
        context = control_flow_ops.XLAControlFlowContext()
        context.Enter()
        try:
            bert_ops.gelu(x, fused=True)
            bert_ops.dropout(x, 0.1, fused=True)
            bert_ops.layer_norm(x, tf.ones([8]), tf.zeros([8]), fused=True)
        finally:
            context.Exit()
        assert not _compiled_calls(graph.get_operations())
        bert_ops.gelu(x, fused=True)
        assert _compiled_calls(graph.get_operations())


def test_choose_fused_ops():
    everything = bert_ops.FusedOps(gelu=True, layer_norm=True, dropout=True)
    no_gpu = not tf.config.list_physical_devices("GPU")
    assert bert_ops.choose_fused_ops("auto") == (everything if no_gpu else bert_ops.FusedOps())
    assert bert_ops.choose_fused_ops(None) == bert_ops.choose_fused_ops("auto")
    assert bert_ops.choose_fused_ops("all") == everything
    assert bert_ops.choose_fused_ops("none") == bert_ops.FusedOps()
    assert bert_ops.choose_fused_ops(" GELU, dropout") == bert_ops.FusedOps(gelu=True,
                                                                          dropout=True)
    assert bert_ops.choose_fused_ops(everything) is everything
    assert str(bert_ops.FusedOps(layer_norm=True, dropout=True)) == "layer_norm,dropout"
    assert str(bert_ops.FusedOps()) == "none"
    with pytest.raises(ValueError, match="softmax"):
        bert_ops.choose_fused_ops("gelu,softmax")
    from scriptkit import errors
    from scriptkit import training
    with pytest.raises(errors.InputError, match="^--fused_ops: unknown fused op"):
        training.choose_fused_ops("gelu,softmax")
    assert training.choose_fused_ops("none", start_xla=False) == bert_ops.FusedOps()


def test_auto_leaves_an_inference_graph_to_onednn():
    """"auto" for a graph that only infers: nothing compiled where oneDNN
    rewrites graphs (and no GPU is visible), the training choice elsewhere;
    settings other than "auto" mean the same either way."""
    from scriptkit import training
    everything = bert_ops.FusedOps(gelu=True, layer_norm=True, dropout=True)
    no_gpu = not tf.config.list_physical_devices("GPU")
    expected = (everything if no_gpu and not bert_ops.onednn_rewrites_graphs()
                else bert_ops.FusedOps())
    assert bert_ops.choose_fused_ops("auto", training=False) == expected
    assert training.choose_fused_ops("auto", start_xla=False, training=False) == expected
    assert bert_ops.choose_fused_ops("all", training=False) == everything
    assert bert_ops.choose_fused_ops("gelu", training=False) == bert_ops.FusedOps(gelu=True)
    config = modeling.BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=1,
                                 num_attention_heads=2, intermediate_size=24)
    for is_training in (False, True):
        with tf.Graph().as_default():
            model = modeling.BertModel(config, is_training=is_training,
                                       input_ids=tf.placeholder(tf.int32, [3, 5]))
        assert model.fused_ops == bert_ops.choose_fused_ops("auto", training=is_training)


def _run_with_rewrites(fetch, feed):
    """(value of `fetch`, the nodes of the graph the session ran, after
    TensorFlow's rewrites)."""
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        metadata = tf.RunMetadata()
        value = sess.run(fetch, feed, options=tf.RunOptions(output_partition_graphs=True),
                         run_metadata=metadata)
    return value, [node for graph in metadata.partition_graphs for node in graph.node]


@pytest.mark.skipif(not bert_ops.onednn_rewrites_graphs(), reason="oneDNN is off here")
def test_onednn_runs_the_written_out_gelu_inside_the_matmul():
    """A feed-forward block of an inference graph, GELU written out: oneDNN
    runs the first matmul, its bias and the GELU as one kernel (no tanh op
    is left), and the result is GELU's, against NumPy in float64."""
    rng = np.random.RandomState(7)
    x, w1, w2 = (rng.randn(*shape).astype(np.float32)
                 for shape in ((16, 32), (32, 64), (64, 8)))
    b1 = rng.randn(64).astype(np.float32)
    with tf.Graph().as_default():
        xt = tf.placeholder(tf.float32, x.shape)
        pre_activation = tf.nn.bias_add(tf.matmul(xt, tf.Variable(w1)), tf.Variable(b1))
        output = bert_ops.gelu_matmul(pre_activation, tf.Variable(w2), fused=False)
        value, nodes = _run_with_rewrites(output, {xt: x})
    fused = [list(node.attr["fused_ops"].list.s) for node in nodes if "FusedMatMul" in node.op]
    assert fused == [[b"BiasAdd", b"GeluApproximate"]]
    assert not [node for node in nodes if node.op == "Tanh"]
    x64 = x.astype(np.float64)
    expected = np_gelu(x64 @ w1 + b1) @ w2
    np.testing.assert_allclose(value, expected, rtol=1e-4, atol=1e-4)


def test_written_out_gelu_rounds_as_x_times_its_cdf():
    """The written-out GELU, 0.5 x (1 + tanh(u)) (the form oneDNN fuses),
    gives x * cdf(x) (the compiled loop's form) bit for bit."""
    x = np.concatenate([np.linspace(-12.0, 12.0, 4801),
                        np.random.RandomState(8).randn(4000) * 3.0]).astype(np.float32)
    with tf.Graph().as_default():
        xt = tf.placeholder(tf.float32, x.shape)
        written_out, cdf_form = tf.Session().run(
            [bert_ops._gelu_written_out(xt), xt * bert_ops._gelu_cdf(xt)], {xt: x})
    np.testing.assert_array_equal(written_out, cdf_form)


def test_layer_norm_keeps_bert_epsilon_on_rows_of_small_spread(fused):
    """Rows with a standard deviation of 1e-3 are normalized with BERT's
    epsilon, 1e-12. TensorFlow's oneDNN LayerNorm rewrite (2.15 to 2.21)
    computes with 1e-3, which would shrink them about 30-fold: the
    written-out LayerNorm must not take the form that it rewrites."""
    rng = np.random.RandomState(9)
    x = (rng.randn(8, 64) * 1e-3 + 0.5).astype(np.float32)
    gamma = rng.uniform(0.5, 1.5, 64).astype(np.float32)
    beta = rng.randn(64).astype(np.float32)
    with tf.Graph().as_default():
        xt = tf.placeholder(tf.float32, x.shape)
        output = bert_ops.layer_norm(xt, tf.Variable(gamma), tf.Variable(beta), fused)
        value, _ = _run_with_rewrites(output, {xt: x})
    expected = np_layer_norm(x.astype(np.float64), gamma, beta)
    np.testing.assert_allclose(value, expected, rtol=1e-3, atol=1e-3)


def _model_graph_ops(fused_ops):
    config = modeling.BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=1,
                                 num_attention_heads=2, intermediate_size=24)
    with tf.Graph().as_default() as graph:
        model = modeling.BertModel(config, is_training=True,
                                   input_ids=tf.placeholder(tf.int32, [3, 5]),
                                   fused_ops=fused_ops)
        return model.fused_ops, graph.get_operations()


def test_bert_model_builds_the_kernels_it_is_given():
    """The choice reaches every kernel of the model: compiled calls under
    the dropout scopes only with dropout fused, none with nothing fused."""
    chosen, ops = _model_graph_ops("dropout")
    assert chosen == bert_ops.FusedOps(dropout=True)
    calls = _compiled_calls(ops)
    assert calls and all("dropout" in op.name for op in calls)
    chosen, ops = _model_graph_ops(bert_ops.FusedOps())
    assert not _compiled_calls(ops)
    assert [op.type for op in ops].count("Tanh") == 2  # The GELU and the pooler.


def test_compiled_and_written_out_models_train_alike():
    """A small BERT's loss and gradients agree between GELU and LayerNorm as
    compiled loops and as separate ops, to float32 rounding."""
    config = modeling.BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=2,
                                 num_attention_heads=2, intermediate_size=24)
    ids = np.random.RandomState(4).randint(0, 30, (3, 5))
    results = {}
    for setting in ("all", "none"):
        with tf.Graph().as_default():
            tf.set_random_seed(5)
            ids_t = tf.placeholder(tf.int32, [3, 5])
            model = modeling.BertModel(config, is_training=False, input_ids=ids_t,
                                       fused_ops=setting)
            loss = tf.reduce_sum(tf.square(model.get_pooled_output()))
            grads = [tf.convert_to_tensor(g)
                     for g in tf.gradients(loss, tf.trainable_variables())]
            assert bool(_compiled_calls(tf.get_default_graph().get_operations())) == (
                setting == "all")
            with tf.Session() as sess:
                sess.run(tf.global_variables_initializer())
                results[setting] = sess.run([loss] + grads, {ids_t: ids})
    for fused_value, written_out in zip(*results.values()):
        np.testing.assert_allclose(fused_value, written_out, rtol=2e-5, atol=1e-7)


@pytest.mark.parametrize("seeded", [False, True])
def test_dropout_values_gradient_and_what_it_keeps(seeded, fused):
    rate = 0.3
    x = np.random.RandomState(2).uniform(0.5, 1.5, (40, 50))  # No zeros.
    weights = np.random.RandomState(3).randn(40, 50)
    with tf.Graph().as_default() as graph:
        xt = tf.placeholder(tf.float64, x.shape)
        before = set(graph.get_operations())
        if seeded:
            with bert_ops.stateless_dropout_seed(tf.constant([7, 8])):
                y = bert_ops.dropout(xt, rate, fused)
        else:
            y = bert_ops.dropout(xt, rate, fused)
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
    assert bool(_compiled_calls(forward)) == fused


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_dropout_drops_at_the_rate_and_draws_anew(dtype, fused):
    """Over 2^20 values the dropped fraction is the rate within 5 standard
    deviations (1.5e-3 at rate 0.1, far below bfloat16's 2^-7 step); kept
    values are scaled by 1 / (1 - rate) in the input's dtype; each run draws
    a new mask, and a stateless seed gives the same mask every run."""
    rate = 0.1
    shape = (1024, 1024)
    with tf.Graph().as_default():
        x = tf.ones(shape, dtype)
        unseeded = bert_ops.dropout(x, rate, fused)
        with bert_ops.stateless_dropout_seed(tf.constant([3, 9])):
            seeded = bert_ops.dropout(x, rate, fused)
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


def _bert_backward_reads(recompute_grad, fused):
    """Forward tensors of a training BERT graph read by its gradients, with
    every kernel fused or none."""
    config = modeling.BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=2,
                                 num_attention_heads=2, intermediate_size=24)
    with tf.Graph().as_default() as graph:
        ids = tf.placeholder(tf.int32, [3, 5])
        model = modeling.BertModel(config, is_training=True, input_ids=ids,
                                   recompute_grad=recompute_grad,
                                   fused_ops="all" if fused else "none")
        forward = set(graph.get_operations())
        loss = tf.reduce_sum(tf.square(model.get_pooled_output()))
        grads = tf.gradients(loss, tf.trainable_variables())
        assert all(g is not None for g in grads)
        return forward_tensors_read_by(grads, forward)


def test_bert_backward_keeps_one_intermediate_tensor_per_layer(fused):
    read = _bert_backward_reads(recompute_grad=False, fused=fused)
    intermediate = [t for t in read if t.shape.as_list() == [15, 24]]
    assert len(intermediate) == 2  # Each layer's pre-activation.
    assert all(t.op.name.endswith("intermediate/BiasAdd") for t in intermediate)


def test_recomputed_bert_backward_keeps_no_intermediate_tensor(fused):
    read = _bert_backward_reads(recompute_grad=True, fused=fused)
    assert not [t for t in read if 24 in t.shape.as_list()]
    assert not [t for t in read if t.shape.as_list() == [3, 2, 5, 5]]  # Attention.
    # Control: without recomputation the attention weights are kept.
    plain = _bert_backward_reads(recompute_grad=False, fused=fused)
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


@pytest.mark.parametrize("shape", [(6, 32), (2, 3, 32)])
def test_layer_norm_values_and_gradients(shape, fused):
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
        y = modeling.layer_norm(xt, name="ln", fused_ops=bert_ops.FusedOps(layer_norm=fused))
        forward = _new_ops(graph, before)
        assert bool(_compiled_calls(forward)) == fused
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


def test_bfloat16_layer_norm_backward_keeps_the_bfloat16_input(fused):
    """bfloat16 LayerNorm: the values round the float32 ones; the fused
    backward pass keeps the bfloat16 input and two per-row statistics, the
    written-out one a float32 copy of the input."""
    x = np.random.RandomState(6).randn(8, 64).astype(np.float32)
    with tf.Graph().as_default() as graph:
        xt = tf.placeholder(tf.float32, x.shape)
        x16 = tf.cast(xt, tf.bfloat16)
        before = set(graph.get_operations())
        y = bert_ops.layer_norm(x16, tf.ones([64]), tf.zeros([64]), fused)
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
    if fused:
        assert full_size == {tf.bfloat16}
        assert sorted(t.shape.as_list() for t in read if t.dtype == tf.float32
                      and t.shape.ndims == 2) == [[8, 1], [8, 1]]
    else:
        assert tf.float32 in full_size
