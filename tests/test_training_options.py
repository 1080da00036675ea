"""Equivalence tests for the memory and speed options (issue 8):
recomputation, gradient accumulation, mixed precision and loss scaling."""

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import bert_ops
from scriptkit import mixed_precision
import modeling
import optimization

CONFIG = modeling.BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=3,
                             num_attention_heads=4, intermediate_size=64,
                             max_position_embeddings=16, type_vocab_size=2)
RNG = np.random.RandomState(0)
IDS = RNG.randint(0, 50, (4, 8)).astype(np.int32)
MASK = np.array([[1] * 8, [1] * 5 + [0] * 3, [1] * 2 + [0] * 6, [1] * 7 + [0]], np.int32)
LABELS = np.array([0, 1, 1, 0], np.int32)


def _classifier_loss(model, labels):
    """Mean cross-entropy of a 2-class head on the pooled output."""
    pooled = model.get_pooled_output()
    weights = tf.get_variable("cls_w", [2, CONFIG.hidden_size],
                              initializer=tf.truncated_normal_initializer(stddev=0.02))
    logits = tf.matmul(pooled, weights, transpose_b=True)
    return tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))


def _build(is_training, recompute=False, seed=None, compute_type=tf.float32):
    ids = tf.placeholder(tf.int32, [None, 8])
    mask = tf.placeholder(tf.int32, [None, 8])
    labels = tf.placeholder(tf.int32, [None])
    if seed is not None:
        with bert_ops.stateless_dropout_seed(tf.constant(seed, tf.int32)):
            model = modeling.BertModel(CONFIG, is_training, ids, mask,
                                       recompute_grad=recompute, compute_type=compute_type)
    else:
        model = modeling.BertModel(CONFIG, is_training, ids, mask,
                                   recompute_grad=recompute, compute_type=compute_type)
    loss = _classifier_loss(model, labels)
    return (ids, mask, labels), model, loss


def _initial_values():
    """Random initial values of every trainable variable, by name."""
    with tf.Graph().as_default():
        tf.set_random_seed(1234)  # The same starting point in every run.
        _build(False)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            return _read(sess)


def _read(sess):
    """Every trainable variable's value, by name, in one run (a run per
    variable would build and optimise an executor for each)."""
    tvars = tf.trainable_variables()
    return dict(zip([v.name for v in tvars], sess.run(tvars)))


VALUES = _initial_values()


def _load(sess, values):
    """Sets every trainable variable to `values` (by name) in one run, as
    Variable.load does one at a time: its initializer fed the value."""
    tvars = tf.trainable_variables()
    sess.run([v.initializer for v in tvars],
             {v.initializer.inputs[1]: values[v.name] for v in tvars})


def _gradients(recompute, is_training=False, seed=None):
    with tf.Graph().as_default():
        (ids, mask, labels), _, loss = _build(is_training, recompute, seed)
        tvars = tf.trainable_variables()
        grads = [tf.convert_to_tensor(g) for g in tf.gradients(loss, tvars)]
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            _load(sess, VALUES)
            feed = {ids: IDS, mask: MASK, labels: LABELS}
            return dict(zip([v.name for v in tvars], sess.run(grads, feed)))


def test_recompute_grad_gives_identical_gradients():
    plain = _gradients(recompute=False)
    recomputed = _gradients(recompute=True)
    assert set(plain) == set(recomputed)
    for name in plain:
        np.testing.assert_allclose(recomputed[name], plain[name], rtol=1e-5, atol=1e-7,
                                   err_msg=name)


def _ancestors(op):
    """Every op that `op` waits for: its data and control inputs, transitively."""
    seen, stack = set(), [op]
    while stack:
        current = stack.pop()
        for parent in [t.op for t in current.inputs] + list(current.control_inputs):
            if parent not in seen:
                seen.add(parent)
                stack.append(parent)
    return seen


def test_recompute_grad_finishes_a_layer_before_recomputing_the_next():
    """The recomputation of layer k-1 may start only once every weight
    gradient of layer k exists; otherwise the executor may postpone those
    gradients and keep layer k's temporaries alive meanwhile."""
    with tf.Graph().as_default() as graph:
        _, _, loss = _build(True, recompute=True, seed=[3, 4])
        tvars = tf.trainable_variables()
        grads = dict(zip([v.op.name for v in tvars], tf.gradients(loss, tvars)))
        for k in range(1, CONFIG.num_hidden_layers):
            upper = [g.op for name, g in grads.items()
                     if name.startswith("bert/encoder/layer_%d/" % k)]
            assert len(upper) == 16  # 6 kernels, 6 biases, 2 LayerNorms x 2.
            prefix = "gradients/bert/encoder/layer_%d/IdentityN_grad/" % (k - 1)
            recomputed = [op for op in graph.get_operations()
                          if op.name.startswith(prefix) and op.type == "MatMul"
                          and "gradients" not in op.name[len(prefix):]]
            assert len(recomputed) == 6  # query, key, value, output, intermediate, output.
            for op in recomputed:
                missing = set(upper) - _ancestors(op)
                assert not missing, (op.name, sorted(m.name for m in missing))


def test_recompute_grad_skips_the_feed_forward_output_projection():
    """Each recomputed layer keeps the input of its last LayerNorm, so the
    backward pass needs 5 of the layer's 6 dense matmuls again: not the
    feed-forward output projection, whose gradient needs only its input
    (dropout on, shapes known when the graph is built, as in training)."""
    with tf.Graph().as_default() as graph:
        ids = tf.placeholder(tf.int32, [4, 8])
        with bert_ops.stateless_dropout_seed(tf.constant([3, 4], tf.int32)):
            model = modeling.BertModel(CONFIG, True, ids, recompute_grad=True)
        loss = _classifier_loss(model, tf.constant(LABELS))
        needed = set()
        for grad in tf.gradients(loss, tf.trainable_variables()):
            needed |= _ancestors(grad.op) | {grad.op}
        for k in range(CONFIG.num_hidden_layers):
            prefix = "gradients/bert/encoder/layer_%d/IdentityN_grad/" % k
            recomputed = [op for op in graph.get_operations()
                          if op.name.startswith(prefix) and op.type == "MatMul"
                          and "gradients" not in op.name[len(prefix):]]
            assert len(recomputed) == 6
            skipped = [op.name[len(prefix):] for op in recomputed if op not in needed]
            assert len(skipped) == 1 and skipped[0].startswith("output"), skipped


def test_recompute_grad_reuses_dropout_masks():
    """With dropout on, the recomputed backward pass must see the forward
    pass's masks: the gradient must match a finite difference of the loss
    evaluated with the same (fed) dropout seeds."""
    with tf.Graph().as_default() as graph:
        (ids, mask, labels), model, _ = _build(True, recompute=True, seed=[3, 4])
        # A loss with a large gradient along the probe direction keeps the
        # float32 finite difference far above its rounding error.
        loss = tf.reduce_sum(tf.square(model.get_sequence_output()))
        pairs = [(g, v) for g, v in zip(tf.gradients(loss, tf.trainable_variables()),
                                        tf.trainable_variables()) if g is not None]
        grads = [tf.convert_to_tensor(g) for g, _ in pairs]
        tvars = [v for _, v in pairs]
        seeds = [op.outputs[0] for op in graph.get_operations()
                 if op.name.endswith("dropout_seed") and op.type != "Const"]
        assert len(seeds) == CONFIG.num_hidden_layers
        feed = {ids: IDS, mask: MASK, labels: LABELS}
        feed.update({s: np.array([11 + i, 5], np.int32) for i, s in enumerate(seeds)})
        direction = [np.random.RandomState(1).randn(*v.shape.as_list()).astype(np.float32)
                     for v in tvars]
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            _load(sess, VALUES)
            analytic = sum(float((g * d).sum())
                           for g, d in zip(sess.run(grads, feed), direction))
            eps = 1e-3

            def loss_at(step):
                for var, d in zip(tvars, direction):
                    var.load(VALUES[var.name] + step * d, sess)
                return float(sess.run(loss, feed))

            def central_difference(step):
                return (loss_at(step) - loss_at(-step)) / (2 * step)

            # Richardson extrapolation cancels the O(eps^2) curvature term.
            numeric = (4 * central_difference(eps / 2) - central_difference(eps)) / 3
    assert abs(analytic) > 10.0
    assert analytic == pytest.approx(numeric, rel=1e-2)


def _train(batches, accumulation_steps, num_updates, optimizer_name="adamw"):
    """Runs the train op once per batch; returns variables and global step."""
    with tf.Graph().as_default():
        (ids, mask, labels), _, loss = _build(False)
        # Scaling the loss down makes gradients comparable to Adam's epsilon,
        # so the update depends on the gradient's scale (Adam is otherwise
        # scale-invariant and would hide a sum-instead-of-mean bug).
        train_op = optimization.create_optimizer(
            loss * 1e-4, 1e-2, num_train_steps=10, num_warmup_steps=1, use_tpu=False,
            gradient_accumulation_steps=accumulation_steps, optimizer_name=optimizer_name)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            _load(sess, VALUES)
            steps = []
            for batch in batches:
                sess.run(train_op, {ids: IDS[batch], mask: MASK[batch],
                                    labels: LABELS[batch]})
                steps.append(sess.run(tf.train.get_global_step()))
            values = _read(sess)
    return values, steps


@pytest.mark.parametrize("optimizer_name", optimization.OPTIMIZERS)
def test_gradient_accumulation_equals_large_batch(optimizer_name):
    full = [slice(0, 4)] * 3
    micro = [slice(0, 2), slice(2, 4)] * 3
    big, big_steps = _train(full, 1, 3, optimizer_name)
    accumulated, acc_steps = _train(micro, 2, 3, optimizer_name)
    # global_step counts optimizer updates: it advances every 2nd micro-batch.
    assert big_steps == [1, 2, 3]
    assert acc_steps == [0, 1, 1, 2, 2, 3]
    moved = max(np.abs(big[k] - VALUES[k]).max() for k in big)
    assert moved > 1e-4
    for name in big:
        np.testing.assert_allclose(accumulated[name], big[name], rtol=1e-4, atol=1e-6,
                                   err_msg=name)


@pytest.mark.parametrize("compute_type,tolerance", [(tf.float16, 2e-2), (tf.bfloat16, 1e-1)])
def test_reduced_precision_matches_float32(compute_type, tolerance):
    outputs = {}
    for dtype in (tf.float32, compute_type):
        with tf.Graph().as_default():
            (ids, mask, _), model, _ = _build(False, compute_type=dtype)
            # Variables (and so checkpoints) stay float32.
            assert all(v.dtype.base_dtype == tf.float32 for v in tf.global_variables())
            assert model.get_sequence_output().dtype == tf.float32
            with tf.Session() as sess:
                sess.run(tf.global_variables_initializer())
                _load(sess, VALUES)
                outputs[dtype] = sess.run(model.get_sequence_output(),
                                          {ids: IDS, mask: MASK})
    np.testing.assert_allclose(outputs[compute_type], outputs[tf.float32], atol=tolerance)


def test_dynamic_loss_scale_skips_overflow_and_adapts():
    with tf.Graph().as_default():
        weight = tf.get_variable("w", initializer=tf.constant([1.0, 2.0]))
        factor = tf.placeholder(tf.float32, [])
        loss = tf.reduce_sum(weight * factor)
        scale = mixed_precision.DynamicLossScale(initial_scale=8.0, increment_period=2)
        train_op = optimization.create_optimizer(loss, 0.1, 100, 0, False,
                                                 loss_scale_manager=scale)
        step = tf.train.get_global_step()
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(train_op, {factor: np.inf})
            # Overflow: the update is skipped, the step is not consumed and
            # the scale halves.
            assert sess.run(step) == 0
            np.testing.assert_array_equal(sess.run(weight), [1.0, 2.0])
            assert sess.run(scale.scale) == 4.0
            sess.run(train_op, {factor: 1.0})
            assert sess.run(step) == 1
            assert not np.array_equal(sess.run(weight), [1.0, 2.0])
            sess.run(train_op, {factor: 1.0})
            # Two finite steps in a row double the scale.
            assert sess.run(scale.scale) == 8.0


def test_accumulation_resumes_exactly_from_a_mid_cycle_checkpoint(tmp_path):
    """Accumulators and the micro-batch counter are checkpointed: stopping
    after the first of two micro-batches and restoring gives the same
    variables as running straight through."""
    micro = [slice(0, 2), slice(2, 4), slice(0, 2), slice(2, 4)]
    straight, straight_steps = _train(micro, 2, 2)

    def run(batches, restore_from=None, save_to=None):
        with tf.Graph().as_default():
            (ids, mask, labels), _, loss = _build(False)
            train_op = optimization.create_optimizer(
                loss * 1e-4, 1e-2, num_train_steps=10, num_warmup_steps=1, use_tpu=False,
                gradient_accumulation_steps=2)
            saver = tf.train.Saver()
            with tf.Session() as sess:
                if restore_from:
                    saver.restore(sess, restore_from)
                else:
                    sess.run(tf.global_variables_initializer())
                    _load(sess, VALUES)
                for batch in batches:
                    sess.run(train_op, {ids: IDS[batch], mask: MASK[batch],
                                        labels: LABELS[batch]})
                if save_to:
                    saver.save(sess, save_to)
                return (_read(sess),
                        sess.run(tf.train.get_global_step()))

    checkpoint = str(tmp_path / "mid_cycle.ckpt")
    _, step_after_first = run(micro[:3], save_to=checkpoint)
    assert step_after_first == 1  # one update done, one micro-batch pending
    resumed, final_step = run(micro[3:], restore_from=checkpoint)
    assert final_step == straight_steps[-1] == 2
    for name in straight:
        np.testing.assert_allclose(resumed[name], straight[name], rtol=1e-6, atol=1e-7,
                                   err_msg=name)


# Prints the bytes glibc has mapped with mmap after three runs that each
# create and free a 64 MiB tensor, less those before the first run; with
# "flag", after script_runner.limit_memory_fragmentation().
_FRAGMENTATION_CHILD = """
import sys
sys.path[:0] = [%r, %r]
from scriptkit import quiet_tf
from scriptkit import script_runner
import tensorflow.compat.v1 as tf
from malloc_stats import mmapped_bytes
tf.disable_eager_execution()

if sys.argv[1] == "flag":
    assert script_runner.limit_memory_fragmentation()
with tf.Graph().as_default(), tf.Session() as sess:
    total = tf.reduce_sum(tf.random.normal([4096, 4096]) * 2.0)
    before = mmapped_bytes()
    for _ in range(3):
        sess.run(total)
    print(mmapped_bytes() - before)
"""


def test_limit_memory_fragmentation_returns_freed_tensors_on_onednn():
    """On oneDNN TensorFlow pools large tensors (the 64 MiB stays mapped
    after it is freed); with the flag they come from malloc and their
    mapping goes back to the system when freed."""
    import os
    import subprocess
    import sys

    import malloc_stats
    from scriptkit import quiet_tf
    if quiet_tf.use_onednn_by_default({}) is None:
        pytest.skip("oneDNN is x86-64 Linux only here")
    if malloc_stats.mmapped_bytes() is None:
        pytest.skip("needs glibc's mallinfo2")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {k: v for k, v in os.environ.items() if k != "TF_ONEDNN_USE_SYSTEM_ALLOCATOR"}
    env.update(TF_ENABLE_ONEDNN_OPTS="1", TF_CPP_MIN_LOG_LEVEL="2")
    grown = {}
    for mode in ("plain", "flag"):
        proc = subprocess.run([sys.executable, "-c", _FRAGMENTATION_CHILD
                               % (root, os.path.join(root, "tests")), mode],
                              capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        grown[mode] = int(proc.stdout.split()[-1])
    size = 4096 * 4096 * 4
    assert grown["plain"] >= size, grown
    assert grown["flag"] < size // 4, grown
