#!/usr/bin/env bash
# Sets up (deps, default model, build) and runs the whole test suite.
# Besides the build dependencies, the server tests need the official
# `openai` Python client and the browser test needs Chromium, its
# WebDriver and `selenium`: installed here when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
# With MPI, so that dist/ is built and its tests (real mpirun ranks) run.
scripts/setup.sh --with-mpi

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
apt_missing=()
for p in chromium chromium-driver python3-pip; do
  dpkg -s "$p" >/dev/null 2>&1 || apt_missing+=("$p")
done
if [ ${#apt_missing[@]} -gt 0 ]; then
  echo "== installing test dependencies: ${apt_missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${apt_missing[@]}" >/dev/null
fi
if ! python3 -c "import openai, selenium, jsonschema" 2>/dev/null; then
  echo "== installing test dependencies: openai selenium jsonschema (pip)"
  python3 -m pip install -q openai selenium jsonschema 2>/dev/null ||
    python3 -m pip install -q --break-system-packages openai selenium jsonschema
fi

ctest --test-dir build --output-on-failure -j2 --timeout 600
