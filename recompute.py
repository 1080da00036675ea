"""Recomputation (gradient checkpointing) of Transformer layers.

`recompute_layer` runs one encoder layer so that its internal activations are
not kept for the backward pass: only the layer's input is. When the gradient
is needed, the layer is built again from that input (with the same variables
and the same dropout masks) and differentiated. Memory for activations drops
from O(layers x activations per layer) to O(layers x hidden states + one
layer's activations), for about one extra forward pass of compute.

The module depends on TensorFlow only; the layer itself comes from the caller
(`modeling.transformer_model`).
"""

import tensorflow.compat.v1 as tf

_GRADIENT_NAME = "BertRecomputeLayer"
# Attribute of a tf.Graph holding its layers' backward functions, by the name
# of the IdentityN op that carries each layer's gradient. Kept on the graph so
# that they live exactly as long as it does.
_BACKWARD_ATTRIBUTE = "_bert_recompute_backward"


def _recomputed_gradient(op, *output_grads):
    """Gradient function of a layer's IdentityN: rebuilds and differentiates
    the layer (see `recompute_layer`)."""
    return getattr(op.graph, _BACKWARD_ATTRIBUTE)[op.name](output_grads[0])


try:
    tf.RegisterGradient(_GRADIENT_NAME)(_recomputed_gradient)
except KeyError:
    pass  # Registered by an earlier import of this file under another name.


def recompute_layer(layer_fn, layer_input, attention_bias, output_fn=None):
    """Applies `layer_fn` (then `output_fn`) so that the backward pass
    recomputes it.

    Must be called inside the variable scope of the layer's variables (the
    first call creates them). The layer's output goes through an IdentityN
    op together with everything its gradient depends on (input, bias, seed,
    the variables' values); that op's gradient builds the layer a second
    time, after the output's gradient exists, and differentiates the copy.
    Nothing flows back through the forward copy, so its activations are
    freed as soon as the forward pass has used them.

    With `output_fn`, the layer is split in two: `layer_fn`'s result is kept
    for the backward pass as well as the input, and only `output_fn` (for
    BERT, the last LayerNorm) is differentiated from it; `layer_fn` is then
    differentiated with that gradient. Ops of `layer_fn` whose values no
    gradient needs (for BERT, the feed-forward output projection, whose
    gradient needs only its input) are not recomputed: one [rows, hidden]
    tensor more per layer for about a third less recomputation.

    Args:
      layer_fn: function (x [rows, hidden], bias, seed) -> [rows, hidden]
        building the layer (or its first part) under the current variable
        scope. All its randomness must derive from `seed`, an int32 Tensor
        [2] (see `bert_ops.stateless_dropout_seed`), so that both builds
        agree.
      layer_input: float Tensor [rows, hidden].
      attention_bias: float Tensor broadcastable to the attention scores, or
        None.
      output_fn: optional function [rows, hidden] -> [rows, hidden] building
        the rest of the layer under the current variable scope, without
        randomness.

    Returns:
      The layer's output, float Tensor [rows, hidden]. Its gradients reach
      `layer_input` and the layer's variables; `attention_bias` gets none.
    """
    graph = tf.get_default_graph()
    scope = tf.get_variable_scope()
    if attention_bias is None:
        attention_bias = tf.zeros([], dtype=layer_input.dtype)
    # One seed per layer and step: the forward pass and its recomputation
    # draw identical dropout masks from it.
    seed = tf.random.uniform([2], minval=0, maxval=2 ** 31 - 1, dtype=tf.int32,
                             name="dropout_seed")
    body, body_variables = _build_in_scope(scope, layer_fn, layer_input, attention_bias, seed)
    output, output_variables = body, []
    kept = []
    if output_fn is not None:
        output, output_variables = _build_in_scope(scope, output_fn, body)
        kept = [body]
    variables = body_variables + output_variables

    carried = [output, layer_input, attention_bias, seed] + kept
    carried += [tf.convert_to_tensor(v) for v in variables]
    with graph.gradient_override_map({"IdentityN": _GRADIENT_NAME}):
        passed = tf.identity_n(carried)
    if not hasattr(graph, _BACKWARD_ATTRIBUTE):
        setattr(graph, _BACKWARD_ATTRIBUTE, {})
    getattr(graph, _BACKWARD_ATTRIBUTE)[passed[0].op.name] = _backward(
        scope, layer_fn, output_fn, (layer_input, attention_bias, seed), kept,
        body_variables, output_variables)
    return passed[0]


def _build_in_scope(scope, fn, *args):
    """`fn(*args)` under the variable scope `scope`; (its result, the
    variables it got, by id, in first-use order)."""
    variables = {}

    def record(getter, *args, **kwargs):
        variable = getter(*args, **kwargs)
        variables.setdefault(id(variable), variable)
        return variable

    with tf.variable_scope(scope, custom_getter=record, auxiliary_name_scope=False):
        result = fn(*args)
    return result, list(variables.values())


def _backward(scope, layer_fn, output_fn, inputs, kept, body_variables, output_variables):
    """The gradient of a `recompute_layer` IdentityN: d_output -> one
    gradient per IdentityN input (output, input, bias, seed, the kept
    tensor if any, variables), the layer built again under `scope` from
    `inputs` (layer input, attention bias, seed) and differentiated."""
    layer_input, attention_bias, seed = inputs

    def backward(d_output):
        # Reading the inputs after `d_output` exists keeps the recomputation
        # in the backward pass; run early, it would hold its activations
        # from the forward pass on, which is what this avoids.
        with tf.control_dependencies([d_output]):
            x_again = tf.identity(layer_input)
            bias_again = tf.identity(attention_bias)
            seed_again = tf.identity(seed)
            kept_again = [tf.identity(t) for t in kept]
        output_grads = []
        d_body = d_output
        with tf.variable_scope(scope, reuse=True, auxiliary_name_scope=False):
            if output_fn is not None:
                output_again = output_fn(kept_again[0])
                d_body, *output_grads = tf.gradients(
                    output_again, kept_again + output_variables, grad_ys=d_output)
            body_again = layer_fn(x_again, bias_again, seed_again)
        grads = tf.gradients(body_again, [x_again] + body_variables, grad_ys=d_body)
        weight_grads = grads[1:] + output_grads
        # The layer below starts its recomputation when d_input exists.
        # Left free, the executor runs this layer's weight gradients
        # whenever it likes, often only at the end of the backward pass, and
        # until then each keeps its inputs alive: a layer's activation
        # gradients and recomputed activations (about 50 MB a layer at
        # BERT-Base batch 16 x 128) stay resident for several layers. Handing
        # d_input on only after every weight gradient of this layer exists
        # frees all of the layer's temporaries before the next one starts.
        with tf.control_dependencies([_dense_part(g) for g in weight_grads if g is not None]):
            d_input = tf.identity(grads[0])
        return [None, d_input, None, None] + [None] * len(kept) + weight_grads

    return backward


def _dense_part(grad):
    """A gradient's tensor for a control dependency (IndexedSlices: its values)."""
    return grad.values if isinstance(grad, tf.IndexedSlices) else grad
