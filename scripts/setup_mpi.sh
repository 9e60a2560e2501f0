#!/usr/bin/env bash
# Installs Debian's OpenMPI (libopenmpi-dev: headers and the mpicxx wrapper
# CMake's FindMPI uses; openmpi-bin: mpirun), which the dist/ room (tensor
# and pipeline parallelism: docs/parallelism.md) is built on. Optional for
# building ember: without it dist/ is not built and its tests skip. Safe to
# rerun. scripts/test.sh runs it so that CI builds and tests dist/.
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
missing=()
for p in libopenmpi-dev openmpi-bin; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing MPI: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
echo "== MPI ok: $(mpirun --version 2>/dev/null | head -1)"
