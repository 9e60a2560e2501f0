#!/usr/bin/env python3
"""Mock of the OpenAI-compatible endpoints that ember's chat page uses.

Python standard library only. Serves:
  GET  /                      the chat page (cut out of src/server/chat_page.cpp,
                              or an HTML file given with --html)
  GET  /v1/models             one model
  POST /v1/chat/completions   streaming (SSE, OpenAI chunk format, optional final
                              usage chunk, then "data: [DONE]") and non-streaming

The reply echoes the last user message word by word with a small delay, so the
page and tests/server/chat_page_test.py can be developed and checked without
the real `ember serve`. A last user message of exactly "!error" gets an
HTTP 400 error reply, "!midstream" an error event after a few words, and
"!cut" a stream that ends after a few words without "data: [DONE]", to
exercise the page's error display. --framing and --tiny-writes vary the SSE byte
stream to check the page's parser. With --api-key, requests without
"Authorization: Bearer KEY" get 401.

  python3 tools/mock_openai_server.py --port 8089 [--delay 0.03] [--api-key K]
"""

import argparse
import json
import os
import sys
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPEN_DELIM = 'R"EMBERHTML('
CLOSE_DELIM = ')EMBERHTML"'


def page_from_cpp(path):
    """Returns the HTML between the raw-string delimiters of chat_page.cpp."""
    with open(path, encoding="utf-8") as f:
        src = f.read()
    start = src.find(OPEN_DELIM)
    end = src.find(CLOSE_DELIM, start + 1)
    if start < 0 or end < 0:
        raise ValueError(f"{path}: no {OPEN_DELIM} ... {CLOSE_DELIM} raw string found")
    return src[start + len(OPEN_DELIM):end]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "ember-mock/1"
    # Set on the class by main().
    page_html = b""
    model_id = "mock-model"
    api_key = None
    delay = 0.03
    eol = b"\n"        # SSE line ending (--framing)
    tiny_writes = False  # split every event into 1..3-byte HTTP chunks

    def log_message(self, fmt, *args):  # quieter than the default
        sys.stderr.write("mock: " + (fmt % args) + "\n")

    # ---- helpers ---------------------------------------------------------
    def send_json(self, status, obj):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def send_error_json(self, status, message, etype="invalid_request_error"):
        self.send_json(status, {"error": {"message": message, "type": etype, "param": None, "code": None}})

    def authorized(self):
        if not self.api_key:
            return True
        if self.headers.get("Authorization", "") == "Bearer " + self.api_key:
            return True
        self.send_error_json(401, "invalid or missing API key", "authentication_error")
        return False

    def write_chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def sse(self, obj):
        payload = obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"))
        event = b"data: " + payload.encode() + self.eol + self.eol
        if not self.tiny_writes:
            return self.write_chunk(event)
        for i in range(0, len(event), 3):
            self.write_chunk(event[i:i + 3])

    # ---- routes ----------------------------------------------------------
    def do_GET(self):
        path = self.path.split("?", 1)[0]
        if path in ("/", "/index.html"):
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(self.page_html)))
            self.end_headers()
            self.wfile.write(self.page_html)
        elif path == "/v1/models":
            if self.authorized():
                self.send_json(200, {"object": "list", "data": [
                    {"id": self.model_id, "object": "model", "created": int(time.time()), "owned_by": "ember"}]})
        else:
            self.send_error_json(404, f"no route for GET {path}", "not_found_error")

    def do_POST(self):
        path = self.path.split("?", 1)[0]
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if length < 0 or length > (8 << 20):
            self.close_connection = True
            return self.send_error_json(400, "bad Content-Length")
        raw = self.rfile.read(length)
        if path != "/v1/chat/completions":
            return self.send_error_json(404, f"no route for POST {path}", "not_found_error")
        if not self.authorized():
            return
        try:
            req = json.loads(raw)
        except ValueError as e:
            return self.send_error_json(400, f"request body is not JSON: {e}")
        if not isinstance(req, dict):
            return self.send_error_json(400, "request body must be a JSON object")
        msgs = req.get("messages")
        if not isinstance(msgs, list) or not msgs or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in msgs):
            return self.send_error_json(400, "'messages' must be a non-empty array of {role, content} strings")
        max_tokens = req.get("max_tokens", 256)
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            return self.send_error_json(400, "'max_tokens' must be a positive integer")
        temperature = req.get("temperature", 1.0)
        if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or not 0 <= temperature <= 2:
            return self.send_error_json(400, "'temperature' must be a number in [0, 2]")
        last_user = next((m["content"] for m in reversed(msgs) if m["role"] == "user"), "")
        if last_user.strip() == "!error":
            return self.send_error_json(400, "mock error requested by the message '!error'")

        words = (f"You said: {last_user.strip()} . This is a streamed reply from the mock server, "
                 f"turn {sum(1 for m in msgs if m['role'] == 'user')}, temperature {temperature}.").split()
        pieces = [w if i == 0 else " " + w for i, w in enumerate(words)]
        finish = "stop"
        if len(pieces) > max_tokens:
            pieces, finish = pieces[:max_tokens], "length"
        prompt_tokens = sum(len(m["content"].split()) + 4 for m in msgs)
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": len(pieces),
                 "total_tokens": prompt_tokens + len(pieces)}
        cid = "chatcmpl-" + uuid.uuid4().hex[:24]
        created = int(time.time())
        model = req.get("model") if isinstance(req.get("model"), str) else self.model_id

        if not req.get("stream"):
            time.sleep(self.delay * len(pieces))
            return self.send_json(200, {
                "id": cid, "object": "chat.completion", "created": created, "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "".join(pieces)},
                             "logprobs": None, "finish_reason": finish}],
                "usage": usage})

        opts = req.get("stream_options")
        include_usage = isinstance(opts, dict) and opts.get("include_usage") is True
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def chunk(delta, finish_reason):
            c = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                 "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]}
            if include_usage:
                c["usage"] = None
            return c

        try:
            self.sse(chunk({"role": "assistant", "content": ""}, None))
            for i, p in enumerate(pieces):
                time.sleep(self.delay)
                if last_user.strip() == "!midstream" and i == 3:
                    self.sse({"error": {"message": "mock error in the middle of the stream", "type": "server_error"}})
                    break
                if last_user.strip() == "!cut" and i == 3:
                    self.write_chunk(b"")
                    return
                self.sse(chunk({"content": p}, None))
            else:
                self.sse(chunk({}, finish))
                if include_usage:
                    self.sse({"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                              "choices": [], "usage": usage})
            self.sse("[DONE]")
            self.write_chunk(b"")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # client stopped the stream


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8089)
    ap.add_argument("--html", help="serve this HTML file at / instead of the page in chat_page.cpp")
    ap.add_argument("--cpp", default=os.path.join(REPO, "src", "server", "chat_page.cpp"),
                    help="C++ file holding the page as an EMBERHTML raw string")
    ap.add_argument("--model", default="mock-model", help="model id listed by /v1/models")
    ap.add_argument("--api-key", help="require 'Authorization: Bearer KEY' on /v1/*")
    ap.add_argument("--delay", type=float, default=0.03, help="seconds between streamed words")
    ap.add_argument("--framing", choices=["lf", "crlf", "cr"], default="lf", help="SSE line endings")
    ap.add_argument("--tiny-writes", action="store_true",
                    help="send each SSE event in 3-byte pieces (tests the client's reassembly)")
    args = ap.parse_args()
    try:
        if args.html:
            with open(args.html, encoding="utf-8") as f:
                html = f.read()
        else:
            html = page_from_cpp(args.cpp)
    except (OSError, ValueError) as e:
        sys.exit(f"mock_openai_server: {e}")
    Handler.page_html = html.encode("utf-8")
    Handler.model_id = args.model
    Handler.api_key = args.api_key
    Handler.delay = max(0.0, args.delay)
    Handler.eol = {"lf": b"\n", "crlf": b"\r\n", "cr": b"\r"}[args.framing]
    Handler.tiny_writes = args.tiny_writes
    srv = ThreadingHTTPServer((args.host, args.port), Handler)
    srv.daemon_threads = True
    print(f"mock_openai_server: http://{args.host}:{srv.server_address[1]}/ (model {args.model})", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
