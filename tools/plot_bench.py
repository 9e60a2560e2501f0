#!/usr/bin/env python3
"""Turns benchmark JSON results into PNG charts for docs/img/.

Inputs (any number of files, kind detected from their content):
  * `ember bench ... --json FILE`               {"engine": "ember", "results": [...]}
  * `tools/bench_llama_cpp.py ... --json FILE`  {"engine": "llama.cpp ...", "pp": {...}, "tg": {...}}
Charts:
  docs/img/speed_vs_llama_cpp.png   pp and tg tok/s per model file, ember vs llama.cpp (median, min-max bars)
  docs/img/thread_scaling.png       ember tok/s per thread count, when a sweep over -t is present

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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--out", default="docs/img")
    a = ap.parse_args()
    rows = load(a.files)
    os.makedirs(a.out, exist_ok=True)
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
