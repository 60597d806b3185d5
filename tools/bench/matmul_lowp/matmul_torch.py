#!/usr/bin/env python3
"""PyTorch's side of compare.py: square products [n, n] @ [n, n] with torch.matmul, one line
per size in matmul_lowp's format: kind, threads, n, median GFLOP/s, slowest GFLOP/s over
--reps timed products after one untimed one.

    python matmul_torch.py --kind bf16 --threads 2 --sizes 256,512 --reps 7
"""

import argparse
import statistics
import time

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kind", choices=["bf16", "f16", "f32"], default="bf16")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--sizes", default="256,512,1024,2048")
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[args.kind]
    for n in (int(s) for s in args.sizes.split(",")):
        a = torch.randn(n, n).to(dtype)
        b = torch.randn(n, n).to(dtype)
        torch.matmul(a, b)
        secs = []
        for _ in range(max(1, args.reps)):
            start = time.perf_counter()
            torch.matmul(a, b)
            secs.append(time.perf_counter() - start)
        gflops = [2 * n**3 / s / 1e9 for s in secs]
        print(f"{args.kind}\t{args.threads}\t{n}\t{statistics.median(gflops):.2f}\t{min(gflops):.2f}", flush=True)


if __name__ == "__main__":
    main()
