#!/usr/bin/env python3
"""End-to-end tests of `ember router` with real `ember serve` workers on
loopback (the default model, one thread each, small KV caches):

- passthrough: a greedy streamed chat through the router gives the worker's
  own answer; bad JSON gets the worker's 400; /health and /metrics;
- hit_rate: requests sharing a few long prefixes (cyclic order, more prefix
  text than one worker's KV cache holds): the workers' prefix-cache hit rate
  (read from their /metrics) with cache-aware routing is at least twice
  that of random routing, and with exact routing (--policy exact, from the
  block hashes the workers publish) at least that of cache-aware routing;
- exact_hashes: a worker's GET /kv_events (authenticated with --api-key)
  publishes, for a prompt it served, the chain hashes of its full blocks as
  computed here independently (a Python twin of BlockManager::chain_hash over
  the worker's /tokenize ids); the exact router routes by them and falls back
  to cache-aware routing when it lacks the workers' key;
- worker_killed: a worker is killed (SIGKILL) while requests stream from it
  and others wait in its queue: every request that had not started
  streaming completes on the other worker, the rest end with an error event
  and [DONE], none ends in silence; later requests are served;
- drain: SIGTERM lets an in-flight stream finish, the router exits 0;
- shutdown_cancels: past --shutdown-timeout a stream still going ends with
  an error event and [DONE];
- no_worker: with every worker down, a request gets 503 in OpenAI's shape;
- serve_data_parallel: `ember serve --data-parallel-size 2 --router-policy
  exact --api-key K` serves, routes exactly (the router has the workers'
  key), starts a killed worker again on its port (which publishes again, a
  new epoch), and stops its workers on SIGTERM.

Usage: router_test.py --ember build/ember [--model M] [--only NAME]
Exit: 0 passed, 1 failed, 77 skipped (no model file).
"""

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import router_util as ru  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

WORDS = ("river stone garden lamp window paper cloud silver orange mountain letter bridge candle forest "
         "engine harbor meadow pocket ribbon saddle thunder velvet wagon yellow anchor basket circle doctor "
         "feather glacier hammer island jacket kettle ladder marble needle ocean pepper quiet rocket").split()


def prefix_text(i, n_words):
    r = random.Random(1000 + i)
    return f"Document {i}. " + " ".join(r.choice(WORDS) for _ in range(n_words))


M64 = (1 << 64) - 1


def _mix(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def chain_hashes(ids, bs):
    """The prefix cache's key of each full block (BlockManager::chain_hash, written again)."""
    out, parent = [], 0
    for b in range(len(ids) // bs):
        h = _mix(parent ^ 0x5EEDB10C)
        for t in ids[b * bs:(b + 1) * bs]:
            h = _mix(h ^ (t & 0xFFFFFFFF))
        out.append(h)
        parent = h
    return out


def hit_rate(workers):
    hits = queries = 0
    for w in workers:
        m = ru.metrics(w)
        hits += m.get("ember:prefix_cache_hits_total", 0)
        queries += m.get("ember:prefix_cache_queries_total", 0)
    return hits / queries if queries else 0.0, hits, queries


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ember", required=True)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    if not os.path.exists(args.model):
        print(f"SKIP: model {args.model} not found")
        sys.exit(77)
    tmp = tempfile.mkdtemp(prefix="ember-router-test-")
    checks = ru.Checks(args.only)
    E, M = args.ember, args.model

    def passthrough():
        w = ru.start_worker(E, M, tmp, "pt-w0", ["--kv-cache-memory", "64M"])
        r = ru.start_router(E, [w], tmp, "pt-router")
        body = {"messages": [{"role": "user", "content": "Name three colors."}], "max_tokens": 12,
                "temperature": 0, "stream": True}
        s1, ev1, e1 = ru.stream(r, "/v1/chat/completions", body)
        s2, ev2, e2 = ru.stream(w, "/v1/chat/completions", body)
        assert s1 == 200 and e1 is None and ev1[-1] == "[DONE]", (s1, e1, ev1[-2:])

        def text(evs):
            return "".join(c["delta"].get("content") or "" for e in evs if isinstance(e, dict) for c in e["choices"])

        assert text(ev1) == text(ev2) and text(ev1), (text(ev1), text(ev2))
        assert len(ev1) == len(ev2), (len(ev1), len(ev2))
        status, j = ru.post_json(r, "/v1/completions", {"prompt": "Hello", "max_tokens": 3, "temperature": 0})
        assert status == 200 and j["choices"][0]["text"], (status, j)
        status, _, data = ru.request(r.host, r.port, "POST", "/v1/chat/completions", b"{not json",
                                     headers={"Content-Type": "application/json"})
        assert status == 400 and b"error" in data, (status, data)
        status, j = ru.post_json(r, "/v1/completions", {"prompt": "x", "max_tokens": "many"})
        assert status == 400 and j["error"]["param"] == "max_tokens", (status, j)
        status, _, data = ru.request(r.host, r.port, "GET", "/v1/models")
        assert status == 200 and b"gemma" in data, (status, data)
        status, _, data = ru.request(r.host, r.port, "GET", "/health")
        assert status == 200 and b'"workers_healthy":1' in data, data
        m = ru.metrics(r)
        key = f'ember_router:worker_requests_total{{worker="{w.url}"}}'
        assert m[key] >= 4, m
        assert r.stop() == 0
        w.stop()

    def hit_rate_check():
        # 9 prefixes over 3 workers. One worker's KV cache (22M) holds about 4
        # of the prefixes (280 words: about 300 tokens each): cache-aware
        # routing pins 3 prefixes to each worker, which then fit, while random
        # routing sends every prefix everywhere and the caches thrash.
        n_workers, n_prefix, rounds, words = 3, 9, 4, 280
        prefixes = [prefix_text(i, words) for i in range(n_prefix)]
        kv = ["--kv-cache-memory", "22M", "--max-num-seqs", "4"]
        rates = {}
        for policy in ("random", "cache_aware", "exact"):
            ws = [ru.start_worker(E, M, tmp, f"hr-{policy}-w{k}", kv) for k in range(n_workers)]
            r = ru.start_router(E, ws, tmp, f"hr-{policy}-router", ["--policy", policy, "--seed", "3"])
            t0 = time.time()
            for rd in range(rounds):
                for p in range(n_prefix):
                    body = {"prompt": prefixes[p] + f"\nQuestion {rd}.{p}: what comes next?", "max_tokens": 1,
                            "temperature": 0}
                    status, j = ru.post_json(r, "/v1/completions", body, timeout=300)
                    assert status == 200, (status, j)
            rate, hits, queries = hit_rate(ws)
            rm = ru.metrics(r)
            rates[policy] = rate
            print(f"     {policy}: prefix-cache hit rate {rate:.3f} ({hits:.0f} of {queries:.0f} prompt tokens), "
                  f"router affinity hit rate {rm['ember_router:affinity_hit_rate']:.3f}, "
                  f"{time.time() - t0:.1f} s", flush=True)
            if policy == "exact":
                assert rm['ember_router:requests_routed_total{reason="exact"}'] == rounds * n_prefix, rm
                assert rm["ember_router:exact_cached_block_ratio"] >= 0.5, rm
            if policy == "cache_aware":
                assert rm["ember_router:affinity_hit_rate"] >= 0.7, rm
                assert rm['ember_router:requests_routed_total{reason="affinity"}'] >= rounds * n_prefix - n_prefix
            assert r.stop() == 0
            for w in ws:
                w.stop()
        assert rates["cache_aware"] >= 2 * rates["random"], rates
        assert rates["exact"] >= rates["cache_aware"], rates
        assert rates["exact"] >= 2 * rates["random"], rates
        assert rates["cache_aware"] > 0.5, rates

    def worker_killed():
        kv = ["--kv-cache-memory", "64M", "--max-num-seqs", "2"]
        ws = [ru.start_worker(E, M, tmp, f"kill-w{k}", kv) for k in range(2)]
        r = ru.start_router(E, ws, tmp, "kill-router")
        n = 12
        results = [None] * n
        first_content = threading.Event()

        def on_event(i, ev):
            if isinstance(ev, dict) and any(c.get("delta", {}).get("content") for c in ev.get("choices", [])):
                first_content.set()

        def run(i):
            prompt = f"Story {i}: once upon a time in a land of {random.Random(i).choice(WORDS)}s"
            if i % 3 == 2:  # non-streamed completions
                results[i] = ("plain",) + ru.post_json(r, "/v1/completions",
                                                       {"prompt": prompt, "max_tokens": 40, "temperature": 0,
                                                        "ignore_eos": True}, timeout=300)
            else:
                results[i] = ("stream",) + ru.stream(r, "/v1/chat/completions",
                                                     {"messages": [{"role": "user", "content": prompt}],
                                                      "max_tokens": 40, "temperature": 0, "ignore_eos": True,
                                                      "stream": True}, timeout=300, on_event=on_event)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        assert first_content.wait(120), "no stream produced content"
        time.sleep(0.3)
        ws[0].kill()
        for t in threads:
            t.join(300)
        assert all(res is not None for res in results), results
        completed = errored = 0
        for i, res in enumerate(results):
            if res[0] == "plain":
                _, status, j = res
                assert status == 200 and j["choices"][0]["finish_reason"] == "length", (i, status, j)
                completed += 1
                continue
            _, status, evs, broken = res
            assert status == 200 and broken is None, (i, status, broken, evs[-3:])
            assert evs and evs[-1] == "[DONE]", (i, evs[-3:])
            errs = [e for e in evs if isinstance(e, dict) and "error" in e]
            if errs:
                # Only a stream that had already sent output may end in an error.
                before = evs[:evs.index(errs[0])]
                assert any(isinstance(e, dict) and any(c.get("delta", {}).get("content") for c in e["choices"])
                           for e in before), (i, evs[:4])
                assert "worker" in errs[0]["error"]["message"], errs[0]
                errored += 1
            else:
                assert evs[-2]["choices"][0]["finish_reason"] == "length", (i, evs[-3:])
                completed += 1
        m = ru.metrics(r)
        print(f"     {completed} completed, {errored} ended with an error event; router retries "
              f"{m['ember_router:retries_total']:.0f}, stream errors {m['ember_router:stream_errors_total']:.0f}",
              flush=True)
        assert completed + errored == n
        assert m["ember_router:retries_total"] >= 1, m
        assert m["ember_router:stream_errors_total"] == errored, m
        assert m[f'ember_router:worker_healthy{{worker="{ws[0].url}"}}'] == 0
        status, j = ru.post_json(r, "/v1/completions", {"prompt": "After", "max_tokens": 2})
        assert status == 200, (status, j)
        assert r.stop() == 0
        ws[1].stop()

    def drain():
        w = ru.start_worker(E, M, tmp, "drain-w0", ["--kv-cache-memory", "64M"])
        r = ru.start_router(E, [w], tmp, "drain-router")
        got = threading.Event()
        out = {}

        def on_event(i, ev):
            got.set()

        def run():
            out["res"] = ru.stream(r, "/v1/completions", {"prompt": "Count: one two three", "max_tokens": 48,
                                                          "temperature": 0, "ignore_eos": True, "stream": True},
                                   on_event=on_event)

        t = threading.Thread(target=run)
        t.start()
        assert got.wait(60)
        r.p.send_signal(15)
        t.join(120)
        status, evs, broken = out["res"]
        assert broken is None and evs[-1] == "[DONE]", (broken, evs[-2:])
        assert evs[-2]["choices"][0]["finish_reason"] == "length", evs[-2:]
        assert r.p.wait(30) == 0
        w.stop()

    def shutdown_cancels():
        # Past --shutdown-timeout the router cancels what is left: a stream
        # that had output ends with an error event and [DONE], not a cut.
        w = ru.start_worker(E, M, tmp, "sc-w0", ["--kv-cache-memory", "64M"])
        r = ru.start_router(E, [w], tmp, "sc-router", ["--shutdown-timeout", "1"])
        got = threading.Event()
        out = {}

        def run():
            out["res"] = ru.stream(r, "/v1/completions", {"prompt": "Count: one two three", "max_tokens": 2000,
                                                          "temperature": 0, "ignore_eos": True, "stream": True},
                                   on_event=lambda i, ev: got.set())

        t = threading.Thread(target=run)
        t.start()
        assert got.wait(60)
        t0 = time.time()
        r.p.send_signal(15)
        t.join(60)
        status, evs, broken = out["res"]
        assert broken is None and evs[-1] == "[DONE]", (broken, evs[-2:])
        assert "error" in evs[-2] and "shutting down" in evs[-2]["error"]["message"], evs[-2:]
        assert r.p.wait(30) == 0 and time.time() - t0 < 10
        w.stop()

    def serve_data_parallel():
        # ember serve --data-parallel-size 2: two workers and the router in
        # one command; a worker that dies is started again on its port. With
        # --router-policy exact and --api-key the router reads the workers'
        # /kv_events with their key, also from the restarted worker (a new epoch).
        import subprocess
        dp = ru.Proc([E, "serve", "-m", M, "--data-parallel-size", "2", "--port", "0", "-t", "2",
                      "--kv-cache-memory", "64M", "--disable-log-requests", "--router-policy", "exact",
                      "--api-key", "dpkey"], os.path.join(tmp, "dp.log"))

        def post(body):
            status, _, data = ru.request(dp.host, dp.port, "POST", "/v1/completions", body,
                                         headers={"Authorization": "Bearer dpkey"})
            return status, data

        def publishing(m):
            return sum(1 for k, v in m.items() if k.startswith("ember_router:worker_kv_publishing") and v == 1)

        status, j = post({"prompt": "Hello", "max_tokens": 2, "temperature": 0})
        assert status == 200, (status, j)
        m = ru.metrics(dp)
        healthy = [k for k, v in m.items() if k.startswith("ember_router:worker_healthy") and v == 1]
        assert len(healthy) == 2, m
        assert publishing(m) == 2, m
        kids = subprocess.run(["pgrep", "-P", str(dp.pid)], capture_output=True, text=True).stdout.split()
        assert len(kids) == 2, kids
        os.kill(int(kids[0]), 9)
        t0 = time.time()
        back = False
        while time.time() - t0 < 60:
            time.sleep(0.5)
            now = subprocess.run(["pgrep", "-P", str(dp.pid)], capture_output=True, text=True).stdout.split()
            m = ru.metrics(dp)
            up = sum(1 for k, v in m.items() if k.startswith("ember_router:worker_healthy") and v == 1)
            if len(now) == 2 and kids[0] not in now and up == 2 and publishing(m) == 2:
                back = True
                break
        assert back, (now, m)
        for _ in range(4):
            status, j = post({"prompt": "Again", "max_tokens": 2})
            assert status == 200, (status, j)
        m = ru.metrics(dp)
        assert m['ember_router:requests_routed_total{reason="exact"}'] == 5, m
        assert dp.stop(60) == 0
        left = subprocess.run(["pgrep", "-P", str(dp.pid)], capture_output=True, text=True).stdout.split()
        assert not left, left
        log = open(os.path.join(tmp, "dp.log")).read()
        assert "killed by signal 9; starting it again" in log, log[-2000:]

    def no_worker():
        w = ru.start_worker(E, M, tmp, "nw-w0", ["--kv-cache-memory", "64M"])
        r = ru.start_router(E, [w], tmp, "nw-router")
        w.kill()
        status, j = ru.post_json(r, "/v1/completions", {"prompt": "x", "max_tokens": 2})
        assert status in (502, 503) and j["error"]["type"] == "server_error", (status, j)
        time.sleep(0.6)  # the health check notices
        status, j = ru.post_json(r, "/v1/completions", {"prompt": "x", "max_tokens": 2})
        assert status == 503 and "no healthy worker" in j["error"]["message"], (status, j)
        status, _, data = ru.request(r.host, r.port, "GET", "/health")
        assert status == 503, (status, data)
        assert r.stop() == 0

    def exact_hashes():
        key = "sekrit"
        auth = {"Authorization": f"Bearer {key}"}
        w = ru.start_worker(E, M, tmp, "ex-w0", ["--kv-cache-memory", "64M", "--api-key", key])
        status, _, _ = ru.request(w.host, w.port, "GET", "/kv_events")
        assert status == 401, status
        status, _, data = ru.request(w.host, w.port, "GET", "/kv_events", headers=auth)
        j = json.loads(data)
        assert status == 200 and j["reset"] is True and j["hashes"] == [] and j["block_size"] == 16, (status, j)
        epoch, seq, bs = j["epoch"], j["seq"], j["block_size"]
        r = ru.start_router(E, [w], tmp, "ex-router", ["--policy", "exact", "--worker-api-key", key])
        nokey = ru.start_router(E, [w], tmp, "ex-router-nokey", ["--policy", "exact"])
        body = {"messages": [{"role": "system", "content": prefix_text(0, 120)},
                             {"role": "user", "content": "What comes next?"}], "max_tokens": 2, "temperature": 0}
        status, _, data = ru.request(r.host, r.port, "POST", "/v1/chat/completions", body, headers=auth)
        assert status == 200, (status, data)
        status, _, data = ru.request(w.host, w.port, "POST", "/tokenize", body, headers=auth)
        ids = json.loads(data)["tokens"]
        want = chain_hashes(ids, bs)
        assert len(want) >= 8, len(ids)
        status, _, data = ru.request(w.host, w.port, "GET", f"/kv_events?epoch={epoch}&since={seq}", headers=auth)
        j = json.loads(data)
        assert status == 200 and j["reset"] is False, (status, j)
        stored = [h for op, h in j["events"] if op == 1]
        assert stored[:len(want)] == want, (stored[:4], want[:4])
        # The router polls them: the same prompt again is routed exactly, every matchable block cached.
        deadline = time.time() + 10
        while ru.metrics(r).get(f'ember_router:worker_kv_cached_blocks{{worker="{w.url}"}}', 0) < len(want):
            assert time.time() < deadline, ru.metrics(r)
            time.sleep(0.1)
        status, _, data = ru.request(r.host, r.port, "POST", "/v1/chat/completions", body, headers=auth)
        assert status == 200, (status, data)
        m = ru.metrics(r)
        assert m[f'ember_router:worker_kv_publishing{{worker="{w.url}"}}'] == 1, m
        assert m['ember_router:requests_routed_total{reason="exact"}'] == 2, m
        full = (len(ids) - 1) // bs
        assert m["ember_router:exact_cached_block_ratio"] >= full / (2 * ((len(ids) + bs - 1) // bs)) - 1e-9, m
        # Without the workers' key the router cannot read /kv_events: cache-aware routing, still served.
        status, _, data = ru.request(nokey.host, nokey.port, "POST", "/v1/chat/completions", body, headers=auth)
        assert status == 200, (status, data)
        m = ru.metrics(nokey)
        assert m[f'ember_router:worker_kv_publishing{{worker="{w.url}"}}'] == 0, m
        assert m["ember_router:exact_fallbacks_total"] == 1, m
        assert m[f'ember_router:worker_kv_poll_errors_total{{worker="{w.url}"}}'] >= 1, m
        assert "--worker-api-key" in open(os.path.join(tmp, "ex-router-nokey.log")).read()
        assert r.stop() == 0 and nokey.stop() == 0
        w.stop()

    checks.run("passthrough", passthrough)
    checks.run("exact_hashes", exact_hashes)
    checks.run("hit_rate", hit_rate_check)
    checks.run("worker_killed", worker_killed)
    checks.run("drain", drain)
    checks.run("shutdown_cancels", shutdown_cancels)
    checks.run("no_worker", no_worker)
    checks.run("serve_data_parallel", serve_data_parallel)
    checks.finish()


if __name__ == "__main__":
    main()
