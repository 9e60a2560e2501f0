#!/usr/bin/env bash
# Builds llama.cpp's command-line tools (the peer ember is measured against)
# from the llama.cpp tree inside the llama-cpp-python source package on PyPI,
# outside the repository. Safe to rerun: skips what is done.
#
#   tools/build_llama_cpp.sh [DIR]      (default DIR: ../llama-cpp next to the repo)
#
# Afterwards DIR/bin holds llama-bench, llama-batched-bench, llama-server,
# llama-quantize, llama-imatrix, llama-perplexity, llama-speculative-simple,
# llama-cli, and DIR/src/llama.cpp holds convert_hf_to_gguf.py and gguf-py.
# Needs: pip, cmake, a C++ compiler (scripts/setup.sh installs them).
# The CPU backend is built for this machine's AVX2/AVX-512 features but
# without ggml's AMX path: on the development VM (a Xeon reporting AMX) its
# AMX matmul segfaults at the first graph (ggml_backend_amx_mul_mat), and
# ember has no AMX kernels either, so the comparison is VNNI against VNNI.
# LLAMA_ISA=amx builds the same with ggml's AMX path on (the peer of ember's
# `amx` level), with one fix to that path: its tile configuration is a local
# that GCC's _tile_loadconfig operand (8 bytes wide) lets the compiler drop
# the stores to, so the first tile instruction dies with SIGILL (as here:
# tilezero in ggml_backend_amx_mul_mat; the same fix is in llama.cpp pull
# request 26954); the script makes it static. E.g.
#   LLAMA_ISA=amx LLAMA_TOOLS="llama-bench llama-server" tools/build_llama_cpp.sh ../llama-cpp-amx
# LLAMA_ISA=avx2 builds for a CPU with AVX2 / FMA / F16C only (no AVX-512,
# no AVX-VNNI: an AMD Zen 2 / 3 or an older Intel), the peer of ember's
# `EMBER_ISA=avx2` level, e.g. into ../llama-cpp-avx2:
#   LLAMA_ISA=avx2 LLAMA_TOOLS=llama-bench tools/build_llama_cpp.sh ../llama-cpp-avx2
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-$(cd .. && pwd)/llama-cpp}
mkdir -p "$DIR/dl" "$DIR/src"
DIR=$(cd "$DIR" && pwd)
tools=(llama-bench llama-batched-bench llama-server llama-quantize llama-imatrix
       llama-perplexity llama-speculative-simple llama-cli)
# LLAMA_TOOLS="llama-bench" builds only those.
[ -n "${LLAMA_TOOLS:-}" ] && read -r -a tools <<<"$LLAMA_TOOLS"

# Another build's unpacked tree, if there is one (SRC_FROM=../llama-cpp).
if [ ! -d "$DIR/src/llama.cpp" ] && [ -n "${SRC_FROM:-}" ] && [ -d "$SRC_FROM/src/llama.cpp" ]; then
  ln -s "$(cd "$SRC_FROM/src/llama.cpp" && pwd)" "$DIR/src/llama.cpp"
fi
if [ ! -d "$DIR/src/llama.cpp" ]; then
  sdist=$(ls "$DIR"/dl/llama_cpp_python-*.tar.gz 2>/dev/null | head -1 || true)
  if [ -z "$sdist" ]; then
    echo "== downloading the llama-cpp-python source package"
    # Only this package from source: with ":all:" pip also builds its build
    # dependencies (cmake, ninja, scikit-build-core) from source first (hours).
    python3 -m pip download -q --no-binary llama-cpp-python --no-deps llama-cpp-python -d "$DIR/dl"
    sdist=$(ls "$DIR"/dl/llama_cpp_python-*.tar.gz | head -1)
  fi
  echo "== unpacking $(basename "$sdist")"
  tmp=$(mktemp -d "$DIR/unpack.XXXX")
  tar -xzf "$sdist" -C "$tmp"
  mv "$tmp"/llama_cpp_python-*/vendor/llama.cpp "$DIR/src/llama.cpp"
  rm -rf "$tmp"
fi

if [ "${LLAMA_ISA:-native}" = amx ]; then
  mmq="$DIR/src/llama.cpp/ggml/src/ggml-cpu/amx/mmq.cpp"
  grep -q '^    alignas(64) tile_config_t tc = {};' "$mmq" &&
    sed -i 's/^    alignas(64) tile_config_t tc = {};/    alignas(64) static tile_config_t tc = {};  \/\/ ember: static (see tools\/build_llama_cpp.sh)/' "$mmq"
fi

missing=()
for t in "${tools[@]}"; do [ -x "$DIR/bin/$t" ] || missing+=("$t"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== building ${missing[*]}"
  isa=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON)
  if [ "${LLAMA_ISA:-native}" = avx2 ]; then
    isa+=(-DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF)
  elif grep -q avx512f /proc/cpuinfo; then
    isa+=(-DGGML_AVX512=ON)
    grep -q avx512_vnni /proc/cpuinfo && isa+=(-DGGML_AVX512_VNNI=ON)
    grep -q avx512_bf16 /proc/cpuinfo && isa+=(-DGGML_AVX512_BF16=ON)
    grep -q avx512vbmi /proc/cpuinfo && isa+=(-DGGML_AVX512_VBMI=ON)
  fi
  [ "${LLAMA_ISA:-native}" != avx2 ] && grep -q avx_vnni /proc/cpuinfo && isa+=(-DGGML_AVX_VNNI=ON)
  amx=OFF
  [ "${LLAMA_ISA:-native}" = amx ] && amx=ON
  cmake -S "$DIR/src/llama.cpp" -B "$DIR/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    "${isa[@]}" -DGGML_AMX_TILE=$amx -DGGML_AMX_INT8=$amx -DGGML_AMX_BF16=$amx -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON \
    -DLLAMA_BUILD_SERVER=ON -DBUILD_SHARED_LIBS=OFF >/dev/null
  cmake --build "$DIR/build" -j "$(nproc)" --target "${missing[@]}"
  mkdir -p "$DIR/bin"
  for t in "${missing[@]}"; do cp "$DIR/build/bin/$t" "$DIR/bin/"; done
fi
echo "llama.cpp tools in $DIR/bin: $(ls "$DIR/bin" | tr '\n' ' ')"
