"""Seeds the scripts' runs in a child process, for tests that run them as a
user would (the Colab notebook's cells): with this folder on PYTHONPATH and
BERT_TEST_GRAPH_SEED set, every run configuration `scriptkit.training.make_run_config`
makes carries that graph-level random seed, as `tiny.seeded_runs` does in
the tests' own process. The scripts have no seed flag (Google's have none);
without the variable this does nothing."""

import importlib.abc
import importlib.util
import os
import sys

_SEED = os.environ.get("BERT_TEST_GRAPH_SEED")


class _SeedTraining(importlib.abc.MetaPathFinder):
    """Wraps `training.make_run_config` once the module is loaded."""

    def find_spec(self, name, path=None, target=None):
        if name != "scriptkit.training":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            make_run_config = module.make_run_config
            module.make_run_config = lambda *args, **kwargs: make_run_config(
                *args, **kwargs).replace(tf_random_seed=int(_SEED))

        spec.loader.exec_module = exec_module
        return spec


if _SEED:
    sys.meta_path.insert(0, _SeedTraining())
