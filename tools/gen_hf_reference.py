#!/usr/bin/env python3
"""Reference logits for the tiny Hugging Face fixtures from `transformers`.

For each random-weight model folder under tests/data/model/hf_* (made by
tools/gen_format_fixtures.py), runs transformers in float32 on fixed token
sequences (longer than the Gemma 3 fixture's sliding window) and writes
tests/data/model/hf_reference.json:
  {folder: {"cases": [{"tokens", "logits" [n][vocab], "greedy" [32]}]}}
The C++ test (tests/model/hf_reference_test.cpp) loads the same folders with
ember and requires relative L2 error < 1e-4, identical top-1 at every
position and identical greedy continuations.

Rerun: python3 tools/gen_hf_reference.py
"""
import json
import os
import zlib

import numpy as np
import torch
from transformers import AutoModelForCausalLM

ROOT = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "model")
FOLDERS = ["hf_llama_sharded", "hf_qwen2", "hf_qwen3", "hf_gemma3"]


def main():
    torch.manual_seed(0)
    out = {}
    for name in FOLDERS:
        path = os.path.join(ROOT, name)
        model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32, attn_implementation="eager")
        model.eval()
        vocab = model.config.vocab_size if hasattr(model.config, "vocab_size") else model.config.text_config.vocab_size
        rng = np.random.default_rng(zlib.crc32(name.encode()))  # stable across runs
        cases = []
        for n in (1, 7, 40):
            toks = [int(t) for t in rng.integers(0, vocab, size=n)]
            with torch.no_grad():
                logits = model(torch.tensor([toks])).logits[0].float().numpy()
                gen = model.generate(torch.tensor([toks]), attention_mask=torch.ones(1, n, dtype=torch.long),
                                     max_new_tokens=32, min_new_tokens=32, do_sample=False, pad_token_id=0,
                                     eos_token_id=None)
            greedy = [int(t) for t in gen[0, n:]]
            cases.append({"tokens": toks, "logits": logits.astype(float).round(7).tolist(), "greedy": greedy})
        out[name] = {"vocab": int(vocab), "cases": cases}
        print(name, "ok", [len(c["tokens"]) for c in cases])
    with open(os.path.join(ROOT, "hf_reference.json"), "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
