#!/usr/bin/env python3
"""Plots mean KL divergence against bits per weight for the quality table of
docs/quantization.md (docs/img/quant_kl_vs_bpw.png).

Input: a TSV with a header row and the columns type, method, bpw, kl
(one row per quantized file: ember's methods from tools/quant_quality.sh and
llama.cpp's rows from tools/quant_quality_llama_cpp.sh, bpw as `ember info`
prints it). One marker per method, KL on a log axis.

  python3 tools/plot_quant_quality.py docs/data/quant_quality.tsv [--out docs/img/quant_kl_vs_bpw.png]
"""
import argparse
import csv

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tsv")
    ap.add_argument("--out", default="docs/img/quant_kl_vs_bpw.png")
    args = ap.parse_args()
    rows = list(csv.DictReader(open(args.tsv), delimiter="\t"))
    if not rows:
        raise SystemExit(f"{args.tsv}: no rows")
    by_method = {}
    for r in rows:
        by_method.setdefault(r["method"], []).append((float(r["bpw"]), float(r["kl"]), r["type"]))
    markers = "osD^vP*X"
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, (m, pts) in enumerate(sorted(by_method.items())):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=markers[i % len(markers)],
                linestyle="-" if m.startswith("llama") else "--", label=m)
        for x, y, t in pts:
            if i == 0:
                ax.annotate(t, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_yscale("log")
    ax.set_xlabel("bits per weight (whole file, `ember info`)")
    ax.set_ylabel("mean KL vs f32 (Persuasion, 1022 positions)")
    ax.set_title("Gemma 3 270M (f32 source): quantization method vs size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
