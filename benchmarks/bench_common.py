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


def status_mib(names, pid="self"):
    """{name: MiB} of the memory fields `names` (such as "VmHWM", "RssFile")
    of /proc/<pid>/status; {} where Linux's /proc is not there."""
    values = {}
    try:
        with open("/proc/%s/status" % pid) as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name in names:
                    values[name] = int(rest.split()[0]) / 1024
    except OSError:
        pass
    return values


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


def define_variant_flags(variants, hf_variant):
    """The flags of a batch-1 latency benchmark whose variants each run in
    their own child process: --threads (1), --requests (50), --warmup (5),
    --rounds (2), --variants (default: `variants`, a list of names),
    --hf_python (the interpreter of the `hf_variant` variant) and the
    internal --child. They are the calling script's own (its --helpshort
    lists them)."""
    import sys

    from absl import flags
    # absl counts a flag as the key flag of the module that defines it; from
    # here on, of the module that called into this one.
    flags.disclaim_key_flags()
    flags.DEFINE_integer("threads", 1, "intra_op and inter_op parallelism threads.")
    flags.DEFINE_integer("requests", 50, "Timed calls per variant and round.")
    flags.DEFINE_integer("warmup", 5, "Untimed calls before them.")
    flags.DEFINE_integer("rounds", 2, "Rounds over the variants.")
    flags.DEFINE_list("variants", list(variants),
                      "Variants to time (%s)." % ", ".join(variants))
    flags.DEFINE_string("hf_python", sys.executable,
                        "The interpreter of the %s variant (torch and transformers)."
                        % hf_variant)
    flags.DEFINE_string("child", None, "Internal: run one variant (variant:path).")


def compare_variants(script, settings, children, make_paths, key, title, width=8,
                     extra=None, convert=None):
    """A batch-1 latency comparison of variants that each run in their own
    child process (flags: `define_variant_flags`).

    In the parent (settings["child"] unset): `make_paths(workdir)` writes
    what the children need in a temporary folder and returns (the "text"
    variant's path, the other variants' path); settings["rounds"] rounds
    over settings["variants"] then run each variant as `script
    --child=<variant>:<path>` with this run's other arguments (the "text"
    variant with this interpreter, the others with settings["hf_python"]);
    then prints `title` and the table (`print_latency_table`, `width`,
    `extra`) and returns {variant: its first good round's result}.

    In a child: `children` (the "text" variant's function, any other
    variant's) are functions of the path that return `time_calls`'
    (latencies, last result); prints (`print_result`) the latency summary
    and the result under `key`, through `convert` if given; returns None.
    """
    import os
    import sys
    import tempfile
    if settings["child"]:
        variant, path = settings["child"].split(":", 1)
        latencies, value = children[0 if variant == "text" else 1](path)
        print_result(dict(latency_summary(latencies),
                          **{key: convert(value) if convert else value}))
        return None
    flag_args = [a for a in sys.argv[1:] if not a.startswith("--child")]
    results = {}
    with tempfile.TemporaryDirectory() as workdir:
        text_path, other_path = make_paths(workdir)
        for _ in range(settings["rounds"]):
            for variant in settings["variants"]:
                path, python = ((text_path, sys.executable) if variant == "text"
                                else (other_path, settings["hf_python"]))
                results.setdefault(variant, []).append(run_child(
                    [os.path.abspath(script), "--child=%s:%s" % (variant, path)] + flag_args,
                    python=python))
    print(title)
    return print_latency_table(results, width, extra)


def print_latency_table(results, width=8, extra=None):
    """Prints the table of `variant_rounds`' results: a row per variant with
    the median over its rounds of p50, p99 and mean (ms), or "failed: <the
    first round's error>" where no round ran. `extra` (header, function of
    a result): one more column, from the variant's first good round.
    Returns {variant: its first good round's result}."""
    import statistics
    header, column = extra or ("", None)
    print(("%-*s %10s %10s %10s" % (width, "variant", "p50 ms", "p99 ms", "mean ms")
           + ("  " + header if header else "")))
    first = {}
    for variant, rounds in results.items():
        good = [r for r in rounds if "error" not in r]
        if not good:
            print("%-*s failed: %s" % (width, variant, rounds[0]["error"]))
            continue
        first[variant] = good[0]
        print("%-*s %10.1f %10.1f %10.1f" % ((width, variant) + tuple(
            statistics.median(r[key] for r in good) for key in ("p50", "p99", "mean")))
            + ("  %s" % (column(good[0]),) if column else ""))
    return first


def start_server(python, repo, model_dir, server_flags=(), preexec_fn=None):
    """`predict.py --port=0` of the checkout `repo`, run by `python` on the
    export `model_dir` with `server_flags` (and `preexec_fn` run in the
    child before it starts: a resource limit, say): (the process, its
    port), once it serves. Its log goes on being read (and dropped), so
    that the server never blocks on it."""
    import os
    import re
    import subprocess
    import threading
    process = subprocess.Popen(
        [python, os.path.join(repo, "predict.py"), "--model_dir=" + model_dir, "--port=0"]
        + list(server_flags), cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, preexec_fn=preexec_fn)
    for line in process.stdout:
        match = re.search(r"Serving at http://\S+:(\d+)/", line)
        if match:
            threading.Thread(target=_drain, args=(process.stdout,), daemon=True).start()
            return process, int(match.group(1))
    raise RuntimeError("the server did not start: exit %s" % process.wait())


def _drain(stream):
    for _ in stream:
        pass

