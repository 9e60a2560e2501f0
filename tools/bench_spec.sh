#!/usr/bin/env bash
# Speculative decoding at concurrency 1: `ember run` on each prompt file,
# greedy, plain engine (--speculative-method none) and each given method,
# alternating per round; prints every round, the median decode tok/s per
# method, the median of the paired ratios method/none, and the acceptance
# figures `ember run` reports.
#   tools/bench_spec.sh EMBER ROUNDS "FILE..." [N] [THREADS] [K] [METHODS]
# e.g. tools/bench_spec.sh build/ember 5 "data/spec/prose.txt data/spec/rewrite.txt data/spec/code.txt" 128 2 4 ngram
# Methods: ngram, draft (the draft model in $DRAFT_MODEL), layerskip (layers
# $SKIP_LAYERS skipped, default last-third); e.g. METHODS="ngram draft layerskip".
set -euo pipefail
DRAFT_MODEL=${DRAFT_MODEL:-}; SKIP_LAYERS=${SKIP_LAYERS:-last-third}
BIN=$1; R=$2; FILES=$3; N=${4:-128}; T=${5:-2}; K=${6:-4}; METHODS=${7:-ngram}
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)  threads: $T  rounds: $R  n: $N  k: $K"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
median() { sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
for f in $FILES; do
  declare -A tps=()
  declare -A acc=()
  for ((i = 0; i < R; ++i)); do
    for m in none $METHODS; do
      extra=()
      [ "$m" = draft ] && extra=(--speculative-model "$DRAFT_MODEL")
      [ "$m" = layerskip ] && extra=(--skip-layers "$SKIP_LAYERS")
      log=$("$BIN" run -f "$f" -n "$N" --temp 0 -t "$T" --speculative-method "$m" --num-speculative-tokens "$K" \
            --speculative-max-running 0 "${extra[@]}" 2>&1 >/dev/null)
      v=$(echo "$log" | sed -n 's/.*generated: [0-9]* tokens, \([0-9.]*\) tok\/s.*/\1/p')
      tps[$m]="${tps[$m]:-} $v"
      a=$(echo "$log" | sed -n 's/^speculative.*: \(.*\)$/\1/p')
      [ -n "$a" ] && acc[$m]="$a"
      echo "$(basename "$f") round $i $m: $v tok/s ${a:+($a)}"
    done
  done
  base=(${tps[none]})
  for m in none $METHODS; do
    vals=(${tps[$m]})
    med=$(printf '%s\n' "${vals[@]}" | median)
    ratio=$(for ((i = 0; i < R; ++i)); do echo "${vals[i]} / ${base[i]}" | bc -l; done | median)
    printf '%s %s: median %.1f tok/s, paired ratio vs none %.2fx %s\n' "$(basename "$f")" "$m" "$med" "$ratio" \
      "${acc[$m]:+| ${acc[$m]}}"
  done
  unset tps acc
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
