#!/usr/bin/env bash
# Decode speed of pruned files against their source with `ember bench`,
# alternating source / pruned ROUNDS times: each run's tokens/s and CPU
# seconds per 1000 tokens, then the median ratios per file (speed: pruned /
# source; CPU: source / pruned, so > 1 is faster both ways). A shared
# machine is noisy: quote the ratios, and the CPU-time one when the wall
# clock spreads. PP=N measures the prefill of an N-token prompt (ppN)
# instead of decode; FLAGS are passed to every pruned file's run (e.g.
# --detect-sparsity for a dense export).
#
#   tools/prune_speed.sh SRC FILE...
#   env: EMBER (build/ember), ROUNDS (3), GEN (128), PP (0: decode), THREADS (2), FLAGS ()
set -uo pipefail
cd "$(dirname "$0")/.."
SRC=$1
shift
E=${EMBER:-build/ember}
R=${ROUNDS:-3}
N=${GEN:-128}
T=${THREADS:-2}

P=${PP:-0}
tg() {  # "tokens/s cpu-s/1k" of one `ember bench` tg (or pp) run; extra flags after the file
  local f=$1
  shift
  if [ "$P" -gt 0 ]; then
    "$E" bench -m "$f" -p "$P" -n 0 -r 1 -t "$T" --no-bandwidth "$@" 2>/dev/null | awk -v t="pp$P" '$1 == t {print $3, $NF}'
  else
    "$E" bench -m "$f" -p 0 -n "$N" -r 1 -t "$T" --no-bandwidth "$@" 2>/dev/null | awk -v t="tg$N" '$1 == t {print $3, $NF}'
  fi
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

for f in "$@"; do
  sa=() sb=() ca=() cb=()
  for ((i = 0; i < R; i++)); do
    read -r s1 c1 <<<"$(tg "$SRC")"
    # shellcheck disable=SC2086
    read -r s2 c2 <<<"$(tg "$f" ${FLAGS:-})"
    [ -z "${s1:-}" ] || [ -z "${s2:-}" ] && { echo "$f: no figure (does it load?)"; continue 2; }
    sa+=("$s1") sb+=("$s2") ca+=("$c1") cb+=("$c2")
  done
  ms=$(printf '%s\n' "${sa[@]}" | median) mp=$(printf '%s\n' "${sb[@]}" | median)
  cs=$(printf '%s\n' "${ca[@]}" | median) cp=$(printf '%s\n' "${cb[@]}" | median)
  echo "$(basename "$f"): tok/s source ${sa[*]}, pruned ${sb[*]} (medians $ms -> $mp, $(awk -v a="$ms" -v b="$mp" 'BEGIN {printf "%.2f", b / a}')x); CPU s/1k tokens $cs -> $cp ($(awk -v a="$cs" -v b="$cp" 'BEGIN {printf "%.2f", a / b}')x)"
done
