#!/usr/bin/env bash
# Tensor and pipeline parallelism against one rank, through the engine
# (`ember bench throughput`), in alternating rounds (the machine's speed
# drifts; compare ratios of neighbouring runs, medians over rounds):
#   decode:     1 request, 32 prompt + N output tokens: the decode steps'
#               tokens/s of one rank with 1 thread, one rank with 2 threads,
#               TP=2 with 1 thread per rank;
#   throughput: 16 requests at once (32 + N tokens each): output tokens/s
#               of one rank with 1 and 2 threads and PP=2 with 1 thread per
#               rank (2 micro-batches of 8).
# Usage: tools/bench_parallel.sh build/ember MODEL.gguf [ROUNDS] [N] [decode|throughput|both]
set -euo pipefail
EMBER="$(realpath "${1:?usage: bench_parallel.sh path/to/ember MODEL [ROUNDS] [N] [decode|throughput|both]}")"
MODEL="${2:?model}"
ROUNDS="${3:-3}"
N="${4:-32}"
WHAT="${5:-both}"
MPIRUN=(mpirun --oversubscribe --bind-to none -np 2)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
export OMPI_MCA_btl_base_warn_component_unused=0
common=(bench throughput -m "$MODEL" --input-len 32 --output-len "$N" --kv-cache-memory 1G)
field() {  # the "decode steps X tokens/s" or "(X output tokens/s" figure of a run's summary
  if [ "$1" = decode ]; then grep -o 'decode steps [0-9.]* tokens/s' | grep -o '[0-9.]*'
  else grep -o '([0-9.]* output tokens/s' | grep -o '[0-9.]*'; fi
}
run() {  # name kind command...
  local name=$1 kind=$2
  shift 2
  local v
  v=$("$@" 2>/dev/null | field "$kind" | head -1)
  echo "$name $kind ${v:-failed}"
}
echo "## $(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); model $MODEL; $N output tokens"
for r in $(seq 1 "$ROUNDS"); do
  echo "# round $r"
  if [ "$WHAT" != throughput ]; then
    run "1rank-1t" decode "$EMBER" "${common[@]}" --num-prompts 1 -t 1
    run "tp2-1t" decode "${MPIRUN[@]}" "$EMBER" "${common[@]}" --num-prompts 1 -t 1 --tensor-parallel-size 2
    run "1rank-2t" decode "$EMBER" "${common[@]}" --num-prompts 1 -t 2
  fi
  if [ "$WHAT" != decode ]; then
    run "1rank-1t" throughput "$EMBER" "${common[@]}" --num-prompts 16 --max-num-seqs 16 -t 1
    run "pp2-1t" throughput "${MPIRUN[@]}" "$EMBER" "${common[@]}" --num-prompts 16 --max-num-seqs 16 -t 1 \
      --pipeline-parallel-size 2
    run "1rank-2t" throughput "$EMBER" "${common[@]}" --num-prompts 16 --max-num-seqs 16 -t 2
  fi
done
