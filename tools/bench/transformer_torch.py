#!/usr/bin/env python3
"""Transformer encoder training speed in PyTorch, the counterpart of
`cargo run --release --example transformer_bench`: nn.TransformerEncoder of 4
nn.TransformerEncoderLayer(128, 4, dim_feedforward=512, dropout=0, batch_first=True) over
sequences of 64 on a batch of 32, the mean over the sequence, a Linear(128, 10) head,
cross-entropy, backward and an Adam step, at 2 threads. Prints the median step time and
the throughput in the example's format:

    transformer step_ms=... samples_per_s=...

Run with the PyTorch venv: .venv-torch/bin/python tools/bench/transformer_torch.py
[--d-model D] [--seq L] [--batch B] [--layers N] [--reps R]: the options of ember's
example, with the same defaults (heads D / 32, feed-forward 4 D).
"""

import argparse
import statistics
import time

import torch

WARMUP = 3


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--reps", type=int, default=15)
    args = p.parse_args()
    batch, seq, d_model, layers = args.batch, args.seq, args.d_model, args.layers
    heads, ff = max(1, d_model // 32), 4 * d_model
    torch.set_num_threads(2)
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model, heads, ff, dropout=0.0, batch_first=True)
    encoder = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
    head = torch.nn.Linear(d_model, 10)
    x = torch.randn(batch, seq, d_model)
    y = torch.arange(batch) % 10
    adam = torch.optim.Adam(list(encoder.parameters()) + list(head.parameters()), lr=1e-4)
    times = []
    for rep in range(WARMUP + max(1, args.reps)):
        start = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(head(encoder(x).mean(1)), y)
        adam.zero_grad()
        loss.backward()
        adam.step()
        if rep >= WARMUP:
            times.append(time.perf_counter() - start)
    step = statistics.median(times)
    print(f"transformer step_ms={step * 1e3:.3f} samples_per_s={batch / step:.0f}")


if __name__ == "__main__":
    main()
