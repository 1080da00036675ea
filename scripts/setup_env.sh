#!/usr/bin/env bash
# Creates .venv with the runtime requirements ("run") or runtime + test
# requirements ("dev"), only when missing or when the requirement files
# changed since the last install (a stamp holds their checksum).
set -euo pipefail
cd "$(dirname "$0")/.."
kind="${1:-run}"
files="requirements.txt"
[ "$kind" = "dev" ] && files="requirements.txt requirements-dev.txt"
python="${PYTHON:-python3}"
stamp=".venv/.installed-$kind"
want="$(cat $files | sha256sum | cut -d' ' -f1)"
if [ -x .venv/bin/python ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
# A current "dev" install includes everything "run" needs.
dev_stamp=".venv/.installed-dev"
if [ "$kind" = "run" ] && [ -x .venv/bin/python ] && [ -f "$dev_stamp" ] && \
   [ "$(cat "$dev_stamp")" = "$(cat requirements.txt requirements-dev.txt | sha256sum | cut -d' ' -f1)" ]; then
  exit 0
fi
if [ ! -x .venv/bin/python ]; then
  echo "Creating virtual environment .venv ..."
  "$python" -m venv .venv
fi
echo "Installing $files into .venv (first run only) ..."
req="requirements.txt"
[ "$kind" = "dev" ] && req="requirements-dev.txt"
.venv/bin/python -m pip install -q --disable-pip-version-check -r "$req"
echo "$want" > "$stamp"
