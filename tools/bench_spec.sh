#!/usr/bin/env bash
# Speculative decoding at concurrency 1, the whole table in one command:
# `ember run` on each prompt file, greedy, the plain engine
# (--speculative-method none) and each given configuration, alternating per
# round; prints every round, then a markdown table per workload and
# configuration: median decode tok/s, the median of the paired ratios
# config/none, acceptance and mean accepted length (deterministic: greedy).
#   tools/bench_spec.sh EMBER ROUNDS "FILE..." [N] [THREADS] [K] [CONFIGS]
# e.g. tools/bench_spec.sh build/ember 3 "data/spec/prose.txt data/spec/rewrite.txt data/spec/code.txt" 96 2 4 \
#        "ngram ngram-match ngram-adaptive layerskip-head"
# Configurations (K = the 6th argument):
#   ngram            prompt lookup, K drafts, n-gram sizes 1..4
#   ngram-match      prompt lookup, at most 2^(n-1) drafts for a match of n, up to 2K (--ngram-k-by-match)
#   ngram-adaptive   ngram-match with adaptive k (measured verification cost)
#   draft            the draft model $DRAFT_MODEL
#   draft-head       $DRAFT_MODEL with a truncated head of $DRAFT_VOCAB tokens (default 16384), adaptive k
#   layerskip        the target with layers $SKIP_LAYERS skipped (default 15-16)
#   layerskip-head   layerskip with a truncated head of $DRAFT_VOCAB tokens, adaptive k
#   selfhead         the whole target (--skip-layers none) with a truncated head of $DRAFT_VOCAB tokens, K drafts
#   selfhead-ngram   selfhead behind n-gram lookup (--ngram-first 3): a match of >= 3 tokens proposes up to 2K
#                    (by match), the self-draft K otherwise
#   selfhead-recompute  selfhead with --draft-recompute-kv (no K/V copy, no row handover: the earlier form)
# $DRAFT_VOCAB_TEXT: the text the head's token frequencies are counted over (default data/calibration.txt).
set -euo pipefail
DRAFT_MODEL=${DRAFT_MODEL:-}; SKIP_LAYERS=${SKIP_LAYERS:-15-16}; DRAFT_VOCAB=${DRAFT_VOCAB:-16384}
DRAFT_VOCAB_TEXT=${DRAFT_VOCAB_TEXT:-data/calibration.txt}
BIN=$1; R=$2; FILES=$3; N=${4:-128}; T=${5:-2}; K=${6:-4}; CONFIGS=${7:-ngram}
flags() {
  local head=(--draft-vocab "$DRAFT_VOCAB" --draft-vocab-text "$DRAFT_VOCAB_TEXT" --speculative-adaptive)
  case $1 in
    none) echo --speculative-method none ;;
    ngram) echo --speculative-method ngram --num-speculative-tokens "$K" ;;
    ngram-match) echo --speculative-method ngram --ngram-k-by-match --num-speculative-tokens $((2 * K)) ;;
    ngram-adaptive) echo --speculative-method ngram --ngram-k-by-match --num-speculative-tokens $((2 * K)) \
                      --speculative-adaptive ;;
    draft) echo --speculative-method draft --speculative-model "$DRAFT_MODEL" --num-speculative-tokens "$K" ;;
    draft-head) echo --speculative-method draft --speculative-model "$DRAFT_MODEL" --num-speculative-tokens "$K" \
                  "${head[@]}" ;;
    layerskip) echo --speculative-method layerskip --skip-layers "$SKIP_LAYERS" --num-speculative-tokens "$K" ;;
    layerskip-head) echo --speculative-method layerskip --skip-layers "$SKIP_LAYERS" --num-speculative-tokens "$K" \
                      "${head[@]}" ;;
    selfhead) echo --speculative-method layerskip --skip-layers none --num-speculative-tokens "$K" \
                --draft-vocab "$DRAFT_VOCAB" --draft-vocab-text "$DRAFT_VOCAB_TEXT" ;;
    selfhead-ngram) echo --speculative-method layerskip --skip-layers none --draft-vocab "$DRAFT_VOCAB" \
                      --draft-vocab-text "$DRAFT_VOCAB_TEXT" --ngram-first 3 --ngram-k-by-match \
                      --num-speculative-tokens $((2 * K)) --draft-k "$K" ;;
    selfhead-recompute) echo --speculative-method layerskip --skip-layers none --num-speculative-tokens "$K" \
                          --draft-vocab "$DRAFT_VOCAB" --draft-vocab-text "$DRAFT_VOCAB_TEXT" --draft-recompute-kv ;;
    *) echo "unknown configuration '$1'" >&2; exit 2 ;;
  esac
}
for c in $CONFIGS; do flags "$c" > /dev/null; done
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)  threads: $T  rounds: $R  n: $N  k: $K"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
median() { sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
table="| workload | configuration | median tok/s | paired ratio vs none | acceptance | mean accepted length | target steps |
|---|---|---|---|---|---|---|"
for f in $FILES; do
  declare -A tps=()
  declare -A acc=()
  for ((i = 0; i < R; ++i)); do
    for c in none $CONFIGS; do
      # shellcheck disable=SC2046
      log=$("$BIN" run -f "$f" -n "$N" --temp 0 -t "$T" --speculative-max-running 0 $(flags "$c") 2>&1 >/dev/null)
      v=$(echo "$log" | sed -n 's/.*generated: [0-9]* tokens, \([0-9.]*\) tok\/s.*/\1/p')
      tps[$c]="${tps[$c]:-} $v"
      a=$(echo "$log" | sed -n 's/^speculative.*: \(.*\)$/\1/p')
      [ -n "$a" ] && acc[$c]="$a"
      echo "$(basename "$f") round $i $c: $v tok/s ${a:+($a)}"
    done
  done
  base=(${tps[none]})
  for c in none $CONFIGS; do
    vals=(${tps[$c]})
    med=$(printf '%s\n' "${vals[@]}" | median)
    ratio=$(for ((i = 0; i < R; ++i)); do echo "${vals[i]} / ${base[i]}" | bc -l; done | median)
    a=${acc[$c]:-}
    rate=$(echo "$a" | sed -n 's/^\([0-9]*\) drafts, \([0-9]*\) accepted (\([0-9.]*%\)).*/\3 (\2 \/ \1)/p')
    len=$(echo "$a" | sed -n 's/.*mean accepted length \([0-9.]*\).*/\1/p')
    steps=$(echo "$a" | sed -n 's/.*, \([0-9]*\) target steps.*/\1/p')
    table+=$'\n'"$(printf '| %s | %s | %.1f | %.2fx | %s | %s | %s |' "$(basename "$f" .txt)" "$c" "$med" "$ratio" \
      "${rate:--}" "${len:--}" "${steps:--}")"
  done
  unset tps acc
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "$table"
