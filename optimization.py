"""Functions and classes related to optimization (weight updates).

The schedule: linear warm-up to ``init_lr``, then linear (polynomial power
1.0) decay to 0 at ``num_train_steps``. The update: Adam without bias
correction and with decoupled weight decay (0.01, not applied to LayerNorm
and bias variables); gradients clipped to a global norm of 1.0.

Differences from the original:

The schedule, the update rule, the API and the slot names are the same.
Deliberately different:

* The update of step t always uses the learning rate of step t: the global
  step is incremented only after every variable update ran (the original did
  not order the two, so a step used lr(t) or lr(t+1) at random).
* Resource variables are updated in place with TensorFlow's fused Adam kernel
  (bias correction disabled by passing beta powers of 0, which makes it the
  very same update), which saves several model-sized temporaries a step.
  The weight decay runs after the backward pass, so the forward pass and the
  gradient see the step's starting weights and no variable is copied while
  a read of it is alive: it subtracts in the variable's own buffer
  (`_decay_in_place`). The slots' zeros cannot be constant-folded (see
  `_unfolded_zeros`). In the plain step the embedding tables' sparse
  gradients stay sparse until their own update, which runs after the others
  (`_apply_sparse_last`). The fused kernel and the slots lower BERT-Base's
  peak training memory by about 0.4 GB; the decay in place and the sparse
  gradient lower the recomputing step's by another 0.14-0.30 GB
  (benchmarks/RESULTS.md).
* ``gradient_accumulation_steps`` (see `create_optimizer`) sums the gradients
  of several micro-batches before one update.
* New, for pre-training with large batches: the LAMB optimizer
  (`LambOptimizer`, ``optimizer_name="lamb"``), and a schedule with a
  polynomial decay of any power and a warm-up that may start at a later
  step (``poly_power``, ``start_warmup_step``; the keyword names of the
  MLPerf reference). Their defaults give Adam and the linear schedule, with
  the same graph op for op.
"""

import re

import tensorflow.compat.v1 as tf
from tensorflow.python.ops import control_flow_util

import bert_ops


def learning_rate_schedule(global_step, init_lr, num_train_steps, num_warmup_steps,
                           poly_power=1.0, start_warmup_step=0):
    """The learning rate at `global_step` (a scalar integer tensor).

    Linear warm-up from 0 to `init_lr` over `num_warmup_steps`, then
    polynomial decay from `init_lr` to 0 at `num_train_steps` (both counted
    in optimizer updates):
    ``init_lr * (1 - min(step, num_train_steps) / num_train_steps) ** poly_power``.
    With the defaults this is the linear schedule (during warm-up
    ``init_lr * step / num_warmup_steps``).

    `start_warmup_step` moves the warm-up only: it runs while
    ``step - start_warmup_step < num_warmup_steps`` at
    ``init_lr * (step - start_warmup_step) / num_warmup_steps``, so a run
    that continues an earlier run's global step can warm up again from where
    it starts; the decay still counts from step 0. Steps before
    `start_warmup_step` get a rate of 0 (the MLPerf reference, whose keyword
    names these are, would give them a negative one).

    Args:
      global_step: scalar integer tensor, the optimizer updates done.
      init_lr: peak learning rate (float).
      num_train_steps: positive int, where the rate reaches 0.
      num_warmup_steps: int (0 or None: no warm-up).
      poly_power: positive float, the power of the decay (1.0: linear).
      start_warmup_step: int, the global step at which the warm-up begins.

    Returns:
      float32 scalar tensor.
    """
    if num_train_steps <= 0:
        raise ValueError("num_train_steps must be positive, got %r" % (num_train_steps,))
    if not poly_power > 0:
        raise ValueError("poly_power must be positive, got %r" % (poly_power,))
    step = tf.cast(global_step, tf.float32)
    remaining = 1.0 - tf.minimum(step, float(num_train_steps)) / float(num_train_steps)
    # (Only a non-default power adds an op: the default graph keeps its ops,
    # and so its numerics.)
    if poly_power != 1.0:
        remaining = tf.pow(remaining, float(poly_power))
    decayed = init_lr * remaining
    if not num_warmup_steps:
        return decayed
    warmup_step = tf.cast(global_step, tf.int32)
    if start_warmup_step:
        warmup_step -= int(start_warmup_step)
        warmup = tf.maximum(init_lr * (tf.cast(warmup_step, tf.float32)
                                       / float(num_warmup_steps)), 0.0)
    else:
        warmup = init_lr * (step / float(num_warmup_steps))
    is_warmup = tf.cast(warmup_step < int(num_warmup_steps), tf.float32)
    return (1.0 - is_warmup) * decayed + is_warmup * warmup


# BERT's optimizer settings. Variables whose name contains one of these
# patterns (LayerNorm scales and offsets, all biases) are not decayed.
_WEIGHT_DECAY_RATE = 0.01
_NO_DECAY_PATTERNS = ["LayerNorm", "layer_norm", "bias"]
# Gradients are rescaled so that their global L2 norm is at most this.
_CLIP_NORM = 1.0


# The values of `create_optimizer`'s `optimizer_name` (and of --optimizer).
OPTIMIZERS = ("adamw", "lamb")


def create_optimizer(loss, init_lr, num_train_steps, num_warmup_steps, use_tpu,
                     gradient_accumulation_steps=1, loss_scale_manager=None, tvars=None,
                     optimizer_name="adamw", poly_power=1.0, start_warmup_step=0,
                     fused_update=None, count_batches=False):
    """Builds the op of one training step of `loss` with BERT's optimizer
    (or LAMB).

    Args:
      loss: float32 scalar loss tensor.
      init_lr: peak learning rate (float).
      num_train_steps: number of optimizer updates of the whole run; the
        learning rate reaches 0 there.
      num_warmup_steps: number of updates of linear warm-up (0 or None: none).
      use_tpu: wrap the optimizer in `tf.tpu.CrossShardOptimizer`.
      gradient_accumulation_steps: sum the gradients of this many calls
        (micro-batches) and apply them once. `global_step` counts optimizer
        updates, so it advances once every `gradient_accumulation_steps`
        calls; the schedule above is in the same units. The loss should be
        the mean over one micro-batch: the accumulated sum is divided by the
        number of micro-batches, so one update equals one update on the
        concatenated batch.
      loss_scale_manager: optional `mixed_precision.DynamicLossScale` for
        float16 training: the loss is scaled before differentiation, gradients
        unscaled, and a step with non-finite gradients is skipped (its
        learning-rate step is not consumed).
      tvars: variables to train (default: all trainable variables).
      optimizer_name: "adamw" (`AdamWeightDecayOptimizer`, the default)
        or "lamb" (`LambOptimizer`, for large batches); both with the same
        hyperparameters, exclusions, clipping and schedule.
      poly_power, start_warmup_step: the schedule's decay power and the
        step its warm-up begins at (see `learning_rate_schedule`).
      fused_update: LAMB only: compute each variable's update as one
        XLA-compiled loop (`LambOptimizer`'s `fused`); None: where no GPU
        is visible. Never with `use_tpu` (the TPU compiler fuses by itself).
      count_batches: with `loss_scale_manager`, count the calls (batches
        read, skipped ones included) in the variable BATCHES_READ_VARIABLE.

    Returns:
      The train op. Running it once performs one forward/backward pass and,
      when due, one update and one increment of the global step.
    """
    if optimizer_name not in OPTIMIZERS:
        raise ValueError("optimizer_name must be one of %s, got %r"
                         % (", ".join(OPTIMIZERS), optimizer_name))
    global_step = tf.train.get_or_create_global_step()
    learning_rate = learning_rate_schedule(global_step, init_lr, num_train_steps,
                                           num_warmup_steps, poly_power=poly_power,
                                           start_warmup_step=start_warmup_step)
    optimizer = _optimizer(optimizer_name, learning_rate, global_step, use_tpu, fused_update)

    if tvars is None:
        tvars = tf.trainable_variables()
    replica_context = tf.distribute.get_replica_context()
    many_replicas = (tf.distribute.has_strategy() and replica_context is not None
                     and replica_context.num_replicas_in_sync > 1)
    accumulating = bool(gradient_accumulation_steps and gradient_accumulation_steps > 1)
    grads = _gradients(loss, tvars, loss_scale_manager,
                       keep_sparse=not (use_tpu or many_replicas or accumulating))

    num_replicas = 1
    if many_replicas:
        if accumulating:
            raise ValueError("gradient_accumulation_steps > 1 is not supported together "
                             "with a tf.distribute strategy: use a larger per-replica "
                             "batch or more replicas instead")
        grads = _replica_mean(grads, replica_context)
        num_replicas = replica_context.num_replicas_in_sync

    batches_read = None
    if loss_scale_manager is not None and count_batches:
        batches_read = tf.get_variable(
            BATCHES_READ_VARIABLE, shape=[], dtype=tf.int64, trainable=False,
            initializer=tf.zeros_initializer(), collections=[tf.GraphKeys.GLOBAL_VARIABLES],
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)

    if accumulating:
        return _accumulating_train_op(optimizer, grads, tvars, global_step,
                                      gradient_accumulation_steps, loss_scale_manager,
                                      batches_read)
    return _train_op(optimizer, grads, tvars, global_step, loss_scale_manager, num_replicas,
                     batches_read)


def _optimizer(optimizer_name, learning_rate, global_step, use_tpu, fused_update):
    """The optimizer of `create_optimizer` (see there for the arguments),
    with BERT's hyperparameters, for the `learning_rate` tensor."""
    # Fine-tuning uses the pre-training optimizer too. Its m/v slots start
    # at zero: init_checkpoint restores the weights only.
    hyperparameters = dict(weight_decay_rate=_WEIGHT_DECAY_RATE, beta_1=0.9, beta_2=0.999,
                           epsilon=1e-6, exclude_from_weight_decay=_NO_DECAY_PATTERNS)
    if optimizer_name == "lamb":
        # LAMB's bias correction needs the update's number t, from 1: the
        # global step counts updates (and is checkpointed), so a resumed run
        # continues with the right t and no extra counter is needed.
        optimizer = LambOptimizer(learning_rate, step=global_step + 1,
                                  fused=False if use_tpu else fused_update, **hyperparameters)
    else:
        optimizer = AdamWeightDecayOptimizer(learning_rate, **hyperparameters)
    if use_tpu:
        optimizer = tf.tpu.CrossShardOptimizer(optimizer)
    return optimizer


def _gradients(loss, tvars, loss_scale_manager, keep_sparse):
    """The gradients of `loss` for `tvars` (None where a variable has
    none): with `loss_scale_manager`, of the scaled loss and unscaled; dense,
    but with `keep_sparse` (and no loss scale), where sparse (embedding)
    gradients stay sparse, each row once, until their update (see
    `_apply_sparse_last`)."""
    if loss_scale_manager is None and keep_sparse:
        return [_summed_slices(g) if isinstance(g, tf.IndexedSlices) else g
                for g in tf.gradients(loss, tvars)]
    if loss_scale_manager is None:
        return [_to_dense(g) for g in tf.gradients(loss, tvars)]
    scale = loss_scale_manager.scale
    return [None if g is None else _to_dense(g) / scale
            for g in tf.gradients(loss * scale, tvars)]


def _replica_mean(grads, replica_context):
    """`grads` averaged over the replicas of `replica_context` (None entries
    stay None), before clipping, so that clipping sees the gradient of the
    global batch, exactly as on a single device."""
    grads = list(grads)
    present = [i for i, g in enumerate(grads) if g is not None]
    reduced = replica_context.all_reduce(tf.distribute.ReduceOp.MEAN,
                                         [grads[i] for i in present])
    for i, g in zip(present, reduced):
        grads[i] = g
    return grads


def _train_op(optimizer, grads, tvars, global_step, loss_scale_manager, num_replicas,
              batches_read):
    """The train op of one update per call (no gradient accumulation):
    `grads` clipped and applied, then `global_step` incremented; with
    `loss_scale_manager`, a step whose gradients are not all finite is
    skipped (neither applied nor counted in the global step) and the scale
    updated, and `batches_read` (or None) counts the call."""
    all_finite = None
    if loss_scale_manager is not None:
        all_finite = _all_finite(grads)
        grads = [None if g is None else tf.where(all_finite, g, tf.zeros_like(g))
                 for g in grads]

    grads = _clip(grads)
    if num_replicas > 1:
        # A v1 optimizer sums the replicas' gradients when applying them
        # (expecting losses pre-divided by the replica count); every replica
        # holds the same clipped mean here, so each contributes 1/n of it.
        grads = [None if g is None else g / float(num_replicas) for g in grads]

    if all_finite is None:
        update = _apply_sparse_last(optimizer, grads, tvars)
        # Increment only after every update ran, so step t uses lr(t).
        with tf.control_dependencies([update]):
            return tf.group(global_step.assign_add(1), name="train_op")

    def apply_step():
        with tf.control_dependencies([optimizer.apply_gradients(zip(grads, tvars))]):
            return tf.identity(global_step.assign_add(1))

    step_op = tf.cond(all_finite, apply_step, lambda: tf.identity(global_step))
    with tf.control_dependencies([step_op]):
        return tf.group(loss_scale_manager.update(all_finite), *_counted(batches_read),
                        name="train_op")


def _counted(batches_read):
    """The ops that count one more batch read in `batches_read` (none
    where it is None)."""
    return [] if batches_read is None else [batches_read.assign_add(1, read_value=False)]


def _clip(grads):
    """`grads` (None entries allowed) scaled to a global norm of at most
    `_CLIP_NORM`, as in BERT's pre-training."""
    clipped, _ = tf.clip_by_global_norm(grads, clip_norm=_CLIP_NORM)
    return clipped


def _summed_slices(grad):
    """A sparse gradient (tf.IndexedSlices, values [n, ...]) with each row
    index once, its values summed: the nonzero rows of the dense gradient
    (the same sums in the same order), so the global norm and the clipped
    values are the dense gradient's, without a dense buffer."""
    indices, positions = tf.unique(grad.indices)
    values = tf.math.unsorted_segment_sum(grad.values, positions, tf.shape(indices)[0])
    return tf.IndexedSlices(values, indices, grad.dense_shape)


def _apply_sparse_last(optimizer, grads, tvars):
    """`optimizer.apply_gradients` for the dense gradients, then, once all
    of them ran, for the sparse ones; returns the op of both.

    A sparse gradient is made dense only for its own update (see
    `AdamWeightDecayOptimizer._resource_apply_sparse_duplicate_indices`).
    At BERT-Base size the word embeddings' dense gradient and the decay's
    transient product are 89 MiB each: built last, they come when the
    other gradients are freed, not on top of all of them.
    """
    dense = [(g, v) for g, v in zip(grads, tvars)
             if g is not None and not isinstance(g, tf.IndexedSlices)]
    sparse = [(g, v) for g, v in zip(grads, tvars) if isinstance(g, tf.IndexedSlices)]
    if not (dense and sparse):
        return optimizer.apply_gradients(zip(grads, tvars))
    update = optimizer.apply_gradients(dense)
    with tf.control_dependencies([update]):
        return optimizer.apply_gradients(sparse)


def _to_dense(grad):
    """A gradient as a dense tensor (None stays None): sparse embedding
    gradients are densified, as BERT's optimizer did."""
    if isinstance(grad, tf.IndexedSlices):
        return tf.convert_to_tensor(grad)
    return grad


def _all_finite(grads):
    """Scalar bool tensor: every gradient is finite."""
    checks = [tf.reduce_all(tf.math.is_finite(g)) for g in grads if g is not None]
    return tf.reduce_all(tf.stack(checks))


# The accumulation cycle's position (micro-batches since the last update).
MICRO_STEP_VARIABLE = "gradient_accumulation/micro_step"

# The batches (micro-batches) a run with dynamic loss scaling has read: a step
# that the loss scale skips reads its batch without moving the global step,
# so the global step alone does not tell where the input stopped.
BATCHES_READ_VARIABLE = "loss_scale/batches_read"


def _accumulating_train_op(optimizer, grads, tvars, global_step, num_micro_batches,
                           loss_scale_manager, batches_read=None):
    """Adds gradients to accumulators; every `num_micro_batches` calls applies
    their mean (clipped as usual), zeroes them and increments `global_step`.

    The accumulators and the micro-batch counter are non-trainable variables,
    saved in checkpoints, so a restart in the middle of an accumulation cycle
    resumes it exactly.
    """
    pairs = [(g, v) for g, v in zip(grads, tvars) if g is not None]
    accumulators = []
    for _, var in pairs:
        name = _variable_name(var.name)
        accumulators.append(tf.get_variable(
            name=name + "/grad_accum", shape=var.shape.as_list(), dtype=tf.float32,
            trainable=False, initializer=_unfolded_zeros,
            collections=[tf.GraphKeys.GLOBAL_VARIABLES]))
    micro_step = tf.get_variable(
        MICRO_STEP_VARIABLE, shape=[], dtype=tf.int64, trainable=False,
        initializer=tf.zeros_initializer(), collections=[tf.GraphKeys.GLOBAL_VARIABLES])

    finite = _all_finite([g for g, _ in pairs]) if loss_scale_manager is not None else None
    add_ops = []
    for (grad, _), acc in zip(pairs, accumulators):
        grad = _to_dense(grad)
        if finite is not None:
            grad = tf.where(finite, grad, tf.zeros_like(grad))
        add_ops.append(acc.assign_add(grad, read_value=False))
    with tf.control_dependencies(add_ops):
        new_micro_step = micro_step.assign_add(1)

    def apply_step():
        mean_grads = [acc.read_value() / float(num_micro_batches) for acc in accumulators]
        update = optimizer.apply_gradients(zip(_clip(mean_grads), [v for _, v in pairs]))
        with tf.control_dependencies([update]):
            resets = [acc.assign(tf.zeros_like(acc), read_value=False) for acc in accumulators]
            resets.append(micro_step.assign(0, read_value=False))
            with tf.control_dependencies(resets):
                return tf.identity(global_step.assign_add(1))

    with tf.control_dependencies(add_ops):
        step_op = tf.cond(tf.equal(new_micro_step % num_micro_batches, 0),
                          apply_step, lambda: tf.identity(global_step))
    ops = [step_op]
    if loss_scale_manager is not None:
        with tf.control_dependencies([step_op]):
            ops.append(loss_scale_manager.update(finite))
            ops.extend(_counted(batches_read))
    return tf.group(*ops, name="train_op")


def _unfolded_zeros(shape, dtype=tf.float32, partition_info=None):
    """Initializer: zeros that no constant folding can evaluate ahead of time.

    A session folds constants twice: Grappler, and then the graph optimizer
    of each partition, which evaluates every node that is not stateful and
    turns its results into Const nodes. Either way the zeros of
    a `Fill` (even one fed by a PlaceholderWithDefault, which only Grappler
    leaves alone) become Const buffers that the initialization executor keeps
    for the session's lifetime, and that the variables share until their
    first update copies them away; the partition pass also holds all its
    results at once while it evaluates them. At BERT-Base size the Adam
    slots' zeros cost 1.2-1.7 GB of temporaries that way. `Empty` with
    ``init=True`` is registered as stateful, so neither pass touches it: each
    variable gets one zeroed buffer of its own, written when the initializer
    runs.

    Args:
      shape: the variable's fully defined shape (list or TensorShape).
      dtype: its dtype.
      partition_info: unused; part of the initializer signature.

    Returns:
      A tensor of zeros of `shape` and `dtype`.
    """
    del partition_info  # Unused; part of the initializer signature.
    return tf.raw_ops.Empty(shape=tf.TensorShape(shape).as_list(), dtype=dtype, init=True)


def _variable_name(param_name):
    """A variable's name from its tensor's name: "a/b:0" -> "a/b"."""
    return re.sub(r":\d+$", "", param_name)


class AdamWeightDecayOptimizer(tf.train.Optimizer):
    """Adam without bias correction, with decoupled weight decay (BERT's optimizer).

    For each variable p with gradient g:
    ``m = b1*m + (1-b1)*g``, ``v = b2*v + (1-b2)*g^2``,
    ``p = p - lr * (m / (sqrt(v) + eps) + wd * p)``, where the decay term is
    left out for variables whose name matches one of the regular expressions
    `exclude_from_weight_decay` (or for all when `weight_decay_rate` is 0).
    The slots are the variables ``<name>/adam_m`` and ``<name>/adam_v``, as in
    Google's checkpoints.

    Written against the standard `tf.compat.v1.train.Optimizer` hooks (slots,
    `_resource_apply_dense`), so `tf.distribute` strategies and
    `CrossShardOptimizer` aggregate gradients as for any built-in optimizer.
    `apply_gradients` is called without `global_step`: `create_optimizer`
    increments it after the update.

    Args:
      learning_rate: float or scalar float tensor.
      weight_decay_rate: the decay factor wd (float).
      beta_1, beta_2, epsilon: Adam's b1, b2 and eps.
      exclude_from_weight_decay: list of regular expressions, or None.
      name: name of the optimizer's ops.
    """

    def __init__(self,
                 learning_rate,
                 weight_decay_rate=0.0,
                 beta_1=0.9,
                 beta_2=0.999,
                 epsilon=1e-6,
                 exclude_from_weight_decay=None,
                 name="AdamWeightDecayOptimizer"):
        super().__init__(use_locking=False, name=name)
        self.learning_rate = learning_rate
        self.weight_decay_rate = weight_decay_rate
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.exclude_from_weight_decay = exclude_from_weight_decay

    def _create_slots(self, var_list):
        for var in var_list:
            for slot_name in ("m", "v"):
                self._get_or_make_slot_with_initializer(
                    var, _unfolded_zeros, var.shape, tf.float32, slot_name,
                    "adam_" + slot_name)

    def _prepare(self):
        self._lr_t = tf.convert_to_tensor(self.learning_rate, dtype=tf.float32,
                                          name="learning_rate")

    def _resource_apply_dense(self, grad, var):
        """In-place update with the fused kernel; same math as `_apply_dense`.

        ResourceApplyAdam computes ``lr_t = lr * sqrt(1 - b2^t) / (1 - b1^t)``;
        passing beta powers of 0 gives ``lr_t = lr``: no bias correction. The
        decoupled decay uses the pre-update weights, so it runs first.
        """
        m = self.get_slot(var, "m")
        v = self.get_slot(var, "v")
        deps = []
        if self._do_use_weight_decay(self._get_variable_name(var.name)):
            deps.append(self._decay_in_place(var, grad))
        with tf.control_dependencies(deps):
            return tf.raw_ops.ResourceApplyAdam(
                var=var.handle, m=m.handle, v=v.handle,
                beta1_power=tf.constant(0.0), beta2_power=tf.constant(0.0),
                lr=self._lr_t, beta1=tf.constant(self.beta_1, tf.float32),
                beta2=tf.constant(self.beta_2, tf.float32),
                epsilon=tf.constant(self.epsilon, tf.float32),
                grad=grad, use_locking=False)

    def _decay_in_place(self, var, grad):
        """The op that applies the decoupled decay p -= (lr * wd) * p to the
        resource variable `var` in its own buffer, once `grad` exists.

        `grad` is clipped by the global norm, so it exists after the whole
        backward pass, when no forward or backward op holds a read of p any
        more: the forward pass and the gradient see the step's starting
        weights. The product is a transient the size of p, and the read it
        is computed from is gone when the subtraction runs, so p is updated
        where it is. A kernel that took p both as the variable and as an
        input (ResourceApplyGradientDescent with delta = p) would find a
        read alive and copy p to a new buffer first (copy-on-write): every
        decayed weight would move to a fresh buffer each step, allocated
        while all the gradients are alive, which fragments the heap and
        raised the recomputing step's peak (benchmarks/RESULTS.md). Same
        arithmetic: p - round(p * (lr * wd)).
        """
        with tf.control_dependencies([grad]):
            decay = var.read_value() * (self._lr_t * self.weight_decay_rate)
        return var.assign_sub(decay, read_value=False)

    def _apply_dense(self, grad, var):
        """The update written out, for reference (non-resource) variables:
        the moments, then `var -= _dense_step(...)`."""
        m = self.get_slot(var, "m")
        v = self.get_slot(var, "v")
        new_m = self.beta_1 * m + (1.0 - self.beta_1) * grad
        new_v = self.beta_2 * v + (1.0 - self.beta_2) * tf.square(grad)
        return tf.group(var.assign(var - self._dense_step(new_m, new_v, var)),
                        m.assign(new_m), v.assign(new_v))

    def _dense_step(self, new_m, new_v, var):
        """What `_apply_dense` takes from `var`, given the updated moments:
        the learning rate times Adam's step and the decay."""
        step = new_m / (tf.sqrt(new_v) + self.epsilon)
        # The decay is added to the step, outside Adam's moments: an L2 term
        # in the loss would instead be rescaled per weight by sqrt(v), so
        # large-gradient weights would be decayed less.
        if self._do_use_weight_decay(self._get_variable_name(var.name)):
            step += self.weight_decay_rate * var
        return self._lr_t * step

    def _resource_apply_sparse_duplicate_indices(self, grad, handle, indices):
        # Sparse (embedding) gradients are made dense: the same update as
        # for a dense gradient, decay of every row included.
        dense = tf.math.unsorted_segment_sum(grad, indices, tf.shape(handle)[0])
        return self._resource_apply_dense(dense, handle)

    def _apply_sparse_duplicate_indices(self, grad, var):
        return self._apply_dense(tf.convert_to_tensor(grad), var)

    def _do_use_weight_decay(self, param_name):
        """Whether the variable named `param_name` is decayed."""
        if not self.weight_decay_rate:
            return False
        patterns = self.exclude_from_weight_decay or ()
        return not any(re.search(pattern, param_name) for pattern in patterns)

    def _get_variable_name(self, param_name):
        """`param_name` without a tensor's ":<index>" suffix."""
        return _variable_name(param_name)


class LambOptimizer(AdamWeightDecayOptimizer):
    """LAMB: Adam with bias correction and decoupled weight decay, whose step
    for each variable is rescaled to the size of the variable (a per-variable
    trust ratio), which keeps large learning rates, and so large batches,
    stable.

    For each variable w with gradient g, at update t (from 1):
    ``m = b1*m + (1-b1)*g``, ``v = b2*v + (1-b2)*g^2``,
    ``r = (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + wd * w``,
    ``w = w - lr * ratio * r`` with ``ratio = |w| / |r|`` (L2 norms over the
    whole variable) when both norms are positive, else 1. Variables matching
    `exclude_from_weight_decay` get neither the decay term nor the ratio
    (ratio 1).

    The slots are ``<name>/adam_m`` and ``<name>/adam_v``, the names and
    meaning of `AdamWeightDecayOptimizer`'s: the moments themselves are the
    same running averages, stored without the bias correction, which is
    applied when they are used.

    Args:
      learning_rate: float or scalar float tensor.
      step: the update's number t, counted from 1 (scalar tensor, any
        numeric type); None: the global step + 1, read when the update is
        built.
      fused: compute each variable's moments, direction and norms in one
        XLA-compiled loop (True), or as separate TensorFlow ops (False);
        None: fused where no GPU is visible (as bert_ops' "auto"). Same
        values to float rounding. On a CPU every separate element-wise op
        reads and writes the whole variable: a BERT-Base training step on
        one thread took 1.11x AdamW's CPU time written out, 1.05x fused
        (benchmarks/RESULTS.md). Never fused inside an XLA context (a TPU
        computation).
      name: name of the optimizer's ops.
      **adam_args: weight_decay_rate, beta_1, beta_2, epsilon and
        exclude_from_weight_decay, as for `AdamWeightDecayOptimizer`.
    """

    def __init__(self, learning_rate, step=None, fused=None, name="LambOptimizer",
                 **adam_args):
        super().__init__(learning_rate, name=name, **adam_args)
        self.step = step
        self.fused = fused

    def _prepare(self):
        super()._prepare()
        step = self.step
        if step is None:
            step = tf.train.get_or_create_global_step() + 1
        t = tf.cast(step, tf.float32)
        # Once per update rather than once per variable. With
        # s = sqrt(1 - b2^t) / (1 - b1^t) and eps' = eps * sqrt(1 - b2^t),
        # the bias-corrected direction (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
        # equals s * m / (sqrt(v) + eps'): one multiplication of a whole
        # variable fewer, and s goes into the scalar rate instead.
        v_correction = tf.sqrt(1.0 - tf.pow(tf.constant(self.beta_2, tf.float32), t))
        self._scale = v_correction / (1.0 - tf.pow(tf.constant(self.beta_1, tf.float32), t))
        self._epsilon_hat = self.epsilon * v_correction

    def _rate(self, decayed, w_norm=None, d_norm=None):
        """The scalar rate of ``w -= rate * d`` (d = r / s, see `_prepare`):
        lr * s for an excluded variable or where a norm is 0 (ratio 1), else
        lr * ratio * s with ratio = |w| / |r| = |w| / (s |d|), i.e.
        lr * |w| / |d|."""
        if not decayed:
            return self._lr_t * self._scale
        both_positive = tf.logical_and(w_norm > 0.0, d_norm > 0.0)
        # (The quotient's divisor is made 1 where it is not used, so that no
        # inf or nan is computed even in the branch tf.where discards.)
        trusted = self._lr_t * w_norm / tf.where(both_positive, d_norm, tf.ones_like(d_norm))
        return tf.where(both_positive, trusted, self._lr_t * self._scale)

    def _direction_and_rate(self, m_t, v_t, weights, var_name):
        """The update of one variable as (d, rate), w -= rate * d, written
        out as separate ops.

        Args:
          m_t, v_t: the updated moments, shaped like the variable.
          weights: the variable's value before the update.
          var_name: its name, for the exclusions.

        Returns:
          (d, rate): d shaped like the variable, rate a float32 scalar.
        """
        d = m_t / (tf.sqrt(v_t) + self._epsilon_hat)
        if not self._do_use_weight_decay(var_name):
            return d, self._rate(False)
        d += (self.weight_decay_rate / self._scale) * weights
        # (l2_loss is sum(x^2) / 2 in one kernel, with no squared copy.)
        return d, self._rate(True, tf.sqrt(2.0 * tf.nn.l2_loss(weights)),
                             tf.sqrt(2.0 * tf.nn.l2_loss(d)))

    def _fused_here(self):
        """Whether an update built now runs as one XLA loop (`fused`)."""
        fused = self.fused
        if fused is None:
            fused = bert_ops.choose_fused_ops("auto") != bert_ops.FusedOps()
        if not fused:
            return False
        context = tf.get_default_graph()._get_control_flow_context()  # pylint: disable=protected-access
        return not control_flow_util.GetContainingXLAContext(context)

    def _resource_apply_dense(self, grad, var):
        """Moments updated, then ``w -= rate * d`` in one kernel.
        Transient memory: d and the new moments (or, written out, the
        moments' arithmetic), the size of this one variable."""
        m = self.get_slot(var, "m")
        v = self.get_slot(var, "v")
        decayed = self._do_use_weight_decay(self._get_variable_name(var.name))
        weights = None
        if decayed:
            # The weights are read once `grad` exists, after the backward
            # pass (see AdamWeightDecayOptimizer._resource_apply_dense).
            with tf.control_dependencies([grad]):
                weights = var.read_value()
        if self._fused_here():
            scalars = (tf.constant(1.0 - self.beta_1, tf.float32),
                       tf.constant(1.0 - self.beta_2, tf.float32), self._epsilon_hat)
            m_value, v_value = m.read_value(), v.read_value()
            decay = self.weight_decay_rate / self._scale if decayed else None
            # The optimizer builds each update colocated with its variable, and
            # tf.function traces anew for every colocation: each variable
            # would get its own function, each compiled by XLA when the
            # session first runs it (46 compilations, about 10 s, for a
            # 2-layer model). Called outside the colocation (the device scope
            # still applies), variables of one shape share one function.
            with tf.colocate_with(None, ignore_existing=True):
                if decayed:
                    m_t, v_t, d, d_squares, w_squares = _fused_lamb_decayed(
                        grad, m_value, v_value, weights, *scalars, decay)
                else:
                    m_t, v_t, d = _fused_lamb_moments(grad, m_value, v_value, *scalars)
            if decayed:
                rate = self._rate(True, tf.sqrt(w_squares), tf.sqrt(d_squares))
            else:
                rate = self._rate(False)
            deps = [m.assign(m_t, read_value=False), v.assign(v_t, read_value=False)]
        else:
            m_t = m.assign_add((grad - m.read_value()) * (1.0 - self.beta_1))
            v_t = v.assign_add((tf.square(grad) - v.read_value()) * (1.0 - self.beta_2))
            d, rate = self._direction_and_rate(m_t, v_t, weights,
                                               self._get_variable_name(var.name))
            deps = []
        with tf.control_dependencies(deps):
            return tf.raw_ops.ResourceApplyGradientDescent(var=var.handle, alpha=rate,
                                                           delta=d, use_locking=False)

    def _dense_step(self, new_m, new_v, var):
        """LAMB's step for reference (non-resource) variables (see
        `AdamWeightDecayOptimizer._apply_dense`): rate * d."""
        d, rate = self._direction_and_rate(new_m, new_v, tf.identity(var),
                                           self._get_variable_name(var.name))
        return rate * d


def _lamb_moments_and_direction(grad, m, v, one_minus_beta_1, one_minus_beta_2, epsilon_hat):
    """LAMB's new moments and undecayed direction m / (sqrt(v) + eps'), all
    shaped like `grad` (see `LambOptimizer._prepare`)."""
    m_t = m + (grad - m) * one_minus_beta_1
    v_t = v + (grad * grad - v) * one_minus_beta_2
    return m_t, v_t, m_t / (tf.sqrt(v_t) + epsilon_hat)


@tf.function(jit_compile=True, autograph=False)
def _fused_lamb_moments(grad, m, v, one_minus_beta_1, one_minus_beta_2, epsilon_hat):
    """`_lamb_moments_and_direction` as one XLA loop: (m_t, v_t, d)."""
    return _lamb_moments_and_direction(grad, m, v, one_minus_beta_1, one_minus_beta_2,
                                       epsilon_hat)


@tf.function(jit_compile=True, autograph=False)
def _fused_lamb_decayed(grad, m, v, weights, one_minus_beta_1, one_minus_beta_2,
                        epsilon_hat, decay):
    """The same with the decay term d += decay * weights, and the sums of
    squares of d and of the weights (scalars), in one XLA loop."""
    m_t, v_t, d = _lamb_moments_and_direction(grad, m, v, one_minus_beta_1,
                                              one_minus_beta_2, epsilon_hat)
    d = d + decay * weights
    return m_t, v_t, d, tf.reduce_sum(d * d), tf.reduce_sum(weights * weights)
