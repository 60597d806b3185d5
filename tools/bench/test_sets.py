#!/usr/bin/env python3
"""Tests of tools/bench/sets.py, the benchmark protocol's report:

    python3 tools/bench/test_sets.py

Needs only the standard library (no PyTorch, no build).
"""

import io
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import sets  # noqa: E402


def printed(table):
    buf = io.StringIO()
    table.print(file=buf, with_header=False)
    return buf.getvalue()


class RatioTest(unittest.TestCase):
    def test_throughput_ratio_is_ember_over_baseline(self):
        self.assertAlmostEqual(sets.set_ratio(200.0, 100.0, higher_is_better=True), 2.0)

    def test_time_ratio_is_baseline_over_ember(self):
        # ember took 5 ms where PyTorch took 10: ember is twice as fast.
        self.assertAlmostEqual(sets.set_ratio(5.0, 10.0, higher_is_better=False), 2.0)


class TableTest(unittest.TestCase):
    def setUp(self):
        self.saved = os.environ.pop("SETS_TSV", None)

    def tearDown(self):
        os.environ.pop("SETS_TSV", None)
        if self.saved is not None:
            os.environ["SETS_TSV"] = self.saved

    def test_every_set_counts_and_the_worst_is_reported(self):
        table = sets.Table("samples/s", higher_is_better=True, command="x.sh 5")
        # One set far below the others: it must move the minimum and stay in the count.
        for ember, torch in [(150, 100), (160, 100), (90, 100), (155, 100), (152, 100)]:
            table.add("w", ember, torch)
        em, bm, ratios, med, low = table.summary("w")
        self.assertEqual(len(ratios), 5)
        self.assertAlmostEqual(med, 1.52)
        self.assertAlmostEqual(low, 0.90)
        self.assertEqual((em, bm), (152.0, 100.0))
        row = [line for line in printed(table).splitlines() if line.startswith("| w |")][0]
        self.assertIn("150.0 / 160.0 / 90.00 / 155.0 / 152.0", row)
        self.assertIn("1.50x / 1.60x / 0.90x / 1.55x / 1.52x", row)
        self.assertTrue(row.endswith("| **1.52x** | 0.90x | 5 |"), row)

    def test_fewer_than_three_sets_are_flagged(self):
        table = sets.Table("ms", higher_is_better=False, command="x.sh 2")
        for _ in range(2):
            table.add("w", 1, 1)
        self.assertIn("fewer than the 3 a published figure needs", printed(table))
        table.add("w", 1, 1)
        self.assertNotIn("fewer than", printed(table))

    def test_even_number_of_sets_takes_the_middle_pair(self):
        table = sets.Table("ms", higher_is_better=False, command="x.sh 4")
        for ember in (1.0, 2.0, 4.0, 5.0):
            table.add("w", ember, 4.0)
        _, _, _, med, low = table.summary("w")
        self.assertAlmostEqual(med, (2.0 + 1.0) / 2)
        self.assertAlmostEqual(low, 0.8)

    def test_workloads_keep_their_order(self):
        table = sets.Table("ms", higher_is_better=False, command="x.sh 2")
        for _ in range(2):
            table.add("b", 1, 1)
            table.add("a", 1, 1)
        lines = printed(table).splitlines()
        rows = [line.split(" | ")[0] for line in lines if line.startswith("| ") and "---" not in line]
        self.assertEqual(rows[1:], ["| b", "| a"])

    def test_tsv_rows_feed_the_combined_table(self):
        with tempfile.TemporaryDirectory() as d:
            tsv = os.path.join(d, "rows.tsv")
            os.environ["SETS_TSV"] = tsv
            table = sets.Table("samples/s", True, "tools/bench/ddp_scaling.sh 60 64 3", "2 ranks", "1 process")
            for ember, base in [(3, 2), (4, 2), (5, 2)]:
                table.add("ddp mlp", ember, base)
            printed(table)
            torch_table = sets.Table("ms", False, "tools/bench/conv_compare.sh 3")
            for ember, base in [(10, 9), (10, 11), (10, 10)]:
                torch_table.add("conv", ember, base)
            printed(torch_table)
            out = subprocess.run(
                [sys.executable, os.path.join(HERE, "sets.py"), "table", "--started", "then", tsv],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        lines = out.splitlines()
        self.assertTrue(lines[0].startswith("date: then to "), lines[0])
        self.assertTrue(lines[1].startswith("machine: "), lines[1])
        rows = [line for line in lines if line.startswith("| ddp") or line.startswith("| conv")]
        self.assertEqual(
            rows[0],
            "| ddp mlp | `tools/bench/ddp_scaling.sh 60 64 3` | 4.000 samples/s (2 ranks) "
            "| 2.000 samples/s (1 process) | **2.00x** | 1.50x | 3 |",
        )
        self.assertEqual(
            rows[1], "| conv | `tools/bench/conv_compare.sh 3` | 10.00 ms | 10.00 ms | **1.00x** | 0.90x | 3 |"
        )


class ProbeTest(unittest.TestCase):
    def setUp(self):
        self.saved = os.environ.pop("SETS_TSV", None)

    def tearDown(self):
        if self.saved is not None:
            os.environ["SETS_TSV"] = self.saved

    def test_a_probe_measures_both_ways(self):
        p = sets.probe(loops=20_000)
        self.assertGreater(p.alone, 0)
        self.assertGreater(p.together, 0)

    def test_each_set_prints_its_probe(self):
        table = sets.Table("GFLOP/s", higher_is_better=True, command="x.sh 3")
        for s_, (ember, torch) in enumerate([(200, 100), (150, 100), (90, 100)], 1):
            table.add("w", ember, torch)
            table.set_probe(s_, sets.Probe(10.0 + s_, 5.0 * s_))
        text = printed(table)
        row = [line for line in text.splitlines() if line.startswith("| w |")][0]
        # The slowest vCPU with all busy, per set, beside the sets' figures.
        self.assertTrue(row.endswith("| 3 | 5.000 / 10.00 / 15.00 |"), row)
        self.assertIn("- set 3: 13.0 alone, 15.0 all at once", text)

    def test_a_table_without_probes_keeps_its_columns(self):
        table = sets.Table("ms", higher_is_better=False, command="x.sh 3")
        table.add("w", 1, 1)
        self.assertNotIn("host probe", printed(table))


class SummariseTest(unittest.TestCase):
    def run_summarise(self, text, *extra):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "sets.tsv")
            with open(path, "w") as f:
                f.write(text)
            env = {k: v for k, v in os.environ.items() if k != "SETS_TSV"}
            return subprocess.run(
                [sys.executable, os.path.join(HERE, "sets.py"), "summarise", "--unit", "ms", "--lower-is-better",
                 "--command", "cmd", *extra, path],
                capture_output=True,
                text=True,
                env=env,
            )

    def test_reads_workload_ember_baseline_lines(self):
        done = self.run_summarise("# comment\nw\t2\t4\nw\t4\t4\nw\t1\t4\n")
        self.assertEqual(done.returncode, 0, done.stderr)
        row = [line for line in done.stdout.splitlines() if line.startswith("| w |")][0]
        self.assertTrue(row.endswith("| **2.00x** | 1.00x | 3 |"), row)
        self.assertIn("command: `cmd`", done.stdout)

    def test_probe_lines_are_read(self):
        done = self.run_summarise("#probe\t1\t10\t9\nw\t2\t4\n#probe\t2\t10\t4.5\nw\t4\t4\nw\t1\t4\n")
        self.assertEqual(done.returncode, 0, done.stderr)
        row = [line for line in done.stdout.splitlines() if line.startswith("| w |")][0]
        self.assertTrue(row.endswith("| 3 | 9.000 / 4.500 / ? |"), row)

    def test_a_malformed_line_names_the_file_and_line(self):
        done = self.run_summarise("w\t2\t4\nw 2 4\n")
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("sets.tsv:2", done.stderr)


class FormatTest(unittest.TestCase):
    def test_four_significant_digits(self):
        self.assertEqual(sets.fmt(92828.4), "92,828")
        self.assertEqual(sets.fmt(6.67), "6.670")
        self.assertEqual(sets.fmt(0.138), "0.1380")
        self.assertEqual(sets.fmt(713.52), "713.5")


if __name__ == "__main__":
    unittest.main(verbosity=2)
