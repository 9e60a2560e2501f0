#!/usr/bin/env bash
# Decode speed of activation-sparse files (`ember prune --activations`) with
# `ember bench`, per concurrency (sequences decoded together), alternating
# the entries ROUNDS times: each entry's tokens/s and CPU seconds per 1000
# tokens, the medians and their ratios to the first entry (the baseline;
# speed: entry / baseline, CPU: baseline / entry, so > 1 is faster both
# ways). An entry is FILE or FILE:MODE
# (MODE: --act-sparsity auto|skip|dense|off), so one file against itself
# under skip and dense measures the column kernels alone (the same bits).
# A shared machine is noisy: quote the ratios.
#
#   tools/teal_speed.sh DENSE.gguf A40.gguf A50.gguf
#   tools/teal_speed.sh A50.gguf:dense A50.gguf:skip
#   env: EMBER (build/ember), ROUNDS (3), GEN (32), DEPTH (32), THREADS (2), BATCHES ("1 2 4 8")
set -uo pipefail
cd "$(dirname "$0")/.."
E=${EMBER:-build/ember}
R=${ROUNDS:-3}
N=${GEN:-32}
D=${DEPTH:-32}
T=${THREADS:-2}
B=${BATCHES:-1 2 4 8}

tg() {  # "tokens/s cpu-s/1k" of one `ember bench` tg run: FILE[:MODE] BATCH
  local f=${1%%:*} mode=
  [ "$f" != "$1" ] && mode=${1#*:}
  "$E" bench -m "$f" -p 0 -n "$N" -d "$D" -b "$2" -r 1 -t "$T" --no-bandwidth ${mode:+--act-sparsity "$mode"} \
    2>/dev/null | awk -v t="tg$N@d$D" '$1 == t {print $3, ($NF ~ /aggregate/ ? $(NF-3) : $NF)}'
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

for b in $B; do
  declare -A runs=() cpus=()
  for ((i = 0; i < R; i++)); do
    for f in "$@"; do
      read -r s c <<<"$(tg "$f" "$b")"
      runs[$f]="${runs[$f]:-} ${s:-nan}" cpus[$f]="${cpus[$f]:-} ${c:-nan}"
    done
  done
  base=$(tr ' ' '\n' <<<"${runs[$1]}" | grep . | median) cbase=$(tr ' ' '\n' <<<"${cpus[$1]}" | grep . | median)
  for f in "$@"; do
    m=$(tr ' ' '\n' <<<"${runs[$f]}" | grep . | median) c=$(tr ' ' '\n' <<<"${cpus[$f]}" | grep . | median)
    echo "concurrency $b: $(basename "$f"): tok/s${runs[$f]} (median $m, $(awk -v a="$base" -v b="$m" 'BEGIN {printf "%.2f", b / a}')x); CPU s/1k${cpus[$f]} (median $c, $(awk -v a="$cbase" -v b="$c" 'BEGIN {printf "%.2f", a / b}')x)"
  done
  unset runs cpus
done
