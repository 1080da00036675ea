"""The README cannot drift from the code: every script command it shows is
parsed with that script's real flag definitions (flag names must exist,
values of typed flags must parse), and the scripts it names must exist."""

import importlib
import os
import re
import shlex

import pytest
from absl import flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = ["create_vocab", "create_pretraining_data", "run_pretraining", "run_classifier",
           "run_squad", "extract_features", "convert_checkpoint"]


def _readme_commands():
    """(script, [argument, ...]) for every `python <script>.py ...` command in
    the README's code blocks, with line continuations joined."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    commands = []
    for block in re.findall(r"```(?:bash|shell|sh)\n(.*?)```", text, flags=re.S):
        block = re.sub(r"\\\n", " ", block)
        for line in block.splitlines():
            line = line.split(" #")[0].strip()
            match = re.search(r"(?:^|\s|&&\s*)(?:\S*/)?python3?\s+(\S+)\.py(\s.*)?$", line)
            if match is None:
                continue
            script = match.group(1)
            args = shlex.split(match.group(2) or "", posix=True)
            commands.append((script, args, line))
    return commands


COMMANDS = _readme_commands()


def test_readme_shows_every_script():
    shown = {script for script, _, _ in COMMANDS}
    assert set(SCRIPTS) <= shown, "README lacks commands for %s" % (set(SCRIPTS) - shown)


@pytest.fixture(scope="module")
def all_flags():
    for script in SCRIPTS:
        importlib.import_module(script)
    return flags.FLAGS


@pytest.mark.parametrize("script,args,line", COMMANDS,
                         ids=["%s-%d" % (c[0], i) for i, c in enumerate(COMMANDS)])
def test_readme_command_parses(all_flags, script, args, line):
    assert os.path.exists(os.path.join(ROOT, script + ".py")), (
        "README names a script that does not exist: %s" % line)
    if script not in SCRIPTS:
        return  # demo, benchmarks and data generators: checked for existence only.
    module = importlib.import_module(script)
    with open(module.__file__, encoding="utf-8") as f:
        source = f.read()
    import run_common
    groups = [names for group, names in (("TPU_FLAGS", run_common.TPU_FLAGS),
                                         ("TRAINING_OPTION_FLAGS",
                                          run_common.TRAINING_OPTION_FLAGS))
              if "run_common." + group in source]

    def script_defines(name):
        """The flag is this script's own or a shared one it asks for."""
        return ('"%s"' % name in source or any(name in names for names in groups))

    for arg in args:
        if arg in ("...", "\\") or not arg.startswith("--"):
            continue
        name, _, value = arg[2:].partition("=")
        if name not in all_flags and name.startswith("no") and name[2:] in all_flags:
            name = name[2:]
        assert name in all_flags and script_defines(name), (
            "README: --%s is not a flag of %s.py (%s)" % (name, script, line))
        flag = all_flags[name]
        if value and "$" not in value:
            # Typed flags (int, float, bool, enum) must accept the value shown.
            flag._parse(value)
