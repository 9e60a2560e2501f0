#!/usr/bin/env bash
# The GPU check of kernels/cuda/ (issue 43), in one go from a prebuilt
# folder, well under ten minutes: the kernel tests on the device, then the
# two ceilings (a large device-to-device copy, a large cuBLAS bf16 GEMM),
# then each decode mat-vec's bandwidth on the Llama-3.1-8B shapes against
# the copy, and the prefill tiles against the GEMM; a short table last.
#
# Here (no GPU): build, then bundle the two programs into a small ignored
# folder that a GPU machine can be sent (the device tool's `carry`, 64 MiB):
#   cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release && ninja -C build test_cuda ember_cuda_bench
#   tools/cuda_check.sh --bundle build build-cuda-bundle
# There:
#   tools/cuda_check.sh build-cuda-bundle        (logs under $OUT, or /tmp/cuda_check)
# Exit status: 0 when the tests passed and the bench ran.
set -uo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--bundle" ]; then
  src=${2:?usage: tools/cuda_check.sh --bundle BUILD_DIR BUNDLE_DIR}
  dst=${3:?usage: tools/cuda_check.sh --bundle BUILD_DIR BUNDLE_DIR}
  mkdir -p "$dst"
  for f in test_cuda ember_cuda_bench; do
    [ -x "$src/$f" ] || { echo "cuda_check: $src/$f is missing (ninja -C $src $f)" >&2; exit 1; }
    cp "$src/$f" "$dst/"
    strip --strip-debug "$dst/$f" 2>/dev/null || true
  done
  du -sh "$dst"
  exit 0
fi

dir=${1:-build-cuda-bundle}
[ -d "$dir" ] || dir=build
log=${OUT:-/tmp/cuda_check}
mkdir -p "$log"
for f in test_cuda ember_cuda_bench; do
  [ -x "$dir/$f" ] || { echo "cuda_check: $dir/$f is missing (see the top of this script)" >&2; exit 1; }
done

echo "== device"
nvidia-smi -L || true
# cuBLAS: the system's, else the one pip's nvidia-cublas wheel holds.
if ldd "$dir/ember_cuda_bench" | grep -q "not found"; then
  lib=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null)
  [ -n "$lib" ] && export LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}"
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
  done
  ldd "$dir/ember_cuda_bench" | grep "not found" && echo "cuda_check: libraries still missing" >&2
fi

echo "== kernel tests (tests/cuda)"
timeout 300 "$dir/test_cuda" --gtest_color=no 2>&1 | tee "$log/tests.log"
tests_rc=${PIPESTATUS[0]}

echo "== ceilings and kernel bandwidth (ember_cuda_bench)"
timeout 300 "$dir/ember_cuda_bench" 2>&1 | tee "$log/bench.log"
bench_rc=${PIPESTATUS[0]}

# TODO(issue 43, after deliverable 1: the device half of the Backend seam and
# a device ModelRunner): the model-level runs through the engine, with the
# default model and the Llama-3.1-8B shape (Q4_K_M and Q8_0 from
# llama-quantize), carried as files:
#   ember bench --device cuda -m MODEL tg128 / pp512   (decode at >= 60% of the copy over the
#                                                        bytes per token; prefill at >= 30% of
#                                                        the GEMM over the model's FLOPs)
#   ember bench throughput --device cuda -c 64           (CPU overhead per step vs GPU time)
#   the tiny f32 models' logits against the CPU (1e-4), the default model's greedy text,
#   batch invariance on the device, `ember serve --device cuda` with the openai client.

echo
echo "== summary ($(date -u +%F), logs in $log)"
grep -E "^\[==========\] [0-9]+ tests? from|^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ tests?" "$log/tests.log"
sed -n '/^== decode mat-vec/,$p' "$log/bench.log"
echo "tests rc=$tests_rc bench rc=$bench_rc"
[ "$tests_rc" = 0 ] && [ "$bench_rc" = 0 ]
