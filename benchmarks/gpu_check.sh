#!/usr/bin/env bash
# A first check of this project on a GPU, in one command (about five minutes
# on one GPU): records the GPU, driver and versions; trains a BERT-Base-shaped
# classifier in fp32, bf16 and fp16, without and with XLA, and compares each
# with the CPU on the same batch; runs MirroredStrategy on the visible GPUs;
# prints sequences/s next to NVIDIA's published figures. Exit status 0 when
# everything matches, non-zero otherwise (also without a GPU); the last line
# says which. Details: benchmarks/gpu_check.py.
#
#   benchmarks/gpu_check.sh [gpu_check.py flags] 2>&1 | tee gpu_check.log
#
# The interpreter is $PYTHON, else .venv/bin/python, else python3; it needs
# the project's requirements and TensorFlow's CUDA build (docs/devices.md).
set -uo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-}"
if [ -z "$python" ]; then
  if [ -x .venv/bin/python ]; then python=.venv/bin/python; else python=python3; fi
fi
"$python" benchmarks/gpu_check.py "$@"
status=$?
if [ "$status" -ne 0 ] && [ "$status" -ne 1 ]; then
  # The check itself broke (no TensorFlow, a crash): still end with one line.
  echo "gpu_check: FAILED: $python benchmarks/gpu_check.py stopped with exit status $status"
fi
exit "$status"
