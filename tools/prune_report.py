#!/usr/bin/env python3
"""The tables and the Pareto plot of docs/pruning.md from the files that
tools/prune_quality.sh writes (standard library only: the plot is SVG
written directly).

  python3 tools/prune_report.py DIR [--svg docs/img/prune_pareto.svg]
      markdown tables of DIR/summary.tsv and DIR/pareto.tsv to stdout, the
      plot (mean KL on a log axis against bits per weight of the block
      matrices) to --svg, and for every sparse point the dense frontier's KL
      at the same bits (interpolated): where sparsity wins and where not.
  python3 tools/prune_report.py --sizes INFO
      from `ember info -v` output: "BLOCK_BPW FILE_MIB DECODE_MIB" (bits per
      weight of the block matrices attn_q/k/v/output and ffn_gate/up/down;
      MiB of all tensors; MiB of weights one decoded token reads: the block
      matrices and the output head, output.weight or the tied token_embd).
"""
import argparse
import csv
import math
import os
import re
import sys

BLOCK = re.compile(r"^blk\.\d+\.(attn_q|attn_k|attn_v|attn_output|ffn_gate|ffn_up|ffn_down)\.weight$")
OWL_TAGGED = re.compile(r"^(wanda|sparsegpt)_70_owl_l([0-9.]+)_m([0-9.]+)$")
OWL_SWEEP = re.compile(r"^(wanda|sparsegpt)_70_owl_l([0-9.]+)_m([0-9.]+)_val$")
TENSOR = re.compile(r"^\s+(\S+)\s+(\S+)\s+\[([0-9, ]+)\]\s+(\d+) bytes$")


def sizes(info_path):
    block_bytes = block_n = head_bytes = embd_bytes = 0
    total = None
    have_output = False
    for line in open(info_path):
        m = re.match(r"^weights:\s+([0-9.]+) MiB", line)
        if m:
            total = float(m.group(1))
        m = TENSOR.match(line.rstrip("\n"))
        if not m:
            continue
        name, nbytes = m.group(1), int(m.group(4))
        n = math.prod(int(x) for x in m.group(3).split(","))
        if BLOCK.match(name):
            block_bytes += nbytes
            block_n += n
        elif name == "output.weight":
            head_bytes, have_output = nbytes, True
        elif name == "token_embd.weight":
            embd_bytes = nbytes
    if not block_n or total is None:
        raise SystemExit(f"{info_path}: no block matrices / weights line (is it `ember info -v` output?)")
    head = head_bytes if have_output else embd_bytes
    return 8.0 * block_bytes / block_n, total, (block_bytes + head) / 1048576.0


def read_tsv(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [r for r in csv.DictReader(f, delimiter="\t") if r.get("name") and r["name"] != "name"]


def num(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def fmt(x, spec):
    v = num(x)
    return "-" if v is None else format(v, spec)


def last_by_name(rows):
    out = {}
    for r in rows:
        out[r["name"]] = r  # a rerun's row replaces the earlier one
    return out


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def ppl_cell(r):
    return f"{fmt(r['ppl_src'], '.2f')} -> {fmt(r['ppl'], '.2f')} ({r['ppl_change']}%)"


def unstructured_tables(s):
    out = []
    mag = num(s.get("magnitude_50", {}).get("kl"))
    rows = []
    for m in ("magnitude", "wanda", "sparsegpt"):
        r = s.get(f"{m}_50")
        if not r:
            continue
        kl = num(r["kl"])
        ratio = f"{kl / mag:.3f}x" if mag and kl is not None else "-"
        rows.append([m, fmt(r["kl"], ".4f"), fmt(r["kl_p99"], ".3f"), r["top1"] + "%", ppl_cell(r), ratio])
    if rows:
        out.append("**50% unstructured** (f32 source, every block matrix; KL against magnitude's):\n\n"
                   + table(["method", "KL mean", "KL p99", "top-1", "perplexity", "KL vs magnitude"], rows))
    rows = []
    for m in ("wanda", "sparsegpt"):
        u = s.get(f"{m}_70")
        settings = [("0.08", "5", s.get(f"{m}_70_owl"))]
        for name in sorted(s):
            k = OWL_TAGGED.match(name)
            if k and k.group(1) == m:
                settings.append((k.group(2), k.group(3), s[name]))
        for lam, mm, o in settings:
            if not u and not o:
                continue
            ku, ko = num(u["kl"]) if u else None, num(o["kl"]) if o else None
            change = f"{100 * (ko / ku - 1):+.1f}%" if ku and ko is not None else "-"
            rows.append([m, f"{lam} / {mm}", fmt(u["kl"], ".4f") if u else "-", fmt(o["kl"], ".4f") if o else "-",
                         change, (u["top1"] + "%") if u else "-", (o["top1"] + "%") if o else "-",
                         ppl_cell(u) if u else "-", ppl_cell(o) if o else "-"])
    if rows:
        out.append("**70% unstructured, uniform against OWL** (lambda / M: OWL's setting; 0.08 / 5 is the paper's):\n\n"
                   + table(["method", "lambda / M", "KL uniform", "KL OWL", "OWL change", "top-1 uniform",
                            "top-1 OWL", "perplexity uniform", "perplexity OWL"], rows))
    rows = []
    for m in ("wanda", "sparsegpt"):
        for suffix, text in (("", "held-out"), ("_val", "validation")):
            u, k = s.get(f"{m}_70{suffix}"), s.get(f"{m}_70_kl{suffix}")
            if not k:
                continue
            ku, kk = num(u["kl"]) if u else None, num(k["kl"])
            change = f"{100 * (kk / ku - 1):+.1f}%" if ku and kk is not None else "-"
            rows.append([m, text, fmt(u["kl"], ".4f") if u else "-", fmt(k["kl"], ".4f"), change,
                         (u["top1"] + "%") if u else "-", k["top1"] + "%", ppl_cell(u) if u else "-", ppl_cell(k)])
    if rows:
        out.append("**70% unstructured, uniform against the `kl` layer rule** (lambda 0.08; the per-block sparsity "
                   "from the KL of pruning each block alone):\n\n"
                   + table(["method", "text", "KL uniform", "KL kl rule", "change", "top-1 uniform", "top-1 kl rule",
                            "perplexity uniform", "perplexity kl rule"], rows))
    rows = []
    for m in ("wanda", "sparsegpt"):
        u = s.get(f"{m}_70_val")
        sweep = [(float(k.group(3)), float(k.group(2)), k.group(0)) for k in map(OWL_SWEEP.match, s)
                 if k and k.group(1) == m]
        for _, _, name in sorted(sweep):
            k = OWL_SWEEP.match(name)
            o = s[name]
            ku, ko = num(u["kl"]) if u else None, num(o["kl"])
            change = f"{100 * (ko / ku - 1):+.1f}%" if ku and ko is not None else "-"
            rows.append([m, k.group(2), k.group(3), fmt(o["kl"], ".4f"), fmt(u["kl"], ".4f") if u else "-", change,
                         o["top1"] + "%", ppl_cell(o)])
    if rows:
        out.append("**OWL's lambda and M at 70%, on the validation text** (the last 20000 bytes of "
                   "data/calibration.txt, past the calibration tokens; not the held-out text):\n\n"
                   + table(["method", "lambda", "M", "KL OWL", "KL uniform", "OWL change", "top-1 OWL",
                            "perplexity OWL"], rows))
    rows = []
    for p in ("2of4", "4of8"):
        mk = num(s.get(f"magnitude_{p}", {}).get("kl"))
        for m in ("magnitude", "wanda", "sparsegpt"):
            r = s.get(f"{m}_{p}")
            if not r:
                continue
            kl = num(r["kl"])
            ratio = f"{kl / mk:.3f}x" if mk and kl is not None else "-"
            rows.append([p.replace("of", ":"), m, fmt(r["kl"], ".4f"), fmt(r["kl_p99"], ".3f"), r["top1"] + "%",
                         ppl_cell(r), ratio])
    if rows:
        out.append("**N:M (50%)**, f32 source (OWL does not apply: N:M fixes every layer's sparsity):\n\n"
                   + table(["pattern", "method", "KL mean", "KL p99", "top-1", "perplexity", "KL vs magnitude"], rows))
    return out


def vocab_table(s, speed_path):
    speed = {}
    if os.path.exists(speed_path):
        for line in open(speed_path):
            m = re.match(r"^vocab_(\d+)\.gguf: .*\(medians [0-9.]+ -> [0-9.]+, ([0-9.]+)x\); CPU .*\(([0-9.]+)x\)", line)
            if m:
                speed[m.group(1)] = (m.group(2), m.group(3))
    rows = []
    for n in ("32768", "65536", "131072"):
        e, c = s.get(f"vocab_{n}"), s.get(f"vocab_{n}_code")
        if not e and not c:
            continue

        def part(r):
            if not r:
                return ["-"] * 4
            pos = num(r["positions"]) or 0
            un = num(r["unreachable"])
            return [fmt(r["lost_mass"], ".3f") + "%", f"{100 * un / pos:.2f}%" if un is not None and pos else "-",
                    fmt(r["kl_reverse"], ".5f"), r["ppl_change"] + "%"]
        sp = speed.get(n)
        rows.append([n] + part(e) + part(c) + [(e or {}).get("decode_ratio", "-") + "x" if e else "-",
                                               f"{sp[0]}x / {sp[1]}x" if sp else "-"])
    if not rows:
        return []
    return ["**Output vocabulary cut** (Q4_K_M source; lost: the source's mean probability on removed tokens; "
            "unreachable: next tokens of the text the output cannot produce; KL(out ‖ src): mean KL of the trimmed "
            "output from the source's, the forward KL being infinite; perplexity over the reachable positions):\n\n"
            + table(["kept tokens", "English: lost", "unreachable", "KL(out ‖ src)", "ppl change", "code: lost",
                     "unreachable", "KL(out ‖ src)", "ppl change", "decode (report, 3 runs)",
                     "decode (ember bench, tok/s / CPU)"], rows)]


def structured_table(s):
    names = [("ffn_25", "25% of FFN channels (every layer)"), ("ffn_25_global", "25% of FFN channels (--global-ffn)"),
             ("layers_4_bi", "4 of 18 layers (block influence)"), ("layers_4_kl", "4 of 18 layers (KL metric)"),
             ("layers_5_bi", "5 of 18 layers (block influence)"), ("heads_25", "25% of query heads")]
    rows = [[label, fmt(s[n]["kl"], ".4f"), fmt(s[n]["kl_p99"], ".3f"), s[n]["top1"] + "%", ppl_cell(s[n]),
             fmt(s[n]["file_mib"], ".1f")] for n, label in names if n in s]
    if not rows:
        return []
    return ["**Structured, before distillation** (Q4_K_M source, pruned tensors rounded back to their types):\n\n"
            + table(["removed", "KL mean", "KL p99", "top-1", "perplexity", "file MiB"], rows)]


def interp_dense(dense, x):
    """log-KL of the dense frontier at x bits, linear between neighbours; None outside it."""
    pts = sorted(dense)
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if x0 <= x <= x1 and x1 > x0:
            t = (x - x0) / (x1 - x0)
            return math.exp(math.log(y0) + t * (math.log(y1) - math.log(y0)))
    return None


def pareto_table(rows):
    if not rows:
        return [], []
    out = [table(["point", "family", "bits / weight (block matrices)", "read per token (bits / weight)",
                  "MiB read per token", "file MiB", "KL mean", "KL p99", "top-1", "perplexity"],
                 [[r["name"], r["family"], fmt(r["block_bpw"], ".2f"), fmt(r["read_bpw"], ".2f"),
                   fmt(r["decode_mib"], ".1f"), fmt(r["file_mib"], ".1f"), fmt(r["kl"], ".4f"), fmt(r["kl_p99"], ".3f"),
                   r["top1"] + "%", f"{fmt(r['ppl_src'], '.2f')} -> {fmt(r['ppl'], '.2f')}"]
                  for r in sorted(rows, key=lambda r: (r["family"], -(num(r["read_bpw"]) or 0)))])]
    dense = [(num(r["read_bpw"]), num(r["kl"])) for r in rows
             if r["family"] == "dense" and num(r["kl"]) and num(r["read_bpw"])]
    verdicts = []
    for r in rows:
        if r["family"] == "dense" or num(r["kl"]) is None:
            continue
        x, k = num(r["read_bpw"]), num(r["kl"])
        d = interp_dense(dense, x)
        if d is None:
            lo = min(dense) if dense else None
            if lo and x < lo[0]:
                verdicts.append(f"- {r['name']} ({r['label']}): {x:.2f} bits, KL {k:.4f}: below every dense point "
                                f"(the smallest, {lo[0]:.2f} bits, has KL {lo[1]:.4f}); "
                                + ("**sparsity wins** (fewer bits and less KL)" if k < lo[1]
                                   else "no dense type to compare at these bits"))
            else:
                verdicts.append(f"- {r['name']} ({r['label']}): {x:.2f} bits, KL {k:.4f}: outside the dense range")
            continue
        word = "**sparsity wins**" if k < d else "**dense wins**"
        verdicts.append(f"- {r['name']} ({r['label']}): {x:.2f} bits, KL {k:.4f}; dense at the same bits "
                        f"(interpolated): KL {d:.4f}, {k / d:.1f}x: {word}")
    return out, verdicts


# --- the SVG plot ---------------------------------------------------------

STYLE = {  # family: (colour, marker, line)
    "dense": ("#1f77b4", "circle", True),
    "sparse int8": ("#d62728", "square", True),
    "sparse int8 2:4": ("#d62728", "diamond", False),
    "sparse int4": ("#2ca02c", "triangle", True),
}


def style(family):
    if family in STYLE:
        return STYLE[family]
    return ("#9467bd", "hollow", False)  # activation sparsity and anything new


def svg_plot(rows, path, title):
    pts = [(num(r["read_bpw"]), num(r["kl"]), r) for r in rows if num(r["read_bpw"]) and num(r["kl"])]
    if not pts:
        raise SystemExit("no Pareto points to plot")
    W, H, L, R, T, B = 760, 480, 70, 200, 40, 55
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    x0, x1 = math.floor(min(xs) - 0.5), math.ceil(max(xs) + 0.5)
    y0, y1 = math.floor(math.log10(min(ys))), math.ceil(math.log10(max(ys)))
    if y1 == y0:
        y1 += 1

    def X(x):
        return L + (x - x0) / (x1 - x0) * (W - L - R)

    def Y(y):
        return T + (y1 - math.log10(y)) / (y1 - y0) * (H - T - B)

    e = []
    e.append(f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
             'font-family="sans-serif" font-size="11">')
    e.append(f'<rect width="{W}" height="{H}" fill="white"/>')
    e.append(f'<text x="{(L + W - R) / 2}" y="22" text-anchor="middle" font-size="13">{esc(title)}</text>')
    for d in range(y0, y1 + 1):  # decades and 2x, 5x
        for k in (1, 2, 5):
            v = k * 10 ** d
            if v > 10 ** y1 or (d == y1 and k > 1):
                continue
            y = Y(v)
            e.append(f'<line x1="{L}" y1="{y:.1f}" x2="{W - R}" y2="{y:.1f}" stroke="#ddd" '
                     f'stroke-width="{1 if k == 1 else 0.5}"/>')
            e.append(f'<text x="{L - 6}" y="{y + 4:.1f}" text-anchor="end">{v:g}</text>')
    for x in range(x0, x1 + 1):
        e.append(f'<line x1="{X(x):.1f}" y1="{T}" x2="{X(x):.1f}" y2="{H - B}" stroke="#eee"/>')
        e.append(f'<text x="{X(x):.1f}" y="{H - B + 16}" text-anchor="middle">{x}</text>')
    e.append(f'<rect x="{L}" y="{T}" width="{W - L - R}" height="{H - T - B}" fill="none" stroke="#444"/>')
    e.append(f'<text x="{(L + W - R) / 2}" y="{H - 14}" text-anchor="middle">bits per weight of the block matrices '
             'read per decoded token (stored bits; x (1 - a) with activation sparsity a)</text>')
    e.append(f'<text transform="translate(16 {(T + H - B) / 2}) rotate(-90)" text-anchor="middle">mean KL vs f32 '
             '(held-out Persuasion; log)</text>')
    fams = []
    for _, _, r in pts:
        if r["family"] not in fams:
            fams.append(r["family"])
    for fam in fams:
        colour, marker, line = style(fam)
        fp = sorted((x, y, r) for x, y, r in pts if r["family"] == fam)
        if line and len(fp) > 1:
            d = " ".join(f"{X(x):.1f},{Y(y):.1f}" for x, y, _ in fp)
            e.append(f'<polyline points="{d}" fill="none" stroke="{colour}" stroke-width="1.5"/>')
        for x, y, r in fp:
            e.append(mark(marker, X(x), Y(y), colour))
            lab = r["label"].split(" (")[0] if fam == "dense" else r["label"]
            e.append(f'<text x="{X(x) + 6:.1f}" y="{Y(y) - 6:.1f}" fill="{colour}" font-size="10">{esc(lab)}</text>')
    for i, fam in enumerate(fams):  # legend
        colour, marker, _ = style(fam)
        y = T + 14 + 18 * i
        e.append(mark(marker, W - R + 18, y, colour))
        e.append(f'<text x="{W - R + 28}" y="{y + 4}">{esc(fam)}</text>')
    e.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(e) + "\n")


def mark(kind, x, y, colour):
    if kind == "square":
        return f'<rect x="{x - 4:.1f}" y="{y - 4:.1f}" width="8" height="8" fill="{colour}"/>'
    if kind == "diamond":
        return f'<polygon points="{x:.1f},{y - 5:.1f} {x + 5:.1f},{y:.1f} {x:.1f},{y + 5:.1f} {x - 5:.1f},{y:.1f}" ' \
               f'fill="{colour}"/>'
    if kind == "triangle":
        return f'<polygon points="{x:.1f},{y - 5:.1f} {x + 5:.1f},{y + 4:.1f} {x - 5:.1f},{y + 4:.1f}" fill="{colour}"/>'
    if kind == "hollow":
        return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4.5" fill="white" stroke="{colour}" stroke-width="1.5"/>'
    return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{colour}"/>'


def esc(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", nargs="?")
    ap.add_argument("--svg")
    ap.add_argument("--title", default="Gemma 3 270M: KL against bits per weight, dense and sparse")
    ap.add_argument("--sizes", metavar="INFO")
    a = ap.parse_args()
    if a.sizes:
        b, t, d = sizes(a.sizes)
        print(f"{b:.3f} {t:.1f} {d:.1f}")
        return
    if not a.dir:
        ap.error("DIR or --sizes INFO")
    s = last_by_name(read_tsv(os.path.join(a.dir, "summary.tsv")))
    p = list(last_by_name(read_tsv(os.path.join(a.dir, "pareto.tsv"))).values())
    parts = unstructured_tables(s) + vocab_table(s, os.path.join(a.dir, "vocab_speed.txt")) + structured_table(s)
    pt, verdicts = pareto_table(p)
    if pt:
        parts.append("**Pareto points** (f32 source; tied embedding / head Q8_0 in every row):\n\n" + pt[0])
    if verdicts:
        parts.append("**Against the dense frontier:**\n\n" + "\n".join(verdicts))
    notes = os.path.join(a.dir, "notes.txt")
    if os.path.exists(notes):
        parts.append("Notes of the run:\n\n" + "".join("    " + line for line in open(notes)))
    print("\n\n".join(parts))
    if a.svg and p:
        svg_plot(p, a.svg, a.title)
        print(f"\n(wrote {a.svg})", file=sys.stderr)


if __name__ == "__main__":
    main()
