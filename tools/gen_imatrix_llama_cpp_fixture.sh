#!/bin/sh
# llama.cpp's side of the imatrix compatibility test
# (tests/transform/imatrix_llama_cpp_test.cpp): a tiny random-weight llama
# from `ember gen-model` (the shape and seed of the test's make_model), its
# importance matrix computed by llama-imatrix over the first chunks of
# data/calibration.txt in both of llama.cpp's formats, and the per-tensor
# FNV-1a 64 hashes of `llama-quantize --imatrix` output in Q4_K and Q2_K
# (--pure: every matrix in the one type).
# Usage: tools/gen_imatrix_llama_cpp_fixture.sh [EMBER (default build/ember)] [LLAMA_BIN (default /work/llama-cpp/bin)]
set -eu
EMBER=${1:-build/ember}
BIN=${2:-/work/llama-cpp/bin}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT="$ROOT/tests/data/transform"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$OUT"
"$EMBER" gen-model --arch llama --n-layer 2 --n-embd 256 --n-ff 512 --n-head 4 --n-head-kv 2 --n-vocab 300 \
  --ctx 256 --type f32 --seed 3 -o "$TMP/tiny.gguf"
"$BIN/llama-imatrix" -m "$TMP/tiny.gguf" -f "$ROOT/data/calibration.txt" -c 64 --chunks 4 -t 2 \
  -o "$OUT/llama_imatrix.gguf" --output-format gguf
"$BIN/llama-imatrix" -m "$TMP/tiny.gguf" -f "$ROOT/data/calibration.txt" -c 64 --chunks 4 -t 2 \
  -o "$OUT/llama_imatrix.dat" --output-format dat
: > "$OUT/llama_quantize_imatrix_hashes.txt"
for T in Q4_K Q2_K Q4_0; do
  "$BIN/llama-quantize" --pure --imatrix "$OUT/llama_imatrix.gguf" "$TMP/tiny.gguf" "$TMP/q.gguf" $T 2
  python3 - "$TMP/q.gguf" "$T" >> "$OUT/llama_quantize_imatrix_hashes.txt" <<'PY'
import sys
sys.path.insert(0, "/work/llama-cpp/src/llama.cpp/gguf-py")
import gguf
r = gguf.GGUFReader(sys.argv[1])
for t in r.tensors:
    if not t.name.startswith("blk."):
        continue
    h = 0xcbf29ce484222325
    for b in bytes(t.data.tobytes()):
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    print(sys.argv[2], t.name, t.tensor_type.name, "%016x" % h)
PY
done
echo "wrote $OUT/llama_imatrix.gguf, llama_imatrix.dat, llama_quantize_imatrix_hashes.txt"
