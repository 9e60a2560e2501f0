#!/usr/bin/env python3
"""tools/perf_tables.py: the opening tables of docs/performance.md rewritten from a JSON store, in place.

Renders the fixture tests/data/perf/figures_fixture.json into a scratch document with markers and checks that
exactly the text between each area's markers changes (formats, missing values, the quick-run warning, the
provenance lines), that a rerun changes nothing, that bad markers and unknown areas are errors, and that the CLI
refuses to put quick figures into the real document. The parsers of tools/perf_areas.py are checked against output
captured from the benchmark scripts they read (tests/data/perf/*.txt), so a change of those formats fails here.
No model, no build: runs in well under a second.
"""
import copy
import json
import os
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import perf_areas  # noqa: E402
import perf_tables  # noqa: E402

DATA = os.path.join(ROOT, "tests", "data", "perf")
DOC = """# Performance

Intro text that must not change.

### Kernels

<!-- perf-tables:begin kernels -->
old kernels table
<!-- perf-tables:end kernels -->

Between the areas.

<!-- perf-tables:begin spec -->
<!-- perf-tables:end spec -->

<!-- perf-tables:begin other -->
left alone: no such area in the store
<!-- perf-tables:end other -->
Trailing text.
"""


def fixture():
    with open(os.path.join(DATA, "figures_fixture.json")) as f:
        return json.load(f)


def between(text, area):
    lines = text.split("\n")
    b, e = perf_tables.spans(lines)[area]
    return lines[b + 1:e]


class Rewrite(unittest.TestCase):
    def test_replaces_only_between_the_markers(self):
        out = perf_tables.rewrite(DOC, fixture())
        outside = lambda t: [l for i, l in enumerate(t.split("\n"))  # noqa: E731
                             if not any(b < i < e for b, e in perf_tables.spans(t.split("\n")).values())]
        self.assertEqual(outside(DOC), outside(out))
        self.assertNotIn("old kernels table", out)
        self.assertEqual(between(out, "other"), ["left alone: no such area in the store"])

    def test_kernels_table(self):
        block = "\n".join(between(perf_tables.rewrite(DOC, fixture()), "kernels"))
        self.assertIn("*2026-12-06, Test CPU (2 cores; AVX-512 VNNI), 2 threads; ember abc1234; load average "
                      "0.5 before, 1.9 after.*", block)
        self.assertIn("Measured with `SHAPES=llama-3.2-1b tools/bench_set.sh /tmp/bench-set` (10:20 UTC, Q4_K_M).",
                      block)
        self.assertIn("Regenerate: `tools/perf_tables.sh --areas kernels`.", block)
        self.assertIn("| file | pp512 ember | pp512 llama.cpp | ratio | decode GB/s |", block)
        self.assertIn("|---|---:|---:|---:|---:|", block)
        self.assertIn("| llama-3.2-1b-q4_k_m | 403.1 | 145.5 | 2.77x | 26.3 (100%) |", block)
        self.assertIn("| llama-3.1-8b-q4_0 (tg32) | 79.6 | – | – | – |", block)  # missing values
        self.assertIn("Targets: met.", block)
        self.assertIn('Source: docs/history/x.md, "A section".', block)
        self.assertNotIn("Quick run", block)

    def test_quick_runs_and_several_commits(self):
        block = "\n".join(between(perf_tables.rewrite(DOC, fixture()), "spec"))
        self.assertTrue(block.startswith("**Quick run (`--quick`)"))
        self.assertIn("Measured with:\n\n- `tools/bench_spec.sh", block)
        self.assertIn("(00:00 UTC, ember def5678)", block)  # commits differ: named per run
        self.assertIn("Under load:\n\n| concurrency | paired ratio |", block)
        self.assertIn("| 16 | 1.02x |", block)

    def test_rerun_is_a_fixed_point_and_a_changed_figure_changes_one_area(self):
        store = fixture()
        once = perf_tables.rewrite(DOC, store)
        self.assertEqual(perf_tables.rewrite(once, store), once)
        store2 = copy.deepcopy(store)
        store2["areas"]["spec"]["tables"][0]["rows"][0][1] = 250.24
        twice = perf_tables.rewrite(once, store2)
        self.assertEqual(between(twice, "kernels"), between(once, "kernels"))
        self.assertIn("| code | 250.2 |", "\n".join(between(twice, "spec")))
        only_spec = perf_tables.rewrite(DOC, store2, ["spec"])
        self.assertEqual(between(only_spec, "kernels"), ["old kernels table"])

    def test_errors(self):
        store = fixture()
        with self.assertRaisesRegex(perf_tables.PerfError, "no markers for area 'spec'"):
            perf_tables.rewrite(DOC.replace("begin spec", "begin spek").replace("end spec", "end spek"), store)
        with self.assertRaisesRegex(perf_tables.PerfError, "not in the store"):
            perf_tables.rewrite(DOC, store, ["cost"])
        with self.assertRaisesRegex(perf_tables.PerfError, "has no end marker"):
            perf_tables.rewrite(DOC.replace("<!-- perf-tables:end other -->", ""), store)
        with self.assertRaisesRegex(perf_tables.PerfError, "begin marker of 'spec' inside 'kernels'"):
            perf_tables.rewrite(DOC.replace("<!-- perf-tables:end kernels -->", ""), store)
        with self.assertRaisesRegex(perf_tables.PerfError, "end marker of 'spec' without its begin"):
            perf_tables.rewrite(DOC.replace("<!-- perf-tables:begin spec -->", ""), store)
        with self.assertRaisesRegex(perf_tables.PerfError, "second begin marker"):
            perf_tables.rewrite(DOC + "<!-- perf-tables:begin kernels -->\n<!-- perf-tables:end kernels -->\n", store)
        bad = copy.deepcopy(store)
        bad["areas"]["kernels"]["tables"][0]["rows"][0].pop()
        with self.assertRaisesRegex(perf_tables.PerfError, "4 cells for 5 columns"):
            perf_tables.rewrite(DOC, bad)


class Cli(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.doc = os.path.join(self.dir.name, "performance.md")
        self.store = os.path.join(self.dir.name, "figures.json")
        with open(self.doc, "w") as f:
            f.write(DOC)
        perf_tables.save_store(self.store, fixture())

    def tearDown(self):
        self.dir.cleanup()

    def main(self, *args):
        return perf_tables.main(list(args) + ["--store", self.store, "--doc", self.doc])

    def test_render_then_check(self):
        self.assertEqual(self.main("check"), 1)  # the scratch doc still holds the old table
        self.assertEqual(self.main("render"), 0)
        self.assertEqual(self.main("check"), 0)
        text = open(self.doc).read()
        with open(self.doc, "w") as f:
            f.write(text.replace("| 2.77x |", "| 2.78x |"))  # a hand edit
        self.assertEqual(self.main("check"), 1)

    def test_quick_figures_never_reach_the_committed_doc(self):
        self.assertEqual(perf_tables.main(["run", "--quick", "--areas", "kernels"]), 2)
        self.assertEqual(perf_tables.main(["run", "--quick", "--areas", "kernels", "--doc", self.doc,
                                           "--store", perf_tables.DEFAULT_STORE]), 2)
        self.assertEqual(perf_tables.main(["run", "--quick", "--areas", "kernels", "--store", self.store,
                                           "--doc", perf_tables.DEFAULT_DOC]), 2)

    def test_unknown_area(self):
        self.assertEqual(self.main("run", "--areas", "nonsense"), 2)


class Parsers(unittest.TestCase):
    """The formats of the benchmark scripts' output that tools/perf_areas.py reads."""

    def text(self, name):
        with open(os.path.join(DATA, name)) as f:
            return f.read()

    def test_bench_spec_and_spec_serve_tables(self):
        rows = perf_areas.md_rows(self.text("bench_spec.txt"), 7)
        self.assertEqual(rows[0][:2], ["code", "none"])
        self.assertTrue(all(perf_areas.num(r[3]) is not None for r in rows))
        self.assertEqual(len(perf_areas.md_rows(self.text("bench_spec_serve.txt"), 4)), 1)

    def test_batching_table(self):
        rows = perf_areas.md_rows(self.text("bench_batching.txt"), 7)
        self.assertEqual([r[0] for r in rows], ["static", "dynamic", "continuous"])
        self.assertEqual(perf_areas.num(rows[2][6]), 1.0)

    def test_serve_and_batched_lines(self):
        found = perf_areas.SERVE_LINE.findall(self.text("bench_serve_llama.txt"))
        self.assertEqual([(c, w) for c, w, *_ in found], [("2", "16"), ("2", "8")])
        t = self.text("bench_batched.txt")
        self.assertRegex(t, r"median llama-batched-bench S_TG: [0-9.]+")
        self.assertRegex(t, r"median ember\[0\] \S+: [0-9.]+ \([0-9.]+x llama\.cpp; median of the per-round ratios")

    def test_structured_and_kl(self):
        m = perf_areas.structured_medians(self.text("bench_structured.txt"))
        self.assertEqual(sorted(m), ["free", "json_object", "small_schema"])
        kl = perf_areas.KL_LINE.findall(self.text("eval_kl.txt"))
        self.assertEqual([k[0] for k in kl], ["f16", "q8+hadamard"])


if __name__ == "__main__":
    unittest.main()
