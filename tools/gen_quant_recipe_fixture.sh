#!/usr/bin/env bash
# Makes tests/data/transform/quant_recipes.tsv: the per-tensor types that
# llama-quantize itself chooses for each of its named mixes (and a few
# --tensor-type / --output-tensor-type / --token-embedding-type / --imatrix
# variants) on two small random-weight models made by `ember gen-model`:
#   gemma3: 640-wide rows and an FFN of 1152 (not multiples of 256: the row
#           fallbacks), tied embeddings, 8 blocks, GQA 4;
#   llama:  256-multiple rows, untied output, 16 blocks, GQA 4.
# Read by tests/transform/quant_recipe_test.cpp. Uses llama-quantize
# --dry-run (no file written). Lines: CONFIG<TAB>SHAPE<TAB>TENSOR<TAB>TYPE.
# Usage: tools/gen_quant_recipe_fixture.sh [build/ember] [llama-quantize]
set -euo pipefail
EMBER=${1:-build/ember}
LQ=${2:-/work/llama-cpp/bin/llama-quantize}
OUT=tests/data/transform/quant_recipes.tsv
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$EMBER" gen-model --arch gemma3 --n-layer 8 --n-embd 640 --n-ff 1152 --n-head 4 --n-head-kv 1 --head-dim 256 \
  --n-vocab 512 --synthetic-vocab --type f16 -o "$tmp/gemma3.gguf" >/dev/null 2>&1
"$EMBER" gen-model --arch llama --n-layer 16 --n-embd 256 --n-ff 768 --n-head 8 --n-head-kv 2 \
  --n-vocab 512 --type f16 -o "$tmp/llama.gguf" >/dev/null 2>&1
# An importance matrix for the --imatrix variants (its values do not matter
# to the mix, only that there is one).
printf 'The quick brown fox jumps over the lazy dog. %.0s' $(seq 200) > "$tmp/cal.txt"
for s in gemma3 llama; do
  "$EMBER" imatrix "$tmp/$s.gguf" -f "$tmp/cal.txt" -o "$tmp/$s.imatrix.gguf" -c 64 >/dev/null 2>&1
done

mixes="Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q2_K_S Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K"
{
  echo '# made by tools/gen_quant_recipe_fixture.sh (llama-quantize --dry-run); CONFIG SHAPE TENSOR TYPE'
  for s in gemma3 llama; do
    run() {  # CONFIG ARGS...
      local config=$1
      shift
      "$LQ" --dry-run "$@" 2>&1 | awk -v c="$config" -v s="$s" '
        /^\[ *[0-9]+\/ *[0-9]+\]/ {
          line = $0
          sub(/^\[ *[0-9]+\/ *[0-9]+\] */, "", line)
          split(line, f, " ")
          name = f[1]
          if (index($0, "->") > 0) { t = $NF; gsub(/[()]/, "", t) }
          else { match($0, /type = *[a-zA-Z0-9_]+/); t = substr($0, RSTART, RLENGTH); sub(/type = */, "", t) }
          printf "%s\t%s\t%s\t%s\n", c, s, name, t
        }'
    }
    for m in $mixes; do run "$m" "$tmp/$s.gguf" "$m" 1; done
    run "Q4_0|imatrix" --imatrix "$tmp/$s.imatrix.gguf" "$tmp/$s.gguf" Q4_0 1
    run "Q5_0|imatrix" --imatrix "$tmp/$s.imatrix.gguf" "$tmp/$s.gguf" Q5_0 1
    run "Q4_K_M|tt=attn_q=q8_0|tt=blk\.[0-3]\.ffn=q5_k" --tensor-type 'attn_q=q8_0' --tensor-type 'blk\.[0-3]\.ffn=q5_k' \
      "$tmp/$s.gguf" Q4_K_M 1
    run "Q3_K_M|out=q5_0|embd=q4_0" --output-tensor-type q5_0 --token-embedding-type q4_0 "$tmp/$s.gguf" Q3_K_M 1
    run "Q2_K|out=q4_k" --output-tensor-type q4_k "$tmp/$s.gguf" Q2_K 1
  done
} > "$OUT"
echo "wrote $OUT: $(grep -vc '^#' "$OUT") lines"
