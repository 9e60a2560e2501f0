#!/usr/bin/env bash
# Two ember builds on the same files in one run, alternating per round (so
# load drifts hit both), prompt processing and/or generation; prints every
# round and the medians and the B/A ratio of the medians.
#   tools/bench_ab.sh EMBER_A EMBER_B ROUNDS "FILE..." [PP] [TG] [THREADS] [REPS]
# REPS: repetitions inside each `ember bench` call (its median is the round's
# value); the paired ratio B_i / A_i of each round is robust to slow drifts
# of the machine's speed, so its median is the figure to quote.
# e.g. (before/after a change, the A binary built from the older commit):
#   tools/bench_ab.sh /tmp/ember-base build/ember 7 "models/gemma-3-270m-q4_k_m.gguf /tmp/q3.gguf" 512 0 2
# LLAMA_BIN=DIR (llama.cpp's tools, tools/build_llama_cpp.sh): each round
# also runs DIR/llama-bench on the file after A and B, and the medians of
# the paired A / llama.cpp and B / llama.cpp ratios are printed too (one run
# alternating three engines: the figure for a ratio against llama.cpp on a
# machine whose speed moves between minutes). Each file is read once into
# the page cache before its rounds.
set -euo pipefail
A=$1; B=$2; R=$3; FILES=$4; PP=${5:-512}; TG=${6:-0}; T=${7:-2}; REPS=${8:-1}
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)  threads: $T  rounds: $R"
echo "A: $A"; echo "B: $B"; echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
median() { sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
llama_tps() {  # llama_tps FILE ARGS...: llama-bench's mean tok/s of the one test
  local f=$1
  shift
  "$LLAMA_BIN/llama-bench" -m "$f" "$@" -r "$REPS" -t "$T" -o json 2>/dev/null |
    python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["avg_ts"])'
}
for f in $FILES; do
  cat "$f" >/dev/null
  for test in pp tg; do
    [ "$test" = pp ] && [ "$PP" = 0 ] && continue
    [ "$test" = tg ] && [ "$TG" = 0 ] && continue
    if [ "$test" = pp ]; then args=(-p "$PP" -n 0); key="^pp$PP"; else args=(-p 0 -n "$TG"); key="^tg$TG"; fi
    a=(); b=(); l=()
    for ((i = 0; i < R; ++i)); do
      for side in A B; do
        bin=$A; [ "$side" = B ] && bin=$B
        v=$("$bin" bench -m "$f" "${args[@]}" -r "$REPS" -t "$T" --no-bandwidth 2>/dev/null | awk -v k="$key" '$0 ~ k {print $3}')
        if [ "$side" = A ]; then a+=("$v"); else b+=("$v"); fi
      done
      if [ -n "${LLAMA_BIN:-}" ]; then l+=("$(llama_tps "$f" "${args[@]}")"); fi
    done
    ma=$(printf '%s\n' "${a[@]}" | median); mb=$(printf '%s\n' "${b[@]}" | median)
    mr=$(for ((i = 0; i < R; ++i)); do echo "${b[i]} / ${a[i]}" | bc -l; done | median)
    printf '%s %s%s  A: %s  B: %s\n' "$(basename "$f")" "$test" "$([ "$test" = pp ] && echo "$PP" || echo "$TG")" "${a[*]}" "${b[*]}"
    printf '  median A %.1f tok/s  B %.1f tok/s  B/A of medians %.3f  median of paired B/A %.3f\n' "$ma" "$mb" \
      "$(echo "$mb / $ma" | bc -l)" "$mr"
    if [ ${#l[@]} -gt 0 ]; then
      ra=$(for ((i = 0; i < R; ++i)); do echo "${a[i]} / ${l[i]}" | bc -l; done | median)
      rb=$(for ((i = 0; i < R; ++i)); do echo "${b[i]} / ${l[i]}" | bc -l; done | median)
      printf '  llama.cpp: %s  median %.1f tok/s  median of paired A/llama %.3f  B/llama %.3f\n' "${l[*]}" \
        "$(printf '%s\n' "${l[@]}" | median)" "$ra" "$rb"
    fi
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
