#!/usr/bin/env bash
# Builds ik_llama.cpp's llama-bench and llama-batched-bench (the fastest CPU
# fork of llama.cpp, the second peer ember is measured against) outside the
# repository, from a checkout of github.com/ikawrakow/ik_llama.cpp (no
# network here: the development tools' `fetch` brings the repository; its
# large files, test vocabularies and the server's web page, may be absent,
# and the tools below do not need them). Safe to rerun.
#
#   tools/build_ik_llama_cpp.sh SRC [DIR]     (default DIR: ../ik-llama next to the repo)
#
# Afterwards DIR/bin holds llama-bench and llama-batched-bench. CPU only
# (the CUDA toolkit on these machines is not used), built for this machine
# (GGML_NATIVE), flash attention's kernels for the common K/V types only
# (GGML_IQK_FA_ALL_QUANTS=OFF: the full set doubles the build time).
# IK_TOOLS="llama-bench" builds only those.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$(cd "$1" && pwd)
DIR=${2:-$(cd .. && pwd)/ik-llama}
mkdir -p "$DIR/bin"
DIR=$(cd "$DIR" && pwd)
tools=(llama-bench llama-batched-bench)
[ -n "${IK_TOOLS:-}" ] && read -r -a tools <<<"$IK_TOOLS"
cmake -S "$SRC" -B "$DIR/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_CUDA=OFF \
  -DGGML_IQK_FA_ALL_QUANTS=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
  -DBUILD_SHARED_LIBS=OFF >"$DIR/cmake.log"
cmake --build "$DIR/build" -j "${JOBS:-2}" --target "${tools[@]}" >"$DIR/build.log"
for t in "${tools[@]}"; do cp "$DIR/build/bin/$t" "$DIR/bin/"; done
echo "ik_llama.cpp $(git -C "$SRC" log -1 --format='%h %cs' 2>/dev/null || echo '?'): ${tools[*]} in $DIR/bin"
