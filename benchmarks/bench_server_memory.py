"""Peak resident memory of `predict.py --port` under one large request.

Each case starts a fresh server (`predict.py --port=0` of --repo, with
--python) on an export, reads its peak and current resident memory
(VmHWM, VmRSS in /proc/<pid>/status) once it serves, posts one request of
about --request_bytes, reads them again, and checks that the server still
answers a small request. Cases:

* long_text: one instance whose text fills the request (a classifier reads
  only its first max_seq_length pieces);
* many_instances: as many short instances as fill the request.

    .venv/bin/python benchmarks/bench_server_memory.py --layers=2 --seq_length=128 \
        --server_flags=--max_request_bytes=67108864

Without --model_dir a classifier with random weights is exported first
(bench_serving.py's export: --layers, --seq_length). --repo runs the
server of another checkout (say, an older commit), for a before/after
comparison on the same machine; --server_flags are passed to it as they
are.
"""

import json
import os
import re
import select
import socket
import subprocess
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

flags.DEFINE_string("model_dir", None, "The export to serve (default: a random classifier, "
                                       "exported first).")
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


def _body(case, size):
    """The JSON body of `case`, about `size` bytes."""
    if case == "long_text":
        words = ("the film is good and the plot is long " * (size // 38 + 1))[:size - 40]
        return json.dumps({"instances": [{"text_a": words}]}).encode()
    instance = json.dumps({"text_a": "the film is good"})
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


def _drain(stream):
    for _ in stream:
        pass


def _serve(model_dir):
    """A started server process and its port."""
    process = subprocess.Popen(
        [FLAGS.python, os.path.join(FLAGS.repo, "predict.py"), "--model_dir=" + model_dir,
         "--port=0"] + FLAGS.server_flags,
        cwd=FLAGS.repo, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in process.stdout:
        match = re.search(r"Serving at http://\S+:(\d+)/", line)
        if match:
            # The log goes on being read, so the server never blocks on it.
            threading.Thread(target=_drain, args=(process.stdout,), daemon=True).start()
            return process, int(match.group(1))
    raise RuntimeError("the server did not start: exit %s" % process.wait())


def run_case(model_dir, case):
    body = _body(case, FLAGS.request_bytes)
    process, port = _serve(model_dir)
    try:
        small = json.dumps({"instances": [{"text_a": "the film is good"}]}).encode()
        _post(port, small)  # The first call traces the signature.
        peak_before, rss_before = _memory(process.pid)
        status, seconds, answer = _post(port, body)
        alive = process.poll() is None
        peak_after, rss_after = _memory(process.pid) if alive else (float("nan"),) * 2
        still = _post(port, small)[0] if alive else None
        return {"case": case, "body_bytes": len(body), "status": status,
                "seconds": round(seconds, 2), "answer": answer,
                "peak_before_mib": round(peak_before), "peak_after_mib": round(peak_after),
                "rss_after_mib": round(rss_after), "rss_before_mib": round(rss_before),
                "small_request_after": still}
    finally:
        process.kill()
        process.wait()


def main(_):
    with tempfile.TemporaryDirectory() as workdir:
        model_dir = FLAGS.model_dir or bench_serving.export(workdir)
        print("CPU: %s; load average %s; server: %s %s" % (
            bench_common.cpu_model(), os.getloadavg(), FLAGS.repo,
            " ".join(FLAGS.server_flags)))
        for case in FLAGS.cases:
            print(json.dumps(run_case(model_dir, case)))
            sys.stdout.flush()


if __name__ == "__main__":
    app.run(main)
