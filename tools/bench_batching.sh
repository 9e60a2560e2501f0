#!/usr/bin/env bash
# The batching table: static, dynamic (windowed) and continuous batching
# (paged KV in all three) of `ember serve` on the same workload, measured by
# `ember bench serve`; the policies alternate within each round, the table
# gives medians over rounds.
#   tools/bench_batching.sh [THREADS] [ROUNDS] [NUM_PROMPTS]
# Environment: MODEL (default: the bundled model), SEQS (batch size,
# --max-num-seqs, default 16), IN / OUT (~prompt words / max output tokens,
# default 64 / 128), RATIO (length spread, default 0.9: outputs of
# OUT*(1-RATIO) .. OUT*(1+RATIO) tokens, the spread that request-level
# batching pays for), RATE (requests/s, Poisson; default inf: all at once),
# WINDOW_MS (dynamic batch window, default 50).
# Results: bench_results/batching-<policy>-r<k>.json (git-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-2}
R=${2:-3}
N=${3:-48}
MODEL=${MODEL:-models/gemma-3-270m-q4_k_m.gguf}
SEQS=${SEQS:-16}
IN=${IN:-64}
OUT=${OUT:-128}
RATIO=${RATIO:-0.9}
RATE=${RATE:-inf}
WINDOW_MS=${WINDOW_MS:-50}
PORT=18460
mkdir -p bench_results
rm -f bench_results/batching-*.json
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)  threads: $T"
echo "model: $MODEL; workload: $N prompts, ~$IN prompt words, $OUT x [1-$RATIO, 1+$RATIO] output tokens (ignore_eos)," \
  "rate $RATE; batch size $SEQS; dynamic window $WINDOW_MS ms; rounds $R; load before: $(cut -d' ' -f1-3 /proc/loadavg)"

wait_ready() {
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$PORT/v1/models" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  return 1
}

SPID=""
trap '[ -n "$SPID" ] && kill $SPID 2>/dev/null || true' EXIT
for r in $(seq 1 "$R"); do
  for policy in static dynamic continuous; do
    build/ember serve -m "$MODEL" --port $PORT -t "$T" --kv-cache-memory 1G --max-num-seqs "$SEQS" \
      --batching "$policy" --batch-window-ms "$WINDOW_MS" --disable-log-requests \
      >/dev/null 2>bench_results/batching-server.log &
    SPID=$!
    wait_ready || { echo "ember serve did not start"; cat bench_results/batching-server.log; exit 1; }
    build/ember bench serve --base-url "http://127.0.0.1:$PORT" --num-prompts "$N" --request-rate "$RATE" \
      --random-input-len "$IN" --random-output-len "$OUT" --random-range-ratio "$RATIO" --ignore-eos \
      --seed "$r" --label "$policy" -q --json "bench_results/batching-$policy-r$r.json" >/dev/null
    kill -TERM $SPID
    wait $SPID || true
    SPID=""
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$R" <<'EOF'
import json, statistics, sys
rounds = int(sys.argv[1])
keys = [("request_throughput", "requests/s"), ("output_throughput", "output tok/s"),
        ("ttft_ms", "median TTFT ms"), ("e2e_ms", "median E2E ms"),
        ("server_cpu_s_per_1k_output_tokens", "server CPU-s / 1k tok")]
print("| policy | " + " | ".join(k[1] for k in keys) + " | vs continuous (requests/s) |")
print("|---" * (len(keys) + 2) + "|")
med = {}
for p in ["static", "dynamic", "continuous"]:
    vals = {k: [] for k, _ in keys}
    for r in range(1, rounds + 1):
        s = json.load(open(f"bench_results/batching-{p}-r{r}.json"))["summary"]
        for k, _ in keys:
            v = s[k]["median"] if isinstance(s[k], dict) else s[k]
            if v is not None:
                vals[k].append(v)
    med[p] = {k: statistics.median(v) if v else float("nan") for k, v in vals.items()}
for p in ["static", "dynamic", "continuous"]:
    m = med[p]
    cells = [f"{m[k]:.3f}" if k.startswith("server_cpu") else f"{m[k]:.2f}" for k, _ in keys]
    print(f"| {p} | " + " | ".join(cells) + f" | {m['request_throughput'] / med['continuous']['request_throughput']:.2f} |")
EOF
