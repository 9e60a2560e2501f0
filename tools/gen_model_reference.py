#!/usr/bin/env python3
"""Reference logits for the default model (Gemma 3 270M Q4_K_M) from llama.cpp.

Runs llama.cpp (pip package llama-cpp-python) on a few prompts and writes
tests/data/model/<name>_ref.json + .bin:
  json: per prompt: token ids (llama.cpp's tokenizer, BOS added), the stored
        positions, llama.cpp's argmax at each stored position, the vocabulary
        ids sampled for the logit comparison, and a greedy 32-token continuation;
  bin:  float32 logits [n_stored_positions, n_sampled_ids] per prompt, in order.
For each stored position and greedy step it also records llama.cpp's gap
between its top-1 and top-2 logits, so the test can tell a real disagreement
from a near tie.

Two references are written:
  <name>_ref:     the quantized file as it is (llama.cpp quantizes activations
                  to int8 blocks, as ember does; the two engines round
                  differently, so logits differ by a few percent -- see
                  docs/correctness.md);
  <name>_f32_ref: the same weights dequantized to f32 (llama.cpp's own
                  requantizer), where no activation quantization happens and
                  the engines must agree closely.

Rerun: python3 tools/gen_model_reference.py [--model models/gemma-3-270m-q4_k_m.gguf]
"""
import argparse
import ctypes
import json
import os
import tempfile

import numpy as np
import llama_cpp

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Once upon a time, in a small village by the sea, there lived an old fisherman who",
    "Les élèves ont étudié la photosynthèse. 光合作用是植物利用光能的过程。 Photosynthesis converts",
]


def long_prompt():
    # > 512 tokens so Gemma 3's sliding-window layers (window 512) mask keys.
    parts = []
    topics = ["rivers", "mountains", "libraries", "engines", "gardens", "bridges", "markets", "storms"]
    for i in range(48):
        t = topics[i % len(topics)]
        parts.append(f"Chapter {i + 1}: the story of {t} number {i * 7 % 13} begins here, and it goes on.")
    return " ".join(parts) + " In summary, the most important lesson is"


def top2_gap(row):
    i = np.argpartition(row, -2)[-2:]
    a, b = sorted(row[i].tolist(), reverse=True)
    return a - b


def run(llm, prompts, sampled, n_continue):
    cases, blobs = [], []
    for text in prompts:
        toks = llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)
        llm.reset()
        llm.eval(toks)
        logits = np.array(llm.scores[: len(toks)], dtype=np.float32)
        n = len(toks)
        if n <= 64:
            positions = list(range(n))
        else:
            positions = sorted(set(list(range(0, n, 8)) + list(range(n - 8, n))))
        argmax = [int(logits[p].argmax()) for p in positions]
        gaps = [top2_gap(logits[p]) for p in positions]
        blobs.append(logits[positions][:, sampled].astype(np.float32))
        cont, cont_gaps = [], []
        last = logits[n - 1].copy()
        for _ in range(n_continue):
            t = int(last.argmax())
            cont.append(t)
            cont_gaps.append(top2_gap(last))
            llm.eval([t])
            last = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        cases.append({"text": text, "tokens": toks, "positions": positions, "argmax": argmax, "gaps": gaps,
                      "greedy": cont, "greedy_gaps": cont_gaps})
        print(f"{len(toks):4d} tokens, {len(positions)} positions; greedy: {llm.detokenize(cont)[:60]!r}")
    return cases, blobs


def write(out, name, meta, blobs):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"{name}_ref.json"), "w") as f:
        json.dump(meta, f)
    with open(os.path.join(out, f"{name}_ref.bin"), "wb") as f:
        for b in blobs:
            f.write(b.tobytes())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="models/gemma-3-270m-q4_k_m.gguf")
    ap.add_argument("--name", default="gemma3_270m_q4_k_m")
    ap.add_argument("--out", default="tests/data/model")
    ap.add_argument("--n-sampled", type=int, default=512)
    ap.add_argument("--n-continue", type=int, default=32)
    args = ap.parse_args()

    llm = llama_cpp.Llama(args.model, logits_all=True, n_ctx=2048, n_batch=2048, n_threads=2, verbose=False,
                          type_k=0, type_v=0)  # F32 KV cache, as ember uses
    n_vocab = llm.n_vocab()
    rng = np.random.default_rng(20261129)
    sampled = np.sort(rng.choice(n_vocab, size=args.n_sampled, replace=False)).astype(np.int64)

    cases, blobs = run(llm, PROMPTS + [long_prompt()], sampled, args.n_continue)
    meta = {"model": os.path.basename(args.model), "reference": f"llama.cpp via llama-cpp-python {llama_cpp.__version__}",
            "kv_cache": "f32", "weights": "as stored", "sampled_ids": sampled.tolist(), "cases": cases}
    write(args.out, args.name, meta, blobs)
    del llm

    # The same weights in f32 (llama.cpp's requantizer dequantizes exactly).
    with tempfile.TemporaryDirectory() as tmp:
        f32_path = os.path.join(tmp, "f32.gguf")
        qp = llama_cpp.llama_model_quantize_default_params()
        qp.ftype = 0  # LLAMA_FTYPE_ALL_F32
        qp.allow_requantize = True
        qp.nthread = 2
        rc = llama_cpp.llama_model_quantize(args.model.encode(), f32_path.encode(), ctypes.byref(qp))
        assert rc == 0, "llama_model_quantize failed"
        llm = llama_cpp.Llama(f32_path, logits_all=True, n_ctx=2048, n_batch=2048, n_threads=2, verbose=False,
                              type_k=0, type_v=0)
        cases, blobs = run(llm, PROMPTS + [long_prompt()], sampled, args.n_continue)
        meta = {"model": os.path.basename(args.model) + " dequantized to f32",
                "reference": f"llama.cpp via llama-cpp-python {llama_cpp.__version__}", "kv_cache": "f32",
                "weights": "f32", "sampled_ids": sampled.tolist(), "cases": cases}
        write(args.out, args.name + "_f32", meta, blobs)
        del llm


if __name__ == "__main__":
    main()
