#!/usr/bin/env python3
"""Per-op autograd overhead in PyTorch, the counterpart of
`cargo run --release -p ember-autograd --example overhead`.

1000 chained `y = y * 1.0001 + 0.0001` (2000 ops) on a 1-element and a 64-element tensor
that requires grad: the recorded forward, the backward, the forward under no_grad, and
freeing the graph after backward (teardown: deleting the last reference), in microseconds
per op (median of repeated runs), printed in the same format as ember's example:

    numel=1 forward_recorded_us=... backward_us=... forward_no_grad_us=... teardown_us=...

Run with the PyTorch venv: .venv-torch/bin/python tools/bench/autograd_torch.py
"""

import statistics
import time

import torch

STEPS = 1000
OPS = 2 * STEPS
REPS = 41


def chain(x):
    y = x
    for _ in range(STEPS):
        y = y * 1.0001 + 0.0001
    return y


def main():
    torch.set_num_threads(2)
    for n in (1, 64):
        x = torch.ones(n, requires_grad=True)
        fwd, bwd, ng, down = [], [], [], []
        for _ in range(REPS):
            t = time.perf_counter()
            y = chain(x).sum()
            fwd.append(time.perf_counter() - t)
            t = time.perf_counter()
            y.backward()
            bwd.append(time.perf_counter() - t)
            x.grad = None
            t = time.perf_counter()
            del y
            down.append(time.perf_counter() - t)
            t = time.perf_counter()
            with torch.no_grad():
                z = chain(x)
            ng.append(time.perf_counter() - t)
            del z

        def us(v):
            return statistics.median(v) / OPS * 1e6

        print(
            f"numel={n} forward_recorded_us={us(fwd):.4f} backward_us={us(bwd):.4f} "
            f"forward_no_grad_us={us(ng):.4f} teardown_us={us(down):.4f}"
        )


if __name__ == "__main__":
    main()
