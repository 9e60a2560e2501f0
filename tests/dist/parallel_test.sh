#!/usr/bin/env bash
# Tensor and pipeline parallelism over real MPI ranks on this machine
# (mpirun --oversubscribe --bind-to none; as root --allow-run-as-root):
#  1. TP=2 and PP=2 give the same greedy tokens as one rank on the tiny f32
#     models (Llama, Qwen2, Qwen3, Gemma 3: split and replicated KV heads,
#     biases, QK norms, sliding windows, tied and untied heads), every logits
#     row within 1e-5;
#  2. the default model through the engine with TP=2 and PP=2: batch
#     invariance, preemption and the prefix cache hold (parallel_driver's
#     checks), and PP gives one rank's bits exactly;
#  3. two "hosts": TP=2 across two network namespaces joined by a veth pair,
#     over TCP (skipped with the reason where namespaces cannot be made);
#  4. `ember serve`: a rank killed mid-stream under TP=2, a rank stopped
#     (silent) under PP=2: the job ends with a clear error on rank 0, no
#     hang, and the request in flight (streaming until then) gets an error;
#  and: TP=2 x PP=2 (4 ranks) gives TP=2's bits; TP=2 twice gives the same
#  bits; fused matrices, LongRoPE and Mixture-of-Experts models under TP=2
#  (1b); n-gram and draft-model speculation under TP=2 and PP=2 give the
#  target's text; PP stages balanced by measured time give one rank's text;
#  bad sizes and plans are clear errors.
# Usage: parallel_test.sh [path/to/ember_parallel_driver path/to/ember]   (none: built without MPI)
# Exit: 0 passed, 1 failed, 77 skipped.
set -u
DRIVER="${1:-}"
EMBER="${2:-}"
if [ -z "$DRIVER" ]; then
  echo "SKIP: ember was built without MPI (run scripts/setup_mpi.sh, then reconfigure)"
  exit 77
fi
if ! command -v mpirun >/dev/null; then echo "SKIP: mpirun not found (scripts/setup_mpi.sh installs OpenMPI)"; exit 77; fi
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
DATA="$ROOT/tests/data/model"
MODEL="$ROOT/models/gemma-3-270m-q4_k_m.gguf"
MPIRUN=(mpirun --oversubscribe --bind-to none)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
export OMPI_MCA_btl_base_warn_component_unused=0
tmp=$(mktemp -d)
cleanup() {
  [ -n "${srv:-}" ] && kill "$srv" 2>/dev/null
  ip netns del "$NS_A" 2>/dev/null
  ip netns del "$NS_B" 2>/dev/null
  rm -rf "$tmp"
}
NS_A=ember-par-a NS_B=ember-par-b
trap cleanup EXIT
fail=0
pass=0
ok() { echo "ok   [${SECONDS}s] $1"; pass=$((pass + 1)); }
bad() { echo "FAIL [${SECONDS}s] $1"; fail=$((fail + 1)); }

# run NAME MODE MODEL SUITE [mpirun options...]: one driver run into $tmp/NAME
run() {
  local name=$1 mode=$2 model=$3 suite=$4
  shift 4
  if [ "$mode" = single ]; then
    timeout -k 10 300 "$DRIVER" "$model" single "$suite" "$tmp/$name" >"$tmp/$name.log" 2>&1
  else
    local np=2
    [ "$mode" = tppp ] && np=4
    timeout -k 10 300 "${MPIRUN[@]}" "$@" -np $np "$DRIVER" "$model" "$mode" "$suite" "$tmp/$name" >"$tmp/$name.log" 2>&1
  fi
}

# 1. Tiny f32 models: every logits row within 1e-5 of one rank's.
for m in hf_llama_sharded hf_qwen2 hf_qwen3 hf_gemma3; do
  if ! run "$m.single" single "$DATA/$m" logits; then bad "$m: one rank"; cat "$tmp/$m.single.log"; continue; fi
  for mode in tp pp; do
    if run "$m.$mode" "$mode" "$DATA/$m" logits &&
       "$DRIVER" compare "$tmp/$m.single" "$tmp/$m.$mode" 1e-5 >"$tmp/$m.$mode.cmp" 2>&1; then
      ok "$m ${mode^^}=2: $(grep -o '[0-9]* logits rows.*' "$tmp/$m.$mode.cmp" | head -1)"
    else
      bad "$m ${mode^^}=2"; cat "$tmp/$m.$mode.log" "$tmp/$m.$mode.cmp" 2>/dev/null
    fi
  done
done

# 1b. What TP used to refuse, TP=2 against one rank (every logits row within
#     1e-5): fused Q|K|V and gate|up with LongRoPE (a tiny f32 Phi-3 made by
#     gen-model; rank 0 runs the short factors, the other rank loads with
#     the long ones until the session start gives it rank 0's choice; PP=2
#     too), and Mixture-of-Experts models (experts split by their FFN width:
#     OLMoE with its whole-row QK-norm, 3-D and fused gate|up experts;
#     Qwen2-MoE's gated shared expert; Qwen3-MoE; Mixtral's per-expert
#     matrices; gpt-oss's expert biases and attention sinks).
moe_models=(hf_olmoe hf_olmoe_fused hf_qwen2moe hf_qwen3moe hf_mixtral hf_gptoss)
phi3="$tmp/phi3_longrope.gguf"
if [ -n "$EMBER" ] && "$EMBER" gen-model --shape phi-3.5-mini --n-layer 2 --n-embd 64 --n-ff 128 --n-head 4 \
     --n-head-kv 2 --head-dim 16 --n-vocab 512 --type f32 -o "$phi3" >"$tmp/phi3.gen.log" 2>&1; then
  moe_models=("$phi3" "${moe_models[@]}")
else
  bad "gen-model of a tiny Phi-3"; cat "$tmp/phi3.gen.log" 2>/dev/null
fi
for m in "${moe_models[@]}"; do
  path="$DATA/$m"
  [ "$m" = "$phi3" ] && { path=$phi3; m=phi3_longrope; export PARALLEL_DRIVER_SHORT_ROPE=1; }
  modes=(tp)
  [ "$m" = phi3_longrope ] && modes=(tp pp)
  if ! run "$m.single" single "$path" logits; then bad "$m: one rank"; cat "$tmp/$m.single.log"; unset PARALLEL_DRIVER_SHORT_ROPE; continue; fi
  for mode in "${modes[@]}"; do
    if run "$m.$mode" "$mode" "$path" logits &&
       "$DRIVER" compare "$tmp/$m.single" "$tmp/$m.$mode" 1e-5 >"$tmp/$m.$mode.cmp" 2>&1; then
      ok "$m ${mode^^}=2: $(grep -o '[0-9]* logits rows.*' "$tmp/$m.$mode.cmp" | head -1)"
    else
      bad "$m ${mode^^}=2"; cat "$tmp/$m.$mode.log" "$tmp/$m.$mode.cmp" 2>/dev/null
    fi
  done
  unset PARALLEL_DRIVER_SHORT_ROPE
done
# MXFP4 experts whose width (32) splits into halves of 16: not whole 32-element blocks.
if ! run gptoss_mxfp4.tp tp "$DATA/hf_gptoss_mxfp4" logits &&
   grep -q "ffn_down_exps: its 32 input columns split into parts of 16 do not fall on mxfp4's 32-element blocks" \
     "$tmp/gptoss_mxfp4.tp.log"; then
  ok "MXFP4 experts of width 32 over 2 ranks: '$(grep -o 'layer [0-9]* ffn_down_exps: .*' "$tmp/gptoss_mxfp4.tp.log" | head -1 | cut -c1-110)'"
else
  bad "MXFP4 experts that cannot be split on block boundaries"; cat "$tmp/gptoss_mxfp4.tp.log"
fi

# Both kinds (4 ranks: 2 stages of 2 tensor ranks): TP's bits exactly (a
# pipeline changes no arithmetic), so within 1e-5 of one rank.
for m in hf_qwen2 hf_gemma3; do
  if run "$m.tppp" tppp "$DATA/$m" logits &&
     "$DRIVER" compare "$tmp/$m.tp" "$tmp/$m.tppp" 0 >"$tmp/$m.tppp.cmp" 2>&1; then
    ok "$m TP=2 x PP=2 = TP=2 bit for bit: $(grep -o '[0-9]* logits rows of [0-9]*' "$tmp/$m.tppp.cmp")"
  else
    bad "$m TP=2 x PP=2"; cat "$tmp/$m.tppp.log" "$tmp/$m.tppp.cmp" 2>/dev/null
  fi
done

# Deterministic: the same ranks and threads give the same bits run after run.
m=hf_gemma3
if run "$m.tp.again" tp "$DATA/$m" logits &&
   "$DRIVER" compare "$tmp/$m.tp" "$tmp/$m.tp.again" 0 >"$tmp/$m.again.cmp" 2>&1; then
  ok "$m TP=2 twice: the same bits ($(grep -o '[0-9]* logits rows of [0-9]*' "$tmp/$m.again.cmp"))"
else
  bad "$m TP=2 twice"; cat "$tmp/$m.tp.again.log" "$tmp/$m.again.cmp" 2>/dev/null
fi

# Bad input: a clear error on every rank and a prompt exit, never a hang.
if [ -n "$EMBER" ] && [ -f "$MODEL" ]; then
  # expect NAME "MESSAGE" NP ember-args...
  expect() {
    local name=$1 said=$2 np=$3
    shift 3
    local t0=$SECONDS
    if [ "$np" = 0 ]; then timeout -k 10 120 "$EMBER" "$@" >"$tmp/bad.out" 2>&1
    else timeout -k 10 120 "${MPIRUN[@]}" -np "$np" "$EMBER" "$@" >"$tmp/bad.out" 2>&1; fi
    local rc=$?
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "$said" "$tmp/bad.out"; then
      ok "$name: exit $rc in $((SECONDS - t0)) s, '$(grep -o "$said.*" "$tmp/bad.out" | head -1 | cut -c1-90)'"
    else
      bad "$name (exit $rc)"; cat "$tmp/bad.out"
    fi
  }
  b=(run -m "$MODEL" -p hi -n 2 -t 1)
  expect "4 heads over 3 ranks" "4 attention heads, not a multiple of 3" 3 "${b[@]}" --tensor-parallel-size 3
  expect "fewer ranks than the plan" "needs 2 ranks, but the job has 1" 0 "${b[@]}" --tensor-parallel-size 2
  expect "stage bounds" "pipeline-layers (layers per stage) expects integers in \[1, 18\]" 2 "${b[@]}" --pipeline-parallel-size 2 \
    --pipeline-layers 2,0
  expect "TP x PP on too few ranks" "needs 4 ranks, but the job has 2" 2 "${b[@]}" --pipeline-parallel-size 2 \
    --tensor-parallel-size 2
  expect "layerskip with a split target" "drafts with the target's own layers" 2 "${b[@]}" \
    --tensor-parallel-size 2 --speculative-method layerskip
  expect "an unknown stage balance" "pipeline-balance must be bytes or measured" 2 "${b[@]}" \
    --pipeline-parallel-size 2 --pipeline-balance fastest
fi

# 2. The default model through the engine.
if [ -f "$MODEL" ]; then
  run def.single single "$MODEL" engine || { bad "default model, one rank"; cat "$tmp/def.single.log"; }
  for mode in tp pp; do
    if run "def.$mode" "$mode" "$MODEL" engine && ! grep -q FAIL "$tmp/def.$mode.log"; then
      ok "default model ${mode^^}=2 through the engine: $(grep -c '^ok' "$tmp/def.$mode.log") checks"
      sed 's/^/       /' "$tmp/def.$mode.log" | grep -E '^ *ok' || true
    else
      bad "default model ${mode^^}=2"; cat "$tmp/def.$mode.log"
    fi
  done
  # A pipeline runs the same arithmetic split over processes: one rank's bits.
  if "$DRIVER" compare "$tmp/def.single" "$tmp/def.pp" 0 >"$tmp/def.cmp" 2>&1; then
    ok "default model PP=2 = one rank, bit for bit ($(grep -o '[0-9]* logits rows of [0-9]*' "$tmp/def.cmp"))"
  else
    bad "default model PP=2 against one rank"; cat "$tmp/def.cmp"
  fi
  # The commands: ember run -pp 2 prints one rank's text; ember run -tp 2 and
  # ember bench -tp 2 run.
  if [ -n "$EMBER" ]; then
    args=(run -m "$MODEL" -p "The three primary colors are" -n 12 --temp 0 -t 1)
    "$EMBER" "${args[@]}" >"$tmp/run1.txt" 2>"$tmp/run1.err"
    timeout -k 10 300 "${MPIRUN[@]}" -np 2 "$EMBER" "${args[@]}" --pipeline-parallel-size 2 >"$tmp/runpp.txt" 2>"$tmp/runpp.err"
    timeout -k 10 300 "${MPIRUN[@]}" -np 2 "$EMBER" "${args[@]}" --tensor-parallel-size 2 >"$tmp/runtp.txt" 2>"$tmp/runtp.err"
    if [ -s "$tmp/run1.txt" ] && cmp -s "$tmp/run1.txt" "$tmp/runpp.txt" && [ -s "$tmp/runtp.txt" ]; then
      ok "ember run -pp 2 prints one rank's text ('$(head -c 60 "$tmp/run1.txt" | tr '\n' ' ')'); -tp 2 ran"
    else
      bad "ember run -pp 2 / -tp 2"; cat "$tmp/run1.txt" "$tmp/runpp.txt" "$tmp/runpp.err" "$tmp/runtp.txt" "$tmp/runtp.err"
    fi
    timeout -k 10 300 "${MPIRUN[@]}" -np 4 "$EMBER" "${args[@]}" --tensor-parallel-size 2 --pipeline-parallel-size 2 \
      >"$tmp/runtppp.txt" 2>"$tmp/runtppp.err"
    if [ -s "$tmp/runtp.txt" ] && cmp -s "$tmp/runtp.txt" "$tmp/runtppp.txt"; then
      ok "ember run -tp 2 -pp 2 (4 ranks) prints -tp 2's text"
    else
      bad "ember run -tp 2 -pp 2"; cat "$tmp/runtp.txt" "$tmp/runtppp.txt" "$tmp/runtppp.err"
    fi
    # n-gram speculation under TP: the verification slices are step inputs
    # like any other; greedy text identical to TP without it, drafts accepted.
    timeout -k 10 300 "${MPIRUN[@]}" -np 2 "$EMBER" "${args[@]}" --tensor-parallel-size 2 --speculative-method ngram \
      >"$tmp/runtpng.txt" 2>"$tmp/runtpng.err"
    acc=$(grep -o '[0-9]* accepted' "$tmp/runtpng.err" | head -1 | cut -d' ' -f1)
    if cmp -s "$tmp/runtp.txt" "$tmp/runtpng.txt" && [ "${acc:-0}" -gt 0 ]; then
      ok "ember run -tp 2 --speculative-method ngram: the same text as -tp 2, $(grep -o '[0-9]* drafts, [0-9]* accepted' "$tmp/runtpng.err")"
    else
      bad "ember run -tp 2 --speculative-method ngram"; cat "$tmp/runtp.txt" "$tmp/runtpng.txt" "$tmp/runtpng.err"
    fi
    # A draft model (the default model drafting for itself) runs whole on
    # rank 0; the target verifies through TP or PP: the greedy text is the
    # target's own (TP's; PP's = one rank's), drafts accepted. With a
    # pipeline the engine runs one step at a time while speculating (n-gram
    # too).
    for kind in tp pp; do
      flag=--tensor-parallel-size; ref="$tmp/runtp.txt"
      [ $kind = pp ] && { flag=--pipeline-parallel-size; ref="$tmp/run1.txt"; }
      timeout -k 10 300 "${MPIRUN[@]}" -np 2 "$EMBER" "${args[@]}" $flag 2 --speculative-method draft \
        --speculative-model "$MODEL" >"$tmp/run$kind.draft.txt" 2>"$tmp/run$kind.draft.err"
      acc=$(grep -o '[0-9]* accepted' "$tmp/run$kind.draft.err" | head -1 | cut -d' ' -f1)
      if [ -s "$ref" ] && cmp -s "$ref" "$tmp/run$kind.draft.txt" && [ "${acc:-0}" -gt 0 ]; then
        ok "ember run -${kind} 2 --speculative-method draft: the ${kind^^}'s text, $(grep -o '[0-9]* drafts, [0-9]* accepted' "$tmp/run$kind.draft.err")"
      else
        bad "ember run -${kind} 2 --speculative-method draft"; cat "$ref" "$tmp/run$kind.draft.txt" "$tmp/run$kind.draft.err"
      fi
    done
    timeout -k 10 300 "${MPIRUN[@]}" -np 2 "$EMBER" "${args[@]}" --pipeline-parallel-size 2 --speculative-method ngram \
      >"$tmp/runppng.txt" 2>"$tmp/runppng.err"
    if cmp -s "$tmp/run1.txt" "$tmp/runppng.txt" && grep -q '[0-9]* drafts' "$tmp/runppng.err"; then
      ok "ember run -pp 2 --speculative-method ngram: one rank's text, $(grep -o '[0-9]* drafts, [0-9]* accepted' "$tmp/runppng.err")"
    else
      bad "ember run -pp 2 --speculative-method ngram"; cat "$tmp/run1.txt" "$tmp/runppng.txt" "$tmp/runppng.err"
    fi
    # Stages balanced by measured time: a valid split (the plan is checked
    # before any rank loads), one rank's text.
    timeout -k 10 300 "${MPIRUN[@]}" -np 2 "$EMBER" "${args[@]}" --pipeline-parallel-size 2 --pipeline-balance measured \
      >"$tmp/runppm.txt" 2>"$tmp/runppm.err"
    if cmp -s "$tmp/run1.txt" "$tmp/runppm.txt" &&
       grep -q 'pipeline stages balanced by measured time: a pipeline of 2 stages (layers 0-[0-9]*, [0-9]*-17)' "$tmp/runppm.err"; then
      ok "ember run -pp 2 --pipeline-balance measured: one rank's text; $(grep -o 'a pipeline of 2 stages.*' "$tmp/runppm.err" | head -1)"
    else
      bad "ember run -pp 2 --pipeline-balance measured"; cat "$tmp/runppm.txt" "$tmp/runppm.err"
    fi
    if timeout -k 10 300 "${MPIRUN[@]}" -np 2 "$EMBER" bench -m "$MODEL" -p 16 -n 8 -r 1 -t 1 --tensor-parallel-size 2 \
         >"$tmp/bench.txt" 2>&1 && grep -q '^tg8 ' "$tmp/bench.txt"; then
      ok "ember bench -tp 2: $(grep '^tg8 ' "$tmp/bench.txt" | tr -s ' ' | cut -d' ' -f1-3) tok/s"
    else
      bad "ember bench -tp 2"; cat "$tmp/bench.txt"
    fi
  fi
else
  echo "skip default model: $MODEL not found"
fi

# 3. Two hosts: network namespaces joined by a veth pair, TCP between them.
ip netns del $NS_A 2>/dev/null; ip netns del $NS_B 2>/dev/null
if ip netns add $NS_A 2>/dev/null && ip netns add $NS_B 2>/dev/null &&
   ip link add veth-epar-a type veth peer name veth-epar-b 2>/dev/null; then
  ip link set veth-epar-a netns $NS_A && ip link set veth-epar-b netns $NS_B
  ip -n $NS_A addr add 10.232.0.1/24 dev veth-epar-a && ip -n $NS_B addr add 10.232.0.2/24 dev veth-epar-b
  for ns in $NS_A $NS_B; do ip -n $ns link set lo up; done
  ip -n $NS_A link set veth-epar-a up && ip -n $NS_B link set veth-epar-b up
  AGENT="$ROOT/tools/dist_bench_agent.sh"
  m=hf_qwen3
  export EMBER_NETNS_HOSTS="10.232.0.1=$NS_A,10.232.0.2=$NS_B"
  if timeout -k 10 300 ip netns exec $NS_A unshare --uts sh -c "hostname $NS_A; exec $(printf '%q ' "${MPIRUN[@]}") \
       --host 10.232.0.1,10.232.0.2 -np 2 --mca plm_rsh_agent $AGENT --mca oob_tcp_if_include 10.232.0.0/24 \
       --mca btl tcp,self --mca btl_tcp_if_include 10.232.0.0/24 \
       $DRIVER $DATA/$m tp logits $tmp/$m.hosts" >"$tmp/hosts.log" 2>&1 &&
     "$DRIVER" compare "$tmp/$m.single" "$tmp/$m.hosts" 1e-5 >"$tmp/hosts.cmp" 2>&1; then
    ok "$m TP=2 between two namespaces over TCP: $(grep -o '[0-9]* logits rows.*' "$tmp/hosts.cmp")"
  else
    bad "TP=2 between two namespaces"; cat "$tmp/hosts.log" "$tmp/hosts.cmp" 2>/dev/null
  fi
else
  echo "skip two hosts: cannot create network namespaces and a veth pair here (needs root and CAP_NET_ADMIN)"
fi

# 4. A rank that dies (SIGKILL, under ember serve -tp 2) or goes silent
#    (SIGSTOP, under ember serve -pp 2) mid-stream: the request in flight
#    gets an error, rank 0 says why, the job ends (no hang).
if [ -n "$EMBER" ] && [ -f "$MODEL" ]; then
  for how in KILL STOP; do
    "${MPIRUN[@]}" -np 2 "$EMBER" serve -m "$MODEL" -t 1 --port 0 --kv-cache-memory 64M \
      $([ $how = KILL ] && echo --tensor-parallel-size || echo --pipeline-parallel-size) 2 --dist-timeout 5 \
      >"$tmp/serve.$how.out" 2>"$tmp/serve.$how.err" &
    srv=$!
    for _ in $(seq 1 240); do
      grep -q listening "$tmp/serve.$how.out" 2>/dev/null && break
      kill -0 $srv 2>/dev/null || break
      sleep 0.5
    done
    port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$tmp/serve.$how.out" | grep -o '[0-9]*$')
    # Rank 1: the process whose environment says so.
    r1=""
    for _ in $(seq 1 20); do
      for p in $(pgrep -P $srv); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1' && r1=$p
      done
      [ -n "$r1" ] && break
      sleep 0.5
    done
    t0=$(date +%s)
    python3 - "$port" "$r1" "$how" >"$tmp/client.log" 2>&1 <<'EOF2'
import http.client, json, os, signal, sys
port, victim, how = int(sys.argv[1]), int(sys.argv[2] or 0), sys.argv[3]
c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
body = {"prompt": "Once upon a time", "max_tokens": 400, "stream": True, "temperature": 0, "ignore_eos": True}
c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
r = c.getresponse()
chunks, killed, ended = 0, False, "cut"
for raw in r:
    line = raw.decode().strip()
    if not line.startswith("data:"):
        continue
    data = line[5:].strip()
    if data == "[DONE]":
        ended = "done" if ended == "cut" else ended
        break
    ev = json.loads(data)
    if "error" in ev:
        ended = "error: " + ev["error"].get("message", "")
        continue
    chunks += 1
    if chunks == 3 and not killed and victim:
        os.kill(victim, signal.SIGKILL if how == "KILL" else signal.SIGSTOP)
        killed = True
print(f"chunks {chunks} killed {killed} ended {ended}")
EOF2
    for _ in $(seq 1 60); do kill -0 $srv 2>/dev/null || break; sleep 0.5; done
    if kill -0 $srv 2>/dev/null; then rc=hung; kill -9 $srv; kill -9 $r1 2>/dev/null; else wait $srv; rc=$?; fi
    srv=""
    dt=$(( $(date +%s) - t0 ))
    if [ "$how" = KILL ]; then
      said='rank 0: the MPI launcher is ending the job'
      what="TP=2: a rank killed mid-stream"
    else
      said='no answer from the other ranks within 5 s'
      what="PP=2: a rank stopped (silent) mid-stream"
    fi
    if [ -n "$r1" ] && [ "$rc" != hung ] && [ "$rc" != 0 ] && grep -q 'killed True ended error' "$tmp/client.log" &&
       grep -q "$said" "$tmp/serve.$how.err" && [ $dt -lt 60 ]; then
      ok "$what: the request got '$(grep -o 'ended error.*' "$tmp/client.log" | cut -c7-60)', rank 0: '$(grep -o "$said[^:]*" "$tmp/serve.$how.err" | head -1)', job ended in ${dt} s (exit $rc)"
    else
      bad "$what: rank 1 pid '$r1', exit $rc after ${dt} s"; cat "$tmp/client.log" "$tmp/serve.$how.out" "$tmp/serve.$how.err"
    fi
  done
else
  echo "skip killed rank: no ember binary or default model"
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
