#!/usr/bin/env bash
# Installs the runtime requirements (requirements.txt) into an existing
# interpreter, keeping the TensorFlow it already has.
#
#   scripts/install_into.sh [--dry-run] [PYTHON]
#
# PYTHON is the interpreter to install into (default: python3); in a notebook,
# pass the kernel's own, sys.executable. Use it where TensorFlow comes
# preinstalled (Colab, a cloud image, a container); scripts/setup_env.sh
# builds a separate virtual environment instead.
#
# requirements.txt accepts TensorFlow 2.16-2.21 and TensorFlow Text of the
# same range, and TensorFlow Text must match TensorFlow's minor version. Left
# alone, pip may take the newest TensorFlow Text and replace the installed
# TensorFlow with the one that release needs. So when TensorFlow X.Y
# (2.16-2.21) is installed, this script pins tensorflow==X.Y.* and
# tensorflow-text==X.Y.* through a constraints file. Without TensorFlow, pip
# picks the newest supported release; an installed TensorFlow outside
# 2.16-2.21 stops the script (exit 2) rather than being replaced.
#
# TensorFlow 2.20 sets no upper bound on protobuf, and protobuf 7 removed an
# argument that TensorFlow 2.20's graph writer passes (training then stops
# with "MessageToString() got an unexpected keyword argument
# 'float_format'"), so with 2.20 protobuf is held below 7 as well.
#
# --dry-run prints the constraints and the pip command instead of running it.
set -euo pipefail
cd "$(dirname "$0")/.."

dry_run=0
if [ "${1:-}" = "--dry-run" ]; then dry_run=1; shift; fi
python="${1:-python3}"

# The installed TensorFlow's version (from the package metadata: no import),
# or nothing.
if ! tf_version="$("$python" -c '
import importlib.metadata as m
try:
    print(m.version("tensorflow"))
except m.PackageNotFoundError:
    pass
' 2>/dev/null)"; then
  echo "ERROR: $python: not a working Python interpreter" >&2
  exit 2
fi

constraints=""
if [ -n "$tf_version" ]; then
  minor="$(echo "$tf_version" | cut -d. -f1,2)"
  case "$minor" in
    2.16|2.17|2.18|2.19|2.20|2.21)
      constraints="tensorflow==$minor.*
tensorflow-text==$minor.*"
      echo "TensorFlow $tf_version is installed: keeping it, with TensorFlow Text $minor.*"
      if [ "$minor" = 2.20 ]; then
        constraints="$constraints
protobuf<7"
        echo "(and protobuf < 7, which TensorFlow 2.20 needs)"
      fi ;;
    2.15)
      echo "ERROR: TensorFlow 2.15 is installed; requirements.txt needs 2.16-2.21." \
           "Install requirements-tf2.15.txt instead (pip install -r requirements-tf2.15.txt)," \
           "or build an environment with BERT_TF=2.15 scripts/setup_env.sh" >&2
      exit 2 ;;
    *)
      echo "ERROR: TensorFlow $tf_version is installed; this project supports 2.16-2.21" \
           "(requirements.txt) and 2.15 (requirements-tf2.15.txt). Installing" \
           "requirements.txt would replace it; to do that on purpose, run" \
           "'$python -m pip install -r requirements.txt'" >&2
      exit 2 ;;
  esac
else
  echo "No TensorFlow installed: pip picks the newest supported release"
fi

args=(-m pip install -q --disable-pip-version-check -r requirements.txt)
if [ "$dry_run" = 1 ]; then
  [ -n "$constraints" ] && printf 'constraints:\n%s\n' "$constraints"
  echo "would run: $python ${args[*]}${constraints:+ -c CONSTRAINTS}"
  exit 0
fi
if [ -n "$constraints" ]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  printf '%s\n' "$constraints" > "$tmp/constraints.txt"
  args+=(-c "$tmp/constraints.txt")
fi
"$python" "${args[@]}"
