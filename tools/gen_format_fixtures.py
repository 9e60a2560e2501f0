#!/usr/bin/env python3
"""Generates the model-format fixtures under tests/data/model/.

Rerunnable and deterministic. Writers and references are independent of
ember's C++ code:
  * ref_types.gguf       - written by gguf-py (llama.cpp's Python package):
                           every metadata value type, nested arrays, tensors
                           of several types, general.alignment = 64.
  * hf_llama_sharded/    - tiny LlamaForCausalLM (F16), two shards +
                           model.safetensors.index.json, llama3 RoPE scaling.
  * hf_qwen2/            - tiny Qwen2ForCausalLM (BF16), q/k/v biases, tied
                           embeddings (no lm_head.weight).
  * hf_qwen3/            - tiny Qwen3ForCausalLM (BF16), QK-norm, explicit
                           head_dim, untied output
  * hf_gemma3/           - tiny Gemma3ForCausalLM (BF16 + one F32 norm),
                           q/k norms, layer_types, per-layer-type RoPE.
Configs are written by transformers' config classes (save_pretrained);
safetensors files by the safetensors library. Each HF folder also gets
expected.json: the GGUF tensor names from gguf-py's tensor name map, GGML
shapes and checksums of the values ember should expose (Gemma norms + 1),
and the metadata values read back through transformers' config objects.

Usage: python3 tools/gen_format_fixtures.py
"""
import json
import math
import os
import shutil
import sys

import numpy as np

import gguf
from safetensors import TensorSpec, serialize_file
from transformers import Gemma3TextConfig, LlamaConfig, Qwen2Config, Qwen3Config

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "model")


# --------------------------------------------------------------------------
# GGUF written by gguf-py

def pattern_bytes(n, seed):
    """Deterministic bytes the C++ test recomputes: (i * 7 + seed) & 0xff."""
    return ((np.arange(n, dtype=np.int64) * 7 + seed) & 0xFF).astype(np.uint8)


def write_ref_gguf(path):
    w = gguf.GGUFWriter(path, arch="llama")  # writes general.architecture = llama
    w.add_custom_alignment(64)
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -2000000000)
    w.add_float32("t.f32", 1.5)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "h\u00e9llo")
    w.add_uint64("t.u64", 2**63 + 5)
    w.add_int64("t.i64", -(2**62))
    w.add_float64("t.f64", 2.718281828459045)
    w.add_key_value("t.arr_u8", [1, 2, 255], gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.UINT8)
    w.add_key_value("t.arr_i16", [-5, 7], gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.INT16)
    w.add_array("t.arr_i32", [-1, 0, 1, 2147483647])
    w.add_key_value("t.arr_u64", [1, 2**64 - 1], gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.UINT64)
    w.add_array("t.arr_f32", [0.5, -0.25])
    w.add_key_value("t.arr_f64", [1e300, -2.5], gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.FLOAT64)
    w.add_array("t.arr_bool", [True, False, True])
    w.add_array("t.arr_str", ["a", "", "\u00fcnicode"])
    w.add_array("t.arr_nested", [[1, 2], [3], [4, 5, 6]])
    w.add_array("t.arr_nested_str", [["x", "y"], ["z"]])

    f32 = (np.arange(12, dtype=np.float32) * 0.25 - 1.0).reshape(4, 3)  # ne = [3, 4]
    w.add_tensor("f32_tensor", f32)
    f16 = (np.arange(64, dtype=np.float32) / 8.0).astype(np.float16).reshape(2, 32)  # ne = [32, 2]
    w.add_tensor("f16_tensor", f16)
    q8 = pattern_bytes(2 * 2 * 34, 1)  # q8_0: 2 rows x 64 elements = 2 blocks per row
    w.add_tensor("q8_tensor", q8.reshape(2, 68), raw_shape=(2, 68), raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    q4k = pattern_bytes(3 * 144, 2)  # q4_K: 3 rows x 256 elements
    w.add_tensor("q4k_tensor", q4k.reshape(3, 144), raw_shape=(3, 144), raw_dtype=gguf.GGMLQuantizationType.Q4_K)
    i32 = np.arange(5, dtype=np.int32) - 2
    w.add_tensor("i32_tensor", i32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# --------------------------------------------------------------------------
# Hugging Face folders

def to_bf16_bits(x):
    """float32 -> bfloat16 bits, round to nearest even."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def bf16_bits_to_f32(b):
    return (b.astype(np.uint32) << 16).view(np.float32)


class Tensor:
    def __init__(self, name, values_f32, dtype):
        self.name = name
        self.dtype = dtype  # "F32", "F16", "BF16"
        if dtype == "F32":
            self.raw = np.ascontiguousarray(values_f32.astype(np.float32))
            self.decoded = self.raw
            self.spec_dtype = "float32"
        elif dtype == "F16":
            self.raw = np.ascontiguousarray(values_f32.astype(np.float16))
            self.decoded = self.raw.astype(np.float32)
            self.spec_dtype = "float16"
        else:
            self.raw = np.ascontiguousarray(to_bf16_bits(values_f32))
            self.decoded = bf16_bits_to_f32(self.raw)
            self.spec_dtype = "bfloat16"


def save_safetensors(path, tensors):
    specs = {t.name: TensorSpec(dtype=t.spec_dtype, shape=list(t.raw.shape), data_ptr=t.raw.ctypes.data,
                                data_len=t.raw.nbytes) for t in tensors}
    serialize_file(specs, path, metadata={"format": "pt"})
    os.chmod(path, 0o644)


def make_weights(cfg, rng, dtype, norm_dtype=None, qkv_bias=False, qk_norm=False, gemma=False, lm_head=True):
    """Tensors of a decoder-only model with HF names, PyTorch shapes."""
    h, ff, v = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    hd = getattr(cfg, "head_dim", None) or h // cfg.num_attention_heads
    nq, nkv = cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd
    norm_dtype = norm_dtype or dtype
    out = []

    def mat(name, shape, dt=dtype, scale=0.5):
        out.append(Tensor(name, (rng.standard_normal(shape) * scale).astype(np.float32), dt))

    mat("model.embed_tokens.weight", (v, h))
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        mat(p + "input_layernorm.weight", (h,), norm_dtype, 0.1)
        mat(p + "self_attn.q_proj.weight", (nq, h))
        mat(p + "self_attn.k_proj.weight", (nkv, h))
        mat(p + "self_attn.v_proj.weight", (nkv, h))
        mat(p + "self_attn.o_proj.weight", (h, nq))
        if qkv_bias:
            mat(p + "self_attn.q_proj.bias", (nq,))
            mat(p + "self_attn.k_proj.bias", (nkv,))
            mat(p + "self_attn.v_proj.bias", (nkv,))
        if qk_norm:
            mat(p + "self_attn.q_norm.weight", (hd,), norm_dtype, 0.1)
            mat(p + "self_attn.k_norm.weight", (hd,), norm_dtype, 0.1)
        mat(p + "post_attention_layernorm.weight", (h,), norm_dtype, 0.1)
        if gemma:
            mat(p + "pre_feedforward_layernorm.weight", (h,), norm_dtype, 0.1)
            mat(p + "post_feedforward_layernorm.weight", (h,), norm_dtype, 0.1)
        mat(p + "mlp.gate_proj.weight", (ff, h))
        mat(p + "mlp.up_proj.weight", (ff, h))
        mat(p + "mlp.down_proj.weight", (h, ff))
    mat("model.norm.weight", (h,), "F32" if gemma else norm_dtype, 0.1)
    if lm_head:
        mat("lm_head.weight", (v, h))
    return out


def expected_tensors(arch, cfg, tensors, tied, norm_plus_one):
    """GGUF names via gguf-py's tensor map; values as ember should expose them."""
    name_map = gguf.get_tensor_name_map(arch, cfg.num_hidden_layers)
    exp = {}
    for t in tensors:
        name = name_map.get_name(t.name, try_suffixes=(".weight", ".bias"))
        assert name is not None, t.name
        if tied and name == "output.weight":
            continue
        vals = t.decoded.astype(np.float64)
        one_d = t.raw.ndim == 1
        if one_d and norm_plus_one and "norm" in name:
            vals = (t.decoded + np.float32(1.0)).astype(np.float64)  # llama.cpp's converter: w + 1
        exp[name] = {
            "hf_name": t.name,
            "ne": list(reversed(t.raw.shape)),
            "dtype": "f32" if one_d else t.dtype.lower(),  # 1-D tensors are exposed as F32
            "first": [float(x) for x in vals.reshape(-1)[:4]],
            "sum": float(vals.sum()),
            "abs_sum": float(np.abs(vals).sum()),
        }
    return exp


def llama3_factors(head_dim, theta, rs):
    """Llama 3.1 frequency divisors (what llama.cpp's converter writes as rope_freqs)."""
    factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    low_wl, high_wl = old / low, old / high
    out = []
    for i in range(0, head_dim, 2):
        freq = 1.0 / (theta ** (i / head_dim))
        wl = 2 * math.pi / freq
        if wl < high_wl:
            out.append(1.0)
        elif wl > low_wl:
            out.append(factor)
        else:
            smooth = (old / wl - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return out


def rope_params(cfg, layer_type=None):
    rp = cfg.rope_parameters
    if layer_type is not None:
        rp = rp[layer_type]
    return rp


def common_meta(arch, cfg):
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return {
        "general.architecture": arch,
        f"{arch}.block_count": cfg.num_hidden_layers,
        f"{arch}.context_length": cfg.max_position_embeddings,
        f"{arch}.embedding_length": cfg.hidden_size,
        f"{arch}.feed_forward_length": cfg.intermediate_size,
        f"{arch}.vocab_size": cfg.vocab_size,
        f"{arch}.attention.head_count": cfg.num_attention_heads,
        f"{arch}.attention.head_count_kv": cfg.num_key_value_heads,
        f"{arch}.attention.key_length": hd,
        f"{arch}.attention.value_length": hd,
        f"{arch}.attention.layer_norm_rms_epsilon": cfg.rms_norm_eps,
        f"{arch}.rope.dimension_count": hd,
        f"{arch}.rope.type": "neox",
    }


def write_folder(name, cfg, arch, tensors, tied, norm_plus_one, meta, shards=None, extra=None):
    d = os.path.join(ROOT, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    cfg.save_pretrained(d)
    if shards is None:
        save_safetensors(os.path.join(d, "model.safetensors"), tensors)
    else:
        weight_map = {}
        n = len(shards)
        for k, names in enumerate(shards):
            fname = f"model-{k + 1:05d}-of-{n:05d}.safetensors"
            part = [t for t in tensors if t.name in names]
            save_safetensors(os.path.join(d, fname), part)
            for t in part:
                weight_map[t.name] = fname
        total = sum(t.raw.nbytes for t in tensors)
        with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2, sort_keys=True)
    exp = {"metadata": meta, "tensors": expected_tensors(arch, cfg, tensors, tied, norm_plus_one)}
    if extra:
        exp.update(extra)
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump(exp, f, indent=1, sort_keys=True)
    size = sum(os.path.getsize(os.path.join(d, x)) for x in os.listdir(d))
    print(f"{name}: {size} bytes")
    assert size < 200_000


def gen_llama():
    rope = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64, "rope_theta": 500000.0}
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      rms_norm_eps=1e-5, rope_parameters=rope, tie_word_embeddings=False,
                      bos_token_id=1, eos_token_id=2, architectures=["LlamaForCausalLM"])
    rng = np.random.default_rng(1)
    tensors = make_weights(cfg, rng, "F16")
    meta = common_meta("llama", cfg)
    rp = rope_params(cfg)
    meta.update({
        "llama.rope.freq_base": rp["rope_theta"],
        "llama.rope.scaling.type": "llama3",
        "llama.rope.scaling.factor": rp["factor"],
        "llama.rope.scaling.low_freq_factor": rp["low_freq_factor"],
        "llama.rope.scaling.high_freq_factor": rp["high_freq_factor"],
        "llama.rope.scaling.original_context_length": rp["original_max_position_embeddings"],
        "tokenizer.ggml.bos_token_id": cfg.bos_token_id,
        "tokenizer.ggml.eos_token_id": cfg.eos_token_id,
    })
    shard0 = {t.name for t in tensors if t.name.startswith("model.embed") or t.name.startswith("model.layers.0.")}
    shard1 = {t.name for t in tensors} - shard0
    hd = cfg.hidden_size // cfg.num_attention_heads
    extra = {"rope_freqs": llama3_factors(hd, rp["rope_theta"], rp)}
    write_folder("hf_llama_sharded", cfg, gguf.MODEL_ARCH.LLAMA, tensors, False, False, meta,
                 shards=[shard0, shard1], extra=extra)


def gen_qwen2():
    cfg = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=128,
                      rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                      tie_word_embeddings=True, eos_token_id=3, architectures=["Qwen2ForCausalLM"])
    rng = np.random.default_rng(2)
    tensors = make_weights(cfg, rng, "BF16", qkv_bias=True, lm_head=False)
    meta = common_meta("qwen2", cfg)
    meta["qwen2.rope.freq_base"] = rope_params(cfg)["rope_theta"]
    meta["tokenizer.ggml.eos_token_id"] = cfg.eos_token_id
    write_folder("hf_qwen2", cfg, gguf.MODEL_ARCH.QWEN2, tensors, True, False, meta)


def gen_qwen3():
    # Explicit head_dim (16) unlike hidden_size / heads (8), as in Qwen3
    # releases; QK-norm applied directly (no +1), untied output.
    cfg = Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=128,
                      rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                      tie_word_embeddings=False, eos_token_id=3, architectures=["Qwen3ForCausalLM"])
    rng = np.random.default_rng(4)
    tensors = make_weights(cfg, rng, "BF16", qk_norm=True)
    meta = common_meta("qwen3", cfg)
    meta["qwen3.rope.freq_base"] = rope_params(cfg)["rope_theta"]
    meta["tokenizer.ggml.eos_token_id"] = cfg.eos_token_id
    write_folder("hf_qwen3", cfg, gguf.MODEL_ARCH.QWEN3, tensors, False, False, meta)


def gen_gemma3():
    cfg = Gemma3TextConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                           num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                           max_position_embeddings=512, rms_norm_eps=1e-6, sliding_window=16,
                           query_pre_attn_scalar=16,
                           layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                           rope_parameters={
                               "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
                               "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
                           tie_word_embeddings=True, architectures=["Gemma3ForCausalLM"])
    rng = np.random.default_rng(3)
    tensors = make_weights(cfg, rng, "BF16", qk_norm=True, gemma=True, lm_head=False)
    meta = common_meta("gemma3", cfg)
    full, sliding = rope_params(cfg, "full_attention"), rope_params(cfg, "sliding_attention")
    pattern = cfg.layer_types.index("full_attention") + 1
    meta.update({
        "gemma3.rope.freq_base": full["rope_theta"],
        "gemma3.rope.local_freq_base": sliding["rope_theta"],
        "gemma3.rope.scaling.type": full["rope_type"],
        "gemma3.rope.scaling.factor": full["factor"],
        "gemma3.attention.sliding_window": cfg.sliding_window,
        "gemma3.attention.sliding_window_pattern": pattern,
        "gemma3.attention.query_pre_attn_scalar": cfg.query_pre_attn_scalar,
        "tokenizer.ggml.bos_token_id": cfg.bos_token_id,
        "tokenizer.ggml.eos_token_id": cfg.eos_token_id,
        "tokenizer.ggml.padding_token_id": cfg.pad_token_id,
    })
    write_folder("hf_gemma3", cfg, gguf.MODEL_ARCH.GEMMA3, tensors, True, True, meta)


def main():
    os.makedirs(ROOT, exist_ok=True)
    write_ref_gguf(os.path.join(ROOT, "ref_types.gguf"))
    print("ref_types.gguf:", os.path.getsize(os.path.join(ROOT, "ref_types.gguf")), "bytes")
    gen_llama()
    gen_qwen2()
    gen_qwen3()
    gen_gemma3()


if __name__ == "__main__":
    sys.exit(main())
