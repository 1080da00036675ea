"""The HTTP server of `predict.py --port`: TensorFlow Serving's REST API
(`rest_api`) over HTTP/1.1 (`async_http`), with the page to try the model
(web_page.py).

Every connection is held by one event loop, at a few kilobytes each; the
:predict requests are decoded, run and encoded in a pool of
--max_requests_in_flight threads. The server bounds what each client may
cost (`async_http`): the request line, headers and body's framing and
size, a deadline for the whole request and for taking its answer, the
connections open, the bytes held of requests not yet answered and the
:predict requests run at once (`rest_api.ServerLimits`). A request that
fails a check is answered 400 (or 404, 405, 408, 411, 413, 414, 431, 501,
503, 505) with {"error": "..."} naming what was wrong, and the server goes
on serving. Each answer is logged: one line each at a human pace, a
summary line when they come faster.
"""

import math
import os
import re
import socket
import threading
import time
import traceback

import tensorflow as tf

from scriptkit import async_http
from scriptkit import batching
from scriptkit import exported_model
from scriptkit import logs
from scriptkit import rest_api
from scriptkit import web_page
from scriptkit.exported_model import RequestError

_ROUTE = re.compile(r"^/v1/models/(?P<name>[^/:]+)(?:/versions/(?P<version>[^/:]+))?"
                    r"(?P<rest>(?::[a-z]+)|/metadata)?$")

# An answer other than 200, raised where a request is found wrong.
_HTTPError = async_http.HTTPError

# While answered requests come at most this often (seconds apart), each
# has a log line; faster ones are counted into a summary line.
_HUMAN_SECONDS = 1.0


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




class _Connection(async_http.Connection):
    """TensorFlow Serving's REST API for `server.model` as
    `server.model_name` (see `make_server`), and the page at /."""

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


    def body_length(self):
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

    async def read_body(self):
        """The request's body (bytes), by its Content-Length or in chunks."""
        length = self.body_length()
        if length is not None:
            data = await self.read(length)
            if len(data) < length:
                raise _HTTPError(400, "the body ended after %d of the %d bytes of its "
                                      "Content-Length" % (len(data), length))
            return data
        limit, parts, total = self.server.limits.max_request_bytes, [], 0
        while True:
            line = await self.readline(1026)
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
            parts.append(await self.read(size))
            if len(parts[-1]) < size or await self.readline(3) not in (b"\r\n", b"\n"):
                raise _HTTPError(400, "the chunked body ended inside a chunk")
        for _ in range(100):  # Trailer fields, which are not used, then an empty line.
            line = await self.readline(8194)
            if not line.endswith(b"\n"):
                raise _HTTPError(400, "the chunked body ended inside its trailer")
            if not line.strip():
                return b"".join(parts)
        raise _HTTPError(400, "a chunked body's trailer of more than 100 lines")

    def has_body(self):
        return bool(self.headers.get("Transfer-Encoding")) or (
            self.headers.get("Content-Length", "0").strip() not in ("", "0"))

    def refused_body(self):
        if self.command == "POST":
            try:
                self.body_length()
            except _HTTPError as e:
                return e
        return None

    async def _get(self):
        self.stop_deadline()  # Read: a GET's body is not read.
        if self.has_body():
            self.close_connection = True
        server = self.server
        if self.path.split("?", 1)[0] in web_page.PATHS:  # A page to try the model.
            # Built once per model (reading the export): in a thread.
            body, headers = await server.loop.run_in_executor(
                None, web_page.page, server.model.path, server.model.version, server.model_name)
            await self.send(200, body, tuple(headers))
            server.log.answered(self.line(200), None)
            return
        try:
            match = self._route()
            if match.group("rest") == "/metadata":
                await self.answer(200, await server.loop.run_in_executor(
                    None, rest_api.metadata_response, server.model, server.model_name))
            elif not match.group("rest"):
                await self.answer(200, rest_api.status_response(server.model))
            else:
                raise _HTTPError(404, "Malformed request: GET %s"
                                 % rest_api.printable(self.path, 200))
        except _HTTPError as e:
            await self.answer(e.status, {"error": e.message}, headers=e.headers)

    async def _post(self):
        try:
            if (self._route().group("rest") or "") != ":predict":
                raise _HTTPError(400, "this server answers :predict requests (%s)"
                                 % rest_api.printable(self.path, 200))
            data = await self.read_body()
        except _HTTPError as e:
            self.close_connection = True  # The body is left unread, or malformed.
            await self.answer(e.status, {"error": e.message}, headers=e.headers)
            return
        answer = await self.run_in_pool(self._predict, data)
        del data
        self.free_request()  # The body is not held while the answer goes.
        await self.answer_bytes(*answer)

    def _predict(self, data):
        """The answer to a :predict body (`answer_bytes`'s arguments), in a
        thread of the pool: decoded, checked, run and encoded."""
        try:
            answer, held = rest_api.predict_response(
                self.server.model, rest_api.decode_request(data), self.server.limits,
                self.server.batcher)
            return 200, async_http.json_bytes(answer), None, held
        except RequestError as e:
            message = str(e)
        except tf.errors.OpError as e:
            message = exported_model.op_error_message(e)
        except Exception as e:  # noqa: BLE001  (the server keeps serving)
            frame = traceback.extract_tb(e.__traceback__)[-1]
            message = "internal error (%s); the server's log has more" % type(e).__name__
            return 500, async_http.json_bytes({"error": message}), message, None, (), (
                "%s: %s (in %s, line %d)" % (type(e).__name__, e,
                                            os.path.basename(frame.filename), frame.lineno))
        return 400, async_http.json_bytes({"error": message}), message

    async def _refuse_method(self):
        self.close_connection = self.has_body() or self.close_connection
        await self.answer(405, {"error": "%s is not answered here: GET the model's status or "
                                          "metadata, POST :predict" % self.command},
                           headers=[("Allow", "GET, POST")])


# The methods answered; others: 501.
_Connection.METHODS = {"GET": _Connection._get, "POST": _Connection._post}
_Connection.METHODS.update(dict.fromkeys(("PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"),
                                         _Connection._refuse_method))


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
                log_every_seconds=None,
                batch_settings=(batching.DEFAULT_MAX_BATCH_SIZE,
                                batching.DEFAULT_BATCH_TIMEOUT_MICROS)):
    """An HTTP server answering TensorFlow Serving's REST API for `model`
    as `model_name`, bound to (host, port) and listening; call its
    serve_forever(). `model` may be None at first: set `server.model`
    before serving (main binds the port before it loads the model).

    Args:
      limits: a ServerLimits (default `rest_api.DEFAULT_LIMITS`), and
        `max_request_bytes` in place of its field if given.
      log_every_seconds: the summary line's interval (default
        --log_every_seconds).
      batch_settings: (max_batch_size, batch_timeout_micros) of the
        `batching.Batcher` that merges concurrent requests' runs; a
        max_batch_size of 1: none, each request runs alone in its thread.

    Raises:
      OSError: the address cannot be listened on (socket.gaierror: it is
        no address).
    """
    limits = limits or rest_api.DEFAULT_LIMITS
    if max_request_bytes is not None:
        limits = limits._replace(max_request_bytes=max_request_bytes)
    log = _RequestLog(logs.log_every_seconds() if log_every_seconds is None
                      else log_every_seconds)
    server = async_http.Server((host, port), listen_family(host, port), limits, log, _Connection)
    server.model, server.model_name = model, model_name
    max_batch_size, batch_timeout_micros = batch_settings
    server.batcher = (batching.Batcher(max_batch_size, batch_timeout_micros,
                                       limits.max_windows_per_request)
                      if max_batch_size > 1 else None)
    return server
