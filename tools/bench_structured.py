#!/usr/bin/env python3
"""Structured vs free generation speed against a running `ember serve`.

Sends rounds of `--concurrency` chat requests (ignore_eos, fixed
max_tokens, seeded), alternating free / json_object / a small json_schema
(flexible whitespace; `compact`: ember's json_whitespace "compact"; `nojump`:
forced-token jumps off), and reports per round the output tokens/s, the
tokens appended by forced-token jumps (usage.forced_tokens) and the
engine's seconds per step (from /metrics: ember:engine_step_seconds_total /
ember:engine_steps_total), then the medians per mode and their ratio to
free. Paired and alternating, so a noisy shared machine affects every mode
alike. `--server llama` drives llama.cpp's llama-server instead (the same
schema through its response_format json_schema, GBNF sampling; no ember
extensions, no step metrics, and without ignore_eos: llama-server's grammar
sampler fails a request that samples past the grammar's end, so requests end
at end-of-generation; `--no-ignore-eos` runs ember the same way for the
side-by-side).

  python3 tools/bench_structured.py --base-url http://127.0.0.1:PORT [--concurrency 16] [--rounds 2]
      [--modes free,json_object,small_schema,small_schema_compact] [--server ember|llama] [--api-key KEY]
      [--no-ignore-eos]
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
SCHEMA_RF = {"type": "json_schema", "json_schema": {"name": "w", "schema": SMALL_SCHEMA}}
MODES = {  # mode -> (response_format, extra body fields)
    "free": (None, {}),
    "json_object": ({"type": "json_object"}, {}),
    "small_schema": (SCHEMA_RF, {}),
    "small_schema_compact": (SCHEMA_RF, {"json_whitespace": "compact"}),
    "small_schema_nojump": (SCHEMA_RF, {"forced_tokens": False}),
}


HEADERS = {"Content-Type": "application/json"}


def metrics(url):
    out = {"ember:engine_steps_total": 0.0, "ember:engine_step_seconds_total": 0.0}
    try:
        text = urllib.request.urlopen(urllib.request.Request(url + "/metrics", headers=HEADERS)).read().decode()
    except OSError:
        return out  # llama-server without --metrics
    for line in text.splitlines():
        if line.startswith("ember:engine_step"):
            k, v = line.split()
            out[k] = float(v)
    return out


def one(url, k, mode, max_tokens, ignore_eos):
    rf, extra = MODES[mode]
    body = {"messages": [{"role": "user", "content": "Answer in JSON."}], "max_tokens": max_tokens,
            "temperature": 0.8, "seed": k, "ignore_eos": ignore_eos}
    if rf:
        body["response_format"] = rf
    body.update(extra)
    req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(), HEADERS)
    r = json.loads(urllib.request.urlopen(req, timeout=600).read())
    text = r["choices"][0]["message"].get("content") or ""
    if rf:  # JSON (or its start, when max_tokens cut it)
        assert text.lstrip().startswith("{"), text
    return r["usage"]["completion_tokens"], r["usage"].get("forced_tokens", 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=40)
    ap.add_argument("--modes", default="free,json_object,small_schema,small_schema_compact")
    ap.add_argument("--server", choices=["ember", "llama"], default="ember")
    ap.add_argument("--api-key", default="")
    ap.add_argument("--no-ignore-eos", action="store_true",
                    help="let requests end at end-of-generation (always so with --server llama, whose grammar "
                         "sampler fails a request that samples past the grammar's end)")
    a = ap.parse_args()
    ignore_eos = not a.no_ignore_eos and a.server != "llama"
    if a.api_key:
        HEADERS["Authorization"] = "Bearer " + a.api_key
    url = a.base_url.rstrip("/")
    modes = a.modes.split(",")
    if a.server == "llama":
        modes = [m for m in modes if not MODES[m][1]]  # no ember extensions
    res = {m: [] for m in modes}
    for r in range(a.rounds):
        for mode in modes:
            m0, t0 = metrics(url), time.time()
            with concurrent.futures.ThreadPoolExecutor(a.concurrency) as ex:
                outs = list(ex.map(lambda k: one(url, 1000 * r + k, mode, a.max_tokens, ignore_eos), range(a.concurrency)))
            wall = time.time() - t0
            toks, forced = sum(o[0] for o in outs), sum(o[1] for o in outs)
            m1 = metrics(url)
            steps = m1["ember:engine_steps_total"] - m0["ember:engine_steps_total"]
            secs = m1["ember:engine_step_seconds_total"] - m0["ember:engine_step_seconds_total"]
            res[mode].append((toks / wall, secs / max(steps, 1), forced / max(toks, 1)))
            print(f"round {r} {mode:20s} tokens {toks} forced {forced} wall {wall:.2f} s  {toks / wall:.1f} tok/s  "
                  f"{1000 * secs / max(steps, 1):.1f} ms/step", flush=True)
    free_tps = statistics.median(x[0] for x in res["free"])
    free_step = statistics.median(x[1] for x in res["free"]) or 1e-9
    for mode, xs in res.items():
        tps = statistics.median(x[0] for x in xs)
        step = statistics.median(x[1] for x in xs)
        fr = statistics.median(x[2] for x in xs)
        print(f"median {mode:20s} {tps:.1f} tok/s ({tps / free_tps:.2f}x free)  {1000 * step:.1f} ms/step "
              f"({step / free_step:.2f}x free)  forced {100 * fr:.0f}% of tokens")


if __name__ == "__main__":
    main()
