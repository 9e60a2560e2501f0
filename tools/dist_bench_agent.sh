#!/bin/sh
# mpirun's remote-shell agent for tools/dist_bench.sh and
# tests/dist/parallel_test.sh: instead of ssh to a host, "agent [ssh options]
# HOST COMMAND..." runs COMMAND in the network namespace that plays HOST (its
# own host name, pinned to its own core, as a second machine would be).
# $EMBER_NETNS_HOSTS maps hosts to namespaces ("IP=NS,IP=NS"; the first is
# pinned to core 0, the second to core 1); default: dist_bench.sh's pair.
while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done
host="$1"
shift
map="${EMBER_NETNS_HOSTS:-10.231.0.1=ember-dist-a,10.231.0.2=ember-dist-b}"
ns="" cpu=0 i=0
for pair in $(echo "$map" | tr ',' ' '); do
  if [ "${pair%%=*}" = "$host" ]; then ns="${pair#*=}" cpu=$i; fi
  i=$((i + 1))
done
if [ -z "$ns" ]; then echo "dist_bench_agent: unknown host $host" >&2; exit 1; fi
exec ip netns exec "$ns" unshare --uts taskset -c "$cpu" sh -c "hostname $ns; $*"
