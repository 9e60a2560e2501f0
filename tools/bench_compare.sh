#!/usr/bin/env bash
# ember vs llama.cpp on the same GGUF files and machine, measured in one run
# (alternating engines per file so load drifts hit both), pp512 / tg128, -t 2.
#   tools/bench_compare.sh [THREADS] [REPS] [TYPES]
# TYPES: the copies of the default model to compare besides the file itself,
# default "q4_0 q8_0" (any `ember quantize --type`, e.g. "f16 bf16 q5_k").
# Needs: build/ember, the default model (scripts/setup.sh), pip llama-cpp-python.
# Makes the copies with `ember quantize` if absent.
# JSON results go to bench_results/ (git-ignored); with matplotlib installed,
# tools/plot_bench.py then draws docs/img/*.png from them.
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-2}
R=${2:-5}
TYPES=${3:-q4_0 q8_0}
base=models/gemma-3-270m-q4_k_m.gguf
mkdir -p bench_results
rm -f bench_results/*-ember.json bench_results/*-llama.json
files=("$base")
for t in $TYPES; do
  files+=("models/gemma-3-270m-$t.gguf")
  [ -f models/gemma-3-270m-$t.gguf ] || build/ember quantize "$base" models/gemma-3-270m-$t.gguf --type $t >/dev/null
done
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)  threads: $T  reps: $R"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-28s %-10s %12s %12s\n' file engine "pp512 tok/s" "tg128 tok/s"
for f in "${files[@]}"; do
  name=$(basename "$f" .gguf)
  e=$(build/ember bench -m "$f" -p 512 -n 128 -r "$R" -t "$T" --no-bandwidth --json "bench_results/$name-ember.json" 2>/dev/null)
  l=$(python3 tools/bench_llama_cpp.py -m "$f" -p 512 -n 128 -r "$R" -t "$T" --json "bench_results/$name-llama.json" 2>/dev/null)
  ep=$(awk '/^pp512/{print $3}' <<<"$e"); et=$(awk '/^tg128/{print $3}' <<<"$e")
  lp=$(awk '/^pp512/{print $2}' <<<"$l"); lt=$(awk '/^tg128/{print $2}' <<<"$l")
  printf '%-28s %-10s %12s %12s\n' "$(basename "$f")" ember "$ep" "$et"
  printf '%-28s %-10s %12s %12s\n' "" llama.cpp "$lp" "$lt"
  printf '%-28s %-10s %12.2f %12.2f\n' "" ratio "$(echo "$ep / $lp" | bc -l)" "$(echo "$et / $lt" | bc -l)"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
if python3 -c "import matplotlib" 2>/dev/null; then
  python3 tools/plot_bench.py bench_results/*.json --out docs/img
fi
