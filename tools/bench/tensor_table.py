#!/usr/bin/env python3
"""Joins the TSV output of the ember timing example and of tensor_torch.py into one table.

    python3 tools/bench/tensor_table.py --ember e1.tsv [e2.tsv ...] --torch t1.tsv [t2.tsv ...]

With several rounds per side, each workload's time is the median of the rounds' medians.
`ratio` is PyTorch's time over ember's: above 1 ember is faster. Needs only the standard
library.
"""

import argparse
import statistics


def load(paths):
    """name -> (list of per-round medians, work kind, work, list of row dicts)"""
    out = {}
    order = []
    for path in paths:
        with open(path) as f:
            for line in f:
                if not line.strip() or line.startswith("#"):
                    continue
                name, med, best, kind, work, faults, hits, misses = line.rstrip("\n").split("\t")
                if name not in out:
                    out[name] = {"meds": [], "kind": kind, "work": int(work), "faults": [], "hits": [], "misses": []}
                    order.append(name)
                e = out[name]
                e["meds"].append(float(med))
                e["faults"].append(float(faults))
                e["hits"].append(float(hits))
                e["misses"].append(float(misses))
    return out, order


def rate(entry, t):
    unit = "GFLOP/s" if entry["kind"] == "flops" else "Gelem/s"
    return f"{entry['work'] / t / 1e9:.1f} {unit}" if entry["kind"] == "flops" else f"{entry['work'] / t / 1e9:.2f} {unit}"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ember", nargs="+", required=True)
    p.add_argument("--torch", nargs="+", required=True)
    args = p.parse_args()
    ember, order = load(args.ember)
    torch, _ = load(args.torch)
    rounds = (len(args.ember), len(args.torch))
    print(f"medians over {rounds[0]} ember and {rounds[1]} PyTorch rounds; ratio = PyTorch time / ember time")
    print()
    print("| workload | ember | PyTorch | ratio | ember faults/call | ember pool hits/misses per call |")
    print("|---|---|---|---|---|---|")
    for name in order:
        e = ember[name]
        te = statistics.median(e["meds"])
        cells = [name, f"{te * 1e3:.3f} ms ({rate(e, te)})"]
        t = torch.get(name)
        if t:
            tt = statistics.median(t["meds"])
            cells += [f"{tt * 1e3:.3f} ms ({rate(t, tt)})", f"{tt / te:.2f}"]
        else:
            cells += ["-", "-"]
        cells.append(f"{statistics.median(e['faults']):.1f}")
        cells.append(f"{statistics.median(e['hits']):.2f} / {statistics.median(e['misses']):.2f}")
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
