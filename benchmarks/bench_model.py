"""BertModel speed on CPU/GPU: forward pass and one fine-tuning train step of
a BERT-Base-shaped model, against a dense float32 matmul measured in the same
process with the same thread count.

    python benchmarks/bench_model.py --threads=1 --steps=3
    python benchmarks/bench_model.py --threads=2 --layers=4 --steps=3   # quicker

Each measurement (forward, train) runs in its own child process, which times
the model, then twice a dense matmul in the row's compute type
(`--matmul_shape`, by default 2048 x 2048 x 2048). Printed per
measurement: examples/s, achieved GFLOP/s, that rate as a fraction of the
matmul's (by wall time, and by process CPU time per thread, which is the
reliable one on a machine shared with other jobs), and the child's peak
resident memory (ru_maxrss) up to the end of the model's measurement (the
matmuls and the `--profile` step come after it), with, in the
"libraries" column, how much of it was file-backed pages at that point: the
libraries' code and read-only data, mapped from their files, clean and shared
with every process that maps them (TensorFlow 2.21's own import maps about
350 MiB of them, PyTorch's about 70). Peak RSS less that column is the
process's own memory: weights, activations, allocator caches. The table's
"matmul" column is the reference matmul's GFLOP/s per CPU-second per thread,
the better of its two timings.

FLOPs counted (multiply-add = 2): per layer and sequence, the dense layers
2 * S * (4 H^2 + 2 H I) and attention 4 * S^2 * H; plus the pooler 2 H^2. A
training step counts 3x the forward (backward = 2x forward); the embedding
lookups, softmax/LayerNorm/GELU element-wise work and the optimizer update are
not counted (they are a few percent).

`--implementations` lists what to measure, alternating, `--repeats` children
each; the table gives the median and the min-max over the repeats:
  ours       this repository's modeling.py and optimization.py.
  original   Google's original modeling.py and optimization.py
             (bert-tensorflow 1.0.4, its tf.contrib layer_norm replaced by the
             same computation, see tests/reference.py; TensorFlow 2.15 only).
  hf         Hugging Face transformers' BertModel in PyTorch (tanh GELU as in
             BERT, the library's default attention; training with
             BertForSequenceClassification, torch.optim.AdamW with weight
             decay 0.01 and gradient clipping to norm 1.0), needs
             benchmarks/requirements-hf.txt.
`NAME@PYTHON` runs that implementation's children with another interpreter,
for example `ours@.venv-tf2.21/bin/python` next to `ours` on TensorFlow 2.15,
or `hf@/path/to/torch-env/bin/python`.

TensorFlow's CPU back-end: `ours` imports TensorFlow the way the scripts do
(`quiet_tf`, which turns oneDNN on for x86-64 Linux unless
TF_ENABLE_ONEDNN_OPTS is set), `original` gets TensorFlow's own default, as
Google's scripts do. `NAME+onednn` or `NAME-onednn` sets
TF_ENABLE_ONEDNN_OPTS=1 or 0 for that row's children, for example
`original+onednn` to compare both on the same back-end. The table names the
back-end each row ran on. `NAME+avx2` holds oneDNN (and PyTorch's MKL and
ATen kernels) to AVX2 code on a CPU with AVX-512 (ONEDNN_MAX_CPU_ISA,
MKL_ENABLE_INSTRUCTIONS, ATEN_CPU_CAPABILITY in that row's children), and
XLA's compiled loops too on TensorFlow 2.20 and later (XLA's
--xla_cpu_max_isa; 2.15 has no such setting): an approximation of an
AVX2-only CPU, since TensorFlow's own kernels are not held back (its pip
packages compile them for AVX, but some of its code picks AVX-512 at run
time). Before measuring, one short child
per row runs a small matmul with the libraries' verbose modes on and the
table's header names the instruction set each library reported (oneDNN's
and whether XLA was held back for TensorFlow; MKL's and ATen's for
PyTorch), so a capped row shows that
the cap took (`--noreport_isa` skips this).
`ours-fusedgelu` builds this repository's GELU as
separate ops instead of XLA-compiled loops (the scripts' --fused_ops without
gelu); `ours-fuseddropout` builds dropout with tf.nn.dropout's draw and
separate ops; `ours-fusedlayernorm` LayerNorm as separate ops; the suffixes
combine.
`before` is `ours` with the code of another checkout, `--compare_code_dir`
(for example a `git worktree` of an earlier commit), so that one run
compares a change with what came before it.
`ours+bf16` builds the model with compute_type bfloat16 (what
`--precision=bf16` does in the scripts); its reference matmul is then a
bfloat16 one of the same shape, so the fraction is of the bfloat16 matmul
rate (fast only on CPUs with AVX512_BF16 or AMX: check
`grep -o 'avx512_bf16\\|amx_bf16' /proc/cpuinfo`).
`--modes=train` (or `--modes=forward`) makes one of the two measurements
only. `--profile` traces one more step in each TensorFlow child and prints,
per row, where the op time went: matmuls, casts, GELU, LayerNorm, softmax,
dropout, bias adds, gradient clipping, the optimizer update, and the op
types of the rest (the original's optimizer is written out in element-wise
ops, which land in "other").
"""

import os
import resource
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from absl import app, flags  # noqa: E402

import bench_common  # noqa: E402

FLAGS = flags.FLAGS

bench_common.define_model_flags(threads=1)
flags.DEFINE_integer("forward_batch_size", 32, "Batch size of the forward pass.")
flags.DEFINE_integer("train_batch_size", 16, "Batch size of the training step.")
flags.DEFINE_integer("steps", 3, "Timed steps per measurement (after the warm-up steps).")
flags.DEFINE_integer("warmup_steps", 3,
                     "Untimed steps first. A training step's memory settles over the first "
                     "three or four: the second still page-faults 0.6-0.9 GB into the "
                     "process, which adds 1.6-2.1 CPU seconds, mostly in the kernel.")
flags.DEFINE_integer("matmul_steps", 5, "Timed runs of the reference matmul.")
flags.DEFINE_list("matmul_shape", ["2048", "2048", "2048"],
                  "M,K,N of the reference float32 matmul [M, K] x [K, N].")
flags.DEFINE_list("implementations", "ours",
                  "ours, original (Google's code), hf (Hugging Face PyTorch), each "
                  "optionally NAME@PYTHON to run it with that interpreter.")
flags.DEFINE_integer("repeats", 1, "Children per implementation and mode (alternating).")
flags.DEFINE_string("implementation", "ours", "Internal: the implementation a child measures.")
flags.DEFINE_multi_enum("modes", ["forward", "train"], ["forward", "train"],
                        "The measurements to make (repeat the flag for both).")
flags.DEFINE_enum("mode", "all", ["all", "forward", "train", "isa"],
                  "Which measurement; 'all' runs each in a child process ('isa': "
                  "internal, the instruction-set probe of --report_isa).")
flags.DEFINE_bool("report_isa", True,
                  "Before measuring, run one short child per row with the libraries' "
                  "verbose modes on, and print the instruction set each reports (oneDNN "
                  "for TensorFlow; MKL, ATen and oneDNN where used for PyTorch): shows "
                  "what a +avx2 row's cap did.")
flags.DEFINE_bool("profile", False,
                  "After the timed steps, trace one more step of each TensorFlow child "
                  "and print where its op time went (matmuls, casts, optimizer, ...).")
flags.DEFINE_string("compare_code_dir", None,
                    "A checkout whose modeling.py and optimization.py the `before` "
                    "implementation measures.")
flags.DEFINE_enum("precision", "fp32", ["fp32", "bf16"],
                  "Internal: the compute type a child measures (the +bf16 suffix).")
flags.DEFINE_string("xla_max_isa", None,
                    "Internal: the instruction set a TensorFlow child holds XLA's "
                    "compiled loops to (the +avx2 suffix).")
flags.DEFINE_string("fused_ops", "auto",
                    "Internal: the kernels a child fuses (the -fused... suffixes).")


def _session_config():
    import tensorflow.compat.v1 as tf
    return tf.ConfigProto(intra_op_parallelism_threads=FLAGS.threads,
                          inter_op_parallelism_threads=FLAGS.threads)


def _tensorflow_version():
    """(major, minor) of the TensorFlow installed here, read without
    importing it; (0, 0) when none is found."""
    from importlib import metadata
    for package in ("tensorflow", "tensorflow-cpu", "tf-nightly"):
        try:
            return tuple(int(part) for part in metadata.version(package).split(".")[:2])
        except (metadata.PackageNotFoundError, ValueError):
            continue
    return (0, 0)


def hold_xla_back():
    """Before TensorFlow's import: holds XLA's CPU code to --xla_max_isa
    through XLA's own --xla_cpu_max_isa, which TensorFlow 2.20 and 2.21
    read; TensorFlow 2.15 has no such setting, and its XLA stops the
    process on a flag it does not know, so there the loops stay as they are.
    Returns what the row's runtime says about XLA ("" when not asked)."""
    if not FLAGS.xla_max_isa:
        return ""
    if _tensorflow_version() < (2, 20):
        return "not held back (no setting before TF 2.20)"
    os.environ["XLA_FLAGS"] = ("%s --xla_cpu_max_isa=%s" % (
        os.environ.get("XLA_FLAGS", ""), FLAGS.xla_max_isa)).strip()
    return "held to " + FLAGS.xla_max_isa


def _median_time(fn, steps):
    """Median (wall seconds, process CPU seconds) of `steps` calls of `fn`.

    CPU time divided by the thread count is the better measure on a machine
    shared with other jobs; on an idle machine the two agree.
    """
    for _ in range(FLAGS.warmup_steps):  # Graph optimisation, compilation, allocations.
        fn()
    walls, cpus = [], []
    for _ in range(steps):
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus) / FLAGS.threads


def _step_result(mode, batch, seconds, cpu_seconds):
    """The per-step figures every implementation reports."""
    flops = bench_common.model_flops(batch, FLAGS.seq_length, FLAGS.layers, FLAGS.hidden_size,
                        FLAGS.intermediate_size)
    if mode == "train":
        flops *= 3
    return {"mode": mode, "batch": batch, "seconds_per_step": seconds,
            "cpu_seconds_per_example": cpu_seconds / batch,
            "examples_per_second": batch / seconds, "gflops": flops / seconds / 1e9,
            "cpu_gflops": flops / cpu_seconds / 1e9}


def matmul_shape():
    """(M, K, N) of the reference matmul [M, K] x [K, N], from --matmul_shape."""
    m, k, n = (int(v) for v in FLAGS.matmul_shape)
    return m, k, n


def _compute_type():
    import tensorflow.compat.v1 as tf
    return tf.bfloat16 if FLAGS.precision == "bf16" else tf.float32


def measure_matmul():
    """GFLOP/s (wall, CPU) of a dense [M, K] x [K, N] matmul in the row's
    compute type (float32, or bfloat16 for +bf16 rows)."""
    import numpy as np
    import tensorflow.compat.v1 as tf
    m, k, n = matmul_shape()
    dtype = _compute_type()
    values = [np.random.RandomState(seed).normal(size=shape).astype(np.float32)
              for seed, shape in ((0, (m, k)), (1, (k, n)))]
    with tf.Graph().as_default():
        # The operands are fed to their initializers, not written into the
        # graph as constants: the session copies a graph's constants several
        # times over, which at 2048 x 2048 raised the child's peak RSS (the
        # model's column) by 0.4 GB.
        inputs = [tf.placeholder(tf.float32, value.shape) for value in values]
        a, b = (tf.Variable(tf.cast(x, dtype)) for x in inputs)
        # Reduce to a scalar so that fetching the result costs nothing.
        product = tf.reduce_sum(tf.matmul(a, b)[:1, :1])
        with tf.Session(config=_session_config()) as sess:
            sess.run(tf.global_variables_initializer(), dict(zip(inputs, values)))
            wall, cpu = _median_time(lambda: sess.run(product), FLAGS.matmul_steps)
    return 2.0 * m * k * n / wall / 1e9, 2.0 * m * k * n / cpu / 1e9


# Profile categories, first match wins: (label, op types, substrings of the
# node name). Node names are those of the graph (gradients under
# "gradients/", the optimizer's ops under its name).
_PROFILE_CATEGORIES = [
    ("optimizer (Adam, decay)", ("ResourceApplyAdam", "ResourceApplyGradientDescent",
                                 "UnsortedSegmentSum"),
     ("AdamWeightDecayOptimizer", "WeightDecay")),
    ("clipping (global norm)", (), ("clip_by_global_norm", "global_norm")),
    ("matmuls", ("MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "_MklMatMul",
                 "_MklBatchMatMul", "_MklBatchMatMulV2", "_FusedMatMul", "_MklFusedMatMul",
                 "_MklNativeFusedMatMul", "_MklNativeMatMul", "_MklNativeBatchMatMulV2",
                 "Einsum", "_MklEinsum", "_MklFusedBatchMatMulV2"), ()),
    ("casts", ("Cast", "_MklCast"), ()),
    ("softmax", (), ("Softmax",)),
    ("LayerNorm", (), ("LayerNorm",)),
    # This repository's dropout ops are under a "dropout" name scope; the
    # original's (tf.nn.dropout) are known by their op types.
    ("dropout", ("RandomUniform", "StatelessRandomUniformV2", "StatelessRandomGetKeyCounter",
                 "StatelessRandomUniformFullIntV2", "SelectV2", "GreaterEqual"), ("dropout",)),
    ("GELU (XLA loops)", ("_XlaRun", "_XlaCompile", "_XlaMerge", "XlaLaunch",
                          "PartitionedCall", "StatefulPartitionedCall"), ()),
    ("bias adds", ("BiasAdd", "BiasAddGrad", "_MklBiasAdd"), ()),
    ("embeddings", (), ("embeddings/",)),
]


def _profile_category(name, op_type):
    for label, op_types, substrings in _PROFILE_CATEGORIES:
        if op_type in op_types or any(part in name for part in substrings):
            return label
    return "other"


def trace_profile(sess, fetch, feed):
    """Runs one traced step; returns {category: op milliseconds} plus the
    step's wall milliseconds under "traced step", the ten op types that
    took the most time in "other" (under "other by op type") and the twelve
    that took the most of all (under "by op type").

    With one intra-op and one inter-op thread the ops run one after another,
    so their times add up to the step (less the executor's own work).
    """
    import re

    import tensorflow.compat.v1 as tf
    metadata = tf.RunMetadata()
    start = time.perf_counter()
    sess.run(fetch, feed, options=tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE),
             run_metadata=metadata)
    wall = time.perf_counter() - start
    totals, other, by_type = {}, {}, {}
    for device in metadata.step_stats.dev_stats:
        for node in device.node_stats:
            match = re.search(r"= (\S+?)\(", node.timeline_label)
            op_type = match.group(1) if match else node.node_name.rpartition(":")[2]
            name = node.node_name.partition(":")[0]
            milliseconds = (node.all_end_rel_micros or node.op_end_rel_micros) / 1000.0
            label = _profile_category(name, op_type)
            totals[label] = totals.get(label, 0.0) + milliseconds
            by_type[op_type] = by_type.get(op_type, 0.0) + milliseconds
            if label == "other":
                other[op_type] = other.get(op_type, 0.0) + milliseconds
    top = sorted(other.items(), key=lambda item: -item[1])[:10]
    top_types = sorted(by_type.items(), key=lambda item: -item[1])[:12]
    return {"categories": totals, "traced step": wall * 1000.0,
            "other by op type": dict(top), "by op type": dict(top_types)}


def measure_model(mode):
    """Examples/s and GFLOP/s of the forward pass or one training step."""
    import numpy as np
    import tensorflow.compat.v1 as tf

    if FLAGS.implementation == "original":
        sys.path.insert(0, os.path.join(ROOT, "tests"))
        import reference
        modeling = reference.load_original_modeling()
        optimization = reference.load_original("optimization")
    else:
        import modeling
        import optimization

    batch = FLAGS.forward_batch_size if mode == "forward" else FLAGS.train_batch_size
    seq = FLAGS.seq_length
    config = bench_common.model_config(modeling)
    rng = np.random.RandomState(0)
    feed_values = [rng.randint(0, FLAGS.vocab_size, (batch, seq)).astype(np.int32),
                   np.ones((batch, seq), np.int32), np.zeros((batch, seq), np.int32)]
    with tf.Graph().as_default():
        placeholders = [tf.placeholder(tf.int32, [batch, seq]) for _ in range(3)]
        options = {}
        if FLAGS.precision != "fp32":
            options["compute_type"] = _compute_type()
        if FLAGS.fused_ops != "auto":
            options["fused_ops"] = FLAGS.fused_ops
        model = modeling.BertModel(config, is_training=(mode == "train"),
                                   input_ids=placeholders[0], input_mask=placeholders[1],
                                   token_type_ids=placeholders[2], **options)
        if mode == "forward":
            fetch = model.get_sequence_output()
        else:
            # run_classifier's head: dropout, output_weights/bias, softmax loss.
            labels = tf.constant(rng.randint(0, 2, batch).astype(np.int32))
            pooled = modeling.dropout(model.get_pooled_output(), 0.1)
            output_weights = tf.get_variable(
                "output_weights", [2, config.hidden_size],
                initializer=tf.truncated_normal_initializer(stddev=0.02))
            output_bias = tf.get_variable("output_bias", [2],
                                          initializer=tf.zeros_initializer())
            logits = tf.nn.bias_add(tf.matmul(pooled, output_weights, transpose_b=True),
                                    output_bias)
            log_probs = tf.nn.log_softmax(logits, axis=-1)
            loss = -tf.reduce_mean(tf.reduce_sum(tf.one_hot(labels, 2) * log_probs, -1))
            fetch = optimization.create_optimizer(loss, 2e-5, 1000, 100, use_tpu=False)
        feed = dict(zip(placeholders, feed_values))
        with tf.Session(config=_session_config()) as sess:
            sess.run(tf.global_variables_initializer())
            seconds, cpu_seconds = _median_time(lambda: sess.run(fetch, feed), FLAGS.steps)
            # Before the traced step: its full trace keeps a record of
            # every op and allocation, which is not the model's memory.
            peak, library = _peak_rss_mib(), _library_rss_mib()
            profile = trace_profile(sess, fetch, feed) if FLAGS.profile else None
    result = _step_result(mode, batch, seconds, cpu_seconds)
    result["peak_rss_mib"], result["library_rss_mib"] = peak, library
    if profile:
        result["profile"] = profile
    from tensorflow.python.util import _pywrap_util_port
    result["runtime"] = "TF %s, %s" % (tf.__version__, "oneDNN" if _pywrap_util_port.IsMklEnabled()
                                       else "Eigen")
    if FLAGS.implementation == "ours":
        # A checkout from before bert_ops.py has no model.fused_ops.
        result["runtime"] += ", fused %s" % getattr(model, "fused_ops", "(older code)")
    if FLAGS.precision != "fp32":
        result["runtime"] += ", " + FLAGS.precision
    return result


def _torch_threads():
    import torch
    torch.set_num_threads(FLAGS.threads)
    try:
        torch.set_num_interop_threads(FLAGS.threads)
    except RuntimeError:  # Already set in this process.
        pass
    return torch


def measure_hf_matmul():
    """As `measure_matmul`, with torch."""
    torch = _torch_threads()
    generator = torch.Generator().manual_seed(0)
    m, k, n = matmul_shape()
    a = torch.randn(m, k, generator=generator)
    b = torch.randn(k, n, generator=generator)
    with torch.inference_mode():
        wall, cpu = _median_time(lambda: torch.matmul(a, b), FLAGS.matmul_steps)
    flops = 2.0 * m * k * n
    return flops / wall / 1e9, flops / cpu / 1e9


def measure_hf_model(mode):
    """As `measure_model`, with Hugging Face transformers' BERT in PyTorch."""
    import numpy as np
    import transformers
    torch = _torch_threads()
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=FLAGS.vocab_size, hidden_size=FLAGS.hidden_size,
        num_hidden_layers=FLAGS.layers, num_attention_heads=FLAGS.num_attention_heads,
        intermediate_size=FLAGS.intermediate_size, hidden_act="gelu_new",
        max_position_embeddings=512, type_vocab_size=2, num_labels=2)
    batch = FLAGS.forward_batch_size if mode == "forward" else FLAGS.train_batch_size
    seq = FLAGS.seq_length
    rng = np.random.RandomState(0)
    ids = torch.from_numpy(rng.randint(0, FLAGS.vocab_size, (batch, seq)).astype(np.int64))
    mask = torch.ones(batch, seq, dtype=torch.int64)
    segments = torch.zeros(batch, seq, dtype=torch.int64)
    if mode == "forward":
        model = transformers.BertModel(config, add_pooling_layer=False).eval()

        def step():
            with torch.inference_mode():
                model(input_ids=ids, attention_mask=mask, token_type_ids=segments)
    else:
        model = transformers.BertForSequenceClassification(config).train()
        labels = torch.from_numpy(rng.randint(0, 2, batch).astype(np.int64))
        decay = [p for n, p in model.named_parameters()
                 if not any(k in n for k in ("bias", "LayerNorm"))]
        no_decay = [p for n, p in model.named_parameters()
                    if any(k in n for k in ("bias", "LayerNorm"))]
        optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
            lr=2e-5, eps=1e-6)

        def step():
            loss = model(input_ids=ids, attention_mask=mask, token_type_ids=segments,
                         labels=labels).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    seconds, cpu_seconds = _median_time(step, FLAGS.steps)
    result = _step_result(mode, batch, seconds, cpu_seconds)
    result["runtime"] = "PyTorch %s, transformers %s" % (
        torch.__version__.split("+")[0], transformers.__version__)
    return result

# What the libraries print about the instruction set they dispatch to, in
# their verbose modes: oneDNN's "info" line and MKL's version line.
_ISA_PATTERNS = (("oneDNN", r"^onednn_verbose,(?:[^,]*,)?info,cpu,isa:(.*)$"),
                 ("MKL", r"^MKL_VERBOSE .*?\(Intel\(R\) (AVX[\w-]*)\)"))
_VERBOSE = {"ONEDNN_VERBOSE": "1", "MKL_VERBOSE": "1"}


def probe_isa():
    """The 'isa' child: one small matmul with the row's libraries, whose
    verbose modes the parent turned on (their lines go to standard output);
    prints a result with what PyTorch's ATen reports itself (nothing for
    TensorFlow, which has no such call)."""
    import numpy as np
    values = np.ones((64, 64), np.float32)
    if FLAGS.implementation == "hf":
        torch = _torch_threads()
        torch.matmul(torch.from_numpy(values), torch.from_numpy(values))
        bench_common.print_result({"ATen": torch.backends.cpu.get_cpu_capability()})
        return
    if FLAGS.implementation == "before":
        sys.path.insert(0, os.path.abspath(FLAGS.compare_code_dir))
    xla = hold_xla_back()
    if FLAGS.implementation in ("ours", "before"):
        from scriptkit import quiet_tf  # noqa: F401  (TensorFlow as the scripts import it)
    import tensorflow.compat.v1 as tf
    with tf.Graph().as_default():
        product = tf.matmul(tf.constant(values), tf.constant(values))
        with tf.Session(config=_session_config()) as sess:
            sess.run(product)
    bench_common.print_result({"XLA": xla} if xla else {})


def isa_summary(completed):
    """'library: instruction set' for each library that reported one in the
    output of a `probe_isa` child (subprocess.CompletedProcess)."""
    import re
    found = {}
    for name, pattern in _ISA_PATTERNS:
        match = re.search(pattern, completed.stdout, re.MULTILINE)
        if match:
            found[name] = match.group(1).strip()
    result = bench_common.child_result(completed)
    if "error" in result:
        return "probe failed: " + result["error"]
    found.update(result)
    return "; ".join("%s: %s" % item for item in found.items()) or "none reported"


def _peak_rss_mib():
    """This process's peak resident memory so far, MiB (Linux reports
    ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _library_rss_mib():
    """Of this process's resident memory now, the file-backed pages, MiB:
    in these children, the mapped pages of the libraries' code and read-only
    data (clean, shared with every other process that maps the same files,
    and dropped by the kernel under memory pressure). None where Linux's
    /proc/self/status is not there."""
    return bench_common.status_mib(("RssFile",)).get("RssFile")


def run_child(mode):
    """Measures matmul + `mode` in this process and prints one JSON line."""
    # The matmul is timed twice; the better of the two is the reference
    # (less disturbed by other jobs). Both come after the model's peak is
    # read: a matmul before the model left its operands' memory with the
    # allocators (about 30 MiB in TensorFlow 2.21), counted as the model's.
    if FLAGS.implementation == "before":
        # Its modules shadow this checkout's.
        sys.path.insert(0, os.path.abspath(FLAGS.compare_code_dir))
        FLAGS.implementation = "ours"
    xla = ""
    if FLAGS.implementation == "hf":
        matmul, model = measure_hf_matmul, measure_hf_model
    else:
        xla = hold_xla_back()
        if FLAGS.implementation == "ours":
            from scriptkit import quiet_tf  # noqa: F401  (TensorFlow as the scripts import it)
        matmul, model = measure_matmul, measure_model
    result = model(mode)
    if xla:
        result["runtime"] += ", XLA " + xla
    # Read before the matmuls, whose operands would come on top of what the
    # model left resident (and before a traced step, see measure_model).
    if "peak_rss_mib" not in result:
        result["peak_rss_mib"], result["library_rss_mib"] = _peak_rss_mib(), _library_rss_mib()
    first, second = matmul(), matmul()
    result["matmul_gflops"] = max(first[0], second[0])
    result["matmul_cpu_gflops"] = max(first[1], second[1])
    result["fraction_of_matmul"] = result["gflops"] / result["matmul_gflops"]
    result["cpu_fraction_of_matmul"] = result["cpu_gflops"] / result["matmul_cpu_gflops"]
    bench_common.print_result(result)


def _load():
    try:
        return "%.2f %.2f %.2f" % os.getloadavg()
    except OSError:
        return "unknown"


def _spread(values, fmt):
    """'median [min-max]' of `values` with the number format `fmt`."""
    text = fmt % statistics.median(values)
    if len(values) > 1:
        text += (" [" + fmt + "-" + fmt + "]") % (min(values), max(values))
    return text


# Implementation suffixes: the environment variables each sets for its children.
_SUFFIXES = [("+onednn", {"TF_ENABLE_ONEDNN_OPTS": "1"}),
             ("-onednn", {"TF_ENABLE_ONEDNN_OPTS": "0"}),
             # A measuring device, not a setting for real use: an AVX-512
             # machine's matmul libraries held to their AVX2 kernels (oneDNN
             # in TensorFlow and PyTorch, MKL and ATen's own vectorized loops
             # in PyTorch), and XLA's compiled loops where TensorFlow lets
             # them be (hold_xla_back). TensorFlow's own kernels have no cap;
             # its pip packages compile them for AVX, without AVX2 or FMA
             # (TensorFlow says so at import), though some of its code picks
             # AVX-512 at run time. So such a row is close to, but not the
             # same as, a CPU with AVX2 only, whose caches and clocks differ
             # too.
             ("+avx2", {"ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
                        "ATEN_CPU_CAPABILITY": "avx2"})]
# Suffixes that leave one kernel of --fused_ops out.
_UNFUSED_SUFFIXES = {"-fusedgelu": "gelu", "-fuseddropout": "dropout",
                     "-fusedlayernorm": "layer_norm"}


def main(argv):
    if FLAGS.mode == "isa":
        probe_isa()
        return
    if FLAGS.mode != "all":
        run_child(FLAGS.mode)
        return
    del argv
    implementations = []
    for spec in FLAGS.implementations:
        name, _, python = spec.partition("@")
        env = dict(os.environ)
        child_flags = []
        isa_flags = []
        unfused = set()
        stripped = True
        while stripped:
            stripped = False
            if name.endswith("+bf16"):
                name = name[:-len("+bf16")]
                child_flags.append("--precision=bf16")
                stripped = True
            for suffix, variables in _SUFFIXES:
                if name.endswith(suffix):
                    name = name[:-len(suffix)]
                    env.update(variables)
                    if suffix == "+avx2":
                        isa_flags = ["--xla_max_isa=AVX2"]
                    stripped = True
            for suffix, kernel in _UNFUSED_SUFFIXES.items():
                if name.endswith(suffix):
                    name = name[:-len(suffix)]
                    unfused.add(kernel)
                    stripped = True
        if unfused:
            kept = [k for k in ("gelu", "layer_norm", "dropout") if k not in unfused]
            child_flags.append("--fused_ops=" + (",".join(kept) or "none"))
        if name not in ("ours", "before", "original", "hf"):
            raise SystemExit("--implementations: unknown %r (ours, before, original, hf, "
                             "each optionally +onednn, -onednn, +avx2, -fusedgelu, "
                             "-fuseddropout, -fusedlayernorm or +bf16)" % name)
        if name == "before" and not FLAGS.compare_code_dir:
            raise SystemExit("--implementations: 'before' needs --compare_code_dir")
        if child_flags and name not in ("ours", "before"):
            raise SystemExit("--implementations: %r: +bf16 and -fused... are for ours only "
                             "(the original has neither)" % spec)
        implementations.append((spec, name, python or sys.executable, env,
                                child_flags + isa_flags))
    flag_args = [arg for arg in sys.argv[1:]
                 if not arg.startswith(("--mode", "--implementation=", "--implementations",
                                        "--precision", "--fused_ops", "--xla_max_isa"))]
    print("BERT L=%d H=%d A=%d I=%d vocab=%d, seq %d, %d thread(s); %d timed steps "
          "after %d warm-up per child, %d child(ren) per row, interleaved; reference "
          "matmul %dx%dx%d" %
          ((FLAGS.layers, FLAGS.hidden_size, FLAGS.num_attention_heads,
            FLAGS.intermediate_size, FLAGS.vocab_size, FLAGS.seq_length, FLAGS.threads,
            FLAGS.steps, FLAGS.warmup_steps, FLAGS.repeats) + matmul_shape()))
    print("%s, %d CPUs; load average at start %s"
          % (bench_common.cpu_model(), os.cpu_count(), _load()))
    sys.stdout.flush()
    if FLAGS.report_isa:
        for spec, name, python, env, child_flags in implementations:
            out = subprocess.run(
                [python, os.path.abspath(__file__), "--mode=isa", "--implementation=" + name]
                + flag_args + child_flags, capture_output=True, text=True, check=False,
                env=dict(env, **_VERBOSE))
            print("instruction set, %s: %s" % (spec, isa_summary(out)))
        sys.stdout.flush()
    runs = {}
    for mode in ("forward", "train"):
        if mode not in FLAGS.modes:
            continue
        for _ in range(FLAGS.repeats):
            for spec, name, python, env, child_flags in implementations:
                out = subprocess.run(
                    [python, os.path.abspath(__file__), "--mode=" + mode,
                     "--implementation=" + name] + flag_args + child_flags,
                    capture_output=True, text=True, check=False, env=env)
                result = bench_common.child_result(out)
                if "error" in result:
                    sys.stderr.write(out.stderr[-4000:])
                    raise SystemExit("measurement %r of %s failed: %s"
                                     % (mode, spec, result["error"]))
                runs.setdefault((mode, spec), []).append(result)
    print("load average at end %s" % _load())
    print("%-8s %-50s %5s %21s %24s %8s %12s %10s %22s %10s" % (
        "mode", "code", "batch", "s/step (wall)", "CPU s/example", "ex/s", "CPU fraction",
        "matmul", "peak RSS MiB", "libraries"))
    for (mode, spec), results in runs.items():
        name = spec.partition("@")[0]
        label = "%s (%s)" % (name, results[0].get("runtime", "?"))

        def values(key):
            return [r[key] for r in results]
        libraries = [value for value in values("library_rss_mib") if value is not None]
        print("%-8s %-50s %5d %21s %24s %8.2f %12.2f %10.1f %22s %10s" % (
            mode, label, results[0]["batch"], _spread(values("seconds_per_step"), "%.2f"),
            _spread(values("cpu_seconds_per_example"), "%.4f"),
            statistics.median(values("examples_per_second")),
            statistics.median(values("cpu_fraction_of_matmul")),
            statistics.median(values("matmul_cpu_gflops")),
            _spread(values("peak_rss_mib"), "%.0f"),
            "%.0f" % statistics.median(libraries) if libraries else "-"))
    if FLAGS.profile:
        _print_profiles(runs)


def _print_profiles(runs):
    """Per row, the traced step's op time by category (the first child's
    trace): milliseconds and share of the categories' sum."""
    for (mode, spec), results in runs.items():
        profile = results[0].get("profile")
        if not profile:
            continue
        categories = profile["categories"]
        total = sum(categories.values())
        print("\nprofile, %s, %s: traced step %.0f ms wall, op time %.0f ms"
              % (mode, spec, profile["traced step"], total))
        for label, milliseconds in sorted(categories.items(), key=lambda item: -item[1]):
            print("  %-26s %9.1f ms %6.1f%%" % (label, milliseconds,
                                                 100.0 * milliseconds / total))
        print("  other, by op type: " + ", ".join(
            "%s %.1f" % item for item in profile["other by op type"].items()))
        print("  all, by op type (ms): " + ", ".join(
            "%s %.1f" % item for item in profile.get("by op type", {}).items()))


if __name__ == "__main__":
    app.run(main)
