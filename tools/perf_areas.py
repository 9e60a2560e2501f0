#!/usr/bin/env python3
"""The areas of tools/perf_tables.py: what each runs, and the table it makes of the output.

Every area calls the repository's own benchmark scripts (tools/bench_set.sh, bench_batched.sh,
bench_serve_llama.sh, bench_spec.sh, bench_spec_serve.sh, bench_structured.py, bench_batching.sh) or `ember
bench` / `ember eval kl` directly, keeps their logs under WORK/<area>/, and returns the area's entry for the JSON
store: machine, date, ember commit, the exact commands run, tables. An area whose peer (a llama.cpp build) or
model file is missing returns None and keeps its previous figures; any other failure raises.

Environment (defaults): EMBER=build/ember THREADS=2 BENCH_SET=/tmp/bench-set (the benchmark-set files, made by
tools/bench_set.sh on first use), LLAMA_BIN=/work/llama-cpp/bin (the reference build of tools/build_llama_cpp.sh),
LLAMA_AMX_BIN=/work/llama-cpp-amx/bin (LLAMA_ISA=amx), LLAMA_AVX2_BIN=/work/llama-cpp-avx2/bin (LLAMA_ISA=avx2),
KV_TP_ROUNDS=1 (rounds of the slow 32 x 2k KV throughput run; 0 leaves it out), MOE_DIR=/tmp/moe-set (the MoE files,
made by tools/bench_set.sh on first use: about 20 GB while the f16 sources exist).
"""
import datetime
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = os.environ
EMBER = ENV.get("EMBER", "build/ember")
THREADS = int(ENV.get("THREADS", "2"))
BENCH_SET = ENV.get("BENCH_SET", "/tmp/bench-set")
LLAMA_BIN = ENV.get("LLAMA_BIN", "/work/llama-cpp/bin")
LLAMA_AMX_BIN = ENV.get("LLAMA_AMX_BIN", "/work/llama-cpp-amx/bin")
LLAMA_AVX2_BIN = ENV.get("LLAMA_AVX2_BIN", "/work/llama-cpp-avx2/bin")
DEFAULT_MODEL = "models/gemma-3-270m-q4_k_m.gguf"
ONE_B = "llama-3.2-1b-q4_k_m.gguf"
SMALL_SHAPES = "llama-3.2-1b qwen3-0.6b qwen2.5-1.5b"
TYPES = "q4_k_m q4_0 q8_0"
SPEC_PROMPTS = "data/spec/prose.txt data/spec/rewrite.txt data/spec/code.txt"
SPEC_SERVE_FLAGS = ("--speculative-method layerskip --skip-layers none --draft-vocab 16384 --draft-vocab-text "
                    "data/calibration.txt --ngram-first 3 --ngram-k-by-match --num-speculative-tokens 16 --draft-k 8 "
                    "--speculative-adaptive")


class Skip(Exception):
    """The area cannot run here (a peer or a model file is missing): keep its previous figures."""


# ---- helpers ----

def sh(cmd, log, env=None, shown=None, runs=None, what=None, check=True):
    """Runs `cmd` (a shell string) from the repository root, output to `log` (and returned); records the command."""
    os.makedirs(os.path.dirname(log), exist_ok=True)
    full = dict(ENV)
    full.update(env or {})
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items())
    line = (prefix + " " if prefix else "") + cmd
    print(f"perf_areas: {line}", flush=True)
    t0, start = time.time(), datetime.datetime.utcnow().strftime("%H:%M UTC")
    with open(log, "w") as f:
        p = subprocess.run(cmd, shell=True, cwd=ROOT, env=full, stdout=f, stderr=subprocess.STDOUT,
                           executable="/bin/bash")
    text = open(log).read()
    if check and p.returncode != 0:
        raise RuntimeError(f"'{line}' failed (exit {p.returncode}); see {log}:\n{text[-2000:]}")
    if runs is not None:
        runs.append({"when": start, "what": what,
                     "command": shown or line, "seconds": round(time.time() - t0)})
    return text


def machine():
    info = open("/proc/cpuinfo").read()
    m = re.search(r"model name\s*:\s*(.*)", info)
    f = re.search(r"^flags\s*:\s*(.*)$", info, re.M)
    flags = set(f.group(1).split()) if f else set()
    isa = []
    if "avx512f" in flags:
        isa.append("AVX-512" + "".join(f" {n}" for f, n in (("avx512_vnni", "VNNI"), ("avx512_bf16", "BF16"))
                                         if f in flags))
    elif "avx2" in flags:
        isa.append("AVX2")
    if "amx_int8" in flags:
        isa.append("AMX-INT8")
    cores = os.cpu_count()
    s = f"{m.group(1).strip() if m else 'unknown CPU'} ({cores} cores; {', '.join(isa) or 'no AVX2'})"
    if ENV.get("EMBER_ISA"):
        s += f", EMBER_ISA={ENV['EMBER_ISA']}"
    return s


def commit():
    try:
        c = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
        dirty = subprocess.run(["git", "diff", "--quiet"], cwd=ROOT).returncode != 0
        return c.strip() + ("-dirty" if dirty else "")
    except OSError:
        return "unknown"


def load():
    return open("/proc/loadavg").read().split()[0]


def area(runs, tables, quick, notes=None, **extra):
    a = {"date": datetime.datetime.utcnow().strftime("%Y-%m-%d"), "machine": machine(), "threads": THREADS,
         "ember": commit(), "runs": runs, "tables": tables, "notes": notes or []}
    if quick:
        a["quick"] = True
    a.update(extra)
    return a


def rounds_text(n):
    return f"{n} round" + ("" if n == 1 else "s")


def need(path, what):
    if not os.path.exists(os.path.join(ROOT, path)):
        raise Skip(f"{what} missing: {path}")


def col(name, fmt=None, suffix="", align="r"):
    c = {"name": name, "align": align}
    if fmt:
        c["fmt"] = fmt
    if suffix:
        c["suffix"] = suffix
    return c


RATIO = col("ratio", ".2f", "x")


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def div(a, b):
    return a / b if a is not None and b else None


# ---- kernels: tools/bench_set.sh ----

def bench_set(name, work, runs, peer_bin, quick, extra_env=None, with_8b=True):
    need(os.path.join(peer_bin, "llama-bench"), "llama-bench")
    quant = os.path.join(LLAMA_BIN, "llama-quantize")
    base = {"LLAMA_BIN": peer_bin, "QUANTIZE_BIN": LLAMA_BIN, "THREADS": str(THREADS)}
    need(quant, "llama-quantize (the reference build makes the files)")
    base.update(extra_env or {})
    if quick:
        sets = [dict(SHAPES="", DEFAULT_MODEL="1", P="64", N="16", REPS="1", ROUNDS="1")]
        folder = os.path.join(work, "set")
    else:
        sets = [dict(SHAPES=SMALL_SHAPES, TYPES=TYPES, DEFAULT_MODEL="1", ROUNDS="2", REPS="3")]
        if with_8b:
            sets.append(dict(SHAPES="llama-3.1-8b", TYPES=TYPES, DEFAULT_MODEL="0", ROUNDS="1", REPS="2", N="32"))
        folder = BENCH_SET
    rows = []
    for i, s in enumerate(sets):
        env = dict(base, **s)
        sh(f"tools/bench_set.sh {folder}", os.path.join(work, f"bench_set.{i}.log"), env, runs=runs,
           what=f"SHAPES={s['SHAPES'] or 'none'}")
        with open(os.path.join(folder, "results", "bench_set.json")) as f:
            d = json.load(f)
        bw = d.get("read_bandwidth_gbs")
        for r in d["rows"]:
            r["_bw"] = bw
            rows.append(r)
    rows.sort(key=lambda r: r["file"].startswith("gemma-3-270m"))  # the default model last
    tests = rows[0]["tests"] if rows else {}
    pp, tg = tests.get("pp", "pp"), tests.get("tg", "tg")
    out = []
    for r in rows:
        label = r["file"][:-len(".gguf")] if r["file"].endswith(".gguf") else r["file"]
        if r["file"] == os.path.basename(DEFAULT_MODEL):
            label += " (default)"
        if r["tests"].get("tg", tg) != tg:
            label += f" ({r['tests']['tg']})"
        m = lambda eng, k: (r[eng][k] or {}).get("median")  # noqa: E731
        g = r.get("decode_gbs_ember")
        gb = None if g is None else (f"{g:.1f} ({100 * g / r['_bw']:.0f}%)" if r.get("_bw") else f"{g:.1f}")
        out.append([label, m("ember", "pp"), m("llama.cpp", "pp"), r.get("pp_ratio"), m("ember", "tg"),
                    m("llama.cpp", "tg"), r.get("tg_ratio"), gb])
    cols = [col("file", align="l"), col(f"{pp} ember", ".1f"), col(f"{pp} {name}", ".1f"), RATIO,
            col(f"{tg} ember", ".1f"), col(f"{tg} {name}", ".1f"), RATIO, col("decode GB/s ember (% of probe)")]
    return [{"columns": cols, "rows": out}]


def run_kernels(work, quick):
    runs = []
    tables = bench_set("llama.cpp", work, runs, LLAMA_BIN, quick)
    return area(runs, tables, quick, notes=[
        "ember at the highest ISA level of this CPU; llama.cpp as `tools/build_llama_cpp.sh` builds it (the reference "
        "build of issue 12). Files: `ember gen-model --shape S --type f16 --synthetic-vocab` quantized by "
        "`llama-quantize`, plus the default model; engines alternating, medians over all rounds and repetitions (8B: "
        "decoding 32 tokens). Decode GB/s: weight bytes read per token x tok/s, against `ember bench`'s one-shot "
        "read-bandwidth probe."])


def run_kernels_llama_amx(work, quick):
    runs = []
    tables = bench_set("llama.cpp AMX", work, runs, LLAMA_AMX_BIN, quick)
    return area(runs, tables, quick, notes=[
        "llama.cpp built with its AMX path (`LLAMA_ISA=amx tools/build_llama_cpp.sh /work/llama-cpp-amx`)."])


def run_kernels_avx2(work, quick):
    runs = []
    tables = bench_set("llama.cpp AVX2", work, runs, LLAMA_AVX2_BIN, quick, {"EMBER_ISA": "avx2"}, with_8b=False)
    a = area(runs, tables, quick, notes=[
        "Both engines limited to AVX2 / FMA / F16C: ember with `EMBER_ISA=avx2`, llama.cpp built with "
        "`LLAMA_ISA=avx2 LLAMA_TOOLS=llama-bench tools/build_llama_cpp.sh /work/llama-cpp-avx2`."])
    a["machine"] += ", ember's AVX2 kernels forced (`EMBER_ISA=avx2`)"
    return a


# ---- batched decode and serving: tools/bench_batched.sh, tools/bench_serve_llama.sh ----

def one_b(quick):
    if quick:
        return DEFAULT_MODEL
    path = os.path.join(BENCH_SET, ONE_B)
    if not os.path.exists(path) and os.path.exists(os.path.join(LLAMA_BIN, "llama-quantize")):
        sh(f"tools/bench_set.sh {BENCH_SET}", os.path.join(BENCH_SET, "prepare-1b.log"),
           {"PREPARE_ONLY": "1", "SHAPES": "llama-3.2-1b", "TYPES": "q4_k_m", "DEFAULT_MODEL": "0",
            "LLAMA_BIN": LLAMA_BIN})
    need(path, "the benchmark set's 1B Q4_K_M file (tools/bench_set.sh makes it)")
    return path


def run_batched(work, quick):
    need(os.path.join(LLAMA_BIN, "llama-batched-bench"), "llama-batched-bench")
    m = one_b(quick)
    env = {"NPL": "4", "NPP": "32", "NTG": "16"} if quick else {"NPL": "16", "NPP": "128", "NTG": "64"}
    rounds = 1 if quick else 3
    runs = []
    text = sh(f"tools/bench_batched.sh {m} {rounds} {EMBER}", os.path.join(work, "batched.log"),
              dict(env, LLAMA_BIN=LLAMA_BIN, THREADS=str(THREADS)), runs=runs, what=rounds_text(rounds))
    ll = float(re.search(r"median llama-batched-bench S_TG: ([0-9.]+)", text).group(1))
    em = re.search(r"median ember\[0\] \S+: ([0-9.]+) \(([0-9.]+)x llama\.cpp; median of the per-round ratios "
                   r"([0-9.]+)x", text)
    shape = f"{env['NPL']} x ({env['NPP']} + {env['NTG']})"
    cols = [col("model", align="l"), col("sequences x (prompt + generated)", align="l"),
            col("ember decode tok/s", ".1f"),
            col("llama-batched-bench S_TG", ".1f"), RATIO, col("median of per-round ratios", ".2f", "x")]
    rows = [[os.path.basename(m)[:-5], shape, float(em.group(1)), ll, float(em.group(2)), float(em.group(3))]]
    return area(runs, [{"columns": cols, "rows": rows}], quick, notes=[
        "ember: the pure-decode steps of `ember bench throughput` (decode at context NPP .. NPP + NTG, the shape of "
        "llama-batched-bench's S_TG); llama.cpp: `llama-batched-bench` of the reference build, alternating."])


SERVE_LINE = re.compile(r"serve c=(\d+) in=(\d+): output tok/s ember (\S+) vs llama-server (\S+) \(ratio (\S+)\), "
                        r"median TTFT ember (\S+) ms vs (\S+) ms \(ratio (\S+)\)")


def serve_rows(text, out_dir, label_suffix=""):
    rows = []
    for c, words, e, l, r, te, tl, tr in SERVE_LINE.findall(text):
        js = [os.path.join(out_dir, f) for f in os.listdir(out_dir) if f.startswith(f"serve-ember-c{c}-in{words}-")]
        toks = []
        for j in js:
            s = json.load(open(j))["summary"]
            if s.get("completed"):
                toks.append(s["total_input_tokens"] / s["completed"])
            outlen = re.search(r"-out(\d+)-", j).group(1)
        prompt = f"~{med(toks):.0f} in" if toks else f"{words} words in"
        f = lambda x: None if x in ("nan", "-nan") else float(x)  # noqa: E731
        rows.append([f"c{c}, {prompt} / {outlen} out{label_suffix}", f(e), f(l), f(r), f(tr)])
    return rows


def run_serving(work, quick):
    need(os.path.join(LLAMA_BIN, "llama-server"), "llama-server")
    m = one_b(quick)
    runs = []
    if quick:
        env, rounds, conc = {"N": "4", "WORKLOADS": "16 8,8 16"}, 1, "2"
    else:  # ~2.1 tokens a word on the synthetic vocabulary: ~250 / ~64 prompt tokens
        env, rounds, conc = {"WORKLOADS": "118 64,30 256"}, 2, "8 32"
    out = os.path.join(work, "serve_llama")
    env.update(SKIP_BATCHED="1", OUT=out, LLAMA_BIN=LLAMA_BIN, EMBER=EMBER, THREADS=str(THREADS))
    text = sh(f'tools/bench_serve_llama.sh {m} {rounds} "{conc}"', os.path.join(work, "serve.log"), env, runs=runs,
              what=rounds_text(rounds))
    rows = serve_rows(text, out)
    if not quick and os.path.exists(os.path.join(LLAMA_AMX_BIN, "llama-server")):
        out2 = out + "_amx"
        env2 = dict(env, OUT=out2, LLAMA_BIN=LLAMA_AMX_BIN, WORKLOADS="30 256")
        text2 = sh(f'tools/bench_serve_llama.sh {m} 2 "32"', os.path.join(work, "serve_amx.log"), env2, runs=runs,
                   what="against llama.cpp's AMX build")
        rows += serve_rows(text2, out2, ", llama.cpp's AMX build")
    cols = [col("concurrency, workload", align="l"), col("ember output tok/s", ".1f"),
            col("llama-server output tok/s", ".1f"), RATIO, col("median TTFT ember / llama-server", ".2f")]
    return area(runs, [{"columns": cols, "rows": rows}], quick, notes=[
        f"{env.get('N', '32')} requests at once (`ember bench serve --ignore-eos`, greedy) against "
        "`ember serve --max-num-seqs C` and "
        "`llama-server -np C -cb`; prompts are random words (prompt tokens per request measured from the responses)."])


# ---- long context ----

def ember_bench(args, log, runs, what, shown=None):
    j = log[:-4] + ".json"
    cmd = f"{EMBER} bench {args} -t {THREADS} --no-bandwidth"
    sh(f"{cmd} --json {j}", log, runs=runs, what=what, shown=shown or cmd)
    return med(x for r in json.load(open(j))["results"] for x in r["samples_tps"])


def llama_bench(binary, args, log, runs, what):
    text = sh(f"{binary}/llama-bench {args} -t {THREADS} -o json", log, runs=runs, what=what, check=False)
    try:
        d = json.loads(text[text.index("["):text.rindex("]") + 1])
        return med(x for r in d for x in (r.get("samples_ts") or [r["avg_ts"]]))
    except ValueError:
        print(f"perf_areas: llama-bench gave no JSON; see {log}", file=sys.stderr)
        return None


def run_long_context(work, quick):
    need(os.path.join(LLAMA_BIN, "llama-bench"), "llama-bench")
    if quick:
        models, p, depths, n, reps = [DEFAULT_MODEL], 512, [512], 8, 1
    else:
        models, p, depths, n, reps = [DEFAULT_MODEL, one_b(False)], 4096, [4096, 16384], 32, 3
    runs, rows = [], []
    for m in models:
        base = os.path.basename(m)[:-5]
        lg = lambda t: os.path.join(work, f"{base}.{t}.log")  # noqa: E731
        e = ember_bench(f"-m {m} -p {p} -n 0 -r 1", lg(f"pp{p}.ember"), runs, f"{base} pp{p}")
        ll = llama_bench(LLAMA_BIN, f"-m {m} -fa on -p {p} -n 0 -r 1", lg(f"pp{p}.llama"), runs, f"{base} pp{p}")
        rows.append([base, f"pp{p}", e, ll, div(e, ll)])
        for d in depths:
            e = ember_bench(f"-m {m} -p 0 -n {n} -d {d} -r {reps}", lg(f"d{d}.ember"), runs, f"{base} depth {d}")
            ll = llama_bench(LLAMA_BIN, f"-m {m} -fa on -p 0 -n {n} -d {d} -r 1", lg(f"d{d}.llama"), runs,
                             f"{base} depth {d}")
            rows.append([base, f"tg{n} @ {d}", e, ll, div(e, ll)])
    cols = [col("model", align="l"), col("test", align="l"), col("ember tok/s", ".1f"),
            col("llama.cpp (`-fa on`) tok/s", ".1f"), RATIO]
    return area(runs, [{"columns": cols, "rows": rows}], quick, notes=[
        "Both engines with their default f16 KV cache, alternating per test; tg at depth D decodes after D prefilled "
        "context tokens (untimed)."])


# ---- speculative decoding: tools/bench_spec.sh, tools/bench_spec_serve.sh ----

def md_rows(text, ncols):
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == ncols and not cells[0].startswith("---") and not \
                cells[0] in ("workload", "concurrency", "policy"):
            rows.append(cells)
    return rows


def num(s):
    s = s.rstrip("x").strip()
    try:
        return float(s)
    except ValueError:
        return None


def run_spec(work, quick):
    if quick:
        r, files, n, k, configs = 1, "data/spec/code.txt", 16, 4, "ngram selfhead-ngram"
        sr, conc, nprompts, out = 1, "4", 8, 8
    else:
        r, files, n, k, configs = 3, SPEC_PROMPTS, 64, 8, ENV.get("SPEC_CONFIGS", "selfhead selfhead-ngram")
        sr, conc, nprompts, out = 4, "16 32", 32, 32
    runs = []
    text = sh(f'tools/bench_spec.sh {EMBER} {r} "{files}" {n} {THREADS} {k} "{configs}"',
              os.path.join(work, "spec.log"), runs=runs, what="concurrency 1")
    rows = [[c[0], c[1], num(c[2]), num(c[3])] + [None if x == "-" else x for x in c[4:]] for c in md_rows(text, 7)]
    text2 = sh(f'tools/bench_spec_serve.sh {EMBER} {sr} "{conc}" {nprompts} {out} {THREADS} "{SPEC_SERVE_FLAGS}"',
               os.path.join(work, "spec_serve.log"), runs=runs, what=f"concurrency {conc}")
    rows2 = [[c[0], num(c[1]), num(c[2]), num(c[3])] for c in md_rows(text2, 4)]
    t1 = {"columns": [col("workload", align="l"), col("configuration", align="l"), col("median tok/s", ".1f"),
                      col("paired ratio vs none", ".2f", "x"), col("acceptance", align="l"),
                      col("mean accepted length"), col("target steps")], "rows": rows}
    t2 = {"caption": f"Under load (`ember serve`, {nprompts} requests of the three prompts cycled, {out} tokens each):",
          "columns": [col("concurrency", align="l"), col("plain output tok/s", ".1f"), col("speculation on", ".1f"),
                      col("paired ratio", ".2f", "x")], "rows": rows2}
    return area(runs, [t1, t2], quick, notes=[
        f"The default model, greedy, {n} tokens, K = {k}; configurations as `tools/bench_spec.sh` names them."])


# ---- structured output: tools/bench_structured.py against ember serve and llama-server ----

def start_server(cmd, port, log):
    f = open(log, "w")
    p = subprocess.Popen(cmd, shell=True, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, executable="/bin/bash")
    for _ in range(1200):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=1)
            return p
        except OSError:
            if p.poll() is not None:
                break
            time.sleep(0.1)
    p.kill()
    raise RuntimeError(f"server did not start: {cmd} (see {log})")


def startup_lines(cmd, log):
    """What a server prints until it listens (then it is stopped)."""
    with open(log, "w") as f:
        p = subprocess.Popen(cmd, shell=True, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             executable="/bin/bash")
        out = []
        for line in p.stdout:
            out.append(line)
            f.write(line)
            if "listening" in line:
                break
        stop(p)
    return "".join(out)


def stop(p):
    p.terminate()
    try:
        p.wait(30)
    except subprocess.TimeoutExpired:
        p.kill()


def structured_medians(text):
    return {m: float(v) for m, v in re.findall(r"^median (\S+)\s+([0-9.]+) tok/s", text, re.M)}


def run_structured(work, quick):
    need(os.path.join(LLAMA_BIN, "llama-server"), "llama-server")
    concs = [2, 1] if quick else [16, 1]
    rounds, mt = (1, 8) if quick else (4, 40)
    modes = "free,json_object,small_schema"
    runs, res = [], {}
    for server, port in (("ember", 18531), ("llama", 18532)):
        if server == "ember":
            cmd = (f"{EMBER} serve -m {DEFAULT_MODEL} --port {port} --kv-cache-memory 256M --max-model-len 512 "
                   f"--tool-call-parser hermes -t {THREADS}")
        else:
            cmd = (f"{LLAMA_BIN}/llama-server -m {DEFAULT_MODEL} --port {port} -np {max(concs)} -c 8192 "
                   f"-t {THREADS} --jinja")
        p = start_server(cmd, port, os.path.join(work, f"{server}-server.log"))
        try:
            for c in concs:
                flag = "--server llama" if server == "llama" else "--no-ignore-eos"
                text = sh(f"python3 tools/bench_structured.py {flag} --base-url http://127.0.0.1:{port} "
                          f"--concurrency {c} --rounds {rounds} --max-tokens {mt} --modes {modes}",
                          os.path.join(work, f"{server}-c{c}.log"), runs=runs, what=f"against `{cmd}`")
                res[server, c] = structured_medians(text)
        finally:
            stop(p)
    rows = []
    for c in concs:
        e, ll = res["ember", c], res["llama", c]
        for mode in modes.split(","):
            rows.append([str(c), mode, e.get(mode), div(e.get(mode), e.get("free")), ll.get(mode),
                         div(ll.get(mode), ll.get("free")), div(e.get(mode), ll.get(mode))])
    cols = [col("concurrency", align="l"), col("mode", align="l"), col("ember tok/s", ".1f"),
            col("vs free", ".2f", "x"),
            col("llama-server tok/s", ".1f"), col("vs free", ".2f", "x"), col("ember / llama-server", ".2f", "x")]
    return area(runs, [{"columns": cols, "rows": rows}], quick, notes=[
        f"The default model, chat requests of up to {mt} tokens (temperature 0.8, seeded), modes alternating, medians "
        f"of {rounds_text(rounds)}; requests end at end-of-generation on both servers, each counting the tokens it "
        "produced."])


# ---- KV-cache types ----

KL_LINE = re.compile(r"\(KV cache ([^,]+),.*?\n.*?KL divergence mean ([0-9.e-]+).*?top-1 agreement ([0-9.]+)%")


def run_kv(work, quick):
    dtypes = ["f32", "f16", "bf16", "q8", "q4", "q4c"]
    model = DEFAULT_MODEL if quick else one_b(False)
    runs = []
    cap = {}
    seq_len = 4096
    serve = f"{EMBER} serve -m {model} --port 0 --max-model-len {seq_len} --kv-cache-memory 1G --kv-cache-dtype"
    for t in dtypes:  # capacity: what `ember serve` reports at start-up for a 1 GiB budget
        text = startup_lines(f"{serve} {t}", os.path.join(work, f"cap-{t}.log"))
        m = re.search(r"KV cache dtype \S+, (\d+) bytes per token.*?: (\d+) tokens, (\d+) sequences of", text)
        cap[t] = (int(m.group(1)), int(m.group(3))) if m else (None, None)
    runs.append({"what": "capacity: the start-up line, per dtype T", "command": f"{serve} T"})
    # Quality: the f32-dequantized default model on both sides, so only the cache differs.
    f32 = os.path.join(work, "g-f32.gguf")
    if not quick and not os.path.exists(f32):
        sh(f"{EMBER} quantize {DEFAULT_MODEL} {f32} --type f32 --no-check -t {THREADS}", os.path.join(work, "f32.log"))
    kl_model = DEFAULT_MODEL if quick else f32
    ctx, score = (256, 128) if quick else (4096, 2048)
    kl = {}
    text = sh(f"{EMBER} eval kl {kl_model} {kl_model} -f data/persuasion.txt --ctx {ctx} --chunks 1 --score-from "
              f"{score} -t {THREADS} --kv-cache-dtype {','.join(dtypes)} --kv-rotation auto",
              os.path.join(work, "kl.log"), runs=runs, what="KL, every dtype against one f32-cache pass")
    for name, mean, top1 in KL_LINE.findall(text):
        key = "q4c" if name.startswith("k=q4c") else name.split("+")[0]
        kl[key] = f"{float(mean):.6f} ({float(top1):.2f}%)"
    # llama.cpp's own cache types on the same file and window, each against its own f16-cache pass.
    lkl = {}
    lp = os.path.join(LLAMA_BIN, "llama-perplexity")
    if os.path.exists(lp):
        base = f"{lp} -m {kl_model} -f data/persuasion.txt -c {ctx} --chunks 1 -t {THREADS} -fa on"
        kld = os.path.join(work, "llama.kld")
        sh(f"{base} --kl-divergence-base {kld}", os.path.join(work, "llama-kl-base.log"))
        for ours, theirs in (("q8", "q8_0"), ("q4", "q4_0")):
            text = sh(f"{base} -ctk {theirs} -ctv {theirs} --kl-divergence-base {kld} --kl-divergence",
                      os.path.join(work, f"llama-kl-{theirs}.log"), runs=runs if ours == "q8" else None,
                      what="llama.cpp's q8_0 / q4_0 cache against its own base pass",
                      shown=f"{base} -ctk T -ctv T --kl-divergence-base base.kld --kl-divergence")
            m = re.search(r"Mean\s+KLD:\s+([0-9.]+)", text)
            lkl[ours] = f"{float(m.group(1)):.6f} ({theirs})" if m else None
    # Speed: decode after a deep context, dtypes alternating per round.
    depth, n, reps, rounds = (256, 8, 1, 1) if quick else (8192, 32, 5, 2)
    tg = {t: [] for t in dtypes}
    for r in range(rounds):
        for t in dtypes:
            args = f"-m {model} -p 0 -n {n} -d {depth} -r {reps} --kv-cache-dtype"
            tg[t].append(ember_bench(f"{args} {t}", os.path.join(work, f"depth-{t}-r{r}.log"),
                                     runs if (r, t) == (0, "f32") else None,
                                     f"decode at depth {depth}, {rounds_text(rounds)}, dtypes alternating",
                                     shown=f"{EMBER} bench {args} T -t {THREADS} --no-bandwidth"))
    tp = {}
    tp_rounds = 1 if quick else int(ENV.get("KV_TP_ROUNDS", "1"))
    np_, il, ol, mem = (4, 64, 32, "64M") if quick else (32, 1024, 1024, "1G")
    for r in range(tp_rounds):
        for t in (["f32", "q8"] if r % 2 == 0 else ["q8", "f32"]):
            cmd = (f"{EMBER} bench throughput -m {model} --num-prompts {np_} --input-len {il} --output-len {ol} "
                   f"--kv-cache-memory {mem} --kv-cache-dtype {t} -t {THREADS}")
            text = sh(cmd, os.path.join(work, f"tp-{t}-r{r}.log"), runs=runs if (r, t) == (0, "f32") else None,
                      what=f"{np_} x ({il} + {ol}) in {mem}, f32 and q8, {rounds_text(tp_rounds)}",
                      shown=cmd.replace("--kv-cache-dtype f32", "--kv-cache-dtype T"))
            m = re.search(r"([0-9.]+) tokens/s \(", text)
            tp.setdefault(t, []).append(float(m.group(1)) if m else None)
    f32_tg, f32_tp = med(tg["f32"]), med(tp.get("f32", []))
    rows = []
    for t in dtypes:
        b, seqs = cap[t]
        s = med(tg[t])
        p = med(tp.get(t, []))
        rows.append([t, None if b is None else str(b), None if seqs is None else str(seqs),
                     kl.get(t), lkl.get(t), None if s is None else f"{s:.2f} ({s / f32_tg:.2f}x)",
                     None if p is None else f"{p:.1f} ({p / f32_tp:.2f}x)"])
    short = os.path.basename(model)[:-5]
    cols = [col("KV dtype (K and V; q4c: K q4c, V q4)", align="l"), col(f"bytes / token ({short})"),
            col(f"{seq_len // 1024}k sequences in 1 GiB"), col("mean KL vs f32 cache (top-1)"),
            col("llama.cpp `-ctk/-ctv`: mean KL"),
            col(f"decode at depth {depth}, tok/s (vs f32)"), col(f"{np_} x ({il} + {ol}), tok/s (vs f32)")]
    return area(runs, [{"columns": cols, "rows": rows}], quick, notes=[
        f"KL: {'the default model' if quick else 'the default model dequantized to f32'} on both sides, one "
        f"{ctx}-token window of data/persuasion.txt, positions {score}.. scored; rotation `auto`. Speed: {short}."])


# ---- cost: tools/bench_batching.sh ----

def run_cost(work, quick):
    env = {"SEQS": "2", "IN": "8", "OUT": "8"} if quick else {"SEQS": "8", "IN": "32", "OUT": "48"}
    r, n = (1, 6) if quick else (3, 32)
    runs = []
    text = sh(f"tools/bench_batching.sh {THREADS} {r} {n}", os.path.join(work, "batching.log"), env, runs=runs,
              what=f"{rounds_text(r)}, policies alternating")
    rows = [[c[0]] + [num(x) for x in c[1:]] for c in md_rows(text, 7)]
    cols = [col("policy", align="l"), col("requests/s", ".2f"), col("output tok/s", ".1f"),
            col("median TTFT ms", ".0f"),
            col("median E2E ms", ".0f"), col("server CPU-s / 1k output tokens", ".2f"),
            col("requests/s vs continuous", ".2f", "x")]
    return area(runs, [{"columns": cols, "rows": rows}], quick, notes=[
        f"The default model behind `ember serve --batching static|dynamic|continuous`, {n} requests at once, output "
        f"lengths {env['OUT']} x [0.1, 1.9], batch size {env['SEQS']}; CPU time from the server's /metrics."])


# ---- mixture of experts: tools/bench_set.sh and tools/bench_batched.sh on MoE shapes (issue 37) ----

MOE_DIR = ENV.get("MOE_DIR", "/tmp/moe-set")
# (shape of `ember gen-model --list`, llama-quantize type): files made by llama-quantize from ember's f16 output
MOE_FILES = [("olmoe-1b-7b", "q4_k_m"), ("olmoe-1b-7b", "q8_0"), ("qwen3-30b-a3b-12l", "q4_k_m"),
             ("gpt-oss-20b-6l", "mxfp4_moe")]


def moe_table(set_rows, batched):
    """set_rows: bench_set.json rows (with _bw); batched: {file name: bench_batched.sh output}."""
    tests = set_rows[0]["tests"] if set_rows else {}
    pp, tg = tests.get("pp", "pp"), tests.get("tg", "tg")
    cols = [col("file", align="l"), col(f"{pp} ember", ".1f"), col(f"{pp} llama.cpp", ".1f"), RATIO,
            col(f"{tg} ember", ".1f"), col(f"{tg} llama.cpp", ".1f"), RATIO, col("decode GB/s ember (% of probe)"),
            col("16 seqs ember", ".1f"), col("16 seqs llama-batched-bench", ".1f"), RATIO]
    rows = []
    for r in set_rows:
        m = lambda eng, k: (r[eng][k] or {}).get("median")  # noqa: E731
        g = r.get("decode_gbs_ember")
        gb = None if g is None else (f"{g:.1f} ({100 * g / r['_bw']:.0f}%)" if r.get("_bw") else f"{g:.1f}")
        text = batched.get(r["file"], "")
        ll = re.search(r"median llama-batched-bench S_TG: ([0-9.]+)", text)
        em = re.search(r"median ember\[0\] \S+: ([0-9.]+) \(([0-9.]+)x llama\.cpp", text)
        rows.append([r["file"][:-len(".gguf")], m("ember", "pp"), m("llama.cpp", "pp"), r.get("pp_ratio"),
                     m("ember", "tg"), m("llama.cpp", "tg"), r.get("tg_ratio"), gb,
                     float(em.group(1)) if em else None, float(ll.group(1)) if ll else None,
                     float(em.group(2)) if em else None])
    return [{"columns": cols, "rows": rows}]


MOE_NOTES = [
    "Random-weight files of the issue's shapes: `ember gen-model --shape S --type f16 --synthetic-vocab`, quantized "
    "by llama.cpp's `llama-quantize` (gpt-oss: `MXFP4_MOE`, MXFP4 experts and Q8_0 elsewhere). pp512 / tg128: "
    "`ember bench` and `llama-bench`, alternating per file and round, medians. 16 seqs: `tools/bench_batched.sh` "
    "(16 x (128 + 32), the pure-decode steps of `ember bench throughput` against `llama-batched-bench`'s S_TG), "
    "exact routing. Decode GB/s: the weight bytes a token reads (the chosen experts' share, attention, head) x "
    "tok/s, against `ember bench`'s one-shot read-bandwidth probe, which this VM's decode exceeds: the probe is "
    "not the ceiling. Random routing spreads tokens over experts more evenly than a trained router does."]


def run_moe(work, quick):
    need(os.path.join(LLAMA_BIN, "llama-batched-bench"), "llama-batched-bench")
    files = [("mixtral-tiny", "q4_k_m")] if quick else MOE_FILES
    runs, set_rows, batched = [], [], {}
    base = {"LLAMA_BIN": LLAMA_BIN, "THREADS": str(THREADS), "DEFAULT_MODEL": "0"}
    base.update(dict(P="64", N="16", REPS="1", ROUNDS="1") if quick else dict(REPS="2", ROUNDS="3"))
    for shape, qtype in files:
        env = dict(base, SHAPES=shape, TYPES=qtype)
        sh(f"tools/bench_set.sh {MOE_DIR}", os.path.join(work, f"bench_set.{shape}-{qtype}.log"), env, runs=runs,
           what=f"{shape} {qtype}")
        with open(os.path.join(MOE_DIR, "results", "bench_set.json")) as f:
            d = json.load(f)
        for r in d["rows"]:
            r["_bw"] = d.get("read_bandwidth_gbs")
            set_rows.append(r)
        name = f"{shape}-{qtype}.gguf"
        benv = {"NPL": "4", "NPP": "32", "NTG": "8"} if quick else {"NPL": "16", "NPP": "128", "NTG": "32"}
        rounds = 1 if quick else 2
        batched[name] = sh(f"tools/bench_batched.sh {os.path.join(MOE_DIR, name)} {rounds} {EMBER}",
                           os.path.join(work, f"batched.{shape}-{qtype}.log"),
                           dict(benv, LLAMA_BIN=LLAMA_BIN, THREADS=str(THREADS)), runs=runs,
                           what=f"{shape} {qtype}, {rounds_text(rounds)}")
    return area(runs, moe_table(set_rows, batched), quick, notes=MOE_NOTES)


AREAS = {
    "kernels": (run_kernels, "tools/bench_set.sh: the benchmark set against llama.cpp's reference build"),
    "kernels-llama-amx": (run_kernels_llama_amx, "tools/bench_set.sh against llama.cpp's AMX build ($LLAMA_AMX_BIN)"),
    "kernels-avx2": (run_kernels_avx2, "tools/bench_set.sh, EMBER_ISA=avx2 against llama.cpp's AVX2 build"),
    "batched": (run_batched, "tools/bench_batched.sh: 16 x (128 + 64) against llama-batched-bench"),
    "serving": (run_serving, "tools/bench_serve_llama.sh: ember serve against llama-server at c8 / c32"),
    "long-context": (run_long_context, "ember bench / llama-bench -fa on: pp4096, decode at depth 4k / 16k"),
    "spec": (run_spec, "tools/bench_spec.sh (concurrency 1), tools/bench_spec_serve.sh (16 / 32)"),
    "structured": (run_structured, "tools/bench_structured.py against ember serve and llama-server"),
    "kv": (run_kv, "per KV dtype: capacity, KL (ember eval kl), decode at depth 8192, 32 x 2k throughput"),
    "moe": (run_moe, "tools/bench_set.sh, tools/bench_batched.sh on OLMoE, Qwen3-MoE (12 layers), gpt-oss (6 layers)"),
    "cost": (run_cost, "tools/bench_batching.sh: requests/s and server CPU-s per 1k tokens per batching policy"),
}


def run_area(name, quick, work):
    fn = AREAS[name][0]
    d = os.path.join(os.path.abspath(work), name)
    os.makedirs(d, exist_ok=True)
    if not os.path.exists(os.path.join(ROOT, EMBER)):
        raise RuntimeError(f"{EMBER} not built (cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release && "
                           "ninja -C build)")
    t0, l0 = time.time(), load()
    try:
        a = fn(d, quick)
    except Skip as e:
        print(f"perf_areas: {name}: skipped: {e}", file=sys.stderr)
        return None
    a["load"] = f"{l0} before, {load()} after"
    a["seconds"] = round(time.time() - t0)
    return a
