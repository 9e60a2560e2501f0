#!/usr/bin/env python3
"""The scale model of docs/parallelism.md: step time of tensor, pipeline and
data parallelism for Llama-3.1-8B and 70B (Q4_K_M) across 1-16 CPU hosts,
from a roofline of the host (memory bandwidth, compute) and an alpha-beta
model of the interconnect (per-message latency alpha, bandwidth beta).

Every input is stated below; the interconnect figures for "shm" and "veth"
are this repository's measurements (tools/dist_bench.sh, medians, in
docs/history/2026-12-06-parallelism.md), those for 10 and 100 GbE are
assumptions (kernel TCP, no RDMA), not measurements.

Usage: tools/parallelism_model.py            prints the tables (Markdown)
"""

import math

MODELS = {
    # bytes of weights read per token (Q4_K_M GGUF), layers, hidden, vocab, parameters
    "Llama-3.1-8B": dict(W=4.92e9, L=32, H=4096, V=128256, P=8.03e9),
    "Llama-3.1-70B": dict(W=42.5e9, L=80, H=8192, V=128256, P=70.6e9),
}
HOSTS = {
    # achievable memory bandwidth (B/s), effective compute on Q4 weights (FLOP/s), RAM (bytes)
    "2-core VM": dict(Bm=20e9, F=0.1e12, RAM=24e9),
    "64-core server": dict(Bm=200e9, F=2.0e12, RAM=256e9),
}
LINKS = {
    # one-way small-message latency alpha (s), bandwidth beta (B/s)
    "10 GbE TCP": dict(a=25e-6, b=1.15e9),
    "100 GbE TCP": dict(a=12e-6, b=11e9),
}
ACT_BYTES = 4  # f32 activations on the wire (dist's all-reduce is f32)


def allreduce(m, n, link):
    """dist's all-reduce of m bytes over n ranks: up to 64 KiB an all-gather
    (ceil(log2 n) rounds, (n-1) m bytes in), above it reduce-scatter +
    all-gather (2 (n-1) messages, 2 (n-1)/n m bytes)."""
    if n == 1:
        return 0.0
    a, b = link["a"], link["b"]
    if m <= 64 << 10:
        return math.ceil(math.log2(n)) * a + (n - 1) * m / b
    return 2 * (n - 1) * a + 2 * (n - 1) / n * m / b


def gather(m_total, n, link):
    """All-gather of a vector of m_total bytes split over n ranks."""
    if n == 1:
        return 0.0
    return math.ceil(math.log2(n)) * link["a"] + (n - 1) / n * m_total / link["b"]


def step_tp(model, host, n, link, batch):
    """Decode step of `batch` tokens, TP over n hosts (Megatron: 2 all-reduces
    per layer of batch x hidden, the vocabulary-parallel head gathered)."""
    mem = model["W"] / (n * host["Bm"])
    comp = 2 * model["P"] * batch / (n * host["F"])
    comm = 2 * model["L"] * allreduce(batch * model["H"] * ACT_BYTES, n, link)
    comm += gather(batch * model["V"] * ACT_BYTES, n, link)
    return max(mem, comp) + comm


def step_pp(model, host, m, link, batch, microbatches):
    """PP over m hosts with `microbatches` micro-batches of `batch` tokens in
    flight. Returns (latency of one token of one sequence, tokens/s)."""
    stage_mem = model["W"] / (m * host["Bm"])
    stage_comp = 2 * model["P"] * batch / (m * host["F"])
    stage = max(stage_mem, stage_comp)
    hop = link["a"] + batch * model["H"] * ACT_BYTES / link["b"]
    latency = m * stage + (m - 1) * hop
    # m stages work on different micro-batches at once: one micro-batch leaves
    # the pipeline every max(stage, hop) once it is full.
    in_flight = min(microbatches, m)
    period = max(stage + hop, latency / in_flight)
    return latency, batch / period


def step_one(model, host, batch):
    return max(model["W"] / host["Bm"], 2 * model["P"] * batch / host["F"])


def fits(model, host, n):
    # weights / n plus 20% for KV cache and buffers
    return model["W"] / n * 1.2 <= host["RAM"]


def fmt_ms(s):
    return f"{s * 1e3:.1f}"


def main():
    ns = [1, 2, 4, 8, 16]
    for mname, model in MODELS.items():
        for hname, host in HOSTS.items():
            print(f"\n#### {mname} on {hname} hosts (memory {host['Bm'] / 1e9:.0f} GB/s, "
                  f"compute {host['F'] / 1e12:g} TFLOP/s, RAM {host['RAM'] / 1e9:.0f} GB)\n")
            print("| hosts | fits | TP 10 GbE: ms/token (speed-up) | TP 100 GbE | PP 10 GbE: ms/token | "
                  "TP 10 GbE: tok/s at batch 32 | PP: tok/s at batch 32 | DP: tok/s at batch 32 |")
            print("|---|---|---|---|---|---|---|---|")
            one = step_one(model, host, 1)
            one32 = 32 / step_one(model, host, 32)
            for n in ns:
                f = "yes" if fits(model, host, n) else "no"
                if f == "no":
                    print(f"| {n} | no (needs {model['W'] * 1.2 / host['RAM']:.1f} hosts' RAM) | – | – | – | – | – | – |")
                    continue
                t10 = step_tp(model, host, n, LINKS["10 GbE TCP"], 1)
                t100 = step_tp(model, host, n, LINKS["100 GbE TCP"], 1)
                pl, _ = step_pp(model, host, n, LINKS["10 GbE TCP"], 1, 1)
                tp32 = 32 / step_tp(model, host, n, LINKS["10 GbE TCP"], 32)
                _, pp32 = step_pp(model, host, n, LINKS["10 GbE TCP"], 32 / n, n)
                dp32 = n * (32 / n) / step_one(model, host, 32 / n) if fits(model, host, 1) else float("nan")
                dp = "n/a (does not fit one host)" if math.isnan(dp32) else f"{dp32:.0f}"
                print(f"| {n} | {f} | {fmt_ms(t10)} ({one / t10:.2f}x) | {fmt_ms(t100)} ({one / t100:.2f}x) | "
                      f"{fmt_ms(pl)} | {tp32:.0f} | {pp32:.0f} | {dp} |")
            print(f"\n(one host: {fmt_ms(one)} ms per token at batch 1, {one32:.0f} tok/s at batch 32)")


if __name__ == "__main__":
    main()
