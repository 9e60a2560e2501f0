#!/usr/bin/env bash
# Serving benchmark: `ember bench serve` against `ember serve` and, when it
# can be started, llama.cpp's server from the llama-cpp-python pip package
# (needs: pip install 'llama-cpp-python[server]', i.e. fastapi, uvicorn,
# sse-starlette, starlette-context, pydantic-settings), on the same model,
# machine and workload, at several client concurrencies.
#   tools/bench_serve_compare.sh [THREADS] [NUM_PROMPTS] [CONCURRENCIES]
#   e.g. tools/bench_serve_compare.sh 2 64 "1 8 32"
# Results: bench_results/serve-<server>-c<C>.json (git-ignored); with
# matplotlib, tools/plot_bench.py then draws docs/img/serve_*.png.
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-2}
N=${2:-64}
CONC=${3:-"1 8 32"}
IN=${IN:-128}
OUT=${OUT:-64}
MODEL=models/gemma-3-270m-q4_k_m.gguf
mkdir -p bench_results
rm -f bench_results/serve-*.json
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)  threads: $T"
echo "workload: $N prompts, ~$IN input / $OUT output tokens (ignore_eos), greedy; load before: $(cut -d' ' -f1-3 /proc/loadavg)"

wait_ready() {  # wait_ready URL SECONDS
  for _ in $(seq 1 "$((${2} * 10))"); do
    curl -sf "$1/v1/models" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  return 1
}

# Each concurrency level uses its own prompts (seed = level): a server that
# saw the previous level's prompts would otherwise answer from its prefix
# cache. Both servers get the same prompts at the same level.
run_server_bench() {  # run_server_bench LABEL URL
  for c in $CONC; do
    build/ember bench serve --base-url "$2" --num-prompts "$N" --max-concurrency "$c" --request-rate inf \
      --random-input-len "$IN" --random-output-len "$OUT" --ignore-eos --seed "$c" --label "$1" -q \
      --json "bench_results/serve-$1-c$c.json" | sed -n '/Serving Benchmark Result/,/^=*$/p' |
      grep -E "Server|Successful|Failed|Request throughput|Output token throughput|Median TTFT|P99 TTFT|Median TPOT|P99 TPOT" |
      sed "s/^/[$1 c=$c] /"
  done
}

PORT_E=18400
build/ember serve -m "$MODEL" --port $PORT_E -t "$T" --kv-cache-memory 1G --max-num-seqs 64 --disable-log-requests \
  >/dev/null 2>bench_results/serve-ember.log &
EPID=$!
trap 'kill $EPID 2>/dev/null || true; [ -n "${LPID:-}" ] && kill $LPID 2>/dev/null || true' EXIT
wait_ready "http://127.0.0.1:$PORT_E" 60 || { echo "ember serve did not start"; cat bench_results/serve-ember.log; exit 1; }
run_server_bench ember "http://127.0.0.1:$PORT_E"
kill -TERM $EPID; wait $EPID || true

PORT_L=18401
if python3 -c "import llama_cpp.server, fastapi, uvicorn, sse_starlette, starlette_context" 2>/dev/null; then
  python3 -m llama_cpp.server --model "$MODEL" --port $PORT_L --n_threads "$T" --n_ctx 8192 \
    --interrupt_requests False >bench_results/serve-llama.log 2>&1 &
  LPID=$!
  if wait_ready "http://127.0.0.1:$PORT_L" 120; then
    run_server_bench llama-cpp-python "http://127.0.0.1:$PORT_L"
  else
    echo "llama-cpp-python server did not start (see bench_results/serve-llama.log)"
  fi
  kill $LPID 2>/dev/null || true
  wait $LPID 2>/dev/null || true
else
  echo "llama-cpp-python server not installed: ember only"
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
if python3 -c "import matplotlib" 2>/dev/null; then
  python3 tools/plot_bench.py bench_results/serve-*.json --out docs/img
fi
