#!/usr/bin/env python3
"""Reports the sets of tools/bench/tensor_compare.sh: the TSV output of ember's
`tensor_bench` example and of tensor_torch.py, one file per side and set.

    python3 tools/bench/tensor_table.py --ember e1.tsv [e2.tsv ...] --torch t1.tsv [t2.tsv ...]
        [--command CMD] [--note LINE ...]

The i-th ember file and the i-th PyTorch file are set i. Each workload's row shows every
set's median time per call on both sides and its ratio PyTorch / ember (above 1: ember is
faster), then the median and the minimum ratio over the sets (tools/bench/sets.py). A
second table gives ember's page faults and buffer-pool hits and misses per call, medians
over the sets. Needs only the standard library.
"""

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sets  # noqa: E402

# The workloads' shapes, for the report's labels.
SHAPES = {
    "add_broadcast": "broadcast add, [1000,1000] + [1000]",
    "sum_last": "sum over last dim, [4096,1024] -> [4096]",
    "softmax_rows": "softmax over rows, [4096,1024]",
    "cat_transposed": "cat of two transposed [1024,1024] views along dim 0",
    "contiguous_transposed": "contiguous copy of a transposed [1024,1024] view",
    "pool_chain_on": "elementwise chain relu(x*y+b)*0.5+x, [256,1024], pool on",
    "pool_chain_off": "elementwise chain relu(x*y+b)*0.5+x, [256,1024], pool off",
    "pool_layer_on": "linear layer relu([64,784] @ [784,256] + b), pool on",
    "pool_layer_off": "linear layer relu([64,784] @ [784,256] + b), pool off",
}


def label(name):
    if name.startswith("matmul_"):
        n = name.split("_", 1)[1]
        return f"matmul f32 [{n},{n}] @ [{n},{n}]"
    return SHAPES.get(name, name)


def load(path):
    """name -> row dict, in the file's order."""
    out = {}
    with open(path) as f:
        for line in f:
            if not line.strip() or line.startswith("#"):
                continue
            name, med, _best, kind, work, faults, hits, misses = line.rstrip("\n").split("\t")
            out[name] = {
                "median": float(med),
                "kind": kind,
                "work": int(work),
                "faults": float(faults),
                "hits": float(hits),
                "misses": float(misses),
            }
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ember", nargs="+", required=True)
    p.add_argument("--torch", nargs="+", required=True)
    p.add_argument("--command", default="tools/bench/tensor_compare.sh")
    p.add_argument("--note", action="append", default=[], help="a line to print under the table")
    args = p.parse_args()
    if len(args.ember) != len(args.torch):
        p.error(f"a set is one ember and one PyTorch file: got {len(args.ember)} and {len(args.torch)}")
    table = sets.Table("ms per call", higher_is_better=False, command=args.command)
    ember_only = {}
    for ember_path, torch_path in zip(args.ember, args.torch):
        ember, torch = load(ember_path), load(torch_path)
        for name, e in ember.items():
            ember_only.setdefault(name, []).append(e)
            if name in torch:
                table.add(label(name), e["median"] * 1e3, torch[name]["median"] * 1e3)
    table.print()
    if args.note:
        print()
    for line in args.note:
        print(line)
    print("\nember per call, medians over the sets:\n")
    print("| workload | throughput at the median time | page faults | buffer pool hits / misses |")
    print("|---|---|---|---|")
    for name, rows in ember_only.items():
        t = statistics.median(r["median"] for r in rows)
        unit = "GFLOP/s" if rows[0]["kind"] == "flops" else "Gelem/s"
        cells = [
            label(name),
            f"{sets.fmt(rows[0]['work'] / t / 1e9)} {unit}",
            f"{statistics.median(r['faults'] for r in rows):.1f}",
            f"{statistics.median(r['hits'] for r in rows):.2f} / {statistics.median(r['misses'] for r in rows):.2f}",
        ]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
