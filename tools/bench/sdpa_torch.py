#!/usr/bin/env python3
"""PyTorch's side of tools/bench/sdpa_compare.sh: forward + backward of
F.scaled_dot_product_attention on [B, H, L, 64] float32 queries, keys and values at 2
threads, the median of repeated runs after one warm-up. Prints one line:

    path=torch b=4 h=8 l=2048 forward_backward_ms=...

Usage: sdpa_torch.py B H L [REPS]
"""

import statistics
import sys
import time

import torch
import torch.nn.functional as F

E = 64


def main():
    b, h, l = (int(a) for a in sys.argv[1:4])
    reps = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    torch.set_num_threads(2)
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, h, l, E, requires_grad=True) for _ in range(3))
    gy = torch.randn(b, h, l, E)
    times = []
    for rep in range(reps + 1):
        start = time.perf_counter()
        y = F.scaled_dot_product_attention(q, k, v)
        y.backward(gy)
        done = time.perf_counter() - start
        for x in (q, k, v):
            x.grad = None
        if rep > 0:
            times.append(done)
    print(f"path=torch b={b} h={h} l={l} forward_backward_ms={statistics.median(times) * 1e3:.1f}")


if __name__ == "__main__":
    main()
