#!/usr/bin/env python3
"""gpt-oss reference fixtures for tests/model/gptoss_reference_test.cpp.

1. A tiny random-weight GptOssForCausalLM saved by transformers' own
   save_pretrained (bf16 weights, the bf16 layout: experts.gate_up_proj
   [E, H, 2I] with gate and up interleaved along the last axis,
   experts.down_proj [E, I, H], their biases, self_attn.sinks, router with a
   bias), 4 layers (sliding window 4 on the even ones, global on the odd),
   hidden 64, 4 heads of 16 (2 KV heads), 4 experts of width 32 (2 used),
   vocabulary 96, YaRN x32 over 4096 with truncate false (gpt-oss's config):
     tests/data/model/hf_gptoss/
   and transformers' float32 logits (eager attention) and greedy
   continuations: tests/data/model/hf_gptoss_reference.json.
   The same weights as OpenAI ships them: experts as MXFP4 _blocks /
   _scales (quantized with gguf-py's MXFP4, llama.cpp's rounding, repacked to
   the checkpoint's nibble order), quantization_config mxfp4:
     tests/data/model/hf_gptoss_mxfp4/
   with transformers' logits on it (it dequantizes MXFP4 on a CPU) and
   transformers' own dequantization (convert_moe_packed_tensors) of a few
   rows of layer 0's experts: tests/data/model/hf_gptoss_mxfp4_reference.json.
2. That folder converted by llama.cpp's convert_hf_to_gguf.py (bf16, the
   synthetic vocabulary of tools/gen_moe_gguf_reference.py):
     tests/data/model/gptoss_gguf/gptoss-bf16.gguf
   and llama.cpp's logits on it.
3. Random-weight gpt-oss files written by `ember gen-model --arch gpt-oss`
   with MXFP4 experts (the rest q8_0), as the test writes them again, and
   llama.cpp's logits on them.
   (2 and 3: tests/data/model/gptoss_gguf_ref.json / .bin, llama.cpp with an
   F32 KV cache, one batch, 16 tokens.)

Rerun: ninja -C build ember && /work/venvs/hf/bin/python tools/gen_gptoss_fixtures.py [--llama DIR]
(pinned: transformers 5.25.0.)
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zlib

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, GptOssConfig

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_moe_gguf_reference as moe_ref  # noqa: E402  (llama.cpp's converter and logits, as for the MoE fixtures)



TRANSFORMERS_VERSION = "5.25.0"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data", "model")
VOCAB = 96
LENGTHS = (1, 7, 40)
N_GREEDY = 32
N_TOKENS = 16
TIE_GAP = 1e-2
# gen-model cases: 2 layers, embd 256, vocab 512, window 4 on layer 0.
GEN = [
    ("mxfp4", {"n_layer": 2, "n_embd": 256, "n_vocab": 512, "n_ff": 128, "n_ff_exp": 128, "n_head": 4,
               "n_head_kv": 2, "head_dim": 64, "n_expert": 8, "n_expert_used": 2, "sliding_window": 4}),
    ("q8_0", {"n_layer": 2, "n_embd": 256, "n_vocab": 512, "n_ff": 128, "n_ff_exp": 96, "n_head": 4,
              "n_head_kv": 2, "head_dim": 64, "n_expert": 4, "n_expert_used": 2, "sliding_window": 4}),
]
GEN_SEED = 7


def config():
    return GptOssConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
                        num_key_value_heads=2, head_dim=16, intermediate_size=32, num_local_experts=4,
                        num_experts_per_tok=2, sliding_window=4, max_position_embeddings=131072,
                        tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=0,
                        rms_norm_eps=1e-5)


def init_weights(model, seed):
    """Norms 1 + 0.1 N; routers 0.3 N; sinks N(0, 1); biases 0.05 N; other matrices 0.1 N."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if "norm" in name:
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            elif "router" in name:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            elif name.endswith("sinks"):
                p.copy_(torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))


def router_gap(model, toks):
    gaps, hooks = [], []
    k = model.config.num_experts_per_tok

    def hook(_m, _inp, out):
        logits = out[0]
        top = torch.topk(logits.double(), k + 1, dim=-1).values
        gaps.append(float((top[:, k - 1] - top[:, k]).min()))

    for name, m in model.named_modules():
        if name.endswith("mlp.router"):
            hooks.append(m.register_forward_hook(hook))
    with torch.no_grad():
        model(torch.tensor([toks]))
    for h in hooks:
        h.remove()
    return min(gaps)


def hf_fixture():
    name = "hf_gptoss"
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    cases_tokens = [[int(t) for t in rng.integers(3, VOCAB, size=n)] for n in LENGTHS]
    for seed in range(100):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config(), attn_implementation="eager").float().eval()
        init_weights(model, 2000 + seed)
        model = model.to(torch.bfloat16).float()
        if min(router_gap(model, t) for t in cases_tokens) > TIE_GAP:
            break
    else:
        raise SystemExit("no seed without routing near-ties")
    path = os.path.join(DATA, name)
    shutil.rmtree(path, ignore_errors=True)
    model.save_pretrained(path, state_dict={k: v.to(torch.bfloat16) for k, v in model.state_dict().items()})
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager").eval()
    gap = min(router_gap(model, t) for t in cases_tokens)
    assert gap > TIE_GAP / 2, gap
    cases = []
    for toks in cases_tokens:
        n = len(toks)
        with torch.no_grad():
            logits = model(torch.tensor([toks])).logits[0].float().numpy()
            gen = model.generate(torch.tensor([toks]), attention_mask=torch.ones(1, n, dtype=torch.long),
                                 max_new_tokens=N_GREEDY, min_new_tokens=N_GREEDY, do_sample=False,
                                 pad_token_id=0, eos_token_id=None)
        cases.append({"tokens": toks, "logits": logits.astype(float).round(7).tolist(),
                      "greedy": [int(t) for t in gen[0, n:]]})
    with open(os.path.join(DATA, "hf_gptoss_reference.json"), "w") as fh:
        json.dump({"transformers": transformers.__version__, "torch": torch.__version__, "vocab": VOCAB,
                   "seed": seed, "router_gap": gap, "cases": cases}, fh)
    print(name, "seed", seed, "gap %.3g" % gap)


def to_hf_mxfp4(w):
    """w [E, R, C] float32 (rows = outputs) -> (_blocks [E, R, C/32, 16], _scales [E, R, C/32]) u8."""
    import gguf
    E, R, C = w.shape
    q = gguf.quants.quantize(np.ascontiguousarray(w.reshape(-1, C), np.float32), gguf.GGMLQuantizationType.MXFP4)
    q = q.reshape(E, R, C // 32, 17)
    scales = q[..., 0].copy()
    qs = q[..., 1:]
    codes = np.concatenate([qs & 15, qs >> 4], axis=-1)  # ggml: element j low nibble of byte j, j + 16 high
    blocks = (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)  # checkpoint: 2j low, 2j + 1 high
    return blocks, scales


def hf_mxfp4_fixture():
    from safetensors.torch import load_file, save_file
    from transformers import Mxfp4Config
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors
    src = os.path.join(DATA, "hf_gptoss")
    path = os.path.join(DATA, "hf_gptoss_mxfp4")
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    state = load_file(os.path.join(src, "model.safetensors"))
    out, deq = {}, {}
    for k, v in state.items():
        if k.endswith("mlp.experts.gate_up_proj") or k.endswith("mlp.experts.down_proj"):
            blocks, scales = to_hf_mxfp4(v.float().transpose(1, 2).contiguous().numpy())
            out[k + "_blocks"] = torch.from_numpy(blocks)
            out[k + "_scales"] = torch.from_numpy(scales)
            if ".layers.0." in k:
                d = convert_moe_packed_tensors(out[k + "_blocks"], out[k + "_scales"], dtype=torch.float32)
                deq[k.split(".")[-1]] = d.numpy()  # [E, C, R] as the bf16 layout
        else:
            out[k] = v
    save_file(out, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    cfg["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    shutil.copy(os.path.join(src, "generation_config.json"), path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager",
                                                 quantization_config=Mxfp4Config(dequantize=True)).eval()
    ref = json.load(open(os.path.join(DATA, "hf_gptoss_reference.json")))
    cases = []
    for c in ref["cases"]:
        toks = c["tokens"]
        with torch.no_grad():
            logits = model(torch.tensor([toks])).logits[0].float().numpy()
        cases.append({"tokens": toks, "logits": logits.astype(float).round(7).tolist()})
    # A few rows of layer 0's experts as transformers dequantizes them:
    # gate_up [E, H, 2I]: columns (outputs) 0, 1, 2I-1; down [E, I, H]: columns 0, 7, H-1.
    rows = {"gate_up_proj": [0, 1, 63], "down_proj": [0, 7, 63]}
    samples = {name: {str(r): deq[name][:, :, r].astype(float).tolist() for r in rs} for name, rs in rows.items()}
    with open(os.path.join(DATA, "hf_gptoss_mxfp4_reference.json"), "w") as fh:
        json.dump({"transformers": transformers.__version__, "vocab": VOCAB, "cases": cases,
                   "layer0_dequantized": samples}, fh)
    print("hf_gptoss_mxfp4 ok")


def gguf_fixtures(llama, ember):
    rng = np.random.default_rng(20261207)
    cases, blobs = [], []
    out_dir = os.path.join(DATA, "gptoss_gguf")
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        exe = moe_ref.build_llama_logits(llama, tmp)
        bf16 = os.path.join(out_dir, "gptoss-bf16.gguf")
        moe_ref.convert(llama, "gptoss", bf16, module="conversion.gpt_oss")
        toks = [int(t) for t in rng.integers(3, VOCAB, size=N_TOKENS)]
        out = os.path.join(tmp, "logits.bin")
        subprocess.run([exe, bf16, out] + [str(t) for t in toks], check=True, capture_output=True)
        logits = np.fromfile(out, dtype=np.float32).reshape(N_TOKENS, VOCAB)
        assert np.isfinite(logits).all()
        cases.append({"type": "bf16", "file": "gptoss_gguf/gptoss-bf16.gguf", "vocab": VOCAB, "tokens": toks})
        blobs.append(logits)
        print("converted bf16 ok")
        for typ, shape in GEN:
            path = os.path.join(tmp, f"gen-{typ}.gguf")
            cmd = [ember, "gen-model", "--arch", "gpt-oss", "--type", typ, "--seed", str(GEN_SEED), "-o", path,
                   "--synthetic-vocab"]
            for k, v in shape.items():
                cmd += ["--" + k.replace("_", "-"), str(v)]
            subprocess.run(cmd, check=True, capture_output=True)
            toks = [int(t) for t in rng.integers(3, shape["n_vocab"] - 8, size=N_TOKENS)]
            subprocess.run([exe, path, out] + [str(t) for t in toks], check=True, capture_output=True)
            logits = np.fromfile(out, dtype=np.float32).reshape(N_TOKENS, shape["n_vocab"])
            assert np.isfinite(logits).all()
            cases.append({"type": typ, "gen": shape, "seed": GEN_SEED, "tokens": toks})
            blobs.append(logits)
            print("gen-model", typ, "ok")
    with open(os.path.join(DATA, "gptoss_gguf_ref.json"), "w") as f:
        json.dump({"reference": "llama.cpp (tools/build_llama_cpp.sh), F32 KV cache, one batch",
                   "cases": cases}, f, indent=1)
    np.concatenate([b.ravel() for b in blobs]).astype(np.float32).tofile(os.path.join(DATA, "gptoss_gguf_ref.bin"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama", default=os.path.join(os.path.dirname(ROOT), "llama-cpp"))
    ap.add_argument("--ember", default=os.path.join(ROOT, "build", "ember"))
    ap.add_argument("--skip-hf", action="store_true", help="keep the Hugging Face folder and its references")
    args = ap.parse_args()
    if transformers.__version__ != TRANSFORMERS_VERSION:
        raise SystemExit(f"transformers {transformers.__version__}; pinned to {TRANSFORMERS_VERSION}")
    if not args.skip_hf:
        hf_fixture()
        hf_mxfp4_fixture()
    gguf_fixtures(os.path.abspath(args.llama), args.ember)


if __name__ == "__main__":
    main()
