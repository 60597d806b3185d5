#!/usr/bin/env python3
"""Convolution layer speed in PyTorch, the counterpart of
`cargo run --release -p ember-nn --example conv_bench`: a Conv2d(c, c, 3, padding=1) with
bias on a batch of 8 that requires grad, forward and forward + backward (input, weight and
bias gradients, set to None after each step), at 2 threads, for c=64 on 56x56 and c=128 on
28x28. Prints the median of repeated runs in milliseconds, in the example's format:

    c=64 hw=56 forward_ms=... forward_backward_ms=...

Run with the PyTorch venv: .venv-torch/bin/python tools/bench/conv_torch.py
"""

import statistics
import time

import torch

BATCH = 8
WARMUP = 2
REPS = 9
SHAPES = ((64, 56), (128, 28))


def main():
    torch.set_num_threads(2)
    torch.manual_seed(0)
    for c, hw in SHAPES:
        conv = torch.nn.Conv2d(c, c, 3, padding=1)
        x = torch.randn(BATCH, c, hw, hw, requires_grad=True)
        gy = torch.randn(BATCH, c, hw, hw)
        forward, total = [], []
        for rep in range(WARMUP + REPS):
            start = time.perf_counter()
            y = conv(x)
            forwarded = time.perf_counter() - start
            y.backward(gy)
            done = time.perf_counter() - start
            x.grad = None
            conv.zero_grad(set_to_none=True)
            del y
            if rep >= WARMUP:
                forward.append(forwarded)
                total.append(done)
        print(
            f"c={c} hw={hw} forward_ms={statistics.median(forward) * 1e3:.3f} "
            f"forward_backward_ms={statistics.median(total) * 1e3:.3f}"
        )


if __name__ == "__main__":
    main()
