#!/usr/bin/env python3
"""llama.cpp speed on a GGUF file, measured like `ember bench` (and llama-bench).

pp: one prefill of P random tokens into an empty context; tg: N single-token
decode steps from an empty context. One warm-up, then R repetitions; prints
median tok/s and spread. Uses llama.cpp through the pip package
llama-cpp-python (built from source by pip on this machine).

  python3 tools/bench_llama_cpp.py -m models/gemma-3-270m-q4_k_m.gguf -p 512 -n 128 -r 3 -t 2 [--json out.json]
"""
import argparse
import json
import random
import statistics
import time

import llama_cpp


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-r", type=int, default=3)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("--json")
    a = ap.parse_args()
    n_ctx = max(a.p, a.n) + 16
    llm = llama_cpp.Llama(a.model, n_ctx=n_ctx, n_batch=max(a.p, 1), n_ubatch=max(a.p, 1), n_threads=a.t,
                          n_threads_batch=a.t, verbose=False)
    n_vocab = llm.n_vocab()
    rng = random.Random(1234)
    out = {"model": a.model, "threads": a.t, "engine": f"llama.cpp (llama-cpp-python {llama_cpp.__version__})"}
    if a.p > 0:
        tps = []
        for r in range(a.r + 1):
            toks = [rng.randrange(n_vocab) for _ in range(a.p)]
            llm.reset()
            llm._ctx.kv_cache_clear() if hasattr(llm._ctx, "kv_cache_clear") else None
            t0 = time.perf_counter()
            llm.eval(toks)
            dt = time.perf_counter() - t0
            if r > 0:
                tps.append(a.p / dt)
        out["pp"] = {"tokens": a.p, "median": statistics.median(tps), "min": min(tps), "max": max(tps)}
        print(f"pp{a.p:<6} {statistics.median(tps):10.2f} tok/s  ({min(tps):.2f} - {max(tps):.2f})")
    if a.n > 0:
        tps = []
        for r in range(a.r + 1):
            llm.reset()
            llm._ctx.kv_cache_clear() if hasattr(llm._ctx, "kv_cache_clear") else None
            t0 = time.perf_counter()
            for _ in range(a.n):
                llm.eval([rng.randrange(n_vocab)])
            dt = time.perf_counter() - t0
            if r > 0:
                tps.append(a.n / dt)
        out["tg"] = {"tokens": a.n, "median": statistics.median(tps), "min": min(tps), "max": max(tps)}
        print(f"tg{a.n:<6} {statistics.median(tps):10.2f} tok/s  ({min(tps):.2f} - {max(tps):.2f})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
