#!/usr/bin/env bash
# End-to-end checks of `ember distill` on a tiny random teacher (gen-model):
# bad flags are usage errors; a student with a layer dropped trains and is
# written; Ctrl-C (SIGINT) mid-run writes a checkpoint and exits 130, and
# --resume then gives the uninterrupted run's file byte for byte; a damaged
# or foreign checkpoint is refused; a teacher cache is built, reused, and
# gives the same file on reuse; the student loads in `ember run` and serves
# as the teacher's speculative draft with the same greedy output; teacher-
# generated text trains a student without any data file.
# Usage: distill_cli_test.sh path/to/ember
set -u
EMBER="$1"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
fail=0
pass=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
check() {  # check DESCRIPTION CONDITION...
  local what="$1"; shift
  if "$@"; then pass=$((pass + 1)); else echo "FAIL: $what"; fail=$((fail + 1)); fi
}
run_rc() {  # run_rc LOG CMD...: the exit code, output in LOG
  local log="$1"; shift
  "$@" >"$log" 2>&1
  echo $?
}

"$EMBER" gen-model --arch llama --n-layer 4 --n-embd 64 --n-ff 128 --n-head 4 --n-head-kv 2 --n-vocab 600 \
  --type f32 --seed 3 -o "$tmp/teacher.gguf" >/dev/null 2>&1 || { echo "FAIL: gen-model"; exit 1; }
head -c 40000 "$ROOT/data/calibration.txt" > "$tmp/train.txt"
printf '{"text": "A held-out line of text for the evaluation."}\n{"text": "%s"}\n' \
  "$(head -c 3000 "$ROOT/data/persuasion.txt" | tr -d '"\\\n')" > "$tmp/eval.jsonl"
COMMON=(--teacher "$tmp/teacher.gguf" --data "$tmp/train.txt" --eval-data "$tmp/eval.jsonl" --eval-windows 4
        --seq-len 32 --batch 4 --lr 3e-3 --seed 7 -t 2)

# Usage errors.
check "bad --train" [ "$(run_rc "$tmp/l" "$EMBER" distill "${COMMON[@]}" --drop-layers 1 --train bogus -o "$tmp/x.gguf")" = 2 ]
check "bad --keep-ffn" [ "$(run_rc "$tmp/l" "$EMBER" distill "${COMMON[@]}" --keep-ffn 1.5 -o "$tmp/x.gguf")" = 2 ]
check "two students" [ "$(run_rc "$tmp/l" "$EMBER" distill "${COMMON[@]}" --drop-layers 1 --keep-layers 0,1 -o "$tmp/x.gguf")" = 2 ]
check "no data" [ "$(run_rc "$tmp/l" "$EMBER" distill --teacher "$tmp/teacher.gguf" --drop-layers 1 -o "$tmp/x.gguf")" = 2 ]
check "missing data file" [ "$(run_rc "$tmp/l" "$EMBER" distill "${COMMON[@]}" --drop-layers 1 --data "$tmp/none.txt" -o "$tmp/x.gguf")" = 2 ]
check "resume without a checkpoint" [ "$(run_rc "$tmp/l" "$EMBER" distill "${COMMON[@]}" --drop-layers 1 --resume -o "$tmp/x.gguf")" = 2 ]
check "no output" [ "$(run_rc "$tmp/l" "$EMBER" distill "${COMMON[@]}" --drop-layers 1)" = 2 ]

# An uninterrupted run.
RUN=("${COMMON[@]}" --drop-layers 1 --train all --tokens 40000 --checkpoint-every 40)
rc=$(run_rc "$tmp/a.log" "$EMBER" distill "${RUN[@]}" -o "$tmp/a.gguf")
check "distill runs (rc $rc)" [ "$rc" = 0 ]
check "the student is written" [ -s "$tmp/a.gguf" ]
check "evaluations printed" grep -q "eval at step 0" "$tmp/a.log"
kl0=$(sed -n 's/^eval at step 0 .*KL \([0-9.]*\).*/\1/p' "$tmp/a.log")
kl1=$(sed -n 's/^eval at step [1-9].*KL \([0-9.]*\).*/\1/p' "$tmp/a.log" | tail -1)
check "held-out KL falls ($kl0 -> $kl1)" awk -v a="$kl0" -v b="$kl1" 'BEGIN { exit !(b < 0.7 * a) }'

# Interrupted by SIGINT after the first progress line, then resumed.
"$EMBER" distill "${RUN[@]}" -o "$tmp/b.gguf" >"$tmp/b.log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do
  grep -q '^\[' "$tmp/b.log" 2>/dev/null && break
  sleep 0.05
done
kill -INT "$pid"
wait "$pid"
rc=$?
check "SIGINT exits 130 (rc $rc)" [ "$rc" = 130 ]
check "SIGINT writes a checkpoint" [ -s "$tmp/b.gguf.ckpt" ]
check "interrupted message" grep -q "interrupted at step" "$tmp/b.log"
cp "$tmp/b.gguf.ckpt" "$tmp/good.ckpt"
head -c 1000 "$tmp/good.ckpt" > "$tmp/b.gguf.ckpt"
rc=$(run_rc "$tmp/c.log" "$EMBER" distill "${RUN[@]}" --resume -o "$tmp/b.gguf")
check "truncated checkpoint refused (rc $rc)" [ "$rc" = 2 ] && check "truncated message" grep -q "truncated" "$tmp/c.log"
cp "$tmp/good.ckpt" "$tmp/b.gguf.ckpt"
rc=$(run_rc "$tmp/c.log" "$EMBER" distill "${RUN[@]}" --lr 1e-3 --resume -o "$tmp/b.gguf")
check "checkpoint of other options refused (rc $rc)" [ "$rc" = 2 ] && check "options message" grep -q "other training options" "$tmp/c.log"
rc=$(run_rc "$tmp/c.log" "$EMBER" distill "${RUN[@]}" --resume -o "$tmp/b.gguf")
check "resume runs (rc $rc)" [ "$rc" = 0 ]
check "resumed from the interruption" grep -q "resumed from .* at step [1-9]" "$tmp/c.log"
check "resumed run gives the uninterrupted file byte for byte" cmp -s "$tmp/a.gguf" "$tmp/b.gguf"

# A teacher cache: built, reused, the same student both times.
CACHED=("${COMMON[@]}" --drop-layers 1 --train layers --tokens 8000 --teacher-cache "$tmp/cache.bin" --cache-samples 8)
rc=$(run_rc "$tmp/d.log" "$EMBER" distill "${CACHED[@]}" -o "$tmp/d.gguf")
check "cached teacher run (rc $rc)" [ "$rc" = 0 ] && check "cache written" grep -q "teacher cache .* written" "$tmp/d.log"
rc=$(run_rc "$tmp/e.log" "$EMBER" distill "${CACHED[@]}" -o "$tmp/e.gguf")
check "cache reused (rc $rc)" [ "$rc" = 0 ] && check "not rebuilt" bash -c "! grep -q 'teacher cache .* written' '$tmp/e.log'"
check "reused cache gives the same student" cmp -s "$tmp/d.gguf" "$tmp/e.gguf"
printf 'x' | dd of="$tmp/cache.bin" bs=1 seek=100 conv=notrunc 2>/dev/null
rc=$(run_rc "$tmp/f.log" "$EMBER" distill "${CACHED[@]}" -o "$tmp/f.gguf")
check "damaged cache refused (rc $rc)" [ "$rc" = 2 ]

# Teacher-generated text alone as the data.
rc=$(run_rc "$tmp/i.log" "$EMBER" distill --teacher "$tmp/teacher.gguf" --drop-layers 1 --generate 600 --tokens 1000 \
  --seq-len 32 --batch 2 --eval-windows 2 -t 2 -o "$tmp/gen.gguf")
check "--generate run (rc $rc)" [ "$rc" = 0 ] && check "--generate message" grep -q "generated [0-9]* tokens" "$tmp/i.log"

# The student runs and drafts for its teacher (greedy output unchanged).
check "student runs" [ "$(run_rc "$tmp/g.log" "$EMBER" run -m "$tmp/a.gguf" -p "It was" -n 8 --temp 0 -t 2)" = 0 ]
"$EMBER" run -m "$tmp/teacher.gguf" -p "It was the" -n 24 --temp 0 -t 2 >"$tmp/plain.txt" 2>/dev/null
rc=$(run_rc "$tmp/h.log" "$EMBER" run -m "$tmp/teacher.gguf" -p "It was the" -n 24 --temp 0 -t 2 \
  --speculative-method draft --speculative-model "$tmp/a.gguf")
check "draft run (rc $rc)" [ "$rc" = 0 ]
"$EMBER" run -m "$tmp/teacher.gguf" -p "It was the" -n 24 --temp 0 -t 2 --speculative-method draft \
  --speculative-model "$tmp/a.gguf" >"$tmp/spec.txt" 2>/dev/null
check "draft keeps the greedy output" cmp -s "$tmp/plain.txt" "$tmp/spec.txt"

echo "distill_cli_test: $pass passed, $fail failed"
[ "$fail" = 0 ]
