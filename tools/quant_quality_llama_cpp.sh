#!/bin/sh
# llama.cpp's rows of the quality table in docs/quantization.md: the same f32
# source and texts as tools/quant_quality.sh, quantized by llama.cpp's own
# tools (llama-imatrix over data/calibration.txt, 16 chunks of 512, then
# `llama-quantize --pure --imatrix` per type), each file evaluated by ember's
# `eval kl` (the harness of ember's rows) and by `llama-perplexity
# --kl-divergence` on the same evaluation text (llama.cpp's own harness:
# its first 2 windows of 512 tokens). The optional 4th argument lists
# ember-written GGUFs (e.g. OUTDIR/q4_k.gptq.gguf, kept by
# `KEEP=1 tools/quant_quality.sh`) that llama-perplexity also scores:
# llama.cpp loading and scoring ember's output is the round trip.
# Usage: tools/quant_quality_llama_cpp.sh OUTDIR LLAMA_BIN "q4_0 q4_k q3_k q2_k" ["ember GGUFs to score"]
# Needs OUTDIR/f32.gguf (see tools/quant_quality.sh); LLAMA_BIN from tools/build_llama_cpp.sh.
set -u
OUT=$1
BIN=$2
TYPES=${3-"q4_0 q4_k q3_k q2_k"}  # "" : no llama.cpp quantization, only the 4th argument
EXTRA=${4:-}
EMBER=${EMBER:-build/ember}
TEXT=data/persuasion.txt
if [ ! -f "$OUT/llama.imatrix.gguf" ]; then
  /usr/bin/time -v "$BIN/llama-imatrix" -m "$OUT/f32.gguf" -f data/calibration.txt --chunks 16 -c 512 -t 2 \
    -o "$OUT/llama.imatrix.gguf" > "$OUT/llama.imatrix.log" 2>&1
  echo "llama-imatrix | wall $(grep 'Elapsed (wall' "$OUT/llama.imatrix.log" | awk '{print $NF}') | maxrss_kb $(grep 'Maximum resident' "$OUT/llama.imatrix.log" | awk '{print $NF}')"
fi
if [ ! -f "$OUT/llama.base.kld" ]; then
  "$BIN/llama-perplexity" -m "$OUT/f32.gguf" -f "$TEXT" -c 512 --chunks 2 -t 2 \
    --kl-divergence-base "$OUT/llama.base.kld" > "$OUT/llama.base.log" 2>&1
fi
# llama-perplexity's summary lines: "Mean    KLD:", "99.0%   KLD:", "Same top p:", "Mean PPL(Q)".
llama_kl() {
  "$BIN/llama-perplexity" -m "$1" --kl-divergence-base "$OUT/llama.base.kld" --kl-divergence -t 2 > "$2" 2>&1
  echo "llama-perplexity: KL mean $(grep 'Mean    KLD:' "$2" | awk '{print $3}') | p99 $(grep '99.0%   KLD:' "$2" | awk '{print $3}') | top-1 $(grep 'Same top p:' "$2" | awk '{print $4, $5, $6}') | ppl $(grep 'Mean PPL(Q) *:' "$2" | awk '{print $4, $5, $6}')"
}
for T in $TYPES; do
  LT=$(echo "$T" | tr a-z A-Z)
  LOG="$OUT/$T.llama.log"
  /usr/bin/time -v "$BIN/llama-quantize" --pure --imatrix "$OUT/llama.imatrix.gguf" "$OUT/f32.gguf" \
    "$OUT/$T.llama.gguf" "$LT" 2 > "$LOG" 2>&1
  "$EMBER" eval kl "$OUT/f32.gguf" "$OUT/$T.llama.gguf" -f "$TEXT" --chunks 2 --kv-cache-dtype f32 -t 2 >> "$LOG" 2>&1
  W=$(grep 'Elapsed (wall' "$LOG" | awk '{print $NF}')
  R=$(grep 'Maximum resident' "$LOG" | awk '{print $NF}')
  S=$("$EMBER" info "$OUT/$T.llama.gguf" 2>/dev/null | sed -n 's/.* \([0-9.]*\) bits\/weight.*/\1/p')
  echo "$T llama.cpp | wall $W | maxrss_kb $R | bpw $S | $(grep '^KL divergence' "$LOG")"
  echo "  $(llama_kl "$OUT/$T.llama.gguf" "$OUT/$T.llama.kld.log")"
  rm -f "$OUT/$T.llama.gguf"
done
for F in $EXTRA; do
  echo "$F (ember) $(llama_kl "$F" "$F.kld.log")"
done
