#!/usr/bin/env python3
"""Turns benchmark JSON results into PNG charts for docs/img/.

Inputs (any number of files, kind detected from their content):
  * `ember bench ... --json FILE`               {"engine": "ember", "results": [...]}
  * `tools/bench_llama_cpp.py ... --json FILE`  {"engine": "llama.cpp ...", "pp": {...}, "tg": {...}}
  * `ember bench serve ... --json FILE`         {"kind": "ember_bench_serve", "label": ..., "summary": ...,
                                                 "requests": {per-request arrays}}
Charts:
  docs/img/speed_vs_llama_cpp.png   pp and tg tok/s per model file, ember vs llama.cpp (median, min-max bars)
  docs/img/thread_scaling.png       ember tok/s per thread count, when a sweep over -t is present
  docs/img/serve_throughput_vs_concurrency.png
                                    bench-serve output tok/s and req/s per --max-concurrency, one line per
                                    server label (runs at request rate inf; needs >= 2 concurrency levels)
  docs/img/serve_latency_cdf.png    bench-serve TTFT and TPOT distributions (CDF per label and concurrency)
  docs/img/serve_latency_box.png    the same as box plots

Label bench-serve runs with `--label NAME` (e.g. ember, llama.cpp, vllm); unlabeled runs are
named after their base URL.

  python3 tools/plot_bench.py bench_results/*.json [--out docs/img]
(tools/bench_compare.sh writes bench_results/ and calls this.)
"""
import argparse
import json
import os
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(paths):
    rows = []  # (engine, model, test, threads, median, lo, hi)
    for p in paths:
        with open(p) as f:
            d = json.load(f)
        if d.get("kind") == "ember_bench_serve":
            continue  # see load_serve()
        model = os.path.basename(d.get("model", "?"))
        if "results" in d:
            for r in d["results"]:
                rows.append(("ember", model, r["test"][:2], r["threads"], r["median_tps"], r["min_tps"], r["max_tps"]))
        else:
            for kind in ("pp", "tg"):
                if kind in d:
                    k = d[kind]
                    rows.append(("llama.cpp", model, kind, d.get("threads", 0), k["median"], k["min"], k["max"]))
    return rows


def bars(ax, rows, kind, threads):
    models = sorted({r[1] for r in rows if r[2] == kind and r[3] == threads})
    engines = ["ember", "llama.cpp"]
    width = 0.38
    for ei, eng in enumerate(engines):
        xs, ys, lo, hi = [], [], [], []
        for mi, m in enumerate(models):
            sel = [r for r in rows if r[0] == eng and r[1] == m and r[2] == kind and r[3] == threads]
            if not sel:
                continue
            r = sel[-1]
            xs.append(mi + (ei - 0.5) * width)
            ys.append(r[4])
            lo.append(r[4] - r[5])
            hi.append(r[6] - r[4])
        ax.bar(xs, ys, width, yerr=[lo, hi], capsize=3, label=eng)
        for x, y in zip(xs, ys):
            ax.text(x, y, f"{y:.0f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(models)))
    ax.set_xticklabels([m.replace(".gguf", "") for m in models], rotation=10, fontsize=8)
    ax.set_ylabel("tokens/s")
    ax.set_title({"pp": "prompt processing (pp512)", "tg": "generation (tg128)"}[kind] + f", {threads} threads")
    ax.legend()


def load_serve(paths):
    """bench-serve results: list of dicts with label, concurrency, summary, per-request arrays."""
    runs = []
    for p in paths:
        with open(p) as f:
            d = json.load(f)
        if d.get("kind") != "ember_bench_serve":
            continue
        cfg = d.get("config", {})
        req = d.get("requests", {})
        runs.append({
            "file": p,
            "label": d.get("label") or cfg.get("base_url", "?"),
            "concurrency": cfg.get("max_concurrency", 0) or None,  # None: unlimited
            "rate": cfg.get("request_rate", "inf"),
            "summary": d.get("summary", {}),
            "ttft": [x for x in req.get("ttft_ms", []) if x is not None],
            "tpot": [x for x in req.get("tpot_ms", []) if x is not None],
        })
    return runs


def serve_charts(runs, out):
    written = []
    # Throughput vs concurrency: closed-loop runs (rate inf) with a concurrency limit.
    by_label = defaultdict(dict)
    for r in runs:
        if r["concurrency"] and r["rate"] == "inf":
            by_label[r["label"]][r["concurrency"]] = r["summary"]  # the last file for a level wins
    by_label = {k: v for k, v in by_label.items() if len(v) >= 2}
    if by_label:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        for label, levels in sorted(by_label.items()):
            cs = sorted(levels)
            axes[0].plot(cs, [levels[c].get("output_throughput", 0) for c in cs], marker="o", label=label)
            axes[1].plot(cs, [levels[c].get("request_throughput", 0) for c in cs], marker="o", label=label)
        for ax, what in zip(axes, ("output tokens/s", "requests/s")):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("max concurrency")
            ax.set_ylabel(what)
            ax.set_title(f"serving throughput: {what}")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        fig.tight_layout()
        path = os.path.join(out, "serve_throughput_vs_concurrency.png")
        fig.savefig(path, dpi=110)
        written.append(path)
    dist = [r for r in runs if r["ttft"] or r["tpot"]]
    if dist:
        def name(r):
            return f"{r['label']} c={r['concurrency'] or 'inf'}" + ("" if r["rate"] == "inf" else f" r={r['rate']}")

        dist.sort(key=lambda r: (r["label"], r["concurrency"] or 1 << 30))
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        for ax, key, title in ((axes[0], "ttft", "time to first token"), (axes[1], "tpot", "time per output token")):
            lo, hi = float("inf"), 0.0
            for r in dist:
                v = sorted(r[key])
                if v:
                    ax.step(v, [(i + 1) / len(v) for i in range(len(v))], where="post", label=name(r))
                    lo, hi = min(lo, v[0]), max(hi, v[-1])
            if lo > 0 and hi / lo > 50:
                ax.set_xscale("log")  # e.g. queueing: TTFT from ms to many seconds
            ax.set_xlabel(f"{key.upper()} (ms)")
            ax.set_ylabel("fraction of requests")
            ax.set_title(f"{title} (CDF)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        fig.tight_layout()
        path = os.path.join(out, "serve_latency_cdf.png")
        fig.savefig(path, dpi=110)
        written.append(path)

        fig, axes = plt.subplots(1, 2, figsize=(11, max(3.5, 0.35 * len(dist) + 1.5)))
        for ax, key, title in ((axes[0], "ttft", "TTFT (ms)"), (axes[1], "tpot", "TPOT (ms)")):
            sel = [r for r in dist if r[key]]
            if sel:
                data = [r[key] for r in sel]
                try:
                    ax.boxplot(data, orientation="horizontal")  # matplotlib >= 3.10
                except TypeError:
                    ax.boxplot(data, vert=False)
                ax.set_yticks(range(1, len(sel) + 1))
                ax.set_yticklabels([name(r) for r in sel], fontsize=7)
            if sel and min(min(r[key]) for r in sel) > 0 and \
                    max(max(r[key]) for r in sel) / min(min(r[key]) for r in sel) > 50:
                ax.set_xscale("log")
            ax.set_xlabel(title)
            ax.grid(alpha=0.3, axis="x")
        fig.tight_layout()
        path = os.path.join(out, "serve_latency_box.png")
        fig.savefig(path, dpi=110)
        written.append(path)
    for p in written:
        print("wrote", p)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--out", default="docs/img")
    a = ap.parse_args()
    rows = load(a.files)
    os.makedirs(a.out, exist_ok=True)
    serve_charts(load_serve(a.files), a.out)
    threads = max((r[3] for r in rows if r[0] == "llama.cpp"), default=None)
    if threads:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        bars(axes[0], rows, "pp", threads)
        bars(axes[1], rows, "tg", threads)
        fig.tight_layout()
        fig.savefig(os.path.join(a.out, "speed_vs_llama_cpp.png"), dpi=110)
        print("wrote", os.path.join(a.out, "speed_vs_llama_cpp.png"))
    sweep = defaultdict(list)
    for r in rows:
        if r[0] == "ember":
            sweep[(r[1], r[2])].append((r[3], r[4]))
    sweep = {k: sorted(v) for k, v in sweep.items() if len({t for t, _ in v}) > 1}
    if sweep:
        fig, ax = plt.subplots(figsize=(6, 4))
        for (model, kind), pts in sorted(sweep.items()):
            ax.plot([t for t, _ in pts], [y for _, y in pts], marker="o", label=f"{kind} {model.replace('.gguf', '')}")
        ax.set_xlabel("threads")
        ax.set_ylabel("tokens/s")
        ax.set_title("ember: speed vs threads")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(a.out, "thread_scaling.png"), dpi=110)
        print("wrote", os.path.join(a.out, "thread_scaling.png"))


if __name__ == "__main__":
    main()
