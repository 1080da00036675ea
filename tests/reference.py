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
