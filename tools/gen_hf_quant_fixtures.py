#!/usr/bin/env python3
"""Fixtures for ember's loader of Hugging Face GPTQ / AWQ / compressed-tensors checkpoints.

Writes (all small, committed):
  tests/data/model/hf_quant/cases.safetensors + cases.json
      one quantized linear per case (GPTQ v1 / gptq_v2, 4- and 8-bit, group 32 / 64 / 128 /
      per-channel, desc_act with scattered and with block-aligned g_idx; AWQ GEMM g64 / g128;
      compressed-tensors pack-quantized sym / asym / per-channel and int8 W8A8 with bf16 and
      f32 scales). cases.json: {name, quantization_config, prefix, n_out, n_in, layout (the block
      type ember must pick), ref_fnv64 (FNV-1a 64 of the float32 bits of the reference
      dequantization, row-major [n_out, n_in])}.
  tests/data/model/hf_quant_<fmt>/ (config.json + model.safetensors [+ tokenizer.json])
      tiny 2-layer Llama / Qwen2 models whose linears are quantized in each format;
  tests/data/model/hf_quant_reference.json
      transformers (float32) logits of the same models with the library-dequantized weights.

The packing follows the documented layouts (src/model/io/hf_quant.h). The reference
dequantization is computed here with NumPy (w = s * (q - z) in float32) and, when torch is
importable, CHECKED BIT FOR BIT against the libraries' own code run in float32:
  GPTQ  GPTQModel 7.7.0 gptqmodel/nn_modules/qlinear/__init__.py PackableQuantLinear.dequantize_weight
        (+ utils/model.py convert_gptq_v1_to_v2_format_module for v1 checkpoints), and AutoGPTQ's
        per-nibble v1 rule ((stored + 1) & maxq) which the two share for the zeros used here;
  AWQ   AutoAWQ 0.2.9 awq/utils/packing_utils.py dequantize_gemm;
  CT    compressed-tensors 0.20.0 compressors/pack_quantized/helpers.py unpack_from_int32 +
        quantization/lifecycle/forward_helpers.py _dequantize.
and in float16 (fp16 scales): the library's fp16 result must equal float16(reference).
The library sources are read from the sdists / wheel unpacked under LIBS (pip download --no-deps
autoawq==0.2.9 compressed-tensors==0.20.0 gptqmodel==7.7.0); only the named functions are loaded.

Rerun: PYTHONPATH=/usr/lib/python3/dist-packages python3 tools/gen_hf_quant_fixtures.py [LIBS]
(torch from Debian's python3-torch; transformers for the logits).
"""
import ast
import json
import math
import os
import shutil
import struct
import sys
import types
import typing

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "model")
LIBS = sys.argv[1] if len(sys.argv) > 1 else "/tmp/hfq/dl"
AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]

try:
    import torch
except ImportError:  # fixtures still written, without the library check
    torch = None


# ------------------------------------------------------------------ helpers

def fnv64(arr_f32):
    h = 0xCBF29CE484222325
    for b in np.ascontiguousarray(arr_f32, dtype=np.float32).tobytes():
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def to_bf16(x):
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_f32(b):
    return (b.astype(np.uint32) << 16).view(np.float32)


def store_float(x, dtype):
    """(raw array to write, exact float32 values) for dtype F16 / BF16 / F32."""
    if dtype == "F16":
        raw = np.asarray(x, dtype=np.float16)
        return raw, raw.astype(np.float32)
    if dtype == "BF16":
        raw = to_bf16(x)
        return raw, bf16_f32(raw)
    raw = np.asarray(x, dtype=np.float32)
    return raw, raw


def write_safetensors(path, tensors):
    """tensors: list of (name, dtype string, numpy array)."""
    header, blobs, off = {}, [], 0
    for name, dt, a in tensors:
        b = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def words(u32):
    return np.asarray(u32, dtype=np.uint64).astype(np.uint32).view(np.int32)


# ------------------------------------------------------------------ quantization (RTN, to get codes)

def rtn(w, group, bits, sym, scale_dtype, rng, g_idx=None):
    """Codes q [N,K] (unsigned), zeros z [N,G], exact f32 scales s [N,G], raw scales, g_idx [K]."""
    n, k = w.shape
    gs = k if group == -1 else group
    if g_idx is None:
        g_idx = np.arange(k) // gs
    ng = int(g_idx.max()) + 1
    maxq = (1 << bits) - 1
    q = np.zeros((n, k), np.int64)
    z = np.zeros((n, ng), np.int64)
    s = np.zeros((n, ng), np.float32)
    for g in range(ng):
        cols = np.where(g_idx == g)[0]
        x = w[:, cols]
        if sym:
            sc = np.maximum(np.abs(x).max(axis=1), 1e-4) * 2 / maxq
            zz = np.full(n, (maxq + 1) // 2)
        else:
            lo, hi = np.minimum(x.min(axis=1), 0), np.maximum(x.max(axis=1), 0)
            sc = np.maximum(hi - lo, 1e-4) / maxq
            zz = np.clip(np.round(-lo / sc), 0, maxq).astype(np.int64)
        _, sc = store_float(sc, scale_dtype)
        s[:, g], z[:, g] = sc, zz
        q[:, cols] = np.clip(np.round(x / sc[:, None]) + zz[:, None], 0, maxq)
    return q, z, s, g_idx


def reference(q, z, s, g_idx):
    return (s[:, g_idx] * (q - z[:, g_idx]).astype(np.float32)).astype(np.float32)


# ------------------------------------------------------------------ packers (documented layouts)

def pack_gptq(q, z, s, g_idx, bits, v1, scale_dtype, prefix):
    n, k = q.shape
    per = 32 // bits
    qw = np.zeros((k // per, n), np.uint64)
    for kk in range(k):
        qw[kk // per] |= q[:, kk].astype(np.uint64) << np.uint64(bits * (kk % per))
    zs = (z - 1) & ((1 << bits) - 1) if v1 else z  # v1 stores zero - 1
    qz = np.zeros((z.shape[1], n // per), np.uint64)
    for nn in range(n):
        qz[:, nn // per] |= zs[nn].astype(np.uint64) << np.uint64(bits * (nn % per))
    raw_s, _ = store_float(s.T, scale_dtype)
    return [(prefix + ".qweight", "I32", words(qw)), (prefix + ".qzeros", "I32", words(qz)),
            (prefix + ".scales", scale_dtype, raw_s), (prefix + ".g_idx", "I32", g_idx.astype(np.int32))]


def pack_awq(q, z, s, scale_dtype, prefix):
    n, k = q.shape
    qw = np.zeros((k, n // 8), np.uint64)
    qz = np.zeros((z.shape[1], n // 8), np.uint64)
    for c in range(n // 8):
        for i in range(8):  # AutoAWQ from_linear: nibble i <- column c*8 + AWQ_ORDER[i]
            qw[:, c] |= q[c * 8 + AWQ_ORDER[i]].astype(np.uint64) << np.uint64(4 * i)
            qz[:, c] |= z[c * 8 + AWQ_ORDER[i]].astype(np.uint64) << np.uint64(4 * i)
    raw_s, _ = store_float(s.T, scale_dtype)
    return [(prefix + ".qweight", "I32", words(qw)), (prefix + ".qzeros", "I32", words(qz)),
            (prefix + ".scales", scale_dtype, raw_s)]


def pack_ct(q, z, s, bits, sym, scale_dtype, prefix, per_tensor=False, g_idx=None):
    """pack-quantized: offset-binary codes packed along K; zero points packed along N."""
    n, k = q.shape
    per = 32 // bits
    cols = -(-k // per)
    pk = np.zeros((n, cols), np.uint64)
    for kk in range(k):
        pk[:, kk // per] |= q[:, kk].astype(np.uint64) << np.uint64(bits * (kk % per))
    raw_s, _ = store_float(s[:1, :1].reshape(1) if per_tensor else s, scale_dtype)
    out = [(prefix + ".weight_packed", "I32", words(pk)), (prefix + ".weight_scale", scale_dtype, raw_s),
           (prefix + ".weight_shape", "I64", np.array([n, k], np.int64))]
    if not sym:
        zp = np.zeros((-(-n // per), z.shape[1]), np.uint64)
        for nn in range(n):
            zp[nn // per] |= z[nn].astype(np.uint64) << np.uint64(bits * (nn % per))
        out.append((prefix + ".weight_zero_point", "I32", words(zp)))
    if g_idx is not None:
        out.append((prefix + ".weight_g_idx", "I32", g_idx.astype(np.int32)))
    return out


def pack_ct_int8(q, s, scale_dtype, prefix, per_tensor=False):
    raw_s, _ = store_float(s[:1, 0] if per_tensor else s[:, :1], scale_dtype)
    return [(prefix + ".weight", "I8", (q - 128).astype(np.int8)), (prefix + ".weight_scale", scale_dtype, raw_s)]


# ------------------------------------------------------------------ the libraries' own dequantizers

def load_functions(path, names, env):
    """The named top-level functions / class methods of a library source file, compiled into env."""
    tree = ast.parse(open(path).read())
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name in names and node.name not in found:
            found[node.name] = node
    missing = set(names) - set(found)
    if missing:
        raise RuntimeError(f"{path}: missing {missing}")
    mod = ast.Module(body=[found[n] for n in names], type_ignores=[])
    exec(compile(mod, path, "exec"), env)
    return [env[n] for n in names]


class Libs:
    def __init__(self):
        t = torch
        gq = os.path.join(LIBS, "gptqmodel-7.7.0", "gptqmodel")
        env = {"t": t, "torch": t, "nn": t.nn, "BaseQuantLinear": object,
               "log": types.SimpleNamespace(info=types.SimpleNamespace(once=lambda *a, **k: None))}
        shift, self.gptq_deq, self.gptq_codes = load_functions(
            os.path.join(gq, "nn_modules", "qlinear", "__init__.py"),
            ["_torch_right_shift", "dequantize_weight", "_dequantize_from_codes"], env)
        (self.gptq_v1_to_v2,) = load_functions(os.path.join(gq, "utils", "model.py"),
                                               ["convert_gptq_v1_to_v2_format_module"], env)
        # Debian's torch 1.13 cannot index with int32 tensors (reverse_awq_order builds its column
        # permutation with dtype=int32): the same index values as int64.
        torch_i64 = types.SimpleNamespace(**{k: getattr(t, k) for k in dir(t) if not k.startswith("__")})
        torch_i64.arange = lambda *a, dtype=None, **k: t.arange(*a, dtype=t.int64 if dtype == t.int32 else dtype, **k)
        awq_env = {"__builtins__": __builtins__}
        src = open(os.path.join(LIBS, "autoawq-0.2.9", "awq", "utils", "packing_utils.py")).read()
        src = src.replace("import torch\n", "", 1)
        awq_env["torch"] = torch_i64
        exec(compile(src, "packing_utils.py", "exec"), awq_env)
        self.awq_deq = awq_env["dequantize_gemm"]
        ct = os.path.join(LIBS, "ct", "compressed_tensors")
        (self.ct_unpack,) = load_functions(os.path.join(ct, "compressors", "pack_quantized", "helpers.py"),
                                           ["unpack_from_int32"],
                                           {"torch": t, "math": math, "sys": sys, "Literal": typing.Literal})
        (self.ct_deq,) = load_functions(os.path.join(ct, "quantization", "lifecycle", "forward_helpers.py"),
                                        ["_dequantize"], {"torch": t})

    def gptq(self, tensors, bits, v1, dtype):
        d = {name.split(".")[-1]: a for name, _, a in tensors}
        m = types.SimpleNamespace()
        m.bits, m.pack_factor, m.maxq, m.planar = bits, 32 // bits, (1 << bits) - 1, False
        m.dequant_dtype = torch.int16 if bits == 8 else torch.int8
        m.qweight = torch.tensor(d["qweight"])
        m.qzeros = torch.nn.Parameter(torch.tensor(d["qzeros"]), requires_grad=False)
        m.scales = torch.tensor(d["scales"].astype(np.float32)).to(dtype) if d["scales"].dtype != np.uint16 \
            else torch.tensor(bf16_f32(d["scales"])).to(dtype)
        m.g_idx = torch.tensor(d["g_idx"])
        m.in_features = m.qweight.shape[0] * m.pack_factor
        wf = torch.tensor(list(range(0, 32, bits)), dtype=torch.int32)
        m.wf_unsqueeze_zero, m.wf_unsqueeze_neg_one = wf.unsqueeze(0), wf.unsqueeze(-1)
        m._init_wf_unsqueeze_buffers = lambda: None
        m.qzero_format = lambda format=None: None
        m._dequantize_from_codes = lambda w, z, num_itr=1: self.gptq_codes(m, w, z, num_itr)
        if v1:
            self.gptq_v1_to_v2(m, bits=bits, pack_dtype=torch.int32)
        return self.gptq_deq(m).T.contiguous()

    def awq(self, tensors, group, dtype):
        d = {name.split(".")[-1]: a for name, _, a in tensors}
        sc = torch.tensor(d["scales"].astype(np.float32)).to(dtype)
        return self.awq_deq(torch.tensor(d["qweight"]), torch.tensor(d["qzeros"]), sc, 4, group).T.contiguous()

    def ct(self, tensors, bits, n, k, g_idx, dtype, per_tensor):
        d = {name.split(".")[-1]: a for name, _, a in tensors}
        raw = d["weight_scale"]
        sc = torch.tensor(bf16_f32(raw) if raw.dtype == np.uint16 else raw.astype(np.float32)).to(dtype)
        if "weight_packed" in d:
            x_q = self.ct_unpack(torch.tensor(d["weight_packed"]), bits, torch.Size([n, k]))
        else:
            x_q = torch.tensor(d["weight"])
        zp = None
        if "weight_zero_point" in d:
            zp = self.ct_unpack(torch.tensor(d["weight_zero_point"]), bits, torch.Size([n, sc.shape[1]]),
                                packed_dim=0)
        if per_tensor:
            sc = sc.reshape(1, 1).expand(n, k)
        else:
            gi = torch.tensor(g_idx).long()
            sc = sc[:, gi]
            zp = zp[:, gi] if zp is not None else None
        return self.ct_deq(x_q, sc, zp)


# ------------------------------------------------------------------ unit cases

def make_case(rng, libs, name, fmt, qc, n, k, layout, scale_dtype="F16", group=None, bits=4, sym=True, v1=True,
              g_idx=None, per_tensor=False, zero_fn=None, scale_fn=None):
    w = rng.standard_normal((n, k)).astype(np.float32) * 0.05
    group = qc.get("group_size", -1) if group is None else group
    q, z, s, g = rtn(w, group, bits, sym, scale_dtype, rng, g_idx)
    if zero_fn:  # steer the zero points (e.g. make -s*z fp16 values)
        z = zero_fn(z)
        q = np.clip(q, 0, (1 << bits) - 1)
    if scale_fn:
        s = scale_fn(s)
    ref = reference(q, z, s, g)
    prefix = name
    if fmt == "gptq":
        tensors = pack_gptq(q, z, s, g, bits, v1, scale_dtype, prefix)
    elif fmt == "awq":
        tensors = pack_awq(q, z, s, scale_dtype, prefix)
    elif fmt == "ct":
        tensors = pack_ct(q - 0, z, s, bits, sym, scale_dtype, prefix, per_tensor,
                          g_idx if g_idx is not None else None)
    else:
        tensors = pack_ct_int8(q, s, scale_dtype, prefix, per_tensor)
    if libs:
        for dtype in ([torch.float32] + ([torch.float16] if scale_dtype == "F16" else [])):
            if fmt == "gptq":
                lib = libs.gptq(tensors, bits, v1, dtype)
            elif fmt == "awq":
                lib = libs.awq(tensors, group, dtype)
            else:
                lib = libs.ct(tensors, bits, n, k, g, dtype, per_tensor)
            want = ref if dtype == torch.float32 else ref.astype(np.float16)
            got = lib.numpy()
            assert got.shape == want.shape, (name, got.shape)
            assert np.array_equal(got.view(np.uint32 if dtype == torch.float32 else np.uint16),
                                  want.view(np.uint32 if dtype == torch.float32 else np.uint16)), name
    return tensors, {"name": name, "quantization_config": qc, "prefix": prefix, "n_out": n, "n_in": k,
                     "layout": layout, "ref_fnv64": fnv64(ref)}, ref


def gptq_qc(bits, group, sym=True, desc_act=False, fmt="gptq"):
    return {"quant_method": "gptq", "bits": bits, "group_size": group, "sym": sym, "desc_act": desc_act,
            "checkpoint_format": fmt}


def unit_cases(libs):
    rng = np.random.default_rng(1234)
    K = 256
    scattered = rng.permutation(K) // 32  # act-order: groups scattered over the columns
    aligned = np.repeat(rng.permutation(K // 32), 32)  # act-order whose groups are whole 32-blocks
    fp16_zero = lambda z: np.where(z % 2 == 1, z - 1, z)  # even zeros ...
    fp16_scale = lambda s: store_float((s.astype(np.float16).view(np.uint16) & 0xFFF8).view(np.float16), "F16")[1]
    ct = lambda fmt, bits, sym, strategy, group=None, act=None: {
        "quant_method": "compressed-tensors", "format": fmt, "quantization_status": "compressed",
        "ignore": ["lm_head"], "config_groups": {"group_0": {"targets": ["Linear"], "weights": dict(
            {"num_bits": bits, "type": "int", "symmetric": sym, "strategy": strategy, "dynamic": False},
            **({"group_size": group} if group else {})), "input_activations": act, "output_activations": None}}}
    w8a8_act = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "token", "dynamic": True}
    specs = [
        ("gptq_v1_4b_g128_sym", "gptq", gptq_qc(4, 128), 32, "Q4_0", {}),
        ("gptq_v1_4b_g32_asym", "gptq", gptq_qc(4, 32, sym=False), 32, "Q5_0",
         {"sym": False, "zero_fn": lambda z: np.maximum(z, 1)}),  # v1 cannot store zero 0 (see docs)
        ("gptq_v1_4b_g64_asym_q41", "gptq", gptq_qc(4, 64, sym=False), 32, "Q4_1",
         {"sym": False, "zero_fn": lambda z: np.maximum(fp16_zero(z), 2), "scale_fn": fp16_scale}),
        ("gptq_v1_4b_perchannel_sym", "gptq", gptq_qc(4, -1), 16, "Q4_0", {}),
        ("gptq_v1_4b_g32_descact", "gptq", gptq_qc(4, 32, desc_act=True), 16, "F32", {"g_idx": scattered}),
        ("gptq_v1_4b_g32_descact_aligned", "gptq", gptq_qc(4, 32, desc_act=True), 16, "Q4_0", {"g_idx": aligned}),
        ("gptq_v2_4b_g128_asym", "gptq", gptq_qc(4, 128, sym=False, fmt="gptq_v2"), 16, "Q5_0",
         {"sym": False, "v1": False}),
        ("gptq_v1_8b_g128_sym", "gptq", gptq_qc(8, 128), 16, "Q8_0", {"bits": 8}),
        ("gptq_v2_8b_perchannel_sym", "gptq", gptq_qc(8, -1, fmt="gptq_v2"), 16, "Q8_0", {"bits": 8, "v1": False}),
        ("awq_g128", "awq", {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True,
                             "version": "gemm"}, 32, "Q5_0", {"sym": False}),
        ("awq_g64_q41", "awq", {"quant_method": "awq", "w_bit": 4, "q_group_size": 64, "zero_point": True,
                                "version": "GEMM"}, 16, "Q4_1",
         {"sym": False, "group": 64, "zero_fn": lambda z: np.maximum(fp16_zero(z), 2), "scale_fn": fp16_scale}),
        ("ct_w4a16_g128_sym_bf16", "ct", ct("pack-quantized", 4, True, "group", 128), 16, "Q4_0",
         {"scale_dtype": "BF16"}),
        ("ct_w4a16_g32_asym", "ct", ct("pack-quantized", 4, False, "group", 32), 16, "Q5_0", {"sym": False}),
        ("ct_w4a16_channel_sym", "ct", ct("pack-quantized", 4, True, "channel"), 16, "Q4_0", {"group": -1}),
        ("ct_w4a16_g32_actorder", "ct", ct("pack-quantized", 4, True, "group", 32), 16, "F32",
         {"g_idx": scattered}),
        ("ct_w8a16_g64_packed", "ct", ct("pack-quantized", 8, True, "group", 64), 16, "Q8_0", {"bits": 8}),
        ("ct_w8a8_channel_bf16", "ct8", ct("int-quantized", 8, True, "channel", act=w8a8_act), 16, "Q8_0",
         {"bits": 8, "group": -1, "scale_dtype": "BF16"}),
        ("ct_w8a8_channel_f32", "ct8", ct("int-quantized", 8, True, "channel", act=w8a8_act), 16, "F32",
         {"bits": 8, "group": -1, "scale_dtype": "F32"}),
        ("ct_w8a8_tensor_f16", "ct8", ct("naive-quantized", 8, True, "tensor", act=w8a8_act), 16, "Q8_0",
         {"bits": 8, "group": -1, "per_tensor": True, "scale_fn": lambda s: np.full_like(s, s[0, 0])}),
    ]
    tensors, cases = [], []
    for name, fmt, qc, n, layout, kw in specs:
        t, c, _ = make_case(rng, libs, name, fmt, qc, n, K, layout, **kw)
        tensors += t
        cases.append(c)
        print("case", name, layout, "library-checked" if libs else "NOT library-checked")
    d = os.path.join(ROOT, "hf_quant")
    os.makedirs(d, exist_ok=True)
    write_safetensors(os.path.join(d, "cases.safetensors"), tensors)
    with open(os.path.join(d, "cases.json"), "w") as f:
        json.dump({"library_checked": bool(libs), "cases": cases}, f, indent=1)


# ------------------------------------------------------------------ tiny models

BYTES = [chr(c) for c in range(ord("!"), ord("~") + 1)] + [chr(c) for c in range(ord("\xa1"), ord("\xac") + 1)] + \
        [chr(c) for c in range(ord("\xae"), ord("\xff") + 1)]


def byte_level_vocab():
    """GPT-2's byte -> unicode map: 256 byte tokens (no merges)."""
    bs = [ord(c) for c in BYTES]
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): i for i, (b, c) in enumerate(sorted(zip(bs, cs)))}


def write_tokenizer(d):
    vocab = byte_level_vocab()
    tok = {"version": "1.0", "truncation": None, "padding": None,
           "added_tokens": [{"id": 256, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                             "rstrip": False, "normalized": False, "special": True}],
           "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
           "post_processor": None, "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                                               "use_regex": True},
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                     "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                     "vocab": vocab, "merges": []}}
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tok, f)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"eos_token": "<|endoftext|>", "bos_token": None, "tokenizer_class": "PreTrainedTokenizerFast"}, f)


LINEARS = [("self_attn.q_proj", 64, 64), ("self_attn.k_proj", 32, 64), ("self_attn.v_proj", 32, 64),
           ("self_attn.o_proj", 64, 64), ("mlp.gate_proj", 128, 64), ("mlp.up_proj", 128, 64),
           ("mlp.down_proj", 64, 128)]


def model_config(arch, vocab, qc):
    cfg = {"architectures": [{"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}[arch]], "model_type": arch,
           "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 2, "vocab_size": vocab, "max_position_embeddings": 128, "rms_norm_eps": 1e-6,
           "rope_theta": 10000.0, "tie_word_embeddings": False, "hidden_act": "silu", "torch_dtype": "float16",
           "bos_token_id": None, "eos_token_id": vocab - 1 if vocab > 256 else 1}
    if arch == "llama":
        cfg.update({"attention_bias": False, "mlp_bias": False})
    if qc is not None:
        cfg["quantization_config"] = qc
    return cfg


def gen_model(libs, name, arch, fmt, qc, vocab, tokenizer=False, **kw):
    rng = np.random.default_rng(abs(hash(name)) % (1 << 32) if False else len(name) * 7919)
    tensors, state = [], {}

    def dense(hf, shape, scale=0.5, dtype="F16"):
        raw, val = store_float(rng.standard_normal(shape).astype(np.float32) * scale, dtype)
        tensors.append((hf, dtype, raw))
        state[hf] = val

    dense("model.embed_tokens.weight", (vocab, 64))
    dense("lm_head.weight", (vocab, 64), 1.0)
    dense("model.norm.weight", (64,), 0.1)
    state["model.norm.weight"] = state["model.norm.weight"]
    for l in range(2):
        base = f"model.layers.{l}."
        for nm in ("input_layernorm", "post_attention_layernorm"):
            raw, val = store_float(1 + rng.standard_normal(64).astype(np.float32) * 0.1, "F16")
            tensors.append((base + nm + ".weight", "F16", raw))
            state[base + nm + ".weight"] = val
        for lin, n, k in LINEARS:
            prefix = base + lin
            w = rng.standard_normal((n, k)).astype(np.float32) * (0.4 / math.sqrt(k))
            bits = kw.get("bits", 4)
            q, z, s, g = rtn(w, kw.get("group", 32), bits, kw.get("sym", True), kw.get("scale_dtype", "F16"), rng,
                             rng.permutation(k) // 32 if kw.get("act_order") else None)
            if fmt == "gptq" and kw.get("v1", True):
                z = np.maximum(z, 1)
            if fmt == "gptq":
                t = pack_gptq(q, z, s, g, bits, kw.get("v1", True), "F16", prefix)
            elif fmt == "awq":
                t = pack_awq(q, z, s, "F16", prefix)
            elif fmt == "ct":
                t = pack_ct(q, z, s, bits, kw.get("sym", True), kw.get("scale_dtype", "F16"), prefix)
            else:
                t = pack_ct_int8(q, s, kw.get("scale_dtype", "F16"), prefix)
            tensors += t
            ref = reference(q, z, s, g)
            if libs:
                lib = (libs.gptq(t, bits, kw.get("v1", True), torch.float32) if fmt == "gptq" else
                       libs.awq(t, kw.get("group", 32), torch.float32) if fmt == "awq" else
                       libs.ct(t, bits, n, k, g, torch.float32, False)).numpy()
                assert np.array_equal(lib.view(np.uint32), ref.view(np.uint32)), prefix
            state[prefix + ".weight"] = ref
            if arch == "qwen2" and lin in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"):
                dense(prefix + ".bias", (n,), 0.1)
    d = os.path.join(ROOT, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    write_safetensors(os.path.join(d, "model.safetensors"), tensors)
    cfg = model_config(arch, vocab, qc)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    if tokenizer:
        write_tokenizer(d)
    print("model", name, "library-checked" if libs else "NOT library-checked")
    return cfg, state


def transformers_logits(cfg, state, vocab, seed):
    from transformers import AutoConfig, AutoModelForCausalLM
    c = dict(cfg)
    c.pop("quantization_config", None)
    c["torch_dtype"] = "float32"
    conf = AutoConfig.for_model(c["model_type"], **{k: v for k, v in c.items() if k != "model_type"})
    model = AutoModelForCausalLM.from_config(conf, torch_dtype=torch.float32, attn_implementation="eager")
    sd = {k: torch.tensor(np.asarray(v, np.float32)) for k, v in state.items()}
    missing, unexpected = model.load_state_dict(sd, strict=False)
    assert not unexpected and all("rotary" in m for m in missing), (missing, unexpected)
    model.eval()
    rng = np.random.default_rng(seed)
    cases = []
    for n in (5, 17):
        toks = [int(t) for t in rng.integers(0, vocab, size=n)]
        with torch.no_grad():
            logits = model(torch.tensor([toks])).logits[0].float().numpy()
        cases.append({"tokens": toks, "logits": logits.astype(float).round(6).tolist()})
    return {"vocab": vocab, "cases": cases}


MODELS = [
    ("hf_quant_gptq", "llama", "gptq", gptq_qc(4, 32, sym=False), 257, True, {"sym": False}),
    ("hf_quant_gptq_actorder", "llama", "gptq", gptq_qc(4, 32, desc_act=True, fmt="gptq_v2"), 64, False,
     {"act_order": True, "v1": False}),
    ("hf_quant_awq", "qwen2", "awq", {"quant_method": "awq", "bits": 4, "group_size": 32, "zero_point": True,
                                      "version": "gemm"}, 64, False, {"sym": False}),
    ("hf_quant_ct_w4a16", "llama", "ct", {
        "quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed",
        "ignore": ["lm_head"], "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
            "num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": 32}}}},
     64, False, {"scale_dtype": "BF16"}),
    ("hf_quant_ct_w8a8", "llama", "ct8", {
        "quant_method": "compressed-tensors", "format": "int-quantized", "quantization_status": "compressed",
        "ignore": ["lm_head"], "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
            "num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel"},
            "input_activations": {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "token",
                                  "dynamic": True}}}},
     64, False, {"bits": 8, "group": -1, "scale_dtype": "BF16"}),
]


def main():
    libs = Libs() if torch is not None else None
    unit_cases(libs)
    refs = {}
    for i, (name, arch, fmt, qc, vocab, tok, kw) in enumerate(MODELS):
        cfg, state = gen_model(libs, name, arch, fmt, qc, vocab, tok, **kw)
        if torch is not None:
            refs[name] = transformers_logits(cfg, state, vocab, 100 + i)
    if refs:
        with open(os.path.join(ROOT, "hf_quant_reference.json"), "w") as f:
            json.dump(refs, f)


if __name__ == "__main__":
    main()
