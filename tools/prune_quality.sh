#!/usr/bin/env bash
# The pruning quality table of docs/pruning.md: `ember prune` by each
# method, pattern and layer allocation of the default model dequantized to
# f32 (so only the pruning is measured; dense zeros change no speed), and
# the structured options of the default model as users run it "$Q4KM" (Q4_K_M, every
# tensor kept in its type: the decode speed is the real one), each reported
# against its source on held-out text (data/persuasion.txt; never the
# calibration text data/calibration.txt). The vocabulary rows are also
# scored on held-out code (Python's standard library: a vocabulary chosen
# from English + other stdlib files, scored on files it did not see).
#
#   tools/prune_quality.sh DIR [SETS]
#     DIR: work folder (DIR/f32.gguf is made from the default model if absent)
#     SETS: any of "unstructured nm owl vocab ffn layers heads" (default: all)
#   env: EMBER (default build/ember), THREADS (2), CHUNKS (held-out windows
#   of 512, default 4), KEEP=1 keeps the pruned files.
# Writes DIR/NAME.log per run and "$Q4KM" appends "name<TAB>KL mean<TAB>KL p99<TAB>
# top-1<TAB>ppl<TAB>ppl change<TAB>decode ratio<TAB>lost mass" to
# DIR/summary.tsv.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=$1
SETS=${2:-"unstructured nm owl vocab ffn layers heads"}
E=${EMBER:-build/ember}
T=${THREADS:-2}
CH=${CHUNKS:-4}
mkdir -p "$DIR"
Q4KM=models/gemma-3-270m-q4_k_m.gguf
SRC=$DIR/f32.gguf
[ -f "$SRC" ] || "$E" quantize models/gemma-3-270m-q4_k_m.gguf "$SRC" --type f32 --no-check -t "$T"
PY=/usr/lib/python3.11
cat data/calibration.txt "$PY/argparse.py" "$PY/typing.py" "$PY/dataclasses.py" "$PY/pathlib.py" > "$DIR/vocab_text.txt"
cat "$PY/textwrap.py" "$PY/shlex.py" "$PY/csv.py" "$PY/json/decoder.py" "$PY/heapq.py" "$PY/fractions.py" \
  "$PY/statistics.py" > "$DIR/code_eval.txt"

run() {  # run NAME SOURCE ARGS...: one prune, its log and summary line
  local name=$1 src=$2
  shift 2
  /usr/bin/time -f "time %e s, peak RSS %M KB" "$E" prune "$src" "$DIR/$name.gguf" "$@" -t "$T" --check-chunks "$CH" \
    > "$DIR/$name.log" 2>&1 || { echo "FAILED: $name (see $DIR/$name.log)"; return 0; }
  local q kl p99 top1 ppl chg speed lost
  q=$(grep "quality vs" "$DIR/$name.log" | tail -1)
  kl=$(sed -E 's/.*KL divergence mean ([0-9.]+).*/\1/' <<<"$q")
  p99=$(sed -E 's/.*KL p99 ([0-9.]+).*/\1/' <<<"$q")
  top1=$(sed -E 's/.*top-1 agreement ([0-9.]+)%.*/\1/' <<<"$q")
  ppl=$(sed -E 's/.*perplexity [0-9.]+ -> ([0-9.]+) .*/\1/' <<<"$q")
  chg=$(sed -E 's/.*perplexity [0-9.]+ -> [0-9.]+ \(([-+0-9.]+)%\).*/\1/' <<<"$q")
  speed=$(grep "decode speed" "$DIR/$name.log" | sed -E 's/.*\(([0-9.]+)x;.*/\1/' || true)
  lost=$(grep "trimmed vocabulary" "$DIR/$name.log" | sed -E 's/trimmed vocabulary: ([0-9.]+)%.*/\1/' || true)
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$kl" "$p99" "$top1" "$ppl" "$chg" "${speed:--}" "${lost:--}" \
    | tee -a "$DIR/summary.tsv"
  [ -n "${KEEP:-}" ] || rm -f "$DIR/$name.gguf"
}

for g in $SETS; do
  case $g in
    unstructured)
      for m in magnitude wanda sparsegpt; do run "${m}_50" "$SRC" --method $m --sparsity 0.5; done ;;
    nm)
      for p in 2:4 4:8; do
        for m in magnitude wanda sparsegpt; do run "${m}_${p/:/of}" "$SRC" --method $m --pattern $p; done
      done ;;
    owl)
      for m in wanda sparsegpt; do
        run "${m}_70" "$SRC" --method $m --sparsity 0.7
        run "${m}_70_owl" "$SRC" --method $m --sparsity 0.7 --layer-sparsity owl
      done ;;
    vocab)
      for n in 32768 65536 131072; do
        run "vocab_${n}_english" "$Q4KM" --vocab $n --vocab-text "$DIR/vocab_text.txt" --speed-tokens 64
        run "vocab_${n}_code" "$Q4KM" --vocab $n --vocab-text "$DIR/vocab_text.txt" --check-file "$DIR/code_eval.txt" \
          --speed-tokens 0
      done ;;
    ffn)
      run ffn_25 "$Q4KM" --ffn 0.25
      run ffn_25_global "$Q4KM" --ffn 0.25 --global-ffn ;;
    layers)
      run layers_4_bi "$Q4KM" --drop-layers 4
      run layers_4_kl "$Q4KM" --drop-layers 4 --layer-metric kl
      run layers_5_bi "$Q4KM" --drop-layers 5 ;;
    heads)
      run heads_25 "$Q4KM" --heads 0.25 ;;
    *) echo "unknown group $g"; exit 2 ;;
  esac
done
