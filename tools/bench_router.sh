#!/usr/bin/env bash
# Data parallelism behind `ember router`: exact (published block hashes),
# cache-aware and random routing on requests that share long prefixes (the
# issue's DP=2 benchmark). For each policy of POLICIES (default "random
# cache_aware exact"; NAME:ARGS adds router flags, commas for spaces, e.g.
# exact:--overlap-weight,4), alternating, ROUNDS times: two fresh `ember serve` workers
# (one thread each, KV cache WORKER_KV), the router in front, then
# `ember bench serve` with a dataset of N_PREFIX prefixes (~PREFIX_WORDS
# words each, shuffled order) plus a short question each, at concurrency
# CONC; reports the workers' prefix-cache hit rate (their /metrics), time to
# first token and throughput (the bench's summary).
# Usage: tools/bench_router.sh build/ember [ROUNDS] > out.txt
set -euo pipefail
EMBER="$(realpath "${1:?usage: bench_router.sh path/to/ember [ROUNDS]}")"
ROUNDS="${2:-1}"
N_PREFIX="${N_PREFIX:-24}" PREFIX_WORDS="${PREFIX_WORDS:-280}" N_REQ="${N_REQ:-100}" CONC="${CONC:-32}"
WORKER_KV="${WORKER_KV:-64M}" OUT_LEN="${OUT_LEN:-16}" POLICIES="${POLICIES:-random cache_aware exact}"
MODEL="${MODEL:-$(dirname "$0")/../models/gemma-3-270m-q4_k_m.gguf}"
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
python3 - "$tmp/data.jsonl" "$N_PREFIX" "$PREFIX_WORDS" "$N_REQ" "$OUT_LEN" <<'PY'
import json, random, sys
path, n_prefix, words, n_req, out_len = sys.argv[1], *map(int, sys.argv[2:])
W = ("river stone garden lamp window paper cloud silver orange mountain letter bridge candle forest engine harbor "
     "meadow pocket ribbon saddle thunder velvet wagon yellow anchor basket circle doctor feather glacier hammer").split()
pre = []
for i in range(n_prefix):
    r = random.Random(1000 + i)
    pre.append(f"Document {i}. " + " ".join(r.choice(W) for _ in range(words)))
r = random.Random(7)
with open(path, "w") as f:
    for k in range(n_req):
        p = r.randrange(n_prefix)
        f.write(json.dumps({"prompt": pre[p] + f"\nQuestion {k}: what comes next?", "output_len": out_len}) + "\n")
PY
wait_url() {  # file -> url printed in it
  for _ in $(seq 600); do
    u=$(grep -o 'listening on http://[0-9.:]*' "$1" 2>/dev/null | head -1 | cut -d' ' -f3)
    [ -n "$u" ] && { echo "$u"; return 0; }
    sleep 0.1
  done
  echo "no url in $1" >&2; return 1
}
metric_sum() {  # name urls...
  local name=$1; shift
  for u in "$@"; do curl -s "$u/metrics" | awk -v n="$name" '$1 == n {print $2}'; done | awk '{s += $1} END {printf "%.0f", s}'
}
echo "# $(date -u +%F) $(nproc) cores; model $(basename "$MODEL"); $N_REQ requests over $N_PREFIX prefixes of ~$PREFIX_WORDS words, output $OUT_LEN, concurrency $CONC, 2 workers x 1 thread, KV $WORKER_KV each"
for round in $(seq "$ROUNDS"); do
  for entry in $POLICIES; do
    policy="${entry%%:*}" extra=()
    [[ "$entry" == *:* ]] && IFS=',' read -r -a extra <<<"${entry#*:}"
    urls=()
    for k in 0 1; do
      "$EMBER" serve -m "$MODEL" --port 0 -t 1 --kv-cache-memory "$WORKER_KV" --disable-log-requests >"$tmp/w$k.out" 2>"$tmp/w$k.err" &
      pids+=($!)
    done
    for k in 0 1; do urls+=("$(wait_url "$tmp/w$k.out")"); done
    "$EMBER" router --port 0 --policy "$policy" "${extra[@]}" --seed 3 --workers "${urls[0]},${urls[1]}" >"$tmp/r.out" 2>"$tmp/r.err" &
    rpid=$!
    pids+=($rpid)
    rurl=$(wait_url "$tmp/r.out")
    "$EMBER" bench serve --base-url "$rurl" --dataset "$tmp/data.jsonl" --num-prompts "$N_REQ" --max-concurrency "$CONC" --ignore-eos -q \
      --num-warmups 0 --json "$tmp/b.json" >"$tmp/b.txt" 2>&1
    hits=$(metric_sum ember:prefix_cache_hits_total "${urls[@]}")
    queries=$(metric_sum ember:prefix_cache_queries_total "${urls[@]}")
    python3 - "$tmp/b.json" "$entry" "$round" "$hits" "$queries" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
s = j["summary"]
pol, rnd, hits, q = sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
print(f"{pol:26s} round {rnd}: hit rate {hits / q if q else 0:.3f}  "
      f"TTFT median {s['ttft_ms']['median']:.0f} ms p90 {s['ttft_ms']['p90']:.0f} ms  "
      f"output {s['output_throughput']:.1f} tok/s  requests {s['request_throughput']:.2f}/s  "
      f"duration {s['duration_s']:.1f} s  completed {s['completed']} failed {s['failed']}")
PY
    kill -TERM $rpid; wait $rpid 2>/dev/null || true
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    pids=()
  done
done
