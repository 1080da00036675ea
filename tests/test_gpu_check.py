"""benchmarks/gpu_check.sh: without a GPU it must fail with one clear last
line; with the CPU standing in for the GPU (--device=cpu, a tiny model) its
comparisons must run, pass where the numbers agree and fail the exit status
where a tolerance is broken."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "gpu_check.sh")
TINY = ["--layers=1", "--hidden_size=32", "--heads=2", "--intermediate_size=64",
        "--vocab_size=100", "--seq_length=16", "--check_batch=4", "--batch_size=4",
        "--timed_steps=2"]


def run(*args, **env):
    return subprocess.run(["bash", SCRIPT] + list(args), capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, PYTHON=sys.executable, **env))


def test_script_is_executable():
    assert os.access(SCRIPT, os.X_OK)


def test_without_a_gpu_it_fails_with_a_last_line_saying_so():
    # CUDA_VISIBLE_DEVICES="" hides any GPU, so this holds on every machine.
    result = run(CUDA_VISIBLE_DEVICES="")
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[-1] == "gpu_check: FAILED: no GPU found"
    assert any(line.startswith("TensorFlow ") for line in lines)  # versions recorded first
    assert "losses" not in result.stdout  # stopped before building a model


@pytest.mark.slow
def test_cpu_stand_in_compares_every_configuration_and_fails_on_a_mismatch():
    # bf16 never equals fp32 exactly, so a zero tolerance must fail the run;
    # fp32 and fp16 keep their tolerances and must pass.
    result = run("--device=cpu", "--bf16_rtol=0", *TINY)
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    lines = out.strip().splitlines()
    assert lines[-1] == "gpu_check: FAILED: see the MISMATCH/FAILED lines above"
    rows = {line.split()[0]: line for line in lines if " losses " in line and
            line.startswith("  ")}
    assert set(rows) == {"fp32", "fp32+XLA", "bf16", "bf16+XLA", "fp16", "fp16+XLA"}
    for name, line in rows.items():
        verdict = "MISMATCH" if name.startswith("bf16") else "ok"
        assert line.rstrip().endswith(verdict), line
    assert any(line.startswith("MirroredStrategy") and line.endswith("ok") for line in lines)
    assert "Training speed" in out and "Inference" in out
