#!/usr/bin/env bash
# End-to-end checks of the ember binary: exit codes on bad input, and a
# greedy run on the default model (skipped when it is not installed).
# Usage: cli_test.sh path/to/ember
set -u
EMBER="$1"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
MODEL="$ROOT/models/gemma-3-270m-q4_k_m.gguf"
fail=0
pass=0
expect_rc() {  # expect_rc WANT DESCRIPTION CMD...
  local want="$1" what="$2"; shift 2
  "$@" >/tmp/ember_cli_out.$$ 2>&1
  local rc=$?
  if [ "$rc" != "$want" ]; then
    echo "FAIL: $what: exit $rc, want $want"; sed 's/^/   | /' /tmp/ember_cli_out.$$ | head -5; fail=$((fail + 1))
  else
    pass=$((pass + 1))
  fi
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp" /tmp/ember_cli_out.$$' EXIT

expect_rc 2 "no command" "$EMBER"
expect_rc 2 "unknown command" "$EMBER" frobnicate
expect_rc 0 "help" "$EMBER" --help
expect_rc 2 "missing model file" "$EMBER" run -m "$tmp/none.gguf" -p hi
expect_rc 2 "bad number" "$EMBER" run -m "$tmp/none.gguf" -p hi --temp abc
expect_rc 2 "unknown option" "$EMBER" run --bogus
expect_rc 2 "missing prompt" "$EMBER" run -m "$tmp/none.gguf"
expect_rc 2 "serve: bad port" "$EMBER" serve --port 99999
expect_rc 2 "serve: bad kv size" "$EMBER" serve --kv-cache-memory lots
expect_rc 2 "serve: missing model" "$EMBER" serve -m "$tmp/none.gguf"
expect_rc 2 "serve: unknown option" "$EMBER" serve --bogus
expect_rc 0 "serve: help" "$EMBER" serve --help
expect_rc 2 "bench serve: bad rate" "$EMBER" bench serve --request-rate -3
expect_rc 2 "bad quantize type" "$EMBER" quantize a b --type q9_9
expect_rc 2 "perplexity without -f" "$EMBER" perplexity
expect_rc 2 "gen-model bad shape" "$EMBER" gen-model --shape nope -o "$tmp/x.gguf"
expect_rc 2 "draft method without a draft model" "$EMBER" run -m "$tmp/none.gguf" -p hi --speculative-method draft
if [ -f "$MODEL" ]; then  # a skip set that skips every layer; a draft whose vocabulary is not the target's
  expect_rc 2 "skip-layers: every layer" "$EMBER" run -m "$MODEL" -p hi -n 2 --speculative-method layerskip \
    --skip-layers 0-17
  grep -q "skips all 18 layers" /tmp/ember_cli_out.$$ || { echo "FAIL: skip-layers message"; fail=$((fail + 1)); }
  expect_rc 2 "draft tokenizer mismatch" "$EMBER" run -m "$MODEL" -p hi -n 2 --speculative-method draft \
    --speculative-model "$ROOT/tests/data/model/hf_qwen2"
  grep -q "tokenizers must match" /tmp/ember_cli_out.$$ || { echo "FAIL: draft mismatch message"; fail=$((fail + 1)); }
fi
# quantize: the quality check against the source model.
"$EMBER" gen-model --arch llama --n-layer 2 --n-embd 64 --n-ff 128 --n-head 4 --n-vocab 300 --type f32 \
  -o "$tmp/tiny.gguf" >/dev/null 2>&1
out=$("$EMBER" quantize "$tmp/tiny.gguf" "$tmp/tiny-q8.gguf" --type q8_0 -t 2 2>&1)
if ! grep -Eq "quality vs .* over [0-9]+ tokens: KL divergence mean [0-9.]+, max [0-9.]+; top-1 agreement [0-9.]+%; perplexity [0-9.]+ -> [0-9.]+" <<<"$out"; then
  echo "FAIL: quantize quality line missing: $out"; fail=$((fail + 1)); else pass=$((pass + 1)); fi
out=$("$EMBER" quantize "$tmp/tiny.gguf" "$tmp/tiny-q4.gguf" --type q4_0 --no-check 2>&1)
if grep -q "quality vs" <<<"$out" || [ ! -s "$tmp/tiny-q4.gguf" ]; then
  echo "FAIL: quantize --no-check: $out"; fail=$((fail + 1)); else pass=$((pass + 1)); fi
# --device: a bad name; cuda without a GPU (or in a build without CUDA) is a
# clear usage error, with one it runs; auto falls back to the CPU.
expect_rc 2 "run: bad --device" "$EMBER" run -m "$tmp/tiny.gguf" -p hi -n 2 --device tpu
out=$("$EMBER" run -m "$tmp/tiny.gguf" -p hi -n 2 --temp 0 --device cuda 2>&1); rc=$?
if [ "$rc" = 0 ] || { [ "$rc" = 2 ] && grep -Eq "no usable CUDA device|built without CUDA" <<<"$out"; }; then
  pass=$((pass + 1)); else echo "FAIL: run --device cuda: exit $rc: $out" | head -5; fail=$((fail + 1)); fi
expect_rc 0 "run --device auto" "$EMBER" run -m "$tmp/tiny.gguf" -p hi -n 2 --temp 0 --device auto
expect_rc 2 "quantize: bad --output-type" "$EMBER" quantize "$tmp/tiny.gguf" "$tmp/x.gguf" --type q8_0 --output-type q8_k
expect_rc 2 "quantize: missing --check-file" "$EMBER" quantize "$tmp/tiny.gguf" "$tmp/x.gguf" --type q8_0 --check-file "$tmp/none.txt"
expect_rc 2 "quantize: bad --gptq-scales" "$EMBER" quantize "$tmp/tiny.gguf" "$tmp/x.gguf" --type q4_0 --method gptq --gptq-scales after
expect_rc 2 "quantize: --awq-clip without awq" "$EMBER" quantize "$tmp/tiny.gguf" "$tmp/x.gguf" --type q4_0 --awq-clip
# quantize --method quarot --act-bits 4 (W4A4): the rotations are printed, eval kl names the activation bits
# (the file's, or --act-bits); bad combinations are usage errors.
out=$("$EMBER" quantize "$tmp/tiny.gguf" "$tmp/tiny-rot.gguf" --type q4_0 --method quarot --act-bits 4 --no-check 2>&1)
if ! grep -q "quarot: online Hadamard of the attention input (64), FFN input (64), ffn_down input (128) and attention output (0)" <<<"$out" \
  || [ ! -s "$tmp/tiny-rot.gguf" ]; then echo "FAIL: quantize --method quarot: $out"; fail=$((fail + 1)); else pass=$((pass + 1)); fi
for bits in "" 8; do
  out=$("$EMBER" eval kl "$tmp/tiny.gguf" "$tmp/tiny-rot.gguf" -f "$ROOT/data/persuasion.txt" --ctx 64 --chunks 1 -t 2 \
    ${bits:+--act-bits $bits} 2>&1)
  if ! grep -q "(KV cache f16, ${bits:-4}-bit activations)" <<<"$out"; then
    echo "FAIL: eval kl act bits ${bits:-file}: $out"; fail=$((fail + 1)); else pass=$((pass + 1)); fi
done
out=$("$EMBER" info "$tmp/tiny-rot.gguf" 2>&1)
if ! grep -q "rotation:      QuaRot Hadamard, online on the attention input 64" <<<"$out" || ! grep -q "activations:   4-bit" <<<"$out"; then
  echo "FAIL: info on a rotated W4A4 file: $out"; fail=$((fail + 1)); else pass=$((pass + 1)); fi
expect_rc 2 "quantize: --act-bits 4 on f32" "$EMBER" quantize "$tmp/tiny.gguf" "$tmp/x.gguf" --type f32 --act-bits 4
out=$("$EMBER" quantize "$tmp/tiny.gguf" "$tmp/x.gguf" --type q4_0 --method quarot --rotate-attn-out --no-check 2>&1)
grep -q "and attention output (64)" <<<"$out" || { echo "FAIL: --rotate-attn-out: $out"; fail=$((fail + 1)); }
expect_rc 2 "quantize: --rotate-attn-out without --rotate" "$EMBER" quantize "$tmp/tiny.gguf" "$tmp/x.gguf" --type q4_0 --rotate-attn-out
expect_rc 2 "quantize: --rotate with awq" "$EMBER" quantize "$tmp/tiny.gguf" "$tmp/x.gguf" --type q4_0 --rotate --method awq
expect_rc 2 "quantize: rotate twice" "$EMBER" quantize "$tmp/tiny-rot.gguf" "$tmp/x.gguf" --type q4_0 --rotate --no-check
expect_rc 2 "eval: --act-bits 4 on f32" "$EMBER" eval kl "$tmp/tiny.gguf" "$tmp/tiny.gguf" -f "$ROOT/data/persuasion.txt" \
  --ctx 64 --chunks 1 --act-bits 4
grep -q "4-bit activations need weights that multiply Q8_0 activations" /tmp/ember_cli_out.$$ \
  || { echo "FAIL: --act-bits 4 on f32 message"; fail=$((fail + 1)); }
expect_rc 2 "run: bad --act-bits" "$EMBER" run -m "$tmp/tiny-rot.gguf" -p hi --act-bits 3
# prune: unstructured (pruned and quantized in one pass), structured, the report; bad options are usage errors.
out=$("$EMBER" prune "$tmp/tiny.gguf" "$tmp/tiny-pruned.gguf" --method sparsegpt --sparsity 0.5 --type q8_0 \
  --quant-method gptq --calib-tokens 1024 --check-chunks 1 --speed-tokens 8 -t 2 2>&1)
if ! grep -q "prune sparsegpt unstructured (uniform layer sparsity): 14 matrices" <<<"$out" \
  || ! grep -q "14 pruned and quantized in one pass" <<<"$out" || ! grep -q "quality vs" <<<"$out" \
  || ! grep -q "size: parameters" <<<"$out" || ! grep -q "decode speed:" <<<"$out"; then
  echo "FAIL: prune sparsegpt + gptq: $out"; fail=$((fail + 1)); else pass=$((pass + 1)); fi
out=$("$EMBER" prune "$tmp/tiny.gguf" "$tmp/tiny-ffn.gguf" --ffn 0.5 --drop-layers 1 --calib-tokens 512 --no-check -t 2 2>&1)
if ! grep -q "FFN width per layer: 128 -> 64" <<<"$out" || ! grep -q "layers: removed 1 of 2" <<<"$out"; then
  echo "FAIL: prune --ffn --drop-layers: $out"; fail=$((fail + 1)); else pass=$((pass + 1)); fi
expect_rc 0 "run a structured-pruned model" "$EMBER" run -m "$tmp/tiny-ffn.gguf" -p "hello" -n 4 --temp 0 -t 2
# prune --format sparse: the pruned matrices in the sparse int8 type; ember run gives the greedy text of
# the dense Q8_0 export of the same pruned weights.
out=$("$EMBER" prune "$tmp/tiny.gguf" "$tmp/tiny-sq8.gguf" --method magnitude --sparsity 0.6 --type q8_0 \
  --format sparse --no-check -t 2 2>&1)
if ! grep -q "sparse format: 14 matrices stored sparse" <<<"$out"; then
  echo "FAIL: prune --format sparse: $out"; fail=$((fail + 1)); else pass=$((pass + 1)); fi
# magnitude without --quota row in the sparse format: the note that points to it.
if ! grep -q "note: in --format sparse every row .* add --quota row" <<<"$out"; then
  echo "FAIL: prune --format sparse without --quota row gives no note: $out"; fail=$((fail + 1))
else pass=$((pass + 1)); fi
"$EMBER" prune "$tmp/tiny.gguf" "$tmp/tiny-mag.gguf" --method magnitude --sparsity 0.6 --type q8_0 --no-check -t 2 \
  >/dev/null 2>&1
sparse_text=$("$EMBER" run -m "$tmp/tiny-sq8.gguf" -p "hello world" -n 24 --temp 0 -t 2 2>/dev/null)
dense_text=$("$EMBER" run -m "$tmp/tiny-mag.gguf" -p "hello world" -n 24 --temp 0 -t 2 2>/dev/null)
if [ -z "$sparse_text" ] || [ "$sparse_text" != "$dense_text" ]; then
  echo "FAIL: sparse and dense Q8_0 exports differ: '$sparse_text' vs '$dense_text'"; fail=$((fail + 1))
else pass=$((pass + 1)); fi
# --detect-sparsity: the dense export's matrices stored sparse at load; the same greedy text.
detect_out=$("$EMBER" run -m "$tmp/tiny-mag.gguf" -p "hello world" -n 24 --temp 0 -t 2 --detect-sparsity 2>&1 >/dev/null)
detect_text=$("$EMBER" run -m "$tmp/tiny-mag.gguf" -p "hello world" -n 24 --temp 0 -t 2 --detect-sparsity 2>/dev/null)
if ! grep -Eq "detect-sparsity: [1-9][0-9]* of 14 Q8_0 / Q4_0 block matrices stored sparse" <<<"$detect_out" \
  || [ "$detect_text" != "$dense_text" ]; then
  echo "FAIL: --detect-sparsity: '$detect_out', '$detect_text' vs '$dense_text'"; fail=$((fail + 1))
else pass=$((pass + 1)); fi
# --sparse-bits 4: Q4_0 matrices stored as sparse int4; the greedy text of the dense Q4_0 export.
out=$("$EMBER" prune "$tmp/tiny.gguf" "$tmp/tiny-sq4.gguf" --method magnitude --sparsity 0.6 --sparse-bits 4 \
  --format sparse --no-check -t 2 2>&1)
if ! grep -q "sparse format: 14 matrices stored sparse (0 int8, 14 int4)" <<<"$out"; then
  echo "FAIL: prune --format sparse --sparse-bits 4: $out"; fail=$((fail + 1)); else pass=$((pass + 1)); fi
"$EMBER" prune "$tmp/tiny.gguf" "$tmp/tiny-mag4.gguf" --method magnitude --sparsity 0.6 --type q4_0 --no-check -t 2 \
  >/dev/null 2>&1
sparse_text=$("$EMBER" run -m "$tmp/tiny-sq4.gguf" -p "hello world" -n 24 --temp 0 -t 2 2>/dev/null)
dense_text=$("$EMBER" run -m "$tmp/tiny-mag4.gguf" -p "hello world" -n 24 --temp 0 -t 2 2>/dev/null)
if [ -z "$sparse_text" ] || [ "$sparse_text" != "$dense_text" ]; then
  echo "FAIL: sparse int4 and dense Q4_0 exports differ: '$sparse_text' vs '$dense_text'"; fail=$((fail + 1))
else pass=$((pass + 1)); fi
expect_rc 2 "prune: --format sparse of q5_0" "$EMBER" prune "$tmp/tiny.gguf" "$tmp/x.gguf" --method magnitude \
  --sparsity 0.5 --type q5_0 --format sparse --no-check
expect_rc 2 "prune: --sparse-bits 4 with --type q8_0" "$EMBER" prune "$tmp/tiny.gguf" "$tmp/x.gguf" --method magnitude \
  --sparsity 0.5 --type q8_0 --sparse-bits 4 --format sparse --no-check
expect_rc 2 "prune: --sparse-bits without --format sparse" "$EMBER" prune "$tmp/tiny.gguf" "$tmp/x.gguf" \
  --method magnitude --sparsity 0.5 --sparse-bits 4 --no-check
expect_rc 2 "prune: --sparse-bits 6" "$EMBER" prune "$tmp/tiny.gguf" "$tmp/x.gguf" --method magnitude \
  --sparsity 0.5 --sparse-bits 6 --format sparse --no-check
# prune --activations: TEAL thresholds (greedy allocation, the default) in the metadata (with Q8_0 rounding in
# the same plan); ember run with
# the column kernels forced on gives the text of the dense kernels on the same thresholds.
out=$("$EMBER" prune "$tmp/tiny.gguf" "$tmp/tiny-teal.gguf" --activations 0.4 --type q8_0 --calib-tokens 512 \
  --no-check -t 2 2>&1)
if ! grep -q "activation sparsity 0.40 (greedy): thresholds for 8 of 8 block inputs" <<<"$out"; then
  echo "FAIL: prune --activations: $out"; fail=$((fail + 1)); else pass=$((pass + 1)); fi
skip_text=$("$EMBER" run -m "$tmp/tiny-teal.gguf" -p "hello world" -n 24 --temp 0 -t 2 --act-sparsity skip 2>/dev/null)
dense_text=$("$EMBER" run -m "$tmp/tiny-teal.gguf" -p "hello world" -n 24 --temp 0 -t 2 --act-sparsity dense 2>/dev/null)
if [ -z "$skip_text" ] || [ "$skip_text" != "$dense_text" ]; then
  echo "FAIL: --act-sparsity skip and dense differ: '$skip_text' vs '$dense_text'"; fail=$((fail + 1))
else pass=$((pass + 1)); fi
expect_rc 2 "prune: --activations 1.5" "$EMBER" prune "$tmp/tiny.gguf" "$tmp/x.gguf" --activations 1.5
grep -q "activations must be in (0, 1)" /tmp/ember_cli_out.$$ || { echo "FAIL: --activations message"; fail=$((fail + 1)); }
out=$("$EMBER" prune "$tmp/tiny.gguf" "$tmp/tiny-teal-u.gguf" --activations 0.4 --act-allocation uniform \
  --calib-tokens 512 --no-check --speed-tokens 0 -t 2 2>&1)
if ! grep -q "activation sparsity 0.40 (uniform): thresholds for 8 of 8 block inputs" <<<"$out"; then
  echo "FAIL: prune --act-allocation uniform: $out"; fail=$((fail + 1)); else pass=$((pass + 1)); fi
expect_rc 2 "prune: bad --act-allocation" "$EMBER" prune "$tmp/tiny.gguf" "$tmp/x.gguf" --activations 0.4 \
  --act-allocation owl
grep -q "unknown activation-sparsity allocation 'owl' (uniform, greedy)" /tmp/ember_cli_out.$$ \
  || { echo "FAIL: --act-allocation message"; fail=$((fail + 1)); }
expect_rc 2 "prune: --act-allocation without --activations" "$EMBER" prune "$tmp/tiny.gguf" "$tmp/x.gguf" \
  --method magnitude --sparsity 0.5 --act-allocation greedy
grep -q "act-allocation goes with --activations" /tmp/ember_cli_out.$$ \
  || { echo "FAIL: --act-allocation alone message"; fail=$((fail + 1)); }
expect_rc 2 "run: bad --act-sparsity" "$EMBER" run -m "$tmp/tiny-teal.gguf" -p hi --act-sparsity sometimes
expect_rc 2 "prune: bad --format" "$EMBER" prune "$tmp/tiny.gguf" "$tmp/x.gguf" --method magnitude --sparsity 0.5 \
  --format csr
expect_rc 2 "prune: --format sparse without --method" "$EMBER" prune "$tmp/tiny.gguf" "$tmp/x.gguf" --ffn 0.5 \
  --format sparse
expect_rc 2 "prune: nothing to prune" "$EMBER" prune "$tmp/tiny.gguf" "$tmp/x.gguf"
expect_rc 2 "prune: bad method" "$EMBER" prune "$tmp/tiny.gguf" "$tmp/x.gguf" --method random --sparsity 0.5
expect_rc 2 "prune: sparsity 1" "$EMBER" prune "$tmp/tiny.gguf" "$tmp/x.gguf" --method wanda --sparsity 1
expect_rc 2 "prune: bad pattern" "$EMBER" prune "$tmp/tiny.gguf" "$tmp/x.gguf" --method wanda --pattern 4:2
# --quota row: every row of a matrix keeps the same count, so the sparse rows are shorter; the sparse
# file still decodes to the dense export of the same masks.
out=$("$EMBER" prune "$tmp/tiny.gguf" "$tmp/tiny-rq.gguf" --method magnitude --sparsity 0.6 --quota row --type q8_0 \
  --format sparse --no-check -t 2 2>&1)
"$EMBER" prune "$tmp/tiny.gguf" "$tmp/tiny-rqd.gguf" --method magnitude --sparsity 0.6 --quota row --type q8_0 \
  --no-check -t 2 >/dev/null 2>&1
rq_text=$("$EMBER" run -m "$tmp/tiny-rq.gguf" -p "hello world" -n 24 --temp 0 -t 2 2>/dev/null)
rqd_text=$("$EMBER" run -m "$tmp/tiny-rqd.gguf" -p "hello world" -n 24 --temp 0 -t 2 2>/dev/null)
if ! grep -q "sparse format: 14 matrices stored sparse" <<<"$out" || [ -z "$rq_text" ] || [ "$rq_text" != "$rqd_text" ]
then echo "FAIL: prune --quota row: $out / '$rq_text' vs '$rqd_text'"; fail=$((fail + 1)); else pass=$((pass + 1)); fi
expect_rc 2 "prune: bad --quota" "$EMBER" prune "$tmp/tiny.gguf" "$tmp/x.gguf" --method magnitude --sparsity 0.5 \
  --quota column
expect_rc 2 "prune: --quota with wanda" "$EMBER" prune "$tmp/tiny.gguf" "$tmp/x.gguf" --method wanda --sparsity 0.5 \
  --quota row
expect_rc 2 "prune: --quota without --method" "$EMBER" prune "$tmp/tiny.gguf" "$tmp/x.gguf" --ffn 0.5 --quota row
expect_rc 2 "prune: owl with 2:4" "$EMBER" prune "$tmp/tiny.gguf" "$tmp/x.gguf" --method wanda --pattern 2:4 --layer-sparsity owl
expect_rc 2 "prune: unknown --layer-sparsity" "$EMBER" prune "$tmp/tiny.gguf" "$tmp/x.gguf" --method wanda \
  --sparsity 0.5 --layer-sparsity outlier
expect_rc 2 "prune: kl with 4:8" "$EMBER" prune "$tmp/tiny.gguf" "$tmp/x.gguf" --method wanda --pattern 4:8 --layer-sparsity kl
expect_rc 2 "prune: joint into q4_1" "$EMBER" prune "$tmp/tiny.gguf" "$tmp/x.gguf" --method sparsegpt --sparsity 0.5 \
  --type q4_1 --pure --quant-method gptq --no-check
grep -q "stores zero exactly" /tmp/ember_cli_out.$$ || { echo "FAIL: joint q4_1 message"; fail=$((fail + 1)); }
expect_rc 2 "prune: every layer" "$EMBER" prune "$tmp/tiny.gguf" "$tmp/x.gguf" --drop-layers 2
expect_rc 2 "prune: --ffn 1" "$EMBER" prune "$tmp/tiny.gguf" "$tmp/x.gguf" --ffn 1
# Hugging Face quantized checkpoints (GPTQ here): info names the scheme and the repacked type; run generates.
hfq="$ROOT/tests/data/model/hf_quant_gptq"
out=$("$EMBER" info "$hfq" 2>&1)
if ! grep -q "quantization:  gptq 4-bit, group 32, asym" <<<"$out" || ! grep -q "q5_0" <<<"$out"; then
  echo "FAIL: info on a GPTQ folder: $out"; fail=$((fail + 1)); else pass=$((pass + 1)); fi
expect_rc 0 "run on a GPTQ folder" "$EMBER" run -m "$hfq" -p "hello" -n 4 --temp 0 -t 2
sed 's/"bits": 4/"bits": 3/' "$hfq/config.json" > "$tmp/cfg3.json"
mkdir -p "$tmp/gptq3" && cp "$tmp/cfg3.json" "$tmp/gptq3/config.json" && cp "$hfq/model.safetensors" "$tmp/gptq3/"
expect_rc 2 "3-bit GPTQ is rejected" "$EMBER" info "$tmp/gptq3"
grep -q "quantization_config.bits = 3 is not supported" /tmp/ember_cli_out.$$ || { echo "FAIL: 3-bit message"; fail=$((fail + 1)); }
printf 'GGUF\x03\x00\x00\x00garbage' > "$tmp/bad.gguf"
expect_rc 2 "corrupt gguf (run)" "$EMBER" run -m "$tmp/bad.gguf" -p hi
expect_rc 2 "corrupt gguf (info)" "$EMBER" info "$tmp/bad.gguf"
: > "$tmp/empty.gguf"
expect_rc 2 "empty file" "$EMBER" info "$tmp/empty.gguf"
mkdir "$tmp/dir.gguf"
expect_rc 2 "directory as model" "$EMBER" info "$tmp/dir.gguf"

if [ -f "$MODEL" ]; then
  out=$("$EMBER" run -m "$MODEL" -p "The capital of France is" -n 12 --temp 0 -t 2 2>"$tmp/err")
  if ! grep -q "capital" <<<"$out"; then echo "FAIL: greedy run: unexpected text: $out"; fail=$((fail + 1)); else pass=$((pass + 1)); fi
  if ! grep -Eq "prompt: 6 tokens, [0-9.]+ tok/s \| generated: 12 tokens, [0-9.]+ tok/s" "$tmp/err"; then
    echo "FAIL: run statistics line missing"; cat "$tmp/err"; fail=$((fail + 1)); else pass=$((pass + 1)); fi
  a=$("$EMBER" run -m "$MODEL" -p "Once upon a time" -n 16 --seed 7 -t 2 2>/dev/null)
  b=$("$EMBER" run -m "$MODEL" -p "Once upon a time" -n 16 --seed 7 -t 1 2>/dev/null)
  if [ "$a" != "$b" ]; then echo "FAIL: same seed, different output:"; echo "$a"; echo "$b"; fail=$((fail + 1)); else pass=$((pass + 1)); fi
  expect_rc 0 "chat run" "$EMBER" run -m "$MODEL" --chat -p "Say hello." -n 8 --temp 0
  expect_rc 0 "info" "$EMBER" info "$MODEL"
  expect_rc 0 "tokenize" "$EMBER" tokenize -m "$MODEL" --pieces "Hello world"
  expect_rc 0 "bench" "$EMBER" bench -m "$MODEL" -p 16 -n 4 -r 1 --no-bandwidth
  expect_rc 0 "bench sweep + json" "$EMBER" bench -m "$MODEL" -p 8,16 -n 2 -t 1,2 -r 1 --no-bandwidth --json "$tmp/b.json"
  if ! grep -q "\"test\": \"pp16\"" "$tmp/b.json"; then echo "FAIL: bench json lacks pp16"; fail=$((fail + 1)); else pass=$((pass + 1)); fi
  expect_rc 2 "bench bad list" "$EMBER" bench -m "$MODEL" -p 8,x
  expect_rc 0 "bench throughput" "$EMBER" bench throughput -m "$MODEL" --num-prompts 3 --input-len 8 --output-len 4
  expect_rc 2 "bench throughput bad count" "$EMBER" bench throughput -m "$MODEL" --num-prompts 0
  expect_rc 0 "bench latency batches" "$EMBER" bench latency -m "$MODEL" -p 8 -n 2 -b 1,3 -r 1 --no-bandwidth --json "$tmp/l.json"
  if ! grep -q "\"batch\": 3" "$tmp/l.json"; then echo "FAIL: bench json lacks batch 3"; fail=$((fail + 1)); else pass=$((pass + 1)); fi
  printf '{"prompt": "Hello there", "output_len": 3}\n{"prompt_token_ids": [2, 100], "output_len": 2}\n' >"$tmp/ds.jsonl"
  expect_rc 0 "bench throughput dataset" "$EMBER" bench throughput -m "$MODEL" --dataset "$tmp/ds.jsonl"
  printf '{"prompt": 5}\n' >"$tmp/bad.jsonl"
  expect_rc 2 "bench throughput bad dataset" "$EMBER" bench throughput -m "$MODEL" --dataset "$tmp/bad.jsonl"
  expect_rc 2 "bench throughput bad ratio" "$EMBER" bench throughput -m "$MODEL" --random-range-ratio 1.5
  # KV cache dtypes: a q8 cache runs and still answers; a bad dtype is a usage error; the capacity lines.
  out=$("$EMBER" run -m "$MODEL" -p "The capital of France is" -n 12 --temp 0 -t 2 --kv-cache-dtype q8 2>/dev/null)
  if ! grep -q "capital" <<<"$out"; then echo "FAIL: q8 KV run: unexpected text: $out"; fail=$((fail + 1)); else pass=$((pass + 1)); fi
  expect_rc 2 "bad kv dtype" "$EMBER" run -m "$MODEL" -p hi --kv-cache-dtype q5
  expect_rc 0 "run -ctk/-ctv" "$EMBER" run -m "$MODEL" -p hi -n 2 --temp 0 -ctk q4 -ctv f16
  # q4c (KIVI keys; --kv-cache-dtype q4c = K q4c, V q4) runs; as a V format it is a usage error.
  out=$("$EMBER" run -m "$MODEL" -p "The capital of France is" -n 12 --temp 0 -t 2 --kv-cache-dtype q4c 2>/dev/null)
  if ! grep -q "capital" <<<"$out"; then echo "FAIL: q4c KV run: unexpected text: $out"; fail=$((fail + 1)); else pass=$((pass + 1)); fi
  out=$("$EMBER" bench throughput -m "$MODEL" --num-prompts 2 --input-len 20 --output-len 4 --kv-cache-dtype q4c 2>&1)
  if ! grep -Eq "KV cache k=q4c,v=q4\+hadamard-v: [0-9]+ bytes per token" <<<"$out"; then
    echo "FAIL: bench throughput q4c KV line: $out"; fail=$((fail + 1)); else pass=$((pass + 1)); fi
  expect_rc 2 "q4c for V" "$EMBER" run -m "$MODEL" -p hi -n 2 -ctv q4c
  out=$("$EMBER" bench throughput -m "$MODEL" --num-prompts 2 --input-len 8 --output-len 2 --kv-cache-dtype q8 2>&1)
  if ! grep -Eq "KV cache q8(\+hadamard)?: [0-9]+ bytes per token" <<<"$out"; then
    echo "FAIL: bench throughput KV line: $out"; fail=$((fail + 1)); else pass=$((pass + 1)); fi
else
  echo "default model not installed: model checks skipped"
fi
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
