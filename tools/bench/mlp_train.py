#!/usr/bin/env python3
"""PyTorch's side of the MNIST training benchmark (tools/bench/mlp_train.sh).

The MNIST quick-start MLP (784-256-128-10), LeNet-5 or the CNN quick start's model (`--model`,
as in ember's `train_bench`), with Adam 1e-3 and cross-entropy, trained on the
standardised MNIST training set held in memory, with a fresh random permutation per epoch,
on 2 threads; prints one line per batch size with the median samples/s over the timed epochs
(one warm-up epoch first), in the format of ember's `train_bench` example:

    python tools/bench/mlp_train.py [--model mlp|lenet|cnn] [--batch 64 --batch 256] [--epochs 3]
"""
import argparse
import gzip
import os
import statistics
import time

import numpy as np
import torch

# The same standardisation constants as ember::mnist (the training set's mean and std).
MEAN, STD = 0.1307, 0.3081


def idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def find(directory, stem):
    for name in (stem, stem + ".gz"):
        p = os.path.join(directory, name)
        if os.path.exists(p):
            return p
    raise FileNotFoundError(f"{stem}[.gz] not in {directory}")


def build(name):
    nn = torch.nn
    if name == "mlp":
        return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
    if name == "lenet":
        return nn.Sequential(
            nn.Unflatten(1, (1, 28, 28)),
            nn.Conv2d(1, 6, 5), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(256, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10),
        )
    if name == "cnn":
        return nn.Sequential(
            nn.Unflatten(1, (1, 28, 28)),
            nn.Conv2d(1, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(32 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10),
        )
    raise ValueError(f"unknown model {name}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, action="append")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--data", default="data/mnist")
    p.add_argument("--model", default="mlp", choices=["mlp", "lenet", "cnn"])
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    images = idx(find(args.data, "train-images-idx3-ubyte"))
    labels = idx(find(args.data, "train-labels-idx1-ubyte"))
    x_all = (torch.from_numpy(images.reshape(len(images), -1).astype(np.float32)) / 255.0 - MEAN) / STD
    y_all = torch.from_numpy(labels.astype(np.int64))
    n = len(x_all)

    print("# mode\tbatch\tsamples_per_s")
    for batch in args.batch or [64, 256]:
        model = build(args.model)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        rates = []
        for epoch in range(args.epochs + 1):
            t = time.perf_counter()
            perm = torch.randperm(n)
            for i in range(0, n, batch):
                sel = perm[i : i + batch]
                x, y = x_all[sel], y_all[sel]
                loss = torch.nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
            if epoch > 0:
                rates.append(n / (time.perf_counter() - t))
        print(f"pytorch\t{batch}\t{statistics.median(rates):.0f}")


if __name__ == "__main__":
    main()
