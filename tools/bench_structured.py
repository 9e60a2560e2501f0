#!/usr/bin/env python3
"""Structured vs free generation speed against a running `ember serve`.

Sends rounds of `--concurrency` chat requests (ignore_eos, fixed
max_tokens, seeded), alternating free / json_object / a small json_schema,
and reports per round the output tokens/s and the engine's seconds per step
(from /metrics: ember:engine_step_seconds_total / ember:engine_steps_total),
then the medians per mode and their ratio to free. Paired and alternating,
so a noisy shared machine affects every mode alike.

  python3 tools/bench_structured.py --base-url http://127.0.0.1:PORT [--concurrency 16] [--rounds 2]
"""
import argparse
import concurrent.futures
import json
import statistics
import time
import urllib.request

SMALL_SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                                 "temp_c": {"type": "integer", "minimum": -50, "maximum": 50},
                                                 "sky": {"enum": ["clear", "cloudy", "rain"]}},
                "required": ["city", "temp_c", "sky"], "additionalProperties": False}
MODES = {
    "free": None,
    "json_object": {"type": "json_object"},
    "small_schema": {"type": "json_schema", "json_schema": {"name": "w", "schema": SMALL_SCHEMA}},
}


def metrics(url):
    out = {}
    for line in urllib.request.urlopen(url + "/metrics").read().decode().splitlines():
        if line.startswith("ember:engine_step"):
            k, v = line.split()
            out[k] = float(v)
    return out


def one(url, k, rf, max_tokens):
    body = {"messages": [{"role": "user", "content": "Answer in JSON."}], "max_tokens": max_tokens,
            "temperature": 0.8, "seed": k, "ignore_eos": True}
    if rf:
        body["response_format"] = rf
    req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=600).read())["usage"]["completion_tokens"]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=40)
    a = ap.parse_args()
    url = a.base_url.rstrip("/")
    res = {m: [] for m in MODES}
    for r in range(a.rounds):
        for mode, rf in MODES.items():
            m0, t0 = metrics(url), time.time()
            with concurrent.futures.ThreadPoolExecutor(a.concurrency) as ex:
                toks = sum(ex.map(lambda k: one(url, 1000 * r + k, rf, a.max_tokens), range(a.concurrency)))
            wall = time.time() - t0
            m1 = metrics(url)
            steps = m1["ember:engine_steps_total"] - m0["ember:engine_steps_total"]
            secs = m1["ember:engine_step_seconds_total"] - m0["ember:engine_step_seconds_total"]
            res[mode].append((toks / wall, secs / max(steps, 1)))
            print(f"round {r} {mode:12s} tokens {toks} wall {wall:.2f} s  {toks / wall:.1f} tok/s  "
                  f"{1000 * secs / max(steps, 1):.1f} ms/step", flush=True)
    free_tps = statistics.median(x[0] for x in res["free"])
    free_step = statistics.median(x[1] for x in res["free"])
    for mode, xs in res.items():
        tps = statistics.median(x[0] for x in xs)
        step = statistics.median(x[1] for x in xs)
        print(f"median {mode:12s} {tps:.1f} tok/s ({tps / free_tps:.2f}x free)  {1000 * step:.1f} ms/step "
              f"({step / free_step:.2f}x free)")


if __name__ == "__main__":
    main()
