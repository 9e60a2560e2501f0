#!/bin/sh
# The quality table of docs/quantization.md: the default model dequantized to
# f32, quantized by each method into each type, each result compared with the
# f32 source on the held-out text (data/persuasion.txt, the first 2 windows of
# 512 tokens, `ember eval kl`), with the wall time and peak RSS of the
# quantization alone (GNU time, `ember quantize --no-check`).
# Usage: tools/quant_quality.sh OUTDIR "q4_0 q4_k q3_k q2_k" "rtn imatrix gptq awq"
# (also gptq-act, gptq-static, gptq-refit, awq-rtn, awq-clip)
# Lower-case types are one type for every matrix (--pure); llama.cpp mix
# names (Q4_K_M, Q3_K_S, Q4_0, ...) are the mixes (`ember quantize --type`).
# Needs OUTDIR/f32.gguf (ember quantize models/gemma-3-270m-q4_k_m.gguf OUTDIR/f32.gguf --type f32)
# and, for imatrix, OUTDIR/ember_imatrix.gguf (ember imatrix OUTDIR/f32.gguf --chunks 16 -o ...).
# KEEP=1 keeps the quantized files (for tools/quant_quality_llama_cpp.sh's round trip).
set -u
OUT=$1
TYPES=${2:-"q4_0 q4_k q3_k q2_k"}
METHODS=${3:-"rtn imatrix gptq"}
EMBER=${EMBER:-build/ember}
for T in $TYPES; do
  for M in $METHODS; do
    case $M in
      rtn) ARGS="" ;;
      imatrix) ARGS="--imatrix $OUT/ember_imatrix.gguf" ;;
      gptq) ARGS="--method gptq" ;;
      gptq-act) ARGS="--method gptq --act-order" ;;
      gptq-static) ARGS="--method gptq --gptq-scales static" ;;
      gptq-refit) ARGS="--method gptq --gptq-scales refit" ;;
      awq) ARGS="--method awq" ;;
      awq-rtn) ARGS="--method awq --awq-rounding rtn" ;;
      awq-clip) ARGS="--method awq --awq-clip" ;;
    esac
    LOG="$OUT/$T.$M.log"
    case $T in *[a-z]*) PURE=--pure ;; *) PURE= ;; esac
    /usr/bin/time -v "$EMBER" quantize "$OUT/f32.gguf" "$OUT/$T.$M.gguf" --type $T $PURE $ARGS -t 2 --no-check > "$LOG" 2>&1
    "$EMBER" eval kl "$OUT/f32.gguf" "$OUT/$T.$M.gguf" -f data/persuasion.txt --chunks 2 --kv-cache-dtype f32 -t 2 >> "$LOG" 2>&1
    Q=$(grep '^KL divergence' "$LOG")
    W=$(grep 'Elapsed (wall' "$LOG" | awk '{print $NF}')
    R=$(grep 'Maximum resident' "$LOG" | awk '{print $NF}')
    S=$("$EMBER" info "$OUT/$T.$M.gguf" 2>/dev/null | sed -n 's/.* \([0-9.]*\) bits\/weight.*/\1/p')
    echo "$T $M | wall $W | maxrss_kb $R | bpw $S | $Q"
    [ "${KEEP:-0}" = 1 ] || rm -f "$OUT/$T.$M.gguf"
  done
done
