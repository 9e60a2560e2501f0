#!/usr/bin/env python3
"""Reproduces the table in docs/correctness.md: how far apart correct
implementations of Gemma 3 270M Q4_K_M are, per position, on the first
prompt of tests/data/model/gemma3_270m_q4_k_m_ref.json.

Compares (relative L2 distance of full logits):
  * a float64 NumPy forward pass on the dequantized weights (exact reference),
  * ember (build/ember_dump_logits) on f32 weights and on the quantized file,
    with AVX-512 and scalar kernels,
  * llama.cpp (pip llama-cpp-python), f32 and quantized, batched and
    token-by-token.
Needs numpy, gguf, llama-cpp-python, and `ninja -C build ember_dump_logits`.
Takes a few minutes (the f32 GGUF for llama.cpp is written to a temp dir).

  python3 tools/noise_study.py
"""
import ctypes
import json
import os
import subprocess
import tempfile

import numpy as np
import llama_cpp
from gguf import GGUFReader
from gguf.quants import dequantize

ROOT = os.path.join(os.path.dirname(__file__), "..")
MODEL = os.path.join(ROOT, "models", "gemma-3-270m-q4_k_m.gguf")
DUMP = os.path.join(ROOT, "build", "ember_dump_logits")


def numpy_forward(toks):
    r = GGUFReader(MODEL)
    T = {t.name: t for t in r.tensors}

    def W(name):
        t = T[name]
        return dequantize(t.data, t.tensor_type).astype(np.float64).reshape([int(x) for x in reversed(t.shape)])

    E, H, D, L, eps = 640, 4, 256, 18, 1e-6
    emb = W("token_embd.weight")
    n = len(toks)
    x = emb[toks] * np.sqrt(E)
    pos = np.arange(n, dtype=np.float64)

    def rms(v, w):
        return v / np.sqrt((v * v).mean(-1, keepdims=True) + eps) * w

    def rope(v, base):
        half = D // 2
        ang = pos[:, None] * base ** (-np.arange(half) * 2.0 / D)[None, :]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        a, b = v[..., :half], v[..., half:]
        return np.concatenate([a * c - b * s, a * s + b * c], -1)

    def gelu(v):
        return 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v ** 3)))

    mask = np.triu(np.ones((n, n)), 1) > 0  # prompt shorter than the 512 window
    for il in range(L):
        g = lambda s: W(f"blk.{il}.{s}")  # noqa: E731
        h = rms(x, g("attn_norm.weight"))
        q = rms((h @ g("attn_q.weight").T).reshape(n, H, D), g("attn_q_norm.weight"))
        k = rms((h @ g("attn_k.weight").T).reshape(n, 1, D), g("attn_k_norm.weight"))
        v = (h @ g("attn_v.weight").T).reshape(n, 1, D)
        base = 1e6 if (il + 1) % 6 == 0 else 1e4
        q, k = rope(q, base) / 16.0, rope(k, base)
        out = np.zeros((n, H, D))
        for hh in range(H):
            sc = q[:, hh, :] @ k[:, 0, :].T
            sc[mask] = -np.inf
            sc = np.exp(sc - sc.max(-1, keepdims=True))
            out[:, hh, :] = (sc / sc.sum(-1, keepdims=True)) @ v[:, 0, :]
        x = x + rms(out.reshape(n, H * D) @ g("attn_output.weight").T, g("post_attention_norm.weight"))
        h = rms(x, g("ffn_norm.weight"))
        f = (gelu(h @ g("ffn_gate.weight").T) * (h @ g("ffn_up.weight").T)) @ g("ffn_down.weight").T
        x = x + rms(f, g("post_ffw_norm.weight"))
    return rms(x, W("output_norm.weight")) @ emb.T


def ember(toks, f32, isa):
    with tempfile.NamedTemporaryFile(suffix=".bin") as out:
        env = dict(os.environ, EMBER_ISA=isa)
        args = [DUMP, MODEL, out.name] + (["--f32"] if f32 else []) + [str(t) for t in toks]
        subprocess.run(args, check=True, env=env)
        return np.fromfile(out.name, dtype=np.float32).reshape(len(toks), -1)


def llama(path, toks, token_by_token):
    llm = llama_cpp.Llama(path, logits_all=True, n_ctx=256, n_threads=2, verbose=False, type_k=0, type_v=0)
    if token_by_token:
        for t in toks:
            llm.eval([t])
    else:
        llm.eval(toks)
    return np.array(llm.scores[: len(toks)])


def rel(a, b):
    return [float(np.linalg.norm(a[i] - b[i]) / np.linalg.norm(b[i])) for i in range(len(a))]


def main():
    ref = json.load(open(os.path.join(ROOT, "tests", "data", "model", "gemma3_270m_q4_k_m_ref.json")))
    toks = ref["cases"][0]["tokens"]
    exact = numpy_forward(toks)
    with tempfile.TemporaryDirectory() as tmp:
        f32_path = os.path.join(tmp, "f32.gguf")
        qp = llama_cpp.llama_model_quantize_default_params()
        qp.ftype, qp.allow_requantize, qp.nthread = 0, True, 2
        assert llama_cpp.llama_model_quantize(MODEL.encode(), f32_path.encode(), ctypes.byref(qp)) == 0
        rows = [
            ("ember f32 weights vs float64 NumPy", rel(ember(toks, True, "avx512"), exact)),
            ("llama.cpp f32 weights vs float64 NumPy", rel(llama(f32_path, toks, False), exact)),
        ]
    q512, qscalar = ember(toks, False, "avx512"), ember(toks, False, "scalar")
    lb, lt = llama(MODEL, toks, False), llama(MODEL, toks, True)
    rows += [
        ("ember Q4_K_M, AVX-512 vs scalar kernels", rel(q512, qscalar)),
        ("llama.cpp Q4_K_M, batched vs token-by-token", rel(lb, lt)),
        ("llama.cpp Q4_K_M vs exact", rel(lb, exact)),
        ("ember Q4_K_M vs exact", rel(q512, exact)),
        ("ember Q4_K_M vs llama.cpp Q4_K_M", rel(q512, lb)),
    ]
    print(f"{len(toks)} tokens; relative L2 distance per position")
    for name, r in rows:
        print(f"{name:48s} " + " ".join(f"{v:8.2g}" for v in r))
    self_consistency(ref)


def self_consistency(ref):
    """Each engine against itself when only float summation order changes:
    ember's AVX2 and scalar kernels against its AVX-512 ones, llama.cpp's
    token-by-token evaluation against its batched one. Prints, per prompt,
    the per-position distance and the first position where it exceeds 1e-3
    (the first activation-rounding flip that cascades)."""
    print("\nself-consistency, first 16 positions of 4 prompts (x = distance > 1e-3)")
    for i, case in enumerate(ref["cases"][:4]):
        toks = case["tokens"][:16]
        base, lb = ember(toks, False, "avx512"), llama(MODEL, toks, False)
        for name, r in [("ember AVX2 vs AVX-512", rel(ember(toks, False, "avx2"), base)),
                        ("ember scalar vs AVX-512", rel(ember(toks, False, "scalar"), base)),
                        ("llama.cpp token-by-token vs batched", rel(llama(MODEL, toks, True), lb))]:
            first = next((p for p, v in enumerate(r) if v > 1e-3), None)
            print(f"prompt {i} {name:36s} first > 1e-3 at {first!s:4s} max {max(r):.3f}  "
                  + " ".join("x" if v > 1e-3 else "." for v in r))


if __name__ == "__main__":
    main()
