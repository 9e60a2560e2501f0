#!/usr/bin/env bash
# One training step of the default model (Gemma 3 270M shape), ember against
# PyTorch eager on the CPU, the same threads, batch and sequence length,
# alternating per round (docs/distillation.md, "Performance"):
#   ember distill --keep-layers 0..L-1 --bench-steps S   (the default model as its own student, --train layers)
#   tools/bench_train_pytorch.py --steps S               (transformers' Gemma3ForCausalLM, same shape, --train layers)
# each in f32 and, with BF16=1, in bf16 (ember --bf16, PyTorch autocast).
# Per run the median step excludes the first step (warm-up); the table gives
# the median over rounds of those medians, tokens/s, GFLOP/s (ember's model
# FLOP count, `train_step_flops`, applied to both) and the paired ratio
# PyTorch step / ember step (> 1: ember faster).
#   tools/bench_train_pair.sh EMBER ROUNDS [STEPS] [THREADS] [BATCH] [SEQ]
# e.g. BF16=1 tools/bench_train_pair.sh build/ember 3 4 2 4 256
set -euo pipefail
BIN=$1; R=$2; S=${3:-4}; T=${4:-2}; B=${5:-4}; L=${6:-256}
PY=${PY:-/work/venvs/hf/bin/python}; MODEL=${MODEL:-models/gemma-3-270m-q4_k_m.gguf}; BF16=${BF16:-0}
DATA=${DATA:-data/calibration.txt}
layers=$(seq -s, 0 17)
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)  threads: $T  rounds: $R  steps: $S  batch: $B x $L"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
median() { sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
# The median of a run's step seconds without the first.
run_median() { sed -n 's/^step seconds: //p' | tr ' ' '\n' | tail -n +2 | median; }
modes="f32"; [ "$BF16" = 1 ] && modes="f32 bf16"
declare -A sec=()
gflop=""
for ((i = 0; i < R; ++i)); do
  for m in $modes; do
    flag=(); [ "$m" = bf16 ] && flag=(--bf16)
    out=$("$BIN" distill --teacher "$MODEL" --keep-layers "$layers" --data "$DATA" --bench-steps "$S" \
          --batch "$B" --seq-len "$L" -t "$T" "${flag[@]}" 2>&1)
    e=$(echo "$out" | run_median)
    # ember's FLOPs per step: its GFLOP/s times its own median step.
    g=$(echo "$out" | sed -n 's/^bench: .*median step \([0-9.]*\) s.* \([0-9.]*\) GFLOP\/s$/\1 * \2/p' | bc -l)
    [ -n "$g" ] && gflop=$g
    out=$("$PY" tools/bench_train_pytorch.py --threads "$T" --steps "$S" --batch "$B" --seq-len "$L" "${flag[@]}" 2>&1)
    p=$(echo "$out" | run_median)
    echo "round $i $m: ember $e s, pytorch $p s"
    sec[ember-$m]="${sec[ember-$m]:-} $e"; sec[pytorch-$m]="${sec[pytorch-$m]:-} $p"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "model GFLOP per step: $gflop"
echo
echo "| precision | engine | median step s | tokens/s | GFLOP/s | paired ratio pytorch/ember |"
echo "|---|---|---:|---:|---:|---:|"
for m in $modes; do
  e=(${sec[ember-$m]}); p=(${sec[pytorch-$m]})
  ratio=$(for ((i = 0; i < R; ++i)); do echo "${p[i]} / ${e[i]}" | bc -l; done | median)
  for eng in ember pytorch; do
    v=(${sec[$eng-$m]})
    med=$(printf '%s\n' "${v[@]}" | median)
    printf '| %s | %s | %.2f | %.1f | %.1f | %s |\n' "$m" "$eng" "$med" "$(echo "$B * $L / $med" | bc -l)" \
      "$(echo "$gflop / $med" | bc -l)" "$([ $eng = ember ] && printf '%.2fx' "$ratio" || echo -)"
  done
done
