#!/usr/bin/env python3
"""PyTorch's side of crates/nn/examples/batch_norm_bench.rs: BatchNorm2d training forward and
forward + backward at 2 threads, the median of repeated runs in milliseconds, one line per
shape. Run with any Python that has torch."""

import time

import torch

torch.set_num_threads(2)
torch.manual_seed(0)
for shape in [(64, 6, 24, 24), (8, 64, 56, 56)]:
    bn = torch.nn.BatchNorm2d(shape[1])
    x = torch.randn(*shape, requires_grad=True)
    gy = torch.randn(*shape)
    fwd, tot = [], []
    for rep in range(3 + 21):
        t0 = time.perf_counter()
        y = bn(x)
        t1 = time.perf_counter()
        y.backward(gy)
        t2 = time.perf_counter()
        x.grad = None
        bn.zero_grad()
        if rep >= 3:
            fwd.append((t1 - t0) * 1e3)
            tot.append((t2 - t0) * 1e3)
    fwd.sort()
    tot.sort()
    print(f"shape={list(shape)} forward_ms={fwd[len(fwd) // 2]:.3f} forward_backward_ms={tot[len(tot) // 2]:.3f}")
