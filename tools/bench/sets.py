#!/usr/bin/env python3
"""The benchmark protocol's report, shared by every comparison script in tools/bench/.

A *set* is one ember run and one baseline run (PyTorch, or for ddp_scaling.sh another ember
configuration) of the same workload, back to back; the scripts alternate which side runs
first (ember in odd sets, the baseline in even ones) so that a change of load hits both
sides alike. The *ratio* of a set is how many times faster ember was: ember / baseline for
throughputs, baseline / ember for times, so above 1 ember is faster. A workload's figure is
the median and the minimum ratio over every set of one invocation, none discarded, stated
with the date, the machine and the command.

In a script's Python summary (the scripts run from the repository root):

    sys.path.insert(0, "tools/bench")
    import sets

    table = sets.Table("samples/s", higher_is_better=True, command="tools/bench/lstm_compare.sh 5")
    for ember, torch in per_set:                      # in set order
        table.add("LSTM(28, 128), T=28, batch 64", ember, torch)
    table.print()

`Table.print` prints the header (`sets.py machine` and the command), then one Markdown row
per workload: each set's figures and ratio, the medians of both sides, the median and the
minimum ratio and the number of sets. With SETS_TSV=FILE in the environment it also appends
one tab-separated line per workload to FILE, which `tools/bench/all.sh` collects.

The host probe says what the machine itself was doing during a set, apart from ember and
the baseline: `sets.probe()` times a fixed arithmetic loop on one vCPU alone and then on
every vCPU at once (a few tenths of a second) and returns a `Probe`. A set measured while
another guest or process took the cores shows a slow probe; a host that runs two vCPUs on
one core shows an "all at once" figure near half the "alone" one. Take one per set (just
before or after it) and pass it to `Table.set_probe(set_number, probe)` (sets count from 1);
`Table.print` then prints each set's probe under the table, so that no set is discarded and
none is read without its machine's state.

From the shell:

    sets.py machine                   # the header alone: date, machine, commit
    sets.py probe                     # one host probe: "alone<TAB>all at once", Mloops/s
    sets.py summarise --unit ms --lower-is-better --command CMD FILE
                                      # FILE: lines "workload<TAB>ember<TAB>baseline", one per
                                      # workload and set, in set order, and optionally lines
                                      # "#probe<TAB>SET<TAB>alone<TAB>all at once" (from
                                      # `sets.py probe`)
    sets.py table [--started WHEN] [--note LINE ...] TSV [TSV ...]
                                      # all.sh's combined table from SETS_TSV files

Needs only the standard library; tools/bench/test_sets.py tests it.
"""

import argparse
import datetime
import math
import multiprocessing
import os
import statistics
import subprocess
import sys
import time

# The fewest sets a published figure may rest on.
MIN_SETS = 3

# The columns of a SETS_TSV line, in order.
TSV_FIELDS = (
    "command",
    "workload",
    "unit",
    "ember_name",
    "base_name",
    "ember_median",
    "base_median",
    "median_ratio",
    "min_ratio",
    "sets",
    "ratios",
)


def fmt(value):
    """A figure with four significant digits and thousands separators (92,828; 6.670; 0.1380)."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    decimals = max(0, 3 - math.floor(math.log10(abs(value))))
    return f"{value:,.{decimals}f}"


def fmt_ratio(ratio):
    """A ratio as the tables show it (1.52x)."""
    return f"{ratio:.2f}x"


def _lscpu():
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return {}
    fields = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return fields


def _commit():
    def git(*args):
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout.strip()

    try:
        head = git("rev-parse", "--short=12", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" with uncommitted changes" if dirty else "")


def machine():
    """One line: the CPU model, its vCPU count and the two AVX-512 flags that decide kernels."""
    cpu = _lscpu()
    flags = set(cpu.get("Flags", "").split())
    model = cpu.get("Model name", "unknown CPU")
    vcpus = cpu.get("CPU(s)", str(os.cpu_count()))
    avx = ", ".join(f"{f} {'yes' if f in flags else 'no'}" for f in ("avx512_bf16", "avx512_fp16", "amx_bf16"))
    return f"{model}, {vcpus} vCPUs ({avx})"


def header(started=None):
    """The lines every report starts with: when it ran, the machine, the ember commit."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    when = f"date: {started} to {now}" if started else f"date: {now} (finished)"
    return [when, f"machine: {machine()}", f"ember: {_commit()}"]


# Iterations of the host probe's loop per vCPU: about 0.1 s of one core in CPython.
PROBE_LOOPS = 1_000_000


def _probe_loop(loops):
    """The probe's fixed arithmetic loop; returns its iterations per second (millions)."""
    start = time.perf_counter()
    x = 0
    for i in range(loops):
        x = (x * 31 + i) & 0xFFFF
    return loops / (time.perf_counter() - start) / 1e6


class Probe:
    """The host probe's figures, in millions of loop iterations per second: `alone`, the loop
    on one vCPU while the others idle; `together`, the slowest vCPU while every vCPU runs it."""

    def __init__(self, alone, together):
        self.alone = float(alone)
        self.together = float(together)

    def __str__(self):
        return f"{self.alone:.1f} alone, {self.together:.1f} all at once"


def probe(loops=PROBE_LOOPS):
    """Times the probe loop on one vCPU, then on every vCPU at once (one process each)."""
    alone = _probe_loop(loops)
    vcpus = os.cpu_count() or 1
    with multiprocessing.get_context("fork").Pool(vcpus) as pool:
        together = min(pool.map(_probe_loop, [loops] * vcpus))
    return Probe(alone, together)


def set_ratio(ember, base, higher_is_better):
    """How many times faster ember was in one set (above 1: ember faster)."""
    return ember / base if higher_is_better else base / ember


class Table:
    """The per-set figures of one or more workloads that share a unit, and their report."""

    def __init__(self, unit, higher_is_better, command, ember_name="ember", base_name="PyTorch"):
        self.unit = unit
        self.higher_is_better = higher_is_better
        self.command = command
        self.ember_name = ember_name
        self.base_name = base_name
        self.rows = {}
        self.probes = {}

    def set_probe(self, set_number, host_probe):
        """Records the host probe (`Probe`) taken with set `set_number` (from 1)."""
        self.probes[int(set_number)] = host_probe

    def add(self, workload, ember, base):
        """Adds one set's figures for `workload`; call in set order."""
        self.rows.setdefault(workload, []).append((float(ember), float(base)))

    def summary(self, workload):
        """(ember median, baseline median, per-set ratios, median ratio, minimum ratio)."""
        pairs = self.rows[workload]
        ratios = [set_ratio(e, b, self.higher_is_better) for e, b in pairs]
        return (
            statistics.median(e for e, _ in pairs),
            statistics.median(b for _, b in pairs),
            ratios,
            statistics.median(ratios),
            min(ratios),
        )

    def print(self, file=None, with_header=True):
        """Prints the report (to stdout by default) and appends its rows to SETS_TSV if set."""
        out = file or sys.stdout
        if with_header:
            for line in header():
                print(line, file=out)
            print(f"command: `{self.command}`", file=out)
        direction = "higher" if self.higher_is_better else "lower"
        e, b = self.ember_name, self.base_name
        ratio = f"{e} / {b}" if self.higher_is_better else f"{b} / {e}"
        print(
            f"\n{self.unit} ({direction} is faster); ratio = {ratio}, above 1: {e} faster; "
            f"{e} ran first in odd sets, {b} in even ones\n",
            file=out,
        )
        probe_column = "| host probe, per set " if self.probes else ""
        print(
            f"| workload | {e}, per set | {b}, per set | ratio, per set | {e} median | {b} median "
            f"| median ratio | minimum ratio | sets {probe_column}|",
            file=out,
        )
        print("|---|---|---|---|---|---|---|---|---|" + ("---|" if self.probes else ""), file=out)
        for workload, pairs in self.rows.items():
            em, bm, ratios, med, low = self.summary(workload)
            cells = [
                workload,
                " / ".join(fmt(v) for v, _ in pairs),
                " / ".join(fmt(v) for _, v in pairs),
                " / ".join(fmt_ratio(r) for r in ratios),
                fmt(em),
                fmt(bm),
                f"**{fmt_ratio(med)}**",
                fmt_ratio(low),
                str(len(pairs)),
            ]
            if self.probes:
                # The slowest vCPU with every vCPU busy, per set in set order ("?" where a
                # set has no probe).
                per_set = (self.probes.get(n) for n in range(1, len(pairs) + 1))
                cells.append(" / ".join(fmt(p.together) if p else "?" for p in per_set))
            print("| " + " | ".join(cells) + " |", file=out)
        fewest = min(len(pairs) for pairs in self.rows.values())
        if fewest < MIN_SETS:
            print(f"\n({fewest} set(s): fewer than the {MIN_SETS} a published figure needs)", file=out)
        if self.probes:
            print(
                "\nhost probe per set (million loop iterations/s, one vCPU alone / slowest vCPU with all busy):",
                file=out,
            )
            for n, p in sorted(self.probes.items()):
                print(f"- set {n}: {p}", file=out)
        out.flush()
        self.write_tsv()

    def write_tsv(self):
        """Appends one line per workload to the file named by SETS_TSV, if any."""
        path = os.environ.get("SETS_TSV")
        if not path:
            return
        with open(path, "a") as f:
            for workload, pairs in self.rows.items():
                em, bm, ratios, med, low = self.summary(workload)
                row = {
                    "command": self.command,
                    "workload": workload,
                    "unit": self.unit,
                    "ember_name": self.ember_name,
                    "base_name": self.base_name,
                    "ember_median": repr(em),
                    "base_median": repr(bm),
                    "median_ratio": repr(med),
                    "min_ratio": repr(low),
                    "sets": str(len(pairs)),
                    "ratios": ",".join(f"{r:.4f}" for r in ratios),
                }
                f.write("\t".join(row[k].replace("\t", " ") for k in TSV_FIELDS) + "\n")


def summarise(args):
    table = Table(args.unit, not args.lower_is_better, args.command, args.ember_name, args.base_name)
    with open(args.file) as f:
        for n, line in enumerate(f, 1):
            fields = line.rstrip("\n").split("\t")
            if fields[0] == "#probe":
                if len(fields) != 4:
                    expected = "'#probe<TAB>set<TAB>alone<TAB>all at once'"
                    sys.exit(f"sets.py: {args.file}:{n}: expected {expected}, got {line!r}")
                table.set_probe(fields[1], Probe(fields[2], fields[3]))
                continue
            if not line.strip() or line.startswith("#"):
                continue
            if len(fields) != 3:
                sys.exit(f"sets.py: {args.file}:{n}: expected 'workload<TAB>ember<TAB>baseline', got {line!r}")
            table.add(fields[0], fields[1], fields[2])
    if not table.rows:
        sys.exit(f"sets.py: {args.file} holds no sets")
    table.print()


def combined_table(args):
    """all.sh's table: one row per workload from every SETS_TSV file, in the files' order."""
    for line in header(args.started):
        print(line)
    for line in args.note or []:
        print(line)
    print()
    print("| workload | command | ember median | PyTorch median | median ratio | minimum ratio | sets |")
    print("|---|---|---|---|---|---|---|")
    for path in args.tsv:
        if not os.path.exists(path):
            continue
        for line in open(path):
            row = dict(zip(TSV_FIELDS, line.rstrip("\n").split("\t")))
            ember = f"{fmt(float(row['ember_median']))} {row['unit']}"
            base = f"{fmt(float(row['base_median']))} {row['unit']}"
            # A baseline other than PyTorch (ddp_scaling.sh compares two ember setups) is named
            # in its cells, so that the column's heading does not mislead.
            if row["base_name"] != "PyTorch":
                ember += f" ({row['ember_name']})"
                base += f" ({row['base_name']})"
            cells = [
                row["workload"],
                f"`{row['command']}`",
                ember,
                base,
                f"**{fmt_ratio(float(row['median_ratio']))}**",
                fmt_ratio(float(row["min_ratio"])),
                row["sets"],
            ]
            print("| " + " | ".join(cells) + " |")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("machine", help="print the report header: date, machine, commit")
    sub.add_parser("probe", help="time the host probe: 'alone<TAB>all at once' in million loops/s")
    s = sub.add_parser("summarise", help="report sets read from 'workload<TAB>ember<TAB>baseline' lines")
    s.add_argument("--unit", required=True)
    s.add_argument("--lower-is-better", action="store_true", help="the figures are times, not throughputs")
    s.add_argument("--command", required=True, help="the command that measured the sets, for the report")
    s.add_argument("--ember-name", default="ember")
    s.add_argument("--base-name", default="PyTorch")
    s.add_argument("file")
    t = sub.add_parser("table", help="all.sh's combined table from SETS_TSV files")
    t.add_argument("--started", help="when the run started, for the date line")
    t.add_argument("--note", action="append", help="a line to print under the header")
    t.add_argument("tsv", nargs="*")
    args = p.parse_args()
    if args.cmd == "machine":
        print("\n".join(header()))
    elif args.cmd == "probe":
        p = probe()
        print(f"{p.alone:.2f}\t{p.together:.2f}")
    elif args.cmd == "summarise":
        summarise(args)
    else:
        combined_table(args)


if __name__ == "__main__":
    main()
