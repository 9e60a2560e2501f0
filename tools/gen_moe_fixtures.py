#!/usr/bin/env python3
"""Tiny random-weight Mixture-of-Experts models saved by Hugging Face
`transformers`, and their reference logits, for tests/model/moe_reference_test.cpp.

For each of Qwen3-MoE, Qwen2-MoE (shared expert with its sigmoid gate),
OLMoE and Mixtral: a model of hidden size 64, 2 layers, 4-8 experts (2 used),
vocabulary 96, with fixed-seed weights stored in BF16, written twice by
transformers' own save_pretrained:
  tests/data/model/hf_<arch>/            the default format (one 2-D matrix per
                                         expert: mlp.experts.{e}.gate_proj /
                                         Mixtral's block_sparse_moe.experts.{e}.w1,
                                         what checkpoints released before v5 hold)
  tests/data/model/hf_<arch>_fused/      save_original_format=False: v5's fused
                                         3-D experts.gate_up_proj [E, 2I, H] and
                                         experts.down_proj [E, H, I]
(transformers 5.x writes the per-expert format by default and converts on
load, so both layouts come from transformers itself, no hand-written split
or fuse.) The router weights are drawn large enough that no test position
has two router logits within 1e-2 of each other at the k-th place (checked here: a tie would make the
chosen experts depend on float rounding), and OLMoE has as many KV heads as
heads (llama.cpp reads its k_norm as [n_embd]).

References (float32, eager attention), in tests/data/model/hf_moe_reference.json:
  {folder: {"vocab", "cases": [{"tokens", "logits" [n][vocab], "greedy" [32]}]}}
The fused folder's logits are checked here to equal the per-expert one's.

Rerun: /work/venvs/hf/bin/python tools/gen_moe_fixtures.py
(pinned: transformers 5.25.0, torch 2.x).
"""
import json
import os
import shutil
import zlib

import numpy as np
import torch
import transformers
from transformers import (AutoModelForCausalLM, MixtralConfig, OlmoeConfig, Qwen2MoeConfig, Qwen3MoeConfig)

TRANSFORMERS_VERSION = "5.25.0"
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "model")
VOCAB = 96
COMMON = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
              max_position_embeddings=256, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
              pad_token_id=0)

CONFIGS = {
    "qwen3moe": lambda: Qwen3MoeConfig(**COMMON, num_key_value_heads=2, head_dim=16, intermediate_size=96,
                                    moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2,
                                    norm_topk_prob=True, rms_norm_eps=1e-6, rope_theta=1000000.0),
    "qwen2moe": lambda: Qwen2MoeConfig(**COMMON, num_key_value_heads=2, intermediate_size=96,
                                    moe_intermediate_size=32, shared_expert_intermediate_size=48,
                                    num_experts=4, num_experts_per_tok=2, norm_topk_prob=False,
                                    rms_norm_eps=1e-6, rope_theta=1000000.0),
    "olmoe": lambda: OlmoeConfig(**COMMON, num_key_value_heads=4, intermediate_size=32, num_experts=8,
                                 num_experts_per_tok=2, norm_topk_prob=False, rms_norm_eps=1e-5),
    "mixtral": lambda: MixtralConfig(**COMMON, num_key_value_heads=2, intermediate_size=48, num_local_experts=4,
                                     num_experts_per_tok=2, rms_norm_eps=1e-5, rope_theta=1000000.0),
}
LENGTHS = (1, 7, 40)
N_GREEDY = 32
TIE_GAP = 1e-2  # router logits


def init_weights(model, seed):
    """Norms 1 + 0.1 N(0, 1); routers N(0, 0.3); other matrices N(0, 0.1); biases N(0, 0.05)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if "norm" in name or "layernorm" in name:
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith(".gate.weight") or "router" in name or name.endswith("mlp.gate.weight"):
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))


def router_gaps(model, toks):
    """Smallest gap between the k-th and (k+1)-th router logit over the positions of toks."""
    gaps = []
    hooks = []
    k = model.config.num_experts_per_tok

    def hook(_m, _inp, out):
        logits = out[0] if isinstance(out, tuple) else out
        top = torch.topk(logits.double(), k + 1, dim=-1).values
        gaps.append(float((top[:, k - 1] - top[:, k]).min()))

    for name, m in model.named_modules():
        if name.endswith("mlp.gate") or name.endswith("block_sparse_moe.gate"):
            hooks.append(m.register_forward_hook(hook))
    with torch.no_grad():
        model(torch.tensor([toks]))
    for h in hooks:
        h.remove()
    return min(gaps)


def main():
    if transformers.__version__ != TRANSFORMERS_VERSION:
        raise SystemExit(f"transformers {transformers.__version__}; these fixtures are pinned to {TRANSFORMERS_VERSION}")
    out = {}
    for arch, make in CONFIGS.items():
        name = f"hf_{arch}"
        rng = np.random.default_rng(zlib.crc32(name.encode()))
        cases_tokens = [[int(t) for t in rng.integers(3, VOCAB, size=n)] for n in LENGTHS]
        # The first seed whose test prompts stay clear of routing ties.
        for seed in range(100):
            torch.manual_seed(seed)
            model = AutoModelForCausalLM.from_config(make(), attn_implementation="eager").float().eval()
            init_weights(model, 1000 + seed)
            model = model.to(torch.bfloat16).float()  # the values stored, as float32
            gap = min(router_gaps(model, t) for t in cases_tokens)
            if gap > TIE_GAP:
                break
        else:
            raise SystemExit(f"{arch}: no seed without routing near-ties")
        paths = {}
        state = {k: v.to(torch.bfloat16) for k, v in model.state_dict().items()}
        for layout, kw in (("", {}), ("_fused", {"save_original_format": False})):
            path = os.path.join(ROOT, name + layout)
            shutil.rmtree(path, ignore_errors=True)
            model.save_pretrained(path, state_dict=state, **kw)
            paths[layout] = path
        # The references come from the saved folder, loaded as transformers
        # loads it (float32; buffers such as RoPE frequencies recomputed).
        model = AutoModelForCausalLM.from_pretrained(paths[""], dtype=torch.float32,
                                                     attn_implementation="eager").eval()
        gap = min(router_gaps(model, t) for t in cases_tokens)
        assert gap > TIE_GAP / 2, (arch, gap)
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
        # The fused layout loads back to the same function.
        fused = AutoModelForCausalLM.from_pretrained(paths["_fused"], dtype=torch.float32,
                                                     attn_implementation="eager").eval()
        with torch.no_grad():
            f = fused(torch.tensor([cases_tokens[-1]])).logits[0].float().numpy()
        d = float(np.abs(f - np.array(cases[-1]["logits"])).max())
        assert d < 1e-5, (arch, d)
        entry = {"vocab": VOCAB, "seed": seed, "router_gap": gap, "cases": cases}
        out[name] = entry
        out[name + "_fused"] = {"same_as": name}
        print(name, "seed", seed, "gap %.3g" % gap, [len(c["tokens"]) for c in cases])
    with open(os.path.join(ROOT, "hf_moe_reference.json"), "w") as fh:
        json.dump({"transformers": transformers.__version__, "torch": torch.__version__, "models": out}, fh)


if __name__ == "__main__":
    main()
