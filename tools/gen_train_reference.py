#!/usr/bin/env python3
"""PyTorch reference for ember's training engine (tests/train/train_pytorch_test.cpp).

Pinned: torch 2.15.0, transformers 5.25.0, numpy (any 2.x); run with
/work/venvs/hf/bin/python (CPU). Deterministic: fixed seeds, float64 math.

For each tiny model (Llama, Qwen2 with Q/K/V biases, Qwen3 with QK-norm,
Gemma 3 with a sliding window, attention and final logit soft-capping, tied
embeddings and (1 + w) norms), written to tests/data/train/hf_<arch>/ as a
float32 safetensors folder that ember loads directly, the script:
  * draws a batch (2 sequences of 10 tokens, next-token targets) and random
    teacher logits;
  * runs one step in float64 (eager attention, with Gemma 3's attention
    soft-capping applied as ember applies it: see eager_softcap): loss = mean over rows of
    w_kl * tau^2 * KL(softmax(teacher / tau) || softmax(student / tau))
    + w_ce * CE(student, target); records the loss and every parameter's
    gradient;
  * runs N_STEPS of torch.optim.AdamW on that batch (weight decay on 2-D
    tensors only, global-norm clipping, LR warm-up then cosine as in
    train/optimizer.h) and records every parameter after them.
Everything goes to tests/data/train/reference.bin (float32 arrays) with the
index reference.json: {arch: {settings, "loss", "arrays": {name: [offset,
count]}}}; tensor names are GGUF names (token_embd.weight, blk.0.attn_q.weight,
...), gradients under "grad/<name>", parameters after the steps under
"after/<name>".

Usage: /work/venvs/hf/bin/python tools/gen_train_reference.py
"""
import json
import math
import os

import numpy as np
import torch
from transformers import AutoModelForCausalLM, Gemma3TextConfig, LlamaConfig, Qwen2Config, Qwen3Config
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.gemma3.modeling_gemma3 import eager_attention_forward

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "train")
N_SEQ, SEQ_LEN = 2, 10
TAU, W_KL, W_CE = 2.0, 0.7, 0.5
LR, MIN_LR_RATIO, WARMUP, N_STEPS = 1e-2, 0.1, 1, 3
BETAS, EPS, WEIGHT_DECAY, CLIP = (0.9, 0.999), 1e-8, 0.1, 1.0


def configs():
    common = dict(vocab_size=48, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6)
    rope = {"rope_type": "default", "rope_theta": 10000.0}
    return {
        "llama": LlamaConfig(**common, head_dim=8, rope_parameters=rope, tie_word_embeddings=False,
                             architectures=["LlamaForCausalLM"]),
        "qwen2": Qwen2Config(**common, rope_parameters=rope, tie_word_embeddings=True,
                             architectures=["Qwen2ForCausalLM"]),
        "qwen3": Qwen3Config(**common, head_dim=16, rope_parameters=rope, tie_word_embeddings=False,
                             architectures=["Qwen3ForCausalLM"]),
        "gemma3": Gemma3TextConfig(**{**common, "num_hidden_layers": 3}, head_dim=16, sliding_window=4,
                                   query_pre_attn_scalar=16, attn_logit_softcapping=4.0,
                                   final_logit_softcapping=6.0,
                                   layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                                   rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 100000.0},
                                                    "sliding_attention": {"rope_type": "default",
                                                                          "rope_theta": 10000.0}},
                                   tie_word_embeddings=True, architectures=["Gemma3ForCausalLM"]),
    }


def gguf_name(hf, arch):
    """GGUF tensor name of a Hugging Face parameter name."""
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    parts = hf.split(".")
    assert parts[0] == "model" and parts[1] == "layers", hf
    n, rest = parts[2], ".".join(parts[3:])
    table = {
        "input_layernorm.weight": "attn_norm.weight",
        "self_attn.q_proj.weight": "attn_q.weight", "self_attn.q_proj.bias": "attn_q.bias",
        "self_attn.k_proj.weight": "attn_k.weight", "self_attn.k_proj.bias": "attn_k.bias",
        "self_attn.v_proj.weight": "attn_v.weight", "self_attn.v_proj.bias": "attn_v.bias",
        "self_attn.o_proj.weight": "attn_output.weight",
        "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
        "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight",
        "pre_feedforward_layernorm.weight": "ffn_norm.weight",
        "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
        "post_attention_layernorm.weight": "post_attention_norm.weight" if arch == "gemma3" else "ffn_norm.weight",
    }
    return f"blk.{n}.{table[rest]}"


def eager_softcap(module, query, key, value, attention_mask, **kwargs):
    """Eager attention with the config's attn_logit_softcapping applied (Gemma 2's formula): transformers'
    Gemma 3 keeps the value but does not pass it to the attention; ember applies it when a config sets it."""
    cap = getattr(module.config, "attn_logit_softcapping", None)
    return eager_attention_forward(module, query, key, value, attention_mask, softcap=cap, **kwargs)


ALL_ATTENTION_FUNCTIONS.register("eager_softcap", eager_softcap)
ALL_MASK_ATTENTION_FUNCTIONS.register("eager_softcap", ALL_MASK_ATTENTION_FUNCTIONS["eager"])  # same masks


def lr_factor(step):
    """train/optimizer.h: linear warm-up over WARMUP steps, then cosine to MIN_LR_RATIO at N_STEPS."""
    if step < WARMUP:
        return (step + 1) / WARMUP
    progress = (step - WARMUP) / max(1, N_STEPS - WARMUP)
    return MIN_LR_RATIO + (1 - MIN_LR_RATIO) * 0.5 * (1 + math.cos(math.pi * progress))


def loss_fn(model, tokens, targets, teacher):
    logits = model(torch.tensor(tokens)).logits.reshape(N_SEQ * SEQ_LEN, -1)
    log_q = torch.log_softmax(logits / TAU, dim=-1)
    p = torch.softmax(teacher / TAU, dim=-1)
    kl = (p * (torch.log(p) - log_q)).sum(-1)
    ce = torch.nn.functional.cross_entropy(logits, torch.tensor(targets).reshape(-1), reduction="none")
    return (W_KL * TAU * TAU * kl + W_CE * ce).mean()


def main():
    torch.manual_seed(0)
    os.makedirs(ROOT, exist_ok=True)
    index, blobs, offset = {}, [], 0

    def put(name, arr, entry):
        nonlocal offset
        a = np.asarray(arr, dtype=np.float32).reshape(-1)
        entry["arrays"][name] = [offset, int(a.size)]
        blobs.append(a)
        offset += int(a.size)

    for arch, cfg in configs().items():
        rng = np.random.default_rng([ord(c) for c in arch])
        attn = "eager_softcap" if arch == "gemma3" else "eager"
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attn, dtype=torch.float32)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("norm.weight"):  # (1 + w) for Gemma, w for the others
                    base = 0.0 if arch == "gemma3" else 1.0
                    p.copy_(torch.tensor(base + 0.1 * rng.standard_normal(p.shape), dtype=torch.float32))
                else:
                    p.copy_(torch.tensor(0.2 * rng.standard_normal(p.shape), dtype=torch.float32))
        folder = os.path.join(ROOT, f"hf_{arch}")
        model.save_pretrained(folder, safe_serialization=True)
        for f in os.listdir(folder):  # only what ember reads
            if f not in ("config.json", "model.safetensors"):
                os.remove(os.path.join(folder, f))

        V = cfg.vocab_size
        seqs = rng.integers(0, V, size=(N_SEQ, SEQ_LEN + 1))
        tokens, targets = seqs[:, :SEQ_LEN], seqs[:, 1:]
        teacher = torch.tensor(2.0 * rng.standard_normal((N_SEQ * SEQ_LEN, V)), dtype=torch.float64)

        model = model.double()
        model.zero_grad()
        loss = loss_fn(model, tokens, targets, teacher)
        loss.backward()
        entry = {"n_seq": N_SEQ, "seq_len": SEQ_LEN, "tau": TAU, "w_kl": W_KL, "w_ce": W_CE, "lr": LR,
                 "min_lr_ratio": MIN_LR_RATIO, "warmup": WARMUP, "steps": N_STEPS, "beta1": BETAS[0],
                 "beta2": BETAS[1], "eps": EPS, "weight_decay": WEIGHT_DECAY, "clip": CLIP,
                 "tokens": tokens.reshape(-1).tolist(), "targets": targets.reshape(-1).tolist(),
                 "loss": float(loss), "arrays": {}}
        put("teacher", teacher.numpy(), entry)
        params = dict(model.named_parameters())
        for name, p in params.items():
            put("grad/" + gguf_name(name, arch), p.grad.numpy(), entry)

        decay = [p for p in params.values() if p.dim() >= 2]
        no_decay = [p for p in params.values() if p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                                 {"params": no_decay, "weight_decay": 0.0}], lr=LR, betas=BETAS, eps=EPS)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor)
        norms = []
        for _ in range(N_STEPS):
            opt.zero_grad()
            loss_fn(model, tokens, targets, teacher).backward()
            norms.append(float(torch.nn.utils.clip_grad_norm_(list(params.values()), CLIP)))
            opt.step()
            sched.step()
        entry["grad_norms"] = norms
        for name, p in params.items():
            put("after/" + gguf_name(name, arch), p.detach().numpy(), entry)
        index[arch] = entry
        print(arch, "loss", float(loss), "grad norms", norms)

    np.concatenate(blobs).astype("<f4").tofile(os.path.join(ROOT, "reference.bin"))
    with open(os.path.join(ROOT, "reference.json"), "w") as f:
        json.dump(index, f, indent=1)
    print("reference.bin:", offset * 4, "bytes")


if __name__ == "__main__":
    main()
