#!/usr/bin/env python3
"""PyTorch's side of the mixed-precision benchmark (tools/bench/amp_compare.sh): a training
step with the forward pass and the loss under `torch.autocast("cpu", dtype=torch.bfloat16)`
(parameters and Adam in float32, no loss scaling), at 2 threads.

    python tools/bench/amp_torch.py lenet [--batch 64] [--epochs 1] [--amp bf16|f16|none]
    python tools/bench/amp_torch.py transformer [--amp bf16|f16|none]

`lenet` trains LeNet-5 on the standardised MNIST training set as tools/bench/mlp_train.py
does (one warm-up epoch, the median samples/s over the timed epochs) and prints
`pytorch-<amp>  batch  samples_per_s`, the format of ember's `train_bench --amp`.
`transformer` times tools/bench/transformer_torch.py's step (4 encoder layers, d_model 128,
sequences of 64, batch 32) and prints `transformer step_ms=... samples_per_s=...`, the
format of ember's `transformer_bench --amp`.
"""
import argparse
import contextlib
import os
import statistics
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mlp_train  # noqa: E402
import transformer_torch as tt  # noqa: E402

# transformer_torch.py's default shape (its command-line defaults, which ember's
# `transformer_bench --amp` trains): 4 layers of d_model 128, 4 heads, feed-forward 512,
# sequences of 64 in batches of 32, 15 timed steps.
D_MODEL, HEADS, FF, LAYERS, SEQ, BATCH, REPS = 128, 4, 512, 4, 64, 32, 15

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}


def region(amp):
    """The autocast region of `amp`, or no region for `none`."""
    if amp == "none":
        return contextlib.nullcontext()
    return torch.autocast("cpu", dtype=DTYPES[amp])


def lenet(args):
    images = mlp_train.idx(mlp_train.find(args.data, "train-images-idx3-ubyte"))
    labels = mlp_train.idx(mlp_train.find(args.data, "train-labels-idx1-ubyte"))
    x_all = (torch.from_numpy(images.reshape(len(images), -1).astype(np.float32)) / 255.0 - mlp_train.MEAN) / mlp_train.STD
    y_all = torch.from_numpy(labels.astype(np.int64))
    n = len(x_all)
    model = mlp_train.build("lenet")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    rates = []
    for epoch in range(args.epochs + 1):
        t = time.perf_counter()
        perm = torch.randperm(n)
        for i in range(0, n, args.batch):
            sel = perm[i : i + args.batch]
            x, y = x_all[sel], y_all[sel]
            with region(args.amp):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        if epoch > 0:
            rates.append(n / (time.perf_counter() - t))
    print(f"pytorch-{args.amp}\t{args.batch}\t{statistics.median(rates):.0f}")


def transformer(args):
    layer = torch.nn.TransformerEncoderLayer(D_MODEL, HEADS, FF, dropout=0.0, batch_first=True)
    encoder = torch.nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
    head = torch.nn.Linear(D_MODEL, 10)
    x = torch.randn(BATCH, SEQ, D_MODEL)
    y = torch.arange(BATCH) % 10
    adam = torch.optim.Adam(list(encoder.parameters()) + list(head.parameters()), lr=1e-4)
    times = []
    for rep in range(tt.WARMUP + REPS):
        start = time.perf_counter()
        with region(args.amp):
            loss = torch.nn.functional.cross_entropy(head(encoder(x).mean(1)), y)
        adam.zero_grad()
        loss.backward()
        adam.step()
        if rep >= tt.WARMUP:
            times.append(time.perf_counter() - start)
    step = statistics.median(times)
    print(f"transformer step_ms={step * 1e3:.3f} samples_per_s={BATCH / step:.0f}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workload", choices=["lenet", "transformer"])
    p.add_argument("--amp", default="bf16", choices=["bf16", "f16", "none"])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--data", default="data/mnist")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    {"lenet": lenet, "transformer": transformer}[args.workload](args)


if __name__ == "__main__":
    main()
