"""Shared helpers for the Python suites that test a running `ember serve`.

Each suite is a plain script (no pytest) run by tests/server/server_test.sh:

  python3 SUITE.py --base-url http://127.0.0.1:PORT [--api-key KEY] [--pid PID]

This module gives them: argument parsing, raw HTTP requests (http.client,
so tests see exact status codes and bodies), a Prometheus /metrics parser,
waiting for the server to become idle, the server's RSS, and a tiny check
runner that records pass/fail per named check and sets the exit status.
"""

import argparse
import http.client
import json
import sys
import time
import traceback
import urllib.parse


def parse_args(description):
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--base-url", required=True, help="http://127.0.0.1:PORT of a running ember serve")
    ap.add_argument("--api-key", default="", help="the server's --api-key (empty: none)")
    ap.add_argument("--pid", type=int, default=0, help="server process id (for RSS checks)")
    ap.add_argument("--only", default="", help="run only checks whose name contains this")
    return ap.parse_args()


class Server:
    """A running server: raw HTTP access plus a few typed helpers."""

    def __init__(self, base_url, api_key="", pid=0):
        u = urllib.parse.urlparse(base_url)
        self.base_url = base_url.rstrip("/")
        self.host = u.hostname
        self.port = u.port
        self.api_key = api_key
        self.pid = pid
        self._model = None

    def auth_headers(self):
        return {"Authorization": "Bearer " + self.api_key} if self.api_key else {}

    def request(self, method, path, body=None, headers=None, auth=True, timeout=60):
        """Sends one request on a fresh connection. Returns (status, headers dict
        with lower-case names, body bytes)."""
        h = {}
        if auth:
            h.update(self.auth_headers())
        if headers:
            h.update(headers)
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        elif isinstance(body, str):
            body = body.encode()
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers=h)
            r = conn.getresponse()
            data = r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, data
        finally:
            conn.close()

    def post_json(self, path, obj, auth=True, timeout=60):
        """POST a JSON body; returns (status, parsed JSON or None if the body is not JSON)."""
        status, _, data = self.request("POST", path, obj, auth=auth, timeout=timeout)
        try:
            return status, json.loads(data)
        except ValueError:
            return status, None

    def get_json(self, path, auth=True, timeout=30):
        status, _, data = self.request("GET", path, auth=auth, timeout=timeout)
        try:
            return status, json.loads(data)
        except ValueError:
            return status, None

    def stream_events(self, path, obj, timeout=120):
        """POST with stream=true; returns (status, list of parsed SSE data
        objects, saw_done). Non-200 responses return (status, [body json], False)."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            h = {"Content-Type": "application/json"}
            h.update(self.auth_headers())
            conn.request("POST", path, body=json.dumps(obj).encode(), headers=h)
            r = conn.getresponse()
            if r.status != 200:
                data = r.read()
                try:
                    return r.status, [json.loads(data)], False
                except ValueError:
                    return r.status, [], False
            events, done = [], False
            for raw in r:
                line = raw.decode("utf-8").rstrip("\r\n")
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    done = True
                    continue
                events.append(json.loads(payload))
            return r.status, events, done
        finally:
            conn.close()

    def model_info(self):
        if self._model is None:
            status, body = self.get_json("/v1/models")
            assert status == 200, f"/v1/models -> {status}"
            self._model = body["data"][0]
        return self._model

    def model_id(self):
        return self.model_info()["id"]

    def max_model_len(self):
        return int(self.model_info()["max_model_len"])

    def tokenize(self, prompt=None, messages=None, add_special_tokens=True):
        body = {"messages": messages} if messages is not None else {
            "prompt": prompt, "add_special_tokens": add_special_tokens}
        status, js = self.post_json("/tokenize", body)
        assert status == 200, f"/tokenize -> {status} {js}"
        return js

    def metrics(self):
        """GET /metrics parsed into {"name{labels}": value} (labels as sent)."""
        status, _, data = self.request("GET", "/metrics")
        assert status == 200, f"/metrics -> {status}"
        out = {}
        for line in data.decode().splitlines():
            if not line or line.startswith("#"):
                continue
            key, _, val = line.rpartition(" ")
            try:
                out[key] = float(val)
            except ValueError:
                pass
        return out

    def metric_sum(self, m, name):
        """Sum over all label sets of `name` (exact metric name)."""
        return sum(v for k, v in m.items() if k == name or k.startswith(name + "{"))

    def wait_idle(self, timeout=5.0, settle=0.1):
        """Polls /metrics until nothing is running or waiting and no KV block is
        used, and the finished-request counter has not moved for `settle`
        seconds (it is updated just after a response is sent). Returns the
        last metrics; raises AssertionError on timeout."""
        deadline = time.monotonic() + timeout
        last_done, since = None, None
        while True:
            m = self.metrics()
            busy = {k: m.get("ember:" + k, -1) for k in
                    ("num_requests_running", "num_requests_waiting", "kv_cache_blocks_used")}
            done = self.metric_sum(m, "ember:request_success_total")
            if all(v == 0 for v in busy.values()):
                now = time.monotonic()
                if done != last_done:
                    last_done, since = done, now
                if now - since >= settle:
                    return m
            else:
                last_done = None
            if time.monotonic() > deadline:
                raise AssertionError(f"server not idle after {timeout}s: {busy}")
            time.sleep(0.05)

    def rss_kib(self):
        """VmRSS of the server process in KiB (needs --pid)."""
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise AssertionError("no VmRSS in /proc/PID/status")


def check_error_shape(js, status=None, param=None, code=None):
    """Asserts an OpenAI-style error body; optionally that it names `param`
    (in error.param or, failing that, the message) and has error.code `code`."""
    assert isinstance(js, dict) and isinstance(js.get("error"), dict), f"not an error body: {js!r}"
    e = js["error"]
    for k in ("message", "type", "param", "code"):
        assert k in e, f"error body lacks '{k}': {js!r}"
    assert isinstance(e["message"], str) and e["message"], f"empty error message: {js!r}"
    if param is not None:
        assert e["param"] == param or (param in e["message"]), \
            f"error does not name '{param}': {js!r}"
    if code is not None:
        assert e["code"] == code, f"error code {e['code']!r}, want {code!r}: {js!r}"


class Checks:
    """Runs named checks, prints PASS/FAIL with timings and exits 1 on failure."""

    def __init__(self, suite, only=""):
        self.suite = suite
        self.only = only
        self.results = []
        self.t0 = time.monotonic()

    def run(self, name, fn, *args):
        if self.only and self.only not in name:
            return None
        t = time.monotonic()
        try:
            out = fn(*args)
            ok, msg = True, ""
        except Exception as e:  # noqa: BLE001 - a failing check must not stop the suite
            out = None
            ok = False
            msg = f"{type(e).__name__}: {e}"
            if not isinstance(e, AssertionError):
                msg += "\n" + traceback.format_exc(limit=4)
        dt = time.monotonic() - t
        self.results.append((name, ok, msg))
        print(f"[{self.suite}] {'PASS' if ok else 'FAIL'} {name} ({dt:.2f}s){'' if ok else ': ' + msg}",
              flush=True)
        return out

    def finish(self):
        n_fail = sum(1 for _, ok, _ in self.results if not ok)
        print(f"[{self.suite}] {len(self.results) - n_fail}/{len(self.results)} checks passed "
              f"in {time.monotonic() - self.t0:.1f}s", flush=True)
        if n_fail:
            for name, ok, msg in self.results:
                if not ok:
                    print(f"[{self.suite}]   failed: {name}: {msg.splitlines()[0] if msg else ''}")
        sys.exit(1 if n_fail else 0)
