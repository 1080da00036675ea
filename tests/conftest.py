"""Shared pytest setup: the repository root on sys.path, TensorFlow imported
as the scripts import it (quiet, on the same CPU back-end), and
failure reports that show the assertion and the end of the captured output
rather than hundreds of lines of TensorFlow log."""

import os
import re
import sys

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
TESTS = os.path.dirname(os.path.abspath(__file__))
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)

# TensorFlow as the scripts import it, before any test module imports it:
# the in-process tests then run on the CPU back-end the scripts choose.
from scriptkit import quiet_tf  # noqa: E402, F401

# Captured output kept in a failure report: the last lines of each section.
REPORT_TAIL_LINES = 40
# TensorFlow's start-up and deprecation chatter, never the cause of a failure.
_NOISE = re.compile(
    r"Unable to register cu(DNN|FFT|BLAS) factory|Could not find TensorRT|"
    r"cuda_(dnn|fft|blas|platform)\.cc|cudart_stub\.cc|Could not find cuda drivers|"
    r"oneDNN custom operations are on|rebuild TensorFlow with the appropriate compiler|"
    r"All log messages before absl::InitializeLog|is deprecated and will be removed|"
    r"^Instructions for updating:|^(Use|Call) .* instead\.?$|This TensorFlow binary is "
    r"optimized")


def _tail(text):
    lines = [line for line in text.splitlines() if not _NOISE.search(line)]
    if len(lines) > REPORT_TAIL_LINES:
        omitted = len(lines) - REPORT_TAIL_LINES
        lines = ["[... %d earlier lines omitted ...]" % omitted] + lines[-REPORT_TAIL_LINES:]
    return "\n".join(lines)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Shortens the captured stdout/stderr/log sections of failing tests."""
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        report.sections = [(title, _tail(content)) for title, content in report.sections]


@pytest.fixture(scope="session")
def exports(tmp_path_factory):
    """The tiny exports of test_predict.make_exports ({"pair", "single",
    "ner", "swag"} -> SavedModel folder), made once for every module that
    serves them (predict.py, the server, warm-up); a module that writes to
    one copies it first."""
    import test_predict
    return test_predict.make_exports(tmp_path_factory.mktemp("predict"))
