"""Recomputation (gradient checkpointing) of Transformer layers.

`recompute_layer` runs one encoder layer so that its internal activations are
not kept for the backward pass: only the layer's input is. When the gradient
is needed, the layer is built again from that input (with the same variables
and the same dropout masks) and differentiated. Memory for activations drops
from O(layers x activations per layer) to O(layers x hidden states + one
layer's activations), for about one extra forward pass of compute.
"""

import ctypes
import ctypes.util

import tensorflow.compat.v1 as tf

import modeling


def recompute_layer(layer_fn, layer_input, attention_bias):
    """Applies `layer_fn(layer_input, attention_bias)` with recomputation.

    Must be called inside the variable scope where the layer's variables
    live (the first call creates them). Variables must be resource variables
    (the TF 2 default).

    Args:
      layer_fn: function (x [rows, hidden], bias) -> [rows, hidden] building
        the layer under the current variable scope.
      layer_input: float Tensor [rows, hidden].
      attention_bias: float Tensor broadcastable to the attention scores, or
        None.

    Returns:
      The layer's output, float Tensor [rows, hidden], whose gradient with
      respect to `layer_input` and the layer's variables is computed by
      re-running the layer.
    """
    scope = tf.get_variable_scope()
    if attention_bias is None:
        attention_bias = tf.zeros([], dtype=layer_input.dtype)
    # One seed per layer and step: the forward pass and its recomputation
    # draw identical dropout masks from it.
    seed = tf.random.uniform([2], minval=0, maxval=2 ** 31 - 1, dtype=tf.int32,
                             name="dropout_seed")

    def run(x, bias, layer_seed):
        with modeling.stateless_dropout_seed(layer_seed):
            return layer_fn(x, bias)

    @tf.custom_gradient
    def forward(x, bias, layer_seed):
        output = run(x, bias, layer_seed)

        def grad(d_output, variables=None):
            # The control dependency keeps the recomputation in the backward
            # pass; without it the graph could run it early and keep its
            # activations alive, which is what we are avoiding.
            with tf.control_dependencies([d_output]):
                x_again = tf.identity(x)
                bias_again = tf.identity(bias)
                seed_again = tf.identity(layer_seed)
            with tf.variable_scope(scope, reuse=True):
                output_again = run(x_again, bias_again, seed_again)
            variables = list(variables or [])
            grads = tf.gradients(output_again, [x_again] + variables, grad_ys=d_output)
            return (grads[0], None, None), grads[1:]

        return output, grad

    return forward(layer_input, attention_bias, seed)


def limit_memory_fragmentation(threshold_bytes=128 * 1024):
    """Makes glibc's malloc return large freed blocks to the system at once.

    TensorFlow on CPU allocates tensors with malloc. glibc raises its mmap
    threshold each time a large block is freed (up to 32 MiB), after which
    activations of a few MiB come from the heap, where freed blocks fragment
    and stay resident: a BERT-Base training step then peaks about 20% above
    what it actually holds. Fixing the threshold keeps every allocation of at
    least `threshold_bytes` in its own mapping, released when freed, at no
    measurable cost in speed. Process-wide; call once, early, before the
    graph runs (benchmarks/bench_training.py measures the effect with
    --malloc_mmap_threshold).

    Args:
      threshold_bytes: allocations of at least this size use mmap.

    Returns:
      True if applied (glibc), False where not available.
    """
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        m_mmap_threshold = -3  # From <malloc.h>.
        return bool(libc.mallopt(m_mmap_threshold, int(threshold_bytes)))
    except (OSError, AttributeError, TypeError):
        return False
