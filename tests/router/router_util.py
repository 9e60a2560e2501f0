"""Helpers for the tests that run real `ember serve` workers and `ember router`
processes on loopback (tests/router/router_test.py,
tests/server/connection_scale_test.py): start a process and wait for its
"listening on http://..." line, stop it, raw HTTP and SSE requests on fresh
connections, Prometheus /metrics parsing, and a small named-check runner.
Every wait is bounded; processes are killed at exit whatever happens.
"""

import atexit
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import traceback
import urllib.parse

_procs = []


def _kill_all():
    for p in _procs:
        if p.poll() is None:
            p.kill()
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                pass


atexit.register(_kill_all)


class Proc:
    """A started ember process with its URL; stderr goes to a log file."""

    def __init__(self, args, log_path, timeout=120):
        self.args = args
        self.log_path = log_path
        self.log = open(log_path, "wb")
        self.p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.log, stdin=subprocess.DEVNULL)
        _procs.append(self.p)
        self.url = None
        lines = []
        # The line is read on a thread so the wait is bounded even if the
        # process prints nothing.
        got = threading.Event()

        def reader():
            for raw in self.p.stdout:
                line = raw.decode(errors="replace")
                lines.append(line)
                m = re.search(r"listening on (http://[^\s]+)", line)
                if m:
                    self.url = m.group(1)
                    got.set()
            got.set()

        threading.Thread(target=reader, daemon=True).start()
        if not got.wait(timeout) or self.url is None:
            self.p.kill()
            raise RuntimeError(f"{args[:2]} did not start: {''.join(lines)} {self.stderr_tail()}")
        u = urllib.parse.urlparse(self.url)
        self.host, self.port = u.hostname, u.port

    @property
    def pid(self):
        return self.p.pid

    def stderr_tail(self, n=2000):
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout=30):
        """SIGTERM, then wait; returns the exit code (SIGKILL after timeout)."""
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait(5)
            return None

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait(10)


def start_worker(ember, model, tmp, name, extra=()):
    return Proc([ember, "serve", "-m", model, "--port", "0", "-t", "1", "--disable-log-requests", *extra],
                os.path.join(tmp, name + ".log"))


def start_router(ember, workers, tmp, name="router", extra=()):
    return Proc([ember, "router", "--port", "0", "--workers", ",".join(w.url for w in workers),
                 "--health-interval", "0.2", "--health-timeout", "1", *extra],
                os.path.join(tmp, name + ".log"))


def request(host, port, method, path, body=None, timeout=120, headers=None):
    """One request on a fresh connection: (status, headers, body bytes)."""
    h = dict(headers or {})
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
        h.setdefault("Content-Type", "application/json")
    c = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def post_json(proc, path, obj, timeout=120):
    status, _, data = request(proc.host, proc.port, "POST", path, obj, timeout=timeout)
    try:
        return status, json.loads(data)
    except ValueError:
        return status, None


def stream(proc, path, obj, timeout=120, on_event=None):
    """A streamed request. Returns (status, events as parsed JSON or the
    string "[DONE]", error) where error is the exception text if the
    connection broke (events until then are kept). on_event(i, ev) is called
    as each event arrives."""
    events = []
    c = http.client.HTTPConnection(proc.host, proc.port, timeout=timeout)
    try:
        c.request("POST", path, body=json.dumps(obj).encode(), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            return r.status, [json.loads(r.read() or b"null")], None
        buf = b""
        while True:
            chunk = r.read1(65536) if hasattr(r, "read1") else r.read(1)
            if not chunk:
                break
            buf += chunk
            while b"\n\n" in buf:
                raw, buf = buf.split(b"\n\n", 1)
                for line in raw.split(b"\n"):
                    if line.startswith(b"data: "):
                        d = line[6:].decode()
                        ev = d if d == "[DONE]" else json.loads(d)
                        events.append(ev)
                        if on_event:
                            on_event(len(events) - 1, ev)
        return 200, events, None
    except Exception as e:  # a broken connection: the caller decides
        return 200, events, f"{type(e).__name__}: {e}"
    finally:
        c.close()


def metrics(proc):
    """Prometheus text of /metrics as {name{labels}: value}."""
    status, _, data = request(proc.host, proc.port, "GET", "/metrics", timeout=30)
    assert status == 200, status
    out = {}
    for line in data.decode().splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        try:
            out[name] = float(value)
        except ValueError:
            pass
    return out


class Checks:
    """Named checks: run(name, fn) records pass/fail; finish() exits 0 or 1."""

    def __init__(self, only=""):
        self.only = only
        self.failed = []
        self.passed = 0

    def run(self, name, fn):
        if self.only and self.only not in name:
            return
        t0 = time.time()
        try:
            fn()
            self.passed += 1
            print(f"ok   {name} ({time.time() - t0:.1f} s)", flush=True)
        except Exception:
            self.failed.append(name)
            print(f"FAIL {name} ({time.time() - t0:.1f} s)\n{traceback.format_exc()}", flush=True)

    def finish(self):
        print(f"{self.passed} passed, {len(self.failed)} failed")
        sys.exit(1 if self.failed else 0)
