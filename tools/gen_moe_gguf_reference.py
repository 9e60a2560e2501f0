#!/usr/bin/env python3
"""The tiny Mixture-of-Experts fixtures (tools/gen_moe_fixtures.py) converted
to GGUF by llama.cpp's own converter, and llama.cpp's logits on them and on
their llama-quantize'd forms, for tests/model/moe_gguf_reference_test.cpp.

  tests/data/model/moe_gguf/<arch>-bf16.gguf   convert_hf_to_gguf.py --outtype bf16
                                               of tests/data/model/hf_<arch>
                                               (the per-expert layout, the
                                               one llama.cpp's converter reads
                                               for Mixtral)
  tests/data/model/moe_gguf_ref.json / .bin    llama.cpp's logits (F32 KV cache,
                                               one batch) on 16 fixed tokens of
                                               each file, bf16 and quantized
                                               by llama-quantize to q8_0 and q4_0

Also random-weight MoE files of each architecture written by `ember gen-model`
(a deterministic function of shape, type and seed: the test writes the same
file in-process) in k-quant and legacy types, at widths the k-quants fit:
  {"gen": {shape}, "type": ...} cases, llama.cpp's logits on 16 tokens.

The fixtures carry no tokenizer, and the converter's vocabulary step
insists on one, so that step (TextModel.set_vocab) is replaced by a
synthetic 96-token SentencePiece-style vocabulary (in every converter
class); the tensor and
hyper-parameter conversion runs as llama.cpp ships it. The test converts
the bf16 file to q8_0 / q4_0 with ember's own quantizer (bit-identical to
llama.cpp's reference quantizers, and the same per-tensor types as
llama-quantize: routers and norms f32) instead of committing those files.

  ninja -C build ember && /work/venvs/hf/bin/python tools/gen_moe_gguf_reference.py [--llama DIR]
(DIR: a tools/build_llama_cpp.sh directory: its build/ (libllama, libggml*)
and llama-quantize; default ../llama-cpp next to the repository.)
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data", "model")
ARCHS = ["qwen3moe", "qwen2moe", "olmoe", "mixtral"]
TYPES = ["bf16", "q8_0", "q4_0"]
VOCAB = 96
N_TOKENS = 16
# gen-model cases: (arch, type, extra sizes); 2 layers, embd 256, vocab 512.
GEN = [
    ("qwen3moe", "q8_0", {"n_ff": 512, "n_ff_exp": 128, "n_head": 4, "n_head_kv": 2, "head_dim": 64,
                          "n_expert": 8, "n_expert_used": 2}),
    ("qwen3moe", "q4_k", {"n_ff": 512, "n_ff_exp": 256, "n_head": 4, "n_head_kv": 2, "head_dim": 64,
                          "n_expert": 8, "n_expert_used": 2}),
    ("qwen2moe", "q6_k", {"n_ff": 512, "n_ff_exp": 256, "n_ff_shexp": 512, "n_head": 4, "n_head_kv": 4,
                          "head_dim": 0, "n_expert": 4, "n_expert_used": 2}),
    ("olmoe", "q4_0", {"n_ff": 256, "n_head": 4, "n_head_kv": 4, "head_dim": 0, "n_expert": 8, "n_expert_used": 2}),
    ("llama", "q5_0", {"n_ff": 256, "n_head": 4, "n_head_kv": 2, "head_dim": 0, "n_expert": 4, "n_expert_used": 2}),
]
GEN_SEED = 5


def convert(llama, arch, out, module="conversion.llama"):
    """llama.cpp's convert_hf_to_gguf.py on hf_<arch>, with the synthetic vocabulary
    (`module`: the converter module whose classes must be loaded before patching)."""
    src = os.path.join(llama, "src", "llama.cpp")
    code = f"""
import sys
sys.path.insert(0, {os.path.join(src, 'gguf-py')!r})
sys.path.insert(0, {src!r})
import gguf
import conversion.base as base
import convert_hf_to_gguf as conv

def synthetic_vocab(self):
    toks = ["<unk>", "<s>", "</s>"] + [f"t{{i}}" for i in range(3, {VOCAB})]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + \\
            [gguf.TokenType.NORMAL] * ({VOCAB} - 3)
    self.gguf_writer.add_tokenizer_model("llama")
    self.gguf_writer.add_tokenizer_pre("default")
    self.gguf_writer.add_token_list(toks)
    self.gguf_writer.add_token_scores([0.0] * {VOCAB})
    self.gguf_writer.add_token_types(types)
    self.gguf_writer.add_bos_token_id(1)
    self.gguf_writer.add_eos_token_id(2)
    self.gguf_writer.add_unk_token_id(0)

import {module}  # converter classes with their own set_vocab (Mixtral's LlamaModel, GptOssModel)

def patch(cls):
    cls.set_vocab = synthetic_vocab
    for sub in cls.__subclasses__():
        patch(sub)

patch(base.TextModel)
sys.argv = ["convert_hf_to_gguf.py", {os.path.join(DATA, 'hf_' + arch)!r}, "--outtype", "bf16", "--outfile", {out!r}]
conv.main()
"""
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def build_llama_logits(llama, tmp):
    """tools/llama_logits.c built against the llama.cpp build in `llama`; returns the executable."""
    src = os.path.join(llama, "src", "llama.cpp")
    exe = os.path.join(tmp, "llama_logits")
    build = os.path.join(llama, "build")
    subprocess.run(["c++", "-O2", "-x", "c", os.path.join(ROOT, "tools", "llama_logits.c"), "-x", "none",
                    "-o", exe, "-I" + os.path.join(src, "include"), "-I" + os.path.join(src, "ggml", "include"),
                    "-L" + os.path.join(build, "src"), "-L" + os.path.join(build, "ggml", "src"),
                    "-L" + os.path.join(build, "bin"), "-Wl,-rpath," + os.path.join(build, "bin"),
                    "-lllama", "-lggml", "-lggml-cpu", "-lggml-base", "-fopenmp", "-lpthread", "-ldl", "-lm"],
                   check=True)
    return exe


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama", default=os.path.join(os.path.dirname(ROOT), "llama-cpp"))
    ap.add_argument("--ember", default=os.path.join(ROOT, "build", "ember"))
    args = ap.parse_args()
    llama = os.path.abspath(args.llama)
    src = os.path.join(llama, "src", "llama.cpp")
    out_dir = os.path.join(DATA, "moe_gguf")
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(20261206)
    cases, blobs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        exe = build_llama_logits(llama, tmp)
        build = os.path.join(llama, "build")
        quantize = os.path.join(llama, "bin", "llama-quantize")
        if not os.path.exists(quantize):
            quantize = os.path.join(build, "bin", "llama-quantize")
        for arch in ARCHS:
            bf16 = os.path.join(out_dir, f"{arch}-bf16.gguf")
            convert(llama, arch, bf16)
            toks = [int(t) for t in rng.integers(3, VOCAB, size=N_TOKENS)]
            for typ in TYPES:
                path = bf16
                if typ != "bf16":
                    path = os.path.join(tmp, f"{arch}-{typ}.gguf")
                    subprocess.run([quantize, bf16, path, typ.upper()], check=True, capture_output=True)
                out = os.path.join(tmp, "logits.bin")
                subprocess.run([exe, path, out] + [str(t) for t in toks], check=True, capture_output=True)
                logits = np.fromfile(out, dtype=np.float32).reshape(N_TOKENS, VOCAB)
                assert np.isfinite(logits).all()
                cases.append({"arch": arch, "type": typ, "file": f"moe_gguf/{arch}-bf16.gguf", "vocab": VOCAB,
                              "tokens": toks})
                blobs.append(logits)
                print(arch, typ, "ok")
        for arch, typ, extra in GEN:
            shape = dict({"n_layer": 2, "n_embd": 256, "n_vocab": 512}, **extra)
            path = os.path.join(tmp, f"gen-{arch}-{typ}.gguf")
            cmd = [args.ember, "gen-model", "--arch", arch, "--type", typ, "--seed", str(GEN_SEED), "-o", path,
                   "--synthetic-vocab"]
            for k, v in shape.items():
                if v:
                    cmd += ["--" + k.replace("_", "-"), str(v)]
            subprocess.run(cmd, check=True, capture_output=True)
            toks = [int(t) for t in rng.integers(3, shape["n_vocab"] - 8, size=N_TOKENS)]
            out = os.path.join(tmp, "logits.bin")
            subprocess.run([exe, path, out] + [str(t) for t in toks], check=True, capture_output=True)
            logits = np.fromfile(out, dtype=np.float32).reshape(N_TOKENS, shape["n_vocab"])
            assert np.isfinite(logits).all()
            cases.append({"arch": arch, "type": typ, "gen": shape, "seed": GEN_SEED, "tokens": toks})
            blobs.append(logits)
            print("gen-model", arch, typ, "ok")
    with open(os.path.join(DATA, "moe_gguf_ref.json"), "w") as f:
        json.dump({"reference": "llama.cpp (tools/build_llama_cpp.sh), F32 KV cache, one batch",
                   "cases": cases}, f, indent=1)
    np.concatenate([b.ravel() for b in blobs]).astype(np.float32).tofile(os.path.join(DATA, "moe_gguf_ref.bin"))


if __name__ == "__main__":
    main()
