"""CPU serving speed of a classifier export in each precision, against ONNX
Runtime and OpenVINO run on the same weights directly, in one process and
one run.

    taskset -c 0 .venv/bin/python benchmarks/bench_serving_cpu.py --threads=1
    .venv/bin/python benchmarks/bench_serving_cpu.py --layers=2 --requests=3   # quick

Writes a BERT-Base-shaped classifier checkpoint with random weights (or
takes --init_checkpoint and --bert_config_file; --vocab_file then too),
exports it with `run_classifier.export_model` at --export_precision fp32 and
int8 (serving.EXPORT_PRECISIONS; no explain signature), and times, per
shape (batch x pieces, --shapes), interleaved over --rounds:

  export_fp32   the fp32 export's serving_default, called as predict.py
                calls it (exported_model.Model): text in, labels out.
  export_int8   the same call on the int8 export (its task model in ONNX
                Runtime, row by row: onnx_model.run_rows).
  ort_fp32      ONNX Runtime on the export's model written as ONNX in fp32
                (onnx_model.write_model), ids in, the whole batch in one run:
                what a user who converts the model runs.
  ort_int8      the same model quantized by ONNX Runtime's quantize_dynamic
                with its defaults (int8 weights, one scale per matrix), one
                run per batch.
  ov_fp32       OpenVINO on the fp32 ONNX model, one run per batch.
  ov_bf16       the same with OpenVINO's bf16 precision hint (OpenVINO runs
                f32 where the CPU has no bf16 instructions: the table says
                which precision it ran).
  ov_int8       OpenVINO on the model quantized statically (int8 weights
                and activations, QDQ nodes: the form OpenVINO runs in int8)
                by ONNX Runtime's quantize_static, calibrated on 8 rows.
  http_fp32, http_int8
                one request of batch 1 to predict.py's server
                (rest_server.make_server) of each export, through HTTP.

Each text is made of single-piece words, so a shape's pieces are exact.
Prints the CPU, its ISA flags that matter (AVX2, AVX-512, VNNI, AMX,
bf16), the thread count, and per shape and variant the median latency in
ms and the sentences per second. Needs requirements-onnx.txt, and for the
ov_ variants OpenVINO (requirements-bench.txt).
"""

import json
import os
import sys
import tempfile
import threading
import time
import urllib.request

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

import bench_common  # noqa: E402

FLAGS = flags.FLAGS

bench_common.define_model_flags(threads=1)
flags.DEFINE_string("bert_config_file", None, "Use this config (with --init_checkpoint).")
flags.DEFINE_string("init_checkpoint", None, "Export this classifier checkpoint (2 labels) "
                    "instead of random weights.")
flags.DEFINE_string("vocab_file", None, "The vocabulary of --init_checkpoint.")
flags.DEFINE_list("shapes", "1x16,1x128,32x128", "batch x pieces of each request timed.")
flags.DEFINE_list("variants", "export_fp32,export_int8,ort_fp32,ort_int8,ov_fp32,ov_bf16,"
                  "ov_int8,http_fp32,http_int8", "Variants to time.")
flags.DEFINE_integer("requests", 10, "Timed requests per variant, shape and round.")
flags.DEFINE_integer("warmup", 2, "Untimed requests first.")
flags.DEFINE_integer("rounds", 2, "Rounds over the variants, interleaved.")

ISA_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8")


def _isa():
    try:
        with open("/proc/cpuinfo") as f:
            line = next(line for line in f if line.startswith("flags"))
    except (OSError, StopIteration):
        return "unknown"
    have = set(line.split(":", 1)[1].split())
    return " ".join("%s%s" % ("" if name in have else "no ", name) for name in ISA_FLAGS)


def _model_files(workdir):
    """(config, checkpoint, vocab file) of the model timed."""
    import tensorflow.compat.v1 as tf

    import modeling
    import run_classifier
    if FLAGS.init_checkpoint:
        return (modeling.BertConfig.from_json_file(FLAGS.bert_config_file),
                FLAGS.init_checkpoint, FLAGS.vocab_file)
    config = bench_common.model_config(modeling)
    checkpoint = os.path.join(workdir, "classifier.ckpt")
    with tf.Graph().as_default():
        ids = tf.zeros([1, 8], tf.int32)
        run_classifier.create_model(config, False, ids, ids, ids, tf.zeros([1], tf.int32), 2,
                                    False)
        tf.train.get_or_create_global_step()
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            tf.train.Saver().save(session, checkpoint)
    vocab = os.path.join(workdir, "vocab.txt")
    with open(vocab, "w", encoding="utf-8") as f:
        f.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                          + ["w%d" % i for i in range(config.vocab_size - 5)]) + "\n")
    return config, checkpoint, vocab


def _features(batch, pieces, rng=None):
    """The model's inputs for `batch` rows of `pieces` pieces: [CLS], word
    ids (5 if no `rng`, else drawn from it), [SEP]."""
    from scriptkit import serving
    words = (np.full([batch, pieces - 2], 5) if rng is None
             else rng.randint(5, 1000, size=[batch, pieces - 2]))
    ids = np.concatenate([np.full([batch, 1], 2), words, np.full([batch, 1], 3)], axis=1)
    return {name: value.astype(np.int32) for name, value in zip(
        serving.FEATURE_NAMES, [ids, np.ones_like(ids), np.zeros_like(ids)])}


def _static_int8(fp32_onnx, path, pieces):
    """Writes fp32_onnx's model quantized statically (QDQ, int8 weights per
    channel, uint8 activations) to `path`, calibrated on 8 rows."""
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)
    from scriptkit import onnx_model

    class Rows(CalibrationDataReader):
        def __init__(self):
            rng = np.random.RandomState(0)
            self.rows = [_features(1, pieces, rng) for _ in range(8)]

        def get_next(self):
            return self.rows.pop() if self.rows else None

    with onnx_model.quiet_quantizer():
        quantize_static(fp32_onnx, path, Rows(), quant_format=QuantFormat.QDQ,
                        per_channel=True, weight_type=QuantType.QInt8,
                        activation_type=QuantType.QUInt8, op_types_to_quantize=["MatMul"])


def _openvino(path, precision=None):
    """(OpenVINO's compiled model of the ONNX file `path` on the CPU, the
    precision it runs its float ops in: "f32" or "bf16")."""
    import openvino
    config = {"INFERENCE_NUM_THREADS": FLAGS.threads, "NUM_STREAMS": 1,
              "PERFORMANCE_HINT": "LATENCY"}
    if precision:
        config["INFERENCE_PRECISION_HINT"] = precision
    compiled = openvino.Core().compile_model(path, "CPU", config)
    return compiled, compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()


def _texts(batch, pieces, vocab):
    """`batch` texts of `pieces` - 2 words of the vocabulary, one piece each."""
    with open(vocab, encoding="utf-8") as f:
        words = [w for w in f.read().split() if w.isalnum() and w.islower()][:2000]
    rng = np.random.RandomState(pieces)
    return [" ".join(rng.choice(words, pieces - 2)) for _ in range(batch)]


def _served(export_dir):
    """(model, its HTTP :predict URL, the server) of predict.py's server."""
    from scriptkit import exported_model, rest_server
    model = exported_model.Model(export_dir)
    model.warm_up()
    server = rest_server.make_server(model, "127.0.0.1", 0, "bench")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return model, "http://127.0.0.1:%d/v1/models/bench:predict" % server.server_address[1], server


def _post(url, texts):
    body = json.dumps({"instances": [{"text_a": t} for t in texts]}).encode("utf-8")
    request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as response:
        return json.loads(response.read())


def main(_):
    import tensorflow as tf2
    tf2.config.threading.set_intra_op_parallelism_threads(FLAGS.threads)
    tf2.config.threading.set_inter_op_parallelism_threads(FLAGS.threads)
    from scriptkit import quiet_tf  # noqa: F401

    if any(v.startswith("ov_") for v in FLAGS.variants):
        try:
            import openvino
        except ImportError:
            raise SystemExit("The ov_ variants need OpenVINO: pip install -r "
                             "requirements-bench.txt (or drop them from --variants)")
    import onnx
    import run_classifier
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from scriptkit import onnx_model, serving

    shapes = [tuple(int(v) for v in shape.split("x")) for shape in FLAGS.shapes]
    workdir = tempfile.mkdtemp(prefix="bench_serving_cpu_")
    config, checkpoint, vocab = _model_files(workdir)
    exports, served = {}, {}
    for precision in serving.EXPORT_PRECISIONS:
        start = time.perf_counter()
        exports[precision] = run_classifier.export_model(
            serving.ExportSource(config, checkpoint, os.path.join(workdir, precision), vocab,
                                 True, max_seq_length=max(p for _, p in shapes),
                                 precision=precision),
            run_classifier.Sst2Processor(), ["0", "1"], explain_steps=0)
        print("export %s: %.1f s" % (precision, time.perf_counter() - start), flush=True)
        served[precision] = _served(exports[precision])
    fp32_onnx = os.path.join(workdir, "fp32.onnx")
    onnx.save(onnx_model.write_model(config, checkpoint, "classifier", "softmax"), fp32_onnx)
    int8_onnx = os.path.join(workdir, "quantize_dynamic.onnx")
    with onnx_model.quiet_quantizer():
        quantize_dynamic(fp32_onnx, int8_onnx, weight_type=QuantType.QInt8)
    sessions = {"ort_fp32": onnx_model.session(fp32_onnx, FLAGS.threads),
                "ort_int8": onnx_model.session(int8_onnx, FLAGS.threads)}
    compiled, ran_in = {}, {}
    static_onnx = os.path.join(workdir, "quantize_static.onnx")
    if "ov_int8" in FLAGS.variants:
        _static_int8(fp32_onnx, static_onnx, max(p for _, p in shapes))
    for variant, path, precision in [("ov_fp32", fp32_onnx, None),
                                     ("ov_bf16", fp32_onnx, "bf16"),
                                     ("ov_int8", static_onnx, None)]:
        if variant in FLAGS.variants:
            compiled[variant], ran_in[variant] = _openvino(path, precision)

    def call(variant, texts, features):
        kind, _, precision = variant.partition("_")
        if kind == "export":
            return served[precision][0].signature(serving.TEXT_SIGNATURE).run(
                {"text_a": np.array([t.encode() for t in texts], dtype=object)})["probabilities"]
        if kind == "http":
            return np.array([p["probabilities"] for p in _post(served[precision][1],
                                                               texts)["predictions"]])
        if kind == "ov":
            return compiled[variant](features)["probabilities"]
        return sessions[variant].run(["probabilities"], features)[0]

    print("CPU: %s (%s); %d thread(s)" % (bench_common.cpu_model(), _isa(), FLAGS.threads))
    for variant, precision in ran_in.items():
        print("%s: OpenVINO %s, float ops in %s" % (variant, openvino.__version__.split("-")[0],
                                                     precision))
    latencies = {}
    for _ in range(FLAGS.rounds):
        for batch, pieces in shapes:
            texts = _texts(batch, pieces, vocab)
            features = _features(batch, pieces)
            for variant in FLAGS.variants:
                if variant.startswith("http") and batch > 1:
                    continue
                times, out = bench_common.time_calls(lambda: call(variant, texts, features),
                                                     FLAGS.warmup, FLAGS.requests)
                assert np.shape(out) == (batch, 2), (variant, np.shape(out))
                latencies.setdefault((batch, pieces, variant), []).extend(times)
    print("%-8s %-12s %10s %12s" % ("shape", "variant", "p50 ms", "sentences/s"))
    for (batch, pieces, variant), times in latencies.items():
        p50 = bench_common.latency_summary(times)["p50"]
        print("%-8s %-12s %10.1f %12.1f" % ("%dx%d" % (batch, pieces), variant, p50,
                                            batch * 1000.0 / p50))
    for _, _, server in served.values():
        server.shutdown()
        server.server_close()


if __name__ == "__main__":
    app.run(main)
