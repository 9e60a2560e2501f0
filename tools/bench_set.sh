#!/usr/bin/env bash
# The benchmark set of real shapes (issue 12), one command: ember vs llama.cpp
# on the files people run, same machine, same run, alternating engines.
#
#   tools/bench_set.sh [DIR]          (DIR: where the model files live, default /tmp/bench-set)
#
# Files: for every shape in SHAPES, `build/ember gen-model --shape S --type f16`
# (random weights, synthetic vocabulary), quantized by llama.cpp's own
# `llama-quantize` into every type in TYPES; plus the default model
# (models/gemma-3-270m-q4_k_m.gguf). Existing files in DIR are reused; the
# f16 source is deleted after quantizing unless KEEP_F16=1 (8B f16 = 16 GB).
# Then per file, ROUNDS times: `ember bench -p P -n N -t T -r REPS` and
# `llama-bench -p P -n N -t T -r REPS -o json`, alternating; medians over all
# samples of all rounds. Writes DIR/results/bench_set.md (markdown table:
# tok/s, ratios, decode GB/s against the measured read bandwidth) and
# DIR/results/bench_set.json (a failed llama-bench run leaves its columns
# empty instead of stopping the set); with matplotlib, DIR/results/*.png via
# tools/plot_bench.py.
#
# Environment (defaults):
#   SHAPES="llama-3.2-1b qwen3-0.6b qwen2.5-1.5b llama-3.1-8b"   (any `ember gen-model --list` shape)
#   TYPES="q4_k_m q4_0 q8_0"       (llama-quantize type names)
#   DEFAULT_MODEL=1                (0: leave out models/gemma-3-270m-q4_k_m.gguf)
#   FILES=""                       (extra GGUF paths to include as they are)
#   THREADS=2 REPS=3 ROUNDS=2 P=512 N=128
#   LLAMA_BIN=/work/llama-cpp/bin  EMBER=build/ember  QUANTIZE_BIN=$LLAMA_BIN
#   LLAMA_ARGS=""                  (extra llama-bench flags, one string split at spaces)
#   ik_llama.cpp (tools/build_ik_llama_cpp.sh) with its run-time repacking:
#     LLAMA_BIN=../ik-llama/bin QUANTIZE_BIN=/work/llama-cpp/bin LLAMA_ARGS="-rtr 1"
#   AVX2 against AVX2: EMBER_ISA=avx2 LLAMA_BIN=../llama-cpp-avx2/bin QUANTIZE_BIN=../llama-cpp/bin
#   PREPARE_ONLY=1                 (make the files, run nothing)
# Example: SHAPES=qwen3-0.6b TYPES="q4_k_m q4_0" tools/bench_set.sh
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-/tmp/bench-set}
SHAPES=${SHAPES-llama-3.2-1b qwen3-0.6b qwen2.5-1.5b llama-3.1-8b}
TYPES=${TYPES-q4_k_m q4_0 q8_0}
DEFAULT_MODEL=${DEFAULT_MODEL:-1}
FILES=${FILES:-}
THREADS=${THREADS:-2}
REPS=${REPS:-3}
ROUNDS=${ROUNDS:-2}
P=${P:-512}
N=${N:-128}
LLAMA_BIN=${LLAMA_BIN:-/work/llama-cpp/bin}
EMBER=${EMBER:-build/ember}
# QUANTIZE_BIN: where llama-quantize is when LLAMA_BIN has only llama-bench
# (e.g. the AVX2-only build of tools/build_llama_cpp.sh, LLAMA_ISA=avx2).
QUANTIZE=${QUANTIZE_BIN:-$LLAMA_BIN}/llama-quantize
LBENCH=$LLAMA_BIN/llama-bench
read -r -a LARGS <<<"${LLAMA_ARGS:-}"

die() { echo "bench_set: $*" >&2; exit 1; }
[ -x "$EMBER" ] || die "$EMBER not built (cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release && ninja -C build)"
[ -x "$QUANTIZE" ] || die "$QUANTIZE missing (tools/build_llama_cpp.sh $(dirname "$LLAMA_BIN"))"
[ -x "$LBENCH" ] || die "$LBENCH missing"
mkdir -p "$DIR" "$DIR/results"
RES=$DIR/results
rm -f "$RES"/*.ember.json "$RES"/*.ember.log "$RES"/*.llama.json

# ---- 1. the files ----
files=()
for s in $SHAPES; do
  src=$DIR/$s-f16.gguf
  need=0
  for t in $TYPES; do [ -s "$DIR/$s-$t.gguf" ] || need=1; done
  if [ $need = 1 ] && [ ! -s "$src" ]; then
    echo "gen-model $s (f16) -> $src"
    "$EMBER" gen-model --shape "$s" --type f16 --synthetic-vocab -o "$src.tmp" >/dev/null || die "gen-model $s failed"
    mv "$src.tmp" "$src"
  fi
  for t in $TYPES; do
    out=$DIR/$s-$t.gguf
    if [ ! -s "$out" ]; then
      echo "llama-quantize $s -> $t"
      "$QUANTIZE" "$src" "$out.tmp" "$t" "$THREADS" >"$DIR/$s-$t.quantize.log" 2>&1 ||
        die "llama-quantize $s $t failed (see $DIR/$s-$t.quantize.log)"
      mv "$out.tmp" "$out"
    fi
    files+=("$out")
  done
  [ "${KEEP_F16:-0}" = 1 ] || rm -f "$src"
done
[ "$DEFAULT_MODEL" = 1 ] && files+=(models/gemma-3-270m-q4_k_m.gguf)
for f in $FILES; do files+=("$f"); done
[ "${PREPARE_ONLY:-0}" = 1 ] && { printf '%s\n' "${files[@]}"; exit 0; }
[ ${#files[@]} -gt 0 ] || die "no files selected"

# ---- 2. the runs: per file, ROUNDS x (ember, llama.cpp) ----
{
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
  echo "threads: $THREADS  reps: $REPS  rounds: $ROUNDS  p: $P  n: $N"
  echo "ember: $(git rev-parse --short HEAD)$(git diff --quiet || echo -dirty)"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$RES/run_info.txt"
cat "$RES/run_info.txt"
first=1
for f in "${files[@]}"; do
  name=$(basename "$f" .gguf)
  for r in $(seq 1 "$ROUNDS"); do
    bw=--no-bandwidth
    if [ $first = 1 ]; then bw=; first=0; fi  # the read bandwidth, measured once
    echo "[$name round $r] ember"
    "$EMBER" bench -m "$f" -p "$P" -n "$N" -r "$REPS" -t "$THREADS" $bw --json "$RES/$name.r$r.ember.json" \
      >"$RES/$name.r$r.ember.log" 2>/dev/null || die "ember bench failed on $f"
    echo "[$name round $r] llama.cpp"
    "$LBENCH" -m "$f" -p "$P" -n "$N" -r "$REPS" -t "$THREADS" "${LARGS[@]}" -o json >"$RES/$name.r$r.llama.json" \
      2>"$RES/$name.r$r.llama.log" || {
      echo "bench_set: llama-bench failed on $f (see $RES/$name.r$r.llama.log); its columns stay empty" >&2
      rm -f "$RES/$name.r$r.llama.json"
    }
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$RES/run_info.txt"

# ---- 3. the table (and plot) ----
python3 tools/bench_set_report.py "$RES" "${files[@]}"
if python3 -c "import matplotlib" 2>/dev/null; then
  python3 tools/plot_bench.py "$RES"/plot/*.json --out "$RES" || true
fi
