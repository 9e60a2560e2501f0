#!/usr/bin/env python3
"""Concurrent load test of `ember serve`: batch invariance and no leaks.

First runs each distinct request alone (sequentially) to get reference
outputs, then sends REQUESTS (and then REQUESTS_ROUND2) requests (a mix of chat and text
completions, streaming and not, greedy or seeded, 10 distinct prompts) from
CONCURRENCY threads. Every request must succeed and produce exactly the
tokens of its reference run: greedy decoding through the server must not
depend on what else is batched with it. Afterwards /metrics must show
nothing running or waiting and no KV block in use, its token counters must
match the usage the responses reported, and (with --pid) the server's RSS
after the second round must be back near its level after the first round.

  python3 tests/server/load_test.py --base-url http://127.0.0.1:PORT --api-key KEY [--pid PID]

Run by tests/server/server_test.sh. Exit status 0 passed, 1 failed.
"""

import concurrent.futures
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_util  # noqa: E402

REQUESTS = 200          # first round (also warms the allocator up)
REQUESTS_ROUND2 = 100   # second round, over which RSS must not grow
CONCURRENCY = 32
MAX_TOKENS = 8
RSS_MARGIN_KIB = 64 << 10

PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village,",
    "def fibonacci(n):",
    "The three primary colors are",
    "In 1969, the first humans",
    "Water boils at a temperature of",
    "My favourite recipe for pancakes needs",
    "The quick brown fox",
    "A haiku about the sea:",
    "Rules of chess: the knight moves",
]
# (endpoint, stream, seeded): greedy, or seeded sampling (temperature 0.8,
# seed fixed per prompt), which must be just as reproducible under batching.
KINDS = [("completions", False, False), ("chat", False, False), ("completions", True, False),
         ("chat", True, False), ("completions", True, True)]


def spec(i):
    """The i-th request of a round: prompt index and kind."""
    return i % len(PROMPTS), KINDS[(i // len(PROMPTS)) % len(KINDS)]


def body_for(pi, endpoint, stream, seeded):
    b = {"max_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True, "stream": stream}
    if seeded:
        b.update(temperature=0.8, seed=1000 + pi)
    if endpoint == "chat":
        b["messages"] = [{"role": "user", "content": PROMPTS[pi]}]
        b["logprobs"] = True
    else:
        b["prompt"] = PROMPTS[pi]
        b["logprobs"] = 1
    if stream:
        b["stream_options"] = {"include_usage": True}
    return b


def run_one(srv, pi, endpoint, stream, seeded):
    """Sends one request; returns (text, tokens, logprobs, usage)."""
    path = "/v1/chat/completions" if endpoint == "chat" else "/v1/completions"
    body = body_for(pi, endpoint, stream, seeded)
    if not stream:
        st, js = srv.post_json(path, body, timeout=300)
        assert st == 200, f"{path} -> {st}: {js}"
        c = js["choices"][0]
        assert c["finish_reason"] == "length", c
        if endpoint == "chat":
            text = c["message"]["content"]
            toks = [e["token"] for e in c["logprobs"]["content"]]
            lps = [e["logprob"] for e in c["logprobs"]["content"]]
        else:
            text = c["text"]
            toks, lps = c["logprobs"]["tokens"], c["logprobs"]["token_logprobs"]
        return text, toks, lps, js["usage"]
    st, events, done = srv.stream_events(path, body, timeout=300)
    assert st == 200, f"{path} stream -> {st}: {events}"
    assert done, "stream without [DONE]"
    text, toks, lps, usage, finish = "", [], [], None, None
    for ev in events:
        if ev.get("usage"):
            usage = ev["usage"]
        for c in ev.get("choices", []):
            if endpoint == "chat":
                text += c["delta"].get("content") or ""
                if c.get("logprobs") and c["logprobs"].get("content"):
                    toks += [e["token"] for e in c["logprobs"]["content"]]
                    lps += [e["logprob"] for e in c["logprobs"]["content"]]
            else:
                text += c.get("text") or ""
                if c.get("logprobs"):
                    toks += c["logprobs"]["tokens"]
                    lps += c["logprobs"]["token_logprobs"]
            if c.get("finish_reason"):
                finish = c["finish_reason"]
    assert finish == "length", finish
    assert usage is not None, "no usage chunk"
    return text, toks, lps, usage


def references(srv):
    """Each distinct (prompt, endpoint, seeded) run alone, not streaming (the
    streamed runs under load must match these too)."""
    ref = {}
    for pi in range(len(PROMPTS)):
        for endpoint, seeded in {(k[0], k[2]) for k in KINDS}:
            ref[(pi, endpoint, seeded)] = run_one(srv, pi, endpoint, False, seeded)
            assert len(ref[(pi, endpoint, seeded)][1]) == MAX_TOKENS
    return ref


def load_round(srv, ref, n_requests):
    """Sends n_requests at CONCURRENCY; returns (n_mismatch, max logprob diff,
    prompt tokens, completion tokens, wall seconds, first mismatches)."""
    def task(i):
        pi, (endpoint, stream, seeded) = spec(i)
        return i, run_one(srv, pi, endpoint, stream, seeded)

    t = time.monotonic()
    mism, worst, ptoks, ctoks = [], 0.0, 0, 0
    with concurrent.futures.ThreadPoolExecutor(CONCURRENCY) as ex:
        for i, (text, toks, lps, usage) in ex.map(task, range(n_requests)):
            pi, (endpoint, stream, seeded) = spec(i)
            rtext, rtoks, rlps, rusage = ref[(pi, endpoint, seeded)]
            ptoks += usage["prompt_tokens"]
            ctoks += usage["completion_tokens"]
            assert usage["prompt_tokens"] == rusage["prompt_tokens"], (usage, rusage)
            if text != rtext or toks != rtoks:
                mism.append(f"#{i} {endpoint} stream={stream} seeded={seeded} prompt {pi}: "
                            f"{text!r} != {rtext!r}")
            else:
                worst = max([worst] + [abs(a - b) for a, b in zip(lps, rlps)])
    return len(mism), worst, ptoks, ctoks, time.monotonic() - t, mism[:5]


def main():
    args = server_util.parse_args(__doc__)
    srv = server_util.Server(args.base_url, args.api_key, args.pid)
    checks = server_util.Checks("load", args.only)
    state = {}

    def t_refs():
        srv.wait_idle(timeout=10)
        if args.pid:
            state["rss0"] = srv.rss_kib()
        state["ref"] = references(srv)

    def round_check(n):
        m0 = srv.wait_idle(timeout=10)
        n_mis, worst, ptoks, ctoks, dt, examples = load_round(srv, state["ref"], n)
        print(f"[load]   {n} requests at concurrency {CONCURRENCY} in {dt:.1f}s "
              f"({ctoks / dt:.0f} generated tok/s), max |logprob - reference| = {worst:.2e}", flush=True)
        assert n_mis == 0, f"{n_mis}/{n} outputs differ from their solo run: " + "; ".join(examples)
        assert worst < 1e-3, f"logprobs differ from the solo run by up to {worst}"
        m1 = srv.wait_idle(timeout=10)
        # The counters are updated just after each response is sent, so they
        # may trail the last response by a moment: poll briefly.
        want = {"prompt_tokens_total": ptoks, "generation_tokens_total": ctoks,
                "request_success_total": n}
        deadline = time.monotonic() + 3
        while True:
            d = {k: srv.metric_sum(m1, "ember:" + k) - srv.metric_sum(m0, "ember:" + k) for k in want}
            if d == want or time.monotonic() > deadline:
                break
            time.sleep(0.05)
            m1 = srv.metrics()
        assert d == want, f"metrics counters grew by {d}, responses reported {want}"
        assert m1.get("ember:num_preemptions_total", 0) >= 0

    def t_rss_idle():
        srv.wait_idle(timeout=10)
        state["rss1"] = srv.rss_kib()
        print(f"[load]   RSS at start {state.get('rss0', 0) >> 10} MiB, after warm-up round "
              f"{state['rss1'] >> 10} MiB", flush=True)

    def t_rss_after():
        srv.wait_idle(timeout=10)
        rss2 = srv.rss_kib()
        print(f"[load]   RSS after second round {rss2 >> 10} MiB (limit {(state['rss1'] + RSS_MARGIN_KIB) >> 10})",
              flush=True)
        assert rss2 < state["rss1"] + RSS_MARGIN_KIB, \
            f"RSS grew from {state['rss1'] >> 10} to {rss2 >> 10} MiB over a round"

    checks.run("solo_references", t_refs)
    if "ref" not in state:
        checks.finish()
    checks.run("round1_batch_invariance", round_check, REQUESTS)
    if args.pid:
        checks.run("rss_idle_after_warmup", t_rss_idle)
    checks.run("round2_batch_invariance", round_check, REQUESTS_ROUND2)
    if args.pid and "rss1" in state:
        checks.run("rss_back_near_idle", t_rss_after)
    checks.run("idle_after", lambda: srv.wait_idle(timeout=5))
    checks.finish()


if __name__ == "__main__":
    main()
