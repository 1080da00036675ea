"""Google's own unit test of its modeling module, run against ours.

bert-tensorflow ships `bert/modeling_test.py`. Its source is read from the
installed package when this file is collected (nothing of it is copied into
the repository) and executed as a module in which `from bert import modeling`
resolves to this project's `modeling`. The only edit allowed to the source is
the TensorFlow import: a plain `import tensorflow as tf` would be turned into
`tensorflow.compat.v1` (the 1.0.4 release already imports the compat module,
so today the source runs as shipped).

Besides output shapes and the config's JSON, the original test demands that
every op of a training-mode forward graph be reachable from the model's
outputs: our memory-saving gradients must not leave helper ops dangling in a
graph nobody differentiates.
"""

import importlib
import importlib.util
import os
import sys
import types

import pytest
import tensorflow.compat.v1 as tf

import modeling

_PLAIN_IMPORT = "import tensorflow as tf"
_COMPAT_IMPORT = "import tensorflow.compat.v1 as tf"


def _original_source():
    """Returns (path, source) of the installed bert/modeling_test.py, its
    TensorFlow import switched to the v1 compat module; skips if absent."""
    spec = importlib.util.find_spec("bert")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("bert-tensorflow is not installed", allow_module_level=True)
    path = None
    for folder in spec.submodule_search_locations:
        candidate = os.path.join(folder, "modeling_test.py")
        if os.path.exists(candidate):
            path = candidate
    if path is None:
        pytest.skip("bert-tensorflow ships no modeling_test.py", allow_module_level=True)
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    tf_imports = [i for i, line in enumerate(lines)
                  if line.strip() in (_PLAIN_IMPORT, _COMPAT_IMPORT)]
    # Exactly one TensorFlow import is expected; anything else means the
    # package changed and this harness should be looked at again.
    assert len(tf_imports) == 1, "unexpected TensorFlow imports in %s" % path
    index = tf_imports[0]
    lines[index] = lines[index].replace(_PLAIN_IMPORT, _COMPAT_IMPORT)
    return path, "\n".join(lines)


def _load_original_test_module():
    """Executes the original test source with `bert.modeling` bound to ours.

    The binding is temporary: other tests in the same process may import
    Google's real `bert.modeling` as a reference.
    """
    path, source = _original_source()
    package = importlib.import_module("bert")
    saved_module = sys.modules.get("bert.modeling")
    had_attribute = hasattr(package, "modeling")
    saved_attribute = getattr(package, "modeling", None)
    sys.modules["bert.modeling"] = modeling
    package.modeling = modeling
    try:
        module = types.ModuleType("original_bert_modeling_test")
        module.__file__ = path
        exec(compile(source, path, "exec"), module.__dict__)
    finally:
        if saved_module is None:
            del sys.modules["bert.modeling"]
        else:
            sys.modules["bert.modeling"] = saved_module
        if had_attribute:
            package.modeling = saved_attribute
        else:
            del package.modeling
    return module


_ORIGINAL = _load_original_test_module()


class TestOriginalBertModel(_ORIGINAL.BertModelTest):
    """Google's `BertModelTest` in the TensorFlow 1 setting it was written
    for: graph mode (TF 2 runs eagerly by default) and reference variables.

    Resource variables, the TF 2 default, each carry a `Read` op that
    nothing consumes, which the original reachability check (older than
    them) would count against the model.
    """

    def setUp(self):
        super().setUp()
        self._enter(tf.Graph().as_default())
        self._enter(tf.variable_scope(tf.get_variable_scope(), use_resource=False))

    def _enter(self, context):
        context.__enter__()
        self.addCleanup(context.__exit__, None, None, None)

    def test_training_options_leave_nothing_dangling(self):
        """The original's reachability check on the project's training
        options (recomputation, bfloat16), which the original does not build.

        Recomputation needs resource variables: their own ops (initializer,
        `Read`) are left out of the check, everything the model adds is in.
        """
        for options in ({"recompute_grad": True}, {"compute_type": tf.bfloat16}):
            with tf.Graph().as_default() as graph:
                tester = self.BertModelTester(self, num_hidden_layers=2)
                config = modeling.BertConfig(
                    vocab_size=tester.vocab_size, hidden_size=tester.hidden_size,
                    num_hidden_layers=tester.num_hidden_layers,
                    num_attention_heads=tester.num_attention_heads,
                    intermediate_size=tester.intermediate_size)
                ids = self.ids_tensor([tester.batch_size, tester.seq_length], tester.vocab_size)
                mask = self.ids_tensor([tester.batch_size, tester.seq_length], 2)
                model = modeling.BertModel(config, is_training=True, input_ids=ids,
                                           input_mask=mask, **options)
                outputs = {"pooled_output": model.get_pooled_output(),
                           "sequence_output": model.get_sequence_output(),
                           "embedding_output": model.get_embedding_output(),
                           "all_encoder_layers": model.get_all_encoder_layers()}
                with tf.Session(graph=graph) as sess:
                    sess.run(tf.global_variables_initializer())
                    tester.check_output(sess.run(outputs))
                variable_scopes = tuple(v.op.name + "/" for v in tf.global_variables())
                # Like the original, the position check's assert is left out:
                # it hangs on a control dependency, which the walk ignores.
                unreachable = [op.name for op in self.get_unreachable_ops(graph, outputs)
                               if not op.name.startswith(variable_scopes)
                               and "/assert_less_equal/" not in op.name]
                self.assertEqual(unreachable, [], options)


def test_the_original_uses_our_module():
    """Guards the harness itself: the executed test must see our modeling."""
    assert _ORIGINAL.modeling is modeling
    assert {"test_default", "test_config_to_json_string"} <= set(dir(TestOriginalBertModel))
