#!/usr/bin/env python3
"""PyTorch's side of matmul_threads.sh: square f32 products [n, n] @ [n, n] with torch.matmul
on --threads threads, one line per size in the format of ember's matmul_threads example:

    torch  threads  n  median GFLOP/s  slowest GFLOP/s  user/wall  GFLOP per CPU-s

over --reps timed products after one untimed one; user/wall is the process's user and system
time (getrusage) over the wall time of the timed products, and GFLOP per CPU-s their work
over that CPU time.

    python matmul_threads_torch.py --threads 2 --sizes 256,512 --reps 11
"""

import argparse
import resource
import statistics
import time

import torch


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--sizes", default="256,512,1024,2048")
    parser.add_argument("--reps", type=int, default=11)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for n in (int(s) for s in args.sizes.split(",")):
        a = torch.randn(n, n)
        b = torch.randn(n, n)
        torch.matmul(a, b)
        cpu0, wall0 = cpu_seconds(), time.perf_counter()
        gflops = []
        for _ in range(max(1, args.reps)):
            start = time.perf_counter()
            torch.matmul(a, b)
            gflops.append(2 * n**3 / (time.perf_counter() - start) / 1e9)
        cpu, wall = cpu_seconds() - cpu0, time.perf_counter() - wall0
        per_cpu = 2 * n**3 * len(gflops) / max(cpu, 1e-6) / 1e9
        median = statistics.median(gflops)
        fields = [f"{median:.2f}", f"{min(gflops):.2f}", f"{cpu / wall:.3f}", f"{per_cpu:.2f}"]
        print("\t".join(["torch", str(args.threads), str(n), *fields]), flush=True)


if __name__ == "__main__":
    main()
