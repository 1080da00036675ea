"""The repository's shape, as README's layout table describes it: the
scripts and the model library at the top level, the scripts' machinery in
the package scriptkit/, and layers a reader can check by the imports
alone: the library imports nothing of the package or the scripts, the
package no script, no module imports itself back through others, and no
function imports a module of the project to dodge such a cycle."""

import ast
import glob
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The model library: what Google's release has (the encoder, the tokenizer,
# the optimizer) and the kernels the encoder and the optimizer import.
LIBRARY = ("modeling", "tokenization", "optimization", "bert_ops", "recompute")
# quiet_tf's import loads TensorFlow, which some paths of the package do
# without (reading local files, counting words): it alone may be imported
# where it is needed.
LAZY = ("scriptkit.quiet_tf",)


def _modules():
    """module name -> path, of the top level and the package."""
    paths = glob.glob(os.path.join(ROOT, "*.py")) + glob.glob(
        os.path.join(ROOT, "scriptkit", "*.py"))
    modules = {}
    for path in paths:
        name = os.path.splitext(os.path.relpath(path, ROOT))[0].replace(os.sep, ".")
        if name != "scriptkit.__init__":
            modules[name] = path
    return modules


MODULES = _modules()
SCRIPTS = sorted(n for n in MODULES if "." not in n and n not in LIBRARY)


def _imports(path, top_level_only):
    """(line, module name) of each import of a project module in `path`:
    at the module's top (statements outside functions) or in functions."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    in_functions = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            in_functions |= {id(n) for n in ast.walk(node) if n is not node}
    found = []
    for node in ast.walk(tree):
        if (id(node) in in_functions) == top_level_only:
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module + "." + alias.name for alias in node.names] + [node.module]
        else:
            continue
        found.extend((node.lineno, name) for name in names if name in MODULES)
    return found


def test_top_level_holds_the_scripts_and_the_library():
    top = [n for n in MODULES if "." not in n]
    assert len(top) <= 17, sorted(top)
    assert set(LIBRARY) <= set(top)
    for script in SCRIPTS:
        with open(MODULES[script], encoding="utf-8") as f:
            assert 'if __name__ == "__main__":' in f.read(), script


def test_layers():
    wrong = []
    for name, path in sorted(MODULES.items()):
        for line, imported in _imports(path, top_level_only=True):
            if name in LIBRARY and imported not in LIBRARY:
                wrong.append("%s:%d: the library imports %s" % (name, line, imported))
            if name.startswith("scriptkit.") and imported in SCRIPTS:
                wrong.append("%s:%d: the package imports the script %s" % (name, line, imported))
    assert not wrong, "\n".join(wrong)


def test_no_import_cycle():
    graph = {name: {imported for _, imported in _imports(path, top_level_only=True)}
             for name, path in MODULES.items()}
    state = {}

    def visit(name, trail):
        if state.get(name) == "done":
            return None
        if state.get(name) == "open":
            return trail[trail.index(name):] + [name]
        state[name] = "open"
        for imported in sorted(graph[name]):
            cycle = visit(imported, trail + [name])
            if cycle:
                return cycle
        state[name] = "done"
        return None

    for name in sorted(graph):
        cycle = visit(name, [])
        assert cycle is None, " -> ".join(cycle)


def test_no_function_imports_a_module_of_the_project():
    found = ["%s:%d: %s" % (name, line, imported)
             for name, path in sorted(MODULES.items())
             for line, imported in _imports(path, top_level_only=False)
             if imported not in LAZY]
    assert not found, "\n".join(found)
