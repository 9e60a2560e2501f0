#!/usr/bin/env python3
"""Tiny random-weight Hugging Face models of the architectures added with
issue 41 (MODELS below), their reference logits from `transformers`, and
their GGUF conversions by llama.cpp's own converter with llama.cpp's logits.
For tests/model/arch_<arch>_test.cpp.

Stage 1 (the venv with torch + transformers + sentencepiece):
  * a SentencePiece BPE tokenizer of 128 pieces trained here on a fixed text
    (tokenizer.model + tokenizer_config.json, shared by every folder);
  * per model, a transformers config class at a tiny size (hidden 64, 2 or 4
    layers, vocabulary 128), weights drawn with a fixed seed (matrices
    N(0, 1/fan_in), embeddings N(0, 1), norms 1 + N(0, 0.1^2)), saved with
    save_pretrained in bfloat16 into tests/data/model/hf_<name>/;
  * the reference: each folder reloaded in float32 (eager attention), fixed
    token sequences, the logits of the listed rows and a greedy continuation
    (model.generate), into hf_<name>/reference.json (tokens, rows, greedy,
    the context length ember runs with, offset: the first row's index in the
    .bin) + reference.bin (float32 logits rows [row][128]). A sequence longer
    than Phi-3's original context (256) makes transformers use the long
    LongRoPE factors.
Stage 2 (--gguf; llama.cpp's tree and build, tools/build_llama_cpp.sh):
  * each folder converted by convert_hf_to_gguf.py --outtype f32 into
    tests/data/model/gguf_<name>.gguf (OLMo 2's converter knows byte-level BPE
    tokenizers only by a hash table of released ones, so for it the script
    has the converter write the SentencePiece vocabulary the way its Llama
    path does; tensors and hyper-parameters go through the converter as is);
  * llama.cpp's logits (tools/llama_cpp_logits.c against libllama: F32 KV
    cache, one batch, then greedy decoding) at a context of 256 and, for
    Phi-3, 512 (llama.cpp picks the long factors when its context exceeds the
    original one), into gguf_<name>.reference.json + .bin.

Stage 3 (--gen-model; llama.cpp's build and ember's): `ember gen-model` files of
  the new shapes load and run in llama.cpp and agree with ember (printed, not
  committed).

Rerun: /work/venvs/hf/bin/python tools/gen_hf_arch_fixtures.py [--gguf | --gen-model] [--llama-cpp DIR] [NAME...]
"""
import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zlib

import numpy as np
import sentencepiece as spm
import torch
import transformers
from transformers import AutoModelForCausalLM

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data", "model")
VOCAB = 128
GREEDY = 12

TEXT = """The quick brown fox jumps over the lazy dog near the river bank.
A small model reads the same words again and again until they become tokens.
Every layer of the network mixes the tokens with attention and a gated feed forward block.
Rotary position embeddings turn each pair of dimensions by an angle that grows with the position.
Some layers see only a window of recent tokens, others see the whole context.
When the context grows beyond what the model was trained on, the frequencies are rescaled.
Numbers like 12, 345 and 6789 appear in text as often as names such as Alice, Bob and Carol.
"""


def make_tokenizer(dst):
    """A SentencePiece BPE model of VOCAB pieces (no byte fallback), as Llama 2's, with
    <|endoftext|> (Phi-3's)."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(TEXT.splitlines() * 4), model_writer=model,
                                   vocab_size=VOCAB, model_type="bpe", character_coverage=1.0,
                                   byte_fallback=False, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
                                   num_threads=1, add_dummy_prefix=True, remove_extra_whitespaces=False,
                                   normalization_rule_name="identity", minloglevel=2,
                                   # llama.cpp looks it up in models named phi3
                                   user_defined_symbols=["<|endoftext|>"])
    with open(os.path.join(dst, "tokenizer.model"), "wb") as f:
        f.write(model.getvalue())
    with open(os.path.join(dst, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>",
                   "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": False}, f, indent=1)


def common(**kw):
    base = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=512, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    base.update(kw)
    return base


def phi3_config():
    rng = np.random.default_rng(31)
    half = 6  # head_dim 16 * partial_rotary_factor 0.75 = 12 rotated dimensions
    short = [round(float(x), 4) for x in 1 + 0.2 * np.sort(rng.random(half))]
    long = [round(float(x), 4) for x in 1 + 3 * np.sort(rng.random(half))]
    return transformers.Phi3Config(**common(
        max_position_embeddings=1024, original_max_position_embeddings=256, rms_norm_eps=1e-5,
        tie_word_embeddings=False, sliding_window=None,
        rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.75,
                         "short_factor": short, "long_factor": long},
        architectures=["Phi3ForCausalLM"]))


def mistral3_config():
    # Ministral 3's YaRN (magnitude 1) and attention temperature over an
    # original context of 32, a window of 8 on every layer.
    rope = {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 16.0, "original_max_position_embeddings": 32,
            "max_position_embeddings": 512, "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0,
            "mscale_all_dim": 1.0, "llama_4_scaling_beta": 0.1}
    return transformers.Ministral3Config(**common(
        head_dim=16, rms_norm_eps=1e-5, tie_word_embeddings=True, sliding_window=8, rope_parameters=rope,
        architectures=["Ministral3ForCausalLM"]))


def ministral_config():
    # The earlier Ministral: sliding and full layers by layer_types.
    return transformers.MinistralConfig(**common(
        head_dim=16, rms_norm_eps=1e-5, tie_word_embeddings=False, sliding_window=8,
        layer_types=["sliding_attention", "full_attention"],
        rope_parameters={"rope_type": "default", "rope_theta": 100000.0}, architectures=["MinistralForCausalLM"]))


def smollm3_config():
    # Four layers: the fourth has no RoPE (no_rope_layer_interval 4).
    return transformers.SmolLM3Config(**common(
        num_hidden_layers=4, rms_norm_eps=1e-6, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 2000000.0}, architectures=["SmolLM3ForCausalLM"]))


def olmo2_config():
    return transformers.Olmo2Config(**common(
        rms_norm_eps=1e-6, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0}, architectures=["Olmo2ForCausalLM"]))


def olmo3_config():
    # OLMo 3: a sliding layer (window 8, plain RoPE) and a global one (YaRN x8 over 32).
    rope = {"full_attention": {"rope_type": "yarn", "rope_theta": 500000.0, "factor": 8.0,
                               "original_max_position_embeddings": 32, "beta_fast": 32.0, "beta_slow": 1.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 500000.0}}
    return transformers.Olmo3Config(**common(
        rms_norm_eps=1e-6, tie_word_embeddings=False, sliding_window=8,
        layer_types=["sliding_attention", "full_attention"], rope_parameters=rope,
        architectures=["Olmo3ForCausalLM"]))


# The `ember gen-model` shapes stage 3 checks in llama.cpp.
GEN_SHAPES = ["phi-3.5-mini", "phi-4-mini", "ministral-3-3b", "smollm3-3b", "olmo-2-1b"]

# name -> (config, weight seed, llama.cpp converts it, context sizes llama.cpp
# runs with). A seed whose greedy run meets a near tie is refused by stage 1.
MODELS = {
    "phi3": (phi3_config, 1000, True, [256, 512]),
    "mistral3": (mistral3_config, 1001, True, [256]),
    "ministral": (ministral_config, 1002, False, []),
    "smollm3": (smollm3_config, 1003, True, [256]),
    "olmo2": (olmo2_config, 1004, True, [256]),
    "olmo3": (olmo3_config, 1005, True, [256]),
}


def init_weights(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:  # norms
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)


def cases_for(name):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    lens = [9, 40] + ([264] if name == "phi3" else [])  # 264 > Phi-3's original 256: long factors
    out = []
    for n in lens:
        toks = [int(t) for t in rng.integers(3, VOCAB, size=n)]
        rows = list(range(n)) if n <= 40 else list(range(n - 8, n))
        out.append({"tokens": toks, "rows": rows})
    return out


def write_reference(stem, cases, blobs):
    """stem.json: {"vocab", "cases": [{tokens, n_ctx, greedy, offset[, rows]}]};
    stem.bin: the cases' float32 logits rows [row][VOCAB], `offset` the
    first row of a case."""
    with open(stem + ".json", "w") as f:
        json.dump({"vocab": VOCAB, "cases": cases}, f, separators=(",", ":"))
    np.concatenate(blobs).astype("<f4").tofile(stem + ".bin")


def hf_reference(path, name):
    blobs = []
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    cases = []
    min_margin = float("inf")
    for c in cases_for(name):
        toks = c["tokens"]
        with torch.no_grad():
            logits = model(torch.tensor([toks])).logits[0].float().numpy()
            gen = model.generate(torch.tensor([toks]), attention_mask=torch.ones(1, len(toks), dtype=torch.long),
                                 max_new_tokens=GREEDY, min_new_tokens=GREEDY, do_sample=False, pad_token_id=0,
                                 eos_token_id=None, output_logits=True, return_dict_in_generate=True)
        greedy = [int(t) for t in gen.sequences[0, len(toks):]]
        for step in gen.logits:  # the greedy choices' margins over the runner-up
            top2 = torch.topk(step[0].float(), 2).values
            min_margin = min(min_margin, float(top2[0] - top2[1]))
        rows = logits[c["rows"]]
        for r in rows:
            s = np.sort(r)
            min_margin = min(min_margin, float(s[-1] - s[-2]))
        offset = sum(len(b) for b in blobs)
        blobs.append(rows.astype(np.float32))
        cases.append({"tokens": toks, "rows": c["rows"], "offset": offset, "greedy": greedy,
                      "n_ctx": len(toks) + GREEDY})
    print(f"{name}: {[len(c['tokens']) for c in cases]} tokens, smallest top-1 margin {min_margin:.2e}")
    if min_margin < 1e-3:
        sys.exit(f"{name}: a top-1 margin of {min_margin:.2e} is too close to a tie; change the seed")
    write_reference(os.path.join(path, "reference"), cases, blobs)


def stage1(names):
    tok_dir = tempfile.mkdtemp()
    make_tokenizer(tok_dir)
    for name in names:
        make_cfg, seed = MODELS[name][:2]
        path = os.path.join(DATA, f"hf_{name}")
        shutil.rmtree(path, ignore_errors=True)
        torch.manual_seed(0)
        cfg = make_cfg()
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
        init_weights(model, seed)
        model.to(torch.bfloat16).save_pretrained(path, safe_serialization=True)
        for f in ("tokenizer.model", "tokenizer_config.json"):
            shutil.copy(os.path.join(tok_dir, f), path)
        for f in os.listdir(path):
            if f not in ("config.json", "model.safetensors", "tokenizer.model", "tokenizer_config.json"):
                os.remove(os.path.join(path, f))  # generation_config.json
            else:
                os.chmod(os.path.join(path, f), 0o644)
        hf_reference(path, name)
    shutil.rmtree(tok_dir)


CONVERT_WRAPPER = """
import sys
sys.argv = [sys.argv[0]] + sys.argv[1:]
sys.path.insert(0, {src!r})
import convert_hf_to_gguf as c
from conversion.base import TextModel
from conversion.olmo import Olmo2Model
# The tiny tokenizer is SentencePiece; OLMo 2's path knows only released BPE ones.
Olmo2Model.set_vocab = TextModel._set_vocab_sentencepiece
c.main()
"""


def stage2(llama, names):
    src = os.path.join(llama, "src", "llama.cpp")
    tmp = tempfile.mkdtemp()
    exe = build_logits_tool(llama, tmp)
    wrapper = os.path.join(tmp, "convert.py")
    with open(wrapper, "w") as f:
        f.write(CONVERT_WRAPPER.format(src=src))
    for name in names:
        _, _, converts, contexts = MODELS[name]
        if not converts:
            continue
        with open(os.path.join(DATA, f"hf_{name}", "reference.json")) as f:
            hf_cases = json.load(f)["cases"]
        blobs = []
        out = os.path.join(DATA, f"gguf_{name}.gguf")
        subprocess.run([sys.executable, wrapper, os.path.join(DATA, f"hf_{name}"), "--outtype", "f32", "--outfile",
                        out], check=True, capture_output=True)
        cases = []
        for n_ctx in contexts:
            for c in hf_cases:
                toks = c["tokens"]
                if len(toks) + GREEDY > n_ctx:
                    continue
                bin_path = os.path.join(tmp, "out.bin")
                subprocess.run([exe, out, str(n_ctx), str(GREEDY), bin_path, *map(str, toks)], check=True,
                               capture_output=True)
                raw = np.fromfile(bin_path, dtype="<f4")
                n = len(toks)
                logits = raw[:n * VOCAB].reshape(n, VOCAB)
                greedy = [int(x) for x in raw[n * VOCAB:].view("<i4")]
                offset = sum(len(b) for b in blobs)
                blobs.append(logits.astype(np.float32))
                cases.append({"tokens": toks, "n_ctx": n_ctx, "offset": offset, "greedy": greedy})
        write_reference(os.path.join(DATA, f"gguf_{name}.reference"), cases, blobs)
        print(f"gguf_{name}: {len(cases)} cases, contexts {contexts}, {os.path.getsize(out)} bytes")
    shutil.rmtree(tmp)


def build_logits_tool(llama, tmp):
    src = os.path.join(llama, "src", "llama.cpp")
    build = os.path.join(llama, "build")
    exe = os.path.join(tmp, "llama_cpp_logits")
    libs = [os.path.join(build, "src", "libllama.a"), os.path.join(build, "ggml", "src", "libggml.a"),
            os.path.join(build, "ggml", "src", "libggml-cpu.a"), os.path.join(build, "ggml", "src", "libggml-base.a")]
    obj = os.path.join(tmp, "llama_cpp_logits.o")
    subprocess.run(["cc", "-O2", "-c", os.path.join(ROOT, "tools", "llama_cpp_logits.c"), "-I",
                    os.path.join(src, "include"), "-I", os.path.join(src, "ggml", "include"), "-o", obj], check=True)
    subprocess.run(["c++", obj, *libs, "-fopenmp", "-lpthread", "-lm", "-o", exe], check=True)
    return exe


def gen_model_check(llama, ember):
    """Stage 3 (--gen-model, not committed): `ember gen-model` files of the new
    shapes (one layer, SmolLM3 four for its NoPE layer, a 1000-token
    synthetic vocabulary, q8_0) load in
    llama.cpp; ember's logits (ember_dump_logits, at the trained context)
    against llama.cpp's (at a context beyond Phi's original 4096, so both use
    the long LongRoPE factors): relative L2 and top-1 agreement."""
    tmp = tempfile.mkdtemp()
    exe = build_logits_tool(llama, tmp)
    toks = [int(t) for t in np.random.default_rng(7).integers(10, 900, size=16)]
    ok = True
    for shape in GEN_SHAPES:
        path = os.path.join(tmp, shape + ".gguf")
        n_layer = "4" if shape == "smollm3-3b" else "1"
        subprocess.run([ember, "gen-model", "--shape", shape, "--n-layer", n_layer, "--n-vocab", "1000",
                        "--synthetic-vocab", "--type", "q8_0", "--seed", "5", "-o", path], check=True,
                       capture_output=True)
        r = subprocess.run([exe, path, "8192", "1", os.path.join(tmp, "l.bin"), *map(str, toks)], capture_output=True,
                           text=True)
        if r.returncode != 0:
            print(f"{shape}: llama.cpp cannot run it: {r.stderr.strip()}")
            ok = False
            continue
        ll = np.fromfile(os.path.join(tmp, "l.bin"), dtype="<f4")[:16 * 1000].reshape(16, 1000)
        subprocess.run([os.path.join(os.path.dirname(ember), "ember_dump_logits"), path, os.path.join(tmp, "e.bin"),
                        *map(str, toks)], check=True, capture_output=True)
        em = np.fromfile(os.path.join(tmp, "e.bin"), dtype="<f4").reshape(16, 1000)
        rel = np.linalg.norm(em - ll) / np.linalg.norm(ll)
        top1 = int((em.argmax(1) == ll.argmax(1)).sum())
        print(f"{shape}: llama.cpp loads and runs it; ember vs llama.cpp relative L2 {rel:.2e}, top-1 {top1}/16, "
              f"{os.path.getsize(path) >> 20} MiB")
        ok &= bool(rel < 3e-2)
        os.remove(path)
    shutil.rmtree(tmp)
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", action="store_true", help="only stage 2 (conversions and llama.cpp's logits)")
    ap.add_argument("--gen-model", action="store_true", help="only stage 3 (gen-model shapes in llama.cpp)")
    ap.add_argument("--llama-cpp", default="/work/llama-cpp")
    ap.add_argument("--ember", default=os.path.join(ROOT, "build", "ember"))
    ap.add_argument("models", nargs="*", help=f"some of {', '.join(MODELS)} (default: all)")
    args = ap.parse_args()
    names = args.models or list(MODELS)
    if any(n not in MODELS for n in names):
        sys.exit(f"unknown model; known: {', '.join(MODELS)}")
    if args.gen_model:
        sys.exit(0 if gen_model_check(args.llama_cpp, args.ember) else 1)
    elif args.gguf:
        stage2(args.llama_cpp, names)
    else:
        stage1(names)


if __name__ == "__main__":
    main()
