#!/usr/bin/env python3
"""Checks the rooms of src/ (docs/architecture.md) against the code:

* every `#include "room/..."` in src/<room>/ names a room that <room> may
  depend on (the table below, which mirrors the ember_area() lines of
  CMakeLists.txt and the dependency table of docs/architecture.md);
* no hand-written source file in src/ is longer than 800 lines (generated
  tables, *_data.cpp / *_data.h, are exempt);
* kernel files are named by the scheme of kernels/cpu/registry.cpp: a .cpp
  in src/kernels/ref/ or an ISA directory (cpu/avx2/, cpu/avx512/, cpu/amx/)
  is <type>_<form>.cpp or names an ISA-independent op;
* kernels/cuda/ is a room inside kernels/ (built only with CUDA): it may
  include core, quant and kernels, and nothing includes it but cli/ (and,
  with issue 43's seam, the device model runner); its .cu files are named
  as the kernels are (every type's form, or an op's name);
* a kernels/cpu header with SIMD code (it includes <immintrin.h>) that TUs
  of two flag sets include (cpu/, avx2/, avx512/, amx/ are compiled with
  different ISA flags) has internal linkage (an anonymous namespace or
  static inline functions): the linker must not merge copies compiled for
  different instruction sets.

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
    "transform": {"core", "quant", "kernels", "model", "eval", "tokenizer"},
    "train": {"core", "quant", "kernels", "model", "eval", "transform"},
    "bench": {"core", "quant", "kernels", "model", "engine"},
    "server": {"core", "quant", "kernels", "model", "engine", "tokenizer", "template", "grammar"},
    "router": {"core", "quant", "kernels", "model", "engine", "tokenizer", "template", "grammar", "server", "bench"},
    "dist": {"core", "quant", "kernels"},
    "cli": None,  # the program: may use every room
}
# Rooms inside a room: path prefix -> rooms it may include, and the rooms
# (top-level) allowed to include it.
SUBROOMS = {
    "kernels/cuda": ({"core", "quant", "kernels"}, {"cli"}),
}
SOURCE_SUFFIXES = (".h", ".cpp", ".cu", ".cuh")
MAX_LINES = 800
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')
QUOTED = re.compile(r'^\s*#\s*include\s+"([^"]+)"')

# Kernel file names: <type>_<form>.cpp (type a family, + _r16 for the
# interleaved layouts; form one of the KernelSet's, or `lanes` for a file
# holding every form of one row-lane contract), or an op's name.
KERNEL_FILE = re.compile(r"^(float|legacy|kquants|mxfp4|sparse)(_r16)?_(dot|rows|few|tokens|tile|lanes)\.cpp$")
KERNEL_OPS = {"act_cols", "attention", "row_ops", "hadamard", "kv_types", "dot", "moe", "train", "train_gemm"}  # dot: ref/dot.cpp, every type's
KERNEL_DIRS = ("src/kernels/ref", "src/kernels/cpu/avx2", "src/kernels/cpu/avx512", "src/kernels/cpu/amx")
# CUDA: every type's form in one file (rows: the decode mat-vec), or an op.
CUDA_KERNEL_OPS = {"rows", "convert", "row_ops", "attention"}


def check_kernels(root: pathlib.Path, problems: list) -> None:
    for d in KERNEL_DIRS:
        for path in sorted((root / d).glob("*.cpp")):
            if not KERNEL_FILE.match(path.name) and path.stem not in KERNEL_OPS:
                problems.append(f"{path.relative_to(root)}: not <type>_<form>.cpp nor an op's name "
                                "(the naming scheme atop src/kernels/cpu/registry.cpp)")
    for path in sorted((root / "src/kernels/cuda").glob("*.cu")):
        if not KERNEL_FILE.match(path.stem + ".cpp") and path.stem not in CUDA_KERNEL_OPS:
            problems.append(f"{path.relative_to(root)}: not <type>_<form>.cu nor a CUDA op's name "
                            f"({', '.join(sorted(CUDA_KERNEL_OPS))})")
    cpu = root / "src/kernels/cpu"
    if not cpu.is_dir():
        return

    def includes(path: pathlib.Path) -> list:
        out = []
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            m = QUOTED.match(line)
            if m and m.group(1).startswith("kernels/cpu/") and m.group(1).endswith(".h"):
                out.append(root / "src" / m.group(1))
        return out

    groups = {}  # header -> the flag sets of the TUs that include it
    for tu in sorted(cpu.rglob("*.cpp")):
        group = tu.parent.name if tu.parent != cpu else "cpu"
        seen, todo = set(), includes(tu)
        while todo:
            h = todo.pop()
            if h in seen or not h.is_file():
                continue
            seen.add(h)
            groups.setdefault(h, set()).add(group)
            todo.extend(includes(h))
    for h, g in sorted(groups.items()):
        text = h.read_text(encoding="utf-8", errors="replace")
        if len(g) > 1 and "<immintrin.h>" in text and "namespace {" not in text and "static inline" not in text:
            problems.append(f"{h.relative_to(root)}: SIMD code included under {len(g)} flag sets "
                            f"({', '.join(sorted(g))}) without internal linkage (wrap it in namespace {{ }})")


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    src = root / "src"
    problems = []
    rooms = sorted(p.name for p in src.iterdir() if p.is_dir())
    for room in rooms:
        if room not in ALLOWED:
            problems.append(f"src/{room}/: a room missing from tools/check_layout.py and docs/architecture.md")
    for path in sorted(src.rglob("*")):
        if path.suffix not in SOURCE_SUFFIXES or not path.is_file():
            continue
        rel = path.relative_to(root)
        in_src = path.relative_to(src).as_posix()
        room = path.relative_to(src).parts[0]
        sub = next((p for p in SUBROOMS if in_src.startswith(p + "/")), None)
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        if len(lines) > MAX_LINES and not re.search(r"_data\.(h|cpp)$", path.name):
            problems.append(f"{rel}: {len(lines)} lines (more than {MAX_LINES}: split it by responsibility)")
        for n, line in enumerate(lines, 1):
            q = QUOTED.match(line)
            if not q:
                continue
            for p, (_, users) in SUBROOMS.items():
                if q.group(1).startswith(p + "/") and sub != p and room not in users:
                    problems.append(f"{rel}:{n}: only {', '.join(sorted(users))} may include {p}/ ({line.strip()})")
        allowed = SUBROOMS[sub][0] if sub else ALLOWED.get(room)
        if allowed is None:
            continue
        for n, line in enumerate(lines, 1):
            m = INCLUDE.match(line)
            q = QUOTED.match(line)
            if sub and q and q.group(1).startswith(sub + "/"):
                continue  # the subroom's own files
            if m and m.group(1) != room and m.group(1) not in allowed and m.group(1) in ALLOWED:
                problems.append(f"{rel}:{n}: src/{sub or room}/ may not include {m.group(1)}/ ({line.strip()})")
    check_kernels(root, problems)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} layout problem(s); the rules are in docs/architecture.md")
        return 1
    print(f"layout ok: {len(rooms)} rooms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
