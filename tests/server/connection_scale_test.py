#!/usr/bin/env python3
"""Connections at scale: `ember serve` and `ember router` keep serving new
clients while 10,000 idle or slow connections are open (half connected and
silent, half in the middle of sending a request's headers).

- serve: the 10,000 stay open (the limit is 16,384) and 20 new clients get
  /health and a completion in time;
- serve --max-connections 1024 (the old fixed limit, which used to lock new
  clients out until the idle ones timed out): the new clients are still
  served, the longest idle connections make room;
- router: the same 10,000 against the router in front of a worker.

Usage: connection_scale_test.py --ember build/ember [--model M] [--n 10000]
Exit: 0 passed, 1 failed, 77 skipped (no model file, or the open-file hard
limit cannot hold the connections).
"""

import argparse
import os
import resource
import select
import socket
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "router"))
import router_util as ru  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def open_many(host, port, n):
    """n connections: even ones silent, odd ones with a partial request."""
    socks = []
    for i in range(n):
        s = socket.create_connection((host, port), timeout=10)
        if i % 2:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        socks.append(s)
    return socks


def n_closed(socks):
    """How many of the sockets the server has closed (EOF or reset)."""
    closed = 0
    for k in range(0, len(socks), 512):
        part = socks[k:k + 512]
        poller = select.poll()
        for s in part:
            poller.register(s, select.POLLIN | select.POLLHUP | select.POLLERR)
        for fd, ev in poller.poll(0):
            closed += 1
    return closed


def serve_new_clients(proc, n_clients=20, limit_s=15):
    t0 = time.time()
    worst = 0
    for i in range(n_clients):
        t = time.time()
        status, _, data = ru.request(proc.host, proc.port, "GET", "/health", timeout=limit_s)
        assert status == 200, (status, data)
        if i % 5 == 0:
            status, j = ru.post_json(proc, "/v1/completions", {"prompt": f"Client {i} says", "max_tokens": 2},
                                     timeout=limit_s)
            assert status == 200 and j["choices"][0]["text"] is not None, (status, j)
        worst = max(worst, time.time() - t)
    return time.time() - t0, worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ember", required=True)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    if not os.path.exists(args.model):
        print(f"SKIP: model {args.model} not found")
        sys.exit(77)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = args.n + 256
    if hard != resource.RLIM_INFINITY and hard < need:
        print(f"SKIP: the open-file hard limit ({hard}) cannot hold {args.n} client connections")
        sys.exit(77)
    resource.setrlimit(resource.RLIMIT_NOFILE, (need if hard == resource.RLIM_INFINITY else hard, hard))
    tmp = tempfile.mkdtemp(prefix="ember-conn-scale-")
    checks = ru.Checks(args.only)
    common = ["--kv-cache-memory", "64M", "--request-timeout", "120", "--idle-timeout", "120"]

    def check(target, expect_kept):
        t0 = time.time()
        socks = open_many(target.host, target.port, args.n)
        t_open = time.time() - t0
        try:
            time.sleep(0.5)
            total, worst = serve_new_clients(target)
            closed = n_closed(socks)
            print(f"     {args.n} connections opened in {t_open:.1f} s; 20 new clients served in {total:.2f} s "
                  f"(slowest {worst:.2f} s); {closed} of the {args.n} closed by the server", flush=True)
            assert worst < 10, worst
            if expect_kept:
                assert closed == 0, closed
            else:
                assert closed > 0, closed
        finally:
            for s in socks:
                s.close()

    def serve():
        w = ru.start_worker(args.ember, args.model, tmp, "serve", common)
        check(w, expect_kept=True)
        assert w.stop() == 0

    def serve_low_limit():
        w = ru.start_worker(args.ember, args.model, tmp, "serve-1024", common + ["--max-connections", "1024"])
        check(w, expect_kept=False)
        assert w.stop() == 0

    def router():
        w = ru.start_worker(args.ember, args.model, tmp, "router-worker", ["--kv-cache-memory", "64M"])
        r = ru.start_router(args.ember, [w], tmp, "router", ["--request-timeout", "120", "--idle-timeout", "120"])
        check(r, expect_kept=True)
        assert r.stop() == 0
        assert w.stop() == 0

    checks.run("serve_10k", serve)
    checks.run("serve_10k_over_limit", serve_low_limit)
    checks.run("router_10k", router)
    checks.finish()


if __name__ == "__main__":
    main()
