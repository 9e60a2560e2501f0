#!/usr/bin/env python3
"""Reference logits from llama.cpp for tiny quantized GGUF models of each
architecture, for tests/model/tiny_gguf_reference_test.cpp.

Each case is a random-weight model written by `ember gen-model` (a
deterministic function of shape, type and seed, so the test regenerates the
same file in-process instead of committing it), evaluated by llama.cpp (pip
llama-cpp-python, F32 KV cache, one batch) on fixed random token ids. Writes
tests/data/model/tiny_gguf_ref.json (cases, shapes, tokens) and
tiny_gguf_ref.bin (float32 logits, [case][token][vocab]).

  ninja -C build ember && python3 tools/gen_tiny_gguf_reference.py
"""
import argparse
import json
import os
import subprocess
import tempfile

import numpy as np
import llama_cpp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "model")

SHAPE = {"n_layer": 2, "n_embd": 256, "n_ff": 512, "n_head": 4, "n_head_kv": 2, "n_vocab": 512}
CASES = [("llama", "q8_0"), ("llama", "q4_0"), ("llama", "q4_k"), ("qwen2", "q8_0"), ("qwen2", "q6_k"),
         ("qwen2", "q5_0"), ("qwen3", "q8_0"), ("qwen3", "q4_k"), ("gemma3", "q8_0"), ("gemma3", "q4_k")]
SEED = 3
N_TOKENS = 16


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ember", default=os.path.join(ROOT, "build", "ember"))
    args = ap.parse_args()
    rng = np.random.default_rng(20261129)
    cases, blobs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for arch, typ in CASES:
            shape = dict(SHAPE, head_dim={"gemma3": 128, "qwen3": 96}.get(arch, 0))
            path = os.path.join(tmp, f"{arch}-{typ}.gguf")
            cmd = [args.ember, "gen-model", "--arch", arch, "--type", typ, "--seed", str(SEED), "-o", path,
                   "--n-layer", str(shape["n_layer"]), "--n-embd", str(shape["n_embd"]), "--n-ff", str(shape["n_ff"]),
                   "--n-head", str(shape["n_head"]), "--n-head-kv", str(shape["n_head_kv"]),
                   "--n-vocab", str(shape["n_vocab"])]
            if shape["head_dim"]:
                cmd += ["--head-dim", str(shape["head_dim"])]
            if arch == "gemma3":
                cmd += ["--synthetic-vocab"]
            subprocess.run(cmd, check=True, capture_output=True)
            toks = [int(t) for t in rng.integers(3, shape["n_vocab"] - 8, size=N_TOKENS)]
            llm = llama_cpp.Llama(path, logits_all=True, n_ctx=64, n_batch=64, n_threads=2, verbose=False,
                                  type_k=0, type_v=0)  # F32 KV cache, as ember uses
            llm.eval(toks)
            logits = np.array(llm.scores[:N_TOKENS], dtype=np.float32)
            assert logits.shape == (N_TOKENS, shape["n_vocab"]) and np.isfinite(logits).all()
            del llm
            cases.append({"arch": arch, "type": typ, "seed": SEED, "shape": shape, "tokens": toks})
            blobs.append(logits)
            print(f"{arch} {typ}: {N_TOKENS} tokens, logits std {logits.std():.3f}")
    meta = {"reference": f"llama.cpp via llama-cpp-python {llama_cpp.__version__}, F32 KV cache, one batch",
            "generator": "ember gen-model (wyrand, deterministic)", "cases": cases}
    with open(os.path.join(OUT, "tiny_gguf_ref.json"), "w") as f:
        json.dump(meta, f, indent=1)
    np.concatenate([b.reshape(-1) for b in blobs]).astype("<f4").tofile(os.path.join(OUT, "tiny_gguf_ref.bin"))


if __name__ == "__main__":
    main()
