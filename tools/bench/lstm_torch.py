#!/usr/bin/env python3
"""LSTM training speed in PyTorch, the counterpart of
`cargo run --release -p ember-nn --example lstm_bench`: nn.LSTM(28, 128, batch_first=True)
over 28 steps on a batch of 64, a Linear(128, 10) head on the last hidden state,
cross-entropy, backward and a plain SGD update (gradients set to None), at 2 threads.
Prints the median step time and the throughput in the example's format:

    lstm step_ms=... samples_per_s=...

Run with the PyTorch venv: .venv-torch/bin/python tools/bench/lstm_torch.py
[--hidden H] [--batch B] [--reps R]: the options of ember's example, with the same defaults.
"""

import argparse
import statistics
import time

import torch

STEPS, INPUT = 28, 28
WARMUP = 3


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--reps", type=int, default=20)
    args = p.parse_args()
    batch, hidden = args.batch, args.hidden
    torch.set_num_threads(2)
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(INPUT, hidden, batch_first=True)
    head = torch.nn.Linear(hidden, 10)
    x = torch.randn(batch, STEPS, INPUT)
    y = torch.arange(batch) % 10
    params = list(lstm.parameters()) + list(head.parameters())
    times = []
    for rep in range(WARMUP + max(1, args.reps)):
        start = time.perf_counter()
        _, (h_n, _) = lstm(x)
        loss = torch.nn.functional.cross_entropy(head(h_n[0]), y)
        loss.backward()
        with torch.no_grad():
            for p in params:
                p.add_(p.grad, alpha=-0.01)
                p.grad = None
        if rep >= WARMUP:
            times.append(time.perf_counter() - start)
    step = statistics.median(times)
    print(f"lstm step_ms={step * 1e3:.3f} samples_per_s={batch / step:.0f}")


if __name__ == "__main__":
    main()
