#!/usr/bin/env python3
"""Transformer encoder training speed in PyTorch, the counterpart of
`cargo run --release --example transformer_bench`: nn.TransformerEncoder of 4
nn.TransformerEncoderLayer(128, 4, dim_feedforward=512, dropout=0, batch_first=True) over
sequences of 64 on a batch of 32, the mean over the sequence, a Linear(128, 10) head,
cross-entropy, backward and an Adam step, at 2 threads. Prints the median step time and
the throughput in the example's format:

    transformer step_ms=... samples_per_s=...

Run with the PyTorch venv: .venv-torch/bin/python tools/bench/transformer_torch.py
"""

import statistics
import time

import torch

BATCH, SEQ, D_MODEL, HEADS, FF, LAYERS = 32, 64, 128, 4, 512, 4
WARMUP, REPS = 3, 15


def main():
    torch.set_num_threads(2)
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(D_MODEL, HEADS, FF, dropout=0.0, batch_first=True)
    encoder = torch.nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
    head = torch.nn.Linear(D_MODEL, 10)
    x = torch.randn(BATCH, SEQ, D_MODEL)
    y = torch.arange(BATCH) % 10
    adam = torch.optim.Adam(list(encoder.parameters()) + list(head.parameters()), lr=1e-4)
    times = []
    for rep in range(WARMUP + REPS):
        start = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(head(encoder(x).mean(1)), y)
        adam.zero_grad()
        loss.backward()
        adam.step()
        if rep >= WARMUP:
            times.append(time.perf_counter() - start)
    step = statistics.median(times)
    print(f"transformer step_ms={step * 1e3:.3f} samples_per_s={BATCH / step:.0f}")


if __name__ == "__main__":
    main()
