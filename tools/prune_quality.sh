#!/usr/bin/env bash
# The measured tables and the Pareto plot of docs/pruning.md ("Measured"),
# on the default model (Gemma 3 270M). Every figure is a file's distance
# from its source on held-out text: data/persuasion.txt (*Persuasion*),
# never the calibration text data/calibration.txt (*Pride and Prejudice*,
# the default --calib), and code that the calibration / vocabulary text
# does not contain.
#
#   tools/prune_quality.sh DIR [SETS]
#     DIR: work folder (DIR/f32.gguf is made from the default model if absent)
#     SETS: any of "unstructured owl nm vocab ffn layers heads pareto owlsweep"
#       (default: all but owlsweep, in that order)
#   env: EMBER (build/ember), THREADS (2), CHUNKS (held-out windows of 512,
#     default 2: 1022 scored positions, as docs/quantization.md), KEEP=1 keeps the written files, ROUNDS (alternating
#     decode-speed rounds of the vocabulary files, default 5; 0: none),
#     DENSE_METHOD (the dense rows of the Pareto plot: gptq (default),
#     imatrix, awq or rtn), SPARSE_METHOD (its sparse rows: wanda
#     (default) or sparsegpt, which gets --quota row), SPARSE_LAYERS (uniform
#     (default), owl or kl),
#     OWL_GRID (owlsweep's "lambda:M" pairs; default "0.02:5 0.05:5 0.08:5
#     0.1:5 0.2:5 0.08:3 0.08:7 0.08:10"), SWEEP_METHODS ("wanda"), VAL (its
#     validation text; default DIR/val_pp.txt, made from the last 20000
#     bytes of data/calibration.txt),
#     OWL_METHODS ("wanda sparsegpt"), LAYER_RULES (the owl group's layer
#     sparsity rules: "uniform owl kl"; owlsweep runs kl too when listed), NM_METHODS ("magnitude wanda
#     sparsegpt"), CALIB_TOKENS (--calib-tokens of every prune; default: the
#     CLI's, 4096), PARETO_DENSE (the dense mixes: "Q8_0 Q6_K Q5_K_M Q4_K_M
#     Q3_K_M Q2_K"), PARETO_SPARSITY ("0.5 0.6 0.7"), ACT_LEVELS ("0.4 0.5"), SPARSE4_ARGS
#     (the flags of the int4-sparse rows, default "--type q4_0 --format
#     sparse --sparse-bits 4").
#
# Groups and what each measures:
#   unstructured  magnitude / Wanda / SparseGPT at 50%, the f32 source
#                 (the default model dequantized, so only pruning counts)
#   owl           Wanda / SparseGPT at 70%, uniform, OWL and kl layer sparsity
#                 (OWL_LAMBDA / OWL_M: OWL's setting, default the paper's 0.08 / 5)
#   owlsweep      OWL's lambda and M at 70% on a validation text (the end of
#                 the calibration novel, unseen by the calibration), against
#                 uniform on the same text: the setting is chosen there,
#                 never on the held-out Persuasion
#   nm            2:4 and 4:8 by each method
#   vocab         the output head cut to 32k / 64k / 128k tokens of the
#                 Q4_K_M file (as users run it, so the speed is real),
#                 scored on English and on code, and decode speed (paired,
#                 alternating: tools/prune_speed.sh)
#   ffn, layers, heads   25% of FFN channels, 4 or 5 of 18 layers, 25% of
#                 the query heads of the Q4_K_M file (KL before distillation)
#   pareto        KL against bits per weight: dense Q8_0 ... Q2_K (one
#                 calibrated method), sparse int8 (`--format sparse`) at
#                 PARETO_SPARSITY and 2:4, sparse int4 and activation
#                 sparsity where this ember supports them (probed; a note
#                 says when skipped). Every row keeps the tied embedding /
#                 head at Q8_0, so the rows differ only in the block
#                 matrices, which is what pruning changes.
#
# Writes DIR/NAME.log per run, DIR/summary.tsv (one row per prune report),
# DIR/pareto.tsv (one row per Pareto point), DIR/vocab_speed.txt and
# DIR/notes.txt; then `python3 tools/prune_report.py DIR --svg
# docs/img/prune_pareto.svg` prints the markdown tables and draws the plot.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=$1
SETS=${2:-"unstructured owl nm vocab ffn layers heads pareto"}
E=${EMBER:-build/ember}
T=${THREADS:-2}
CH=${CHUNKS:-2}
ROUNDS=${ROUNDS:-5}
DENSE_METHOD=${DENSE_METHOD:-gptq}
SPARSE_METHOD=${SPARSE_METHOD:-wanda}
SPARSE_LAYERS=${SPARSE_LAYERS:-uniform}
PARETO_DENSE=${PARETO_DENSE-"Q8_0 Q6_K Q5_K_M Q4_K_M Q3_K_M Q2_K"}
PARETO_SPARSITY=${PARETO_SPARSITY:-"0.5 0.6 0.7"}
ACT_LEVELS=${ACT_LEVELS:-"0.4 0.5"}
OWL_METHODS=${OWL_METHODS:-"wanda sparsegpt"}
LAYER_RULES=${LAYER_RULES:-"uniform owl kl"}
NM_METHODS=${NM_METHODS:-"magnitude wanda sparsegpt"}
OWL_GRID=${OWL_GRID:-"0.02:5 0.05:5 0.08:5 0.1:5 0.2:5 0.08:3 0.08:7 0.08:10"}
SWEEP_METHODS=${SWEEP_METHODS:-wanda}
OWL_LAMBDA=${OWL_LAMBDA:-0.08}
OWL_M=${OWL_M:-5}
OWL_TAG=""  # the rows of another setting than the paper's are named *_70_owl_l<lambda>_m<M> (uniform not rerun)
[ "$OWL_LAMBDA:$OWL_M" = 0.08:5 ] || OWL_TAG="_l${OWL_LAMBDA}_m${OWL_M}"
VAL=${VAL:-$DIR/val_pp.txt}
CAL=()
[ -z "${CALIB_TOKENS:-}" ] || CAL=(--calib-tokens "$CALIB_TOKENS")
SPARSE4_ARGS=${SPARSE4_ARGS:-"--type q4_0 --format sparse --sparse-bits 4"}
mkdir -p "$DIR"
Q4KM=models/gemma-3-270m-q4_k_m.gguf
SRC=$DIR/f32.gguf
[ -f "$SRC" ] || "$E" quantize "$Q4KM" "$SRC" --type f32 --no-check -t "$T"
note() { echo "note: $*" | tee -a "$DIR/notes.txt"; }

# Texts of the vocabulary rows. The kept tokens are counted on
# DIR/vocab_text.txt: the calibration text (English) and code of two Debian
# packages (libpython3.11's standard library, zlib1g-dev's / libpng-dev's C
# examples); the code score is on DIR/code_eval.txt, other files of the same
# packages (Python and C alternating, 1500 bytes of each from its 4000th on,
# past the licence headers), which the vocabulary text does not contain.
PY=/usr/lib/python3.11
ZD=/usr/share/doc/zlib1g-dev/examples
PD=/usr/share/doc/libpng-dev/examples
existing() { for f in "$@"; do [ -f "$f" ] && echo "$f"; done; return 0; }
slice() { head -c 5500 "$1" | tail -c +4000 | sed '1d;$d'; }  # whole lines only (no SIGPIPE under pipefail)
if [[ " $SETS " == *" vocab "* ]]; then
  # shellcheck disable=SC2046
  cat data/calibration.txt $(existing "$PY/argparse.py" "$PY/typing.py" "$PY/dataclasses.py" "$PY/pathlib.py" \
    "$ZD/gznorm.c" "$ZD/infcover.c" "$PD/example.c") > "$DIR/vocab_text.txt"
  : > "$DIR/code_eval.txt"
  for f in $(existing "$PY/textwrap.py" "$ZD/gun.c" "$PY/shlex.py" "$ZD/gzlog.c" "$PY/csv.py" "$ZD/enough.c" \
    "$PY/heapq.py" "$PD/pngtest.c" "$PY/fractions.py" "$PY/statistics.py" "$PY/json/decoder.py"); do
    slice "$f" >> "$DIR/code_eval.txt"
  done
fi

[ -f "$DIR/summary.tsv" ] || printf 'name\tkl\tkl_p99\ttop1\tppl_src\tppl\tppl_change\tdecode_ratio\tlost_mass\tunreachable\tkl_reverse\tpositions\tfile_mib\twall_s\n' > "$DIR/summary.tsv"
[ -f "$DIR/pareto.tsv" ] || printf 'name\tfamily\tlabel\tblock_bpw\tread_bpw\tfile_mib\tdecode_mib\tkl\tkl_p99\ttop1\tppl_src\tppl\twall_s\n' > "$DIR/pareto.tsv"

field() { sed -nE "s/$1/\\1/p" <<<"$2" | head -1; }

run() {  # run NAME SOURCE ARGS...: one prune with its report, its log and summary line
  local name=$1 src=$2
  shift 2
  local t0=$SECONDS
  if ! /usr/bin/time -f "time %e s, peak RSS %M KB" "$E" prune "$src" "$DIR/$name.gguf" "$@" "${CAL[@]}" -t "$T" \
    --check-chunks "$CH" > "$DIR/$name.log" 2>&1; then
    note "FAILED: $name (see $DIR/$name.log: $(grep -v '^time ' "$DIR/$name.log" | tail -1))"
    return 0
  fi
  local q t s sz
  q=$(grep "quality vs" "$DIR/$name.log" | tail -1 || true)
  t=$(grep "trimmed vocabulary" "$DIR/$name.log" | tail -1 || true)
  s=$(grep "decode speed" "$DIR/$name.log" | tail -1 || true)
  sz=$(grep "^size:" "$DIR/$name.log" | tail -1 || true)
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" \
    "$(field '.*KL divergence mean ([0-9.]+).*' "$q")" "$(field '.*KL p99 ([0-9.]+).*' "$q")" \
    "$(field '.*top-1 agreement ([0-9.]+)%.*' "$q")" "$(field '.*perplexity ([0-9.]+) -> .*' "$q")" \
    "$(field '.*perplexity [0-9.]+ -> ([0-9.]+) .*' "$q")" \
    "$(field '.*perplexity [0-9.]+ -> [0-9.]+ \(([-+0-9.]+)%\).*' "$q")" \
    "$(field '.*\(([0-9.]+)x;.*' "$s")" "$(field 'trimmed vocabulary: ([0-9.]+)%.*' "$t")" \
    "$(field '.*; ([0-9]+) of [0-9]+ next tokens unreachable.*' "$t")" \
    "$(field '.*KL\(output \|\| source\) mean ([0-9.]+).*' "$t")" "$(field '.* over ([0-9]+) tokens:.*' "$q")" \
    "$(field '.*MiB -> ([0-9.]+) MiB.*' "$sz")" "$((SECONDS - t0))" | tee -a "$DIR/summary.tsv"
  [ -n "${KEEP:-}" ] || [ -n "${HOLD:-}" ] || rm -f "$DIR/$name.gguf"
}

point() {  # point NAME FAMILY LABEL READ_FRACTION: score DIR/NAME.gguf against f32 for the Pareto table
  local name=$1 family=$2 label=$3 frac=${4:-1} f=$DIR/$1.gguf t0=$SECONDS
  "$E" info -v "$f" > "$DIR/$name.info" 2>&1 || { note "FAILED: ember info $name"; return 0; }
  if ! "$E" eval kl "$SRC" "$f" -f data/persuasion.txt --chunks "$CH" --kv-cache-dtype f32 -t "$T" \
    >> "$DIR/$name.log" 2>&1; then
    note "FAILED: eval kl $name (see $DIR/$name.log)"
    return 0
  fi
  local q bpw mib dmib
  q=$(grep '^KL divergence' "$DIR/$name.log" | tail -1 || true)
  read -r bpw mib dmib <<<"$(python3 tools/prune_report.py --sizes "$DIR/$name.info")"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$family" "$label" "$bpw" \
    "$(awk -v b="$bpw" -v f="$frac" 'BEGIN {printf "%.3f", b * f}')" "$mib" "$dmib" \
    "$(field 'KL divergence mean ([0-9.]+).*' "$q")" "$(field '.*p99 ([0-9.]+).*' "$q")" \
    "$(field '.*top-1 agreement ([0-9.]+)%.*' "$q")" "$(field '.*perplexity ([0-9.]+) -> .*' "$q")" \
    "$(field '.*perplexity [0-9.]+ -> ([0-9.]+) .*' "$q")" "$((SECONDS - t0 + ${5:-0}))" | tee -a "$DIR/pareto.tsv"
}

make_point() {  # make_point NAME FAMILY LABEL quantize|prune ARGS...: write DIR/NAME.gguf from f32, score it
  local name=$1 family=$2 label=$3 cmd=$4 t0=$SECONDS
  shift 4
  [ "$cmd" = prune ] && set -- "$@" --speed-tokens 0 "${CAL[@]}"
  if ! /usr/bin/time -f "time %e s, peak RSS %M KB" "$E" "$cmd" "$SRC" "$DIR/$name.gguf" "$@" -t "$T" --no-check \
    > "$DIR/$name.log" 2>&1; then
    note "FAILED: $name (see $DIR/$name.log: $(grep -v '^time ' "$DIR/$name.log" | tail -1))"
    return 1
  fi
  point "$name" "$family" "$label" 1 $((SECONDS - t0))
}

dense_args() {  # the calibrated method of the dense Pareto rows
  case $DENSE_METHOD in
    gptq) echo --method gptq ;;
    awq) echo --method awq ;;
    imatrix)
      [ -f "$DIR/imatrix.gguf" ] || "$E" imatrix "$SRC" -f data/calibration.txt --chunks 16 -t "$T" \
        -o "$DIR/imatrix.gguf" > "$DIR/imatrix.log" 2>&1
      echo --imatrix "$DIR/imatrix.gguf" ;;
    rtn) ;;
    *) echo "unknown DENSE_METHOD $DENSE_METHOD" >&2; exit 2 ;;
  esac
}

drop() { [ -n "${KEEP:-}" ] || rm -f "$@"; }

for g in $SETS; do
  case $g in
    unstructured)
      for m in magnitude wanda sparsegpt; do run "${m}_50" "$SRC" --method "$m" --sparsity 0.5 --speed-tokens 0; done ;;
    owl)
      for m in $OWL_METHODS; do
        for rule in $LAYER_RULES; do
          case $rule in
            uniform) [ -n "$OWL_TAG" ] || run "${m}_70" "$SRC" --method "$m" --sparsity 0.7 --speed-tokens 0 ;;
            owl) run "${m}_70_owl$OWL_TAG" "$SRC" --method "$m" --sparsity 0.7 --layer-sparsity owl \
                   --owl-lambda "$OWL_LAMBDA" --owl-m "$OWL_M" --speed-tokens 0 ;;
            kl) run "${m}_70_kl" "$SRC" --method "$m" --sparsity 0.7 --layer-sparsity kl --speed-tokens 0 ;;
            *) echo "unknown layer rule $rule"; exit 2 ;;
          esac
        done
      done ;;
    owlsweep)
      # OWL's lambda and M (the paper's grid: M 3 / 5 / 7 / 10, lambda
      # 0.02-0.2) scored on a validation text, the end of the calibration
      # novel (past the calibration tokens), never on the held-out one.
      [ -f "$VAL" ] || tail -c 20000 data/calibration.txt | sed '1d' > "$VAL"
      for m in $SWEEP_METHODS; do
        run "${m}_70_val" "$SRC" --method "$m" --sparsity 0.7 --speed-tokens 0 --check-file "$VAL"
        [[ " $LAYER_RULES " != *" kl "* ]] || run "${m}_70_kl_val" "$SRC" --method "$m" --sparsity 0.7 \
          --layer-sparsity kl --speed-tokens 0 --check-file "$VAL"
        for lm in $OWL_GRID; do
          run "${m}_70_owl_l${lm%%:*}_m${lm##*:}_val" "$SRC" --method "$m" --sparsity 0.7 --layer-sparsity owl \
            --owl-lambda "${lm%%:*}" --owl-m "${lm##*:}" --speed-tokens 0 --check-file "$VAL"
        done
      done ;;
    nm)
      for p in 2:4 4:8; do
        for m in $NM_METHODS; do run "${m}_${p/:/of}" "$SRC" --method "$m" --pattern $p --speed-tokens 0; done
      done ;;
    vocab)
      files=()
      for n in 32768 65536 131072; do
        HOLD=1 run "vocab_${n}" "$Q4KM" --vocab $n --vocab-text "$DIR/vocab_text.txt" --speed-tokens 64
        [ -f "$DIR/vocab_${n}.gguf" ] && files+=("$DIR/vocab_${n}.gguf")
        run "vocab_${n}_code" "$Q4KM" --vocab $n --vocab-text "$DIR/vocab_text.txt" --check-file "$DIR/code_eval.txt" \
          --speed-tokens 0
      done
      if [ "$ROUNDS" -gt 0 ] && [ ${#files[@]} -gt 0 ]; then
        EMBER=$E ROUNDS=$ROUNDS GEN=64 THREADS=$T tools/prune_speed.sh "$Q4KM" "${files[@]}" | tee "$DIR/vocab_speed.txt"
      fi
      drop "${files[@]}" ;;
    ffn)
      run ffn_25 "$Q4KM" --ffn 0.25 --speed-tokens 0
      run ffn_25_global "$Q4KM" --ffn 0.25 --global-ffn --speed-tokens 0 ;;
    layers)
      run layers_4_bi "$Q4KM" --drop-layers 4 --speed-tokens 0
      run layers_5_bi "$Q4KM" --drop-layers 5 --speed-tokens 0
      run layers_4_kl "$Q4KM" --drop-layers 4 --layer-metric kl --speed-tokens 0 ;;
    heads)
      run heads_25 "$Q4KM" --heads 0.25 --speed-tokens 0 ;;
    pareto)
      # Dense: llama.cpp's mixes with the tied embedding / head at Q8_0.
      dargs=$(dense_args)
      for mix in $PARETO_DENSE; do
        # shellcheck disable=SC2086
        make_point "dense_$mix" dense "$mix ($DENSE_METHOD)" quantize --type $mix --output-type q8_0 $dargs || true
        case $mix in Q8_0 | Q4_K_M) ;; *) drop "$DIR/dense_$mix.gguf" ;; esac
      done
      # Sparse int8 values (sq8): the pruned block matrices stored sparse.
      smode=""
      [ "$SPARSE_LAYERS" = uniform ] || smode="--layer-sparsity $SPARSE_LAYERS"
      # The sparse format gives every row the bytes of the densest: magnitude /
      # SparseGPT with their per-matrix quota leave rows uneven (SparseGPT 50%:
      # 7.94 bits a weight instead of 5.50), so they take the per-row quota
      # (Wanda always compares within rows and refuses --quota).
      [ "$SPARSE_METHOD" = wanda ] || smode="$smode --quota row"
      for s in $PARETO_SPARSITY; do
        # shellcheck disable=SC2086
        make_point "sparse8_$s" "sparse int8" "$SPARSE_METHOD $s" prune --method "$SPARSE_METHOD" --sparsity "$s" \
          $smode --type q8_0 --format sparse || true
        [ "$s" = 0.5 ] || drop "$DIR/sparse8_$s.gguf"
      done
      make_point sparse8_2of4 "sparse int8 2:4" "$SPARSE_METHOD 2:4" prune --method "$SPARSE_METHOD" --pattern 2:4 \
        --type q8_0 --format sparse || true
      drop "$DIR/sparse8_2of4.gguf"
      # Sparse int4 values: where this ember has them.
      s4flag=$(grep -oE -- '--[a-z-]+' <<<"$SPARSE4_ARGS" | tail -1)  # its last flag: --sparse-bits
      if "$E" prune --help 2>&1 | grep -q -- "$s4flag"; then
        for s in $PARETO_SPARSITY; do
          # shellcheck disable=SC2086
          make_point "sparse4_$s" "sparse int4" "$SPARSE_METHOD $s" prune --method "$SPARSE_METHOD" --sparsity "$s" \
            $smode $SPARSE4_ARGS --output-type q8_0 || true
          drop "$DIR/sparse4_$s.gguf"
        done
      else
        note "sparse int4 rows skipped: \`ember prune --help\` has no $s4flag in this build"
      fi
      # Activation sparsity on top of dense Q8_0, dense Q4_K_M and sparse int8 50%.
      if "$E" prune --help 2>&1 | grep -q -- '--activations'; then
        for base in dense_Q8_0 dense_Q4_K_M sparse8_0.5; do
          [ -f "$DIR/$base.gguf" ] || { note "activation rows on $base skipped: $base.gguf was not written"; continue; }
          for a in $ACT_LEVELS; do
            name="act_${a}_$base" t0=$SECONDS
            if "$E" prune "$DIR/$base.gguf" "$DIR/$name.gguf" --activations "$a" --no-check --speed-tokens 0 -t "$T" \
              > "$DIR/$name.log" 2>&1; then
              point "$name" "activation sparsity" "${base#dense_} + act $a" "$(awk -v a="$a" 'BEGIN {print 1 - a}')" \
                $((SECONDS - t0))
            else
              note "FAILED: $name (see $DIR/$name.log: $(tail -1 "$DIR/$name.log"))"
            fi
            drop "$DIR/$name.gguf"
          done
        done
      else
        note "activation-sparsity rows skipped: \`ember prune --help\` has no --activations in this build"
      fi
      drop "$DIR/dense_Q8_0.gguf" "$DIR/dense_Q4_K_M.gguf" "$DIR/sparse8_0.5.gguf" ;;
    *) echo "unknown group $g"; exit 2 ;;
  esac
done
