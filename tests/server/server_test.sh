#!/usr/bin/env bash
# End-to-end test of `ember serve`: starts the server on a free port with an
# API key and a small KV cache, runs the Python suites against it
# (openai_client_test.py, structured_output_test.py, tool_calls_test.py, hostile_test.py, load_test.py), then stops it with
# SIGTERM and checks that it exits 0 within a few seconds. The reasoning
# suite (reasoning_test.py) runs against a second server with a reasoning
# model's chat template and a thinking budget.
# Usage: server_test.sh path/to/ember [SUITE...]
#   (SUITE: openai_client structured_output tool_calls hostile load reasoning)
# Env: EMBER_TEST_MODEL (default models/gemma-3-270m-q4_k_m.gguf),
#      EMBER_TEST_THREADS (compute threads, default 2).
# Exit: 0 passed, 1 failed, 77 skipped (model file or the openai package missing).
set -u
EMBER="${1:?usage: server_test.sh path/to/ember [SUITE...]}"
shift
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
MODEL="${EMBER_TEST_MODEL:-$ROOT/models/gemma-3-270m-q4_k_m.gguf}"
THREADS="${EMBER_TEST_THREADS:-2}"
SUITES=("$@")
[ ${#SUITES[@]} -eq 0 ] && SUITES=(openai_client structured_output tool_calls hostile load reasoning)

if [ ! -f "$MODEL" ]; then echo "SKIP: model $MODEL not found"; exit 77; fi
if ! python3 -c "import openai" 2>/dev/null; then echo "SKIP: python3 'openai' package not installed"; exit 77; fi
if [ ! -x "$EMBER" ]; then echo "FAIL: $EMBER is not an executable"; exit 1; fi

tmp=$(mktemp -d)
pid=""
pid2=""
cleanup() {
  for p in "$pid" "$pid2"; do
    if [ -n "$p" ] && kill -0 "$p" 2>/dev/null; then kill -KILL "$p" 2>/dev/null; fi
  done
  rm -rf "$tmp"
}
trap cleanup EXIT

KEY="test-key-$$-$RANDOM"
# start_server NAME ARGS...: runs `ember serve` with ARGS on a free port
# (output in $tmp/NAME.out, .err); sets $started_pid and $started_url.
start_server() {
  local name=$1
  shift
  "$EMBER" serve -m "$MODEL" --port 0 --api-key "$KEY" -t "$THREADS" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  started_pid=$!
  started_url=""
  for _ in $(seq 1 600); do
    started_url=$(grep -o 'listening on http://[^ ]*' "$tmp/$name.out" 2>/dev/null | sed 's/listening on //')
    [ -n "$started_url" ] && break
    if ! kill -0 "$started_pid" 2>/dev/null; then
      echo "FAIL: ember serve ($name) exited before listening"; sed 's/^/   | /' "$tmp/$name.err" | tail -20; exit 1
    fi
    sleep 0.1
  done
  if [ -z "$started_url" ]; then echo "FAIL: ember serve ($name) did not print its listening line within 60 s"; exit 1; fi
  echo "ember serve $name (pid $started_pid) at $started_url"
}

# --max-model-len keeps the context-length checks (which prefill a full
# context) cheap on small CI machines, and leaves room for the tool
# definitions in the prompt. No tool-call flag: the default model's (Gemma)
# template shows no tool format, and tools work in the generic one.
start_server main --kv-cache-memory 256M --max-model-len 1024
pid=$started_pid
url=$started_url
ln -sf "$tmp/main.out" "$tmp/out"
ln -sf "$tmp/main.err" "$tmp/err"

fail=0
start=$(date +%s)
# The KV capacity the server prints and exports (Gemma 3 270M, the default
# f16 cache: 18 layers x 256 x (K + V) x 2 bytes per token).
if ! grep -Eq "KV cache dtype f16, 18432 bytes per token: [0-9]+ tokens, [0-9]+ sequences of 1024 tokens" "$tmp/err"; then
  echo "FAIL: ember serve did not print its KV capacity"; sed 's/^/   | /' "$tmp/err" | head -5; fail=1
fi
python3 - "$url" "$KEY" <<'PYEOF' || { echo "FAIL: /metrics lacks the KV bytes-per-token gauge"; fail=1; }
import sys, urllib.request
req = urllib.request.Request(sys.argv[1] + "/metrics", headers={"Authorization": "Bearer " + sys.argv[2]})
body = urllib.request.urlopen(req, timeout=30).read().decode()
sys.exit(0 if "\nember:kv_cache_bytes_per_token 18432\n" in body else 1)
PYEOF
for s in "${SUITES[@]}"; do
  [ "$s" = reasoning ] && continue
  t0=$(date +%s)
  python3 "$HERE/${s}_test.py" --base-url "$url" --api-key "$KEY" --pid "$pid"
  rc=$?
  echo "suite $s: exit $rc in $(( $(date +%s) - t0 )) s"
  if [ $rc -ne 0 ]; then fail=1; fi
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "FAIL: ember serve died during suite $s"; sed 's/^/   | /' "$tmp/err" | tail -20; pid=""; exit 1
  fi
done

# The reasoning suite, on its own servers: DeepSeek-R1-Distill-Qwen's
# template (it opens the thinking section) with a thinking budget, then
# gpt-oss's (the harmony format).
# run_reasoning NAME SUITE_FLAG TEMPLATE SERVER_ARGS...
run_reasoning() {
  local name=$1 flag=$2 template=$3
  shift 3
  start_server "$name" --kv-cache-memory 128M --chat-template "$ROOT/tests/data/template/templates/$template" "$@"
  pid2=$started_pid
  local t0
  t0=$(date +%s)
  python3 "$HERE/reasoning_test.py" $flag --base-url "$started_url" --api-key "$KEY" --pid "$pid2"
  local rc=$?
  echo "suite reasoning ($name): exit $rc in $(( $(date +%s) - t0 )) s"
  if [ $rc -ne 0 ]; then fail=1; sed 's/^/   | /' "$tmp/$name.err" | tail -5; fi
  kill -TERM "$pid2" 2>/dev/null
  wait "$pid2" 2>/dev/null
  pid2=""
}
for s in "${SUITES[@]}"; do
  [ "$s" = reasoning ] || continue
  run_reasoning r1 "" deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja --max-model-len 512 \
    --reasoning-budget 12 --reasoning-budget-message " Time is up."
  run_reasoning harmony --harmony openai-gpt-oss-120b.jinja --max-model-len 1024 --reasoning-budget 12
done

# Graceful shutdown: SIGTERM while a streaming request is in flight. The
# stream must still end properly ([DONE]) and the server exit 0 within a few
# seconds.
python3 - "$url" "$KEY" >"$tmp/inflight" 2>&1 <<'PYEOF' &
import http.client, json, sys, urllib.parse
u = urllib.parse.urlparse(sys.argv[1])
c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
c.request("POST", "/v1/completions", json.dumps({"prompt": "Count: one, two,", "max_tokens": 24,
          "ignore_eos": True, "temperature": 0, "stream": True}),
          {"Authorization": "Bearer " + sys.argv[2], "Content-Type": "application/json"})
r = c.getresponse()
print("started", r.status, flush=True)
lines = [l.decode().strip() for l in r]
print("events", sum(1 for l in lines if l.startswith("data: {")), "done", "data: [DONE]" in lines, flush=True)
PYEOF
client=$!
for _ in $(seq 1 100); do grep -q started "$tmp/inflight" 2>/dev/null && break; sleep 0.05; done
kill -TERM "$pid"
rc=""
for _ in $(seq 1 100); do
  if ! kill -0 "$pid" 2>/dev/null; then wait "$pid"; rc=$?; break; fi
  sleep 0.1
done
if [ -z "$rc" ]; then
  echo "FAIL: ember serve still running 10 s after SIGTERM (killing it)"; sed 's/^/   | /' "$tmp/err" | tail -5
  fail=1; kill -KILL "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
elif [ "$rc" -ne 0 ]; then
  echo "FAIL: ember serve exited $rc after SIGTERM"; sed 's/^/   | /' "$tmp/err" | tail -10; fail=1
else
  echo "ember serve exited 0 after SIGTERM"
fi
pid=""
wait "$client"
if ! grep -q "started 200" "$tmp/inflight" || ! grep -q "events 24 done True" "$tmp/inflight"; then
  echo "FAIL: the stream in flight at SIGTERM did not finish:"; sed 's/^/   | /' "$tmp/inflight"; fail=1
else
  echo "stream in flight at SIGTERM finished (24 tokens, [DONE])"
fi
echo "server_test: $([ $fail -eq 0 ] && echo PASSED || echo FAILED) in $(( $(date +%s) - start )) s"
exit $fail
