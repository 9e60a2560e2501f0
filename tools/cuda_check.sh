#!/usr/bin/env bash
# The GPU check of issue 43, in one go from a prebuilt bundle, under ~8
# minutes of device time: the kernel op tests on the device against their
# scalar twins (tests/cuda), the CUDA backend under the forward pass and the
# engine (tests/cuda_model: tiny f32 models' logits vs the CPU to 1e-4,
# batch invariance, greedy tokens of the default model's shape vs the CPU),
# the two ceilings (device copy GB/s, cuBLAS bf16 GEMM) and each kernel's
# share of them (ember_cuda_bench), then `ember bench --device cuda` tg128 /
# pp512 on the default model and the Llama-3.1-8B shape (Q8_0 and Q4_K_M,
# made here by `ember gen-model` and `ember quantize`, as time allows),
# `ember bench throughput` at 64 sequences (the CPU-side overhead per decode
# step against the device's time; eager, then with decode CUDA graphs),
# `ember serve --device cuda`
# answering the openai client, and a results table last ($OUT/results.md,
# or /tmp/cuda_check/results.md). CUDA_CHECK_DEVICE=cpu runs the ember
# steps on the CPU instead (a dry run of this script where there is no GPU).
#
# Here (no GPU): build, then bundle the programs into a small ignored folder
# that the device tool carries (64 MiB at most):
#   cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
#   ninja -C build ember_cli test_cuda test_cuda_model ember_cuda_bench
#   tools/cuda_check.sh --bundle build build-cuda-bundle [WHEELS]
# (WHEELS: a folder of the openai client's wheels for Python 3.12, e.g. from
# `pip download --no-deps --only-binary=:all: --python-version 3.12
# --platform manylinux2014_x86_64 -d WHEELS openai pydantic pydantic-core
# annotated-types typing-inspection distro jiter sniffio httpx2 httpcore2
# truststore typing-extensions anyio idna h11`; without it the serve check
# speaks plain HTTP.)
# There (device tool):
#   run(command="tools/cuda_check.sh build-cuda-bundle", carry=["build-cuda-bundle"], timeout_s=560)
# The default model (253 MB) cannot travel: its shape is generated there
# (gen-model --shape gemma-3-270m --type q4_k: q4_K, q5_0 where rows do not
# fit 256; synthetic vocabulary) unless
# models/gemma-3-270m-q4_k_m.gguf is present. CUDA_CHECK_BUDGET_S (default
# 420) bounds the optional parts: a step that would start past it is skipped
# and said so.
# Exit status: 0 when every test passed and every bench that ran succeeded.
set -uo pipefail
cd "$(dirname "$0")/.."
progs="ember test_cuda test_cuda_model ember_cuda_bench"

if [ "${1:-}" = "--bundle" ]; then
  src=${2:?usage: tools/cuda_check.sh --bundle BUILD_DIR BUNDLE_DIR [WHEEL_DIR]}
  dst=${3:?usage: tools/cuda_check.sh --bundle BUILD_DIR BUNDLE_DIR [WHEEL_DIR]}
  mkdir -p "$dst"
  for f in $progs; do
    [ -x "$src/$f" ] || { echo "cuda_check: $src/$f is missing (ninja -C $src ember_cli test_cuda test_cuda_model ember_cuda_bench)" >&2; exit 1; }
    cp "$src/$f" "$dst/"
    strip --strip-debug "$dst/$f" 2>/dev/null || true
  done
  # WHEEL_DIR: the openai client's wheels for the device's Python (the GPU
  # image has no openai package; see the serve check below).
  if [ -n "${4:-}" ]; then mkdir -p "$dst/whl" && cp "$4"/*.whl "$dst/whl/"; fi
  du -sh "$dst"
  exit 0
fi

dir=${1:-build-cuda-bundle}
[ -d "$dir" ] || dir=build
log=${OUT:-/tmp/cuda_check}
work=${CUDA_CHECK_WORK:-/tmp/cuda_check_work}
budget=${CUDA_CHECK_BUDGET_S:-420}
device=${CUDA_CHECK_DEVICE:-cuda}
mkdir -p "$log" "$work"
for f in $progs; do
  [ -x "$dir/$f" ] || { echo "cuda_check: $dir/$f is missing (see the top of this script)" >&2; exit 1; }
done
ember="$dir/ember"
results="$log/results.md"
rc_all=0
SECONDS=0
note() { echo "$*" | tee -a "$results"; }
in_budget() {  # in_budget SECONDS_NEEDED WHAT
  if [ $((SECONDS + $1)) -gt "$budget" ]; then
    note "- skipped: $2 (at ${SECONDS}s it would pass the ${budget}s budget)"
    return 1
  fi
  return 0
}

echo "== device"
nvidia-smi -L || true
# cuBLAS: the system's, else the one pip's nvidia-cublas wheel holds.
if ldd "$ember" | grep -q "not found"; then
  lib=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null)
  [ -n "$lib" ] && export LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}"
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:$d"
  done
  ldd "$ember" | grep "not found" && echo "cuda_check: libraries still missing" >&2
fi
{
  echo "# tools/cuda_check.sh, $(date -u '+%F %H:%M UTC')"
  echo
  echo "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)"
  echo
} > "$results"

echo "== kernel op tests (tests/cuda: every op against its scalar twin)"
timeout 180 "$dir/test_cuda" --gtest_color=no 2>&1 | tee "$log/tests.log"
tests_rc=${PIPESTATUS[0]}
[ "$tests_rc" = 0 ] || rc_all=1

# The default model, or its shape with random weights.
model="models/gemma-3-270m-q4_k_m.gguf"
if [ ! -f "$model" ]; then
  model="$work/gemma-3-270m-shape-q4_k.gguf"
  [ -f "$model" ] || "$ember" gen-model --shape gemma-3-270m --type q4_k --synthetic-vocab -o "$model" > "$log/gen_default.log" 2>&1 ||
    { echo "cuda_check: gen-model of the default shape failed (see gen_default.log)" >&2; rc_all=1; }
fi

echo "== model tests (tests/cuda_model: f32 logits vs CPU, batch invariance, greedy tokens)"
EMBER_CUDA_TEST_MODEL="$model" timeout 240 "$dir/test_cuda_model" --gtest_color=no 2>&1 | tee "$log/model_tests.log"
model_rc=${PIPESTATUS[0]}
[ "$model_rc" = 0 ] || rc_all=1

echo "== ceilings and kernel bandwidth (ember_cuda_bench)"
timeout 200 "$dir/ember_cuda_bench" 2>&1 | tee "$log/bench.log"
bench_rc=${PIPESTATUS[0]}
[ "$bench_rc" = 0 ] || rc_all=1

{
  echo "## tests"
  echo
  echo '```'
  grep -hE "^\[  (PASSED|FAILED|SKIPPED) +\]|^\[==========\] [0-9]+ tests? from" "$log/tests.log" "$log/model_tests.log"
  grep -hE "worst relative L2|greedy:|decode graphs:" "$log/model_tests.log"
  echo '```'
  echo
  echo "## ceilings and kernels (ember_cuda_bench)"
  echo
  echo '```'
  sed -n '/^== decode mat-vec/,$p' "$log/bench.log"
  echo '```'
  echo
  echo "## ember bench --device cuda (tg128 at batch 1, pp512)"
  echo
} >> "$results"

# `ember bench --device cuda` on one file: tg128 and pp512 (3 repetitions).
bench_model() {  # bench_model NAME FILE
  echo "== ember bench --device cuda: $1"
  if timeout 150 "$ember" bench --device "$device" -m "$2" -p 512 -n 128 -r 3 --json "$log/bench_$1.json" \
      > "$log/bench_$1.log" 2>&1; then
    note "### $1"
    note '```'
    grep -E "^model:|^test|^pp|^tg|decode reads" "$log/bench_$1.log" | tee -a "$results"
    note '```'
  else
    note "- ember bench on $1 failed (rc $?): $(tail -2 "$log/bench_$1.log" | tr '\n' ' ')"
    rc_all=1
  fi
}
[ -f "$model" ] && bench_model default "$model"

# The Llama-3.1-8B shape: Q8_0 written by gen-model, Q4_K_M by ember
# quantize from it (llama-quantize's per-tensor mix).
q8="$work/llama-3.1-8b-q8_0.gguf"
q4="$work/llama-3.1-8b-q4_k_m.gguf"
if in_budget 150 "generate the Llama-3.1-8B shape (q8_0)"; then
  if [ -f "$q8" ] || "$ember" gen-model --shape llama-3.1-8b --type q8_0 --synthetic-vocab -o "$q8" > "$log/gen_8b.log" 2>&1; then
    note "- generated $q8 at ${SECONDS}s"
    in_budget 60 "bench the 8B shape Q8_0" && bench_model llama8b-q8_0 "$q8"
    if in_budget 150 "quantize the 8B shape to Q4_K_M"; then
      if [ -f "$q4" ] || "$ember" quantize "$q8" "$q4" --type Q4_K_M --no-check > "$log/quant_8b.log" 2>&1; then
        note "- quantized $q4 at ${SECONDS}s"
        in_budget 60 "bench the 8B shape Q4_K_M" && bench_model llama8b-q4_k_m "$q4"
      else
        note "- ember quantize Q4_K_M failed: $(tail -2 "$log/quant_8b.log" | tr '\n' ' ')"
      fi
    fi
  else
    note "- gen-model of the 8B shape failed: $(tail -2 "$log/gen_8b.log" | tr '\n' ' ')"
  fi
fi

# Throughput at 64 concurrent sequences on the default model, with the
# CPU-side overhead per decode step (scheduler, step inputs, copies,
# sampler) against the device's time ("decode steps:"), eager and then with
# the decode matmuls as CUDA graphs (EMBER_CUDA_GRAPHS=1, off by default).
throughput() {  # throughput NAME [ENV=VALUE]
  local name=$1
  shift
  echo "== ember bench throughput --device cuda (64 sequences, $name)"
  if env "$@" timeout 120 "$ember" bench throughput --device "$device" -m "$model" --num-prompts 64 --max-num-seqs 64 \
      --input-len 128 --output-len 128 > "$log/throughput_$name.log" 2>&1; then
    note "## ember bench throughput --device cuda, 64 sequences, 128 + 128 tokens (default model, $name)"
    note '```'
    grep -v "requests finished" "$log/throughput_$name.log" | grep -E "tokens/s|^decode steps:|^[0-9]+ requests|^KV cache" |
      tee -a "$results"
    note '```'
  else
    note "- bench throughput ($name) failed: $(tail -2 "$log/throughput_$name.log" | tr '\n' ' ')"
    rc_all=1
  fi
}
if [ -f "$model" ] && in_budget 60 "bench throughput at 64 sequences"; then
  throughput eager EMBER_CUDA_GRAPHS=0
  in_budget 45 "bench throughput at 64 sequences with decode graphs" && throughput graphs EMBER_CUDA_GRAPHS=1
fi

# `ember serve --device cuda` answering the official openai client (its
# wheels from the bundle when the device's Python lacks it; else plain HTTP).
if [ -f "$model" ] && in_budget 45 "ember serve --device cuda with the openai client"; then
  echo "== ember serve --device cuda"
  if [ -d "$dir/whl" ] && ! python3 -c "import openai" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$work/site" "$dir"/whl/*.whl > "$log/pip.log" 2>&1 &&
      export PYTHONPATH="$work/site:${PYTHONPATH:-}"
  fi
  port=18473
  "$ember" serve --device "$device" -m "$model" --port $port --max-num-seqs 8 > "$log/serve.log" 2>&1 &
  spid=$!
  for _ in $(seq 60); do
    python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/health', timeout=1)" 2>/dev/null && break
    sleep 1
  done
  if python3 - "$port" > "$log/serve_client.log" 2>&1 <<'PYEOF'; then
import json, sys, urllib.request
url = f"http://127.0.0.1:{sys.argv[1]}/v1"
try:
    import openai
    c = openai.OpenAI(base_url=url, api_key="none")
    model = c.models.list().data[0].id
    r = c.completions.create(model=model, prompt="The capital of France is", max_tokens=8, temperature=0)
    print("openai", openai.__version__, "->", repr(r.choices[0].text), r.usage.completion_tokens, "tokens")
    assert r.usage.completion_tokens > 0
except ImportError:
    req = urllib.request.Request(url + "/completions", json.dumps(
        {"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}).encode(),
        {"Content-Type": "application/json"})
    r = json.load(urllib.request.urlopen(req, timeout=60))
    print("plain HTTP (no openai package) ->", repr(r["choices"][0]["text"]), r["usage"]["completion_tokens"], "tokens")
    assert r["usage"]["completion_tokens"] > 0
PYEOF
    note "- ember serve --device cuda: $(tail -1 "$log/serve_client.log")"
  else
    note "- ember serve --device cuda failed: $(tail -3 "$log/serve_client.log" | tr '\n' ' ') | serve: $(tail -2 "$log/serve.log" | tr '\n' ' ')"
    rc_all=1
  fi
  kill "$spid" 2>/dev/null
  wait "$spid" 2>/dev/null
fi

echo
echo "== summary (${SECONDS}s; logs in $log)"
cat "$results"
echo "kernel tests rc=$tests_rc model tests rc=$model_rc kernel bench rc=$bench_rc overall rc=$rc_all"
exit $rc_all
