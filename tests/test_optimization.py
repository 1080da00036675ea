"""Tests for optimization.py: the learning-rate schedule at chosen steps, and
the AdamWeightDecay and LAMB updates through `create_optimizer` (clipping,
decay exclusions, step ordering, accumulation, loss scaling, resuming)
against NumPy implementations of their formulas written here; LAMB also
against numbers from outside: TensorFlow Addons' output (a fixture) and the
paper's algorithm in plain floats."""

import json
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from scriptkit import mixed_precision
import optimization
import test_training_options as training_option_tests

INIT_LR = 0.1
NUM_TRAIN_STEPS = 8
NUM_WARMUP_STEPS = 3
EXCLUDED = ("LayerNorm", "layer_norm", "bias")


def np_learning_rate(step, init_lr, num_train_steps, num_warmup_steps, poly_power=1.0,
                     start_warmup_step=0):
    """The original's schedule: linear warm-up while step < warm-up steps, else
    polynomial (power 1) decay to 0 at num_train_steps; with a decay power
    and a warm-up moved to start at `start_warmup_step` (0 before it)."""
    warmup_step = step - start_warmup_step
    if num_warmup_steps and warmup_step < num_warmup_steps:
        return max(init_lr * warmup_step / num_warmup_steps, 0.0)
    return init_lr * (1.0 - min(step, num_train_steps) / num_train_steps) ** poly_power


def np_adam_weight_decay_step(params, slots, grads, lr, weight_decay=0.01,
                              beta_1=0.9, beta_2=0.999, epsilon=1e-6):
    """One update of the original AdamWeightDecayOptimizer, gradients clipped
    to global norm 1.0 first. Updates `params` and `slots` in place; returns
    the gradients' global norm before clipping."""
    norm, moments = np_clipped_moments(slots, grads, beta_1, beta_2)
    for name, (m, v) in moments.items():
        update = m / (np.sqrt(v) + epsilon)
        if not any(re.search(pattern, name) for pattern in EXCLUDED):
            update = update + weight_decay * params[name]
        params[name] = params[name] - lr * update
    return norm


def np_clipped_moments(slots, grads, beta_1, beta_2):
    """What both optimizers do first: the gradients clipped to global norm
    1.0, then Adam's moments updated with them (in `slots`, name -> (m, v)).
    Returns (the global norm before clipping, the new moments by name)."""
    norm = np.sqrt(sum(np.sum(g ** 2) for g in grads.values()))
    factor = 1.0 / max(norm, 1.0)
    for name, grad in grads.items():
        m, v = slots[name]
        slots[name] = (beta_1 * m + (1.0 - beta_1) * grad * factor,
                       beta_2 * v + (1.0 - beta_2) * (grad * factor) ** 2)
    return norm, {name: slots[name] for name in grads}


def np_lamb_step(params, slots, grads, lr, t, weight_decay=0.01, beta_1=0.9,
                 beta_2=0.999, epsilon=1e-6, ratios=None):
    """One LAMB update at update number `t` (from 1), gradients clipped to
    global norm 1.0 first: bias-corrected Adam direction plus decay, scaled
    per variable by |w| / |r| (1 when a norm is 0, and for the excluded
    variables, which get no decay either). Updates `params` and `slots` in
    place, and `ratios` (a dict, if given) with each variable's ratio;
    returns the gradients' global norm before clipping."""
    norm, moments = np_clipped_moments(slots, grads, beta_1, beta_2)
    for name, (m, v) in moments.items():
        r = (m / (1.0 - beta_1 ** t)) / (np.sqrt(v / (1.0 - beta_2 ** t)) + epsilon)
        ratio = 1.0
        if not any(re.search(pattern, name) for pattern in EXCLUDED):
            r = r + weight_decay * params[name]
            w_norm, r_norm = np.linalg.norm(params[name]), np.linalg.norm(r)
            if w_norm > 0 and r_norm > 0:
                ratio = w_norm / r_norm
        params[name] = params[name] - lr * ratio * r
        if ratios is not None:
            ratios[name] = ratio
    return norm


# One LAMB case checked against numbers from outside this project
# (test_lamb_matches_tensorflow_addons_and_the_paper): two updates of three
# small variables, a decayed kernel, an excluded bias and a decayed kernel
# that starts at zeros, with BERT's hyperparameters except a larger rate.
# tests/fixtures/make_lamb_reference.py reads it to write the fixture.
LAMB_CASE = {
    "learning_rate": 0.05, "weight_decay_rate": 0.01, "beta_1": 0.9, "beta_2": 0.999,
    "epsilon": 1e-6, "exclude_from_weight_decay": ["LayerNorm", "layer_norm", "bias"],
    "initial": {"layer/kernel": [[0.5, -1.0], [2.0, 0.25]], "layer/bias": [0.1, -0.2],
                "mix/kernel": [0.0, 0.0, 0.0]},
    "gradients": [
        {"layer/kernel": [[0.3, -0.1], [0.2, 0.05]], "layer/bias": [0.05, 0.4],
         "mix/kernel": [0.2, -0.3, 0.1]},
        {"layer/kernel": [[-0.2, 0.4], [0.1, -0.6]], "layer/bias": [0.1, -0.3],
         "mix/kernel": [0.05, 0.1, -0.2]},
    ],
}
LAMB_FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures",
                            "lamb_tensorflow_addons.json")


def np_step(optimizer_name, params, slots, grads, lr, t):
    """One update of `optimizer_name` ("adamw" or "lamb") at update t."""
    if optimizer_name == "lamb":
        return np_lamb_step(params, slots, grads, lr, t)
    return np_adam_weight_decay_step(params, slots, grads, lr)


@pytest.mark.parametrize("num_warmup_steps,steps_and_rates", [
    (10, [(0, 0.0), (1, 0.01), (5, 0.05), (9, 0.09),
          # Warm-up over: the decay line, 0.1 * (1 - 10/100).
          (10, 0.09), (55, 0.045), (99, 0.001), (100, 0.0), (150, 0.0)]),
    (0, [(0, 0.1), (25, 0.075), (100, 0.0)]),
])
def test_learning_rate_schedule(num_warmup_steps, steps_and_rates):
    with tf.Graph().as_default(), tf.Session() as sess:
        step = tf.placeholder(tf.int64, [])
        lr = optimization.learning_rate_schedule(step, 0.1, 100, num_warmup_steps)
        for s, expected in steps_and_rates:
            assert sess.run(lr, {step: s}) == pytest.approx(expected, abs=1e-7), s
            assert expected == pytest.approx(np_learning_rate(s, 0.1, 100, num_warmup_steps))


@pytest.mark.parametrize("num_warmup_steps,poly_power,start_warmup_step,steps_and_rates", [
    # Worked by hand: init_lr 0.1, 100 steps; decay 0.1 * (1 - step/100) ** 2.
    (0, 2.0, 0, [(0, 0.1), (50, 0.025), (90, 0.001), (100, 0.0), (120, 0.0)]),
    # Warm-up over steps 20-29 (0 before), then the decay from step 0's count:
    # at 30, 0.1 * 0.7 ** 2.
    (10, 2.0, 20, [(0, 0.0), (19, 0.0), (20, 0.0), (25, 0.05), (29, 0.09),
                   (30, 0.049), (50, 0.025)]),
    (10, 1.0, 20, [(10, 0.0), (24, 0.04), (30, 0.07)]),
])
def test_learning_rate_schedule_power_and_warmup_start(num_warmup_steps, poly_power,
                                                       start_warmup_step, steps_and_rates):
    with tf.Graph().as_default(), tf.Session() as sess:
        step = tf.placeholder(tf.int64, [])
        lr = optimization.learning_rate_schedule(step, 0.1, 100, num_warmup_steps,
                                                 poly_power=poly_power,
                                                 start_warmup_step=start_warmup_step)
        for s, expected in steps_and_rates:
            assert sess.run(lr, {step: s}) == pytest.approx(expected, abs=1e-7), s
            assert expected == pytest.approx(np_learning_rate(
                s, 0.1, 100, num_warmup_steps, poly_power, start_warmup_step), abs=1e-12)


def test_default_schedule_builds_the_original_graph():
    """poly_power=1.0 and start_warmup_step=0 add no op: the default graph is
    the one of the original's formula."""
    def op_types(**kwargs):
        with tf.Graph().as_default() as graph:
            optimization.learning_rate_schedule(tf.placeholder(tf.int64, []), 0.1, 100, 10,
                                                **kwargs)
            return [op.type for op in graph.get_operations()]
    assert op_types() == op_types(poly_power=1.0, start_warmup_step=0)
    assert "Pow" not in op_types()
    assert "Pow" in op_types(poly_power=2.0)
    with pytest.raises(ValueError, match="poly_power"):
        op_types(poly_power=0.0)


def _build_problem(zero_kernel=False):
    """A small regression problem whose variables cover each decay rule:
    kernels and embeddings decay, biases and LayerNorm/layer_norm don't. The
    embedding is read with repeated indices (a sparse gradient). With
    `zero_kernel`, one more decayed kernel starts at zeros (LAMB's trust
    ratio is then 1 for its first update)."""
    rng = np.random.RandomState(0)
    init = {
        "dense/kernel": rng.normal(0, 1.0, (3, 2)),
        "dense/bias": rng.normal(0, 1.0, (2,)),
        "bert/embeddings/word_embeddings": rng.normal(0, 1.0, (5, 2)),
        "LayerNorm/gamma": 1.0 + rng.normal(0, 0.1, (2,)),
        "head/layer_norm_scale": 1.0 + rng.normal(0, 0.1, (2,)),
    }
    if zero_kernel:
        init["mix/kernel"] = np.zeros((2, 2))
    variables = {}
    for name, value in init.items():
        scope, var_name = name.rsplit("/", 1)
        with tf.variable_scope(scope):
            variables[name] = tf.get_variable(
                var_name, initializer=tf.constant(value.astype(np.float32)))
    x = tf.placeholder(tf.float32, [4, 3])
    y = tf.placeholder(tf.float32, [4, 2])
    ids = tf.constant([1, 1, 3, 0])
    h = (tf.matmul(x, variables["dense/kernel"]) + variables["dense/bias"] +
         tf.gather(variables["bert/embeddings/word_embeddings"], ids))
    h = h * variables["LayerNorm/gamma"] * variables["head/layer_norm_scale"]
    if zero_kernel:
        h = h + tf.matmul(h, variables["mix/kernel"])
    loss = 3.0 * tf.reduce_mean(tf.reduce_sum(tf.square(h - y), axis=-1))
    return variables, x, y, loss


def test_create_optimizer_matches_numpy_over_several_steps():
    rng = np.random.RandomState(1)
    with tf.Graph().as_default(), tf.Session() as sess:
        variables, x, y, loss = _build_problem()
        names = list(variables)
        grads_t = [tf.convert_to_tensor(g) for g in
                   tf.gradients(loss, [variables[n] for n in names])]
        train_op = optimization.create_optimizer(loss, INIT_LR, NUM_TRAIN_STEPS,
                                                 NUM_WARMUP_STEPS, use_tpu=False)
        global_step = tf.train.get_global_step()
        sess.run(tf.global_variables_initializer())

        # Slots are named like Google's checkpoints: <variable>/adam_m, adam_v.
        slot_variables = {v.op.name: v for v in tf.global_variables()}
        slot_names = set(slot_variables) - set(names)
        assert slot_names == {"global_step"} | {n + s for n in names
                                                for s in ("/adam_m", "/adam_v")}

        params = sess.run(variables)
        params = {k: v.astype(np.float64) for k, v in params.items()}
        slots = {n: (np.zeros_like(p), np.zeros_like(p)) for n, p in params.items()}
        norms = []
        for step in range(6):
            feed = {x: rng.normal(0, 1, (4, 3)), y: rng.normal(0, 1, (4, 2))}
            assert sess.run(global_step) == step
            grads = dict(zip(names, sess.run(grads_t, feed)))
            before = sess.run(variables)
            sess.run(train_op, feed)
            # The global step advances by exactly one per train op run.
            assert sess.run(global_step) == step + 1
            after = sess.run(variables)

            # What the update would be with the next step's rate (the
            # original's race): must be distinguishable from lr(t).
            wrong = {k: v.copy() for k, v in params.items()}
            wrong_slots = dict(slots)
            np_adam_weight_decay_step(wrong, wrong_slots, grads, np_learning_rate(
                step + 1, INIT_LR, NUM_TRAIN_STEPS, NUM_WARMUP_STEPS))

            lr = np_learning_rate(step, INIT_LR, NUM_TRAIN_STEPS, NUM_WARMUP_STEPS)
            norms.append(np_adam_weight_decay_step(params, slots, grads, lr))
            # Tolerance: float32 vs float64 drift over the steps is ~1e-6; a
            # step moves each element by ~lr (0.03-0.07), and using lr(t+1)
            # instead of lr(t) changes it by > 1e-3 (checked below).
            for name in names:
                np.testing.assert_allclose(after[name], params[name], rtol=0, atol=1e-5,
                                           err_msg="%s at step %d" % (name, step))
                m, v = sess.run([slot_variables[name + s] for s in ("/adam_m", "/adam_v")])
                # (The fused kernel computes v += (g*g - v) * (1 - b2) in float32.)
                np.testing.assert_allclose(m, slots[name][0], rtol=1e-4, atol=1e-7)
                np.testing.assert_allclose(v, slots[name][1], rtol=1e-4, atol=1e-9)
            assert max(np.abs(after[n] - wrong[n]).max() for n in names) > 1e-3
            if step == 0:
                # The first warm-up step's rate is 0: no variable moves.
                for name in names:
                    np.testing.assert_array_equal(after[name], before[name])
            else:
                assert all(np.abs(after[n] - before[n]).max() > 1e-5 for n in names)
        # Clipping was active (global norm above 1.0) in the steps checked.
        assert max(norms) > 1.5


@pytest.mark.parametrize("fused", [True, False])
def test_lamb_matches_numpy_over_several_steps(fused):
    """LAMB through create_optimizer against `np_lamb_step`: six updates with
    clipping, the exclusions, a warm-up that starts at step 1 and a decay of
    power 2; one decayed kernel starts at zeros (ratio 1 at first). Both
    builds of the update: one XLA loop per variable, and separate ops."""
    rng = np.random.RandomState(3)
    schedule = dict(poly_power=2.0, start_warmup_step=1)
    with tf.Graph().as_default(), tf.Session() as sess:
        variables, x, y, loss = _build_problem(zero_kernel=True)
        names = list(variables)
        grads_t = [tf.convert_to_tensor(g) for g in
                   tf.gradients(loss, [variables[n] for n in names])]
        train_op = optimization.create_optimizer(
            loss, INIT_LR, NUM_TRAIN_STEPS, NUM_WARMUP_STEPS, use_tpu=False,
            optimizer_name="lamb", fused_update=fused, **schedule)
        global_step = tf.train.get_global_step()
        # The fused build calls a compiled function for each variable.
        calls = [op for op in tf.get_default_graph().get_operations()
                 if op.type in ("PartitionedCall", "StatefulPartitionedCall")]
        assert len(calls) == (len(variables) if fused else 0)
        # One compiled function per kind and shape, each compiled once: the
        # three undecayed (2,) variables share one, the decayed kernels
        # (3, 2), (5, 2) and (2, 2) have one each.
        traced = [f.signature.name for f in
                  tf.get_default_graph().as_graph_def().library.function]
        assert (sum("_fused_lamb_moments_" in name for name in traced),
                sum("_fused_lamb_decayed_" in name for name in traced)) == (
                    (1, 3) if fused else (0, 0))
        sess.run(tf.global_variables_initializer())

        # The slots have AdamWeightDecayOptimizer's names.
        slot_variables = {v.op.name: v for v in tf.global_variables()}
        assert set(slot_variables) - set(names) == {"global_step"} | {
            n + s for n in names for s in ("/adam_m", "/adam_v")}

        params = {k: v.astype(np.float64) for k, v in sess.run(variables).items()}
        slots = {n: (np.zeros_like(p), np.zeros_like(p)) for n, p in params.items()}
        norms, ratios, rates = [], [], []
        for step in range(6):
            feed = {x: rng.normal(0, 1, (4, 3)), y: rng.normal(0, 1, (4, 2))}
            grads = dict(zip(names, sess.run(grads_t, feed)))
            sess.run(train_op, feed)
            assert sess.run(global_step) == step + 1
            after = sess.run(variables)
            lr = np_learning_rate(step, INIT_LR, NUM_TRAIN_STEPS, NUM_WARMUP_STEPS,
                                  **schedule)
            rates.append(lr)
            step_ratios = {}
            norms.append(np_lamb_step(params, slots, grads, lr, t=step + 1,
                                      ratios=step_ratios))
            ratios.append(step_ratios)
            for name in names:
                np.testing.assert_allclose(after[name], params[name], rtol=1e-5, atol=1e-6,
                                           err_msg="%s at step %d" % (name, step))
                m, v = sess.run([slot_variables[name + s] for s in ("/adam_m", "/adam_v")])
                np.testing.assert_allclose(m, slots[name][0], rtol=1e-4, atol=1e-7)
                np.testing.assert_allclose(v, slots[name][1], rtol=1e-4, atol=1e-9)
    # What was covered: clipping; rates of 0 (before and at the warm-up's
    # start), warm-up and decay; ratios far from 1 for the decayed kernels,
    # 1 for the zero kernel's first update (moving it off zero) and for the
    # excluded variables.
    assert max(norms) > 1.5
    assert rates[:2] == [0.0, 0.0] and 0 < rates[2] < rates[3] and rates[4] > rates[5] > 0
    assert all(abs(r["dense/kernel"] - 1.0) > 0.1 for r in ratios)
    assert ratios[0]["mix/kernel"] == 1.0
    assert np.abs(params["mix/kernel"]).max() > 1e-3
    assert all(r["dense/bias"] == r["LayerNorm/gamma"] == 1.0 for r in ratios)


def test_lamb_resumes_exactly_from_a_checkpoint(tmp_path):
    """Four LAMB updates straight through equal two, a save, a restore into
    a new graph and two more: the moments and the update count t (the global
    step) come back. Restoring the weights alone (fresh moments, t from 1)
    would give other values."""
    rng = np.random.RandomState(4)
    feeds = [(rng.normal(0, 1, (4, 3)), rng.normal(0, 1, (4, 2))) for _ in range(4)]
    checkpoint = str(tmp_path / "lamb.ckpt")

    def run(batches, restore=None, save=False):
        with tf.Graph().as_default(), tf.Session() as sess:
            variables, x, y, loss = _build_problem()
            train_op = optimization.create_optimizer(
                loss, INIT_LR, NUM_TRAIN_STEPS, 1, use_tpu=False, optimizer_name="lamb")
            sess.run(tf.global_variables_initializer())
            if restore == "all":
                tf.train.Saver().restore(sess, checkpoint)
            elif restore == "weights":
                tf.train.Saver(list(variables.values())).restore(sess, checkpoint)
            for bx, by in batches:
                sess.run(train_op, {x: bx, y: by})
            if save:
                tf.train.Saver().save(sess, checkpoint)
            return sess.run(variables)

    straight = run(feeds)
    halfway = run(feeds[:2], save=True)
    resumed = run(feeds[2:], restore="all")
    weights_only = run(feeds[2:], restore="weights")
    for name in straight:
        np.testing.assert_allclose(resumed[name], straight[name], rtol=1e-6, atol=1e-7,
                                   err_msg=name)
    assert max(np.abs(straight[n] - halfway[n]).max() for n in straight) > 1e-3
    assert max(np.abs(weights_only[n] - straight[n]).max() for n in straight) > 1e-4


def _flat(values):
    """A nested list of floats as one flat list."""
    return np.asarray(values, np.float64).ravel().tolist()


def _paper_lamb(x, gradients, lr, wd, beta_1, beta_2, epsilon):
    """Algorithm 2 of You et al., "Large Batch Optimization for Deep
    Learning: Training BERT in 76 minutes" (ICLR 2020), line by line in
    Python floats, for one layer x (a flat list) and one gradient list per
    update t = 1, 2, ..., with the scaling function phi(z) = z. Returns x
    after each update."""
    m, v, after = [0.0] * len(x), [0.0] * len(x), []
    for t, g in enumerate(gradients, start=1):
        m = [beta_1 * mi + (1 - beta_1) * gi for mi, gi in zip(m, g)]
        v = [beta_2 * vi + (1 - beta_2) * gi * gi for vi, gi in zip(v, g)]
        m_hat = [mi / (1 - beta_1 ** t) for mi in m]
        v_hat = [vi / (1 - beta_2 ** t) for vi in v]
        r = [mh / (math.sqrt(vh) + epsilon) for mh, vh in zip(m_hat, v_hat)]
        u = [ri + wd * xi for ri, xi in zip(r, x)]
        rate = lr * math.sqrt(sum(xi * xi for xi in x)) / math.sqrt(sum(ui * ui for ui in u))
        x = [xi - rate * ui for xi, ui in zip(x, u)]
        after.append(x)
    return after


@pytest.mark.parametrize("fused", [True, False])
def test_lamb_matches_tensorflow_addons_and_the_paper(fused):
    """LambOptimizer on LAMB_CASE (update numbers 1 and 2, a fixed rate, no
    clipping) against numbers from outside the project:

    * TensorFlow Addons' LAMB, the implementation the paper links to, run
      once in float64 (tests/fixtures/lamb_tensorflow_addons.json, written
      by make_lamb_reference.py there): weights and both moments of all
      three variables after each update. It is the variant of this project:
      bias correction on; trust ratio |w| / |r| without clipping, 1 where
      either norm is 0 (the zero kernel's first update); the variables
      excluded from weight decay also excluded from the ratio (its
      exclude_from_layer_adaptation defaults to the same list).
    * The paper's Algorithm 2 in plain floats (`_paper_lamb`, phi(z) = z),
      and worked by hand below for the first update: for the decayed
      kernel, where the two agree. The paper has no exclusion lists (the
      bias would be decayed and rescaled too), and with phi(z) = z a layer
      at zeros never moves (phi(0) = 0) where TensorFlow Addons and this
      project take a ratio of 1.
    """
    with open(LAMB_FIXTURE) as f:
        reference = json.load(f)
    assert reference["case"] == LAMB_CASE, (
        "LAMB_CASE changed: rerun tests/fixtures/make_lamb_reference.py")
    case, names = LAMB_CASE, list(LAMB_CASE["initial"])
    hyperparameters = dict(weight_decay_rate=case["weight_decay_rate"], beta_1=case["beta_1"],
                           beta_2=case["beta_2"], epsilon=case["epsilon"],
                           exclude_from_weight_decay=case["exclude_from_weight_decay"])
    with tf.Graph().as_default(), tf.Session() as sess:
        variables = {}
        for name in names:
            scope, var_name = name.rsplit("/", 1)
            with tf.variable_scope(scope):
                variables[name] = tf.get_variable(var_name, initializer=tf.constant(
                    np.asarray(case["initial"][name], np.float32)))
        step = tf.placeholder(tf.int64, [])
        grads = {n: tf.placeholder(tf.float32, variables[n].shape) for n in names}
        optimizer = optimization.LambOptimizer(case["learning_rate"], step=step, fused=fused,
                                               **hyperparameters)
        train_op = optimizer.apply_gradients([(grads[n], variables[n]) for n in names])
        state = {n: {"weights": variables[n], "m": optimizer.get_slot(variables[n], "m"),
                     "v": optimizer.get_slot(variables[n], "v")} for n in names}
        sess.run(tf.global_variables_initializer())
        results = []
        for t, gradients in enumerate(case["gradients"], start=1):
            sess.run(train_op, {step: t, **{grads[n]: gradients[n] for n in names}})
            results.append(sess.run(state))
    # Tolerances: float32 against float64. The weights of the variables
    # without a ratio differ most, by up to 8e-7 (steps are 0.05): the bias
    # correction's 1 - beta_2^t is taken from float32(0.999), the moments'
    # 1 - beta_2 from float32(0.001), which differ by 2e-5 relative.
    for t, (got, expected) in enumerate(zip(results, reference["steps"]), start=1):
        for name in names:
            where = "%s at t=%d" % (name, t)
            np.testing.assert_allclose(got[name]["weights"], expected[name]["weights"],
                                       rtol=0, atol=2e-6, err_msg=where)
            for key in ("m", "v"):
                np.testing.assert_allclose(got[name][key], expected[name][key], rtol=1e-6,
                                           err_msg="%s %s" % (key, where))

    # The kernel's first update by hand: m_hat = g and v_hat = g^2, so
    # r = g / (|g| + 1e-6) = [0.9999967, -0.99999, 0.999995, 0.99998];
    # u = r + 0.01 w = [1.0049967, -1.00999, 1.019995, 1.00248];
    # |w| = sqrt(0.25 + 1 + 4 + 0.0625) = 2.3048861, |u| = 2.0187754;
    # w - 0.05 * (2.3048861 / 2.0187754) * u = w - 0.0570862 u.
    by_hand = [0.5 - 0.0570862 * 1.0049967, -1.0 + 0.0570862 * 1.00999,
               2.0 - 0.0570862 * 1.019995, 0.25 - 0.0570862 * 1.00248]
    np.testing.assert_allclose(_flat(results[0]["layer/kernel"]["weights"]), by_hand,
                               atol=1e-6)
    kernel = "layer/kernel"
    paper = _paper_lamb(_flat(case["initial"][kernel]),
                        [_flat(g[kernel]) for g in case["gradients"]], case["learning_rate"],
                        case["weight_decay_rate"], case["beta_1"], case["beta_2"],
                        case["epsilon"])
    for x, expected in zip(paper, reference["steps"]):
        np.testing.assert_allclose(x, _flat(expected[kernel]["weights"]), rtol=1e-12)


def test_unknown_optimizer_name_is_refused():
    with tf.Graph().as_default():
        _, _, _, loss = _build_problem()
        with pytest.raises(ValueError, match="adamw, lamb.*'adam'"):
            optimization.create_optimizer(loss, INIT_LR, NUM_TRAIN_STEPS, 0, use_tpu=False,
                                          optimizer_name="adam")


def test_weight_decay_exclusions():
    opt = optimization.AdamWeightDecayOptimizer(
        0.1, weight_decay_rate=0.01, exclude_from_weight_decay=list(EXCLUDED))
    assert opt._do_use_weight_decay("bert/encoder/layer_0/attention/self/query/kernel")
    assert opt._do_use_weight_decay("bert/embeddings/word_embeddings")
    assert opt._do_use_weight_decay("output_weights")
    assert not opt._do_use_weight_decay("bert/encoder/layer_0/output/LayerNorm/gamma")
    assert not opt._do_use_weight_decay("bert/embeddings/LayerNorm/beta")
    assert not opt._do_use_weight_decay("bert/pooler/dense/bias")
    assert not opt._do_use_weight_decay("output_bias")
    assert not opt._do_use_weight_decay("head/layer_norm/scale")
    no_decay = optimization.AdamWeightDecayOptimizer(0.1, weight_decay_rate=0.0)
    assert not no_decay._do_use_weight_decay("dense/kernel")
    assert opt._get_variable_name("dense/kernel:0") == "dense/kernel"


@pytest.mark.parametrize("optimizer_name", optimization.OPTIMIZERS)
def test_use_tpu_wraps_in_cross_shard_optimizer(optimizer_name):
    with tf.Graph().as_default() as graph:
        _, _, _, loss = _build_problem()
        optimization.create_optimizer(loss, INIT_LR, NUM_TRAIN_STEPS, NUM_WARMUP_STEPS,
                                      use_tpu=True, optimizer_name=optimizer_name)
        op_types = {op.type for op in graph.get_operations()}
    assert "CrossReplicaSum" in op_types


@pytest.mark.parametrize("optimizer_name", optimization.OPTIMIZERS)
def test_gradient_accumulation_equals_one_big_batch(optimizer_name):
    """Two micro-batches accumulated give the update of their concatenation."""
    rng = np.random.RandomState(2)
    xs, ys = rng.normal(0, 1, (2, 4, 3)), rng.normal(0, 1, (2, 4, 2))

    def run(accumulation, batches):
        with tf.Graph().as_default(), tf.Session() as sess:
            variables, x, y, loss = _build_problem()
            train_op = optimization.create_optimizer(
                loss, INIT_LR, NUM_TRAIN_STEPS, 0, use_tpu=False,
                gradient_accumulation_steps=accumulation, optimizer_name=optimizer_name)
            sess.run(tf.global_variables_initializer())
            steps = []
            for bx, by in batches:
                sess.run(train_op, {x: bx, y: by})
                steps.append(sess.run(tf.train.get_global_step()))
            return sess.run(variables), steps

    accumulated, steps = run(2, [(xs[0], ys[0]), (xs[1], ys[1])])
    # The global step counts updates: it advances on the second micro-batch.
    assert steps == [0, 1]

    # NumPy: the mean of the two micro-batch gradients (the gradient of the
    # concatenated batch's mean loss), clipped, one update at lr(0).
    with tf.Graph().as_default(), tf.Session() as sess:
        variables, x, y, loss = _build_problem()
        names = list(variables)
        grads_t = [tf.convert_to_tensor(g) for g in
                   tf.gradients(loss, [variables[n] for n in names])]
        sess.run(tf.global_variables_initializer())
        g0 = sess.run(grads_t, {x: xs[0], y: ys[0]})
        g1 = sess.run(grads_t, {x: xs[1], y: ys[1]})
        params = {k: v.astype(np.float64) for k, v in sess.run(variables).items()}
    grads = {n: 0.5 * (a + b) for n, a, b in zip(names, g0, g1)}
    slots = {n: (np.zeros_like(p), np.zeros_like(p)) for n, p in params.items()}
    np_step(optimizer_name, params, slots, grads,
            np_learning_rate(0, INIT_LR, NUM_TRAIN_STEPS, 0), t=1)
    # (Tolerance: Adam's first step is about lr * sign(g) = 0.1 per element,
    # whatever the gradient's size, so float32 rounding of small accumulated
    # gradients shows up at the 1e-6 level.)
    for name in names:
        np.testing.assert_allclose(accumulated[name], params[name], rtol=0, atol=1e-5)


@pytest.mark.parametrize("optimizer_name", optimization.OPTIMIZERS)
def test_loss_scaled_steps_skip_non_finite_gradients(optimizer_name):
    """With a loss scale, a step whose gradients are not finite changes no
    weight and no step count; the next finite one updates as usual (for
    LAMB, as update t = 1)."""
    with tf.Graph().as_default(), tf.Session() as sess:
        w = tf.get_variable("dense/kernel", initializer=tf.constant([1.0, -2.0, 0.5]))
        poison = tf.placeholder(tf.float32, [])
        loss = tf.reduce_sum(tf.square(w - 0.3)) * poison
        train_op = optimization.create_optimizer(
            loss, 0.1, 10, 0, use_tpu=False,
            loss_scale_manager=mixed_precision.DynamicLossScale(initial_scale=4.0),
            optimizer_name=optimizer_name)
        sess.run(tf.global_variables_initializer())
        start = sess.run(w)
        sess.run(train_op, {poison: np.inf})
        np.testing.assert_array_equal(sess.run(w), start)
        assert sess.run(tf.train.get_global_step()) == 0
        sess.run(train_op, {poison: 1.0})
        assert sess.run(tf.train.get_global_step()) == 1
        # One update of the original at lr(0) = 0.1, from fresh slots.
        params = {"dense/kernel": start.astype(np.float64)}
        slots = {"dense/kernel": (np.zeros(3), np.zeros(3))}
        grads = {"dense/kernel": 2.0 * (params["dense/kernel"] - 0.3)}
        np_step(optimizer_name, params, slots, grads, lr=0.1, t=1)
        np.testing.assert_allclose(sess.run(w), params["dense/kernel"], rtol=0, atol=1e-5)


def test_weight_decay_uses_the_weights_the_gradient_was_computed_at():
    """The decay term and the gradient both see the step's starting weights.

    With loss (w - 0.9)^2 at w = 1 the gradient is positive; weights decayed
    first by lr * wd = 0.25 (w = 0.75) would flip its sign, and the first
    Adam step, which moves every weight by about lr * 3.16 * sign(g), would
    go the other way. The original computes the update from the starting
    weights: w - lr * (m / (sqrt(v) + eps) + wd * w).
    """
    lr, wd = 0.5, 0.5
    with tf.Graph().as_default(), tf.Session() as sess:
        w = tf.get_variable("w", initializer=tf.ones([1000]))
        loss = tf.reduce_sum(tf.square(w - 0.9))
        opt = optimization.AdamWeightDecayOptimizer(lr, weight_decay_rate=wd)
        train_op = opt.apply_gradients([(tf.gradients(loss, [w])[0], w)])
        sess.run(tf.global_variables_initializer())
        sess.run(train_op)
        after = sess.run(w)
    g = 2.0 * (1.0 - 0.9)
    m, v = 0.1 * g, 0.001 * g * g
    expected = 1.0 - lr * (m / (np.sqrt(v) + 1e-6) + wd * 1.0)
    # (Float32 against float64: 1e-5 apart; the decayed-first answer is 2.33.)
    np.testing.assert_allclose(after, np.full(1000, expected), rtol=1e-4)


# Run in a child process on TensorFlow's Eigen back-end, whose CPU tensors
# come straight from malloc (with oneDNN on, TensorFlow pools large tensors
# in its own allocator, whose mapped regions say nothing about which tensors
# are alive). Prints the bytes glibc has mapped with mmap after 3 updates of
# a 64 MiB variable, less those before the initialisation.
_SLOT_MEMORY_CHILD = """
import sys
sys.path[:0] = [%r, %r]
import tensorflow.compat.v1 as tf
import optimization
from malloc_stats import mmapped_bytes
tf.disable_eager_execution()

if mmapped_bytes() is None:
    print("no mallinfo2")
    sys.exit(0)
with tf.Graph().as_default(), tf.Session() as sess:
    # (A random initializer: a constant one would be folded as well.)
    w = tf.get_variable("w", [4096, 4096],
                        initializer=tf.random_normal_initializer(stddev=0.02))
    x = tf.random.normal([8, 4096])
    loss = tf.reduce_sum(tf.matmul(x, w))
    opt = optimization.AdamWeightDecayOptimizer(1e-3, weight_decay_rate=0.01)
    train_op = opt.apply_gradients([(tf.gradients(loss, [w])[0], w)])
    before = mmapped_bytes()
    sess.run(tf.global_variables_initializer())
    for _ in range(3):
        sess.run(train_op)
    print("grown", mmapped_bytes() - before)
"""


def test_adam_slots_leave_no_dead_model_sized_buffer():
    """After a few updates the process holds the variable and its two slots,
    not a fourth buffer of zeros.

    glibc serves allocations of 32 MiB and more with mmap, and `hblkhd`
    counts the bytes so mapped: with a 64 MiB variable, a constant-folded
    zeros initializer left one more 64 MiB block alive for the session's
    lifetime.
    """
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="0", TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, "-c", _SLOT_MEMORY_CHILD
                           % (root, os.path.join(root, "tests"))],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    if proc.stdout.strip() == "no mallinfo2":
        pytest.skip("needs glibc's mallinfo2")
    grown = int(proc.stdout.split()[-1])
    size = 4096 * 4096 * 4  # 64 MiB of float32
    assert grown < 3.5 * size, "%.1f MiB mapped for a 64 MiB variable and its slots" % (
        grown / 2 ** 20)


@pytest.mark.parametrize("optimizer_name", optimization.OPTIMIZERS)
def test_zero_initialized_state_is_computed_not_folded_into_constants(optimizer_name):
    """The Adam slots and gradient accumulators start at zero, and the graph
    that initializes them, as the session runs it (after both of its constant
    folding passes), holds no constant of their size: a folded zeros tensor
    is a buffer the session keeps for its lifetime, and folding all of them
    at once peaks at 1.2-1.7 GB beyond the variables at BERT-Base size."""
    with tf.Graph().as_default(), tf.Session() as sess:
        variables, _, _, loss = _build_problem()
        optimization.create_optimizer(loss, INIT_LR, NUM_TRAIN_STEPS, 0, use_tpu=False,
                                      gradient_accumulation_steps=2,
                                      optimizer_name=optimizer_name)
        zeroed = [v for v in tf.global_variables()
                  if re.search(r"/(adam_m|adam_v|grad_accum)$", v.op.name)]
        assert len(zeroed) == 3 * len(variables)
        metadata = tf.RunMetadata()
        sess.run(tf.global_variables_initializer(),
                 options=tf.RunOptions(output_partition_graphs=True), run_metadata=metadata)
        for value in sess.run(zeroed):
            assert not value.any()
    shapes = {v.op.name + "/": v.shape.as_list() for v in zeroed}
    folded = [node.name for graph in metadata.partition_graphs for node in graph.node
              for scope, shape in shapes.items()
              if node.op == "Const" and node.name.startswith(scope)
              and [d.size for d in node.attr["value"].tensor.tensor_shape.dim] == shape]
    assert not folded


def test_sparse_gradient_is_made_dense_only_after_the_other_updates():
    """The embedding table's gradient (a gather's, sparse) is built as a
    dense tensor only once every other variable's update ran, so that its
    dense buffer does not come on top of all the other gradients; and no
    dense copy of it is made for the clipping."""
    with tf.Graph().as_default():
        variables, _, _, loss = _build_problem()
        optimization.create_optimizer(loss, INIT_LR, NUM_TRAIN_STEPS, NUM_WARMUP_STEPS,
                                      use_tpu=False)
        table = variables["bert/embeddings/word_embeddings"]
        densified = [op for op in tf.get_default_graph().get_operations()
                     if op.type == "UnsortedSegmentSum"
                     and op.outputs[0].shape.as_list() == table.shape.as_list()]
        assert len(densified) == 1
        adam_updates = [op for op in tf.get_default_graph().get_operations()
                        if op.type == "ResourceApplyAdam"]
        assert len(adam_updates) == len(variables)
        ancestors = training_option_tests._ancestors
        upstream = ancestors(densified[0])
        # The other variables' updates: those that do not use it.
        others = [op for op in adam_updates if densified[0] not in ancestors(op)]
        assert len(others) == len(variables) - 1
        assert all(op in upstream for op in others)
