#!/usr/bin/env python3
"""One training step of a Gemma 3 270M-shaped model in PyTorch eager on the CPU:
the reference side of `ember distill --bench-steps` (docs/distillation.md).

The model is transformers' Gemma3ForCausalLM with the default model's shape
(18 layers, n_embd 640, FFN 2048, 4 query heads / 1 KV head of 256, a
262144-token tied head, sliding window 512 on 5 of every 6 layers), random
float32 weights (the time does not depend on the values), default attention
(sdpa). A step is what ember's is: forward over batch x seq_len tokens,
cross-entropy on the next tokens (logits in float32), backward, gradient
clipping and an AdamW step over the trained parameters: every block tensor
(--train layers: embeddings and the final norm frozen, as `ember distill
--train layers`) or everything (--train all).

Pinned: torch 2.15.0, transformers 5.25.0 (/work/venvs/hf/bin/python).
Usage: python tools/bench_train_pytorch.py --threads 2 --steps 5 [--batch 4] [--seq-len 256] [--train layers] [--bf16]
(--bf16: the forward under torch.autocast("cpu", bfloat16), the comparison for `ember distill --bf16`.)
Prints the seconds of every step and the median (the first step is reported
too: it includes allocator warm-up).
"""
import argparse
import statistics
import time

import torch
from transformers import Gemma3ForCausalLM, Gemma3TextConfig


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--layers", type=int, default=18)
    ap.add_argument("--train", choices=["layers", "all"], default="layers")
    ap.add_argument("--attn", default="sdpa")
    ap.add_argument("--bf16", action="store_true", help="torch.autocast(cpu, bfloat16) around the forward")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    cfg = Gemma3TextConfig(vocab_size=262144, hidden_size=640, intermediate_size=2048, num_hidden_layers=a.layers,
                           num_attention_heads=4, num_key_value_heads=1, head_dim=256, query_pre_attn_scalar=256,
                           sliding_window=512, rms_norm_eps=1e-6, max_position_embeddings=32768,
                           layer_types=["full_attention" if (i + 1) % 6 == 0 else "sliding_attention"
                                        for i in range(a.layers)],
                           tie_word_embeddings=True)
    model = Gemma3ForCausalLM(cfg).float()
    model.config._attn_implementation = a.attn
    model.train()
    if a.train == "layers":
        for name, p in model.named_parameters():
            p.requires_grad_(".layers." in name)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.0)
    n_trained = sum(p.numel() for p in params)
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, cfg.vocab_size, (a.batch, a.seq_len + 1), generator=g)
    x, y = tokens[:, :-1], tokens[:, 1:]
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
            logits = model(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, cfg.vocab_size), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
    tok = a.batch * a.seq_len
    med = statistics.median(times[1:] if len(times) > 1 else times)
    print(f"pytorch {torch.__version__}{' bf16 autocast' if a.bf16 else ''}: {a.steps} steps of {tok} tokens, "
          f"{n_trained} trained parameters, "
          f"{a.threads} threads: median step {med:.3f} s (excluding the first), {tok / med:.1f} tokens/s")
    print("step seconds:", " ".join(f"{t:.3f}" for t in times))


if __name__ == "__main__":
    main()
