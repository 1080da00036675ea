"""Throughput, latency and memory of `predict.py --port` under load, alone
and with hostile clients beside it.

Each phase starts a fresh server (`predict.py --port=0` of --repo, run by
--python, with --server_flags) on a classifier export and runs --clients
client threads for --seconds, each posting one sentence of --words words
per request (the first of --words) on a kept-alive connection. It reports the answers by status
(each must be 200), requests per second, p50, p99 and slowest latency in
ms, and the server's resident memory (VmRSS) sampled every second: its
first, peak and last value, and ten samples spread over the phase; and
the fewest and most threads the server had.

  clean    the clients alone.
  hostile  the clients, and beside them, all through the phase:
           half_open  --half_open connections each holding half a request
                      (headers never ended, or a body cut short), reopened
                      as soon as the server answers one (408, after
                      --client_timeout_seconds);
           slowloris  --slowloris connections sending a header byte a
                      second (408);
           oversized  bodies over --max_request_bytes (413);
           bad_json   bodies that are not JSON (400);
           deep_json  lists nested 10,000 deep (400);
           the last three at --hostile_rate requests a second each.

    .venv/bin/python benchmarks/bench_server_load.py    # BERT-Base shape, 16 clients, 60 s
    .venv/bin/python benchmarks/bench_server_load.py --model=tiny --seconds=10   # quick

--model=base exports bench_serving.py's BERT-Base-shaped classifier with
random weights (--layers, --seq_length; --hf_model for real ones);
--model=tiny the tests' tiny one (tests/serving_exports.py); --model_dir
serves an export of your own (one text input, text_a). The clients run
in this process, on the same cores as the server. `run_load` is the
load itself, for tests/test_server_connections.py.
"""

import collections
import http.client
import json
import os
import random
import select
import selectors
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

FLAGS = flags.FLAGS
PREDICT = "/v1/models/default:predict"
# How the hostile kinds are answered.
EXPECTED = {"half_open": 408, "slowloris": 408, "oversized": 413, "bad_json": 400,
            "deep_json": 400}
# What the half-open connections send: headers without their end, and
# headers with the start of a body.
_HALF = ("POST {path} HTTP/1.1\r\nHost: load\r\nContent-Type: application/json\r\n",
         "POST {path} HTTP/1.1\r\nHost: load\r\nContent-Length: 100\r\n\r\n{{\"instances\": [")


def _status(data):
    """The status of an answer's first bytes, or None."""
    line = bytes(data).split(b"\r\n", 1)[0].split()
    return int(line[1]) if len(line) > 1 and line[1].isdigit() else None


def _good_client(port, path, body, stop, answers):
    """Posts `body` until `stop`, appending (status or error name, ms)."""
    connection = None
    while not stop.is_set():
        if connection is None:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        start = time.perf_counter()
        try:
            connection.request("POST", path, body, {"Content-Type": "application/json"})
            response = connection.getresponse()
            response.read()
            status = response.status
            if response.will_close:
                connection.close()
                connection = None
        except (OSError, http.client.HTTPException) as e:
            status = type(e).__name__
            connection.close()
            connection = None
        answers.append((status, (time.perf_counter() - start) * 1000.0))
    if connection is not None:
        connection.close()


class _SlowClients:
    """The half-open and slowloris connections, on one selector: each one
    the server answers (or closes) is counted by its status and replaced."""

    def __init__(self, port, path, half_open, slowloris):
        self.port, self.path = port, path
        self.selector = selectors.DefaultSelector()
        self.seen = {"half_open": collections.Counter(), "slowloris": collections.Counter()}
        self.opened = 0
        for index in range(half_open):
            self._open("half_open", _HALF[index % 2].format(path=path).encode())
        for _ in range(slowloris):
            self._open("slowloris", ("POST %s HTTP/1.1\r\nX-Slow: " % path).encode())

    def _open(self, kind, data):
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=60)
        sock.sendall(data)
        sock.setblocking(False)
        self.selector.register(sock, selectors.EVENT_READ, (kind, data, bytearray()))
        self.opened += 1

    def held(self):
        return len(self.selector.get_map())

    def run(self, stop):
        next_byte = time.monotonic() + 1
        while not stop.is_set():
            for key, _ in self.selector.select(timeout=0.1):
                kind, data, received = key.data
                try:
                    chunk = key.fileobj.recv(65536)
                except OSError:
                    chunk = b""
                received += chunk
                if chunk and b"\r\n" not in received:
                    continue
                self.seen[kind][_status(received) or "closed"] += 1
                self.selector.unregister(key.fileobj)
                key.fileobj.close()
                if not stop.is_set():
                    self._open(kind, data)
            if time.monotonic() >= next_byte:
                next_byte += 1
                for key in list(self.selector.get_map().values()):
                    if key.data[0] == "slowloris":
                        try:
                            key.fileobj.send(b"a")
                        except OSError:
                            pass

    def close(self):
        for key in list(self.selector.get_map().values()):
            key.fileobj.close()
        self.selector.close()


def hostile_request(kind, path, max_request_bytes):
    """The bytes of one request of a hostile `kind` (not the slow ones)."""
    if kind == "oversized":
        return (b"POST %s HTTP/1.1\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                % (path.encode(), max_request_bytes + 1))
    body = b"{not json" if kind == "bad_json" else b"[" * 10000 + b"]" * 10000
    return (b"POST %s HTTP/1.1\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
            % (path.encode(), len(body), body))


def _hostile_client(port, request, body_bytes, rate, stop, seen):
    """Sends `request` (then, for an oversized one, body bytes until the
    server answers, at most `body_bytes`) on a new connection, `rate`
    times a second, counting the answers by status."""
    piece = b"x" * 65536
    while not stop.is_set():
        start = time.monotonic()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
                sock.sendall(request)
                answered = select.poll()  # (select.select takes no descriptor past 1023.)
                answered.register(sock, select.POLLIN)
                sent = 0
                while sent < body_bytes and not answered.poll(0):
                    sock.sendall(piece)
                    sent += len(piece)
                received = bytearray()
                while b"\r\n" not in received:
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    received += chunk
                seen[_status(received) or "closed"] += 1
        except OSError as e:
            seen[type(e).__name__] += 1
        stop.wait(max(0.0, 1.0 / rate - (time.monotonic() - start)))


def thread_count(pid):
    """The threads of process `pid` (Linux's /proc), or None."""
    try:
        with open("/proc/%d/status" % pid) as f:
            return int(next(line for line in f if line.startswith("Threads:")).split()[1])
    except (OSError, StopIteration):
        return None


def run_load(port, clients, seconds, body, path=PREDICT, half_open=0, slowloris=0,
             hostile=(), hostile_rate=20, max_request_bytes=4 << 20, pid=None):
    """Runs `clients` threads posting `body` (bytes) to `path` on the
    server at `port` for `seconds`, beside `half_open` and `slowloris`
    connections (opened first, and held throughout) and the `hostile`
    kinds of requests (of EXPECTED) at `hostile_rate` a second each.

    Returns {"answers": status -> count of the clients' answers,
    "latencies_ms": sorted, "seconds": the phase's length, "hostile":
    kind -> {status: count}, "held": the slow connections open at the end,
    "opened": the slow connections opened in all, "rss_mib": [VmRSS of
    process `pid` each second], "threads": [its threads each second]
    (both empty without `pid`)}.
    """
    stop = threading.Event()
    slow = _SlowClients(port, path, half_open, slowloris) if half_open or slowloris else None
    hostile_seen = {kind: collections.Counter() for kind in hostile}
    threads = [threading.Thread(target=_hostile_client, args=(
        port, hostile_request(kind, path, max_request_bytes),
        max_request_bytes + 1 if kind == "oversized" else 0, hostile_rate, stop,
        hostile_seen[kind])) for kind in hostile]
    if slow is not None:
        threads.append(threading.Thread(target=slow.run, args=(stop,)))
    rss, thread_counts = [], []
    if pid is not None:
        def sample():
            while not stop.wait(1.0):
                rss.append(bench_common.status_mib(("VmRSS",), pid).get("VmRSS"))
                thread_counts.append(thread_count(pid))
        threads.append(threading.Thread(target=sample))
    answers = [[] for _ in range(clients)]
    threads += [threading.Thread(target=_good_client, args=(port, path, body, stop, mine))
                for mine in answers]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    stop.wait(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    held = slow.held() if slow else 0
    if slow is not None:
        for key in slow.selector.get_map().values():
            slow.seen[key.data[0]]["held at the end"] += 1
        hostile_seen.update({kind: seen for kind, seen in slow.seen.items() if seen})
        slow.close()
    everything = [answer for mine in answers for answer in mine]
    return {"answers": dict(collections.Counter(status for status, _ in everything)),
            "latencies_ms": sorted(ms for _, ms in everything), "seconds": elapsed,
            "hostile": {kind: dict(seen) for kind, seen in hostile_seen.items()},
            "held": held, "opened": slow.opened if slow else 0, "rss_mib": rss,
            "threads": thread_counts}


def summary(result):
    """A phase's figures: requests, non-200, requests/s, p50, p99, max."""
    latencies = result["latencies_ms"]
    count = len(latencies)
    p50 = bench_common.latency_summary(latencies)["p50"] if latencies else float("nan")
    p99 = bench_common.latency_summary(latencies)["p99"] if latencies else float("nan")
    return {"requests": count, "non_200": count - result["answers"].get(200, 0),
            "per_second": count / result["seconds"], "p50_ms": p50, "p99_ms": p99,
            "max_ms": latencies[-1] if latencies else float("nan")}


def _define_flags():
    """This script's flags, and bench_serving.py's (its export's: --layers,
    --seq_length, --hf_model; --words); defined only when it runs, so that
    tests import `run_load` beside other scripts' flags."""
    import bench_serving  # noqa: F401
    flags.DEFINE_enum("model", "base", ["base", "tiny"],
                      "base: bench_serving.py's BERT-Base-shaped classifier (random weights); "
                      "tiny: the tests' tiny classifier.")
    flags.DEFINE_string("model_dir", None, "An export to serve instead (one text input, text_a).")
    flags.DEFINE_string("repo", ROOT, "The checkout whose predict.py serves.")
    flags.DEFINE_string("python", sys.executable, "The interpreter that runs the server.")
    flags.DEFINE_list("server_flags", [], "More flags for predict.py, as they are.")
    flags.DEFINE_list("phases", "clean,hostile", "The phases to run (clean, hostile).")
    flags.DEFINE_integer("clients", 16, "Client threads posting good requests.")
    flags.DEFINE_integer("seconds", 60, "Length of each phase.")
    flags.DEFINE_integer("half_open", 1000, "Half-open connections of the hostile phase.")
    flags.DEFINE_integer("slowloris", 10, "Slowloris connections of the hostile phase.")
    flags.DEFINE_float("hostile_rate", 20, "Requests a second of each other hostile kind.")
    flags.DEFINE_integer("max_request_bytes", 4 << 20,
                         "The server's --max_request_bytes (what an oversized body passes).")


def _export(workdir):
    """The export to serve (see --model)."""
    if FLAGS.model_dir:
        return FLAGS.model_dir
    if FLAGS.model == "base":
        import bench_serving
        return bench_serving.export(workdir)
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import pathlib

    from scriptkit import quiet_tf  # noqa: F401  (TensorFlow as the scripts import it)
    import serving_exports
    import tensorflow.compat.v1 as tf
    import test_serving
    files = test_serving.write_model_files(pathlib.Path(workdir))
    with tf.Graph().as_default():
        return serving_exports._classifier("Sst2Processor", ["0", "1"])(
            pathlib.Path(workdir) / "export", files)[0]


def main(_):
    import bench_serving
    rng = random.Random(0)
    body = json.dumps({"instances": [{"text_a": " ".join(
        rng.choice(bench_serving.WORDS) for _ in range(int(FLAGS.words[0])))}]}).encode()
    server_flags = FLAGS.server_flags + ["--max_request_bytes=%d" % FLAGS.max_request_bytes]
    with tempfile.TemporaryDirectory() as workdir:
        model_dir = _export(workdir)
        print("CPU: %s (%d logical CPUs); load average %s; model: %s; clients: %d for %d s; "
              "server: predict.py %s" % (
                  bench_common.cpu_model(), os.cpu_count(),
                  " ".join("%.2f" % x for x in os.getloadavg()),
                  FLAGS.model_dir or ("%s (%d layers, seq %d)" % (
                      FLAGS.model, FLAGS.layers, FLAGS.seq_length) if FLAGS.model == "base"
                      else "tiny"), FLAGS.clients, FLAGS.seconds, " ".join(server_flags)))
        print("%-8s %8s %7s %7s %8s %8s %8s  %s" % (
            "phase", "requests", "non-200", "req/s", "p50 ms", "p99 ms", "max ms",
            "RSS MiB first/peak/last; hostile answers"))
        for phase in FLAGS.phases:
            process, port = bench_common.start_server(FLAGS.python, FLAGS.repo, model_dir,
                                                      server_flags)
            try:
                # The first requests trace the signature: not timed.
                for _ in range(3):
                    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
                    connection.request("POST", PREDICT, body)
                    connection.getresponse().read()
                    connection.close()
                hostile = phase == "hostile"
                result = run_load(port, FLAGS.clients, FLAGS.seconds, body,
                                  half_open=FLAGS.half_open if hostile else 0,
                                  slowloris=FLAGS.slowloris if hostile else 0,
                                  hostile=("oversized", "bad_json", "deep_json") if hostile
                                  else (), hostile_rate=FLAGS.hostile_rate,
                                  max_request_bytes=FLAGS.max_request_bytes, pid=process.pid)
                alive = process.poll() is None
            finally:
                process.kill()
                process.wait()
            figures = summary(result)
            rss = [value for value in result["rss_mib"] if value is not None]
            print("%-8s %8d %7d %7.1f %8.1f %8.1f %8.1f  %s; %s%s" % (
                phase, figures["requests"], figures["non_200"], figures["per_second"],
                figures["p50_ms"], figures["p99_ms"], figures["max_ms"],
                "/".join("%.0f" % v for v in (rss[0], max(rss), rss[-1])) if rss else "-",
                "; ".join("%s: %s" % (kind, ", ".join("%s x %d" % item for item in seen.items()))
                          for kind, seen in result["hostile"].items()) or "no hostile clients",
                "" if alive else "; THE SERVER DIED"))
            step = max(1, len(rss) // 10)
            threads = [count for count in result["threads"] if count is not None]
            print("%-8s RSS MiB every %d s: %s; the server's threads: %s" % (
                "", step, " ".join("%.0f" % v for v in rss[::step]),
                "%d to %d" % (min(threads), max(threads)) if threads else "-"))
            print("RESULT " + json.dumps(dict(figures, phase=phase, answers=result["answers"],
                                              hostile=result["hostile"], rss_mib=rss,
                                              threads=threads, opened=result["opened"])))
            sys.stdout.flush()


if __name__ == "__main__":
    _define_flags()
    app.run(main)
