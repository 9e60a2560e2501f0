#!/bin/sh
# Builds tools/gen_imatrix_quant_fixture.c against llama.cpp's ggml (the tree
# and build of tools/build_llama_cpp.sh) and writes
# tests/data/quant/imatrix_quant.bin.
# Usage: tools/gen_imatrix_quant_fixture.sh [LLAMA_CPP_DIR (default /work/llama-cpp)]
set -eu
LL=${1:-/work/llama-cpp}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cc -O2 -I"$LL/src/llama.cpp/ggml/include" "$ROOT/tools/gen_imatrix_quant_fixture.c" \
  "$LL/build/ggml/src/libggml-base.a" -lm -lpthread -fopenmp -lstdc++ -o "$TMP/gen"
"$TMP/gen" "$ROOT/tests/data/quant/imatrix_quant.bin"
