#!/usr/bin/env bash
# The end-to-end demo in one command, on a machine with Python 3 and pip:
# creates the isolated environment .venv with the requirements (first run
# only; later runs reuse it), then runs demo.py, which learns a vocabulary,
# pre-trains a small BERT, fine-tunes it for classification and SQuAD,
# extracts features, and fine-tunes it for named entities and multiple
# choice, all on data shipped in demo_data/. Outputs go to
# demo_output/ (change with --output_dir=DIR); --quick does a fast smoke run.
set -euo pipefail
cd "$(dirname "$0")"
./scripts/setup_env.sh run
exec .venv/bin/python demo.py "$@"
