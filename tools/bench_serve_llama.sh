#!/usr/bin/env bash
# Issue 12's serving and batched-decode targets, ember against llama.cpp's C++
# tools on one model file, same machine, alternating engines:
#   1. batched decode: 16 sequences of 128 prompt + 64 generated tokens:
#      `ember bench throughput` (decode tok/s over pure-decode steps) vs
#      `llama-batched-bench -npp 128 -ntg 64 -npl 16` (S_TG, aggregate decode t/s);
#   2. serving: `ember bench serve` (32 requests, all at once, concurrency C,
#      ignore_eos, greedy) against `ember serve` and against `llama-server -np C`
#      (continuous batching, C slots), for a prefill-bound workload (~250 prompt /
#      64 output tokens) and a decode-bound one (~64 / 256).
#
#   tools/bench_serve_llama.sh MODEL [ROUNDS] [CONCURRENCIES]
#   e.g. tools/bench_serve_llama.sh /tmp/bench-set/llama-3.2-1b-q4_k_m.gguf 2 "8 32"
# Environment: THREADS=2 LLAMA_BIN=/work/llama-cpp/bin EMBER=build/ember N=32
#   SKIP_BATCHED=1 / SKIP_SERVE=1 to leave a part out.
# Prints one line per measurement and the medians; raw JSON in OUT (default
# bench_results/serve_llama, git-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:?model file}
ROUNDS=${2:-2}
CONC=${3:-"8 32"}
T=${THREADS:-2}
N=${N:-32}
# "PROMPT_WORDS OUTPUT_TOKENS" pairs. Prompts are random words: ~1 token a
# word for real vocabularies, ~2.1 for `ember gen-model --synthetic-vocab`
# files (use "118 64,30 256" there for ~250 / ~64 prompt tokens); each
# slot of llama-server gets 4 tokens a word of room.
WORKLOADS=${WORKLOADS:-"250 64,64 256"}
LLAMA_BIN=${LLAMA_BIN:-/work/llama-cpp/bin}
EMBER=${EMBER:-build/ember}
OUT=${OUT:-bench_results/serve_llama}
mkdir -p "$OUT"
die() { echo "bench_serve_llama: $*" >&2; exit 1; }
[ -x "$EMBER" ] || die "$EMBER not built"
[ -x "$LLAMA_BIN/llama-server" ] || die "$LLAMA_BIN/llama-server missing (tools/build_llama_cpp.sh)"
[ -f "$MODEL" ] || die "no model $MODEL"
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  model: $MODEL  threads: $T  rounds: $ROUNDS  load: $(cut -d' ' -f1-3 /proc/loadavg)"

median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
declare -A S  # results: key -> newline-separated samples
add() { S[$1]+="$2"$'\n'; }

# ---- 1. batched decode ----
if [ "${SKIP_BATCHED:-0}" != 1 ]; then  # its own rounds, medians and per-round ratios
  LLAMA_BIN=$LLAMA_BIN THREADS=$T tools/bench_batched.sh "$MODEL" "$ROUNDS" "$EMBER" | tee "$OUT/batched.txt"
fi

wait_ready() {  # URL SECONDS
  for _ in $(seq 1 "$(($2 * 10))"); do
    curl -sf "$1/v1/models" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  return 1
}
# bench LABEL PORT C IN OUTLEN ROUND -> prints "tok/s ttft_ms"
bench() {
  local j="$OUT/serve-$1-c$3-in$4-out$5-r$6.json"
  "$EMBER" bench serve --base-url "http://127.0.0.1:$2" --num-prompts "$N" --max-concurrency "$3" --request-rate inf \
    --random-input-len "$4" --random-output-len "$5" --ignore-eos --seed "$3" --label "$1" -q --no-metrics \
    --json "$j" >/dev/null 2>&1 || { echo "nan nan"; return; }
  python3 -c "import json,sys; d=json.load(open(sys.argv[1]))['summary']; print(d['output_throughput'], d['ttft_ms']['median'], d.get('completed', 0))" "$j"
}

# ---- 2. serving ----
IFS=, read -ra wls <<<"$WORKLOADS"
if [ "${SKIP_SERVE:-0}" != 1 ]; then
  for c in $CONC; do
    for wl in "${wls[@]}"; do
      set -- $wl
      IN=$1 OL=$2
      for r in $(seq 1 "$ROUNDS"); do
        "$EMBER" serve -m "$MODEL" --port 18510 -t "$T" --kv-cache-memory 2G --max-num-seqs "$c" \
          --disable-log-requests >"$OUT/ember-serve.log" 2>&1 &
        P=$!
        wait_ready http://127.0.0.1:18510 120 || { kill $P; die "ember serve did not start"; }
        read -r et ett en < <(bench ember 18510 "$c" "$IN" "$OL" "$r")
        kill -TERM $P; wait $P 2>/dev/null || true
        "$LLAMA_BIN/llama-server" -m "$MODEL" --port 18511 -t "$T" -np "$c" -c $((c * (4 * IN + OL + 64))) -cb \
          --no-webui >"$OUT/llama-server.log" 2>&1 &
        P=$!
        wait_ready http://127.0.0.1:18511 120 || { kill $P; die "llama-server did not start"; }
        read -r lt ltt ln < <(bench llama 18511 "$c" "$IN" "$OL" "$r")
        kill -TERM $P; wait $P 2>/dev/null || true
        echo "serve c=$c in=$IN out=$OL round $r: ember $et tok/s (TTFT median ${ett} ms, $en ok) | llama-server $lt tok/s (TTFT median ${ltt} ms, $ln ok)"
        add "se-$c-$IN" "$et"; add "sl-$c-$IN" "$lt"; add "te-$c-$IN" "$ett"; add "tl-$c-$IN" "$ltt"
      done
    done
  done
fi

echo "== medians (load after: $(cut -d' ' -f1-3 /proc/loadavg))"
for c in $CONC; do
  for wl in "${wls[@]}"; do
    set -- $wl
    IN=$1
    [ -n "${S[se-$c-$IN]:-}" ] || continue
    a=$(printf '%s' "${S[se-$c-$IN]}" | median); b=$(printf '%s' "${S[sl-$c-$IN]}" | median)
    x=$(printf '%s' "${S[te-$c-$IN]}" | median); y=$(printf '%s' "${S[tl-$c-$IN]}" | median)
    echo "serve c=$c in=$IN: output tok/s ember $a vs llama-server $b (ratio $(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.2f", a/b}')), median TTFT ember $x ms vs $y ms (ratio $(awk -v a="$x" -v b="$y" 'BEGIN{printf "%.2f", a/b}'))"
  done
done
