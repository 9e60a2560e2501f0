#!/usr/bin/env python3
"""Rebuilds data/persuasion.txt, the evaluation text of `ember perplexity`.

Source: Jane Austen, "Persuasion" (1818), public domain, as transcribed by
Project Gutenberg and shipped in the Debian package r-cran-janeaustenr
(the R package janeaustenr by Julia Silge, MIT licence for the packaging).
The package stores the novels as an R lazy-load database
(data/Rdata.rdb + Rdata.rdx: zlib-compressed R serializations); this script
reads it with a minimal R unserializer (enough for character vectors and
lists) and writes the novel's lines joined with '\n'.

Usage:
  python3 tools/extract_perplexity_text.py [--deb FILE.deb] [--book persuasion] [-o data/persuasion.txt]
  # the calibration text of `ember imatrix` / `ember quantize --method imatrix`
  # (another novel, so calibration and evaluation never overlap):
  python3 tools/extract_perplexity_text.py --book prideprejudice --max-bytes 250000 -o data/calibration.txt
Without --deb it runs `apt-get download r-cran-janeaustenr` in a temporary
folder (needs `apt-get update` once). Books: emma, mansfieldpark,
northangerabbey, persuasion, prideprejudice, sensesensibility.
"""
import argparse
import glob
import gzip
import hashlib
import os
import struct
import subprocess
import sys
import tempfile
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA_DIR = "usr/lib/R/site-library/janeaustenr/data"


class RUnserializer:
    """R XDR serialization format (version 2/3), the types a data package uses."""

    def __init__(self, buf):
        self.b = buf
        self.p = 0
        self.refs = []
        if self.b[:2] != b"X\n":
            raise ValueError("not an XDR R serialization")
        self.p = 2
        version = self.int()
        self.int()  # writer version
        self.int()  # minimal reader version
        if version == 3:
            n = self.int()  # native encoding name
            self.p += n

    def int(self):
        v = struct.unpack(">i", self.b[self.p:self.p + 4])[0]
        self.p += 4
        return v

    def length(self):
        n = self.int()
        if n == -1:
            hi, lo = self.int(), self.int()
            n = (hi << 32) + lo
        return n

    def item(self):
        flags = self.int()
        t = flags & 0xFF
        has_attr, has_tag = flags & (1 << 9), flags & (1 << 10)
        if t == 254:  # NILVALUE
            return None
        if t in (241, 242, 250, 251, 252, 253):  # environments and markers
            return ("special", t)
        if t == 255:  # reference
            return self.refs[(flags >> 8) - 1]
        if t == 1:  # symbol
            x = ("sym", self.item())
            self.refs.append(x)
            return x
        if t in (247, 248, 249):  # persistent / package / namespace
            self.int()
            x = ("ns", [self.item() for _ in range(self.int())])
            self.refs.append(x)
            return x
        if t == 4:  # environment
            env = {}
            self.refs.append(env)
            self.int()  # locked
            for k in ("enclos", "frame", "hashtab", "attrib"):
                env[k] = self.item()
            return env
        if t in (2, 3, 5, 6, 17, 239, 240):  # pairlist-like: attr, tag, car, cdr
            attr = self.item() if has_attr else None
            tag = self.item() if has_tag else None
            car = self.item()
            cdr = self.item()
            return ("list", tag, car, cdr, attr)
        if t == 9:  # CHARSXP
            n = self.int()
            if n == -1:
                return None
            s = self.b[self.p:self.p + n].decode("utf-8", "replace")
            self.p += n
            return s
        if t in (10, 13):  # logical, integer
            n = self.length()
            v = list(struct.unpack(">%di" % n, self.b[self.p:self.p + 4 * n]))
            self.p += 4 * n
        elif t == 14:  # double
            n = self.length()
            v = list(struct.unpack(">%dd" % n, self.b[self.p:self.p + 8 * n]))
            self.p += 8 * n
        elif t in (16, 19, 20):  # character vector, list, expression
            v = [self.item() for _ in range(self.length())]
        else:
            raise ValueError(f"unsupported R type {t} at byte {self.p}")
        attr = self.item() if has_attr else None
        return ("vec", t, v, attr)


def pairlist(x):
    out = {}
    while x and x[0] == "list":
        out[x[1][1] if x[1] else None] = x[2]
        x = x[3]
    return out


def read_books(data_dir):
    index = RUnserializer(gzip.decompress(open(os.path.join(data_dir, "Rdata.rdx"), "rb").read())).item()
    variables = index[2][0]  # list: name -> c(offset, length)
    names = pairlist(variables[3])["names"][2]
    db = open(os.path.join(data_dir, "Rdata.rdb"), "rb").read()
    books = {}
    for name, entry in zip(names, variables[2]):
        off, n = entry[2]
        blob = db[off:off + n]
        raw = zlib.decompress(blob[4:])  # 4-byte big-endian length, then zlib
        lines = RUnserializer(raw).item()[2]
        books[name] = "\n".join(x if x is not None else "" for x in lines) + "\n"
    return books


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--deb", help="r-cran-janeaustenr .deb (default: apt-get download it)")
    ap.add_argument("--book", default="persuasion")
    ap.add_argument("-o", "--output", default=os.path.join(ROOT, "data", "persuasion.txt"))
    ap.add_argument("--max-bytes", type=int, default=0,
                    help="keep the text up to the last paragraph break before this many bytes (0: all)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        deb = args.deb
        if not deb:
            subprocess.run(["apt-get", "download", "r-cran-janeaustenr"], cwd=tmp, check=True)
            deb = glob.glob(os.path.join(tmp, "r-cran-janeaustenr_*.deb"))[0]
        subprocess.run(["dpkg-deb", "-x", deb, os.path.join(tmp, "x")], check=True)
        books = read_books(os.path.join(tmp, "x", DATA_DIR))
    if args.book not in books:
        sys.exit(f"unknown book {args.book}; the package has {', '.join(sorted(books))}")
    text = books[args.book].encode("utf-8")
    if args.max_bytes and len(text) > args.max_bytes:
        text = text[:text.rfind(b"\n\n", 0, args.max_bytes) + 1]
    with open(args.output, "wb") as f:
        f.write(text)
    print(f"wrote {args.output}: {len(text)} bytes, sha256 {hashlib.sha256(text).hexdigest()}")


if __name__ == "__main__":
    main()
