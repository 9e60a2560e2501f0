#!/usr/bin/env python3
"""Generates the reference fixtures for tests/quant (tests/data/quant/).

Two kinds of fixtures:

* quant_input.bin + quant_<type>.bin: a fixed set of float rows (random data,
  real model weights and edge cases) and, for every quantized type, the bytes
  llama.cpp's round-to-nearest
  reference quantizer (quantize_row_<type>_ref from libggml-base, shipped with
  llama-cpp-python) produces for them. The script also checks that
  ggml_quantize_chunk(imatrix=NULL) produces the same bytes (i.e. that the
  `_ref` path is what llama.cpp uses without an importance matrix) and, where
  gguf-py has a quantizer (BF16, Q4_0..Q8_0), that gguf-py agrees too.

* quant_stress_hashes.txt: FNV-1a hashes of llama.cpp's output for every type
  (F16 and BF16 included) over 512 generated rows that the C++ test rebuilds
  bit-identically from a tiny integer generator: broad coverage, tiny fixture.

* dequant_<type>.bin: a few quantized blocks per type (real blocks from the
  default model for the types it contains, blocks produced by llama.cpp from
  random data, and random-but-valid blocks with sane f16 scales) plus the
  float32 output of gguf.quants.dequantize. gguf-py has no Q8_1/Q8_K
  dequantizer: for Q8_K the expected floats come from llama.cpp's
  dequantize_row_q8_K, for Q8_1 from numpy (float32(qs) * float32(d)).

Usage: python3 tools/gen_quant_fixtures.py [--model PATH] [--out DIR]
Rerunnable and deterministic (fixed seeds). Requires numpy, gguf and
llama-cpp-python (for libggml-base.so).

File formats (little endian):
  quant_input.bin : "EQIN" u32 nrows u32 n_per_row, f32[nrows*n_per_row]
  quant_<t>.bin   : "EQQT" u32 ggml_type u32 nrows u32 n_per_row u32 nbytes, u8[nbytes]
  dequant_<t>.bin : "EQDQ" u32 ggml_type u32 n_elems u32 nbytes, u8[nbytes], f32[n_elems]
"""

import argparse
import ctypes
import os
import struct
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES as GGUF_PY_QUANT_SIZES

# gguf-py still lists Q8_1 with the old 40-byte layout (f32 d, f32 s); ggml's
# block_q8_1 is {f16 d, f16 s, int8 qs[32]} = 36 bytes. load_ggml() checks every
# size against ggml_type_size().
GGML_QUANT_SIZES = dict(GGUF_PY_QUANT_SIZES)
GGML_QUANT_SIZES[T.Q8_1] = (32, 36)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N_PER_ROW = 256

# (gguf type, fixture name, llama.cpp reference quantizer symbol)
TYPES = [
    (T.F16, "f16", "ggml_fp32_to_fp16_row"),
    (T.BF16, "bf16", "ggml_fp32_to_bf16_row_ref"),
    (T.Q4_0, "q4_0", "quantize_row_q4_0_ref"),
    (T.Q4_1, "q4_1", "quantize_row_q4_1_ref"),
    (T.Q5_0, "q5_0", "quantize_row_q5_0_ref"),
    (T.Q5_1, "q5_1", "quantize_row_q5_1_ref"),
    (T.Q8_0, "q8_0", "quantize_row_q8_0_ref"),
    (T.Q8_1, "q8_1", "quantize_row_q8_1_ref"),
    (T.Q2_K, "q2_K", "quantize_row_q2_K_ref"),
    (T.Q3_K, "q3_K", "quantize_row_q3_K_ref"),
    (T.Q4_K, "q4_K", "quantize_row_q4_K_ref"),
    (T.Q5_K, "q5_K", "quantize_row_q5_K_ref"),
    (T.Q6_K, "q6_K", "quantize_row_q6_K_ref"),
    (T.Q8_K, "q8_K", "quantize_row_q8_K_ref"),
]
# Types ggml_quantize_chunk accepts (Q8_1 / Q8_K are activation-only types).
CHUNK_TYPES = {T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q2_K, T.Q3_K,
               T.Q4_K, T.Q5_K, T.Q6_K}
GGUF_PY_QUANTIZERS = {T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0}


def load_ggml():
    import llama_cpp
    libdir = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
    lib = ctypes.CDLL(os.path.join(libdir, "libggml-base.so"))
    fp = ctypes.POINTER(ctypes.c_float)
    for _, _, sym in TYPES:
        fn = getattr(lib, sym)
        fn.argtypes = [fp, ctypes.c_void_p, ctypes.c_int64]
        fn.restype = None
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, fp, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_int64, fp]
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.dequantize_row_q8_K.argtypes = [ctypes.c_void_p, fp, ctypes.c_int64]
    lib.dequantize_row_q8_K.restype = None
    lib.ggml_type_size.argtypes = [ctypes.c_int]
    lib.ggml_type_size.restype = ctypes.c_size_t
    lib.ggml_blck_size.argtypes = [ctypes.c_int]
    lib.ggml_blck_size.restype = ctypes.c_int64
    for qtype, name, _ in TYPES:
        want = (lib.ggml_blck_size(int(qtype)), lib.ggml_type_size(int(qtype)))
        if tuple(GGML_QUANT_SIZES[qtype]) != want:
            sys.exit(f"{name}: block geometry {GGML_QUANT_SIZES[qtype]} != ggml's {want}")
    return lib


def fptr(a):
    return a.ctypes.data_as(ctypes.POINTER(ctypes.c_float))


def ggml_quantize_ref(lib, qtype, sym, x):
    """Calls llama.cpp's reference quantizer on a contiguous f32 array."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    bs, ts = GGML_QUANT_SIZES[qtype]
    nbytes = x.size // bs * ts
    buf = ctypes.create_string_buffer(nbytes)  # zero-filled (Q8_K leaves bsums of zero blocks unset)
    getattr(lib, sym)(fptr(x), buf, x.size)
    return np.frombuffer(buf.raw, dtype=np.uint8).copy()


def ggml_quantize_chunk(lib, qtype, x):
    x = np.ascontiguousarray(x, dtype=np.float32)
    nrows, n_per_row = x.shape
    bs, ts = GGML_QUANT_SIZES[qtype]
    nbytes = nrows * (n_per_row // bs) * ts
    buf = ctypes.create_string_buffer(nbytes)
    got = lib.ggml_quantize_chunk(int(qtype), fptr(x), buf, 0, nrows, n_per_row, None)
    assert got == nbytes, (qtype, got, nbytes)
    return np.frombuffer(buf.raw, dtype=np.uint8).copy()


_readers = {}


def gguf_reader(path):
    if path not in _readers:
        _readers[path] = gguf.GGUFReader(path)
    return _readers[path]


def model_rows(model_path, n):
    """A few realistic weight rows: dequantized slices of the default model."""
    if not model_path or not os.path.exists(model_path):
        return None
    r = gguf_reader(model_path)
    rows = []
    for t in r.tensors:
        if t.name in ("blk.0.attn_q.weight", "blk.3.ffn_down.weight", "blk.5.attn_output.weight"):
            w = gguf.quants.dequantize(np.asarray(t.data)[:2], t.tensor_type)
            rows.append(w.reshape(-1)[:N_PER_ROW].astype(np.float32))
    return rows[:n]


def quant_input(model_path):
    rng = np.random.default_rng(1234)
    g = lambda s=1.0: (rng.standard_normal(N_PER_ROW) * s).astype(np.float32)
    rows = []
    rows.append(np.zeros(N_PER_ROW, np.float32))                      # all zero
    rows.append(np.full(N_PER_ROW, 0.5, np.float32))                  # constant positive
    rows.append(np.full(N_PER_ROW, -3.25, np.float32))                # constant negative
    outlier = g(0.02); outlier[77] = 3.0; rows.append(outlier)        # one outlier
    rows.append(g(1000.0))                                            # large magnitude
    rows.append(g(3e4))                                               # f16-overflowing scales/mins
    rows.append(g(1e-5))                                              # tiny (subnormal f16 scales)
    rows.append(g(1e-12))                                             # scales flush to 0 in f16
    rows.append(np.abs(g(0.1)) + np.float32(0.01))                    # all positive (min > 0)
    rows.append(-np.abs(g(0.1)))                                      # all non-positive
    ties = ((np.arange(N_PER_ROW) % 16) - 8).astype(np.float32) * np.float32(0.25)
    rows.append(ties)                                                 # exact rounding ties
    sparse = np.zeros(N_PER_ROW, np.float32); idx = rng.choice(N_PER_ROW, 12, replace=False)
    sparse[idx] = g(0.5)[:12]; rows.append(sparse)                    # mostly zeros
    rows.append(rng.uniform(-1, 1, N_PER_ROW).astype(np.float32))     # uniform
    rows.append((rng.standard_t(2, N_PER_ROW) * 0.05).astype(np.float32))  # heavy tails
    mixed = g(0.05); mixed[:32] *= 100; mixed[128:160] = 0; rows.append(mixed)  # per-block scale spread
    real = model_rows(model_path, 3) or []
    rows.extend(real)
    while len(rows) < 16:
        rows.append(g(0.05))                                          # typical weights
    return np.stack(rows).astype(np.float32), len(real)


def write_quant_fixtures(lib, out, x):
    with open(os.path.join(out, "quant_input.bin"), "wb") as f:
        f.write(b"EQIN" + struct.pack("<II", x.shape[0], x.shape[1]))
        f.write(x.astype("<f4").tobytes())
    for qtype, name, sym in TYPES:
        ref = ggml_quantize_ref(lib, qtype, sym, x)
        if qtype in (T.F16, T.BF16):
            continue  # covered by the stress hashes (and core's exhaustive fp16 tests)
        if qtype in CHUNK_TYPES:
            chunk = ggml_quantize_chunk(lib, qtype, x)
            if not np.array_equal(chunk, ref):
                sys.exit(f"{name}: ggml_quantize_chunk(imatrix=NULL) differs from {sym}")
        if qtype in GGUF_PY_QUANTIZERS:
            py = gguf.quants.quantize(x, qtype).reshape(-1)
            if not np.array_equal(py, ref):
                nbad = int(np.count_nonzero(py != ref))
                print(f"note: gguf-py quantize differs from llama.cpp for {name} in {nbad} bytes")
        with open(os.path.join(out, f"quant_{name}.bin"), "wb") as f:
            f.write(b"EQQT" + struct.pack("<IIII", int(qtype), x.shape[0], x.shape[1], ref.size))
            f.write(ref.tobytes())
        print(f"quant_{name}.bin: {ref.size} bytes")


# ---- stress check: many rows regenerated by the C++ test from a tiny integer
# generator (bit-identical in numpy and C++), compared through a hash.
STRESS_ROWS = 512
STRESS_SEED = 0x9E3779B9


def stress_input():
    """Mirror of stress_input() in tests/quant/quantize_compat_test.cpp."""
    n = STRESS_ROWS * N_PER_ROW
    state = np.uint32(STRESS_SEED)
    u = np.empty(3 * n, np.uint32)
    with np.errstate(over="ignore"):
        for i in range(3 * n):  # LCG (Numerical Recipes); sequential by definition
            state = np.uint32(state * np.uint32(1664525) + np.uint32(1013904223))
            u[i] = state
    # uniform in [-1, 1): 24 random bits * 2^-23 - 1 (all exact in f32)
    f = ((u >> np.uint32(8)).astype(np.float32) * np.float32(2.0 ** -23)) - np.float32(1.0)
    f = f.reshape(n, 3)
    x = (f[:, 0] + f[:, 1]) + f[:, 2]  # roughly bell-shaped, f32 adds in this order
    x = x.reshape(STRESS_ROWS, N_PER_ROW)
    rows = np.arange(STRESS_ROWS)
    scale = (np.float32(2.0) ** ((rows % 23) - 12).astype(np.float32)).astype(np.float32)  # 2^-12 .. 2^10
    x = (x * scale[:, None]).astype(np.float32)
    for r in range(0, STRESS_ROWS, 5):  # an outlier in every 5th row
        x[r, (r * 37) % N_PER_ROW] = np.float32(6.0) * scale[r]
    for r in range(3, STRESS_ROWS, 11):  # a non-negative row every 11th
        x[r] = np.abs(x[r])
    return np.ascontiguousarray(x, np.float32)


def fnv1a64(b):
    h = 0xcbf29ce484222325
    for byte in b.tobytes():
        h = ((h ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def write_stress_hashes(lib, out):
    x = stress_input()
    lines = [f"# FNV-1a 64 of llama.cpp quantize_row_<type>_ref over stress_input() "
             f"({STRESS_ROWS} rows x {N_PER_ROW}); see tools/gen_quant_fixtures.py",
             f"rows {STRESS_ROWS} n_per_row {N_PER_ROW} seed {STRESS_SEED} input {fnv1a64(x):016x}"]
    for qtype, name, sym in TYPES:
        lines.append(f"{name} {fnv1a64(ggml_quantize_ref(lib, qtype, sym, x)):016x}")
    with open(os.path.join(out, "quant_stress_hashes.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"quant_stress_hashes.txt: {len(TYPES)} types")


def random_blocks(rng, qtype, nblocks):
    """Random bytes with the f16 scale fields replaced by sane values."""
    bs, ts = GGML_QUANT_SIZES[qtype]
    b = rng.integers(0, 256, size=(nblocks, ts), dtype=np.uint8)
    h = lambda: np.array([rng.uniform(1e-4, 0.05) * rng.choice([-1, 1])], np.float16).view(np.uint8)
    for blk in b:
        if qtype in (T.Q4_0, T.Q5_0, T.Q8_0):
            blk[0:2] = h()
        elif qtype in (T.Q4_1, T.Q5_1, T.Q8_1):
            blk[0:2] = h(); blk[2:4] = h()
        elif qtype == T.Q2_K:
            blk[80:82] = h(); blk[82:84] = h()
        elif qtype == T.Q3_K:
            blk[108:110] = h()
        elif qtype in (T.Q4_K, T.Q5_K):
            blk[0:2] = h(); blk[2:4] = h()
        elif qtype == T.Q6_K:
            blk[208:210] = h()
        elif qtype == T.Q8_K:
            blk[0:4] = np.array([rng.uniform(1e-4, 0.05)], np.float32).view(np.uint8)
            qs = blk[4:260].view(np.int8)
            blk[260:292] = qs.reshape(16, 16).astype(np.int16).sum(axis=1).astype("<i2").view(np.uint8)
    return b.reshape(-1)


def real_blocks(model_path, qtype, nblocks):
    if not model_path or not os.path.exists(model_path):
        return None
    r = gguf_reader(model_path)
    ts = GGML_QUANT_SIZES[qtype][1]
    picked = []
    for t in r.tensors:
        if t.tensor_type == qtype:
            raw = np.asarray(t.data).reshape(-1).view(np.uint8)
            mid = (raw.size // ts // 2) * ts  # a block from the middle of the tensor
            picked.append(raw[mid:mid + ts])
            picked.append(raw[:ts])
        if len(picked) >= nblocks:
            break
    return np.concatenate(picked[:nblocks]) if picked else None


def reference_dequant(lib, qtype, raw):
    bs, ts = GGML_QUANT_SIZES[qtype]
    n = raw.size // ts * bs
    if qtype == T.Q8_K:  # gguf-py has no Q8_K: llama.cpp's dequantizer
        out = np.zeros(n, np.float32)
        lib.dequantize_row_q8_K(raw.ctypes.data, fptr(out), n)
        return out
    if qtype == T.Q8_1:  # gguf-py has no Q8_1: y = qs * d (as Q8_0)
        blocks = raw.reshape(-1, ts)
        d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
        qs = blocks[:, 4:].copy().view(np.int8).astype(np.float32)
        return (qs * d).reshape(-1)
    return gguf.quants.dequantize(raw.reshape(1, -1), qtype).reshape(-1).astype(np.float32)


def write_dequant_fixtures(lib, out, model_path):
    rng = np.random.default_rng(99)
    for qtype, name, sym in TYPES:
        parts = []
        if qtype in (T.F16, T.BF16):
            # every exponent incl. subnormals and inf; NaNs excluded (payloads are not compared)
            bits = rng.integers(0, 65536, size=1024, dtype=np.uint16)
            bits[:8] = [0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x7bff, 0xfbff, 0x3c00]
            if qtype == T.F16:
                bits[8:10] = [0x7c00, 0xfc00]
                bits = np.where((bits & 0x7c00) == 0x7c00, bits & 0xfc00, bits)  # NaN -> inf
            else:
                bits[8:10] = [0x7f80, 0xff80]
                bits = np.where(((bits & 0x7f80) == 0x7f80) & ((bits & 0x7f) != 0), bits & 0xff80, bits)
            parts.append(bits.astype("<u2").view(np.uint8))
        else:
            bs, ts = GGML_QUANT_SIZES[qtype]
            nb = 2 if bs == 256 else 8
            real = real_blocks(model_path, qtype, nb)
            if real is not None:
                parts.append(real)
            n_more = nb // 2 if real is not None else nb
            x = (rng.standard_normal(n_more * bs) * 0.05).astype(np.float32)
            parts.append(ggml_quantize_ref(lib, qtype, sym, x))
            parts.append(random_blocks(rng, qtype, n_more))
        raw = np.concatenate(parts).astype(np.uint8)
        ref = reference_dequant(lib, qtype, raw)
        assert ref.dtype == np.float32
        with open(os.path.join(out, f"dequant_{name}.bin"), "wb") as f:
            f.write(b"EQDQ" + struct.pack("<III", int(qtype), ref.size, raw.size))
            f.write(raw.tobytes())
            f.write(ref.astype("<f4").tobytes())
        print(f"dequant_{name}.bin: {raw.size} bytes -> {ref.size} floats"
              f"{' (incl. real model blocks)' if qtype in (T.Q8_0, T.Q5_0, T.Q4_K, T.Q6_K) and model_path else ''}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(REPO, "models", "gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "data", "quant"))
    args = ap.parse_args()
    if not os.path.exists(args.model):
        print(f"warning: {args.model} not found; fixtures will lack real model blocks")
        args.model = None
    os.makedirs(args.out, exist_ok=True)
    lib = load_ggml()
    x, n_real = quant_input(args.model)
    print(f"quant_input: {x.shape[0]} rows x {x.shape[1]} ({n_real} rows of real weights)")
    write_quant_fixtures(lib, args.out, x)
    write_dequant_fixtures(lib, args.out, args.model)
    write_stress_hashes(lib, args.out)


if __name__ == "__main__":
    main()
