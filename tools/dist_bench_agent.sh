#!/bin/sh
# mpirun's remote-shell agent for tools/dist_bench.sh: instead of ssh to a
# host, "agent [ssh options] HOST COMMAND..." runs COMMAND in the network
# namespace that plays HOST (its own host name, pinned to its own core, as a
# second machine would be).
while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done
host="$1"
shift
case "$host" in
  10.231.0.1) ns=ember-dist-a cpu=0 ;;
  10.231.0.2) ns=ember-dist-b cpu=1 ;;
  *) echo "dist_bench_agent: unknown host $host" >&2; exit 1 ;;
esac
exec ip netns exec "$ns" unshare --uts taskset -c "$cpu" sh -c "hostname $ns; $*"
