"""BERT's Transformer encoder, written on TensorFlow's v1 graph API.

The model is the one of Devlin et al. (2018) as released by Google: the same
public functions, the same numerics and the same variable names and shapes, so
Google's checkpoints load unchanged. Only core ops of ``tensorflow.compat.v1``
are used (no ``tf.contrib``, no ``tf.layers``, no Keras), which keeps graphs
buildable on TensorFlow 2.16 and later.

Two keyword arguments of `BertModel` go beyond the original; the training
scripts expose them as memory and speed options:

* ``compute_type``: ``tf.float32`` (default), ``tf.float16`` or
  ``tf.bfloat16``. Variables stay float32, so checkpoints do not change;
  matmuls and activations run in the compute type, LayerNorm statistics and
  the attention softmax in float32, and every accessor returns float32.
* ``recompute_grad``: rebuild each Transformer layer in the backward pass
  instead of keeping its activations (gradient checkpointing, `recompute.py`),
  for roughly one more forward pass of compute.

Independently of those options the backward pass keeps less than a plain
graph would: GELU is differentiated from its input alone, the feed-forward
output projection recomputes the GELU it consumed, and dropout keeps its
boolean mask rather than a float copy. These are gradient overrides on
ordinary ops, registered once below: a forward graph holds nothing extra until
gradients are taken.

On machines without a visible GPU, GELU, LayerNorm and dropout each run as
XLA-compiled loops, forward and backward, instead of chains of element-wise
kernels (same formulas, so the same values to float rounding; dropout draws
16 random bits per value instead of 32). Environment variables
BERT_FUSED_GELU, BERT_FUSED_LAYER_NORM and BERT_FUSED_DROPOUT choose for
each: =0 keeps the separate ops everywhere, =1 compiles them everywhere.
Graphs built inside `portable_ops()` (SavedModel exports) keep GELU and
LayerNorm as separate ops.
"""

import collections
import contextlib
import copy
import dataclasses
import functools
import json
import math
import os
import re

import tensorflow.compat.v1 as tf
from tensorflow.python.ops import control_flow_util

import recompute


@dataclasses.dataclass(eq=False)
class BertConfig:
    """Hyperparameters of a `BertModel`, the content of a `bert_config.json`.

    Attributes:
      vocab_size: rows of the word embedding table; `input_ids` lie in
        [0, vocab_size).
      hidden_size: width H of the embeddings, of every encoder layer and of
        the pooler.
      num_hidden_layers: number L of Transformer layers.
      num_attention_heads: heads A per self-attention layer; must divide
        `hidden_size`.
      intermediate_size: width of the feed-forward layer inside each
        Transformer layer (4 H in the released models).
      hidden_act: that feed-forward layer's activation, a callable or a name
        understood by `get_activation`. "gelu" is the tanh approximation the
        released checkpoints were trained with, "gelu_exact" the erf form.
      hidden_dropout_prob: dropout rate on the embeddings and on each dense
        projection that feeds a residual sum.
      attention_probs_dropout_prob: dropout rate on the attention weights.
      max_position_embeddings: rows of the position embedding table, hence the
        longest sequence the model accepts.
      type_vocab_size: number of distinct `token_type_ids` (segments).
      initializer_range: standard deviation of the truncated normal that
        initialises every weight matrix.

    Keys read by `from_dict` that are not listed here (written by other
    toolkits) become attributes too and round-trip through `to_dict`.
    """

    vocab_size: int
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: object = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 16
    initializer_range: float = 0.02

    @classmethod
    def from_dict(cls, json_object):
        """Builds a config from a dict; every key becomes an attribute."""
        config = cls(vocab_size=None)
        config.__dict__.update(json_object)
        return config

    @classmethod
    def from_json_file(cls, json_file):
        """Builds a config from a JSON file holding one object.

        Raises:
          ValueError: naming the file, when it is missing, is not JSON or
            holds something other than an object.
        """
        if not tf.io.gfile.exists(json_file):
            raise ValueError("BERT config file not found: %s" % json_file)
        with tf.io.gfile.GFile(json_file, "r") as reader:
            text = reader.read()
        try:
            parsed = json.loads(text)
        except ValueError as e:
            raise ValueError("BERT config file %s is not valid JSON: %s" % (json_file, e))
        if not isinstance(parsed, dict):
            raise ValueError("BERT config file %s must hold a JSON object" % json_file)
        return cls.from_dict(parsed)

    def to_dict(self):
        """Returns a deep copy of every attribute, as a dict."""
        return copy.deepcopy(self.__dict__)

    def to_json_string(self):
        """Returns the attributes as indented JSON with sorted keys."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"


class BertModel:
    """BERT ("Bidirectional Encoder Representations from Transformers").

    Building one adds the embeddings, the encoder and the pooler to the
    default graph under the variable scope `scope` ("bert" by default):

        config = modeling.BertConfig.from_json_file("bert_config.json")
        model = modeling.BertModel(config, is_training=True,
                                   input_ids=ids,          # int32 [B, S]
                                   input_mask=mask,        # 1 = real token
                                   token_type_ids=segments)
        logits = tf.matmul(model.get_pooled_output(), class_weights)

    A task head reads `get_pooled_output()` (one vector per sequence) or
    `get_sequence_output()` (one per token).
    """

    def __init__(self, config, is_training, input_ids, input_mask=None, token_type_ids=None,
                 use_one_hot_embeddings=False, scope=None, compute_type=tf.float32,
                 recompute_grad=False):
        """Builds the model.

        Args:
          config: `BertConfig`. Not modified.
          is_training: bool. When False both dropout rates are taken as 0.
          input_ids: int32 Tensor [batch_size, seq_length] of WordPiece ids.
          input_mask: optional int32 Tensor [batch_size, seq_length], 1 for
            tokens to attend to and 0 for padding; default all ones.
          token_type_ids: optional int32 Tensor [batch_size, seq_length] of
            segment ids; default all zeros.
          use_one_hot_embeddings: bool. Look words up with a one-hot matmul
            (fast on TPUs) instead of a gather.
          scope: optional variable scope name; default "bert".
          compute_type: dtype of the encoder's matmuls and activations.
          recompute_grad: bool. Recompute each layer in the backward pass
            instead of keeping its activations.

        Raises:
          ValueError: the config is unusable or a tensor has the wrong rank.
        """
        config = copy.deepcopy(config)
        _validate_config(config)
        # Resolved first, so that an unknown name fails before any variable
        # is created.
        activation = get_activation(config.hidden_act)
        if not is_training:
            config.hidden_dropout_prob = 0.0
            config.attention_probs_dropout_prob = 0.0

        batch_size, seq_length = get_shape_list(input_ids, expected_rank=2)
        if input_mask is None:
            input_mask = tf.ones([batch_size, seq_length], dtype=tf.int32)
        if token_type_ids is None:
            token_type_ids = tf.zeros([batch_size, seq_length], dtype=tf.int32)

        with tf.variable_scope(scope, default_name="bert"):
            with tf.variable_scope("embeddings"):
                word_vectors, self.embedding_table = embedding_lookup(
                    input_ids, config.vocab_size, embedding_size=config.hidden_size,
                    initializer_range=config.initializer_range,
                    use_one_hot_embeddings=use_one_hot_embeddings)
                # Segment and position embeddings are added, then LayerNorm
                # and dropout: the encoder's input.
                self.embedding_output = embedding_postprocessor(
                    word_vectors, use_token_type=True, token_type_ids=token_type_ids,
                    token_type_vocab_size=config.type_vocab_size,
                    initializer_range=config.initializer_range,
                    max_position_embeddings=config.max_position_embeddings,
                    dropout_prob=config.hidden_dropout_prob)

            # The encoder runs in `compute_type`; its outputs are cast back.
            with tf.variable_scope("encoder"):
                attention_mask = create_attention_mask_from_input_mask(input_ids, input_mask)
                encoder_input = self.embedding_output
                if compute_type != tf.float32:
                    encoder_input = tf.cast(encoder_input, compute_type)
                layers = transformer_model(
                    encoder_input, attention_mask=attention_mask,
                    hidden_size=config.hidden_size,
                    num_hidden_layers=config.num_hidden_layers,
                    num_attention_heads=config.num_attention_heads,
                    intermediate_size=config.intermediate_size,
                    intermediate_act_fn=activation,
                    hidden_dropout_prob=config.hidden_dropout_prob,
                    attention_probs_dropout_prob=config.attention_probs_dropout_prob,
                    initializer_range=config.initializer_range,
                    do_return_all_layers=True, recompute_grad=recompute_grad)
                self.all_encoder_layers = [_as_float32(layer) for layer in layers]
            self.sequence_output = self.all_encoder_layers[-1]

            with tf.variable_scope("pooler"):
                # One vector per sequence for classification: the final hidden
                # state of the first token ([CLS]) through a dense tanh layer,
                # which pre-training fits through next sentence prediction.
                first_token = self.sequence_output[:, 0, :]
                self.pooled_output = dense(
                    first_token, config.hidden_size, activation=tf.tanh,
                    kernel_initializer=create_initializer(config.initializer_range))

    def get_pooled_output(self):
        """Returns the pooler's output, float32 [batch_size, hidden_size]."""
        return self.pooled_output

    def get_sequence_output(self):
        """Returns the last encoder layer, float32 [batch_size, seq_length,
        hidden_size]: one vector per token."""
        return self.sequence_output

    def get_all_encoder_layers(self):
        """Returns every encoder layer's output, lowest first: a list of
        `num_hidden_layers` float32 Tensors [batch_size, seq_length,
        hidden_size]."""
        return self.all_encoder_layers

    def get_embedding_output(self):
        """Returns the encoder's input, float32 [batch_size, seq_length,
        hidden_size]: word + segment + position embeddings after LayerNorm
        (and dropout when training)."""
        return self.embedding_output

    def get_embedding_table(self):
        """Returns the word embedding variable [vocab_size, hidden_size]
        (the masked LM output layer shares it)."""
        return self.embedding_table


def _as_float32(tensor):
    """`tensor` cast to float32 when it is of a reduced-precision type."""
    return tensor if tensor.dtype == tf.float32 else tf.cast(tensor, tf.float32)


def _validate_config(config):
    """Rejects, with a readable ValueError, configs no model can be built from."""
    if config.vocab_size is None or int(config.vocab_size) <= 0:
        raise ValueError("BertConfig.vocab_size must be a positive integer, got %r"
                         % (config.vocab_size,))
    if config.hidden_size % config.num_attention_heads != 0:
        raise ValueError(
            "The hidden size (%d) is not a multiple of the number of attention "
            "heads (%d)" % (config.hidden_size, config.num_attention_heads))


# ---------------------------------------------------------------------------
# Gradient overrides. Each is attached to one ordinary op of the forward graph
# through `gradient_override_map`, so the forward graph stays exactly the
# computation (tf.custom_gradient would add helper ops that dangle until
# gradients are taken). They serve graph-mode `tf.gradients`, which Estimator
# training uses; a GradientTape ignores them and differentiates the same ops
# the ordinary way (same values, more memory).


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


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_GRADIENT = "BertModelingGeluFromInput"
_GELU_DENSE_GRADIENT = "BertModelingMatMulRecomputingGelu"
_GELU_INTO_DENSE_GRADIENT = "BertModelingGeluIntoDense"


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


# GELU's element-wise chain as one compiled loop. Written out, the forward
# GELU is 9 passes over its input and the backward 13 more, each a separate
# kernel reading and writing a tensor of the feed-forward width (in BERT the
# largest activations); XLA fuses each chain into one loop over the input:
# 3-5x faster on a CPU at BERT-Base's [2048, 3072] (1 thread). Same
# formulas, so the values agree with the written-out ops to float rounding.
FUSED_GELU_VARIABLE = "BERT_FUSED_GELU"


# A bfloat16 or float16 input is widened to float32 inside the loop, and the
# result rounded once at the end: XLA's CPU loops compute 16-bit floats 2-3x
# slower than they convert them (BERT-Base's [2048, 3072] in bfloat16, 1
# thread: forward 13.7 -> 5.3 ms, backward 21.3 -> 9.6 ms), and one rounding
# is also closer to the exact GELU than one per operation.
def _widened(x):
    """`x` as float32 if it is a 16-bit float, else `x`."""
    return tf.cast(x, tf.float32) if x.dtype.size < 4 else x


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


@functools.lru_cache(maxsize=None)
def _no_gpu_visible():
    return not tf.config.list_physical_devices("GPU")


def _compiled_loops_enabled(variable):
    """Whether element-wise chains built now become XLA-compiled loops, by
    the environment variable named `variable`: "0" never, "1" always, unset
    (or anything else) where no GPU is visible, where they are measured to
    pay off. Never inside an XLA control-flow context (a TPU computation),
    which compiles the written-out ops itself."""
    setting = os.environ.get(variable, "")
    if setting == "0":
        return False
    graph = tf.get_default_graph()
    if control_flow_util.GetContainingXLAContext(graph._get_control_flow_context()):  # pylint: disable=protected-access
        return False
    return setting == "1" or _no_gpu_visible()


def compiled_loops_enabled():
    """Whether any of GELU, LayerNorm and dropout built now would use XLA
    (see COMPILED_LOOP_VARIABLES)."""
    return any(_compiled_loops_enabled(variable) for variable in COMPILED_LOOP_VARIABLES)


def fused_gelu_enabled():
    """Whether GELUs built now use the compiled loops above.

    Environment variable BERT_FUSED_GELU, as `_compiled_loops_enabled`
    reads it; never inside `portable_ops`.
    """
    return not _PORTABLE_OPS and _compiled_loops_enabled(FUSED_GELU_VARIABLE)


_PORTABLE_OPS = []  # Non-empty inside `portable_ops`.


@contextlib.contextmanager
def portable_ops():
    """GELUs and LayerNorms built inside the context use the written-out ops
    only, no XLA-compiled loops.

    For graphs meant to run elsewhere, such as an exported SavedModel, whose
    server may lack XLA. (Dropout, which only training graphs hold, is not
    affected.)
    """
    _PORTABLE_OPS.append(True)
    try:
        yield
    finally:
        _PORTABLE_OPS.pop()


def _gelu_input(op):
    """(x, its input index) of the op ending a GELU of x: the product
    x * cdf(x), or the IdentityN (gelu, x) after the fused GELU."""
    return (op.inputs[1], 1) if op.type == "IdentityN" else (op.inputs[0], 0)


def _to_input(op, index, grad):
    """`grad` for `op`'s input `index`, None for the others."""
    grads = [None] * len(op.inputs)
    grads[index] = grad
    return grads


@_register_gradient(_GELU_GRADIENT)
def _gelu_gradient(op, grad, *unused_pass_through_grad):
    """Gradient of the op that ends `gelu`, for the whole GELU.

    Everything goes to `x` and nothing to the other input, so the backward
    pass keeps `x` only, instead of the formula's four or five intermediates
    of the same size (in BERT, the largest activations of a layer).
    """
    del unused_pass_through_grad  # The IdentityN's x output has no consumer.
    x, index = _gelu_input(op)
    x = _after(x, grad)
    if op.type == "IdentityN":
        return _to_input(op, index, _fused_gelu_input_gradient(x, grad))
    _, derivative = _gelu_backward_parts(x)
    return _to_input(op, index, grad * derivative)


@_register_gradient(_GELU_DENSE_GRADIENT)
def _gelu_dense_matmul_gradient(op, grad):
    """Gradient of matmul(gelu(x), kernel) in `_gelu_dense`, for the GELU
    and the matmul together, keeping only the pre-activation `x`.

    The kernel's gradient needs the activation: it is recomputed from `x`,
    with GELU's derivative from the same tanh (`_gelu_backward_parts`). The
    first slot (the activation's) receives the gradient with respect to `x`
    itself, which the op ending that GELU passes on unchanged
    (`_gelu_into_dense_gradient`): right because that activation feeds this
    matmul alone.
    """
    activation, kernel = op.inputs
    x, _ = _gelu_input(activation.op)
    x = _after(x, grad)
    grad_activation = tf.matmul(grad, kernel, transpose_b=True)
    if activation.op.type == "IdentityN":
        activation_again, grad_x = _fused_gelu_with_input_gradient(x, grad_activation)
    else:
        activation_again, derivative = _gelu_backward_parts(x)
        grad_x = grad_activation * derivative
    return [grad_x, tf.matmul(activation_again, grad, transpose_a=True)]


@_register_gradient(_GELU_INTO_DENSE_GRADIENT)
def _gelu_into_dense_gradient(op, grad, *unused_pass_through_grad):
    """Gradient of the op ending the GELU in `_gelu_dense`: `grad` already
    is with respect to `x` (`_gelu_dense_matmul_gradient`)."""
    del unused_pass_through_grad  # The IdentityN's x output has no consumer.
    return _to_input(op, _gelu_input(op)[1], grad)


def _gelu(x, gradient_name):
    """x * cdf(x), the gradient of the op ending it registered as
    `gradient_name`; with `fused_gelu_enabled()`, the compiled loop followed by
    an IdentityN (gelu, x) that carries that gradient."""
    x = tf.convert_to_tensor(x)
    if fused_gelu_enabled():
        return _identity_n_with_gradient([_fused_gelu_forward(x), x], gradient_name)
    cdf = _gelu_cdf(x)
    with tf.get_default_graph().gradient_override_map({"Mul": gradient_name}):
        return x * cdf


def gelu(x):
    """Gaussian Error Linear Unit, tanh approximation (Google's "gelu").

    x * Phi(x), Phi the standard normal CDF approximated as in `_gelu_cdf`;
    see https://arxiv.org/abs/1606.08415. A smooth ReLU.

    Args:
      x: float Tensor.

    Returns:
      Tensor of the shape and dtype of `x`. Its gradient is computed from
      `x` alone (see `_gelu_gradient`).
    """
    return _gelu(x, _GELU_GRADIENT)


def gelu_exact(x):
    """Exact GELU, x * Phi(x) with Phi written with erf.

    What Hugging Face calls "gelu"; Google's "gelu" is the tanh form `gelu`.
    """
    return x * (0.5 * (1.0 + tf.math.erf(x * (1.0 / math.sqrt(2.0)))))


_ACTIVATIONS = {
    "linear": None,
    "relu": tf.nn.relu,
    "gelu": gelu,
    "gelu_new": gelu,  # Hugging Face's name for the tanh form.
    "gelu_exact": gelu_exact,
    "tanh": tf.tanh,
}


def get_activation(activation_string):
    """Resolves an activation given by name (case-insensitive).

    Args:
      activation_string: "linear", "relu", "gelu", "gelu_new",
        "gelu_exact" or "tanh"; a callable is returned unchanged.

    Returns:
      The activation function, or None for "linear", "" and None.

    Raises:
      ValueError: an unknown name.
    """
    if not isinstance(activation_string, str):
        return activation_string
    if not activation_string:
        return None
    name = activation_string.lower()
    if name not in _ACTIVATIONS:
        raise ValueError("Unsupported activation: %s (known: %s)"
                         % (name, ", ".join(_ACTIVATIONS)))
    return _ACTIVATIONS[name]


def get_assignment_map_from_checkpoint(tvars, init_checkpoint):
    """Matches graph variables with checkpoint variables by name.

    Args:
      tvars: the graph's variables (names such as "bert/pooler/dense/bias:0").
      init_checkpoint: checkpoint path or prefix.

    Returns:
      (assignment_map, initialized_variable_names): an OrderedDict mapping
      each name present in both to itself (the form `tf.train.
      init_from_checkpoint` takes), in checkpoint order, and a dict holding
      those names with and without the ":0" suffix.

    Raises:
      ValueError: a shared name has different shapes in the graph and the
        checkpoint (typically a config or vocabulary mismatch).
    """
    graph_variables = collections.OrderedDict(
        (re.sub(r":\d+$", "", var.name), var) for var in tvars)
    assignment_map = collections.OrderedDict()
    initialized_variable_names = {}
    for name, shape in tf.train.list_variables(init_checkpoint):
        if name not in graph_variables:
            continue
        graph_shape = graph_variables[name].shape.as_list()
        if list(shape) != graph_shape:
            raise ValueError(
                "Variable %s has shape %s in checkpoint %s but %s in the model: "
                "does --bert_config_file (and the vocabulary) match the "
                "checkpoint?" % (name, list(shape), init_checkpoint, graph_shape))
        assignment_map[name] = name
        initialized_variable_names[name] = 1
        initialized_variable_names[name + ":0"] = 1
    return assignment_map, initialized_variable_names


# ---------------------------------------------------------------------------
# Dropout, LayerNorm, dense layers.

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


# Dropout where no GPU is visible (environment variable BERT_FUSED_DROPOUT,
# read as BERT_FUSED_GELU is, see `_compiled_loops_enabled`). Drawing the
# random numbers is most of dropout's cost on a CPU (about 5 ns per 32-bit
# Philox draw, one per value in tf.nn.dropout). Here each value is decided by
# 16 random bits, a quarter of a 64-bit draw, and the comparison, scaling and
# selection run as one compiled loop in each direction. Forward pass of
# BERT-Base's [2048, 768] and [16, 12, 128, 128] dropouts, 1 thread: 1.9x
# less time in float32, 2.8x in bfloat16, whose element-wise TensorFlow
# kernels are slow on a CPU. The drop probability is then
# round(rate * 2^16) / 2^16, within 2^-17 of the rate.
FUSED_DROPOUT_VARIABLE = "BERT_FUSED_DROPOUT"
_DROPOUT_GRADIENT = "BertModelingDropoutFromMask"


def fused_dropout_enabled():
    """Whether `dropout` calls made now use 16-bit draws and compiled loops."""
    return _compiled_loops_enabled(FUSED_DROPOUT_VARIABLE)


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


def _random_bits16(shape, seed):
    """uint16 Tensor of `shape` (an int32 Tensor), uniformly random bits from
    the stateless int32 `seed` [2]."""
    count = tf.reduce_prod(shape)
    words = tf.random.stateless_uniform(tf.reshape((count + 3) // 4, [1]), seed=seed,
                                        minval=None, maxval=None, dtype=tf.uint64)
    bits = tf.reshape(tf.bitcast(words, tf.uint16), [-1])  # 4 per word.
    return tf.reshape(bits[:count], shape)


def _fused_dropout(input_tensor, dropout_prob, seed):
    """`dropout` with 16-bit draws from `seed` (None: a fresh one per run)
    and compiled loops; see FUSED_DROPOUT_VARIABLE."""
    if seed is None:
        seed = tf.random.uniform([2], minval=-2 ** 31, maxval=2 ** 31 - 1, dtype=tf.int32)
    bits = _random_bits16(tf.shape(input_tensor), seed)
    # Dropped where bits < threshold: probability threshold / 2^16.
    threshold = tf.constant(min(int(round(dropout_prob * 65536.0)), 65535), tf.uint16)
    scale = tf.constant(1.0 / (1.0 - dropout_prob), input_tensor.dtype)
    output, keep = _fused_dropout_forward(input_tensor, bits, threshold, scale)
    return _identity_n_with_gradient([output, keep, input_tensor, scale], _DROPOUT_GRADIENT)


def dropout(input_tensor, dropout_prob):
    """Zeroes each value with probability `dropout_prob`, scales the rest by
    1 / (1 - dropout_prob).

    Args:
      input_tensor: float Tensor.
      dropout_prob: Python float in [0, 1), the probability of *dropping* a
        value (not of keeping it); 0 or None returns `input_tensor` itself.

    Returns:
      Tensor of the shape and dtype of `input_tensor`. Its gradient needs
      only the boolean mask, a quarter of the memory of a float one.
    """
    if not dropout_prob:
        return input_tensor
    with tf.name_scope("dropout"):
        return _dropout(input_tensor, dropout_prob)


def _dropout(input_tensor, dropout_prob):
    """`dropout`'s ops, for a nonzero rate."""
    seed = None
    if _DROPOUT_SEEDS:
        state = _DROPOUT_SEEDS[-1]
        seed, draws = state
        state[1] += 1
        seed = seed + tf.constant([0, draws], dtype=seed.dtype)
    if fused_dropout_enabled():
        return _fused_dropout(input_tensor, dropout_prob, seed)
    shape = tf.shape(input_tensor)
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


# LayerNorm where no GPU is visible (environment variable
# BERT_FUSED_LAYER_NORM, read as BERT_FUSED_GELU is, see
# `_compiled_loops_enabled`): the forward pass as one compiled loop instead
# of nine kernels (casts, moments, scale and shift), and the input's
# gradient as another, from the input and the per-row mean and 1 / std.
# Forward and backward of BERT-Base's [2048, 768] on a CPU, 1 thread: 8.7 ->
# 5.2 ms in float32, 9.1 -> 3.7 ms in bfloat16, whose backward pass then keeps
# the bfloat16 input rather than a float32 copy.
FUSED_LAYER_NORM_VARIABLE = "BERT_FUSED_LAYER_NORM"
_LAYER_NORM_GRADIENT = "BertModelingLayerNormFromInput"
_LAYER_NORM_EPSILON = 1e-12
# Every switch of a compiled loop.
COMPILED_LOOP_VARIABLES = (FUSED_GELU_VARIABLE, FUSED_LAYER_NORM_VARIABLE, FUSED_DROPOUT_VARIABLE)


def fused_layer_norm_enabled():
    """Whether `layer_norm` calls made now use the compiled loops."""
    return not _PORTABLE_OPS and _compiled_loops_enabled(FUSED_LAYER_NORM_VARIABLE)


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
    inverse_std = tf.math.rsqrt(variance + _LAYER_NORM_EPSILON)
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


def layer_norm(input_tensor, name=None):
    """Layer normalization over the last axis.

    Variables `<name>/beta` (zeros) and `<name>/gamma` (ones), `name`
    defaulting to "LayerNorm", and epsilon 1e-12: those of
    `tf.contrib.layers.layer_norm(begin_norm_axis=-1, begin_params_axis=-1)`
    that Google's checkpoints hold. Statistics are float32 for any input type.

    Args:
      input_tensor: float Tensor [..., width] of known rank.
      name: optional variable scope name.

    Returns:
      Tensor of the shape and dtype of `input_tensor`.
    """
    with tf.variable_scope(name, default_name="LayerNorm"):
        width = input_tensor.shape[-1]
        beta = tf.get_variable("beta", shape=[width], initializer=tf.zeros_initializer())
        gamma = tf.get_variable("gamma", shape=[width], initializer=tf.ones_initializer())
        if fused_layer_norm_enabled():
            gamma, beta = tf.convert_to_tensor(gamma), tf.convert_to_tensor(beta)
            normalized, mean, inverse_std = _fused_layer_norm_forward(input_tensor, gamma, beta)
            return _identity_n_with_gradient(
                [normalized, input_tensor, gamma, beta, mean, inverse_std], _LAYER_NORM_GRADIENT)
        normalized, _, _ = _layer_norm_float32(_as_float32(input_tensor), gamma, beta)
        return tf.cast(normalized, input_tensor.dtype)


def layer_norm_and_dropout(input_tensor, dropout_prob, name=None):
    """`layer_norm` then `dropout`."""
    return dropout(layer_norm(input_tensor, name), dropout_prob)


def create_initializer(initializer_range=0.02):
    """The weight initializer: truncated normal, stddev `initializer_range`."""
    return tf.truncated_normal_initializer(stddev=initializer_range)


def _dense_variables(input_tensor, units, kernel_initializer, name):
    """Gets `<name>/kernel` [in, units] and `<name>/bias` [units] (zeros),
    the variables of `tf.layers.dense`, creating them if needed.

    Returns:
      (kernel, bias) Tensors in the input's dtype: the float32 variables are
      cast for a float16 or bfloat16 computation.
    """
    with tf.variable_scope(name):
        kernel = tf.get_variable("kernel", shape=[input_tensor.shape[-1], units],
                                 initializer=kernel_initializer)
        bias = tf.get_variable("bias", shape=[units], initializer=tf.zeros_initializer())
    dtype = input_tensor.dtype
    return tf.cast(kernel, dtype), tf.cast(bias, dtype)


def dense(input_tensor, units, activation=None, kernel_initializer=None, name="dense"):
    """Fully connected layer: activation(input_tensor @ kernel + bias).

    Args:
      input_tensor: float Tensor [rows, in] (or of higher rank, contracted on
        its last axis).
      units: output width.
      activation: optional callable applied to the result.
      kernel_initializer: the kernel's initializer.
      name: variable scope of `kernel` and `bias`.

    Returns:
      Tensor [rows, units] (or [..., units]) of the input's dtype.
    """
    kernel, bias = _dense_variables(input_tensor, units, kernel_initializer, name)
    rank = input_tensor.shape.ndims
    if rank == 2:
        product = tf.matmul(input_tensor, kernel)
    else:
        product = tf.tensordot(input_tensor, kernel, [[rank - 1], [0]])
    output = tf.nn.bias_add(product, bias)
    return output if activation is None else activation(output)


def _gelu_dense(pre_activation, units, kernel_initializer=None, name="dense"):
    """`dense(gelu(pre_activation), units)`, keeping only `pre_activation`.

    Same variables and values; the backward pass recomputes the activation
    for the kernel's gradient (see `_gelu_dense_matmul_gradient`).

    Args:
      pre_activation: float Tensor [rows, in].
      units: output width.
      kernel_initializer: the kernel's initializer.
      name: variable scope of `kernel` and `bias`.

    Returns:
      Tensor [rows, units] of the input's dtype.
    """
    kernel, bias = _dense_variables(pre_activation, units, kernel_initializer, name)
    activation = _gelu(pre_activation, _GELU_INTO_DENSE_GRADIENT)
    with tf.get_default_graph().gradient_override_map({"MatMul": _GELU_DENSE_GRADIENT}):
        product = tf.matmul(activation, kernel)
    return tf.nn.bias_add(product, bias)


# ---------------------------------------------------------------------------
# Embeddings.


def embedding_lookup(input_ids, vocab_size, embedding_size=128, initializer_range=0.02,
                     word_embedding_name="word_embeddings", use_one_hot_embeddings=False):
    """Word embeddings of `input_ids`, creating the table.

    Args:
      input_ids: int32 Tensor [batch_size, seq_length] (or [batch_size,
        seq_length, n], whose n embeddings per position are concatenated).
      vocab_size: rows of the table.
      embedding_size: width of an embedding.
      initializer_range: stddev of the table's initializer.
      word_embedding_name: name of the table variable.
      use_one_hot_embeddings: bool. Multiply one-hot vectors with the table
        (fast on TPUs) instead of gathering rows.

    Returns:
      (output, table): float32 [batch_size, seq_length, n * embedding_size]
      and the variable [vocab_size, embedding_size].
    """
    if input_ids.shape.ndims == 2:
        input_ids = tf.expand_dims(input_ids, axis=[-1])
    embedding_table = tf.get_variable(
        name=word_embedding_name, shape=[vocab_size, embedding_size],
        initializer=create_initializer(initializer_range))

    flat_ids = tf.reshape(input_ids, [-1])
    if use_one_hot_embeddings:
        rows = tf.matmul(tf.one_hot(flat_ids, depth=vocab_size), embedding_table)
    else:
        # Gather from a plain read of the table, not from the variable: a
        # gather on the variable itself (ResourceGather) switches it to
        # copy-on-read for good, after which every later read, and the
        # optimizer's update too, copies the whole table (89 MiB at
        # BERT-Base size): pre-training's tied output layer would hold such
        # a copy through the backward pass. Same rows, same gradient.
        rows = tf.gather(tf.convert_to_tensor(embedding_table), flat_ids)

    *outer_dims, ids_per_position = get_shape_list(input_ids)
    output = tf.reshape(rows, outer_dims + [ids_per_position * embedding_size])
    return output, embedding_table


def embedding_postprocessor(input_tensor, use_token_type=False, token_type_ids=None,
                            token_type_vocab_size=16,
                            token_type_embedding_name="token_type_embeddings",
                            use_position_embeddings=True,
                            position_embedding_name="position_embeddings",
                            initializer_range=0.02, max_position_embeddings=512,
                            dropout_prob=0.1):
    """Adds segment and position embeddings to word embeddings, then applies
    LayerNorm and dropout.

    Args:
      input_tensor: float Tensor [batch_size, seq_length, width].
      use_token_type: bool. Add an embedding of `token_type_ids`.
      token_type_ids: int32 Tensor [batch_size, seq_length]; required when
        `use_token_type`.
      token_type_vocab_size: rows of the segment table.
      token_type_embedding_name: name of the segment table variable.
      use_position_embeddings: bool. Add a learned embedding of each
        position 0, 1, ..., seq_length - 1.
      position_embedding_name: name of the position table variable.
      initializer_range: stddev of the tables' initializer.
      max_position_embeddings: rows of the position table, the longest
        `seq_length` allowed (checked when the graph is built if the length
        is static, when it runs otherwise).
      dropout_prob: dropout rate on the result.

    Returns:
      float Tensor of the shape of `input_tensor`.

    Raises:
      ValueError: bad rank, missing `token_type_ids`, or a static sequence
        length above `max_position_embeddings`.
    """
    batch_size, seq_length, width = get_shape_list(input_tensor, expected_rank=3)
    output = input_tensor

    if use_token_type:
        if token_type_ids is None:
            raise ValueError("`token_type_ids` must be given when `use_token_type` is True.")
        token_type_table = tf.get_variable(
            name=token_type_embedding_name, shape=[token_type_vocab_size, width],
            initializer=create_initializer(initializer_range))
        # A one-hot matmul rather than a gather: with so few rows it is the
        # faster of the two.
        one_hot_types = tf.one_hot(tf.reshape(token_type_ids, [-1]),
                                   depth=token_type_vocab_size)
        segment_vectors = tf.matmul(one_hot_types, token_type_table)
        output += tf.reshape(segment_vectors, [batch_size, seq_length, width])

    if use_position_embeddings:
        if isinstance(seq_length, int) and seq_length > max_position_embeddings:
            raise ValueError(
                "Sequence length %d is longer than max_position_embeddings=%d of "
                "the BERT config" % (seq_length, max_position_embeddings))
        full_position_embeddings = tf.get_variable(
            name=position_embedding_name, shape=[max_position_embeddings, width],
            initializer=create_initializer(initializer_range))
        length_ok = tf.debugging.assert_less_equal(
            seq_length, max_position_embeddings,
            message="sequence length is longer than max_position_embeddings")
        with tf.control_dependencies([length_ok]):
            # The table covers the longest sequence; this batch uses its
            # first seq_length rows, the same for every example.
            position_vectors = tf.slice(full_position_embeddings, [0, 0], [seq_length, -1])
        leading_ones = [1] * (output.shape.ndims - 2)
        output += tf.reshape(position_vectors, leading_ones + [seq_length, width])

    return layer_norm_and_dropout(output, dropout_prob)


# ---------------------------------------------------------------------------
# Attention and the Transformer.


def create_attention_mask_from_input_mask(from_tensor, to_mask):
    """Expands a padding mask to one row per attending position.

    Args:
      from_tensor: Tensor [batch_size, from_seq_length, ...] (rank 2 or 3);
        only its shape is used.
      to_mask: int32 Tensor [batch_size, to_seq_length], 1 for positions
        that may be attended to.

    Returns:
      float32 Tensor [batch_size, from_seq_length, to_seq_length]: row i of
      example b is `to_mask[b]`. Padding positions still attend (their
      outputs are simply ignored downstream); nothing attends to them.
    """
    batch_size, from_seq_length = get_shape_list(from_tensor, expected_rank=[2, 3])[:2]
    to_seq_length = get_shape_list(to_mask, expected_rank=2)[1]
    to_mask = tf.cast(tf.reshape(to_mask, [batch_size, 1, to_seq_length]), tf.float32)
    # Broadcasting [B, 1, T] against [B, F, 1] repeats the mask F times.
    return tf.ones([batch_size, from_seq_length, 1], dtype=tf.float32) * to_mask


def _attention_bias_from_mask(attention_mask, dtype):
    """Converts a 0/1 mask [batch, from, to] to the bias added to scores.

    Returns:
      Tensor [batch, 1, from, to] of `dtype` (broadcast over heads): 0 where
      attention is allowed and -10000 where it is not, which after softmax
      is as good as removing those positions (Google's constant).
    """
    allowed = tf.cast(tf.expand_dims(attention_mask, axis=[1]), tf.float32)
    return tf.cast((1.0 - allowed) * -10000.0, dtype)


def _split_heads(matrix, batch_size, seq_length, num_heads, head_size):
    """[batch_size * seq_length, num_heads * head_size] ->
    [batch_size, num_heads, seq_length, head_size]."""
    matrix = tf.reshape(matrix, [batch_size, seq_length, num_heads, head_size])
    return tf.transpose(matrix, [0, 2, 1, 3])


def _self_attention(layer_input_2d, attention_bias, num_attention_heads, size_per_head,
                    attention_probs_dropout_prob, initializer_range, batch_size,
                    from_seq_length, to_tensor_2d=None, to_seq_length=None,
                    query_act=None, key_act=None, value_act=None):
    """Multi-head scaled dot-product attention on matrices.

    Creates the dense layers `query`, `key` and `value` under the current
    variable scope. Shapes below: B batch, F / T attending / attended
    sequence lengths, N heads, H head size.

    Args:
      layer_input_2d: [B * F, from_width], the attending positions.
      attention_bias: None, or the additive bias [B, 1, F, T] of
        `_attention_bias_from_mask`.
      to_tensor_2d: [B * T, to_width], the attended positions; default
        `layer_input_2d` (self-attention, T = F).

    Returns:
      Tensor [B * F, N * H]: for each position, the heads' value averages
      side by side.
    """
    if to_tensor_2d is None:
        to_tensor_2d, to_seq_length = layer_input_2d, from_seq_length
    init = create_initializer(initializer_range)
    width = num_attention_heads * size_per_head

    query = dense(layer_input_2d, width, query_act, init, name="query")
    key = dense(to_tensor_2d, width, key_act, init, name="key")
    value = dense(to_tensor_2d, width, value_act, init, name="value")

    # Scores are q.k / sqrt(H). Scaling q [B*F, N*H] instead of the scores
    # [B, N, F, T] is the same arithmetic on fewer values, and exact when
    # 1 / sqrt(H) is a power of two (H = 64 in the released models).
    query *= tf.cast(1.0 / math.sqrt(float(size_per_head)), query.dtype)
    query = _split_heads(query, batch_size, from_seq_length, num_attention_heads, size_per_head)
    key = _split_heads(key, batch_size, to_seq_length, num_attention_heads, size_per_head)
    scores = tf.matmul(query, key, transpose_b=True)  # [B, N, F, T]
    if attention_bias is not None:
        scores += attention_bias

    # Softmax in float32 whatever the compute type.
    probs = tf.cast(tf.nn.softmax(_as_float32(scores)), scores.dtype)
    # Dropping whole attended positions, as the Transformer paper does.
    probs = dropout(probs, attention_probs_dropout_prob)

    value = _split_heads(value, batch_size, to_seq_length, num_attention_heads, size_per_head)
    context = tf.matmul(probs, value)  # [B, N, F, H]
    context = tf.transpose(context, [0, 2, 1, 3])
    return tf.reshape(context, [batch_size * from_seq_length, width])


def attention_layer(from_tensor, to_tensor, attention_mask=None, num_attention_heads=1,
                    size_per_head=512, query_act=None, key_act=None, value_act=None,
                    attention_probs_dropout_prob=0.0, initializer_range=0.02,
                    do_return_2d_tensor=False, batch_size=None, from_seq_length=None,
                    to_seq_length=None):
    """Multi-head attention of `from_tensor` over `to_tensor` ("Attention Is
    All You Need"); self-attention when both are the same tensor.

    Each attending position gets, per head, the average of the attended
    positions' values weighted by softmax(query . key / sqrt(size_per_head)).

    Args:
      from_tensor: float Tensor [batch_size, from_seq_length, from_width], or
        its [batch_size * from_seq_length, from_width] matrix.
      to_tensor: float Tensor [batch_size, to_seq_length, to_width], or its
        matrix; of the rank of `from_tensor`.
      attention_mask: optional int32 Tensor [batch_size, from_seq_length,
        to_seq_length], 1 where attending is allowed, 0 where not.
      num_attention_heads: number of heads N.
      size_per_head: width H of a head's query, key and value.
      query_act, key_act, value_act: optional activations of the three
        projections.
      attention_probs_dropout_prob: dropout rate on the attention weights.
      initializer_range: stddev of the projections' initializer.
      do_return_2d_tensor: bool. Return [batch_size * from_seq_length, N * H]
        instead of [batch_size, from_seq_length, N * H].
      batch_size, from_seq_length, to_seq_length: the 3-D sizes; required
        when the inputs are matrices, ignored otherwise.

    Returns:
      float Tensor [batch_size, from_seq_length, N * H] or its matrix.

    Raises:
      ValueError: ranks differ or are not 2 or 3, or matrices come without
        their sizes.
    """
    from_shape = get_shape_list(from_tensor, expected_rank=[2, 3])
    to_shape = get_shape_list(to_tensor, expected_rank=[2, 3])
    if len(from_shape) != len(to_shape):
        raise ValueError("The rank of `from_tensor` must match the rank of `to_tensor`.")
    if len(from_shape) == 3:
        batch_size, from_seq_length = from_shape[:2]
        to_seq_length = to_shape[1]
    elif None in (batch_size, from_seq_length, to_seq_length):
        raise ValueError(
            "attention_layer needs `batch_size`, `from_seq_length` and "
            "`to_seq_length` when given rank 2 tensors.")

    attention_bias = None
    if attention_mask is not None:
        attention_bias = _attention_bias_from_mask(attention_mask, from_tensor.dtype)
    context = _self_attention(
        reshape_to_matrix(from_tensor), attention_bias, num_attention_heads, size_per_head,
        attention_probs_dropout_prob, initializer_range, batch_size, from_seq_length,
        to_tensor_2d=reshape_to_matrix(to_tensor), to_seq_length=to_seq_length,
        query_act=query_act, key_act=key_act, value_act=value_act)
    if do_return_2d_tensor:
        return context
    return tf.reshape(context, [batch_size, from_seq_length, num_attention_heads * size_per_head])


def _transformer_layer(layer_input, attention_bias, hidden_size, num_attention_heads,
                       attention_head_size, intermediate_size, intermediate_act_fn,
                       hidden_dropout_prob, attention_probs_dropout_prob,
                       initializer_range, batch_size, seq_length):
    """One encoder layer on a [batch_size * seq_length, hidden_size] matrix.

    Self-attention, projection, dropout, residual and LayerNorm; then the
    feed-forward block (up to `intermediate_size` with the activation, back
    down), dropout, residual and LayerNorm. Variables, under the current
    scope: attention/self/{query,key,value}, attention/output/{dense,
    LayerNorm}, intermediate/dense and output/{dense,LayerNorm}.

    Returns:
      Tensor [batch_size * seq_length, hidden_size].
    """
    init = create_initializer(initializer_range)
    with tf.variable_scope("attention"):
        with tf.variable_scope("self"):
            context = _self_attention(
                layer_input, attention_bias, num_attention_heads, attention_head_size,
                attention_probs_dropout_prob, initializer_range, batch_size, seq_length)
        with tf.variable_scope("output"):
            attended = dropout(dense(context, hidden_size, kernel_initializer=init),
                               hidden_dropout_prob)
            attended = layer_norm(attended + layer_input)

    # With Google's GELU the activation moves into the down-projection
    # (`_gelu_dense`, same values), whose backward pass then keeps only the
    # pre-activation.
    fuse_gelu = intermediate_act_fn is gelu
    with tf.variable_scope("intermediate"):
        expanded = dense(attended, intermediate_size,
                         activation=None if fuse_gelu else intermediate_act_fn,
                         kernel_initializer=init)
    with tf.variable_scope("output"):
        if fuse_gelu:
            projected = _gelu_dense(expanded, hidden_size, kernel_initializer=init)
        else:
            projected = dense(expanded, hidden_size, kernel_initializer=init)
        return layer_norm(dropout(projected, hidden_dropout_prob) + attended)


def transformer_model(input_tensor, attention_mask=None, hidden_size=768, num_hidden_layers=12,
                      num_attention_heads=12, intermediate_size=3072, intermediate_act_fn=gelu,
                      hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                      initializer_range=0.02, do_return_all_layers=False,
                      recompute_grad=False):
    """The Transformer encoder of "Attention Is All You Need"
    (https://arxiv.org/abs/1706.03762): a stack of `_transformer_layer`s,
    under variable scopes layer_0, layer_1, ...

    Args:
      input_tensor: float Tensor [batch_size, seq_length, hidden_size].
      attention_mask: optional int32 Tensor [batch_size, seq_length,
        seq_length], 1 where attending is allowed, 0 where not.
      hidden_size: width of every layer (residual sums need the input's).
      num_hidden_layers: number of layers.
      num_attention_heads: heads per layer; must divide `hidden_size`.
      intermediate_size: width of the feed-forward layer.
      intermediate_act_fn: the feed-forward activation.
      hidden_dropout_prob: dropout rate before each residual sum.
      attention_probs_dropout_prob: dropout rate on the attention weights.
      initializer_range: stddev of the weight initializer.
      do_return_all_layers: bool. Return every layer's output, not just the
        last.
      recompute_grad: bool. Recompute each layer in the backward pass
        instead of keeping its activations (`recompute.recompute_layer`).

    Returns:
      float Tensor [batch_size, seq_length, hidden_size], the last layer's
      output, or the list of all layers' outputs, lowest first.

    Raises:
      ValueError: heads do not divide `hidden_size`, or the input's width is
        not `hidden_size`.
    """
    if hidden_size % num_attention_heads != 0:
        raise ValueError(
            "The hidden size (%d) is not a multiple of the number of attention "
            "heads (%d)" % (hidden_size, num_attention_heads))
    head_size = hidden_size // num_attention_heads
    input_shape = get_shape_list(input_tensor, expected_rank=3)
    batch_size, seq_length, input_width = input_shape
    if input_width != hidden_size:
        raise ValueError("The width of the input tensor (%d) != hidden size (%d)" %
                         (input_width, hidden_size))

    # One bias for all layers rather than one conversion per layer.
    attention_bias = None
    if attention_mask is not None:
        attention_bias = _attention_bias_from_mask(attention_mask, input_tensor.dtype)

    def layer_fn(layer_input, bias, seed=None):
        """Builds one layer; `seed` (from `recompute_layer`) fixes its dropout."""
        def build():
            return _transformer_layer(
                layer_input, bias, hidden_size, num_attention_heads, head_size,
                intermediate_size, intermediate_act_fn, hidden_dropout_prob,
                attention_probs_dropout_prob, initializer_range, batch_size, seq_length)
        if seed is None:
            return build()
        with stateless_dropout_seed(seed):
            return build()

    # Layers pass matrices [batch_size * seq_length, hidden_size] to each
    # other: reshapes are free on CPU and GPU but not always on TPU.
    hidden = reshape_to_matrix(input_tensor)
    outputs = []
    for index in range(num_hidden_layers):
        with tf.variable_scope("layer_%d" % index):
            if recompute_grad:
                hidden = recompute.recompute_layer(layer_fn, hidden, attention_bias)
            else:
                hidden = layer_fn(hidden, attention_bias)
        outputs.append(hidden)

    if do_return_all_layers:
        return [reshape_from_matrix(output, input_shape) for output in outputs]
    return reshape_from_matrix(hidden, input_shape)


# ---------------------------------------------------------------------------
# Shape helpers.


def get_shape_list(tensor, expected_rank=None, name=None):
    """The dimensions of `tensor`, static ones as ints, others as scalar
    int32 Tensors.

    Args:
      tensor: a Tensor.
      expected_rank: optional int or list of ints; other ranks raise.
      name: optional name for the error message (default: the tensor's).

    Returns:
      A list with one entry per dimension.

    Raises:
      ValueError: the rank is not an expected one.
    """
    if expected_rank is not None:
        assert_rank(tensor, expected_rank, name)
    dims = tensor.shape.as_list()
    if None in dims:
        dynamic = tf.shape(tensor)
        dims = [dynamic[i] if dim is None else dim for i, dim in enumerate(dims)]
    return dims


def reshape_to_matrix(input_tensor):
    """[..., width] -> [rows, width]; a matrix is returned as is.

    Raises:
      ValueError: the rank is below 2.
    """
    rank = input_tensor.shape.ndims
    if rank < 2:
        raise ValueError("Input tensor must have at least rank 2. Shape = %s" %
                         (input_tensor.shape))
    if rank == 2:
        return input_tensor
    return tf.reshape(input_tensor, [-1, input_tensor.shape[-1]])


def reshape_from_matrix(output_tensor, orig_shape_list):
    """Inverse of `reshape_to_matrix`: [rows, width] -> the original leading
    dimensions `orig_shape_list[:-1]` followed by the matrix's width."""
    if len(orig_shape_list) == 2:
        return output_tensor
    width = get_shape_list(output_tensor)[-1]
    return tf.reshape(output_tensor, list(orig_shape_list[:-1]) + [width])


def assert_rank(tensor, expected_rank, name=None):
    """Checks the static rank of `tensor`.

    Args:
      tensor: a Tensor.
      expected_rank: int or list of ints.
      name: optional name for the message (default: the tensor's).

    Raises:
      ValueError: naming the tensor and the variable scope, if the rank is
        not an expected one.
    """
    if name is None:
        name = getattr(tensor, "name", "tensor")
    allowed = [expected_rank] if isinstance(expected_rank, int) else list(expected_rank)
    actual_rank = tensor.shape.ndims
    if actual_rank not in allowed:
        raise ValueError(
            "For the tensor `%s` in scope `%s`, the actual rank `%d` (shape = %s) is not "
            "equal to the expected rank `%s`"
            % (name, tf.get_variable_scope().name, actual_rank, tensor.shape,
               expected_rank))
