#!/usr/bin/env python3
"""LSTM training speed in PyTorch, the counterpart of
`cargo run --release -p ember-nn --example lstm_bench`: nn.LSTM(28, 128, batch_first=True)
over 28 steps on a batch of 64, a Linear(128, 10) head on the last hidden state,
cross-entropy, backward and a plain SGD update (gradients set to None), at 2 threads.
Prints the median step time and the throughput in the example's format:

    lstm step_ms=... samples_per_s=...

Run with the PyTorch venv: .venv-torch/bin/python tools/bench/lstm_torch.py
"""

import statistics
import time

import torch

BATCH, STEPS, INPUT, HIDDEN = 64, 28, 28, 128
WARMUP, REPS = 3, 20


def main():
    torch.set_num_threads(2)
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(INPUT, HIDDEN, batch_first=True)
    head = torch.nn.Linear(HIDDEN, 10)
    x = torch.randn(BATCH, STEPS, INPUT)
    y = torch.arange(BATCH) % 10
    params = list(lstm.parameters()) + list(head.parameters())
    times = []
    for rep in range(WARMUP + REPS):
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
    print(f"lstm step_ms={step * 1e3:.3f} samples_per_s={BATCH / step:.0f}")


if __name__ == "__main__":
    main()
