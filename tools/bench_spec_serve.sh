#!/usr/bin/env bash
# Speculative decoding under load: `ember bench serve` against `ember serve`
# at each concurrency, plain (no speculative flags) and with each given
# speculation setting, alternating per round; requests are the three
# prompts of data/spec/ (prose, rewriting, code) cycled, greedy, OUT tokens
# each. Prints the bench's summary lines (output tok/s, acceptance) per run
# and a table of the paired ratio spec/plain per concurrency.
#   tools/bench_spec_serve.sh EMBER ROUNDS "CONCURRENCY..." [PROMPTS_PER_RUN] [OUT] [THREADS] [SPEC_FLAGS]
# e.g. tools/bench_spec_serve.sh build/ember 1 "16 32" 64 64 2 \
#        "--speculative-method ngram --ngram-k-by-match --num-speculative-tokens 8 --speculative-adaptive"
set -euo pipefail
BIN=$1; R=$2; CONC=$3; NP=${4:-64}; OUT=${5:-64}; T=${6:-2}
SPEC=${7:---speculative-method ngram --ngram-k-by-match --num-speculative-tokens 8 --speculative-adaptive}
DIR=$(mktemp -d /tmp/bench_spec_serve.XXXXXX)
python3 - "$DIR/prompts.jsonl" "$OUT" <<'PY'
import json, sys
out, n = sys.argv[1], int(sys.argv[2])
with open(out, "w") as f:
    for name in ["prose", "rewrite", "code"]:
        f.write(json.dumps({"prompt": open(f"data/spec/{name}.txt").read(), "output_len": n}) + "\n")
PY
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  threads: $T  prompts per run: $NP  out: $OUT  spec: $SPEC"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A tps=()
for ((i = 0; i < R; ++i)); do
  for c in $CONC; do
    modes="plain spec"; [ $((i % 2)) -eq 1 ] && modes="spec plain"  # the order alternates per round
    for mode in $modes; do
      port=$((18000 + RANDOM % 1000))
      extra=()
      # shellcheck disable=SC2206
      [ "$mode" = spec ] && extra=($SPEC)
      "$BIN" serve --port "$port" -t "$T" --max-num-seqs 64 "${extra[@]}" > "$DIR/server.log" 2>&1 &
      pid=$!
      for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/v1/models" > /dev/null && break; sleep 0.5; done
      "$BIN" bench serve --port "$port" --dataset "$DIR/prompts.jsonl" --num-prompts "$NP" --max-concurrency "$c" \
        --temperature 0 --ignore-eos -q > "$DIR/bench.txt" 2>&1 || true
      kill "$pid"; wait "$pid" 2> /dev/null || true
      v=$(sed -n 's/^Output token throughput (tok\/s): *\([0-9.]*\).*/\1/p' "$DIR/bench.txt")
      a=$(grep -E "Acceptance rate|Mean accepted|Draft tokens" "$DIR/bench.txt" | tr -s ' ' | paste -sd';' || true)
      tps[$c,$mode]="${tps[$c,$mode]:-} $v"
      echo "round $i concurrency $c $mode: $v output tok/s ${a:+($a)}"
    done
  done
done
median() { sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| concurrency | plain output tok/s (median) | spec output tok/s (median) | paired ratio spec/plain |"
echo "|---|---|---|---|"
for c in $CONC; do
  p=(${tps[$c,plain]}); s=(${tps[$c,spec]})
  ratio=$(for ((i = 0; i < R; ++i)); do echo "${s[i]} / ${p[i]}" | bc -l; done | median)
  printf '| %s | %.1f | %.1f | %.2fx |\n' "$c" "$(printf '%s\n' "${p[@]}" | median)" \
    "$(printf '%s\n' "${s[@]}" | median)" "$ratio"
done
rm -rf "$DIR"
