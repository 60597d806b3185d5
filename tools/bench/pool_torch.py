#!/usr/bin/env python3
"""Max pooling speed in PyTorch, the counterpart of
`cargo run --release -p ember-nn --example pool_bench`: max_pool2d 2x2 stride 2 of
[N, 6, 24, 24] and [N, 16, 8, 8] (the LeNet shapes) for N = 64 and 256, f32, forward and
forward + backward of sum(y * gy), at 2 threads. Prints the median of repeated runs in
milliseconds, in the example's format:

    n=64 c=6 hw=24 forward_ms=... forward_backward_ms=...

Run with the PyTorch venv: .venv-torch/bin/python tools/bench/pool_torch.py
"""

import statistics
import time

import torch
import torch.nn.functional as F

WARMUP = 3
REPS = 21


def main():
    torch.set_num_threads(2)
    torch.manual_seed(0)
    for n, c, hw in ((64, 6, 24), (64, 16, 8), (256, 6, 24), (256, 16, 8)):
        x = torch.randn(n, c, hw, hw, requires_grad=True)
        gy = torch.randn(n, c, hw // 2, hw // 2)
        fwd, total = [], []
        for rep in range(WARMUP + REPS):
            start = time.perf_counter()
            y = F.max_pool2d(x, 2)
            forwarded = time.perf_counter() - start
            (y * gy).sum().backward()
            done = time.perf_counter() - start
            x.grad = None
            if rep >= WARMUP:
                fwd.append(forwarded * 1e3)
                total.append(done * 1e3)
        print(f"n={n} c={c} hw={hw} forward_ms={statistics.median(fwd):.3f} forward_backward_ms={statistics.median(total):.3f}")


if __name__ == "__main__":
    main()
