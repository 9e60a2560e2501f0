#!/usr/bin/env python3
"""Checks that models written by `ember gen-model` load and run in llama.cpp
(pip package llama-cpp-python) and that ember and llama.cpp agree on them.

For each architecture (llama, qwen2, qwen3, gemma3 with the default model's Gemma
vocabulary and with a synthetic one) and tensor type it:
  1. writes a small random model with `ember gen-model`,
  2. loads it in llama.cpp, tokenizes a text with both llama.cpp and
     `ember tokenize` and requires identical ids,
  3. evaluates the text in llama.cpp (all logits) and in ember
     (`ember perplexity --save-logits`, one window over the whole text), and
     compares the log-probabilities of every position: KL(llama.cpp || ember),
     max |difference| and top-1 agreement.
With --shapes it also writes the real-size shapes (q4_0) and checks that
llama.cpp loads them and produces finite logits (slow: GBs of output).

Not part of CI (llama.cpp is a large optional dependency). Usage:
  python3 tools/gen_model_llama_cpp_check.py [--ember build/ember] [--shapes]
Exit status 0 when every check passes.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXT = ("It is a truth universally acknowledged, that a single man in possession of a good fortune, "
        "must be in want of a wife. However little known the feelings or views of such a man may be "
        "on his first entering a neighbourhood, this truth is so well fixed in the minds of the "
        "surrounding families, that he is considered the rightful property of some one or other of "
        "their daughters. 1815, \"quoted\" -- 42!")


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r.stdout


def read_logits_file(path):
    """Parses an ember logits file (format in src/eval/perplexity.h)."""
    with open(path, "rb") as f:
        head = f.read(64)
        assert head[:8] == b"EMBERLP1", "bad magic"
        n_vocab = int.from_bytes(head[12:16], "little")
        n_rows = int.from_bytes(head[56:64], "little")
        rec = np.dtype([("index", "<u4"), ("target", "<i4"), ("lp", "<f2", (n_vocab,))])
        rows = np.fromfile(f, dtype=rec, count=n_rows)
    return rows


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def check_model(ember, path, tmp, llama_cpp, ember_runs=True):
    # Tokenization.
    ember_ids = json.loads(run([ember, "tokenize", "-m", path, TEXT]))
    llm = llama_cpp.Llama(model_path=path, n_ctx=512, logits_all=True, verbose=False, n_threads=2)
    llama_ids = llm.tokenize(TEXT.encode(), add_bos=True)
    if ember_ids != llama_ids:
        return f"token ids differ:\n ember {ember_ids}\n llama {llama_ids}"
    if not ember_runs:  # mixture of experts: llama.cpp only
        llm.eval(llama_ids)
        scores = np.array(llm.scores[:len(llama_ids)], dtype=np.float32)
        if not np.isfinite(scores).all() or scores.std() < 1e-4:
            return "llama.cpp logits are not finite or constant"
        print(f"    {len(llama_ids)} tokens; llama.cpp logits finite (std {scores.std():.3f}); ember: no MoE yet")
        return None
    # Log-probabilities of every position.
    text_path = os.path.join(tmp, "text.txt")
    with open(text_path, "w") as f:
        f.write(TEXT)
    bos = len(ember_ids) - len(json.loads(run([ember, "tokenize", "-m", path, "--no-bos", TEXT])))
    n_text = len(llama_ids) - bos
    lp_path = os.path.join(tmp, "lp.bin")
    run([ember, "perplexity", "-m", path, "-f", text_path, "--ctx", str(n_text + bos), "-t", "2",
         "--save-logits", lp_path])
    rows = read_logits_file(lp_path)
    if len(rows) != n_text - 1:
        return f"ember scored {len(rows)} positions, expected {n_text - 1}"
    llm.reset()
    llm.eval(llama_ids)
    scores = np.array(llm.scores[:len(llama_ids)], dtype=np.float32)
    if not np.isfinite(scores).all():
        return "llama.cpp logits are not finite"
    ref = log_softmax(scores[bos:bos + n_text - 1])  # position p predicts token p + 1
    ours = rows["lp"].astype(np.float64)
    ours = ours - np.log(np.exp(ours).sum(axis=-1, keepdims=True))
    p = np.exp(ref)
    kl = (p * (ref - ours)).sum(axis=-1)
    top1 = (ref.argmax(-1) == ours.argmax(-1)).mean()
    maxdiff = np.abs(ref - ours).max()
    spread = ref.std(axis=-1).mean()
    print(f"    {len(llama_ids)} tokens; KL mean {kl.mean():.2e} max {kl.max():.2e}; max |dlogp| {maxdiff:.2e} "
          f"(logp spread {spread:.2e}); top-1 agreement {100 * top1:.1f}%")
    # Random weights give nearly flat distributions, so near-ties make top-1
    # fragile; the KL divergence is the real test.
    if kl.mean() > 1e-3 or top1 < 0.8:
        return "ember and llama.cpp disagree"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ember", default=os.path.join(ROOT, "build", "ember"))
    ap.add_argument("--shapes", action="store_true", help="also load the real-size shapes (slow, GBs)")
    args = ap.parse_args()
    import llama_cpp  # noqa: E402 (optional dependency)

    default_model = os.path.join(ROOT, "models", "gemma-3-270m-q4_k_m.gguf")
    small = ["--n-layer", "2", "--n-embd", "256", "--n-ff", "512", "--n-head", "4", "--n-head-kv", "2"]
    cases = [
        ("llama", ["--arch", "llama", "--n-vocab", "2000"] + small),
        ("qwen2", ["--arch", "qwen2", "--n-vocab", "2000"] + small),
        ("qwen3", ["--arch", "qwen3", "--n-vocab", "2000", "--head-dim", "96"] + small),
        ("gemma3-synthetic-vocab", ["--arch", "gemma3", "--synthetic-vocab", "--n-vocab", "2000", "--head-dim", "128"]
         + small),
    ]
    cases.append(("mixtral-layout", ["--arch", "llama", "--n-vocab", "2000", "--n-expert", "4", "--n-expert-used", "2"]
                  + small))
    if os.path.exists(default_model):
        cases.append(("gemma3-gemma-vocab", ["--arch", "gemma3", "--vocab-from", default_model, "--head-dim", "128"]
                      + small))
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, extra in cases:
            for typ in ["f32", "f16", "q8_0", "q4_0", "q4_k", "q6_k"]:
                path = os.path.join(tmp, f"{name}-{typ}.gguf")
                run([args.ember, "gen-model", *extra, "--type", typ, "--seed", "3", "-o", path])
                print(f"{name} {typ}:")
                try:
                    err = check_model(args.ember, path, tmp, llama_cpp, ember_runs="mixtral" not in name)
                except Exception as e:  # a load failure in llama.cpp raises
                    err = f"exception: {e}"
                if err:
                    print(f"    FAIL: {err}")
                    failures += 1
                os.remove(path)
        if args.shapes:
            for shape in ["gemma-3-270m", "qwen2.5-0.5b", "llama-3.2-1b", "mixtral-tiny", "llama-3.1-8b"]:
                path = os.path.join(tmp, f"{shape}.gguf")
                print(run([args.ember, "gen-model", "--shape", shape, "--type", "q4_0", "-o", path]).strip())
                llm = llama_cpp.Llama(model_path=path, n_ctx=64, logits_all=True, verbose=False, n_threads=2)
                ids = llm.tokenize(TEXT.encode(), add_bos=True)[:16]
                llm.eval(ids)
                ok = np.isfinite(np.array(llm.scores[:len(ids)])).all()
                print(f"    llama.cpp: loaded, {len(ids)} tokens evaluated, logits finite: {ok}")
                failures += 0 if ok else 1
                del llm
                os.remove(path)
    print("PASS" if failures == 0 else f"{failures} FAILED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
