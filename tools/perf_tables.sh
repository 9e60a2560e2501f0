#!/usr/bin/env bash
# Regenerates the opening tables of docs/performance.md: runs the benchmark set area by area
# (tools/perf_areas.py: kernels against llama.cpp, batched decode, serving, long context, speculative
# decoding, structured output, KV-cache types, cost), merges the figures into docs/perf/figures.json and
# rewrites each area's table between its markers in docs/performance.md.
#
#   tools/perf_tables.sh                               every area (a quiet machine: hours, see below)
#   tools/perf_tables.sh --areas serving,spec          some areas; the others keep their figures
#   tools/perf_tables.sh --quick --doc /tmp/perf.md    small shapes into a scratch copy: tests the machinery
#   python3 tools/perf_tables.py list                  the areas and what each runs
#
# Needs build/ember (Release) and llama.cpp's tools: /work/llama-cpp/bin (tools/build_llama_cpp.sh, the
# reference build; llama-bench, llama-batched-bench, llama-server, llama-quantize, llama-perplexity), and for
# the two optional peers /work/llama-cpp-amx/bin (LLAMA_ISA=amx) and /work/llama-cpp-avx2/bin
# (LLAMA_ISA=avx2 LLAMA_TOOLS=llama-bench); an area whose peer is missing is skipped and keeps its figures.
# The benchmark-set files are made on first use under BENCH_SET (/tmp/bench-set; the 8B shape needs ~25 GB
# free while its f16 source exists). Environment: see tools/perf_areas.py. Logs: bench_results/perf/.
set -euo pipefail
cd "$(dirname "$0")/.."
EMBER=${EMBER:-build/ember}
[ -x "$EMBER" ] || { echo "perf_tables: $EMBER not built (cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release && ninja -C build)" >&2; exit 1; }
mkdir -p bench_results/perf
log=bench_results/perf/run-$(date -u +%Y%m%dT%H%M%SZ).log
echo "perf_tables: log $log; load $(cut -d' ' -f1-3 /proc/loadavg)"
set +e
python3 tools/perf_tables.py run "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
exit "$rc"
