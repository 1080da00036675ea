"""The manual cannot drift from the code.

For README.md and every page in docs/:

* every script command in a shell code block is parsed with that script's
  real flag definitions (flag names must exist, values of typed flags must
  parse), and the scripts and shell entry points it names must exist (or, for
  a file the reader is told to write, be shown on the same page);
* no command runs a bare `python` (outside the project's environment it
  lacks TensorFlow): commands name `.venv/bin/python` or another path;
* relative links point to existing files and headings;

and the README stays a short entry point (at most 300 lines).
"""

import glob
import importlib
import os
import re
import shlex

import pytest
from absl import flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README_MAX_LINES = 300
# The scripts whose commands the manual must show.
SCRIPTS = ["create_vocab", "create_pretraining_data", "run_pretraining", "run_classifier",
           "run_squad", "extract_features", "convert_checkpoint"]
# Pages linked from the README that are written alongside their scripts; a
# link to them is accepted before they exist, and checked once they do.
PENDING_PAGES = {"docs/ner.md", "docs/swag.md"}


def _pages():
    """Repository-relative paths of README.md and every docs/*.md page."""
    docs = sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
    return ["README.md"] + docs


def _read(page):
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        return f.read()


PAGES = _pages()
SHELL_BLOCK = re.compile(r"```(?:bash|shell|sh)\n(.*?)```", flags=re.S)
ANY_BLOCK = re.compile(r"```[^\n]*\n(.*?)```", flags=re.S)
PYTHON_BLOCK = re.compile(r"```python\n(.*?)```", flags=re.S)
COMMAND = re.compile(r"(?:^|\s|&&\s*)(?:\S*/)?python3?\s+(\S+)\.py(\s.*)?$")


def _commands(page):
    """(page, script, [argument, ...], line) for every `<interpreter>
    <script>.py ...` command in the page's shell blocks, with line
    continuations joined."""
    commands = []
    for block in SHELL_BLOCK.findall(_read(page)):
        block = re.sub(r"\\\n", " ", block)
        for line in block.splitlines():
            line = line.split(" #")[0].strip()
            match = COMMAND.search(line)
            if match is None:
                continue
            args = shlex.split(match.group(2) or "", posix=True)
            commands.append((page, match.group(1), args, line))
    return commands


COMMANDS = [command for page in PAGES for command in _commands(page)]


def _written_on_page(page, script):
    """The source of a file the page tells the reader to write (a python
    block whose first line is `# <script>.py...`), or None."""
    for block in PYTHON_BLOCK.findall(_read(page)):
        if re.match(r"#\s*%s\.py\b" % re.escape(os.path.basename(script)), block):
            return block
    return None


def _is_flag_script(source):
    return (("flags.DEFINE_" in source or "shared_flags.define_flags" in source
             or "shared_flags.define_settings_flags" in source)
            and "__main__" in source)


def _flag_scripts():
    """Top-level scripts defined with absl flags: the required ones, then any
    other run_*.py (run_ner.py, run_swag.py, ...) present."""
    names = list(SCRIPTS)
    for path in sorted(glob.glob(os.path.join(ROOT, "run_*.py"))):
        name = os.path.splitext(os.path.basename(path))[0]
        with open(path, encoding="utf-8") as f:
            if name not in names and _is_flag_script(f.read()):
                names.append(name)
    return names


def test_readme_is_short():
    lines = _read("README.md").count("\n")
    assert lines <= README_MAX_LINES, (
        "README.md has %d lines; keep it at most %d and move details to docs/"
        % (lines, README_MAX_LINES))


def test_manual_shows_every_script():
    shown = {script for _, script, _, _ in COMMANDS}
    assert set(SCRIPTS) <= shown, "the manual lacks commands for %s" % (set(SCRIPTS) - shown)


@pytest.fixture(scope="module")
def all_flags():
    for script in _flag_scripts():
        importlib.import_module(script)
    return flags.FLAGS


def _check_args(all_flags, modules, args, where):
    """Every --flag in `args` is a flag of one of the script modules
    `modules` (one it defines, or a shared one it asks for: its key flags,
    which its --help lists), and typed values parse."""
    key_flags = {flag.name for module in modules
                 for flag in all_flags.get_key_flags_for_module(module)}

    def defined(name):
        return name in key_flags

    for arg in args:
        if arg in ("...", "\\") or not arg.startswith("--"):
            continue
        name, _, value = arg[2:].partition("=")
        if name not in all_flags and name.startswith("no") and name[2:] in all_flags:
            name = name[2:]
        assert name in all_flags and defined(name), "%s: --%s is not a flag" % (where, name)
        if value and "$" not in value:
            # Typed flags (int, float, bool, enum) must accept the value shown.
            all_flags[name]._parse(value)


@pytest.mark.parametrize("page,script,args,line", COMMANDS,
                         ids=["%s-%s-%d" % (c[0], c[1], i) for i, c in enumerate(COMMANDS)])
def test_command_parses(all_flags, page, script, args, line):
    where = "%s: %s" % (page, line)
    path = os.path.join(ROOT, script + ".py")
    if not os.path.exists(path):
        # A file the reader writes: shown on the page; its flags are those of
        # the repository scripts it imports.
        source = _written_on_page(page, script)
        assert source is not None, "names a script that does not exist: " + where
        imported = [name for name in _flag_scripts()
                    if re.search(r"^import %s\b" % name, source, flags=re.M)]
        if args:
            for name in imported:
                importlib.import_module(name)
            _check_args(all_flags, imported, args, where)
        return
    with open(path, encoding="utf-8") as f:
        source = f.read()
    if os.path.dirname(script) == "" and script in _flag_scripts():
        importlib.import_module(script)
        _check_args(all_flags, [script], args, where)
        return
    # Demo, benchmarks and data generators (argparse or their own absl
    # flags, not importable side by side): each flag must appear in the
    # source, or in that of the benchmarks' shared flags (define_model_flags,
    # define_variant_flags).
    if re.search(r"bench_common\.define_\w+_flags\(", source):
        with open(os.path.join(ROOT, "benchmarks", "bench_common.py"), encoding="utf-8") as f:
            source += f.read()
    for arg in args:
        if arg.startswith("--"):
            name = arg[2:].partition("=")[0]
            assert '"%s"' % name in source or '"--%s"' % name in source, (
                "%s: --%s is not a flag of %s.py" % (where, name, script))


def _code_texts(text):
    """Fenced code blocks (any language) and inline code spans of a page."""
    blocks = ANY_BLOCK.findall(text)
    prose = ANY_BLOCK.sub("", text)
    return blocks + re.findall(r"`([^`\n]+)`", prose)


# `python` or `python3` as a command word: not part of a path (.venv/bin/python),
# a variable or a longer word, and followed by an argument.
BARE_PYTHON = re.compile(r"(?<![\w/.$}{-])python3?(?=[ \t])")


@pytest.mark.parametrize("page", PAGES)
def test_no_bare_python(page):
    bad = [line.strip() for code in _code_texts(_read(page)) for line in code.splitlines()
           if BARE_PYTHON.search(line)]
    assert not bad, ("%s runs a bare `python` (use .venv/bin/python or say to activate .venv): %s"
                     % (page, bad))


ENTRY_POINT = re.compile(r"(?:^|[\s;&|(])(?:bash\s+)?(\./[\w./-]+\.sh|\.ci/run)\b")


@pytest.mark.parametrize("page", PAGES)
def test_entry_points_exist(page):
    for block in SHELL_BLOCK.findall(_read(page)):
        for path in ENTRY_POINT.findall(block):
            assert os.path.exists(os.path.join(ROOT, path)), "%s names %s" % (page, path)


def _slug(heading):
    """The anchor GitHub gives a heading."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page):
    text = ANY_BLOCK.sub("", _read(page))
    return {_slug(h) for h in re.findall(r"^#{1,6}\s+(.*)$", text, flags=re.M)}


@pytest.mark.parametrize("page", PAGES)
def test_links_resolve(page):
    text = ANY_BLOCK.sub("", _read(page))
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto
        path, _, anchor = target.partition("#")
        linked = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        if not os.path.exists(os.path.join(ROOT, linked)):
            assert linked in PENDING_PAGES, "%s links to a missing file: %s" % (page, target)
            continue
        if anchor:
            assert anchor in _anchors(linked), "%s links to a missing heading: %s" % (page, target)


def _version_range(text):
    """"3.10–3.13" or "3.10, 3.11" -> the set of minor versions it names."""
    ends = [int(minor) for minor in re.findall(r"3\.(\d+)", text)]
    if "–" in text or "-" in text:
        return set(range(min(ends), max(ends) + 1))
    return set(ends)


def _setup_env_pythons():
    """{"2.15": minors, "latest": minors} that scripts/setup_env.sh accepts."""
    script = _read("scripts/setup_env.sh")
    legacy, latest = re.findall(r"case \"\$py_version\" in\s*\n\s*([\d.|]+)\)", script)
    return {"2.15": _version_range(legacy.replace("|", ", ")),
            "latest": _version_range(latest.replace("|", ", "))}


def test_python_versions_claimed_are_those_installed_and_tested():
    """README's supported Python versions for each TensorFlow line are the
    ones scripts/setup_env.sh installs, ruff's target is the oldest of
    them, and the interpreter running this test is one of them."""
    accepted = _setup_env_pythons()
    table = dict(re.findall(r"^\| (2\.\d+)[^|]*\| ([\d., –]+) \|", _read("README.md"), flags=re.M))
    assert set(table) == {"2.21", "2.15"}, table
    rows = re.findall(r"^\| 2\.21[^|]*\| ([\d., –]+) \|", _read("README.md"), flags=re.M)
    claimed_latest = set().union(*map(_version_range, rows))
    assert claimed_latest == accepted["latest"]
    assert _version_range(table["2.15"]) == accepted["2.15"]
    summary = re.search(r"\*\*Python ([\d.–]+) with TensorFlow 2\.21.*?Python\s+([\d.–]+) with "
                        r"TensorFlow 2\.15", _read("README.md"), flags=re.S)
    assert _version_range(summary.group(1)) == accepted["latest"]
    assert _version_range(summary.group(2)) == accepted["2.15"]
    oldest = min(accepted["2.15"] | accepted["latest"])
    assert re.search(r'^target-version = "py3%d"$' % oldest, _read("ruff.toml"), flags=re.M)
    import sys

    import tensorflow as tf
    line = "2.15" if tf.__version__.startswith("2.15.") else "latest"
    assert sys.version_info.major == 3 and sys.version_info.minor in accepted[line]
