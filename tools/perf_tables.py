#!/usr/bin/env python3
"""The opening tables of docs/performance.md: run the benchmark set, keep its figures as JSON, rewrite the tables.

Each area (kernels against llama.cpp, batched decode, serving, long context, speculative decoding, structured
output, KV-cache types, cost; tools/perf_areas.py runs them) has one entry in a JSON store
(docs/perf/figures.json): the machine, the date, the ember commit, the commands that measured it, its table(s)
and notes. docs/performance.md holds each area's table between two marker comments,

    <!-- perf-tables:begin AREA -->
    ... (generated: do not edit by hand; rerun the script) ...
    <!-- perf-tables:end AREA -->

and `render` rewrites exactly what lies between them, so reruns replace the tables in place and leave the rest of
the document alone. `run` measures the chosen areas and merges them into the store (an area that cannot run, e.g.
for want of a llama.cpp build, keeps its previous entry), then renders.

  python3 tools/perf_tables.py run [--areas kernels,serving,...] [--quick] [--store S] [--doc D] [--work DIR]
  python3 tools/perf_tables.py render [--store S] [--doc D] [--areas ...]
  python3 tools/perf_tables.py check [--store S] [--doc D]     (exit 1 if the doc's tables differ from the store)
  python3 tools/perf_tables.py list                            (the areas and what each runs)

--quick runs small shapes (a minute or two per area on 2 cores) to test the machinery; its figures are marked as
such in the JSON and in the rendered table and are not performance figures. tools/perf_tables.sh is the driver.
"""
import argparse
import json
import os
import re
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_STORE = os.path.join(ROOT, "docs", "perf", "figures.json")
DEFAULT_DOC = os.path.join(ROOT, "docs", "performance.md")
BEGIN = "<!-- perf-tables:begin {} -->"
END = "<!-- perf-tables:end {} -->"
MARKER = re.compile(r"<!-- perf-tables:(begin|end) ([a-z0-9-]+) -->")


class PerfError(Exception):
    pass


# ---- formatting ----

def cell(value, col):
    """One table cell: None -> '–', a string as it is, a number with the column's format and suffix."""
    if value is None:
        return "–"
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "yes" if value else "no"
    return format(value, col.get("fmt", "g")) + col.get("suffix", "")


def render_table(t):
    cols = t["columns"]
    out = []
    if t.get("caption"):
        out += [t["caption"], ""]
    out.append("| " + " | ".join(c["name"] for c in cols) + " |")
    out.append("|" + "|".join("---:" if c.get("align", "l") == "r" else "---" for c in cols) + "|")
    for row in t["rows"]:
        if len(row) != len(cols):
            raise PerfError(f"table row {row!r} has {len(row)} cells for {len(cols)} columns")
        out.append("| " + " | ".join(cell(v, c) for v, c in zip(row, cols)) + " |")
    return out


def render_area(name, a):
    """The markdown between an area's markers (without the markers)."""
    out = []
    if a.get("quick"):
        out += ["**Quick run (`--quick`): small shapes to test the script, not performance figures.**", ""]
    machine = a.get("machine", "unknown machine")
    threads = a.get("threads")
    head = f"*{a.get('date', 'undated')}, {machine}"
    head += f", {threads} threads" if threads else ""
    runs = a.get("runs", [])
    embers = {r.get("ember") for r in runs if r.get("ember")} or ({a["ember"]} if a.get("ember") else set())
    if len(embers) == 1:
        head += f"; ember {next(iter(embers))}"
    if a.get("load"):
        head += f"; load average {a['load']}"
    out += [head + ".*", ""]
    if runs:
        items = []
        for r in runs:
            bits = [r[k] for k in ("when", "what") if r.get(k)]
            if len(embers) > 1 and r.get("ember"):
                bits.append(f"ember {r['ember']}")
            tail = f" ({', '.join(bits)})" if bits else ""
            items.append(f"`{r['command']}`{tail}")
        if len(items) == 1:
            out += [f"Measured with {items[0]}.", ""]
        else:
            out += ["Measured with:", ""] + [f"- {i}" for i in items] + [""]
    out.append(f"Regenerate: `tools/perf_tables.sh --areas {name}`.")
    for t in a.get("tables", []):
        out.append("")
        out += render_table(t)
    for n in a.get("notes", []):
        out += ["", n]
    if a.get("source"):
        out += ["", f"Source: {a['source']}."]
    return out


# ---- the document ----

def spans(lines):
    """area -> (index of its begin marker, index of its end marker); errors on unbalanced or repeated markers."""
    found, open_ = {}, None
    for i, line in enumerate(lines):
        m = MARKER.fullmatch(line.strip())
        if not m:
            continue
        kind, name = m.groups()
        if kind == "begin":
            if open_ is not None:
                raise PerfError(f"line {i + 1}: begin marker of '{name}' inside '{open_[0]}'")
            if name in found:
                raise PerfError(f"line {i + 1}: a second begin marker of '{name}'")
            open_ = (name, i)
        else:
            if open_ is None or open_[0] != name:
                raise PerfError(f"line {i + 1}: end marker of '{name}' without its begin marker")
            found[name] = (open_[1], i)
            open_ = None
    if open_ is not None:
        raise PerfError(f"begin marker of '{open_[0]}' (line {open_[1] + 1}) has no end marker")
    return found


def rewrite(text, store, areas=None):
    """The document with every chosen area's table replaced by its rendering from the store."""
    lines = text.split("\n")
    where = spans(lines)
    names = areas if areas is not None else sorted(store.get("areas", {}))
    for n in names:
        if n not in store.get("areas", {}):
            raise PerfError(f"area '{n}' is not in the store")
        if n not in where:
            raise PerfError(f"the document has no markers for area '{n}' ({BEGIN.format(n)} ... {END.format(n)})")
    # Replace from the bottom up so earlier indices stay valid.
    for n in sorted(names, key=lambda n: where[n][0], reverse=True):
        b, e = where[n]
        lines[b + 1:e] = render_area(n, store["areas"][n])
    return "\n".join(lines)


def load_store(path):
    if not os.path.exists(path):
        return {"areas": {}}
    with open(path) as f:
        store = json.load(f)
    if not isinstance(store.get("areas"), dict):
        raise PerfError(f"{path}: no 'areas' object")
    return store


def save_store(path, store):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(store, f, indent=1, ensure_ascii=False)
        f.write("\n")
    os.replace(path + ".tmp", path)


def render_file(store_path, doc_path, areas=None):
    store = load_store(store_path)
    with open(doc_path) as f:
        text = f.read()
    new = rewrite(text, store, areas)
    if new != text:
        with open(doc_path + ".tmp", "w") as f:
            f.write(new)
        os.replace(doc_path + ".tmp", doc_path)
    return new != text


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["run", "render", "check", "list"])
    ap.add_argument("--areas", default="", help="comma-separated areas (default: all)")
    ap.add_argument("--store", default=None, help=f"JSON store (default {os.path.relpath(DEFAULT_STORE, ROOT)}; "
                                                  "with --quick: WORK/quick.json)")
    ap.add_argument("--doc", default=None, help=f"document (default {os.path.relpath(DEFAULT_DOC, ROOT)}; with "
                                                "--quick it must be given: quick figures never go into the real doc; "
                                                "run: a missing file starts as a copy of the real doc)")
    ap.add_argument("--quick", action="store_true", help="small shapes: tests the machinery in a minute or two")
    ap.add_argument("--work", default=os.path.join(ROOT, "bench_results", "perf"),
                    help="logs and raw results (default bench_results/perf)")
    ap.add_argument("--no-render", action="store_true", help="run: update the store only")
    a = ap.parse_args(argv)
    areas = [x for x in a.areas.split(",") if x] or None
    try:
        if a.command == "list":
            import perf_areas  # noqa: E402 (tools/ is on the path when run as a script)
            for name, (_, what) in perf_areas.AREAS.items():
                print(f"{name:18s} {what}")
            return 0
        if a.command == "run":
            import perf_areas
            if a.quick and a.doc is None and not a.no_render:
                raise PerfError("--quick needs --doc SCRATCH_COPY (or --no-render): quick figures are not figures")
            store_path = a.store or (os.path.join(a.work, "quick.json") if a.quick else DEFAULT_STORE)
            if a.quick and os.path.abspath(store_path) == os.path.abspath(DEFAULT_STORE):
                raise PerfError("--quick would write into the committed store: give --store")
            if a.quick and a.doc and os.path.abspath(a.doc) == os.path.abspath(DEFAULT_DOC):
                raise PerfError("--quick would write into docs/performance.md: give a scratch --doc")
            names = areas or list(perf_areas.AREAS)
            unknown = [n for n in names if n not in perf_areas.AREAS]
            if unknown:
                raise PerfError(f"unknown area(s): {', '.join(unknown)} (see: perf_tables.py list)")
            if a.doc and not os.path.exists(a.doc) and not a.no_render:
                shutil.copyfile(DEFAULT_DOC, a.doc)  # a scratch copy to render into
                print(f"perf_tables: {a.doc}: a copy of {os.path.relpath(DEFAULT_DOC, ROOT)}")
            store = load_store(store_path)
            done, skipped = [], []
            for n in names:
                result = perf_areas.run_area(n, quick=a.quick, work=a.work)
                if result is None:  # a peer or a file is missing (said above): not an error
                    print(f"perf_tables: area '{n}' did not run; its previous figures stay", file=sys.stderr)
                    skipped.append(n)
                    continue
                store["areas"][n] = result
                save_store(store_path, store)  # after every area: a later failure loses nothing
                done.append(n)
            print(f"perf_tables: store {store_path}: {', '.join(done) or 'nothing'} updated"
                  + (f"; skipped: {', '.join(skipped)}" if skipped else ""))
            if not a.no_render and done:
                doc = a.doc or DEFAULT_DOC
                render_file(store_path, doc, done)
                print(f"perf_tables: {doc}: tables of {', '.join(done)} rewritten")
            return 0
        store_path = a.store or DEFAULT_STORE
        doc = a.doc or DEFAULT_DOC
        if a.command == "render":
            changed = render_file(store_path, doc, areas)
            print(f"perf_tables: {doc}: {'rewritten' if changed else 'already up to date'}")
            return 0
        # check
        with open(doc) as f:
            text = f.read()
        if rewrite(text, load_store(store_path), areas) != text:
            print(f"perf_tables: the tables in {doc} differ from {store_path}; run: python3 tools/perf_tables.py "
                  f"render", file=sys.stderr)
            return 1
        print(f"perf_tables: {doc} matches {store_path}")
        return 0
    except (PerfError, OSError, json.JSONDecodeError) as e:
        print(f"perf_tables: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main())
