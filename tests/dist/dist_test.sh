#!/usr/bin/env bash
# dist/ over real MPI ranks on this machine (mpirun --oversubscribe; as root
# with --allow-run-as-root):
#  1. collectives at 2 and 3 ranks give the exact expected bits (the
#     rank-order fold), over shared memory and over TCP, and the same digest
#     run after run;
#  2. a rank killed mid-run (SIGKILL) ends the job quickly with a clear error
#     naming it, and rank 0 says what it was doing;
#  3. a rank that stays alive but silent makes the others fail within their
#     deadline with a clear error (no hang).
# Usage: dist_test.sh [path/to/ember_dist_driver]   (none: MPI was not found at build time)
# Exit: 0 passed, 1 failed, 77 skipped.
set -u
DRIVER="${1:-}"
if [ -z "$DRIVER" ]; then
  echo "SKIP: ember was built without MPI (run scripts/setup_mpi.sh, then reconfigure)"
  exit 77
fi
if ! command -v mpirun >/dev/null; then echo "SKIP: mpirun not found (scripts/setup_mpi.sh installs OpenMPI)"; exit 77; fi
MPIRUN=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
# No InfiniBand / no warnings about it on machines without it.
export OMPI_MCA_btl_base_warn_component_unused=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
pass=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }

digest() { grep -o 'digest [0-9a-f]*' "$1" | sort | uniq | tr '\n' ' '; }

for np in 2 3; do
  first=""
  for btl in "vader,self" "tcp,self"; do
    name="collectives np=$np btl=$btl"
    if timeout -k 10 120 "${MPIRUN[@]}" -np $np --mca btl "$btl" "$DRIVER" collectives >"$tmp/a" 2>"$tmp/ae" &&
       timeout -k 10 120 "${MPIRUN[@]}" -np $np --mca btl "$btl" "$DRIVER" collectives >"$tmp/b" 2>"$tmp/be"; then
      n_ok=$(grep -c ': ok: digest' "$tmp/a")
      da=$(digest "$tmp/a"); db=$(digest "$tmp/b")
      [ -z "$first" ] && first="$da"
      # One digest: every rank the same bits, both runs, both transports.
      if [ "$n_ok" = "$np" ] && [ "$da" = "$db" ] && [ "$da" = "$first" ] && [ "$(echo "$da" | wc -w)" = 2 ]; then
        ok "$name ($da)"
      else
        bad "$name: ranks ok $n_ok of $np, digests '$da' vs '$db' (first transport: '$first')"; cat "$tmp/a" "$tmp/ae"
      fi
    else
      bad "$name: mpirun failed"; cat "$tmp/a" "$tmp/ae" "$tmp/b" "$tmp/be" 2>/dev/null
    fi
  done
done

t0=$(date +%s)
timeout -k 10 60 "${MPIRUN[@]}" -np 2 "$DRIVER" kill >"$tmp/k" 2>&1
rc=$?
dt=$(( $(date +%s) - t0 ))
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $dt -lt 30 ] &&
   grep -q 'rank 1 .*exited on signal 9' "$tmp/k" &&
   grep -q 'ember dist: rank 0 of 2: the MPI launcher is ending the job while this rank was in all_reduce' "$tmp/k"; then
  ok "a killed rank ends the job in ${dt} s with a clear error (exit $rc)"
else
  bad "killed rank: exit $rc after ${dt} s"; cat "$tmp/k"
fi

t0=$(date +%s)
timeout -k 10 60 "${MPIRUN[@]}" -np 2 "$DRIVER" hang 3 >"$tmp/h" 2>&1
rc=$?
dt=$(( $(date +%s) - t0 ))
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $dt -lt 30 ] &&
   grep -q 'rank 0: error: dist: rank 0: all_reduce #201 failed: no answer from the other ranks within 3 s' "$tmp/h" &&
   grep -q 'rank 0: then: dist: barrier: the communicator failed before' "$tmp/h"; then
  ok "a silent rank: the others fail within their deadline in ${dt} s (exit $rc)"
else
  bad "silent rank: exit $rc after ${dt} s"; cat "$tmp/h"
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
