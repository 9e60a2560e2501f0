#!/usr/bin/env bash
# Checks that files written by `ember prune` run in llama.cpp as they run in
# ember: llama-perplexity saves the source's logits and scores each pruned
# file against them (--kl-divergence: the second half of each window), and
# `ember eval kl` scores the same windows (--score-from ctx/2); the mean KL
# and top-1 of the two should agree. Windows of 1024 tokens, so Gemma 3's
# 512-token sliding windows matter (a misread per-layer flag would show).
# Files llama.cpp cannot load are reported with its error.
#
#   tools/prune_llama_cpp_check.sh SRC LLAMA_BIN FILE...
#   env: EMBER (default build/ember), CTX (1024), CHUNKS (2), TEXT (data/persuasion.txt)
set -uo pipefail
cd "$(dirname "$0")/.."
SRC=$1 L=$2
shift 2
E=${EMBER:-build/ember}
CTX=${CTX:-1024}
CH=${CHUNKS:-2}
TEXT=${TEXT:-data/persuasion.txt}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
"$L/llama-perplexity" -m "$SRC" -f "$TEXT" -c "$CTX" --chunks "$CH" -t 2 --kl-divergence-base "$TMP/base.kld" \
  > "$TMP/base.log" 2>&1 || { echo "llama-perplexity failed on the source:"; tail -3 "$TMP/base.log"; exit 1; }
for f in "$@"; do
  if ! "$L/llama-perplexity" -m "$f" -f "$TEXT" -c "$CTX" --chunks "$CH" -t 2 --kl-divergence-base "$TMP/base.kld" \
    --kl-divergence > "$TMP/run.log" 2>&1; then
    echo "$f: llama.cpp cannot run it: $(grep -iE "error|failed|wrong|exception" "$TMP/run.log" | head -2 | tr '\n' ' ')"
    continue
  fi
  lkl=$(grep -E "^Mean +KLD:" "$TMP/run.log" | awk '{print $3}')
  ltop=$(grep -E "^Same top p:" "$TMP/run.log" | awk '{print $4}')
  out=$("$E" eval kl "$SRC" "$f" -f "$TEXT" --ctx "$CTX" --chunks "$CH" --score-from $((CTX / 2)) -t 2 2>&1)
  ekl=$(grep -oE "KL divergence mean [0-9.]+" <<<"$out" | awk '{print $4}')
  etop=$(grep -oE "top-1 agreement [0-9.]+%" <<<"$out" | awk '{print $3}')
  echo "$f: llama.cpp mean KL $lkl, same top $ltop%; ember mean KL $ekl, top-1 $etop"
done
