#!/usr/bin/env python3
"""Reference logits for the default model (Gemma 3 270M Q4_K_M) from llama.cpp.

Runs llama.cpp (pip package llama-cpp-python) on a few prompts and writes
tests/data/model/<name>_ref.json + .bin:
  json: per prompt: token ids (llama.cpp's tokenizer, BOS added), the stored
        positions, llama.cpp's argmax at each stored position, the vocabulary
        ids sampled for the logit comparison, and a greedy 32-token continuation;
  bin:  float32 logits [n_stored_positions, n_sampled_ids] per prompt, in order.
The C++ test (tests/model/reference_test.cpp) checks top-1 agreement at every
stored position, relative L2 error on the sampled logits, and the greedy
continuation.

Rerun: python3 tools/gen_model_reference.py [--model models/gemma-3-270m-q4_k_m.gguf]
"""
import argparse
import json
import os
import struct

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

    cases = []
    blobs = []
    for text in PROMPTS + [long_prompt()]:
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
        blobs.append(logits[positions][:, sampled].astype(np.float32))
        # Greedy continuation.
        cont = []
        last = logits[n - 1].copy()
        for _ in range(args.n_continue):
            t = int(last.argmax())
            cont.append(t)
            llm.eval([t])
            last = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        cases.append({"text": text, "tokens": toks, "positions": positions, "argmax": argmax,
                      "greedy": cont})
        print(f"{len(toks):4d} tokens, {len(positions)} positions; greedy: {llm.detokenize(cont)[:60]!r}")

    meta = {"model": os.path.basename(args.model), "reference": f"llama.cpp via llama-cpp-python {llama_cpp.__version__}",
            "kv_cache": "f32", "sampled_ids": sampled.tolist(), "cases": cases}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"{args.name}_ref.json"), "w") as f:
        json.dump(meta, f)
    with open(os.path.join(args.out, f"{args.name}_ref.bin"), "wb") as f:
        for b in blobs:
            f.write(b.tobytes())


if __name__ == "__main__":
    main()
