#!/usr/bin/env python3
"""Cross-checks `ember perplexity` against llama.cpp (pip llama-cpp-python)
on the same model, text and windows.

It tokenizes the text with llama.cpp, requires the same ids from
`ember tokenize`, evaluates the first K windows of the sliding-window scheme
of src/eval/perplexity.h in llama.cpp (each from an empty cache, BOS at
position 0 when the model adds one), and compares the mean negative
log-likelihood with the one `ember perplexity --chunks K` prints. Both use
the same quantized weights, so they should agree to a few parts in 1e3.

Not part of CI. Usage:
  python3 tools/perplexity_llama_cpp_check.py [--ember build/ember] [-m MODEL]
      [-f data/persuasion.txt] [--ctx 256] [--chunks 2]
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def windows(n, ctx, stride, bos, chunks):
    """(begin, end, score_begin) of each window, as in src/eval/perplexity.h."""
    w = ctx - 1 if bos else ctx
    out, done, begin = [], 1, 0
    while done < n and len(out) < chunks:
        end = min(begin + w, n)
        out.append((begin, end, done))
        done, begin = end, begin + stride
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ember", default=os.path.join(ROOT, "build", "ember"))
    ap.add_argument("-m", "--model", default=os.path.join(ROOT, "models", "gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("-f", "--file", default=os.path.join(ROOT, "data", "persuasion.txt"))
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--chunks", type=int, default=2)
    ap.add_argument("-t", "--threads", type=int, default=2)
    args = ap.parse_args()
    import llama_cpp  # optional dependency

    text = open(args.file, encoding="utf-8").read()
    stride = args.ctx // 2
    llm = llama_cpp.Llama(model_path=args.model, n_ctx=args.ctx, n_batch=args.ctx, logits_all=True, verbose=False,
                          n_threads=args.threads)
    with_bos = llm.tokenize(b"a", add_bos=True)
    bos = len(with_bos) > len(llm.tokenize(b"a", add_bos=False))
    toks = llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
    # Same ids from ember on a prefix (the whole text through argv is too long).
    prefix = text[:20000]
    ember_ids = json.loads(subprocess.run([args.ember, "tokenize", "-m", args.model, "--no-bos", prefix],
                                          capture_output=True, text=True, check=True).stdout)
    llama_ids = llm.tokenize(prefix.encode("utf-8"), add_bos=False, special=False)
    if ember_ids != llama_ids:
        sys.exit("token ids differ between ember and llama.cpp")

    nll, count = 0.0, 0
    for begin, end, score_begin in windows(len(toks), args.ctx, stride, bos, args.chunks):
        seq = ([llm.token_bos()] if bos else []) + toks[begin:end]
        off = 1 if bos else 0
        llm.reset()
        llm.eval(seq)
        logits = np.array(llm.scores[:len(seq)], dtype=np.float64)
        for j in range(score_begin, end):
            row = logits[j - begin + off - 1]
            m = row.max()
            lse = m + math.log(np.exp(row - m).sum())
            nll += lse - row[toks[j]]
            count += 1
    llama_nll = nll / count

    out = subprocess.run([args.ember, "perplexity", "-m", args.model, "-f", args.file, "--ctx", str(args.ctx),
                          "--chunks", str(args.chunks), "-t", str(args.threads)],
                         capture_output=True, text=True, check=True).stdout
    m = re.search(r"mean NLL ([0-9.]+) .* over (\d+) tokens", out)
    ember_nll, ember_count = float(m.group(1)), int(m.group(2))
    print(f"llama.cpp: {count} tokens, mean NLL {llama_nll:.5f}, perplexity {math.exp(llama_nll):.4f}")
    print(f"ember:     {ember_count} tokens, mean NLL {ember_nll:.5f}, perplexity {math.exp(ember_nll):.4f}")
    rel = abs(ember_nll - llama_nll) / llama_nll
    print(f"relative NLL difference: {rel:.2e}")
    ok = ember_count == count and rel < 5e-3
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
