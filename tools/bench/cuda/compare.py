#!/usr/bin/env python3
"""Sets ember's and PyTorch's GPU benchmark results side by side as a markdown table for
BENCHMARKS.md.

    python3 tools/bench/cuda/compare.py ember_gpu.json torch_gpu.json

Each row is one workload with ember's and PyTorch's figure and their ratio, written so
that above 1 means ember is faster (or, for memory, uses less): throughputs divide
ember's by PyTorch's, times and memory PyTorch's by ember's. A figure missing from either
file shows as "-".
"""

import json
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def fmt(v, unit):
    if v is None:
        return "-"
    if unit == "MiB":
        return f"{v / (1 << 20):.0f} MiB"
    if unit == "samples/s":
        return f"{v:,.0f} samples/s"
    if unit == "us":
        return f"{v:.2f} us"
    return f"{v:.2f} {unit}"


def rows(e, t):
    """(workload, ember value, torch value, unit, higher_is_better)."""
    sizes = sorted({*e.get("matmul_tflops", {}), *t.get("matmul_tflops", {})}, key=int)
    for n in sizes:
        yield (f"matmul {n}x{n} f32", e.get("matmul_tflops", {}).get(n), t.get("matmul_tflops", {}).get(n), "TFLOP/s", True)
    for numel in sorted({*e.get("add_us_per_call", {}), *t.get("add_us_per_call", {})}, key=int):
        label = "1 element" if numel == "1" else f"{int(numel):,} elements"
        yield (f"a + b, {label} (per call)", e.get("add_us_per_call", {}).get(numel), t.get("add_us_per_call", {}).get(numel), "us", False)
    for key, label in [("mnist_mlp", "MNIST MLP training, batch 64"), ("mnist_cnn", "MNIST CNN training, batch 64")]:
        yield (label, (e.get(key) or {}).get("samples_per_s"), (t.get(key) or {}).get("samples_per_s"), "samples/s", True)
    yield ("peak GPU memory (allocator)", e.get("peak_memory_bytes"), t.get("peak_memory_bytes"), "MiB", False)
    for key, label in [("process_peak_gpu_memory_bytes", "peak GPU memory (process, nvidia-smi)")]:
        if key in e or key in t:
            yield (label, e.get(key), t.get(key), "MiB", False)


def ratio(ev, tv, higher_is_better):
    if ev is None or tv is None or ev == 0 or tv == 0:
        return "-"
    r = ev / tv if higher_is_better else tv / ev
    return f"{r:.2f}x"


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    e, t = load(sys.argv[1]), load(sys.argv[2])
    gpu = t.get("gpu") or e.get("gpu") or "unknown GPU"
    print(f"GPU: {gpu}; PyTorch {t.get('version', '?')}; ratio > 1: ember ahead")
    print()
    print("| workload | ember | PyTorch | ratio |")
    print("| --- | ---: | ---: | ---: |")
    for name, ev, tv, unit, hib in rows(e, t):
        print(f"| {name} | {fmt(ev, unit)} | {fmt(tv, unit)} | {ratio(ev, tv, hib)} |")


if __name__ == "__main__":
    main()
