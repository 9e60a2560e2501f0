#!/usr/bin/env python3
"""Generates the MXFP4 reference fixtures for tests/quant (tests/data/quant/)
from llama.cpp's own C functions (quantize_row_mxfp4_ref,
dequantize_row_mxfp4 in ggml-quants.c), called through a small C harness
linked against libggml-base.a of a llama.cpp build (tools/build_llama_cpp.sh;
default /work/llama-cpp). gguf-py's MXFP4 (gguf.quants) is checked to agree.

Writes (formats as in tools/gen_quant_fixtures.py):
  quant_mxfp4.bin   : llama.cpp's MXFP4 bytes for the rows of quant_input.bin
  dequant_mxfp4.bin : blocks (llama.cpp-quantized, random codes with every
                      exponent 0..254 incl. the subnormal scales 0 and 1) and
                      llama.cpp's float32 dequantization
  quant_stress_hashes.txt : the `mxfp4` line (FNV-1a of llama.cpp's bytes for
                      stress_input(), the generator the C++ test mirrors)

Usage: python3 tools/gen_mxfp4_fixtures.py [--llama /work/llama-cpp] [--out DIR]
Deterministic (fixed seed). Requires numpy, gguf, a C compiler.
"""
import argparse
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_quant_fixtures import stress_input, fnv1a64  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BS, TS = 32, 17

HARNESS = r"""
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
void quantize_row_mxfp4_ref(const float* x, void* y, int64_t k);
void dequantize_row_mxfp4(const void* x, float* y, int64_t k);
int main(int argc, char** argv) {
  /* q: f32[n] on stdin -> blocks on stdout; d: blocks on stdin -> f32 */
  long n = atol(argv[2]);
  if (argv[1][0] == 'q') {
    float* x = malloc(n * 4); char* y = malloc(n / 32 * 17);
    if (fread(x, 4, n, stdin) != (size_t)n) return 1;
    quantize_row_mxfp4_ref(x, y, n);
    fwrite(y, 17, n / 32, stdout);
  } else {
    char* x = malloc(n / 32 * 17); float* y = malloc(n * 4);
    if (fread(x, 17, n / 32, stdin) != (size_t)(n / 32)) return 1;
    dequantize_row_mxfp4(x, y, n);
    fwrite(y, 4, n, stdout);
  }
  return 0;
}
"""


def build_harness(llama, tmp):
    lib = os.path.join(llama, "build", "ggml", "src", "libggml-base.a")
    if not os.path.exists(lib):
        sys.exit(f"{lib} not found (build llama.cpp with tools/build_llama_cpp.sh)")
    src = os.path.join(tmp, "h.c")
    exe = os.path.join(tmp, "h")
    with open(src, "w") as f:
        f.write(HARNESS)
    subprocess.run(["cc", "-O2", src, lib, "-lm", "-lpthread", "-lstdc++", "-fopenmp", "-o", exe], check=True)
    return exe


def run(exe, mode, n, data):
    return subprocess.run([exe, mode, str(n)], input=data, capture_output=True, check=True).stdout


def quantize(exe, x):
    x = np.ascontiguousarray(x, np.float32).reshape(-1)
    return np.frombuffer(run(exe, "q", x.size, x.tobytes()), np.uint8).copy()


def dequantize(exe, raw):
    n = raw.size // TS * BS
    return np.frombuffer(run(exe, "d", n, raw.tobytes()), np.float32).copy()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama", default="/work/llama-cpp")
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "data", "quant"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        exe = build_harness(args.llama, tmp)

        # quant_mxfp4.bin over quant_input.bin
        with open(os.path.join(args.out, "quant_input.bin"), "rb") as f:
            raw = f.read()
        assert raw[:4] == b"EQIN"
        nrows, n_per_row = struct.unpack("<II", raw[4:12])
        x = np.frombuffer(raw[12:], np.float32).reshape(nrows, n_per_row)
        q = quantize(exe, x)
        finite = np.isfinite(x).all(axis=1)
        py = gguf.quants.quantize(x[finite], T.MXFP4).reshape(-1)
        ref_rows = q.reshape(nrows, -1)[finite].reshape(-1)
        if not np.array_equal(py, ref_rows):
            sys.exit("gguf-py's MXFP4 quantizer disagrees with llama.cpp")
        with open(os.path.join(args.out, "quant_mxfp4.bin"), "wb") as f:
            f.write(b"EQQT" + struct.pack("<IIII", int(T.MXFP4), nrows, n_per_row, q.size))
            f.write(q.tobytes())
        print(f"quant_mxfp4.bin: {nrows} rows x {n_per_row} -> {q.size} bytes")

        # dequant_mxfp4.bin
        rng = np.random.default_rng(39)
        xs = (rng.standard_normal(16 * BS) * np.repeat(10.0 ** rng.uniform(-6, 4, 16), BS)).astype(np.float32)
        blocks = [quantize(exe, xs)]
        rnd = rng.integers(0, 256, size=(255, TS), dtype=np.uint8)
        rnd[:, 0] = np.arange(255, dtype=np.uint8)  # every valid exponent (255 is NaN)
        blocks.append(rnd.reshape(-1))
        raw = np.concatenate(blocks)
        deq = dequantize(exe, raw)
        with np.errstate(over="ignore"):  # e = 254: 12 * 2^126 is inf in both
            py = gguf.quants.dequantize(raw.reshape(1, -1), T.MXFP4).reshape(-1).astype(np.float32)
        if not np.array_equal(py.view(np.uint32), deq.view(np.uint32)):
            sys.exit("gguf-py's MXFP4 dequantizer disagrees with llama.cpp")
        with open(os.path.join(args.out, "dequant_mxfp4.bin"), "wb") as f:
            f.write(b"EQDQ" + struct.pack("<III", int(T.MXFP4), deq.size, raw.size))
            f.write(raw.tobytes())
            f.write(deq.astype("<f4").tobytes())
        print(f"dequant_mxfp4.bin: {raw.size} bytes -> {deq.size} floats")

        # the stress hash line
        h = fnv1a64(quantize(exe, stress_input()))
        path = os.path.join(args.out, "quant_stress_hashes.txt")
        lines = [l for l in open(path).read().splitlines() if not l.startswith("mxfp4 ")]
        lines.append(f"mxfp4 {h:016x}")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        print(f"quant_stress_hashes.txt: mxfp4 {h:016x}")


if __name__ == "__main__":
    main()
