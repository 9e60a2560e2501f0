#!/usr/bin/env python3
"""Checks the rooms of src/ (docs/architecture.md) against the code:

* every `#include "room/..."` in src/<room>/ names a room that <room> may
  depend on (the table below, which mirrors the ember_area() lines of
  CMakeLists.txt and the dependency table of docs/architecture.md);
* no hand-written source file in src/ is longer than 800 lines (generated
  tables, *_data.cpp / *_data.h, are exempt).

Run by ctest as `architecture_layout`; exits 1 and lists every violation.
"""
import pathlib
import re
import sys

# room -> rooms it may include directly (besides itself).
ALLOWED = {
    "core": set(),
    "quant": {"core"},
    "kernels": {"core", "quant"},
    "model": {"core", "quant", "kernels"},
    "tokenizer": {"core"},
    "template": {"core"},
    "grammar": {"core", "tokenizer"},
    "engine": {"core", "quant", "kernels", "model"},
    "eval": {"core", "quant", "kernels", "model"},
    "transform": {"core", "quant", "kernels", "model", "eval"},
    "train": {"core", "quant", "kernels", "model", "eval", "transform"},
    "bench": {"core", "quant", "kernels", "model", "engine"},
    "server": {"core", "quant", "kernels", "model", "engine", "tokenizer", "template", "grammar"},
    "cli": None,  # the program: may use every room
}
MAX_LINES = 800
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    src = root / "src"
    problems = []
    rooms = sorted(p.name for p in src.iterdir() if p.is_dir())
    for room in rooms:
        if room not in ALLOWED:
            problems.append(f"src/{room}/: a room missing from tools/check_layout.py and docs/architecture.md")
    for path in sorted(src.rglob("*")):
        if path.suffix not in (".h", ".cpp") or not path.is_file():
            continue
        rel = path.relative_to(root)
        room = path.relative_to(src).parts[0]
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        if len(lines) > MAX_LINES and not re.search(r"_data\.(h|cpp)$", path.name):
            problems.append(f"{rel}: {len(lines)} lines (more than {MAX_LINES}: split it by responsibility)")
        allowed = ALLOWED.get(room)
        if allowed is None:
            continue
        for n, line in enumerate(lines, 1):
            m = INCLUDE.match(line)
            if m and m.group(1) != room and m.group(1) not in allowed and m.group(1) in ALLOWED:
                problems.append(f"{rel}:{n}: src/{room}/ may not include {m.group(1)}/ ({line.strip()})")
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} layout problem(s); the rules are in docs/architecture.md")
        return 1
    print(f"layout ok: {len(rooms)} rooms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
