#!/usr/bin/env python3
"""The table of tools/bench_set.sh: ember vs llama.cpp per file, from its results folder.

Reads RES/<name>.r<k>.ember.json (+ .ember.log for the decode bytes and the
measured read bandwidth) and RES/<name>.r<k>.llama.json (`llama-bench -o json`),
pools the samples of all rounds, and writes
  RES/bench_set.md    markdown table: pp / tg tok/s medians, ratios ember/llama.cpp,
                      decode GB/s (weight bytes read per token x tok/s) and % of the bandwidth
  RES/bench_set.json  the same numbers
  RES/plot/*.json     per file and engine, in the formats tools/plot_bench.py reads

  python3 tools/bench_set_report.py RES FILE.gguf [FILE.gguf ...]
"""
import glob
import json
import os
import re
import statistics
import sys


def ember_samples(res, name):
    pp, tg, bytes_, bw, test_names = [], [], None, None, {}
    for p in sorted(glob.glob(os.path.join(res, f"{name}.r*.ember.json"))):
        with open(p) as f:
            d = json.load(f)
        for r in d["results"]:
            kind = r["test"][:2]
            test_names[kind] = r["test"]
            (pp if kind == "pp" else tg).extend(r["samples_tps"])
        log = p[: -len(".json")] + ".log"
        if os.path.exists(log):
            text = open(log).read()
            m = re.search(r"decode reads ([0-9.]+) MiB of weights per token", text)
            if m:
                bytes_ = float(m.group(1)) * 1048576.0
            m = re.search(r"measured read bandwidth \(([0-9.]+) GB/s", text)
            if m:
                bw = float(m.group(1))
    return pp, tg, bytes_, bw, test_names


def llama_samples(res, name):
    pp, tg, version = [], [], ""
    for p in sorted(glob.glob(os.path.join(res, f"{name}.r*.llama.json"))):
        with open(p) as f:
            runs = json.load(f)
        for r in runs:
            samples = r.get("samples_ts") or [r["avg_ts"]]
            version = r.get("build_commit", version)
            if r.get("n_prompt", 0) > 0 and r.get("n_gen", 0) == 0:
                pp.extend(samples)
            elif r.get("n_gen", 0) > 0 and r.get("n_prompt", 0) == 0:
                tg.extend(samples)
    return pp, tg, version


def stat(xs):
    if not xs:
        return None
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def fmt(x, spec=".1f"):
    return "–" if x is None else format(x, spec)


def main():
    res, files = sys.argv[1], sys.argv[2:]
    os.makedirs(os.path.join(res, "plot"), exist_ok=True)
    rows, bandwidth = [], None
    for f in files:
        name = os.path.basename(f)[: -len(".gguf")]
        epp, etg, ebytes, bw, tests = ember_samples(res, name)
        lpp, ltg, lver = llama_samples(res, name)
        bandwidth = bandwidth or bw
        row = {"file": os.path.basename(f), "file_bytes": os.path.getsize(f), "decode_weight_bytes": ebytes,
               "ember": {"pp": stat(epp), "tg": stat(etg)}, "llama.cpp": {"pp": stat(lpp), "tg": stat(ltg)},
               "llama_cpp_commit": lver, "tests": tests}
        rows.append(row)
        # plot_bench.py inputs: ember's own format and tools/bench_llama_cpp.py's.
        eres = []
        for kind, xs in (("pp", epp), ("tg", etg)):
            if xs:
                s = stat(xs)
                eres.append({"test": tests.get(kind, kind), "threads": int(os.environ.get("THREADS", 2)),
                             "median_tps": s["median"], "min_tps": s["min"], "max_tps": s["max"], "samples_tps": xs})
        with open(os.path.join(res, "plot", f"{name}-ember.json"), "w") as o:
            json.dump({"engine": "ember", "model": f, "results": eres}, o)
        lout = {"engine": "llama.cpp", "model": f, "threads": int(os.environ.get("THREADS", 2))}
        for kind, xs in (("pp", lpp), ("tg", ltg)):
            if xs:
                lout[kind] = stat(xs)
        with open(os.path.join(res, "plot", f"{name}-llama.json"), "w") as o:
            json.dump(lout, o)

    def ratio(r, k):
        e, l = r["ember"][k], r["llama.cpp"][k]
        return e["median"] / l["median"] if e and l else None

    def gbs(r, eng):
        t = r[eng]["tg"]
        b = r["decode_weight_bytes"] or r["file_bytes"]
        return b * t["median"] / 1e9 if t else None

    lines = [
        "| file | GiB | pp ember | pp llama.cpp | pp ratio | tg ember | tg llama.cpp | tg ratio "
        "| decode GB/s ember | % of bw | decode GB/s llama.cpp | % of bw |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        med = lambda eng, k: r[eng][k]["median"] if r[eng][k] else None  # noqa: E731
        ge, gl = gbs(r, "ember"), gbs(r, "llama.cpp")
        r["pp_ratio"], r["tg_ratio"], r["decode_gbs_ember"], r["decode_gbs_llama_cpp"] = (
            ratio(r, "pp"), ratio(r, "tg"), ge, gl)
        pct = lambda g: None if g is None or not bandwidth else 100.0 * g / bandwidth  # noqa: E731
        lines.append(
            f"| {r['file']} | {r['file_bytes'] / 2**30:.2f} | {fmt(med('ember', 'pp'))} | {fmt(med('llama.cpp', 'pp'))} "
            f"| {fmt(r['pp_ratio'], '.2f')} | {fmt(med('ember', 'tg'))} | {fmt(med('llama.cpp', 'tg'))} "
            f"| {fmt(r['tg_ratio'], '.2f')} | {fmt(ge, '.2f')} | {fmt(pct(ge), '.0f')} | {fmt(gl, '.2f')} "
            f"| {fmt(pct(gl), '.0f')} |")
    info = open(os.path.join(res, "run_info.txt")).read() if os.path.exists(os.path.join(res, "run_info.txt")) else ""
    md = "```\n" + info + f"measured read bandwidth: {fmt(bandwidth, '.2f')} GB/s\n```\n\n" + "\n".join(lines) + "\n"
    md += ("\nmedians over all samples of all rounds; ratio = ember / llama.cpp; decode GB/s = weight bytes read "
           "per token (ember's count; llama.cpp: the same bytes) x tg tok/s.\n")
    with open(os.path.join(res, "bench_set.md"), "w") as o:
        o.write(md)
    with open(os.path.join(res, "bench_set.json"), "w") as o:
        json.dump({"info": info, "read_bandwidth_gbs": bandwidth, "rows": rows}, o, indent=1)
    print(md)


if __name__ == "__main__":
    main()
