"""The HTTP server of `predict.py --port`: TensorFlow Serving's REST API
(`rest_api`) over HTTP/1.1, with the page to try the model (web_page.py).

The server bounds what each client may cost: the request line, headers
and body's framing and size, a deadline for the whole request and for
taking its answer, the connections open and the :predict requests run at
once (`rest_api.ServerLimits`). A request that fails a check is answered
400 (or 404, 405, 408, 411, 413, 501, 503) with {"error": "..."} naming
what was wrong, and the server goes on serving. Each answer is logged: one
line each at a human pace, a summary line when they come faster.
"""

import contextlib
import http.server
import io
import json
import math
import os
import re
import socket
import socketserver
import sys
import threading
import time
import traceback

import tensorflow as tf

import logs
import rest_api
import web_page
from exported_model import RequestError

_ROUTE = re.compile(r"^/v1/models/(?P<name>[^/:]+)(?:/versions/(?P<version>[^/:]+))?"
                    r"(?P<rest>(?::[a-z]+)|/metadata)?$")

# While answered requests come at most this often (seconds apart), each
# has a log line; faster ones are counted into a summary line.
_HUMAN_SECONDS = 1.0

# The longest request line (method, path and version) the server reads.
_MAX_REQUEST_LINE = 8192


class _HTTPError(Exception):
    """An answer other than 200, raised where a request is found wrong."""

    def __init__(self, status, message, headers=()):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, tuple(headers)


class _ReadTimeout(TimeoutError):
    """A request did not arrive within --client_timeout_seconds."""


class _DeadlineReader(io.RawIOBase):
    """A socket read with a deadline for the whole request, however the
    client paces its bytes; counts the bytes of the request received."""

    def __init__(self, connection):
        super().__init__()
        self._connection = connection
        self.deadline = None
        self.received = 0

    def start(self, seconds):
        """A new request: it has `seconds` to arrive."""
        self.deadline = time.monotonic() + seconds
        self.received = 0

    def readable(self):
        return True

    def readinto(self, buffer):
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise _ReadTimeout()
        self._connection.settimeout(left)
        try:
            count = self._connection.recv_into(buffer)
        except TimeoutError:
            raise _ReadTimeout()
        self.received += count
        return count


def _client(address):
    """A client's address for the log."""
    host, port = address[:2]
    return ("[%s]:%d" if ":" in host else "%s:%d") % (host, port)


class _RequestLog:
    """The server's log: every error answer on a line of its own; answered
    requests one line each while they come at a human pace (at most one a
    second), else counted and summed up on one line about every
    `every_seconds`."""

    def __init__(self, every_seconds, clock=time.monotonic):
        self._every, self._clock = every_seconds, clock
        self._lock = threading.Lock()
        self._last_line = -math.inf
        self._counted = self._instances = self._cut = self._unread = 0
        self._since = None

    def answered(self, line, held):
        """A 200 answer: `line` says what; `held`, a RequestHeld or None,
        what the request held."""
        now = self._clock()
        with self._lock:
            if now - self._last_line < _HUMAN_SECONDS:
                if not self._counted:
                    self._since = now
                self._counted += 1
                if held:
                    self._instances += held.instances
                    self._cut += sum(count for count, _ in held.cut.values())
                    self._unread += sum(unread for _, unread in held.cut.values())
                return
            self._last_line = now
            self._summary(now)
        if held:
            line += " (%s%s)" % (_count(held.instances, "instance"),
                                 "".join("; %s: %s" % (name, _cut_words(*cut))
                                         for name, cut in sorted(held.cut.items())))
        logs.log_info("%s", line)

    def error(self, line, message):
        logs.log_warning("%s: %s", line, message)

    def flush(self):
        """Logs the summary of the counted requests once it is due."""
        now = self._clock()
        with self._lock:
            if self._counted and now - self._since >= self._every:
                self._summary(now)

    def _summary(self, now):
        if self._counted:
            logs.log_info("%d more %s answered in %s (%s%s)", self._counted,
                          "request" if self._counted == 1 else "requests",
                          logs.format_duration(now - self._since),
                          _count(self._instances, "instance"),
                          "; " + _cut_words(self._cut, self._unread) if self._cut else "")
            self._counted = self._instances = self._cut = self._unread = 0


def _count(number, noun):
    return "%d %s%s" % (number, noun, "" if number == 1 else "s")


def _cut_words(count, unread):
    return "%s cut where the model stops reading, %s not read" % (
        _count(count, "text"), _count(unread, "character"))




class _Server(http.server.ThreadingHTTPServer):
    """A thread per connection, at most `limits.max_connections` of them
    (one more is answered 503 and closed); `limits.max_requests_in_flight`
    :predict requests decoded and run at once, the others waiting for a
    place (a queue bounded by the connections)."""

    daemon_threads = True
    block_on_close = False
    # Connections that wait in the kernel to be accepted (also while the
    # model loads).
    request_queue_size = 64

    def __init__(self, address, family, model, model_name, limits, log):
        self.address_family = family
        self.model, self.model_name, self.limits, self.log = model, model_name, limits, log
        self.places = threading.BoundedSemaphore(limits.max_requests_in_flight)
        self.connections = self.waiting = 0
        self.lock = threading.Lock()
        super().__init__(address, _Handler)

    def server_bind(self):
        # HTTPServer's would look the host's name up (a DNS query).
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def process_request(self, request, client_address):
        with self.lock:
            full = self.connections >= self.limits.max_connections
            if not full:
                self.connections += 1
        if full:
            self._refuse(request, client_address)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._closed_one()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._closed_one()

    def _closed_one(self):
        with self.lock:
            self.connections -= 1

    def _refuse(self, request, client_address):
        message = ("the server has %d connections open, its most (--max_connections); try "
                   "again later" % self.limits.max_connections)
        data = json.dumps({"error": message}).encode()
        try:
            request.settimeout(1)
            request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: "
                            b"application/json\r\nContent-Length: %d\r\nConnection: close\r\n"
                            b"Retry-After: 1\r\n\r\n%s" % (len(data), data))
        except OSError:
            pass
        self.log.error("Connection from %s: 503" % _client(client_address), message)
        self.shutdown_request(request)

    def handle_error(self, request, client_address):
        """One log line where socketserver would print a traceback."""
        error = sys.exc_info()[1]
        logs.log_warning("Connection from %s ended by %s: %s", _client(client_address),
                         type(error).__name__, error)

    def service_actions(self):
        self.log.flush()

    @contextlib.contextmanager
    def in_flight(self):
        """A context for one :predict request being decoded and run: waits
        for one of the --max_requests_in_flight places."""
        with self.lock:
            self.waiting += 1
        self.places.acquire()
        with self.lock:
            self.waiting -= 1
        try:
            yield
        finally:
            self.places.release()


class _Handler(http.server.BaseHTTPRequestHandler):
    """TensorFlow Serving's REST API for `server.model` (see `make_server`)."""

    protocol_version = "HTTP/1.1"
    # Headers and body leave in separate writes: with Nagle's algorithm
    # the body would wait for the client's delayed acknowledgement (40 ms).
    disable_nagle_algorithm = True
    # Names the program only: no Python or library versions.
    server_version = "predict.py"
    # A request line without a version is answered as HTTP/1.1 (with a
    # status line and headers), not as HTTP/0.9.
    default_request_version = "HTTP/1.1"

    def version_string(self):
        return self.server_version

    def log_request(self, *args):  # The server logs each answer itself.
        pass

    def log_message(self, *args):
        pass

    def setup(self):
        super().setup()
        self.rfile.close()
        self._reader = _DeadlineReader(self.connection)
        self.rfile = io.BufferedReader(self._reader, 1 << 16)

    def handle(self):
        try:
            super().handle()
        except (ConnectionError, TimeoutError) as e:
            # The client left, or stopped reading its answer (one that left
            # an idle connection is not worth a line).
            if self._started is not None:
                self.server.log.error(self._line(),
                                      "the client left before its answer was sent (%s)"
                                      % type(e).__name__)

    def handle_one_request(self):
        limits = self.server.limits
        self._reader.start(limits.timeout_seconds)
        self._started = None
        self.command, self.path, self.request_version = "", "", "HTTP/1.1"
        self.requestline = ""
        try:
            line = self.rfile.readline(_MAX_REQUEST_LINE + 1)
            if not line:
                self.close_connection = True
                return
            self._started = time.monotonic()
            if len(line) > _MAX_REQUEST_LINE:
                self.send_error(414, "the request line is longer than %d bytes"
                                % _MAX_REQUEST_LINE)
                return
            self.raw_requestline = line
            if not self.parse_request():
                return
            method = getattr(self, "do_" + self.command, None)
            if method is None:
                self.send_error(501, "unsupported method %s" % rest_api.printable(self.command, 20))
                return
            method()
            self.wfile.flush()
        except _ReadTimeout:
            self.close_connection = True
            if self._reader.received:
                self._started = self._started or time.monotonic()
                self.send_error(408, "the request did not arrive within %g s "
                                "(--client_timeout_seconds)" % limits.timeout_seconds)

    def _line(self, status=None):
        """The request (method, path, client) and its answer's status."""
        request = "%s %s from %s" % (self.command or "-", rest_api.printable(self.path, 80) or "-",
                                     _client(self.client_address))
        if status is None:
            return request
        took = "" if self._started is None else " in %d ms" % round(
            1000 * (time.monotonic() - self._started))
        return "%s: %d%s" % (request, status, took)

    def _answer(self, status, body, held=None, headers=(), detail=None):
        """Sends `body` as JSON, then logs the answer (an error with its
        message, or `detail` where the log should say more)."""
        data = json.dumps(body, ensure_ascii=False).encode("utf-8", "backslashreplace")
        self._send(status, data, (("Content-Type", "application/json"),
                                  ("Content-Length", str(len(data)))) + tuple(headers))
        # Logged once sent (an answer the client did not take has the line
        # of `handle` instead).
        if status >= 400:
            self.server.log.error(self._line(status), detail or body["error"])
        else:
            self.server.log.answered(self._line(status), held)

    def send_error(self, code, message=None, explain=None):
        """Every error answer is JSON, {"error": ...}, and ends the
        connection (the rest of the request may be unread)."""
        self.close_connection = True
        self._answer(code, {"error": message or self.responses.get(code, ("error",))[0]})

    def handle_expect_100(self):
        # A body that would be refused is refused before the client sends it.
        if self.command == "POST":
            try:
                self._body_length()
            except _HTTPError as e:
                self.send_error(e.status, e.message)
                return False
        return super().handle_expect_100()

    def _route(self):
        """The route's match; _HTTPError 404 for another path, model or
        version."""
        match = _ROUTE.match(self.path.split("?", 1)[0])
        if match is None:
            raise _HTTPError(404, "Malformed request: %s %s" % (self.command,
                                                               rest_api.printable(self.path, 200)))
        if match.group("name") != self.server.model_name:
            raise _HTTPError(404, "Servable not found for request: Latest(%s)"
                             % rest_api.printable(match.group("name")))
        version = match.group("version")
        if version is not None and version != self.server.model.version:
            raise _HTTPError(404, "Servable not found for request: Specific(%s, %s)"
                             % (self.server.model_name, rest_api.printable(version)))
        return match

    def _body_length(self):
        """The body's length by Content-Length, or None for a chunked body;
        _HTTPError for a body this server does not read."""
        limit = self.server.limits.max_request_bytes
        encodings = self.headers.get_all("Transfer-Encoding") or []
        lengths = self.headers.get_all("Content-Length") or []
        if encodings:
            if lengths:
                raise _HTTPError(400, "a request has either a Content-Length or a "
                                      "Transfer-Encoding, not both")
            if [e.strip().lower() for e in ",".join(encodings).split(",")] != ["chunked"]:
                raise _HTTPError(501, "this server reads the transfer coding chunked only, "
                                      "not %s" % rest_api.printable(", ".join(encodings)))
            return None
        if not lengths:
            raise _HTTPError(411, "the request needs a Content-Length (or a chunked body)")
        if len(lengths) > 1 or not re.fullmatch(r"[0-9]{1,18}", lengths[0].strip()):
            raise _HTTPError(400, "the Content-Length %s is not one number of bytes"
                             % rest_api.printable(", ".join(lengths)))
        length = int(lengths[0])
        if length > limit:
            raise _HTTPError(413, "request body of %d bytes exceeds the limit of %d "
                                  "(--max_request_bytes)" % (length, limit))
        return length

    def _read_body(self):
        """The request's body (bytes), by its Content-Length or in chunks."""
        length = self._body_length()
        if length is not None:
            data = self.rfile.read(length)
            if len(data) < length:
                raise _HTTPError(400, "the body ended after %d of the %d bytes of its "
                                      "Content-Length" % (len(data), length))
            return data
        limit, parts, total = self.server.limits.max_request_bytes, [], 0
        while True:
            line = self.rfile.readline(1026)
            size = line.split(b";", 1)[0].strip()
            if not line.endswith(b"\n") or not re.fullmatch(rb"[0-9A-Fa-f]{1,16}", size):
                raise _HTTPError(400, "a malformed chunk of a chunked body")
            size = int(size, 16)
            if size == 0:
                break
            total += size
            if total > limit:
                raise _HTTPError(413, "request body of more than %d bytes exceeds the limit "
                                      "(--max_request_bytes)" % limit)
            parts.append(self.rfile.read(size))
            if len(parts[-1]) < size or self.rfile.readline(3) not in (b"\r\n", b"\n"):
                raise _HTTPError(400, "the chunked body ended inside a chunk")
        for _ in range(100):  # Trailer fields, which are not used, then an empty line.
            line = self.rfile.readline(8194)
            if not line.endswith(b"\n"):
                raise _HTTPError(400, "the chunked body ended inside its trailer")
            if not line.strip():
                return b"".join(parts)
        raise _HTTPError(400, "a chunked body's trailer of more than 100 lines")

    def _has_body(self):
        return bool(self.headers.get("Transfer-Encoding")) or (
            self.headers.get("Content-Length", "0").strip() not in ("", "0"))

    def do_GET(self):
        if self._has_body():
            self.close_connection = True  # The body is not read.
        if self.path.split("?", 1)[0] in web_page.PATHS:  # A page to try the model.
            self._page()
            return
        try:
            match = self._route()
            if match.group("rest") == "/metadata":
                self._answer(200, rest_api.metadata_response(self.server.model,
                                                             self.server.model_name))
            elif not match.group("rest"):
                self._answer(200, rest_api.status_response(self.server.model))
            else:
                raise _HTTPError(404, "Malformed request: GET %s"
                                 % rest_api.printable(self.path, 200))
        except _HTTPError as e:
            self._answer(e.status, {"error": e.message}, headers=e.headers)

    def _page(self):
        """Sends the page to try the model (web_page.py), logged as an answer."""
        model = self.server.model
        body, headers = web_page.page(model.path, model.version, self.server.model_name)
        self._send(200, body, tuple(headers))
        self.server.log.answered(self._line(200), None)

    def _send(self, status, data, headers):
        """Writes the status line, `headers` ((name, value) pairs) and, but
        for a HEAD request, `data` (bytes)."""
        self.connection.settimeout(self.server.limits.timeout_seconds)
        self.send_response(status)
        for header in headers:
            self.send_header(*header)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def do_POST(self):
        try:
            if (self._route().group("rest") or "") != ":predict":
                raise _HTTPError(400, "this server answers :predict requests (%s)"
                                 % rest_api.printable(self.path, 200))
            data = self._read_body()
        except _HTTPError as e:
            self.close_connection = True  # The body is left unread, or malformed.
            self._answer(e.status, {"error": e.message}, headers=e.headers)
            return
        with self.server.in_flight():
            self._answer(*self._predict(data))

    def _predict(self, data):
        """The answer (`_answer`'s arguments) to a :predict body."""
        try:
            answer, held = rest_api.predict_response(
                self.server.model, rest_api.decode_request(data), self.server.limits)
            return 200, answer, held
        except RequestError as e:
            return 400, {"error": str(e)}
        except tf.errors.OpError as e:
            return 400, {"error": rest_api.op_error_message(e)}
        except Exception as e:  # noqa: BLE001  (the server keeps serving)
            frame = traceback.extract_tb(e.__traceback__)[-1]
            return 500, {"error": "internal error (%s); the server's log has more"
                                  % type(e).__name__}, None, (), "%s: %s (in %s, line %d)" % (
                type(e).__name__, e, os.path.basename(frame.filename), frame.lineno)

    def _refuse_method(self):
        self.close_connection = self._has_body() or self.close_connection
        self._answer(405, {"error": "%s is not answered here: GET the model's status or "
                                    "metadata, POST :predict" % self.command},
                     headers=[("Allow", "GET, POST")])

    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = _refuse_method


def listen_family(host, port):
    """The address family to listen on `host` with (IPv4 or IPv6).

    Raises:
      socket.gaierror: `host` is no address or name of one.
    """
    if not host:  # Every IPv4 interface, as socketserver takes "".
        return socket.AF_INET
    return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                              flags=socket.AI_PASSIVE)[0][0]


def make_server(model, host, port, model_name, max_request_bytes=None, limits=None,
                log_every_seconds=None):
    """An HTTP server answering TensorFlow Serving's REST API for `model`
    as `model_name`, bound to (host, port) and listening; call its
    serve_forever(). `model` may be None at first: set `server.model`
    before serving (main binds the port before it loads the model).

    Args:
      limits: a ServerLimits (default `rest_api.DEFAULT_LIMITS`), and
        `max_request_bytes` in place of its field if given.
      log_every_seconds: the summary line's interval (default
        --log_every_seconds).

    Raises:
      OSError: the address cannot be listened on (socket.gaierror: it is
        no address).
    """
    limits = limits or rest_api.DEFAULT_LIMITS
    if max_request_bytes is not None:
        limits = limits._replace(max_request_bytes=max_request_bytes)
    log = _RequestLog(logs.log_every_seconds() if log_every_seconds is None
                      else log_every_seconds)
    return _Server((host, port), listen_family(host, port), model, model_name, limits, log)
