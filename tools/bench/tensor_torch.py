#!/usr/bin/env python3
"""PyTorch's side of the tensor benchmarks: the workloads of
crates/tensor/benches/workloads/mod.rs, timed the way examples/tensor_bench.rs times
ember's, on 2 threads.

    python tools/bench/tensor_torch.py [--samples N] [--iters N] [--threads N] [--table] [NAME_FILTER ...]

Prints one tab-separated line per workload (the same columns as the ember example, the
pool columns left at 0), or with --table a readable table.
"""

import argparse
import statistics
import sys
import time

import torch

THREADS = 2
MATMUL_SIZES = [256, 512, 1024, 2048]


def randn(*shape):
    return torch.randn(*shape, dtype=torch.float32)


def matmul(n):
    def setup():
        torch.manual_seed(1)
        a, b = randn(n, n), randn(n, n)
        return lambda: torch.matmul(a, b)

    return f"matmul_{n}", "flops", 2 * n**3, setup


def add_broadcast():
    def setup():
        torch.manual_seed(2)
        a, b = randn(1000, 1000), randn(1000)
        return lambda: a + b

    return "add_broadcast", "elements", 1_000_000, setup


def sum_last():
    def setup():
        torch.manual_seed(3)
        a = randn(4096, 1024)
        return lambda: a.sum(-1)

    return "sum_last", "elements", 4096 * 1024, setup


def softmax_rows():
    def setup():
        torch.manual_seed(4)
        a = randn(4096, 1024)
        return lambda: torch.softmax(a, -1)

    return "softmax_rows", "elements", 4096 * 1024, setup


def cat_transposed():
    def setup():
        torch.manual_seed(7)
        a, b = randn(1024, 1024).t(), randn(1024, 1024).t()
        return lambda: torch.cat([a, b], 0)

    return "cat_transposed", "elements", 2 * 1024 * 1024, setup


def contiguous_transposed():
    def setup():
        torch.manual_seed(8)
        a = randn(1024, 1024).t()
        return lambda: a.contiguous()

    return "contiguous_transposed", "elements", 1024 * 1024, setup


def pool_chain(suffix):
    # PyTorch's CPU allocator caches nothing, so "on" and "off" are the same program; both
    # names exist so the comparison table lines up with ember's two rows.
    def setup():
        torch.manual_seed(5)
        x, y, b = randn(256, 1024), randn(256, 1024), randn(1024)
        return lambda: torch.relu(x * y + b) * 0.5 + x

    return f"pool_chain_{suffix}", "elements", 5 * 256 * 1024, setup


def pool_layer(suffix):
    def setup():
        torch.manual_seed(6)
        x, w, b = randn(64, 784), randn(784, 256), randn(256)
        return lambda: torch.relu(x @ w + b)

    return f"pool_layer_{suffix}", "flops", 2 * 64 * 784 * 256, setup


def workloads():
    return [matmul(n) for n in MATMUL_SIZES] + [
        add_broadcast(),
        sum_last(),
        softmax_rows(),
        cat_transposed(),
        contiguous_transposed(),
        pool_chain("on"),
        pool_chain("off"),
        pool_layer("on"),
        pool_layer("off"),
    ]


def minor_faults():
    try:
        with open("/proc/self/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[7])
    except (OSError, IndexError, ValueError):
        return 0


def measure(setup, samples, fixed_iters=None):
    step = setup()
    # Warm-up, as on ember's side: at least 3 calls and 0.3 s.
    start, calls = time.perf_counter(), 0
    while calls < 3 or (fixed_iters is None and time.perf_counter() - start < 0.3):
        step()
        calls += 1
    per_call = (time.perf_counter() - start) / calls
    iters = fixed_iters or max(1, int(-(-0.05 // per_call)))
    faults0 = minor_faults()
    times = []
    for _ in range(samples):
        t = time.perf_counter()
        for _ in range(iters):
            step()
        times.append((time.perf_counter() - t) / iters)
    faults = (minor_faults() - faults0) / (samples * iters)
    return statistics.median(times), min(times), faults


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--samples", type=int, default=15)
    p.add_argument("--threads", type=int, default=THREADS)
    p.add_argument("--iters", type=int, help="calls per sample (default: about 50 ms worth)")
    p.add_argument("--table", action="store_true", help="print a readable table instead of TSV")
    p.add_argument("filters", nargs="*")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)
    if not args.table:
        print("# name\tmedian_s\tmin_s\twork_kind\twork\tminflt_per_call\tpool_hits_per_call\tpool_misses_per_call")
    else:
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, capability "
              f"{torch.backends.cpu.get_cpu_capability()}")
        print(f"{'workload':<16} {'median':>12} {'throughput':>18}")
    for name, kind, work, setup in workloads():
        if args.filters and not any(f in name for f in args.filters):
            continue
        med, best, faults = measure(setup, args.samples, args.iters)
        if args.table:
            unit = "GFLOP/s" if kind == "flops" else "Gelem/s"
            print(f"{name:<16} {med * 1e3:>9.3f} ms {work / med / 1e9:>10.2f} {unit}")
        else:
            print(f"{name}\t{med:.9f}\t{best:.9f}\t{kind}\t{work}\t{faults:.2f}\t0\t0")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
