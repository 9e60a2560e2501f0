#!/usr/bin/env python3
"""Generates a small SentencePiece-BPE Hugging Face tokenizer folder and its
reference fixture, for the tokenizer's Hugging Face SentencePiece path:

  tests/data/tokenizer/spm_tiny/tokenizer.model   (trained here, ~10 KB)
  tests/data/tokenizer/spm_tiny/tokenizer.json    (BPE + byte_fallback, built
                                                   with the tokenizers API)
  tests/data/tokenizer/spm_tiny/tokenizer_config.json
  tests/data/tokenizer/spm_tiny_cases.jsonl       (reference: sentencepiece)

The model is trained like Llama 2's: BPE, byte fallback, identity
normalization, no whitespace collapsing, a dummy prefix space. Reference ids
come from sentencepiece itself; the generator also checks that Hugging Face
tokenizers agrees on each case and reports disagreements.

Rerun: python3 tools/gen_tokenizer_spm_fixture.py (needs sentencepiece,
tokenizers).
"""
import io
import json
import os
import random
import sys

import sentencepiece as spm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_tokenizer_fixtures as base  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "tokenizer", "spm_tiny")
CASES = os.path.join(ROOT, "tests", "data", "tokenizer", "spm_tiny_cases.jsonl")
USER = ["<tool>", "</tool>"]
CONTROL = ["<start_of_turn>", "<end_of_turn>"]


def corpus():
    rng = random.Random(3)
    lines = []
    for _ in range(4000):
        words = [rng.choice(base.WORDS) for _ in range(rng.randint(3, 15))]
        lines.append(" ".join(words).capitalize() + rng.choice([".", "!", "?", ","]))
    lines += base.ENGLISH + base.CODE + base.SCRIPTS[:10]
    return "\n".join(lines)


def train():
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus().split("\n")), model_writer=model, model_type="bpe", vocab_size=700,
        byte_fallback=True, normalization_rule_name="identity", remove_extra_whitespaces=False,
        add_dummy_prefix=True, split_digits=True, user_defined_symbols=USER, control_symbols=CONTROL,
        character_coverage=1.0, minloglevel=2)
    return model.getvalue()


def hf_tokenizer_json(sp):
    from tokenizers import Tokenizer, decoders, normalizers
    from tokenizers.models import BPE
    n = sp.get_piece_size()
    vocab = {sp.id_to_piece(i): i for i in range(n)}
    # Merges as the Hugging Face converter makes them: every split of a piece
    # into two pieces, ordered by the merged piece's score.
    merges = []
    for piece, pid in vocab.items():
        if sp.is_control(pid) or sp.is_unknown(pid) or sp.is_byte(pid):
            continue
        for k in range(1, len(piece)):
            a, b = piece[:k], piece[k:]
            if a in vocab and b in vocab:
                merges.append((a, b, -sp.get_score(pid), vocab[a], vocab[b]))
    merges.sort(key=lambda m: (m[2], m[3], m[4]))
    tok = Tokenizer(BPE(vocab=vocab, merges=[(a, b) for a, b, *_ in merges], unk_token="<unk>",
                        byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    from tokenizers import AddedToken
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in CONTROL + ["<s>", "</s>", "<unk>"]])
    tok.add_tokens([AddedToken(t, normalized=False, special=False) for t in USER])
    return tok


def main():
    os.makedirs(OUT, exist_ok=True)
    model = train()
    with open(os.path.join(OUT, "tokenizer.model"), "wb") as f:
        f.write(model)
    sp = spm.SentencePieceProcessor(model_proto=model)
    hf = hf_tokenizer_json(sp)
    hf.save(os.path.join(OUT, "tokenizer.json"))
    with open(os.path.join(OUT, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True,
                   "add_eos_token": False, "tokenizer_class": "LlamaTokenizer"}, f)
    strings = [s for s in base.build_strings()
               if len(s) <= 200 and not any(t in s for t in USER + CONTROL + ["<s>", "</s>", "<unk>"])]
    disagree = 0
    with open(CASES, "w") as f:
        for s in strings:
            ids = sp.encode(s)
            hf_ids = hf.encode(s, add_special_tokens=False).ids
            if hf_ids != ids:
                disagree += 1
            rec = {"text": s, "add_special": False, "special": False, "ids": ids, "decoded": sp.decode(ids)}
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
        for s in ["Hello world", " x", "a  b"]:
            ids = [sp.bos_id()] + sp.encode(s)
            f.write(json.dumps({"text": s, "add_special": True, "special": False, "ids": ids,
                                "decoded": sp.decode(ids)}, ensure_ascii=False) + "\n")
    print(f"wrote {CASES}: {len(strings) + 3} cases; Hugging Face tokenizers disagrees with sentencepiece on "
          f"{disagree}", file=sys.stderr)


if __name__ == "__main__":
    main()
