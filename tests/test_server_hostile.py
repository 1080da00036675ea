"""predict.py's server against hostile and careless requests: each is
answered with an HTTP error and a JSON {"error": ...} that names what was
wrong (checked before any tensor is built), and the server goes on
answering a known-good request exactly as before. Also its limits (request
size, instances, text read, requests in flight, connections, slow and idle
clients), the text it cuts where the model stops reading (answers equal to
the whole text's), its log and its start-up checks."""

import base64
import http.client
import json
import logging
import os
import random
import re
import select
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from absl import flags
from absl.testing import flagsaver

from scriptkit import classifier_features
from scriptkit import errors
from scriptkit import exported_model
import predict
from scriptkit import rest_api
from scriptkit import rest_server
import run_classifier
from scriptkit import serving
import test_serving
import tiny
import tokenization

FLAGS = flags.FLAGS
PREDICT = "/v1/models/m:predict"
GOOD = {"instances": [{"text_a": "the film is good", "text_b": "what ends well"}]}
# Limits small enough to reach in a test.
LIMITS = rest_api.ServerLimits(max_request_bytes=300000, max_instances=16,
                              max_text_chars=20000, max_windows_per_request=1000,
                              max_requests_in_flight=4, max_connections=16, timeout_seconds=30)


class _Servers:
    """Servers of the tests' models, started on free ports and stopped at
    the end of the module."""

    def __init__(self, export_dirs):
        self.models = {name: exported_model.Model(os.path.dirname(path))
                       for name, path in export_dirs.items() if name in ("pair", "ner", "swag")}
        self._running = []

    def start(self, name="pair", **limits):
        server = rest_server.make_server(self.models[name], "127.0.0.1", 0, "m",
                                     limits=LIMITS._replace(**limits), log_every_seconds=30)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self._running.append(server)
        return server

    def stop(self):
        for server in self._running:
            server.shutdown()
            server.server_close()


@pytest.fixture(scope="module")
def servers(exports):
    running = _Servers(exports)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def pair(servers):
    """The pair classifier's server and its answer to GOOD."""
    server = servers.start()
    status, answer = _post(server, GOOD)
    assert status == 200, answer
    return server, answer


def _post(server, body, path=PREDICT, method="POST", headers=None):
    """(status, decoded JSON answer) of a request; `body` is JSON-encoded
    unless it is bytes."""
    return _post_from(server, body, path, method, headers)[:2]


def _post_from(server, body, path=PREDICT, method="POST", headers=None):
    """_post's (status, answer) and the client's address as the server's log
    names it ("127.0.0.1:PORT"), to find the request's own log line."""
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    connection = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=60)
    try:
        connection.connect()
        client = "127.0.0.1:%d" % connection.sock.getsockname()[1]
        connection.request(method, path, data, headers or {})
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"null"), client
    finally:
        connection.close()


def _exchange(server, data, half_close=False):
    """(status, headers, body) of the answer to `data` sent as it is on a
    new connection (then closed for writing, with `half_close`)."""
    with socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=60) as sock:
        sock.sendall(data)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        return _read_answer(sock)


def _read_answer(sock):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1]) if lines[0] else None
    headers = {name.strip().lower(): value.strip()
               for name, _, value in (line.partition(":") for line in lines[1:])}
    while len(body) < int(headers.get("content-length", 0)):
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return status, headers, body


def _same_as_before(pair):
    """The known-good request gets the same answer as at the start."""
    server, answer = pair
    assert _post(server, GOOD) == (200, answer)


def _ids(ids):
    return {"signature_name": "serving_ids",
            "inputs": {"input_ids": ids, "input_mask": [[1] * len(row) for row in ids],
                       "segment_ids": [[0] * len(row) for row in ids]}}


def _nested(depth, value='"x"'):
    return "[" * depth + value + "]" * depth


# (request body, status, part of the error message).
BAD_REQUESTS = [
    # 555 bytes that made TensorFlow abort the process: a rank-255 text.
    ('{"instances": [{"text_a": %s, "text_b": "b"}]}' % _nested(254), 400,
     "nests 257 levels deep; this server reads at most 16"),
    ('{"signature_name": "serving_ids", "inputs": {"input_ids": %s, "input_mask": [[1]], '
     '"segment_ids": [[0]]}}' % _nested(254, "1"), 400, "nests 256 levels deep"),
    (_nested(1000), 400, "nests 1000 levels deep"),  # json.loads would recurse.
    # Ranks the signature does not have, below the depth limit.
    ('{"inputs": {"text_a": [[["a"]]], "text_b": [[["b"]]]}}', 400,
     "input text_a: expected a list of text, found lists nested deeper"),
    ('{"instances": [{"text_a": ["a"], "text_b": "b"}]}', 400,
     "instances[0]: input text_a: expected one text, found lists nested deeper"),
    ('{"signature_name": "serving_ids", "inputs": {"input_ids": [1, 2], "input_mask": [1, 1], '
     '"segment_ids": [0, 0]}}', 400, "input input_ids: expected lists nested 2 deep of integer"),
    # Wrong types everywhere.
    ('{"signature_name": [1], "instances": [{"text_a": "a", "text_b": "b"}]}', 400,
     '"signature_name" must be text, not a list of 1 value'),
    ('{"signature_name": "nope", "instances": [{"text_a": "a"}]}', 400,
     "no signature 'nope'; the model has explain, serving_default, serving_ids"),
    ('{"signature_name": "%s", "instances": []}' % ("x" * 5000), 400, "xxx'...; the model has"),
    ('{"instances": [{"text_a": 5, "text_b": "b"}]}', 400,
     "instances[0]: input text_a: expected text, found the number 5"),
    ('{"instances": [{"text_a": null, "text_b": "b"}]}', 400, "expected text, found null"),
    ('{"instances": [{"text_a": {"b64": 5}, "text_b": "b"}]}', 400, "expected text, found an "
     "object of b64"),
    ('{"instances": [{"text_a": {"b64": "not base64!"}, "text_b": "b"}]}', 400, "bad base64"),
    ('{"instances": [{"text_a": {"b64": "%s"}, "text_b": "b"}]}'
     % base64.b64encode(b"caf\xe9").decode(), 400, "holds bytes that are not UTF-8 text"),
    ('{"instances": [{"text_a": "ok \\ud800", "text_b": "b"}]}', 400,
     "a lone surrogate (U+D800) at character 3 is not text"),
    ('{"instances": [{"text_a": "a", "text_b": "\\udfff"}]}', 400,
     "input text_b: a lone surrogate"),
    ('[1, 2]', 400, "the request must be a JSON object, not a list of 2 values"),
    ('"text"', 400, "the request must be a JSON object, not the text 'text'"),
    ('{not json', 400, "JSON Parse error"),
    ('', 400, "JSON Parse error"),
    ('{"instances": [NaN]}', 400, "NaN is not JSON"),
    ('{"instances": [Infinity]}', 400, "Infinity is not JSON"),
    ('{"instances": [-Infinity]}', 400, "-Infinity is not JSON"),
    ('{"instances": [1e999]}', 400, "the number 1e999 is out of range"),
    ('{"instances": [%s]}' % ("7" * 5000), 400, "a number of 5000 characters"),
    # Integers the dtype cannot hold were taken modulo 2**32; booleans as 1/0.
    (json.dumps(_ids([[2, 2 ** 32 + 5]])), 400,
     "input input_ids: 4294967301 is out of the range of int32 (-2147483648 to 2147483647)"),
    (json.dumps(_ids([[2, -2 ** 31 - 1]])), 400, "-2147483649 is out of the range of int32"),
    (json.dumps(_ids([[2, True]])), 400, "input input_ids: expected integer (int32), found true"),
    (json.dumps(_ids([[2, 1.5]])), 400, "expected integer (int32), found the number 1.5"),
    (json.dumps(_ids([[2, "5"]])), 400, "expected integer (int32), found the text '5'"),
    (json.dumps(_ids([[2, 5], [3]])), 400, "lists of 2 and of 1 values side by side"),
    (json.dumps(_ids([[]])), 400, "input input_ids: an empty list"),
    (json.dumps(_ids([[2] * 65])), 400, "input input_ids: sequences of 65; the model takes at "
                                        "most 64 (its max_position_embeddings)"),
    # The layout of the request.
    ('{"instances": []}', 400, '"instances" must be a non-empty list, not a list of 0 values'),
    ('{"instances": {"text_a": "a"}}', 400, '"instances" must be a non-empty list, not an '
     'object'),
    ('{"instances": ["a", "b"]}', 400,
     'instances[0] must be an object of the inputs text_a, text_b, not the text'),
    ('{"instances": [{"text_a": "a"}]}', 400,
     "instances[0]: the signature serving_default takes text_a, text_b; missing: text_b"),
    ('{"instances": [{"text_a": "a", "text_b": "b"}, {"text_a": "a", "text_b": "b", '
     '"text_c": "c"}]}', 400, "instances[1]: the signature serving_default takes text_a, "
                              "text_b; unknown: text_c"),
    ('{"instances": [{"text_a": "a", "text_b": "b"}], "inputs": {}}', 400, "not both"),
    ('{"inputs": ["a"]}', 400, '"inputs" must be an object of the inputs text_a, text_b'),
    ('{"inputs": {"text_a": ["a", "b"], "text_b": ["c"]}}', 400,
     "input text_a has 2 instances, input text_b 1; every input needs one value per instance"),
    ('{"inputs": {"text_a": [], "text_b": []}}', 400, "input text_a: an empty list"),
    ('{"signature_name": "serving_default"}', 400, 'a request needs "instances" (row format) '
     'or "inputs" (columnar format)'),
    (json.dumps({"instances": [{"text_a": "a", "text_b": "b"}] * 17}), 400,
     "17 instances in one request; this server takes at most 16 (--max_instances)"),
    (json.dumps({"inputs": {"text_a": ["a"] * 17, "text_b": ["b"] * 17}}), 400,
     "input text_a: 17 instances in one request; this server takes at most 16"),
    # Text the model reads would pass 20000 characters: one long word
    # (no place to cut it) and, all texts together, long words of a pair.
    (json.dumps({"instances": [{"text_a": "x" * 20001, "text_b": "b"}]}), 400,
     "input text_a: the request's texts hold more than 20000 characters that the model "
     "reads (--max_text_chars)"),
    (json.dumps({"instances": [{"text_a": "x" * 9000, "text_b": "b"}] * 3}), 400,
     "more than 20000 characters"),
    # An op error: only its message, no frames, paths or node names.
    (json.dumps(_ids([[2, 99999]])), 400, "indices[1] = 99999 is not in [0, 33)"),
    (b'{"instances": [{"text_a": "caf\xe9", "text_b": ""}]}', 400,
     "the request body is not UTF-8 (invalid continuation byte at byte 30)"),
]


@pytest.mark.parametrize("body, status, message", BAD_REQUESTS,
                         ids=["%d-%s" % (i, m) for i, (_, _, m) in enumerate(BAD_REQUESTS)])
def test_bad_requests_are_refused_with_what_was_wrong(pair, body, status, message):
    server, _ = pair
    data = body if isinstance(body, bytes) else body.encode()
    got, answer = _post(server, data)
    assert got == status and message in answer["error"], answer
    # Nothing of the server in the message: its files, frames, versions.
    for secret in (os.path.dirname(predict.__file__), sys.prefix, "File \"", "Detected at",
                   "{{", "Traceback"):
        assert secret not in answer["error"]
    _same_as_before(pair)


def test_single_input_models_name_missing_and_unknown_inputs(servers):
    server = servers.start("ner")
    assert _post(server, {"instances": [{"txt": "Jackson went"}]}) == (400, {
        "error": "instances[0]: the signature serving_default takes text; missing: text; "
                 "unknown: txt"})
    assert _post(server, {"instances": [{"text": "a", "key": 3}]})[1]["error"].endswith(
        "unknown: key")
    # An instance's "id" is no input: it comes back in its prediction.
    status, answer = _post(server, {"instances": [{"text": "a", "id": 3}]})
    assert status == 200 and answer["predictions"][0]["id"] == 3
    assert _post(server, {"inputs": {"texts": ["a"]}})[1]["error"] == (
        "\"inputs\": the signature serving_default takes text; missing: text; unknown: texts")
    # The input's value itself, as TensorFlow Serving takes it; bytes too.
    bare = _post(server, {"instances": ["Jackson went", {"b64": base64.b64encode(
        "Jackson went".encode()).decode()}]})
    named = _post(server, {"instances": [{"text": "Jackson went"}] * 2})
    assert bare == named and bare[0] == 200


def test_json_10000_levels_deep_is_a_400_and_the_server_goes_on(pair):
    """A request nesting 10,000 lists (json.loads would recurse past
    Python's limit) is refused before it is decoded; the limit is 16
    levels: a request of 17 is refused by it, one of 16 decoded and checked
    further."""
    server, _ = pair
    assert _post(server, _nested(10000).encode()) == (400, {
        "error": "the request's JSON nests 10000 levels deep; this server reads at most 16"})
    _same_as_before(pair)
    status, answer = _post(server, ('{"instances": [{"text_a": %s, "text_b": "b"}]}'
                                    % _nested(14)).encode())
    assert (status, answer["error"]) == (400, "the request's JSON nests 17 levels deep; this "
                                              "server reads at most 16")
    status, answer = _post(server, ('{"instances": [{"text_a": %s, "text_b": "b"}]}'
                                    % _nested(13)).encode())
    assert (status, answer["error"]) == (400, "instances[0]: input text_a: expected one text, "
                                              "found lists nested deeper")
    _same_as_before(pair)


def test_json_depth_counts_brackets_outside_strings_in_one_pass():
    assert rest_api.json_depth(b'"[[["') == 0
    assert rest_api.json_depth(b'{"a": ["[", "\\"[", {"b": "\\\\"}], "c": []}') == 3
    assert rest_api.json_depth(b'{"a": "unterminated [[[') == 1
    assert rest_api.json_depth(b"[[]][[[]]]") == 3
    assert rest_api.json_depth(b"") == 0
    # Quotes and backslashes that would make a backtracking pattern
    # quadratic: megabytes of them, at once.
    for data, depth in ((b'"' + b'\\"' * 1000000 + b'\\', 0), (b'["' * 1000000, 500000),
                        (b"[" * 3000000, 3000000)):
        assert rest_api.json_depth(data) == depth


HTTP_ERRORS = [
    # A body shorter than its Content-Length, then the end of the sending.
    (b"POST %s HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"instances\": []}" % PREDICT.encode(),
     True, 400, "the body ended after 17 of the 100 bytes of its Content-Length"),
    (b"POST %s HTTP/1.1\r\n\r\n" % PREDICT.encode(), False, 411, "needs a Content-Length"),
    (b"POST %s HTTP/1.1\r\nContent-Length: -5\r\n\r\n" % PREDICT.encode(), False, 400,
     "the Content-Length -5 is not one number of bytes"),
    (b"POST %s HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\n" % PREDICT.encode(),
     False, 400, "the Content-Length 5, 7 is not one number"),
    (b"POST %s HTTP/1.1\r\nContent-Length: %s\r\n\r\n" % (PREDICT.encode(), b"9" * 40), False,
     400, "is not one number of bytes"),
    (b"POST %s HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n" % PREDICT.encode(), False,
     413, "request body of 99999999999 bytes exceeds the limit of 300000 "
          "(--max_request_bytes)"),
    (b"POST %s HTTP/1.1\r\nContent-Length: 400000\r\nExpect: 100-continue\r\n\r\n"
     % PREDICT.encode(), False, 413, "request body of 400000 bytes exceeds the limit of "
                                     "300000"),  # Refused before the body is sent.
    (b"POST %s HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"
     % PREDICT.encode(), False, 400, "either a Content-Length or a Transfer-Encoding"),
    (b"POST %s HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n" % PREDICT.encode(), False,
     501, "chunked only, not gzip, chunked"),
    (b"POST %s HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n" % PREDICT.encode(), False,
     400, "a malformed chunk"),
    (b"POST %s HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"in" % PREDICT.encode(),
     True, 400, "ended inside a chunk"),
    (b"POST %s HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n" % (PREDICT.encode(),
                                                                       400000), False, 413,
     "request body of more than 300000 bytes exceeds the limit"),
    (b"GET /v1/models/other HTTP/1.1\r\n\r\n", False, 404,
     "Servable not found for request: Latest(other)"),
    (b"POST /v1/models/m/versions/7:predict HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", False,
     404, "Servable not found for request: Specific(m, 7)"),
    (b"GET /v1/models/m/../../../etc/passwd HTTP/1.1\r\n\r\n", False, 404,
     "Malformed request: GET /v1/models/m/../../../etc/passwd"),
    (b"GET /v1/models/m/%2e%2e/%2e%2e/secret HTTP/1.1\r\n\r\n", False, 404, "Malformed"),
    (b"GET /%s HTTP/1.1\r\n\r\n" % (b"a" * 9000), False, 414, "longer than 8192 bytes"),
    (b"GET /v1/models/m HTTP/1.1\r\n" + b"X-A: b\r\n" * 101 + b"\r\n", False, 431,
     "Too many headers"),
    (b"GET /v1/models/m HTTP/1.1\r\nX-A: %s\r\n\r\n" % (b"b" * 65536), False, 431,
     "Line too long"),
    # Headers of at most 100 lines of 64 KiB each, but 64 KiB in all.
    (b"GET /v1/models/m HTTP/1.1\r\n" + b"X-A: %s\r\n" % (b"b" * 4000) * 17 + b"\r\n",
     False, 431, "the request's headers are longer than 65536 bytes"),
    (b"PUT %s HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}" % PREDICT.encode(), False, 405,
     "PUT is not answered here"),
    (b"DELETE /v1/models/m HTTP/1.1\r\n\r\n", False, 405, "DELETE is not answered here"),
    (b"FOO /v1/models/m HTTP/1.1\r\n\r\n", False, 501, "unsupported method FOO"),
    (b"GET /v1/models/m HTTP/9.1\r\n\r\n", False, 505, "Invalid HTTP version"),
    (b"POST /v1/models/m/metadata HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", False, 400,
     "this server answers :predict requests"),
]


@pytest.mark.parametrize("request_bytes, half_close, status, message", HTTP_ERRORS,
                         ids=["%d-%d-%s" % (i, case[2], case[3])
                              for i, case in enumerate(HTTP_ERRORS)])
def test_http_errors_are_json_and_name_the_fault(pair, request_bytes, half_close, status,
                                                 message):
    server, _ = pair
    got, headers, body = _exchange(server, request_bytes, half_close)
    assert got == status, body
    assert headers["content-type"] == "application/json"
    assert message in json.loads(body)["error"], body
    assert headers["server"] == "predict.py"  # No Python or library versions.
    _same_as_before(pair)


def test_chunked_bodies_are_read(pair):
    server, answer = pair
    body = json.dumps(GOOD).encode()
    chunked = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(part), part)
                       for part in (body[:10], body[10:])) + b"0\r\nX-Trailer: 1\r\n\r\n"
    status, _, got = _exchange(server, b"POST %s HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
                                       b"Connection: close\r\n\r\n%s" % (PREDICT.encode(),
                                                                         chunked))
    assert (status, json.loads(got)) == (200, answer)


def test_head_answers_without_a_body_and_a_get_body_ends_the_connection(pair):
    server, _ = pair
    with socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=60) as sock:
        sock.sendall(b"HEAD /v1/models/m HTTP/1.1\r\nConnection: close\r\n\r\n")
        status, headers, _ = _read_answer(sock)
        assert status == 405 and headers["allow"] == "GET, POST"
        assert sock.recv(100) == b""  # No body; the connection is closed.
    status, headers, body = _exchange(server, b"GET /v1/models/m HTTP/1.1\r\n"
                                              b"Content-Length: 5\r\n\r\nabcde")
    assert status == 200 and headers["connection"] == "close"
    assert json.loads(body)["model_version_status"][0]["state"] == "AVAILABLE"


def test_an_internal_error_is_a_500_without_details(pair, monkeypatch, caplog):
    server, _ = pair

    def broken(*args):
        raise KeyError(os.path.join(sys.prefix, "secret"))

    monkeypatch.setattr(rest_api, "predict_response", broken)
    with caplog.at_level(logging.WARNING, logger="tensorflow"):
        status, answer, client = _post_from(server, GOOD)
        _wait_for_lines(caplog, [client])
    assert (status, answer) == (500, {"error": "internal error (KeyError); the server's log "
                                               "has more"})
    # One line, with the client's address, is all its request's thread logged.
    thread = _records_of(caplog, client)[0].thread
    logged = [r.getMessage() for r in caplog.records if r.thread == thread]
    assert len(logged) == 1 and re.match(
        r"POST /v1/models/m:predict from 127\.0\.0\.1:\d+: 500 in \d+ ms: KeyError: '.*secret' "
        r"\(in test_server_hostile\.py, line \d+\)$", logged[0]), logged
    monkeypatch.undo()
    _same_as_before(pair)


# ---------------------------------------------------------------------------
# Text is cut where the model stops reading, and answers do not change.

def test_long_texts_are_cut_where_the_model_stops_reading(servers, exports,
                                                          caplog):
    server = servers.start()  # Its first answer has a log line of its own.
    words = "the film is good what ends well it".split()
    rng = random.Random(5)

    def text(count, join=" "):
        return join.join(rng.choice(words) for _ in range(count))

    # 22 word chunks are read of each text (max_seq_length 24, less [CLS]
    # and [SEP]): the cut falls after a final sigma, a CJK ideograph,
    # punctuation, zero-width and control characters and a 202-character word.
    pairs = [(text(3000), "good"), ("good", text(3000)), (text(3000), text(3000)),
             ("film " * 21 + "ΣΑΣ film ΣΑΣ" * 500, ""),
             ("中文" * 5000, "film中" * 2000),
             ("good.film\u200b " * 30 + "x" * 202 + " film" * 500, "the\u00ad film\t" * 400),
             ("ab" * 101 + " film" * 2000, "ab" * 75 + " good"),
             ("the film is good", "what ends well")]  # Read whole: not cut.
    with caplog.at_level(logging.INFO, logger="tensorflow"):
        status, answer, client = _post_from(server, {"instances": [{"text_a": a, "text_b": b}
                                                                   for a, b in pairs]})
        _wait_for_lines(caplog, [client])
    assert status == 200, answer
    expected = test_serving._run_signature(exports["pair"], "serving_default", {
        "text_a": [a for a, _ in pairs], "text_b": [b for _, b in pairs]})
    np.testing.assert_allclose([p["probabilities"] for p in answer["predictions"]],
                               expected["probabilities"], atol=1e-6)
    assert [p["labels"] for p in answer["predictions"]] == [
        label.decode() for label in expected["labels"]]
    # The log says what was not read, on the answer's own line (found by its
    # client's address: other servers log lines of their own meanwhile).
    lines = [r.getMessage() for r in _records_of(caplog, client)]
    assert len(lines) == 1 and re.match(r"POST \S+ from \S+: 200 in ", lines[0]), lines
    line = lines[0]
    assert re.search(r"\(8 instances; text_a: 6 texts cut where the model stops reading, \d+ "
                     r"characters not read; text_b: 4 texts cut", line), line


def test_multiple_choice_texts_are_cut_and_answers_do_not_change(servers, exports):
    server = servers.start("swag")
    long = "the film is good " * 2000
    rows = [("The film", "It", ["ends well.", long, "ends badly.", "is good"]),
            (long, long, ["ends.", "goes on" * 3000, long, "well"])]
    status, answer = _post(server, {"instances": [
        {"context": c, "question": q, "endings": e} for c, q, e in rows]})
    assert status == 200, answer
    expected = test_serving._run_signature(exports["swag"], "serving_default", {
        "context": [c for c, _, _ in rows], "question": [q for _, q, _ in rows],
        "endings": [e for _, _, e in rows]})
    np.testing.assert_allclose([p["probabilities"] for p in answer["predictions"]],
                               expected["probabilities"], atol=1e-6)
    # The endings count towards --max_instances, one each.
    status, answer = _post(server, {"instances": [
        {"context": "a", "question": "b", "endings": ["c"] * 4}] * 5})
    assert status == 400 and "input endings: 20 texts in one request" in answer["error"]
    status, answer = _post(server, {"instances": [
        {"context": "a", "question": "b", "endings": ["c"] * 4},
        {"context": "a", "question": "b", "endings": ["c"] * 3}]})
    assert status == 400 and "instances[1]: input endings has the dimensions [3], " \
                             "instances[0] [4]" in answer["error"]
    status, answer = _post(server, {"signature_name": "serving_ids", "inputs": {
        name: [[[1, 2]] * 4] * 5 for name in serving.FEATURE_NAMES}})
    assert status == 400 and "input input_ids: 20 sequences in one request" in answer["error"]


def test_a_document_the_tagger_reads_whole_is_not_cut(servers, exports):
    server = servers.start("ner")
    texts = ["Jackson went to Kingston! " * 300, "中文 film"]
    status, answer = _post(server, {"instances": texts})
    assert status == 200
    expected = test_serving._run_signature(exports["ner"], "serving_default", {"text": texts})
    assert [p["num_words"] for p in answer["predictions"]] == list(expected["num_words"])
    assert answer["predictions"][0]["num_words"] == 1500  # Every word tagged.
    status, answer = _post(server, {"instances": ["Jackson went to Kingston! " * 800]})
    assert status == 400 and "more than 20000 characters that the model reads" in (
        answer["error"])


def _tokenizer(folder, do_lower_case):
    return tokenization.FullTokenizer(tiny.write_vocab(str(folder), test_serving.WORDS),
                                      do_lower_case)


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_a_cut_text_gives_the_first_tokens_of_the_whole(do_lower_case, tmp_path):
    """`read_length` against the original tokenizer, on random texts of
    characters that test every rule of it."""
    tokenizer = _tokenizer(tmp_path, do_lower_case)
    alphabet = (list("abΣσςΑ.,!_ 中文\t\n\r\u3000\u00a0\u2028\u200b\u00ad\x00\ufffd\x1f") +
                ["\u0301", "e\u0301", "İ", "ß", "ǅ", "٣", "ab" * 101, "film", "  "])
    rng = random.Random(11)
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        words = rng.randint(1, 8)
        end = rest_api.read_length(text, words, 10 ** 6)
        whole, cut = tokenizer.tokenize(text), tokenizer.tokenize(text[:end])
        assert len(cut) >= min(words, len(whole)), (text, end)
        assert whole[:len(cut)] == cut, (text, end)
    assert rest_api.read_length("a " * 50, 3, 10 ** 6) == 5
    assert rest_api.read_length("a " * 50, None, 10 ** 6) == 100
    assert rest_api.read_length("a " * 50, None, 99) is None
    assert rest_api.read_length("x" * 10 ** 6 + " a", 1, 1000) is None


def test_a_word_character_is_always_a_word():
    """What `read_length` counts on: a character that Python's \\w matches
    gives at least one token on its own, lower-cased or not."""
    every = "".join(chr(cp) for cp in range(sys.maxunicode + 1) if not 0xD800 <= cp < 0xE000)
    # Each between two CJK ideographs (words by themselves, on their own):
    # a character that gave no token would leave two of them side by side.
    chars = [char for char in re.findall(r"\w", every) if char != "中"]
    assert len(chars) > 100000
    for do_lower_case in (True, False):
        tokens = tokenization.BasicTokenizer(do_lower_case).tokenize("中".join(chars))
        assert len(tokens) >= 2 * len(chars) - 1
        empty = [i for i in range(1, len(tokens)) if tokens[i] == tokens[i - 1] == "中"]
        assert not empty, empty[:10]


@pytest.mark.parametrize("config", [{"max_seq_length": 12},
                                    {"max_seq_length": 12, "doc_stride": 3, "max_windows": 4}])
def test_cut_pairs_give_the_features_of_the_whole(config, tmp_path):
    """A pair cut after `words_read` words per text gives the features
    --do_predict makes of the whole pair (classifier_features.convert_example):
    the pair cut to fit, or a windowed first text's windows."""
    tokenizer = _tokenizer(tmp_path, True)
    words_a, words_b = (rest_api.words_read(config, name) for name in ("text_a", "text_b"))
    assert words_b == 10 and words_a == (10 if len(config) == 1 else 3 * 3 + 10)
    rng = random.Random(3)
    for _ in range(300):
        text_a, text_b = (" ".join(rng.choice(["film", "ab" * 5, "中文", "good.", "x", "is"])
                                   for _ in range(rng.randint(0, most)))
                          for most in (40, 16))
        cut_a = text_a[:rest_api.read_length(text_a, words_a, 10 ** 6)]
        cut_b = text_b[:rest_api.read_length(text_b, words_b, 10 ** 6)]
        features = [[f.input_ids for f in classifier_features.convert_example(
            0, run_classifier.InputExample("x", a, b or None, "0"), ["0"], 12, tokenizer,
            doc_stride=config.get("doc_stride"), max_windows=config.get("max_windows", 0))[0]]
            for a, b in ((text_a, text_b), (cut_a, cut_b))]
        assert features[0] == features[1], (text_a, text_b)


def test_what_the_exports_read():
    windows = {"max_seq_length": 12, "doc_stride": 3, "max_windows": 4}
    assert rest_api.words_read(dict(windows, max_windows=0), "text_a") is None
    assert rest_api.words_read({"max_seq_length": 16, "doc_stride": 4}, "text") is None
    assert rest_api.words_read({"max_seq_length": 80}, "endings") == 78
    assert rest_api.words_read({}, "text_a") is None


def test_pairs_are_cut_alike_whatever_the_length_past_the_cut():
    """`serving.pair_lengths` gives the same lengths for a side of at least
    max_tokens pieces whatever its length: why a cut text reads alike."""
    max_tokens = 9
    lengths = np.arange(0, 3 * max_tokens)
    a, b = (x.ravel().astype(np.int32) for x in np.meshgrid(lengths, lengths))
    whole = [np.asarray(x) for x in serving.pair_lengths(a, b, max_tokens)]
    for cap in (max_tokens, max_tokens + 1, 2 * max_tokens):
        capped = serving.pair_lengths(np.minimum(a, cap), np.minimum(b, cap), max_tokens)
        for one, other in zip(whole, capped):
            np.testing.assert_array_equal(one, np.asarray(other))


# ---------------------------------------------------------------------------
# Limits on the server: in flight, connections, slow and idle clients.

def _records_of(caplog, client):
    """The log records of the requests from `client` ("HOST:PORT"); other
    servers in this module may log at any time (a summary line, a previous
    test's last request), so a test counts only its own clients' lines."""
    return [r for r in caplog.records if " from %s:" % client in r.getMessage()]


def _wait_for_lines(caplog, clients):
    """Waits until every one of `clients` has a log line: a server logs an
    answer only once it is sent."""
    _wait_for(lambda: all(_records_of(caplog, client) for client in clients),
              "log lines of %s" % ", ".join(clients))


def _wait_for(condition, what):
    for _ in range(3000):
        if condition():
            return
        time.sleep(0.01)
    raise AssertionError("never happened: " + what)


def test_requests_beyond_the_limit_in_flight_wait_for_a_place(servers, monkeypatch):
    server = servers.start(max_requests_in_flight=2)
    answer = _post(server, GOOD)
    release, lock = threading.Event(), threading.Lock()
    running = [0, 0]  # now, most
    original = rest_api.predict_response

    def held(*args):
        with lock:
            running[0] += 1
            running[1] = max(running)
        release.wait(60)
        with lock:
            running[0] -= 1
        return original(*args)

    monkeypatch.setattr(rest_api, "predict_response", held)
    answers = [None] * 5

    def client(i):
        answers[i] = _post(server, GOOD)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(5)]
    for thread in threads:
        thread.start()
    # Two run, three wait for a place (read, holding their connections).
    _wait_for(lambda: running[0] == 2 and server.waiting == 3, "2 running, 3 waiting")
    release.set()
    for thread in threads:
        thread.join()
    assert running[1] == 2 and [status for status, _ in answers] == [200] * 5
    # Requests in flight together may run as one batch: the same answer, to
    # float rounding.
    for _, other in answers:
        (one,), (got,) = answer[1]["predictions"], other["predictions"]
        assert got["labels"] == one["labels"]
        np.testing.assert_allclose(got["probabilities"], one["probabilities"], atol=1e-6)


def test_connections_beyond_the_limit_are_answered_503(servers):
    server = servers.start(max_connections=2)
    port = server.server_address[1]
    idle = [socket.create_connection(("127.0.0.1", port), timeout=60) for _ in range(2)]
    try:
        _wait_for(lambda: server.connections == 2, "2 connections")
        with socket.create_connection(("127.0.0.1", port), timeout=60) as third:
            status, headers, body = _read_answer(third)
        assert status == 503 and headers["connection"] == "close"
        assert "the server has 2 connections open, its most (--max_connections)" in (
            json.loads(body)["error"])
    finally:
        for sock in idle:
            sock.close()
    _wait_for(lambda: server.connections == 0, "connections closed")
    assert _post(server, GOOD)[0] == 200


def test_slow_and_idle_clients_are_cut_off(servers):
    server = servers.start(timeout_seconds=1)
    port = server.server_address[1]
    # Slowloris: a header byte now and then, never the end of the headers.
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(b"POST %s HTTP/1.1\r\nX-Slow: " % PREDICT.encode())
        for sent in range(100):
            if select.select([sock], [], [], 0.1)[0]:  # The server answers, or closes.
                break
            try:
                sock.sendall(b"a")
            except OSError:  # Closed by the server.
                break
        assert sent < 99  # Cut off within about a second, not 10.
        try:
            status, _, body = _read_answer(sock)
        except ConnectionResetError:  # A byte of ours came as the server closed.
            status = None
    if status is not None:
        assert status == 408 and "the request did not arrive within 1 s " \
                                 "(--client_timeout_seconds)" in json.loads(body)["error"]
    # A body that never ends.
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(b"POST %s HTTP/1.1\r\nContent-Length: 1000\r\n\r\n{" % PREDICT.encode())
        status, _, body = _read_answer(sock)
        assert status == 408 and sock.recv(10) == b""
    # An idle kept-alive connection is closed without an answer.
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        assert sock.recv(10) == b""
    _wait_for(lambda: server.connections == 0, "connections closed")
    assert _post(server, GOOD)[0] == 200


def test_a_client_that_leaves_early_is_one_log_line(servers, monkeypatch, caplog):
    server = servers.start()
    entered, left = threading.Event(), threading.Event()
    original = rest_api.predict_response

    def after_the_client_left(*args):
        entered.set()
        left.wait(60)
        return original(*args)

    monkeypatch.setattr(rest_api, "predict_response", after_the_client_left)
    with caplog.at_level(logging.INFO, logger="tensorflow"):
        with socket.create_connection(("127.0.0.1", server.server_address[1])) as sock:
            # Closing sends a reset: the server's answer then fails at once.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
            client = "127.0.0.1:%d" % sock.getsockname()[1]
            body = json.dumps(GOOD).encode()
            sock.sendall(b"POST %s HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s"
                         % (PREDICT.encode(), len(body), body))
            assert entered.wait(60)
        left.set()
        # The loop may see the reset, and close the connection, before the
        # answer's failed write is logged: wait for both.
        _wait_for_lines(caplog, [client])
        _wait_for(lambda: server.connections == 0, "the connection closed")
    # A previous test's server may log its last request's line late, after
    # its client has already read the answer: only this client's lines count.
    lines = [r.getMessage() for r in _records_of(caplog, client)]
    assert len(lines) == 1 and re.match(
        r"POST /v1/models/m:predict from 127\.0\.0\.1:\d+: the client left before its answer "
        r"was sent \((ConnectionResetError|BrokenPipeError)\)$", lines[0]), lines


# ---------------------------------------------------------------------------
# The log.

def test_the_log_has_a_line_per_request_at_a_human_pace_else_a_summary(caplog):
    now = [100.0]
    log = rest_server._RequestLog(30, clock=lambda: now[0])
    # The running servers' threads may log a line of their own meanwhile:
    # only this thread's records are this log's.
    here = threading.get_ident()
    held = rest_api.RequestHeld(2, {"text_a": (1, 500)})
    with caplog.at_level(logging.INFO, logger="tensorflow"):
        log.answered("POST /p from a: 200 in 5 ms", held)
        for step in range(10):  # Ten more within a second of each other.
            now[0] += 0.1
            log.answered("POST /p from a: 200 in 5 ms", rest_api.RequestHeld(1, {}))
        log.flush()  # Not due yet.
        now[0] += 31
        log.flush()
        log.error("POST /p from a: 400 in 1 ms", "input text_a: expected text")
        now[0] += 5
        log.answered("GET /v1/models/m from a: 200 in 1 ms", None)
    assert [r.getMessage() for r in caplog.records if r.thread == here] == [
        "POST /p from a: 200 in 5 ms (2 instances; text_a: 1 text cut where the model stops "
        "reading, 500 characters not read)",
        "10 more requests answered in 32 s (10 instances)",
        "POST /p from a: 400 in 1 ms: input text_a: expected text",
        "GET /v1/models/m from a: 200 in 1 ms"]


def test_every_error_answer_is_logged(pair, caplog):
    server, _ = pair
    clients = []
    with caplog.at_level(logging.INFO, logger="tensorflow"):
        for _ in range(3):
            status, _, client = _post_from(server, b"{not json")
            assert status == 400
            clients.append(client)
        with socket.create_connection(("127.0.0.1", server.server_address[1]),
                                      timeout=60) as sock:
            clients.append("127.0.0.1:%d" % sock.getsockname()[1])
            sock.sendall(b"FOO / HTTP/1.1\r\n\r\n")
            assert _read_answer(sock)[0] == 501
        _wait_for_lines(caplog, clients)
    # Each error answer is one warning line of its own.
    logged = [_records_of(caplog, client) for client in clients]
    assert [[r.levelno for r in records] for records in logged] == [[logging.WARNING]] * 4, [
        [r.getMessage() for r in records] for records in logged]
    errors = [records[0].getMessage() for records in logged]
    assert all(re.match(r"POST /v1/models/m:predict from 127\.0\.0\.1:\d+: 400 in \d+ ms: "
                        r"JSON Parse error", line) for line in errors[:3]), errors
    assert re.match(r"FOO / from 127\.0\.0\.1:\d+: 501 in \d+ ms: ", errors[3]), errors


# ---------------------------------------------------------------------------
# Start-up: the port and the address are checked before the model loads.

def _main(**flag_values):
    values = dict(model_dir="/nonexistent/model", input_file=None, output_file=None,
                  port=0, host="127.0.0.1", model_name="m")
    values.update(flag_values)
    if not FLAGS.is_parsed():
        FLAGS.mark_as_parsed()
    with flagsaver.flagsaver(**values):
        predict.main([])


@pytest.mark.parametrize("flag_values, message", [
    ({"port": 70000}, "--port=70000: a port is 0 (any free one) to 65535"),
    ({"port": -1}, "--port=-1: a port is 0"),
    ({"host": "no-such-host.invalid"}, "--host=no-such-host.invalid: no address of this "
                                       "machine, nor a name of one"),
    ({"host": "192.0.2.1"}, "--host=192.0.2.1: no network interface of this machine has "
                            "that address"),
    ({"max_instances": 0}, "--max_instances=0: must be at least 1"),
    ({"client_timeout_seconds": 0.0}, "--client_timeout_seconds=0: must be more than 0"),
    ({"max_batch_size": 0}, "--max_batch_size=0: must be at least 1"),
    ({"batch_timeout_micros": -1}, "--batch_timeout_micros=-1: must be 0 to 1000000"),
    ({"model_name": "a/b"}, "--model_name='a/b': a name for the URLs"),
])
def test_bad_address_and_limits_are_one_line_before_the_model_loads(flag_values, message):
    # The model folder does not exist: its error would come if the model loaded first.
    with pytest.raises(errors.InputError) as error:
        _main(**flag_values)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_busy_port_is_one_line_before_the_model_loads():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(errors.InputError, match=r"^--port=%d: another program listens "
                                                      r"there" % port):
            _main(port=port)


def test_serves_on_ipv6(servers):
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError as e:
        pytest.skip("no IPv6 loopback here: %s" % e)
    server = rest_server.make_server(servers.models["pair"], "::1", 0, "m", limits=LIMITS,
                                 log_every_seconds=30)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        connection = http.client.HTTPConnection("::1", server.server_address[1], timeout=60)
        connection.request("GET", "/v1/models/m")
        assert connection.getresponse().status == 200
    finally:
        server.shutdown()
        server.server_close()


# ---------------------------------------------------------------------------
# docs/serving.md's reverse proxy, where nginx is installed.

def test_the_documented_nginx_proxy_asks_for_a_password(pair, tmp_path):
    nginx, openssl = shutil.which("nginx"), shutil.which("openssl")
    if not nginx or not openssl:
        pytest.skip("needs nginx and openssl on the PATH")
    server, answer = pair
    with open(os.path.join(os.path.dirname(predict.__file__), "docs", "serving.md"),
              encoding="utf-8") as f:
        (snippet,) = re.findall(r"```nginx\n(.*?)```", f.read(), flags=re.S)
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-keyout", str(tmp_path / "models.key"),
                    "-out", str(tmp_path / "models.crt")], check=True, capture_output=True)
    (tmp_path / "models.htpasswd").write_text("alice:{PLAIN}secret\n")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    snippet = (snippet.replace("listen 8443", "listen 127.0.0.1:%d" % port)
               .replace("/etc/nginx/tls/", str(tmp_path) + "/")
               .replace("/etc/nginx/", str(tmp_path) + "/")
               .replace("127.0.0.1:8501", "127.0.0.1:%d" % server.server_address[1]))
    # Around the snippet: what an nginx.conf holds, with every file nginx
    # writes in tmp_path.
    (tmp_path / "nginx.conf").write_text(
        # (Started by root, nginx's workers would read as "nobody".)
        ("user root;\n" if os.geteuid() == 0 else "")
        + "pid {0}/nginx.pid;\nerror_log {0}/error.log;\nevents {{}}\nhttp {{\n"
        "access_log off;\n".format(tmp_path)
        + "".join("%s_temp_path %s/%s;\n" % (kind, tmp_path, kind)
                  for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        + snippet + "}\n")
    proxy = subprocess.Popen([nginx, "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf"),
                              "-g", "daemon off;"], stderr=subprocess.PIPE)
    try:
        context = ssl.create_default_context(cafile=str(tmp_path / "models.crt"))
        context.check_hostname = False

        def call(headers):
            for _ in range(300):  # Until nginx listens.
                try:
                    connection = http.client.HTTPSConnection("127.0.0.1", port, timeout=60,
                                                             context=context)
                    connection.request("POST", PREDICT, json.dumps(GOOD), headers)
                    response = connection.getresponse()
                    return response.status, response.read()
                except ConnectionRefusedError:
                    time.sleep(0.05)
            raise AssertionError(proxy.stderr.read())

        assert call({})[0] == 401, (tmp_path / "error.log").read_text()
        assert call({"Authorization": "Basic " + base64.b64encode(b"alice:wrong").decode()}
                    )[0] == 401, (tmp_path / "error.log").read_text()
        status, body = call({"Authorization": "Basic "
                             + base64.b64encode(b"alice:secret").decode()})
        assert (status, json.loads(body)) == (200, answer)
    finally:
        proxy.terminate()
        proxy.wait()
