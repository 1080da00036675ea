"""The element-wise kernels of BERT's Transformer: GELU, LayerNorm and
dropout, each in two builds, and the gradients that keep its backward pass
small.

`modeling.py` builds the model from these functions; nothing here creates a
variable or knows about layers.

Two builds of each kernel, with the same formulas (so the same values, to
float rounding):

* written out: a chain of ordinary TensorFlow ops, which every device, every
  model server and XLA's TPU compiler run. GELU is written in the form
  that TensorFlow's oneDNN graph rewriter (on by default on x86-64 Linux)
  fuses into the matmul and bias add before it. LayerNorm is not written
  in the form of its LayerNorm rewrite, which computes with an epsilon of
  1e-3 instead of BERT's 1e-12 (TensorFlow 2.15 to 2.21);
* fused: one XLA-compiled loop for the forward pass and one for the
  backward pass. On a CPU each element-wise op is a separate kernel that
  reads and writes a full tensor, and these chains run 2-5x faster as one
  loop (figures at each kernel below). Dropout's fused build also decides
  each value with 16 random bits instead of 32.

Which kernels are fused is a `FusedOps` value, chosen once (the scripts'
`--fused_ops` flag, or `modeling.BertModel(fused_ops=...)`) and handed to
each call as its `fused` argument: `choose_fused_ops("auto")` fuses all
three where no GPU is visible, and `fused=None` at a call means the same;
for a graph that only infers, "auto" compiles none where oneDNN is on
(which runs the written-out GELU inside the matmul).
Inside an XLA context (a TPU computation, which compiles the written-out
ops itself) every kernel is written out, whatever the choice.

Gradients. Each kernel's gradient (but the written-out dropout's and
LayerNorm's, which are TensorFlow's own) is attached through
`gradient_override_map` to the IdentityN that ends its forward
computation, of the result and what the gradient reads; an IdentityN
computes nothing, so a forward graph runs nothing extra
(`tf.custom_gradient` would add helper ops). They serve
graph-mode `tf.gradients`, which the training scripts use; a GradientTape
ignores them and differentiates the same ops the ordinary way (same values,
more memory). What each one keeps of the forward pass:

* GELU: its input only, not the formula's four or five intermediates of the
  same size; before a matmul (`gelu_matmul`), the backward pass recomputes
  the activation from that input instead of keeping it;
* dropout: the boolean mask, a quarter of a float32 copy;
* LayerNorm (fused): the input, in its own dtype, and two per-row
  statistics.
"""

import contextlib
import dataclasses
import functools
import math

import tensorflow.compat.v1 as tf
from tensorflow.python.ops import control_flow_util

LAYER_NORM_EPSILON = 1e-12  # Google's LayerNorm, as its checkpoints were trained.


# ---------------------------------------------------------------------------
# Which kernels are fused.

@dataclasses.dataclass(frozen=True)
class FusedOps:
    """Which kernels are built as XLA-compiled loops (True) rather than
    written out (False)."""

    gelu: bool = False
    layer_norm: bool = False
    dropout: bool = False

    def __str__(self):
        names = [name for name in FUSED_OP_NAMES if getattr(self, name)]
        return ",".join(names) if names else "none"


FUSED_OP_NAMES = tuple(field.name for field in dataclasses.fields(FusedOps))


@functools.lru_cache(maxsize=None)
def _no_gpu_visible():
    return not tf.config.list_physical_devices("GPU")


@functools.lru_cache(maxsize=None)
def onednn_rewrites_graphs():
    """Whether TensorFlow's oneDNN back-end is on in this process (x86-64
    builds with TF_ENABLE_ONEDNN_OPTS on, which `quiet_tf` makes the default
    on Linux). Its graph rewriter then fuses the written-out GELU into the
    matmul before it."""
    try:
        from tensorflow.python.util import _pywrap_util_port
        return bool(_pywrap_util_port.IsMklEnabled())
    except (ImportError, AttributeError):
        return False


def choose_fused_ops(setting="auto", training=True):
    """The `FusedOps` that `setting` describes.

    Args:
      setting: a `FusedOps` (returned as it is); None or "auto": none where
        a GPU is visible; otherwise all three for a graph that is trained
        (where they were measured to pay off), and none for one that only
        infers where oneDNN rewrites the graphs (`onednn_rewrites_graphs`):
        there a BERT-Base forward pass, GELU fused into the matmuls by
        oneDNN, runs within a few percent of the compiled loops' speed,
        and XLA's compiler stays out of the process's memory; "all";
        "none"; or names from FUSED_OP_NAMES, comma-separated
        ("gelu,dropout").
      training: whether gradients will be taken of the graph built with the
        choice (for "auto").

    Raises:
      ValueError: an unknown name.
    """
    if isinstance(setting, FusedOps):
        return setting
    text = (setting or "auto").strip().lower()
    if text == "auto":
        compiled = _no_gpu_visible() and (training or not onednn_rewrites_graphs())
        return FusedOps(*[compiled] * len(FUSED_OP_NAMES))
    if text == "all":
        return FusedOps(*[True] * len(FUSED_OP_NAMES))
    if text == "none":
        return FusedOps()
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in FUSED_OP_NAMES]
    if unknown or not names:
        raise ValueError("unknown fused op(s) %s in %r: expected auto, all, none or a "
                         "comma-separated list of %s"
                         % (", ".join(unknown) or "''", setting, ", ".join(FUSED_OP_NAMES)))
    return FusedOps(**{name: True for name in names})


def _fused_here(fused, name):
    """Whether a kernel built now in the default graph is fused: `fused`
    (None: the "auto" choice for kernel `name`), and never inside an XLA
    control-flow context."""
    if fused is None:
        fused = getattr(choose_fused_ops("auto"), name)
    if not fused:
        return False
    context = tf.get_default_graph()._get_control_flow_context()  # pylint: disable=protected-access
    return not control_flow_util.GetContainingXLAContext(context)


# ---------------------------------------------------------------------------
# Attaching gradients.

def _register_gradient(name):
    """Decorator: registers a gradient function under `name`, once.

    A second import of this file (under another module name) finds the name
    taken and keeps the first registration, which has the same code.
    """
    def register(function):
        try:
            tf.RegisterGradient(name)(function)
        except KeyError:
            pass
        return function
    return register


def _after(tensor, dependency):
    """`tensor`, read through an Identity that waits for `dependency`.

    Backward-pass recomputations start from such a read. Being a different
    tensor, it stops grappler from merging the recomputation with the
    identical forward ops (which would keep their outputs alive until the
    backward pass, the memory this saves); the wait stops the executor from
    running it early for the same reason.
    """
    with tf.control_dependencies([dependency]):
        return tf.identity(tensor)


def _identity_n_with_gradient(tensors, gradient_name):
    """`tensors[0]`, read through an IdentityN of all `tensors` whose gradient
    is the one registered as `gradient_name`.

    The other tensors have no consumer after it: they are there so that the
    gradient function finds what it needs among the op's inputs (the input
    of a compiled loop, a mask, per-row statistics), and so that the
    backward pass keeps exactly those alive.
    """
    with tf.get_default_graph().gradient_override_map({"IdentityN": gradient_name}):
        return tf.identity_n(tensors)[0]


def _compiled(op):
    """Whether the IdentityN `op` ending a kernel (see
    `_identity_n_with_gradient`) carries the value of a compiled loop
    rather than of written-out ops."""
    return op.inputs[0].op.type in ("PartitionedCall", "StatefulPartitionedCall")


# A bfloat16 or float16 input is widened to float32 inside the compiled
# loops, and the result rounded once at the end: XLA's CPU loops compute
# 16-bit floats 2-3x slower than they convert them (BERT-Base's GELU on
# [2048, 3072] in bfloat16, 1 thread: forward 13.7 -> 5.3 ms, backward 21.3
# -> 9.6 ms), and one rounding is also closer to the exact values than one
# per operation.
def _widened(x):
    """`x` as float32 if it is a 16-bit float, else `x`."""
    return tf.cast(x, tf.float32) if x.dtype.size < 4 else x


def _as_float32(x):
    return x if x.dtype == tf.float32 else tf.cast(x, tf.float32)


# ---------------------------------------------------------------------------
# GELU.
#
# Written out, the forward GELU is 9 element-wise passes over its input and
# its backward 13 more, over the feed-forward activations, a layer's largest
# tensors; fused, each direction is one loop: 3-5x faster on a CPU at
# BERT-Base's [2048, 3072] (1 thread).

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_GRADIENT = "BertModelingGeluFromInput"
_GELU_MATMUL_GRADIENT = "BertModelingMatMulRecomputingGelu"
_GELU_INTO_MATMUL_GRADIENT = "BertModelingGeluIntoDense"


def _gelu_cdf(x):
    """Google's tanh approximation of the standard normal CDF at `x`:
    0.5 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3)))."""
    return 0.5 * (1.0 + tf.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * (x * x * x))))


def _gelu_backward_parts(x):
    """What the backward pass needs of the tanh GELU at `x`: (activation,
    derivative), both of the shape of `x`.

    With u = sqrt(2 / pi) (x + 0.044715 x^3), t = tanh(u) and
    cdf = (1 + t) / 2: gelu = x cdf, and
    gelu' = cdf + (x / 2) (1 - t^2) u', u' = sqrt(2 / pi) (1 + 3 * 0.044715 x^2).
    One tanh serves both, and TanhGrad forms dy (1 - t^2) in one op: 13
    element-wise passes over `x` for the two. The activation agrees with
    `gelu`'s to float rounding.
    """
    x_squared = x * x
    t = tf.tanh(x * (_SQRT_2_OVER_PI + (_SQRT_2_OVER_PI * 0.044715) * x_squared))
    cdf = 0.5 * t + 0.5
    half_x_du = x * ((0.5 * _SQRT_2_OVER_PI)
                     + (0.5 * _SQRT_2_OVER_PI * 3.0 * 0.044715) * x_squared)
    derivative = cdf + tf.raw_ops.TanhGrad(y=t, dy=half_x_du)
    return x * cdf, derivative


@tf.function(jit_compile=True, autograph=False)
def _fused_gelu_forward(x):
    wide = _widened(x)
    return tf.cast(wide * _gelu_cdf(wide), x.dtype)


@tf.function(jit_compile=True, autograph=False)
def _fused_gelu_input_gradient(x, grad):
    return tf.cast(_widened(grad) * _gelu_backward_parts(_widened(x))[1], grad.dtype)


@tf.function(jit_compile=True, autograph=False)
def _fused_gelu_with_input_gradient(x, grad):
    activation, derivative = _gelu_backward_parts(_widened(x))
    return tf.cast(activation, x.dtype), tf.cast(_widened(grad) * derivative, grad.dtype)


def _gelu_written_out(x):
    """x * cdf(x) as written-out ops, in the form 0.5 x (1 + tanh(u)) that
    TensorFlow's oneDNN rewriter recognizes: after a matmul and bias add it
    becomes part of that matmul (`_FusedMatMul` with GeluApproximate). The
    same value as `x * _gelu_cdf(x)`, bit for bit: halving is exact, so
    both round x (1 + tanh(u)) / 2 once."""
    inner = _SQRT_2_OVER_PI * (x + 0.044715 * (x * x * x))
    return (0.5 * x) * (1.0 + tf.tanh(inner))


@_register_gradient(_GELU_GRADIENT)
def _gelu_gradient(op, grad, *unused_pass_through_grad):
    """Gradient of the IdentityN (gelu, x) that ends a GELU, for the whole
    GELU: everything goes to `x` and is computed from `x` alone."""
    del unused_pass_through_grad  # The IdentityN's x output has no consumer.
    x = _after(op.inputs[1], grad)
    if _compiled(op):
        return [None, _fused_gelu_input_gradient(x, grad)]
    _, derivative = _gelu_backward_parts(x)
    return [None, grad * derivative]


@_register_gradient(_GELU_MATMUL_GRADIENT)
def _gelu_matmul_gradient(op, grad):
    """Gradient of matmul(gelu(x), kernel) in `gelu_matmul`, for the GELU
    and the matmul together, keeping only the pre-activation `x`.

    The kernel's gradient needs the activation: it is recomputed from `x`,
    with GELU's derivative from the same tanh (`_gelu_backward_parts`). The
    first slot (the activation's) receives the gradient with respect to `x`
    itself, which the IdentityN ending that GELU passes on unchanged
    (`_gelu_into_matmul_gradient`): right because that activation feeds this
    matmul alone.
    """
    activation, kernel = op.inputs
    ending = activation.op
    x = _after(ending.inputs[1], grad)
    grad_activation = tf.matmul(grad, kernel, transpose_b=True)
    if _compiled(ending):
        activation_again, grad_x = _fused_gelu_with_input_gradient(x, grad_activation)
    else:
        activation_again, derivative = _gelu_backward_parts(x)
        grad_x = grad_activation * derivative
    return [grad_x, tf.matmul(activation_again, grad, transpose_a=True)]


@_register_gradient(_GELU_INTO_MATMUL_GRADIENT)
def _gelu_into_matmul_gradient(op, grad, *unused_pass_through_grad):
    """Gradient of the IdentityN ending the GELU in `gelu_matmul`: `grad`
    already is with respect to `x` (`_gelu_matmul_gradient`)."""
    del op, unused_pass_through_grad  # The IdentityN's x output has no consumer.
    return [None, grad]


def _gelu(x, gradient_name, fused):
    """x * cdf(x), as a compiled loop (`fused`) or written out, followed by
    an IdentityN (gelu, x) whose gradient is the one registered as
    `gradient_name`."""
    x = tf.convert_to_tensor(x)
    activation = _fused_gelu_forward(x) if _fused_here(fused, "gelu") else _gelu_written_out(x)
    return _identity_n_with_gradient([activation, x], gradient_name)


def gelu(x, fused=None):
    """Gaussian Error Linear Unit, tanh approximation (Google's "gelu"):
    x * Phi(x), Phi the standard normal CDF approximated as in `_gelu_cdf`
    (https://arxiv.org/abs/1606.08415).

    Args:
      x: float Tensor.
      fused: build it as XLA-compiled loops (None: the "auto" choice).

    Returns:
      Tensor of the shape and dtype of `x`, whose gradient is computed from
      `x` alone.
    """
    return _gelu(x, _GELU_GRADIENT, fused)


def gelu_exact(x):
    """Exact GELU, x * Phi(x) with Phi written with erf: what Hugging Face
    calls "gelu" (Google's "gelu" is the tanh form, `gelu`)."""
    return x * (0.5 * (1.0 + tf.math.erf(x * (1.0 / math.sqrt(2.0)))))


def gelu_matmul(pre_activation, kernel, fused=None):
    """matmul(gelu(pre_activation), kernel), whose backward pass keeps only
    `pre_activation` and recomputes the activation for the kernel's
    gradient.

    Args:
      pre_activation: float Tensor [rows, in].
      kernel: Tensor [in, out] of the same dtype.
      fused: build the GELU as XLA-compiled loops (None: "auto").

    Returns:
      Tensor [rows, out].
    """
    activation = _gelu(pre_activation, _GELU_INTO_MATMUL_GRADIENT, fused)
    with tf.get_default_graph().gradient_override_map({"MatMul": _GELU_MATMUL_GRADIENT}):
        return tf.matmul(activation, kernel)


# ---------------------------------------------------------------------------
# Dropout.
#
# Drawing the random numbers is most of dropout's cost on a CPU (about 5 ns
# per 32-bit Philox draw, one per value in tf.nn.dropout). Fused, each value
# is decided by 16 random bits, a quarter of a 64-bit draw, and the
# comparison, scaling and selection run as one compiled loop in each
# direction. Forward pass of BERT-Base's [2048, 768] and [16, 12, 128, 128]
# dropouts, 1 thread: 1.9x less time in float32, 2.8x in bfloat16, whose
# element-wise TensorFlow kernels are slow on a CPU. The drop probability is
# then round(rate * 2^16) / 2^16, within 2^-17 of the rate.

_DROPOUT_GRADIENT = "BertModelingDropoutFromMask"

# Stack of [seed tensor, number of masks drawn from it], innermost last.
_DROPOUT_SEEDS = []


@contextlib.contextmanager
def stateless_dropout_seed(seed):
    """Makes `dropout` calls inside the context reproducible from `seed`.

    The k-th call draws its mask with the stateless seed ``seed + [0, k]``:
    building the same layer twice from one seed tensor gives the same masks,
    which is how `recompute.py` rebuilds a layer exactly.

    Args:
      seed: int32 Tensor [2].
    """
    _DROPOUT_SEEDS.append([seed, 0])
    try:
        yield
    finally:
        _DROPOUT_SEEDS.pop()


def _next_dropout_seed():
    """The stateless seed of the next mask inside `stateless_dropout_seed`,
    or None outside it."""
    if not _DROPOUT_SEEDS:
        return None
    state = _DROPOUT_SEEDS[-1]
    seed, draws = state
    state[1] += 1
    return seed + tf.constant([0, draws], dtype=seed.dtype)


@tf.function(jit_compile=True, autograph=False)
def _fused_dropout_forward(x, bits, threshold, scale):
    keep = bits >= threshold
    return tf.compat.v2.where(keep, x * scale, tf.zeros([], x.dtype)), keep


@tf.function(jit_compile=True, autograph=False)
def _fused_dropout_backward(grad, keep, scale):
    return tf.compat.v2.where(keep, grad * scale, tf.zeros([], grad.dtype))


@_register_gradient(_DROPOUT_GRADIENT)
def _dropout_gradient(op, grad, *unused_pass_through_grads):
    """Gradient of the IdentityN (output, keep, x, scale) ending a fused
    dropout: all of it to `x`, from the boolean mask alone."""
    del unused_pass_through_grads  # Only the output has consumers.
    _, keep, _, scale = op.inputs
    return [None, None, _fused_dropout_backward(grad, keep, scale), None]


def _shape_of(x):
    """The shape of `x` as an int32 Tensor: a constant where it is known
    when the graph is built, so that a mask drawn with it does not wait for
    `x` (which a recomputed layer may then skip, see `recompute.py`)."""
    if x.shape.is_fully_defined():
        return tf.constant(x.shape.as_list(), tf.int32)
    return tf.shape(x)


def _random_bits16(shape, seed):
    """uint16 Tensor of `shape` (an int32 Tensor), uniformly random bits from
    the stateless int32 `seed` [2]."""
    count = tf.reduce_prod(shape)
    words = tf.random.stateless_uniform(tf.reshape((count + 3) // 4, [1]), seed=seed,
                                        minval=None, maxval=None, dtype=tf.uint64)
    bits = tf.reshape(tf.bitcast(words, tf.uint16), [-1])  # 4 per word.
    return tf.reshape(bits[:count], shape)


def _fused_dropout(input_tensor, dropout_prob, seed):
    """Dropout with 16-bit draws from `seed` (None: a fresh one per run) and
    compiled loops."""
    seeded = seed is not None
    if not seeded:
        seed = tf.random.uniform([2], minval=-2 ** 31, maxval=2 ** 31 - 1, dtype=tf.int32)
    bits = _random_bits16(_shape_of(input_tensor), seed)
    # Dropped where bits < threshold: probability threshold / 2^16.
    threshold = tf.constant(min(int(round(dropout_prob * 65536.0)), 65535), tf.uint16)
    scale = tf.constant(1.0 / (1.0 - dropout_prob), input_tensor.dtype)
    if seeded:
        # The mask apart from the input, so that its gradient depends on the
        # seed alone: a recomputed layer (`recompute.py`) then needs no
        # recomputation of the dropout's input where nothing else needs it.
        # The same values as the compiled forward loop's.
        keep = tf.math.greater_equal(bits, threshold)
        output = _fused_dropout_backward(input_tensor, keep, scale)
    else:
        output, keep = _fused_dropout_forward(input_tensor, bits, threshold, scale)
    return _identity_n_with_gradient([output, keep, input_tensor, scale], _DROPOUT_GRADIENT)


def _written_out_dropout(input_tensor, dropout_prob, seed):
    """Dropout as separate ops: tf.nn.dropout's draw, or a stateless one
    from `seed`."""
    shape = _shape_of(input_tensor)
    if seed is not None:
        noise = tf.random.stateless_uniform(shape, seed=seed)
    elif input_tensor.dtype.size >= 4:
        # The draw of tf.nn.dropout: same op, dtype and comparison.
        noise = tf.random.uniform(shape, dtype=input_tensor.dtype)
    else:
        # A 16-bit uniform draw has 7 or 10 random bits: at rate 0.1 it
        # would drop 10.2% (bfloat16) instead of 10%.
        noise = tf.random.uniform(shape)
    keep = noise >= dropout_prob
    scaled = input_tensor * (1.0 / (1.0 - dropout_prob))
    # Select's gradient reads only the condition; Mul's, by a constant, only
    # the constant.
    return tf.compat.v2.where(keep, scaled, tf.zeros([], dtype=input_tensor.dtype))


def dropout(input_tensor, dropout_prob, fused=None):
    """Zeroes each value with probability `dropout_prob`, scales the rest by
    1 / (1 - dropout_prob).

    Args:
      input_tensor: float Tensor.
      dropout_prob: Python float in [0, 1), the probability of *dropping* a
        value (not of keeping it); 0 or None returns `input_tensor` itself.
      fused: draw 16 bits per value and use compiled loops (None: "auto").

    Returns:
      Tensor of the shape and dtype of `input_tensor`. Its gradient needs
      only the boolean mask. Inside `stateless_dropout_seed` the mask is a
      function of that seed; elsewhere each run draws a new one.
    """
    if not dropout_prob:
        return input_tensor
    with tf.name_scope("dropout"):
        seed = _next_dropout_seed()
        if _fused_here(fused, "dropout"):
            return _fused_dropout(input_tensor, dropout_prob, seed)
        return _written_out_dropout(input_tensor, dropout_prob, seed)


# ---------------------------------------------------------------------------
# LayerNorm.
#
# Fused: the forward pass as one compiled loop instead of nine kernels
# (casts, moments, scale and shift), and the input's gradient as another,
# from the input and the per-row mean and 1 / std. Forward and backward of
# BERT-Base's [2048, 768] on a CPU, 1 thread: 8.7 -> 5.2 ms in float32, 9.1
# -> 3.7 ms in bfloat16, whose backward pass then keeps the bfloat16 input
# rather than a float32 copy.

_LAYER_NORM_GRADIENT = "BertModelingLayerNormFromInput"


def _layer_norm_float32(x, gamma, beta):
    """LayerNorm of the float32 `x` [..., width] over its last axis.

    Returns:
      (normalized x, float32 of x's shape; mean and 1 / std, float32
      [..., 1]).
    """
    # The statistics of tf.nn.moments: the variance about a mean that its
    # gradient does not flow through (that part of it is zero anyway).
    mean = tf.reduce_mean(x, axis=-1, keepdims=True)
    variance = tf.reduce_mean(tf.math.squared_difference(x, tf.stop_gradient(mean)),
                              axis=-1, keepdims=True)
    inverse_std = tf.math.rsqrt(variance + LAYER_NORM_EPSILON)
    # (x - mean) * gamma / std + beta, with gamma folded into the scale so
    # that the full-size tensor is traversed once less.
    scale = inverse_std * gamma
    return x * scale + (beta - mean * scale), mean, inverse_std


@tf.function(jit_compile=True, autograph=False)
def _fused_layer_norm_forward(x, gamma, beta):
    normalized, mean, inverse_std = _layer_norm_float32(tf.cast(x, tf.float32), gamma, beta)
    return tf.cast(normalized, x.dtype), mean, inverse_std


@tf.function(jit_compile=True, autograph=False)
def _fused_layer_norm_backward(x, gamma, mean, inverse_std, grad):
    """(gradient of x, grad * normalized x in float32); the caller sums the
    second (and `grad`) over rows for gamma's (and beta's) gradient, which
    TensorFlow's own reduction does faster than an XLA loop on a CPU."""
    grad = tf.cast(grad, tf.float32)
    normalized = (tf.cast(x, tf.float32) - mean) * inverse_std
    grad_normalized = grad * gamma
    # d/dx of (x - mean) / std, applied to grad_normalized, row by row.
    grad_x = inverse_std * (
        grad_normalized - tf.reduce_mean(grad_normalized, axis=-1, keepdims=True)
        - normalized * tf.reduce_mean(grad_normalized * normalized, axis=-1, keepdims=True))
    return tf.cast(grad_x, x.dtype), grad * normalized


@_register_gradient(_LAYER_NORM_GRADIENT)
def _layer_norm_gradient(op, grad, *unused_pass_through_grads):
    """Gradient of the IdentityN (output, x, gamma, beta, mean, inverse_std)
    ending a fused LayerNorm: to x, gamma and beta."""
    del unused_pass_through_grads  # Only the output has consumers.
    _, x, gamma, _, mean, inverse_std = op.inputs
    grad_x, grad_scaled = _fused_layer_norm_backward(x, gamma, mean, inverse_std, grad)
    rows = list(range(grad.shape.ndims - 1))
    return [None, grad_x, tf.reduce_sum(grad_scaled, rows),
            tf.reduce_sum(tf.cast(grad, tf.float32), rows), None, None]


def layer_norm(input_tensor, gamma, beta, fused=None):
    """(x - mean) / sqrt(variance + 1e-12) * gamma + beta over the last
    axis, with float32 statistics for any input dtype.

    Args:
      input_tensor: float Tensor [..., width] of known rank.
      gamma, beta: float32 Tensors (or variables) [width].
      fused: build it as XLA-compiled loops (None: "auto").

    Returns:
      Tensor of the shape and dtype of `input_tensor`.
    """
    if _fused_here(fused, "layer_norm"):
        gamma, beta = tf.convert_to_tensor(gamma), tf.convert_to_tensor(beta)
        normalized, mean, inverse_std = _fused_layer_norm_forward(input_tensor, gamma, beta)
        return _identity_n_with_gradient(
            [normalized, input_tensor, gamma, beta, mean, inverse_std], _LAYER_NORM_GRADIENT)
    normalized, _, _ = _layer_norm_float32(_as_float32(input_tensor), gamma, beta)
    return tf.cast(normalized, input_tensor.dtype)
