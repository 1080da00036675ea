"""An HTTP/1.1 server on asyncio that bounds what each client may cost;
`rest_server.py` answers TensorFlow Serving's REST API on it.

One thread runs the event loop that holds every connection, so an idle or
slow client costs a file descriptor and a few kilobytes, not a thread; work
that blocks (running a model) goes to a pool of threads (`run_in_pool`),
so that a long request never keeps the server from reading and answering
the others.

Per request: the request line (8 KiB), the headers (100 lines, 64 KiB in
all), a deadline for the whole request (line, headers and the body that
the subclass reads with `read` and `readline`), however slowly its bytes
come, and one for taking its answer (limits.timeout_seconds). Per server:
the connections open
(limits.max_connections, with the process's limit of open files raised to
fit them), the bytes held of requests not yet answered
(limits.max_buffered_bytes) and the requests in the pool at once
(limits.max_requests_in_flight). Each fault is answered as http.server's
handler answers it, with JSON ({"error": ...}), and logged on the
server's log (`log.error(line, message)`, `log.answered(line, held)`).

Connection is the base of a server's handler: its subclass answers each
request in an async method of METHODS (name -> method), with `command`,
`path`, `headers` (http.client.HTTPMessage) and `close_connection` set as
http.server's handler sets them.
"""

import asyncio
import concurrent.futures
import email.utils
import errno
import http
import http.client
import io
import json
import os
import socket
import threading
import time

from scriptkit import logs
from scriptkit import rest_api

try:
    import resource
except ImportError:  # Windows: no descriptor limit to raise.
    resource = None

# The longest request line (method, path and version) the server reads.
_MAX_REQUEST_LINE = 8192
# Header lines as http.client reads them (at most 100 of at most 64 KiB
# each), and at most 64 KiB of them in all: what one connection may make
# the server hold before its body.
_MAX_HEADER_LINE = 65536
_MAX_HEADERS = 100
MAX_HEADER_BYTES = 65536
# A connection reads at most this far ahead of what its request has used;
# then the server stops reading it (the kernel's buffer fills, the client
# waits) until the request needs more.
_READ_AHEAD = 65536
# After an answer that ends its connection, the server closes its side
# for writing and reads (and drops) what the client still sends for up to
# this long before it closes: closing with a body left unread would reset
# the connection, and the client could lose the answer.
_LINGER_SECONDS = 2.0
# File descriptors the process needs besides its connections (the model's
# files, TensorFlow's, the log); the soft limit is raised to fit both.
DESCRIPTOR_MARGIN = 256
# Connections that wait in the kernel to be accepted (also while the model
# loads), and how many are accepted at once before other work goes on.
_BACKLOG = 1024
_ACCEPTS_AT_ONCE = 64
# How often the log's summary line is looked at.
_FLUSH_SECONDS = 0.5


class HTTPError(Exception):
    """An answer other than 200, raised where a request is found wrong."""

    def __init__(self, status, message, headers=()):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, tuple(headers)


class _ReadTimeout(Exception):
    """A request did not arrive within limits.timeout_seconds."""


class _Refused(Exception):
    """The request being read is refused for the bytes the server holds."""


class _Gone(Exception):
    """The connection ended: the client reset it, or stopped taking its
    answer; `kind` names the error (ConnectionResetError, ...)."""

    def __init__(self, error):
        super().__init__(error)
        self.kind = type(error).__name__


def json_bytes(body):
    """An answer's JSON as bytes (text kept as UTF-8, not escaped)."""
    return json.dumps(body, ensure_ascii=False).encode("utf-8", "backslashreplace")


def client_name(address):
    """A client's address for the log."""
    host, port = address[:2]
    return ("[%s]:%d" if ":" in host else "%s:%d") % (host, port)


def _raise_descriptor_limit(connections):
    """Raises the process's soft limit of open files (RLIMIT_NOFILE) to fit
    `connections` connections and `DESCRIPTOR_MARGIN` more, as far as the
    hard limit lets it; logs a line where that is not far enough. Returns
    the soft limit then (None where the system has none to read)."""
    if resource is None:
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = connections + DESCRIPTOR_MARGIN
    if soft != resource.RLIM_INFINITY and soft < wanted:
        raised = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            soft = raised
        except (ValueError, OSError):
            pass
    if soft != resource.RLIM_INFINITY and soft < wanted:
        logs.log_warning("--max_connections=%d needs about %d open files, and this process "
                         "may open %d (ulimit -n): past that, connections are answered 503 (no "
                         "file descriptor left)", connections, wanted, soft)
    return soft


def _spare_descriptor():
    """A descriptor held in reserve (of /dev/null): closed when the process
    has run out of them, it lets the server accept one more connection to
    answer it 503 rather than leave it waiting. None if none is left."""
    try:
        return os.open(os.devnull, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None


class Server:
    """An HTTP server listening on `address` (a socket address of `family`):
    an event loop, run by `serve_forever`, accepts the connections and
    reads and answers their requests (a `connection_class`, subclass of
    Connection, each); a pool of `limits.max_requests_in_flight` threads
    runs what blocks (`Connection.run_in_pool`), the others waiting for a
    place. `limits`: a rest_api.ServerLimits; `log`: where the answers go
    (rest_server._RequestLog).

    Attributes read by tests and benchmarks: `connections` (open now, at
    most `limits.max_connections`; one more is answered 503 and closed),
    `waiting` (requests waiting for a place in the pool), `buffered`
    (bytes held of requests not yet answered, all connections together;
    past `limits.max_buffered_bytes`, see `hold`).
    """

    def __init__(self, address, family, limits, log, connection_class):
        self.limits, self.log, self.connection_class = limits, log, connection_class
        self.connections = self.waiting = self.buffered = 0
        # Never less than one request of the largest size takes.
        self._budget = max(limits.max_buffered_bytes, limits.max_request_bytes
                           + _MAX_REQUEST_LINE + MAX_HEADER_BYTES + _READ_AHEAD)
        self._open = set()  # the Connections
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._socket.bind(address)
            self._socket.listen(_BACKLOG)
            self._socket.setblocking(False)
        except BaseException:
            self._socket.close()
            raise
        self.server_address = self._socket.getsockname()
        _raise_descriptor_limit(limits.max_connections)
        self._spare = _spare_descriptor()
        self.loop = asyncio.new_event_loop()
        self.pool = concurrent.futures.ThreadPoolExecutor(limits.max_requests_in_flight,
                                                          thread_name_prefix="predict")
        self.places = None  # an asyncio.Semaphore, made in the loop
        self._stopping = None
        self._stop = threading.Event()  # shutdown() was called
        self._stopped = threading.Event()  # serve_forever() is not running
        self._stopped.set()

    def serve_forever(self):
        """Serves until `shutdown` is called from another thread (or a
        KeyboardInterrupt ends it); the summary lines of the log come from
        a thread of their own meanwhile."""
        self._stopped.clear()
        flusher = threading.Thread(target=self._flush_log, daemon=True, name="request-log")
        flusher.start()
        try:
            self.loop.run_until_complete(self._serve())
        finally:
            self._stopped.set()

    async def _serve(self):
        self._stopping = self.loop.create_future()
        if self.places is None:
            self.places = asyncio.Semaphore(self.limits.max_requests_in_flight)
        if self._stop.is_set():
            return
        self.loop.add_reader(self._socket.fileno(), self._accept)
        try:
            await self._stopping
        finally:
            self.loop.remove_reader(self._socket.fileno())

    def _flush_log(self):
        while not self._stopped.wait(_FLUSH_SECONDS):
            self.log.flush()

    def _end_serving(self):
        if self._stopping is not None and not self._stopping.done():
            self._stopping.set_result(None)

    def shutdown(self):
        """Stops `serve_forever` (called from another thread) and waits for
        it to return; connections stay open until `server_close`."""
        self._stop.set()
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._end_serving)
        self._stopped.wait()

    def server_close(self):
        """Closes the listening socket and every connection (after
        `shutdown`, or once `serve_forever` has ended). A model run under
        way finishes in its thread; its answer is not sent."""
        if not self._stopped.is_set():
            self.shutdown()
        if not self.loop.is_closed():
            self._stop.set()
            self.loop.run_until_complete(self._close_connections())
            self.loop.close()
        self._socket.close()
        if self._spare is not None:
            os.close(self._spare)
            self._spare = None
        self.pool.shutdown(wait=False, cancel_futures=True)

    async def _close_connections(self):
        self._end_serving()
        tasks = []
        for connection in list(self._open):
            connection.transport.abort()
            if connection.task is not None:
                connection.task.cancel()
                tasks.append(connection.task)
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.sleep(0)  # The transports' connection_lost calls.

    # Accepting connections.

    def _accept(self):
        """Accepts the connections waiting (called by the loop when the
        listening socket is readable)."""
        for _ in range(_ACCEPTS_AT_ONCE):
            try:
                sock, address = self._socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE):
                    self._out_of_descriptors()
                elif e.errno not in (errno.ECONNABORTED, errno.EPROTO, errno.EPERM):
                    # ENOBUFS, ENOMEM: accept again in a moment.
                    logs.log_warning("Cannot accept connections: %s", e)
                    self._pause_accepting()
                return
            if self.connections >= self.limits.max_connections:
                self._refuse(sock, address, "the server has %d connections open, its most "
                             "(--max_connections); try again later"
                             % self.limits.max_connections)
                continue
            self.connections += 1
            connection = self.connection_class(self, address)
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:  # The client has already left.
                pass
            task = self.loop.create_task(self.loop.connect_accepted_socket(
                lambda connection=connection: connection, sock))
            task.add_done_callback(lambda task, sock=sock, connection=connection:
                                   self._connected(task, sock, connection))

    def _connected(self, task, sock, connection):
        if task.cancelled() or task.exception() is not None:
            if connection.transport is None:  # connection_made never came.
                self.connections -= 1
                sock.close()

    def _pause_accepting(self, seconds=0.1):
        self.loop.remove_reader(self._socket.fileno())
        self.loop.call_later(seconds, self._resume_accepting)

    def _resume_accepting(self):
        if not self._stop.is_set() and self._socket.fileno() >= 0:
            self.loop.add_reader(self._socket.fileno(), self._accept)

    def _out_of_descriptors(self):
        """accept() failed for want of a file descriptor: the spare one is
        given up to accept a waiting connection and answer it 503."""
        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0] if resource else None
        message = ("the server has no file descriptor left for another connection (it may "
                   "open %s, ulimit -n); try again later" % limit)
        if self._spare is not None:
            os.close(self._spare)
            self._spare = None
            try:
                sock, address = self._socket.accept()
            except OSError:
                sock = None
            if sock is not None:
                self._refuse(sock, address, message)
            self._spare = _spare_descriptor()
        if self._spare is None:
            self._pause_accepting()

    def _refuse(self, sock, address, message):
        """Answers a connection 503 with `message` and closes it."""
        data = json_bytes({"error": message})
        try:
            sock.setblocking(False)
            sock.send(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\nConnection: close\r\nRetry-After: 1\r\n\r\n%s"
                      % (len(data), data))
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        finally:
            sock.close()
        self.log.error("Connection from %s: 503" % client_name(address), message)

    # The bytes held of requests not yet answered.

    def hold(self, count):
        """`count` more bytes are held. Past the budget, the request being
        read that holds the most (this one or another) is refused, 503,
        and its bytes dropped, until the bytes held are within it: what
        has been read is never dropped (it is answered in turn), and a
        client that sends the most is the first to go."""
        self.buffered += count
        while self.buffered > self._budget:
            reading = [c for c in self._open if c.reading_request() and c.held()]
            if not reading:
                return
            max(reading, key=lambda connection: connection.held()).refuse_for_memory()

    def release(self, count):
        """`count` bytes held are freed."""
        self.buffered -= count


class Connection(asyncio.Protocol):
    """One client's connection: its task (`_serve`) reads its requests one
    after the other and answers each with the method METHODS[command] (a
    subclass's; other methods: 501), which calls `answer` (or `send`, then
    the log); the names of the request (command, path, request_version,
    headers, close_connection) are those of http.server's handler."""

    METHODS = {}

    def __init__(self, server, address):
        self.server, self.client_address = server, address
        self.transport = self.task = None
        self._buffer = bytearray()  # read and not yet used
        self._taken = 0  # bytes the request has used of what was read (still held)
        self._eof = False  # the client has ended its sending
        self._lost = None  # the error that ended the connection
        self._reading = True
        self._writing_paused = False
        self._discarding = False  # closing: what still comes is dropped
        self._refused = False  # its request is refused for the bytes held (503)
        self._waiter = None  # a future the task waits on (bytes, or its answer sent)
        self._deadline = None
        self._timed_out = False
        self._started = None
        self.command, self.path, self.request_version = "", "", "HTTP/1.1"
        self.headers, self.close_connection = None, False

    # asyncio.Protocol's calls.

    def connection_made(self, transport):
        self.transport = transport
        # pause_writing whenever an answer is not all handed to the kernel,
        # resume_writing once it is: the moment an answer is sent.
        transport.set_write_buffer_limits(high=0)
        self.server._open.add(self)
        self.task = self.server.loop.create_task(self._serve())
        # `_serve` logs its errors; a KeyboardInterrupt that came while it
        # ran leaves serve_forever, and is not an error of the task's.
        self.task.add_done_callback(lambda task: task.cancelled() or task.exception())

    def data_received(self, data):
        if self._discarding or self._refused:
            return
        self._buffer += data
        if len(self._buffer) >= _READ_AHEAD:
            self.pause()
        self._wake()
        self.server.hold(len(data))

    def eof_received(self):
        self._eof = True
        self._wake()
        # While the answer is to come, the connection stays open for it;
        # once closing, it ends here.
        return not self._discarding

    def connection_lost(self, error):
        self._lost = error or ConnectionResetError("the connection was closed")
        self.server.connections -= 1
        self.server._open.discard(self)
        self.server.release(len(self._buffer))
        self._buffer.clear()
        self.stop_deadline()
        self._wake()

    def pause_writing(self):
        self._writing_paused = True

    def resume_writing(self):
        self._writing_paused = False
        self._wake()

    # Reading.

    def _wake(self):
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def _wait(self):
        self._waiter = self.server.loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def pause(self):
        if self._reading and self._lost is None:
            self.transport.pause_reading()
            self._reading = False

    def read_on(self):
        if self._lost is None and not self._reading:
            self.transport.resume_reading()
            self._reading = True

    def reading_request(self):
        """Whether a request is being read (its deadline runs)."""
        return self._deadline is not None

    def held(self):
        """The bytes held of the request being read, and read past it."""
        return self._taken + len(self._buffer)

    def refuse_for_memory(self):
        """The request being read is to be refused (503, see
        `Server.hold`); its bytes, and all it still sends, are dropped."""
        self._refused = True
        self.server.release(self.held())
        self._taken = 0
        self._buffer.clear()
        self._wake()

    async def _more(self):
        """Waits for more of the request: False once the client has ended
        its sending. Raises _ReadTimeout past the request's deadline,
        _Refused once the request is refused for memory, _Gone when the
        connection has ended."""
        while True:
            if self._refused:
                raise _Refused()
            if self._timed_out:
                raise _ReadTimeout()
            if self._lost is not None:
                raise _Gone(self._lost)
            if self._eof:
                return False
            self.read_on()
            before = len(self._buffer)
            await self._wait()
            if len(self._buffer) > before:
                return True

    def _take(self, count):
        data = bytes(self._buffer[:count])
        del self._buffer[:count]
        self._taken += count
        return data

    async def readline(self, limit):
        """A line with its b"\\n", as io's readline(limit): at most `limit`
        bytes, fewer where the sending ends first (b"" at its end)."""
        start = 0
        while True:
            end = self._buffer.find(b"\n", start, limit)
            if end >= 0:
                return self._take(end + 1)
            if len(self._buffer) >= limit:
                return self._take(limit)
            start = len(self._buffer)
            if not await self._more():
                return self._take(len(self._buffer))

    async def read(self, count):
        """`count` bytes, fewer where the sending ends first."""
        parts, left = [], count
        while left:
            if not self._buffer and not await self._more():
                break
            parts.append(self._take(min(left, len(self._buffer))))
            left -= len(parts[-1])
        return b"".join(parts)

    def _start_deadline(self, seconds):
        self._timed_out = False
        self._deadline = self.server.loop.call_later(seconds, self._time_out)

    def _time_out(self):
        self._timed_out = True
        self._wake()

    def stop_deadline(self):
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def free_request(self):
        """The request's bytes are no longer held."""
        self.server.release(self._taken)
        self._taken = 0

    async def run_in_pool(self, function, *args):
        """function(*args) in the server's pool, once a place is free (the
        connection is read no more meanwhile); its result."""
        self.stop_deadline()
        self.pause()
        server = self.server
        server.waiting += 1
        try:
            await server.places.acquire()
        finally:
            server.waiting -= 1
        try:
            return await server.loop.run_in_executor(server.pool, function, *args)
        finally:
            server.places.release()

    # The requests.

    async def _serve(self):
        try:
            while not self.close_connection and self._lost is None:
                await self._one_request()
        except (_Gone, ConnectionError, TimeoutError) as e:
            # The client left, or stopped reading its answer (one that left
            # an idle connection is not worth a line).
            if self._started is not None:
                self.server.log.error(self.line(), "the client left before its answer was "
                                      "sent (%s)" % getattr(e, "kind", type(e).__name__))
        except Exception as e:  # noqa: BLE001  (one line, and the server goes on)
            logs.log_warning("Connection from %s ended by %s: %s", client_name(self.client_address),
                             type(e).__name__, e)
        finally:
            self.stop_deadline()
            self.free_request()
            self._close()

    def _close(self):
        """Closes the connection; after an answer, lingers (see
        `_LINGER_SECONDS`) for what the client still sends."""
        if self._lost is not None or self.transport.is_closing():
            return
        if self._eof or not self.transport.can_write_eof():
            self.transport.close()
            return
        self._discarding = True
        self.server.release(len(self._buffer))
        self._buffer.clear()
        self.transport.write_eof()
        self.read_on()
        self.server.loop.call_later(_LINGER_SECONDS, self.transport.close)

    async def _one_request(self):
        limits = self.server.limits
        self._start_deadline(limits.timeout_seconds)
        self._started = None
        self.command, self.path, self.request_version = "", "", "HTTP/1.1"
        self.headers = None
        try:
            line = await self.readline(_MAX_REQUEST_LINE + 1)
            if not line:
                self.close_connection = True
                return
            self._started = time.monotonic()
            if len(line) > _MAX_REQUEST_LINE:
                await self._send_error(414, "the request line is longer than %d bytes"
                                       % _MAX_REQUEST_LINE)
                return
            if not await self._parse_request(line):
                return
            method = self.METHODS.get(self.command)
            if method is None:
                await self._send_error(501, "unsupported method %s"
                                       % rest_api.printable(self.command, 20))
                return
            await method(self)
        except _Refused:
            self.close_connection = True
            self._started = self._started or time.monotonic()
            await self._send_error(503, "the server holds %d bytes of requests not yet answered, "
                                   "its most (--max_buffered_bytes); try again later"
                                   % self.server.limits.max_buffered_bytes,
                                   headers=[("Retry-After", "1")])
        except _ReadTimeout:
            self.close_connection = True
            if self._taken or self._buffer:  # Some of a request came.
                self._started = self._started or time.monotonic()
                await self._send_error(408, "the request did not arrive within %g s "
                                       "(--client_timeout_seconds)" % limits.timeout_seconds)
        finally:
            self.stop_deadline()
            self.free_request()

    async def _parse_request(self, line):
        """Reads the request line `line` (bytes) and the headers, as
        http.server's parse_request does (with its error answers); False
        where it answered an error."""
        self.command = None
        self.request_version = version = "HTTP/1.1"
        self.close_connection = True
        requestline = str(line, "iso-8859-1").rstrip("\r\n")
        words = requestline.split()
        if not words:
            return False
        if len(words) >= 3:
            version = words[-1]
            try:
                if not version.startswith("HTTP/"):
                    raise ValueError
                base_version_number = version.split("/", 1)[1]
                numbers = base_version_number.split(".")
                if len(numbers) != 2 or not all(n.isdigit() and len(n) <= 10 for n in numbers):
                    raise ValueError
                version_number = int(numbers[0]), int(numbers[1])
            except (ValueError, IndexError):
                await self._send_error(400, "Bad request version (%r)" % version)
                return False
            if version_number >= (1, 1):
                self.close_connection = False
            if version_number >= (2, 0):
                await self._send_error(505, "Invalid HTTP version (%s)" % base_version_number)
                return False
            self.request_version = version
        if not 2 <= len(words) <= 3:
            await self._send_error(400, "Bad request syntax (%r)" % requestline)
            return False
        command, path = words[:2]
        if len(words) == 2:
            self.close_connection = True
            if command != "GET":
                await self._send_error(400, "Bad HTTP/0.9 request type (%r)" % command)
                return False
        self.command, self.path = command, path
        if self.path.startswith("//"):  # Not a URL of another host.
            self.path = "/" + self.path.lstrip("/")
        fault = await self._read_headers()
        if fault:
            await self._send_error(431, fault)
            return False
        connection = self.headers.get("Connection", "").lower()
        if connection == "close":
            self.close_connection = True
        elif connection == "keep-alive":
            self.close_connection = False
        if (self.headers.get("Expect", "").lower() == "100-continue"
                and self.request_version >= "HTTP/1.1"):
            return await self._expect_100()
        return True

    async def _read_headers(self):
        """Reads the header lines into `self.headers` (http.client's
        HTTPMessage); None, or what is wrong with them (a 431)."""
        lines, total = [], 0
        while True:
            line = await self.readline(_MAX_HEADER_LINE + 1)
            if len(line) > _MAX_HEADER_LINE:
                return "Line too long"
            lines.append(line)
            total += len(line)
            if len(lines) > _MAX_HEADERS:
                return "Too many headers"
            if total > MAX_HEADER_BYTES:
                return "the request's headers are longer than %d bytes" % MAX_HEADER_BYTES
            if line in (b"\r\n", b"\n", b""):
                break
        self.headers = http.client.parse_headers(io.BytesIO(b"".join(lines)))
        return None

    async def _expect_100(self):
        # A body that would be refused is refused before the client sends it.
        refused = self.refused_body()
        if refused is not None:
            await self._send_error(refused.status, refused.message)
            return False
        self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        return True

    def refused_body(self):
        """An HTTPError for the body the request announces where it would
        be refused, else None (a subclass's check)."""
        return None

    # Answers.

    def line(self, status=None):
        """The request (method, path, client) and its answer's status."""
        request = "%s %s from %s" % (self.command or "-", rest_api.printable(self.path, 80) or "-",
                                     client_name(self.client_address))
        if status is None:
            return request
        took = "" if self._started is None else " in %d ms" % round(
            1000 * (time.monotonic() - self._started))
        return "%s: %d%s" % (request, status, took)

    async def send(self, status, data, headers):
        """Sends the status line, `headers` ((name, value) pairs) and, but
        for a HEAD request, `data` (bytes); returns once all is handed to
        the kernel. Raises _Gone where the client left, TimeoutError where
        it did not take the answer within --client_timeout_seconds."""
        if self._lost is not None:
            raise _Gone(self._lost)
        self.stop_deadline()  # The request is read (or, once answered, left unread).
        lines = ["HTTP/1.1 %d %s" % (status, http.HTTPStatus(status).phrase),
                 "Server: predict.py", "Date: " + email.utils.formatdate(usegmt=True)]
        lines += ["%s: %s" % header for header in headers]
        if self.close_connection:
            lines.append("Connection: close")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "strict")
        self.transport.writelines((head,) if self.command == "HEAD" else (head, data))
        loop = self.server.loop
        deadline = loop.time() + self.server.limits.timeout_seconds
        timer = None
        try:
            while self._writing_paused or (self.transport.is_closing() and self._lost is None):
                if loop.time() >= deadline:
                    self.transport.abort()
                    raise TimeoutError("the answer was not taken in time")
                if timer is None:
                    timer = loop.call_at(deadline, self._wake)
                await self._wait()
        finally:
            if timer is not None:
                timer.cancel()
        if self._lost is not None:
            raise _Gone(self._lost)

    async def answer(self, status, body, held=None, headers=(), detail=None):
        """Sends `body` as JSON, then logs the answer (an error with its
        message, or `detail` where the log should say more)."""
        await self.answer_bytes(status, json_bytes(body), body.get("error"), held, headers,
                                 detail)

    async def answer_bytes(self, status, data, message=None, held=None, headers=(),
                            detail=None):
        """`_answer` of a body already encoded as `data`; `message`: its
        error."""
        await self.send(status, data, (("Content-Type", "application/json"),
                                        ("Content-Length", str(len(data)))) + tuple(headers))
        # Logged once sent (an answer the client did not take has the line
        # of `_serve` instead).
        if status >= 400:
            self.server.log.error(self.line(status), detail or message)
        else:
            self.server.log.answered(self.line(status), held)

    async def _send_error(self, code, message=None, headers=()):
        """Every error answer is JSON, {"error": ...}, and ends the
        connection (the rest of the request may be unread)."""
        self.close_connection = True
        await self.answer(code, {"error": message or http.HTTPStatus(code).phrase},
                          headers=headers)
