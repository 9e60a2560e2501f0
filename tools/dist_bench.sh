#!/usr/bin/env bash
# Runs tools/dist_bench.cpp (OSU-style latency, bandwidth, dist's send/recv
# and all-reduce against MPI_Allreduce) with 2 ranks over:
#   1. shared memory (OpenMPI's vader BTL), the path within one host;
#   2. TCP on loopback;
#   3. TCP between two network namespaces joined by a veth pair (10.231.0.1
#      and .2, made and removed here; needs root), each its own "host" with
#      its own core: the path between hosts, less a real NIC and wire.
# Usage: tools/dist_bench.sh build/ember_dist_bench [ITERS] [MAX_BYTES]
set -euo pipefail
BENCH="$(realpath "${1:?usage: dist_bench.sh path/to/ember_dist_bench [ITERS] [MAX_BYTES]}")"
IT="${2:-2000}"
MAXB="${3:-4194304}"
MPIRUN=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
export OMPI_MCA_btl_base_warn_component_unused=0
echo "## machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(uname -r)"
echo "## 1. shared memory (btl vader)"
"${MPIRUN[@]}" -np 2 --mca btl vader,self "$BENCH" "$IT" "$MAXB"
echo "## 2. TCP on loopback (btl tcp)"
"${MPIRUN[@]}" -np 2 --mca btl tcp,self --mca btl_tcp_if_include lo "$BENCH" "$IT" "$MAXB"
A=ember-dist-a B=ember-dist-b
cleanup() { ip netns del $A 2>/dev/null || true; ip netns del $B 2>/dev/null || true; }
trap cleanup EXIT
cleanup
if ip netns add $A 2>/dev/null && ip netns add $B; then
  ip link add veth-ember-a type veth peer name veth-ember-b
  ip link set veth-ember-a netns $A
  ip link set veth-ember-b netns $B
  ip -n $A addr add 10.231.0.1/24 dev veth-ember-a
  ip -n $B addr add 10.231.0.2/24 dev veth-ember-b
  for ns in $A $B; do ip -n $ns link set lo up; done
  ip -n $A link set veth-ember-a up
  ip -n $B link set veth-ember-b up
  echo "## 3. TCP between two network namespaces over a veth pair (btl tcp, 10.231.0.0/24; one core each)"
  # mpirun runs in namespace A ("host" 10.231.0.1) and starts the daemon of
  # "host" 10.231.0.2 in namespace B through tools/dist_bench_agent.sh, as it
  # would over ssh; the ranks then talk TCP over the veth pair.
  AGENT="$(cd "$(dirname "$0")" && pwd)/dist_bench_agent.sh"
  ip netns exec $A unshare --uts taskset -c 0 sh -c "hostname $A; exec $(printf '%q ' "${MPIRUN[@]}") \
    --bind-to none --host 10.231.0.1,10.231.0.2 -np 2 --mca plm_rsh_agent $AGENT \
    --mca oob_tcp_if_include 10.231.0.0/24 --mca btl tcp,self --mca btl_tcp_if_include 10.231.0.0/24 \
    $BENCH $IT $MAXB"
else
  echo "## 3. skipped: cannot create network namespaces here (needs root)"
fi
