"""Google's own unit tests of tokenization and optimization, run on our modules.

The tests are not copied into this project: bert-tensorflow (a test-only
dependency) installs them as bert/tokenization_test.py and
bert/optimization_test.py. When this module is collected, each file is read
from the installed package and executed in memory, with two adjustments:

* its ``import tensorflow as tf`` line, if it has one, becomes
  ``import tensorflow.compat.v1 as tf`` (the tests are TensorFlow 1 code);
* while it is executed, ``bert.<name>`` and ``<name>`` (``from bert import
  tokenization``, ``import tokenization``) resolve to this project's module.

Its `unittest.TestCase` classes are then collected by pytest under a
``TestGoogle...`` name. Each test method runs inside a fresh `tf.Graph`,
since TensorFlow 2 otherwise executes eagerly and the tests use sessions.

Skipped: bert-tensorflow 1.0.4's tokenization tests that set the absl flag
``--preserve_unused_tokens``. That flag is a feature of the PyPI package only
(Google's GitHub release has no such option), and this project's library code
reads no flags.
"""

import ast
import functools
import importlib.util
import os
import re
import types
import unittest

import pytest
import tensorflow.compat.v1 as tf

import optimization
import reference
import tokenization

OUR_MODULES = {"tokenization": tokenization, "optimization": optimization}

PRESERVE_UNUSED_FLAG = "preserve_unused_tokens"
PRESERVE_UNUSED_REASON = (
    "exercises --preserve_unused_tokens, an absl flag that only bert-tensorflow 1.0.4's "
    "tokenizer reads; Google's GitHub release has no such feature and this project's "
    "library reads no flags")


def _package_dir():
    """Folder of the installed `bert` package, or None."""
    spec = importlib.util.find_spec("bert")
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def _read_test_source(name):
    """(path, source) of bert/<name>_test.py with its TensorFlow import made
    the compat.v1 one; (None, reason) when the package does not ship it."""
    package = _package_dir()
    if package is None:
        return None, "bert-tensorflow is not installed"
    path = os.path.join(package, name + "_test.py")
    if not os.path.exists(path):
        return None, "the installed bert-tensorflow does not ship %s_test.py" % name
    with open(path, encoding="utf-8") as f:
        source = f.read()
    source = re.sub(r"^import tensorflow as tf$", "import tensorflow.compat.v1 as tf",
                    source, flags=re.MULTILINE)
    return path, source


def _tests_using(source, name):
    """Names of the test methods whose code mentions the identifier,
    attribute, keyword or string `name`."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
            for inner in ast.walk(node):
                if (isinstance(inner, ast.Name) and inner.id == name
                        or isinstance(inner, ast.Attribute) and inner.attr == name
                        or isinstance(inner, ast.keyword) and inner.arg == name
                        or isinstance(inner, ast.Constant) and inner.value == name):
                    found.add(node.name)
    return found


def _execute_with_our_module(name, path, source):
    """Executes a Google test file with our `name` module standing in for
    Google's; returns the resulting module object."""
    import bert
    ours = OUR_MODULES[name]
    missing = object()
    saved_attribute = getattr(bert, name, missing)
    setattr(bert, name, ours)
    try:
        with reference.modules_in_place({"bert." + name: ours, name: ours}):
            module = types.ModuleType("google_%s_test" % name)
            module.__file__ = path
            exec(compile(source, path, "exec"), module.__dict__)
    finally:
        if saved_attribute is missing:
            delattr(bert, name)
        else:
            setattr(bert, name, saved_attribute)
    return module


def _in_fresh_graph(method):
    @functools.wraps(method)
    def run(self):
        with tf.Graph().as_default():
            return method(self)
    return run


class _HiddenFromCollection:
    """Class attribute that keeps an inherited method usable from instances
    but is not callable on the class, so that unittest's loader (and thus
    pytest) does not collect it as a test. Used for TensorFlow's
    `TestCase.test_session`, a session helper whose name starts with "test"."""

    def __init__(self, function):
        self._function = function

    def __get__(self, instance, owner):
        if instance is None:
            return self
        return self._function.__get__(instance, owner)


def _collected_test_cases(name):
    """{"TestGoogle<Class>": TestCase subclass} for bert/<name>_test.py, or,
    when it cannot be read, a single test that skips with the reason."""
    path, source = _read_test_source(name)
    if path is None:
        reason = source

        def test_missing():
            pytest.skip(reason)
        return {"test_google_%s_test_missing" % name: test_missing}
    module = _execute_with_our_module(name, path, source)
    skipped = _tests_using(source, PRESERVE_UNUSED_FLAG)
    cases = {}
    for cls in vars(module).values():
        if not (isinstance(cls, type) and issubclass(cls, unittest.TestCase)
                and cls.__module__ == module.__name__):
            continue
        methods = {"test_session": _HiddenFromCollection(tf.test.TestCase.test_session)}
        for method_name in unittest.TestLoader().getTestCaseNames(cls):
            if method_name not in vars(cls):
                continue  # Inherited from TensorFlow's TestCase: not Google's test.
            method = getattr(cls, method_name)
            if method_name in skipped:
                methods[method_name] = unittest.skip(PRESERVE_UNUSED_REASON)(method)
            else:
                methods[method_name] = _in_fresh_graph(method)
        case_name = "TestGoogle" + cls.__name__
        cases[case_name] = type(case_name, (cls,), methods)
    assert cases, "no TestCase in %s" % path
    return cases


for _name in sorted(OUR_MODULES):
    globals().update(_collected_test_cases(_name))
del _name


def test_preserve_unused_detection_names_only_those_tests():
    """The skip list is derived from the source; it must be exactly the
    flag's tests (none when the package has no such test)."""
    path, source = _read_test_source("tokenization")
    if path is None:
        pytest.skip(source)
    skipped = _tests_using(source, PRESERVE_UNUSED_FLAG)
    all_tests = {node.name for node in ast.walk(ast.parse(source))
                 if isinstance(node, ast.FunctionDef) and node.name.startswith("test")}
    assert skipped <= all_tests
    assert all_tests - skipped, "every test would be skipped"
    for test_name in skipped:
        assert "preserve" in test_name or "unused" in test_name, test_name


def test_google_tests_ran_against_our_modules():
    """The executed test files hold our modules, not Google's."""
    for name, ours in OUR_MODULES.items():
        path, source = _read_test_source(name)
        if path is None:
            continue
        module = _execute_with_our_module(name, path, source)
        assert getattr(module, name) is ours
