#!/usr/bin/env python3
"""A GPTQ checkpoint of Qwen2.5-0.5B's linear shapes (vocab cut to 32000) with random codes, for load-time
and speed figures (docs/quantization.md). Usage: gen_hf_quant_bench_checkpoint.py OUT_DIR DESC_ACT(0|1)
Random codes and scales: says nothing of quality, only of load time and kernel speed."""
import json, os, struct, sys
import numpy as np
out, act = sys.argv[1], sys.argv[2] == "1"
rng = np.random.default_rng(0)
H, FF, L, NH, KV, V, G = 896, 4864, 24, 14, 2, 32000, 128
hd = H // NH
tensors = []
def add(name, dt, a): tensors.append((name, dt, a))
add("model.embed_tokens.weight", "F16", (rng.standard_normal((V, H)) * 0.02).astype(np.float16))
add("model.norm.weight", "F16", np.ones(H, np.float16))
for l in range(L):
    b = f"model.layers.{l}."
    add(b + "input_layernorm.weight", "F16", np.ones(H, np.float16))
    add(b + "post_attention_layernorm.weight", "F16", np.ones(H, np.float16))
    for lin, n, k in [("self_attn.q_proj", H, H), ("self_attn.k_proj", KV * hd, H), ("self_attn.v_proj", KV * hd, H),
                      ("self_attn.o_proj", H, H), ("mlp.gate_proj", FF, H), ("mlp.up_proj", FF, H), ("mlp.down_proj", H, FF)]:
        p = b + lin
        add(p + ".qweight", "I32", rng.integers(-2**31, 2**31, size=(k // 8, n), dtype=np.int64).astype(np.int32))
        add(p + ".qzeros", "I32", np.full((k // G, n // 8), 0x77777777, np.int32))
        add(p + ".scales", "F16", (rng.random((k // G, n)) * 0.01 + 0.001).astype(np.float16))
        g = (rng.permutation(k) // G) if act else (np.arange(k) // G)
        add(p + ".g_idx", "I32", g.astype(np.int32))
        if lin in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"):
            add(p + ".bias", "F16", np.zeros(n, np.float16))
header, off = {}, 0
for name, dt, a in tensors:
    header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
    off += a.nbytes
h = json.dumps(header).encode(); h += b" " * ((8 - len(h) % 8) % 8)
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    for _, _, a in tensors: f.write(np.ascontiguousarray(a).tobytes())
cfg = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": H, "intermediate_size": FF,
       "num_hidden_layers": L, "num_attention_heads": NH, "num_key_value_heads": KV, "vocab_size": V,
       "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": True,
       "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": G, "sym": True, "desc_act": act,
                               "checkpoint_format": "gptq"}}
json.dump(cfg, open(os.path.join(out, "config.json"), "w"))
