"""What the benchmarks share: the machine they ran on, the FLOPs they count."""

import platform


def cpu_model():
    """The CPU's model name (from /proc/cpuinfo on Linux)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def model_flops(batch, seq, layers, hidden, intermediate):
    """Forward FLOPs (multiply-add = 2) of BERT's encoder and pooler for one
    batch: per layer and sequence the dense layers 2 S (4 H^2 + 2 H I) and
    attention 4 S^2 H, plus the pooler 2 H^2."""
    dense = 2 * seq * (4 * hidden * hidden + 2 * hidden * intermediate)
    attention = 4 * seq * seq * hidden
    return batch * (layers * (dense + attention) + 2 * hidden * hidden)
