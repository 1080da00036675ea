"""Google's original BERT code (PyPI `bert-tensorflow==1.0.4`, test-only) as an
independent reference.

The original was written for TensorFlow 1.x (`tf.gfile`, `tf.flags`,
`tf.python_io`, ...); `tensorflow.compat.v1` provides those names, so a module
imported while `sys.modules["tensorflow"]` is the compat module runs unchanged
(except modeling, which needs tf.contrib).

* In-process: `load_original("tokenization")` for modules without flags.
* Scripts with flags: `python tests/reference.py create_pretraining_data
  --input_file=... ...` runs the original's main in its own process.
"""

import contextlib
import importlib
import os
import sys


def load_original(module_name):
    """Imports `bert.<module_name>` from bert-tensorflow under the TF1 shim."""
    import tensorflow.compat.v1 as tf1
    saved = sys.modules.get("tensorflow")
    sys.modules["tensorflow"] = tf1
    try:
        return importlib.import_module("bert." + module_name)
    finally:
        if saved is not None:
            sys.modules["tensorflow"] = saved


def _contrib_layer_norm(inputs, begin_norm_axis=1, begin_params_axis=-1, scope=None):
    """TensorFlow 1.x's tf.contrib.layers.layer_norm as the original calls it:
    the same variables (<scope or "LayerNorm">/beta and /gamma) and the same
    ops (nn.moments, then nn.batch_normalization with epsilon 1e-12)."""
    import tensorflow.compat.v1 as tf1
    with tf1.variable_scope(scope, "LayerNorm", [inputs]):
        rank = inputs.shape.ndims
        params_shape = inputs.shape[begin_params_axis:]
        beta = tf1.get_variable("beta", params_shape, dtype=inputs.dtype,
                                initializer=tf1.zeros_initializer())
        gamma = tf1.get_variable("gamma", params_shape, dtype=inputs.dtype,
                                 initializer=tf1.ones_initializer())
        axes = list(range(begin_norm_axis % rank, rank))
        mean, variance = tf1.nn.moments(inputs, axes, keep_dims=True)
        return tf1.nn.batch_normalization(inputs, mean, variance, offset=beta, scale=gamma,
                                          variance_epsilon=1e-12)


@contextlib.contextmanager
def modules_in_place(modules):
    """Puts `modules` (name -> module object) in sys.modules for the `with`
    block; afterwards each name holds what it held before, or nothing."""
    missing = object()
    saved = {name: sys.modules.get(name, missing) for name in modules}
    sys.modules.update(modules)
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is missing:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def load_original_modeling():
    """bert.modeling from bert-tensorflow, which imports tf.contrib.layers
    (TensorFlow 1.x only) for its layer_norm: a stand-in module with
    `_contrib_layer_norm` is in sys.modules while it is imported. For
    comparisons with the original model (benchmarks), not as this
    project's code."""
    import types
    contrib = types.ModuleType("tensorflow.contrib")
    contrib.layers = types.ModuleType("tensorflow.contrib.layers")
    contrib.layers.layer_norm = _contrib_layer_norm
    with modules_in_place({"tensorflow.contrib": contrib,
                           "tensorflow.contrib.layers": contrib.layers}):
        return load_original("modeling")


def estimator_available():
    """Whether this TensorFlow still has the Estimator, which the original's
    scripts need to run (their library functions don't)."""
    import tensorflow.compat.v1 as tf1
    return hasattr(tf1, "estimator")


def run_original_script(module_name, argv):
    """Runs the original script's main with `argv` (in this process)."""
    import tensorflow.compat.v1 as tf1
    tf1.disable_eager_execution()
    module = load_original(module_name)
    from absl import app
    app.run(module.main, argv=[module_name] + list(argv))


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    run_original_script(sys.argv[1], sys.argv[2:])
