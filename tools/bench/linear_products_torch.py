#!/usr/bin/env python3
"""PyTorch's side of linear_products.sh: a Linear layer's three training products with the
operand layouts F.linear's forward and backward use, in the format of ember's
linear_products example:

    torch  threads  product  tokens  in  out  median GFLOP/s  GFLOP per CPU-s

forward x @ w.t() ([tokens, in] @ [in, out]), input g @ w ([tokens, out] @ [out, in]) and
weight g.t() @ x ([out, tokens] @ [tokens, in]), each --reps times after one untimed run.

    python linear_products_torch.py --threads 2 --tokens 2048,16384 --layers 256:768,1024:256
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
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tokens", default="2048,16384")
    parser.add_argument("--layers", default="256:768,256:256,256:1024,1024:256")
    parser.add_argument("--reps", type=int, default=11)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for tokens in (int(t) for t in args.tokens.split(",")):
        for pair in args.layers.split(","):
            inn, out = (int(v) for v in pair.split(":"))
            x, w, g = torch.randn(tokens, inn), torch.randn(out, inn), torch.randn(tokens, out)
            flops = 2 * tokens * inn * out
            products = {
                "forward": lambda: torch.matmul(x, w.t()),
                "input": lambda: torch.matmul(g, w),
                "weight": lambda: torch.matmul(g.t(), x),
            }
            for name, product in products.items():
                product()
                cpu0 = cpu_seconds()
                gflops = []
                for _ in range(max(1, args.reps)):
                    start = time.perf_counter()
                    product()
                    gflops.append(flops / (time.perf_counter() - start) / 1e9)
                per_cpu = flops * len(gflops) / max(cpu_seconds() - cpu0, 1e-6) / 1e9
                fields = [name, str(tokens), str(inn), str(out), f"{statistics.median(gflops):.2f}", f"{per_cpu:.2f}"]
                print("\t".join(["torch", str(args.threads), *fields]), flush=True)


if __name__ == "__main__":
    main()
