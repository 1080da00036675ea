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


def define_model_flags(threads, layers=12, hidden_size=768, num_attention_heads=12,
                       intermediate_size=3072):
    """The flags of a benchmark's BERT model and machine: --threads,
    --seq_length (128), --layers, --hidden_size, --num_attention_heads,
    --intermediate_size and --vocab_size (30522), with the given defaults
    (BERT-Base's)."""
    from absl import flags
    flags.DEFINE_integer("threads", threads, "intra_op and inter_op parallelism threads.")
    flags.DEFINE_integer("seq_length", 128, "Sequence length.")
    flags.DEFINE_integer("layers", layers, "Transformer layers (12 = BERT-Base).")
    flags.DEFINE_integer("hidden_size", hidden_size, "Hidden size.")
    flags.DEFINE_integer("num_attention_heads", num_attention_heads, "Attention heads.")
    flags.DEFINE_integer("intermediate_size", intermediate_size, "Feed-forward size.")
    flags.DEFINE_integer("vocab_size", 30522, "Vocabulary size.")


def model_config(modeling, **overrides):
    """The modeling.BertConfig of the model flags (`define_model_flags`),
    with two segment types and `overrides`."""
    from absl import flags
    values = flags.FLAGS
    return modeling.BertConfig(**dict(dict(
        vocab_size=values.vocab_size, hidden_size=values.hidden_size,
        num_hidden_layers=values.layers, num_attention_heads=values.num_attention_heads,
        intermediate_size=values.intermediate_size, type_vocab_size=2), **overrides))


def time_calls(call, warmup, requests):
    """Calls `call()` `warmup` + `requests` times. Returns (the timed calls'
    latencies in ms, the last call's result)."""
    import time
    latencies = []
    for index in range(warmup + requests):
        start = time.perf_counter()
        result = call()
        if index >= warmup:
            latencies.append((time.perf_counter() - start) * 1000.0)
    return latencies, result


def latency_summary(latencies):
    """{"p50", "p99", "mean"} of latencies in ms (p99: the nearest rank)."""
    import statistics
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]
    return {"p50": statistics.median(ordered), "p99": p99, "mean": statistics.mean(ordered)}


def load_text_signature(export_dir, threads):
    """serving_default of a raw-text export, loaded with TensorFlow and
    TensorFlow Text alone (as a server would), on `threads` threads."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the export's WordPiece op)
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    return tf.saved_model.load(export_dir).signatures["serving_default"]


def print_result(result):
    """A child's answer to its parent (`child_result`): one "RESULT <json>"
    line."""
    import json
    print("RESULT " + json.dumps(result))


def run_child(argv, python=None, timeout=None, env=None):
    """Runs `argv` with `python` (default: this interpreter) and returns its
    `child_result`; {"error": ...} when it runs past `timeout` seconds."""
    import subprocess
    import sys
    try:
        completed = subprocess.run([python or sys.executable] + list(argv),
                                   capture_output=True, text=True, check=False,
                                   timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": "no result within %d s" % timeout}
    return child_result(completed)


def child_result(completed):
    """The result a child process printed with `print_result`, from its
    subprocess.CompletedProcess; {"error": ...} with the end of its standard
    error where it printed none or failed."""
    import json
    lines = [line for line in completed.stdout.splitlines() if line.startswith("RESULT ")]
    if completed.returncode != 0 or not lines:
        tail = completed.stderr.strip().splitlines()[-3:]
        return {"error": "exit %d: %s" % (completed.returncode, " | ".join(tail))[:300]}
    return json.loads(lines[-1][len("RESULT "):])
