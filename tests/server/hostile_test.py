#!/usr/bin/env python3
"""Hostile-client tests of `ember serve` over raw sockets and http.client.

Sends what a broken or malicious client would: truncated, malformed and
non-object JSON, wrong types and out-of-range values for every major field,
invalid UTF-8, deeply nested JSON, oversized bodies and headers, bad HTTP
framing (conflicting lengths, garbage request lines), missing or wrong API
keys, wrong methods and paths, slow-loris half requests, and clients that
vanish mid-stream. Every rejection must be a clean 4xx with OpenAI's error
shape, and afterwards the server must still answer, with no running request
and no KV block in use.

  python3 tests/server/hostile_test.py --base-url http://127.0.0.1:PORT --api-key KEY

Run by tests/server/server_test.sh. Exit status 0 passed, 1 failed.
The slow-loris checks hold sockets for the server's request timeout (10 s)
while the other checks run, so the suite takes about 12 s at least.
"""

import json
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_util  # noqa: E402
from server_util import check_error_shape  # noqa: E402

REQUEST_TIMEOUT_S = 10.0  # the server's whole-request deadline (HttpServerConfig)


# ---------------------------------------------------------------- raw HTTP

def read_response(sock, timeout=10.0, f=None):
    """Reads one HTTP response from `sock` (through `f`, a buffered reader from
    sock.makefile("rb"), when several responses are read from one connection).
    Returns (status, headers, body), or (None, {}, b"") if the connection
    closed (or was reset) before a status line arrived."""
    sock.settimeout(timeout)
    if f is None:
        f = sock.makefile("rb")
    try:
        line = f.readline(1 << 16)
        if not line:
            return None, {}, b""
        status = int(line.split()[1])
        headers = {}
        while True:
            h = f.readline(1 << 16)
            if h in (b"\r\n", b"\n", b""):
                break
            k, _, v = h.decode("latin-1").partition(":")
            headers[k.strip().lower()] = v.strip()
        if "content-length" in headers:
            body = f.read(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(f.readline(1 << 16).split(b";")[0], 16)
                if size == 0:
                    f.readline(1 << 16)
                    break
                body += f.read(size)
                f.readline(1 << 16)
        else:
            body = f.read()
        return status, headers, body
    except ConnectionResetError:
        return None, {}, b""


class Raw:
    """Raw-socket requests against the server."""

    def __init__(self, srv):
        self.srv = srv

    def connect(self, timeout=10.0):
        return socket.create_connection((self.srv.host, self.srv.port), timeout=timeout)

    def send(self, data, timeout=10.0):
        """Sends bytes on a fresh connection and reads one response."""
        s = self.connect(timeout)
        try:
            try:
                s.sendall(data)
            except (BrokenPipeError, ConnectionResetError):
                pass
            return read_response(s, timeout)
        finally:
            s.close()

    def post(self, path, body, extra_headers="", auth=True, timeout=10.0):
        if isinstance(body, str):
            body = body.encode("utf-8")
        auth_line = f"Authorization: Bearer {self.srv.api_key}\r\n" if auth and self.srv.api_key else ""
        head = (f"POST {path} HTTP/1.1\r\nHost: test\r\n{auth_line}Content-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n{extra_headers}\r\n").encode()
        return self.send(head + body, timeout)


def expect_error(status_body, status, param=None, code=None):
    st, _, body = status_body
    assert st == status, f"status {st}, want {status}: {body[:300]!r}"
    try:
        js = json.loads(body)
    except ValueError:
        raise AssertionError(f"error body is not JSON: {body[:300]!r}")
    check_error_shape(js, param=param, code=code)
    return js


# ---------------------------------------------------------------- checks

def test_bad_json(srv, raw):
    for path in ("/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"):
        for body in ('{"prompt": "hi", "max_tok', '{prompt: hi}', '{"a":1,}', "", "   ",
                     '{"prompt":"x"} trailing', "\x00", '{"prompt":"\\q"}'):
            expect_error(raw.post(path, body), 400)
        for body in ("[1, 2]", '"just a string"', "42", "null", "true"):
            expect_error(raw.post(path, body), 400)


def test_invalid_utf8(srv, raw):
    bodies = [b'{"prompt": "abc\xff\xfedef", "max_tokens": 2}',
              b'{"prompt": "\xc3", "max_tokens": 2}',
              b'{"prompt": "\xed\xa0\x80", "max_tokens": 2}',          # UTF-8 encoded surrogate
              b'{"prompt": "\\ud800", "max_tokens": 2}',                # lone escaped surrogate
              b'{"prompt\xff": "x", "max_tokens": 2}']
    for b in bodies:
        expect_error(raw.post("/v1/completions", b), 400)
    expect_error(raw.post("/v1/chat/completions",
                          b'{"messages":[{"role":"user","content":"\xff"}],"max_tokens":2}'), 400)
    expect_error(raw.post("/tokenize", b'{"prompt":"\xfe\xff"}'), 400)


def test_deep_nesting(srv, raw):
    for body in ("[" * 100000, '{"a":' * 100000, '{"prompt":' + "[" * 100000 + "]" * 100000 + "}",
                 '{"messages":' + "[" * 50000 + "]" * 50000 + "}"):
        for path in ("/v1/completions", "/v1/chat/completions"):
            st, _, b = raw.post(path, body)
            assert st == 400, f"deep nesting on {path}: {st} {b[:200]!r}"
    # Many (flat) keys and a huge array of numbers are fine to parse but invalid.
    expect_error(raw.post("/v1/completions", '{"prompt":[' + ",".join(["1"] * 200000) + "],"
                          '"max_tokens":1,"n":1000}'), 400)


def chat_body(**kw):
    b = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    b.update(kw)
    return b


def comp_body(**kw):
    b = {"prompt": "Hi", "max_tokens": 2}
    b.update(kw)
    return b


CHAT_BAD = [
    ({"messages": "hi"}, "messages"),
    ({"messages": []}, "messages"),
    ({"messages": None}, "messages"),
    ({"messages": [5]}, "messages"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "role"),
    ({"messages": [{"role": 7, "content": "x"}]}, "role"),
    ({"messages": [{"content": "x"}]}, "role"),
    ({"messages": [{"role": "user", "content": 5}]}, "content"),
    ({"messages": [{"role": "user", "content": {"a": 1}}]}, "content"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url",
                                                 "image_url": {"url": "http://x/y.png"}}]}]}, "content"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}, "content"),
    ({"max_tokens": "10"}, "max_tokens"),
    ({"max_tokens": -1}, "max_tokens"),
    ({"max_tokens": 0.5}, "max_tokens"),
    ({"max_tokens": 1e12}, "max_tokens"),
    ({"max_tokens": 10 ** 30}, "max_tokens"),
    ({"max_completion_tokens": "x"}, "max_completion_tokens"),
    ({"temperature": "hot"}, "temperature"),
    ({"temperature": -0.5}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"top_k": "many"}, "top_k"),
    ({"min_p": 2}, "min_p"),
    ({"n": 1000}, "n"),
    ({"n": 0}, "n"),
    ({"n": "2"}, "n"),
    ({"stop": 5}, "stop"),
    ({"stop": [1, 2]}, "stop"),
    ({"stop": {"a": "b"}}, "stop"),
    ({"logprobs": 3}, "logprobs"),
    ({"logprobs": "yes"}, "logprobs"),
    ({"logprobs": True, "top_logprobs": 50}, "top_logprobs"),
    ({"logprobs": True, "top_logprobs": -1}, "top_logprobs"),
    ({"seed": "abc"}, "seed"),
    ({"seed": 1.5}, "seed"),
    ({"presence_penalty": 5}, "presence_penalty"),
    ({"frequency_penalty": "x"}, "frequency_penalty"),
    ({"repetition_penalty": 0}, "repetition_penalty"),
    ({"stream": "yes"}, "stream"),
    ({"stream": True, "stream_options": "x"}, "stream_options"),
    ({"stream": True, "stream_options": {"include_usage": "x"}}, "include_usage"),
    ({"user": 5}, "user"),
    ({"ignore_eos": "x"}, "ignore_eos"),
    ({"stop_token_ids": [-3]}, "stop_token_ids"),
    ({"stop_token_ids": "x"}, "stop_token_ids"),
    ({"model": 5}, "model"),
]

COMP_BAD = [
    ({"prompt": None}, "prompt"),
    ({"prompt": 5}, "prompt"),
    ({"prompt": []}, "prompt"),
    ({"prompt": [[]]}, "prompt"),
    ({"prompt": [1, "a"]}, "prompt"),
    ({"prompt": [1.5]}, "prompt"),
    ({"prompt": [{"a": 1}]}, "prompt"),
    ({"prompt": [-1]}, "prompt"),
    ({"prompt": [10 ** 9]}, "prompt"),
    ({"prompt": [2 ** 64]}, "prompt"),
    ({"prompt": [[1, 2], [3, -7]]}, "prompt"),
    ({"prompt": ["a"] * 10000}, "prompt"),
    ({"logprobs": 50}, "logprobs"),
    ({"logprobs": -1}, "logprobs"),
    ({"logprobs": "x"}, "logprobs"),
    ({"echo": "x"}, "echo"),
    ({"max_tokens": "10"}, "max_tokens"),
    ({"max_tokens": -5}, "max_tokens"),
    ({"max_tokens": 1e12}, "max_tokens"),
    ({"temperature": "hot"}, "temperature"),
    ({"n": 1000}, "n"),
    ({"stop": 5}, "stop"),
    ({"stop": ["x" * 100000]}, "stop"),
]


def test_chat_field_types(srv, raw):
    for fields, param in CHAT_BAD:
        body = chat_body(**fields)
        try:
            expect_error(raw.post("/v1/chat/completions", json.dumps(body)), 400, param=param)
        except AssertionError as e:
            raise AssertionError(f"chat {json.dumps(fields)[:100]}: {e}")


def test_completion_field_types(srv, raw):
    # The prompt check runs without "prompt" present at all too.
    expect_error(raw.post("/v1/completions", '{"max_tokens": 2}'), 400, param="prompt")
    expect_error(raw.post("/v1/chat/completions", '{"max_tokens": 2}'), 400, param="messages")
    for fields, param in COMP_BAD:
        body = comp_body(**fields)
        try:
            expect_error(raw.post("/v1/completions", json.dumps(body)), 400, param=param)
        except AssertionError as e:
            raise AssertionError(f"completions {json.dumps(fields)[:100]}: {e}")


def test_null_fields(srv, raw):
    # OpenAI clients often send explicit nulls for unset optional fields.
    fields = ["max_tokens", "temperature", "top_p", "n", "stop", "seed", "logprobs", "stream",
              "stream_options", "presence_penalty", "frequency_penalty", "user", "top_logprobs",
              "max_completion_tokens"]
    for f in fields:
        b = chat_body(**{f: None})
        if f == "max_tokens":
            b["max_completion_tokens"] = 2
        st, _, body = raw.post("/v1/chat/completions", json.dumps(b))
        assert st == 200, f"chat {f}=null: {st} {body[:200]!r}"
    for f in fields[:-2] + ["echo"]:
        b = comp_body(**{f: None})
        if f == "max_tokens":
            continue
        st, _, body = raw.post("/v1/completions", json.dumps(b))
        assert st == 200, f"completions {f}=null: {st} {body[:200]!r}"


def test_tokenize_bad(srv, raw):
    for path, body, param in [
        ("/tokenize", {"prompt": 5}, "prompt"),
        ("/tokenize", {}, None),
        ("/tokenize", {"messages": "x"}, "messages"),
        ("/tokenize", {"prompt": "x", "add_special_tokens": "yes"}, "add_special_tokens"),
        ("/detokenize", {"tokens": "abc"}, "tokens"),
        ("/detokenize", {"tokens": [10 ** 7]}, "tokens"),
        ("/detokenize", {"tokens": [-5]}, "tokens"),
        ("/detokenize", {"tokens": [1.5]}, "tokens"),
        ("/detokenize", {}, "tokens"),
    ]:
        try:
            expect_error(raw.post(path, json.dumps(body)), 400, param=param)
        except AssertionError as e:
            raise AssertionError(f"{path} {body}: {e}")


def test_long_stop_strings(srv, raw):
    # Longer than the server's per-string limit: rejected, not crashed.
    st, _, b = raw.post("/v1/completions", json.dumps(comp_body(stop=["y" * 200000])))
    assert st == 400, (st, b[:200])
    st, _, b = raw.post("/v1/completions", json.dumps(comp_body(stop=["z" * 5000] * 500)))
    assert st == 400, (st, b[:200])
    # Within the limits: the stop string never matches and generation runs to max_tokens.
    st, _, b = raw.post("/v1/completions", json.dumps(
        comp_body(stop=["q" * 200, "\u00e9\u4e2d" * 40], max_tokens=4, ignore_eos=True, temperature=0)))
    assert st == 200, (st, b[:300])
    js = json.loads(b)
    assert js["choices"][0]["finish_reason"] == "length" and js["usage"]["completion_tokens"] == 4, js


def test_context_length(srv, raw):
    L = srv.max_model_len()
    # A text prompt longer than the context.
    text = "hello " * (L + 16)
    n = srv.tokenize(prompt=text)["count"]
    assert n > L, (n, L)
    expect_error(raw.post("/v1/completions", json.dumps(comp_body(prompt=text))), 400,
                 code="context_length_exceeded")
    # Token ids: exactly L (no room for one output token) and L + 1.
    for k in (L, L + 1):
        expect_error(raw.post("/v1/completions", json.dumps(comp_body(prompt=[100] * k))), 400,
                     code="context_length_exceeded")
    # Chat.
    expect_error(raw.post("/v1/chat/completions", json.dumps(chat_body(
        messages=[{"role": "user", "content": text}]))), 400, code="context_length_exceeded")
    # max_tokens above the context itself: 400 naming max_tokens.
    expect_error(raw.post("/v1/completions", json.dumps(comp_body(max_tokens=L + 1))), 400,
                 param="max_tokens")
    # A prompt that fits with max_tokens beyond what is left: capped, finish "length".
    ids = [100] * (L - 3)
    st, _, b = raw.post("/v1/completions", json.dumps(comp_body(prompt=ids, max_tokens=50,
                                                                ignore_eos=True, temperature=0)),
                        timeout=120)
    assert st == 200, (st, b[:300])
    js = json.loads(b)
    assert js["usage"]["completion_tokens"] == 3, js["usage"]
    assert js["choices"][0]["finish_reason"] == "length", js["choices"][0]


def test_huge_body(srv, raw):
    limit = 8 << 20
    # Declared too large: 413 without having to send the body.
    s = raw.connect()
    try:
        s.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {srv.api_key}\r\n"
                   f"Content-Length: {limit + 1024}\r\n\r\n").encode())
        st, _, b = read_response(s, timeout=5)
        assert st == 413, (st, b[:200])
        check_error_shape(json.loads(b))
    finally:
        s.close()
    # Actually sent: 413 (or the connection cut while sending), never a crash.
    body = b'{"prompt":"' + b"a" * (limit + 4096) + b'"}'
    st, _, b = raw.post("/v1/completions", body)
    assert st in (413, None), (st, b[:200])
    # Chunked encoding cannot sneak past the limit.
    s = raw.connect()
    try:
        s.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {srv.api_key}\r\n"
                   f"Transfer-Encoding: chunked\r\n\r\n").encode())
        chunk = b"a" * (1 << 20)
        try:
            for _ in range(10):
                s.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        st, _, b = read_response(s, timeout=5)
        assert st in (400, 411, 413, 501, None), (st, b[:200])
    finally:
        s.close()
    assert srv.request("GET", "/health")[0] == 200


def test_huge_headers(srv, raw):
    st, _, b = raw.send(b"GET /health HTTP/1.1\r\nHost: t\r\nX-Big: " + b"a" * (200 << 10) + b"\r\n\r\n")
    assert st == 431, (st, b[:200])
    many = b"".join(b"X-H%d: v\r\n" % i for i in range(20000))
    st, _, b = raw.send(b"GET /health HTTP/1.1\r\nHost: t\r\n" + many + b"\r\n")
    assert st == 431, (st, b[:200])
    st, _, b = raw.send(b"GET /" + b"a" * (200 << 10) + b" HTTP/1.1\r\nHost: t\r\n\r\n")
    assert st in (414, 431), (st, b[:200])


def test_auth(srv, raw):
    if not srv.api_key:
        return
    bodies = set()
    routes = [("GET", "/v1/models", None), ("POST", "/v1/completions", comp_body()),
              ("POST", "/v1/chat/completions", chat_body()), ("POST", "/tokenize", {"prompt": "x"}),
              ("POST", "/detokenize", {"tokens": [1]})]
    bad_auth = [None, "Bearer wrong", "Bearer " + srv.api_key + "x", "Bearer " + srv.api_key[:-1],
                "Basic " + srv.api_key, "Bearer", "Bearer ", srv.api_key, "Bearer  " + srv.api_key + " x"]
    for method, path, body in routes:
        for a in bad_auth:
            h = {"Authorization": a} if a is not None else {}
            st, _, b = srv.request(method, path, body, headers=h, auth=False)
            assert st == 401, f"{method} {path} auth={a!r}: {st}"
            js = json.loads(b)
            check_error_shape(js)
            bodies.add(b)
    assert len(bodies) == 1, f"401 bodies differ: {bodies}"
    # Open endpoints.
    assert srv.request("GET", "/health", auth=False)[0] == 200
    # The right key (scheme case-insensitive per RFC 7235 is allowed but not required).
    assert srv.request("GET", "/v1/models")[0] == 200


def test_method_and_path(srv, raw):
    for method, path in [("GET", "/v1/completions"), ("PUT", "/v1/chat/completions"),
                         ("DELETE", "/v1/models"), ("POST", "/health"), ("GET", "/tokenize"),
                         ("PATCH", "/v1/completions")]:
        st, _, b = srv.request(method, path, b"{}" if method != "GET" else None)
        assert st == 405, f"{method} {path}: {st}"
        check_error_shape(json.loads(b))
    for path in ("/nope", "/v1/nope", "/v1/completions/extra", "/../etc/passwd", "/v1//models",
                 "/%00", "/v1/models%2f..", "/" + "x" * 4000):
        st, _, b = srv.request("GET", path)
        assert st == 404, f"GET {path[:40]}: {st}"
        check_error_shape(json.loads(b))


def test_bad_framing(srv, raw):
    key = srv.api_key
    cases = [
        (b"GARBAGE\r\n\r\n", (400,)),
        (b"GET\r\n\r\n", (400,)),
        (b"GET / HTTP/9.9\r\nHost: t\r\n\r\n", (400, 505)),
        (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", (400, 505)),
        (b"GET /health HTTP/1.1\r\nNoColonHere\r\n\r\n", (400,)),
        (b"GET /health HTTP/1.1\r\nHost: t\r\n bad-continuation\r\n\r\n", (400,)),
        (b"GET /he\x00alth HTTP/1.1\r\nHost: t\r\n\r\n", (400, 404)),
        (b"POST /tokenize HTTP/1.1\r\nHost: t\r\nContent-Length: abc\r\n\r\n", (400,)),
        (b"POST /tokenize HTTP/1.1\r\nHost: t\r\nContent-Length: -5\r\n\r\n", (400,)),
        (b"POST /tokenize HTTP/1.1\r\nHost: t\r\nContent-Length: 99999999999999999999999\r\n\r\n",
         (400, 413)),
        (b"POST /tokenize HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n{}",
         (400,)),
        (b"POST /tokenize HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n"
         b"\r\n{}", (400,)),
        (b"POST /tokenize HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\n{}", (400, 501)),
        (b"POST /tokenize HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
         (400,)),
    ]
    for data, want in cases:
        st, _, b = raw.send(data.replace(b"Host: t\r\n", b"Host: t\r\nAuthorization: Bearer "
                                         + key.encode() + b"\r\n"), timeout=5)
        assert st in want, f"{data[:60]!r}: status {st}, want {want}: {b[:200]!r}"
    # Valid chunked request body is understood (or cleanly refused).
    body = json.dumps({"prompt": "hello"}).encode()
    data = (b"POST /tokenize HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer " + key.encode() +
            b"\r\nTransfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % 5 + body[:5] + b"\r\n" +
            b"%x\r\n" % (len(body) - 5) + body[5:] + b"\r\n0\r\n\r\n")
    st, _, b = raw.send(data)
    assert st in (200, 411, 501), (st, b[:200])
    if st == 200:
        assert json.loads(b)["count"] >= 1


def test_pipelining_keepalive(srv, raw):
    s = raw.connect()
    try:
        one = b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n"
        tok = json.dumps({"prompt": "abc"}).encode()
        two = (b"POST /tokenize HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer " + srv.api_key.encode() +
               b"\r\nContent-Length: %d\r\n\r\n" % len(tok) + tok)
        s.sendall(one + two + one)
        f = s.makefile("rb")
        r1 = read_response(s, f=f)
        r2 = read_response(s, f=f)
        r3 = read_response(s, f=f)
        assert (r1[0], r2[0], r3[0]) == (200, 200, 200), (r1[0], r2[0], r3[0])
        assert "tokens" in json.loads(r2[2]), r2
        # Byte-by-byte delivery of a request on the same kept-alive connection.
        for i in range(len(one)):
            s.sendall(one[i:i + 1])
        assert read_response(s, f=f)[0] == 200
    finally:
        s.close()


def test_connection_semantics(srv, raw):
    # Connection: close and HTTP/1.0: one response, then the server closes.
    for req in (b"GET /health HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
                b"GET /health HTTP/1.0\r\n\r\n"):
        s = raw.connect()
        try:
            s.sendall(req)
            f = s.makefile("rb")
            st, _, _ = read_response(s, timeout=5, f=f)
            assert st == 200, (req, st)
            assert f.read() == b"", "connection not closed after Connection: close / HTTP/1.0"
        finally:
            s.close()
    # Expect: 100-continue (curl sends it for large bodies): a 100 Continue or
    # nothing, then the real response once the body arrives.
    body = json.dumps({"prompt": "hello"}).encode()
    s = raw.connect()
    try:
        s.sendall(b"POST /tokenize HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer " + srv.api_key.encode() +
                  b"\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body))
        f = s.makefile("rb")
        s.settimeout(1.0)
        first = None
        try:
            first = f.readline()
        except (socket.timeout, TimeoutError):
            f = s.makefile("rb")  # a timed-out reader cannot be reused
        if first:
            assert first.startswith(b"HTTP/1.1 100"), first
            assert f.readline() in (b"\r\n", b"\n")
        s.sendall(body)
        st, _, b = read_response(s, timeout=5, f=f)
        assert st == 200 and json.loads(b)["count"] >= 1, (st, b[:200])
    finally:
        s.close()


def test_many_idle_connections(srv, raw):
    socks = []
    try:
        for _ in range(200):
            socks.append(raw.connect())
        t = time.monotonic()
        assert srv.request("GET", "/health", timeout=5)[0] == 200
        assert time.monotonic() - t < 2.0, "health slow with 200 idle connections"
    finally:
        for s in socks:
            s.close()


def disconnect_mid_stream(srv, raw, rst, stream=True):
    before = srv.wait_idle(timeout=10)
    aborts0 = before.get('ember:request_success_total{finished_reason="abort",model_name="%s"}'
                         % srv.model_id(), 0)
    # As long as the context allows (a few seconds at least even on a fast machine).
    max_tokens = min(2000, srv.max_model_len() - 32)
    body = json.dumps({"prompt": "Tell me a long story.", "max_tokens": max_tokens, "ignore_eos": True,
                       "temperature": 0, "stream": stream}).encode()
    s = raw.connect()
    s.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {srv.api_key}\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body)
    if stream:
        got, buf = 0, b""
        s.settimeout(20)
        while got < 2:
            d = s.recv(4096)
            assert d, "connection closed before 2 chunks"
            buf += d
            got = buf.count(b"data:")
    else:
        # Make sure the request is running before vanishing.
        deadline = time.monotonic() + 10
        while srv.metrics().get("ember:num_requests_running", 0) < 1:
            assert time.monotonic() < deadline, "request never started"
            time.sleep(0.05)
    if rst:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    s.close()
    t = time.monotonic()
    m = srv.wait_idle(timeout=5)
    dt = time.monotonic() - t
    # The counter is updated just after the engine lets go: poll briefly.
    key = 'ember:request_success_total{finished_reason="abort",model_name="%s"}' % srv.model_id()
    while m.get(key, 0) != aborts0 + 1 and time.monotonic() - t < 5:
        time.sleep(0.05)
        m = srv.metrics()
    assert m.get(key, 0) == aborts0 + 1, f"abort counter {aborts0} -> {m.get(key, 0)}"
    return dt


def test_disconnect_stream(srv, raw):
    disconnect_mid_stream(srv, raw, rst=False)


def test_disconnect_stream_rst(srv, raw):
    disconnect_mid_stream(srv, raw, rst=True)


def test_disconnect_nonstream(srv, raw):
    disconnect_mid_stream(srv, raw, rst=False, stream=False)


def test_burst_disconnect(srv, raw):
    """Many clients send long requests (chat and completions, n=2, streaming
    or not) and vanish almost at once: nothing may stay queued or hold KV."""
    L = srv.max_model_len()
    socks = []
    for i in range(24):
        if i % 2:
            path, b = "/v1/chat/completions", chat_body(max_tokens=L - 64, ignore_eos=True)
        else:
            path, b = "/v1/completions", comp_body(prompt=f"Story number {i}:", max_tokens=L - 64,
                                                   ignore_eos=True)
        b["stream"] = i % 3 == 0
        b["n"] = 2 if i % 4 == 1 else 1
        body = json.dumps(b).encode()
        s = raw.connect()
        s.sendall((f"POST {path} HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {srv.api_key}\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n").encode() + body)
        socks.append(s)
    time.sleep(0.5)
    for s in socks:
        s.close()
    srv.wait_idle(timeout=10)


def test_fanout_disconnect(srv, raw):
    """One request fanning out to 64 prompts x n=16 sequences, then the client
    vanishes: everything it queued or started must be dropped promptly."""
    body = json.dumps({"prompt": [f"Story {i}:" for i in range(64)], "n": 16,
                       "max_tokens": srv.max_model_len() - 64, "ignore_eos": True,
                       "temperature": 1.0, "top_k": 40}).encode()
    s = raw.connect()
    s.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {srv.api_key}\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body)
    deadline = time.monotonic() + 10
    while srv.metrics().get("ember:num_requests_running", 0) < 8:
        assert time.monotonic() < deadline, "fan-out request never started"
        time.sleep(0.05)
    time.sleep(1.0)
    s.close()
    t = time.monotonic()
    try:
        srv.wait_idle(timeout=5)
    except AssertionError as e:
        # Let the server drain so later checks are not affected, then fail.
        try:
            srv.wait_idle(timeout=60)
            e = AssertionError(f"{e}; idle only {time.monotonic() - t:.1f}s after the disconnect")
        except AssertionError:
            pass
        raise e


class SlowLoris(threading.Thread):
    """Sends part of a request and holds the socket; records when and how the
    server ended it."""

    def __init__(self, raw, partial):
        super().__init__(daemon=True)
        self.raw, self.partial = raw, partial
        self.status, self.elapsed, self.closed_after, self.error = None, None, False, None

    def run(self):
        try:
            s = self.raw.connect(timeout=REQUEST_TIMEOUT_S + 10)
            t0 = time.monotonic()
            s.sendall(self.partial)
            st, _, _ = read_response(s, timeout=REQUEST_TIMEOUT_S + 10)
            self.status, self.elapsed = st, time.monotonic() - t0
            # The connection must be closed after the 408 (the half request dropped).
            s.settimeout(3)
            try:
                rest = s.recv(100)
            except ConnectionResetError:
                rest = b""
            self.closed_after = rest == b""
            s.close()
        except Exception as e:  # noqa: BLE001
            self.error = f"{type(e).__name__}: {e}"


def start_slow_loris(srv, raw):
    key = srv.api_key
    lorises = [
        SlowLoris(raw, b"POST /v1/completions HTTP/1.1\r\nHost: t\r\n"),
        SlowLoris(raw, (f"POST /v1/completions HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {key}\r\n"
                        f"Content-Length: 100\r\n\r\n" + '{"prompt": "x"').encode()),
        SlowLoris(raw, b"G"),
    ]
    for l in lorises:
        l.start()
    return lorises


def test_slow_loris_result(srv, lorises):
    for l in lorises:
        l.join(timeout=REQUEST_TIMEOUT_S + 15)
        assert not l.is_alive(), "slow-loris socket never answered nor closed"
        assert l.error is None, l.error
        assert l.status in (408, None), f"partial request answered {l.status}"
        assert l.elapsed is not None and REQUEST_TIMEOUT_S - 1 <= l.elapsed <= REQUEST_TIMEOUT_S + 4, \
            f"half request dropped after {l.elapsed:.1f}s"
        assert l.closed_after, "connection left open after the timeout"
    assert any(l.status == 408 for l in lorises), [l.status for l in lorises]


def test_responsive_during_loris(srv):
    t = time.monotonic()
    assert srv.request("GET", "/health", timeout=5)[0] == 200
    st, js = srv.post_json("/v1/completions", comp_body(max_tokens=2, temperature=0))
    assert st == 200, (st, js)
    assert time.monotonic() - t < 5, "server slow while slow-loris sockets are held"


def test_final_state(srv):
    st, _, b = srv.request("GET", "/health")
    assert st == 200, st
    st, js = srv.post_json("/v1/completions", comp_body(max_tokens=4, temperature=0))
    assert st == 200 and js["choices"][0]["text"], (st, js)
    st, js = srv.post_json("/v1/chat/completions", chat_body(max_tokens=4, temperature=0))
    assert st == 200, (st, js)
    m = srv.wait_idle(timeout=5)
    assert m.get("ember:num_requests_swapped", 0) == 0


def main():
    args = server_util.parse_args(__doc__)
    srv = server_util.Server(args.base_url, args.api_key, args.pid)
    raw = Raw(srv)
    checks = server_util.Checks("hostile", args.only)
    srv.model_info()
    lorises = start_slow_loris(srv, raw) if not args.only or "loris" in args.only else None
    if lorises:
        time.sleep(0.2)
        checks.run("responsive_during_slow_loris", test_responsive_during_loris, srv)
    for name, fn in [
        ("bad_json", test_bad_json),
        ("invalid_utf8", test_invalid_utf8),
        ("deep_nesting", test_deep_nesting),
        ("chat_field_types", test_chat_field_types),
        ("completion_field_types", test_completion_field_types),
        ("null_fields_accepted", test_null_fields),
        ("tokenize_bad", test_tokenize_bad),
        ("long_stop_strings", test_long_stop_strings),
        ("context_length", test_context_length),
        ("huge_body_413", test_huge_body),
        ("huge_headers_431", test_huge_headers),
        ("auth_401", test_auth),
        ("method_405_path_404", test_method_and_path),
        ("bad_framing", test_bad_framing),
        ("pipelining_keepalive", test_pipelining_keepalive),
        ("connection_close_http10_expect", test_connection_semantics),
        ("many_idle_connections", test_many_idle_connections),
        ("disconnect_mid_stream", test_disconnect_stream),
        ("disconnect_mid_stream_rst", test_disconnect_stream_rst),
        ("disconnect_nonstream", test_disconnect_nonstream),
        ("burst_disconnect", test_burst_disconnect),
        ("fanout_disconnect", test_fanout_disconnect),
    ]:
        checks.run(name, fn, srv, raw)
    if lorises:
        checks.run("responsive_during_slow_loris_2", test_responsive_during_loris, srv)
        checks.run("slow_loris_dropped", test_slow_loris_result, srv, lorises)
    checks.run("final_state", test_final_state, srv)
    checks.finish()


if __name__ == "__main__":
    main()
