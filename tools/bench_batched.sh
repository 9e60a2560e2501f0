#!/usr/bin/env bash
# Batched decode against llama-batched-bench, alternating per round: NPL
# sequences of NPP prompt + NTG generated tokens, ember's `bench throughput`
# (its pure-decode steps: decode at context NPP .. NPP + NTG, as
# llama-batched-bench's S_TG) for every ember binary given, then
# llama-batched-bench; prints every round, the medians and the ratios of the
# medians to llama.cpp's.
#   tools/bench_batched.sh MODEL ROUNDS EMBER [EMBER..]
# Environment: NPL (16), NPP (128), NTG (64), THREADS (2),
# LLAMA_BIN (/work/llama-cpp/bin: tools/build_llama_cpp.sh builds it; ik_llama.cpp's
# from tools/build_ik_llama_cpp.sh), LLAMA_ARGS (extra llama-batched-bench flags).
# Each EMBER is a binary, optionally with flags for `bench throughput` (one
# argument, split at spaces), e.g. this build against an older one (built
# from the older commit), or with and without a routing knob:
#   tools/bench_batched.sh /tmp/bench-set/llama-3.2-1b-q4_k_m.gguf 3 build/ember /tmp/ember-base
#   tools/bench_batched.sh olmoe-q4_k_m.gguf 3 build/ember "build/ember --moe-share 0.5"
set -euo pipefail
[ $# -ge 3 ] || { sed -n '2,15p' "$0" >&2; exit 2; }
M=$1; R=$2; shift 2
NPL=${NPL:-16}; NPP=${NPP:-128}; NTG=${NTG:-64}; T=${THREADS:-2}
LLAMA_BIN=${LLAMA_BIN:-/work/llama-cpp/bin}
read -r -a LARGS <<<"${LLAMA_ARGS:-}"
[ -x "$LLAMA_BIN/llama-batched-bench" ] || { echo "bench_batched: $LLAMA_BIN/llama-batched-bench missing" >&2; exit 1; }
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)  threads: $T"
echo "model: $M  shape: $NPL x ($NPP + $NTG)  rounds: $R  load before: $(cut -d' ' -f1-3 /proc/loadavg)"
median() { sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for r in $(seq 1 "$R"); do
  i=0
  for e in "$@"; do
    read -r -a cmd <<<"$e"
    v=$("${cmd[0]}" bench throughput -m "$M" --num-prompts "$NPL" --input-len "$NPP" --output-len "$NTG" \
          --max-num-seqs "$NPL" --max-num-batched-tokens 2048 --kv-cache-memory 512M -t "$T" "${cmd[@]:1}" 2>&1 |
        grep -oE 'decode steps [0-9.]+' | awk '{print $3}')
    [ -n "$v" ] || { echo "bench_batched: no decode figure from $e" >&2; exit 1; }
    echo "round $r  ember[$i] $e: $v tok/s"
    echo "$v" >>"$tmp/e$i"
    i=$((i + 1))
  done
  # llama-batched-bench's table row: | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | ...
  v=$("$LLAMA_BIN/llama-batched-bench" -m "$M" -c 4096 -b 2048 -ub 512 -npp "$NPP" -ntg "$NTG" -npl "$NPL" -t "$T" "${LARGS[@]}" 2>&1 |
      awk -F'|' -v pp="$NPP" '$2 + 0 == pp && NF > 9 {gsub(/ /, "", $9); print $9}' | head -1)
  [ -n "$v" ] || { echo "bench_batched: no S_TG from llama-batched-bench" >&2; exit 1; }
  echo "round $r  llama-batched-bench S_TG: $v tok/s"
  echo "$v" >>"$tmp/l"
done
lm=$(median <"$tmp/l")
echo "median llama-batched-bench S_TG: $lm"
i=0
for e in "$@"; do
  m=$(median <"$tmp/e$i")
  # The paired ratio of each round (robust to slow drifts of the machine's speed).
  pr=$(paste "$tmp/e$i" "$tmp/l" | awk '{printf "%.4f\n", $1 / $2}' | median)
  echo "median ember[$i] $e: $m ($(awk -v a="$m" -v b="$lm" 'BEGIN {printf "%.2fx", a / b}') llama.cpp;" \
       "median of the per-round ratios $(awk -v r="$pr" 'BEGIN {printf "%.2fx", r}'))"
  i=$((i + 1))
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
