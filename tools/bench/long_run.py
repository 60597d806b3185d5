#!/usr/bin/env python3
"""PyTorch's side of the long-run benchmark (tools/bench/long_run.sh).

The quick-start MLP (784-256-128-10, PyTorch's default init, cross-entropy) trained for
--steps steps on 2 threads; prints the samples/s of each window of --window steps and the
peak resident memory, in the format of ember's `long_run` example:

    python tools/bench/long_run.py [--steps 10000] [--window 1000] [--batch 64]
        [--data random|mnist] [--optim adam|sgd] [--threads 2] [--mnist-dir data/mnist]

--data random cycles in order through a pool of 8,192 inputs drawn from U[0, 1) with random
labels 0..9; --data mnist draws shuffled batches of the standardised MNIST training set
(a fresh randperm per epoch, as tools/bench/mlp_train.py does). Adam runs at lr 1e-3, SGD at
lr 0.01 without momentum.
"""
import argparse
import os
import resource
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mlp_train import MEAN, STD, find, idx  # noqa: E402

RANDOM_POOL = 8192


def random_feed(batch):
    x = torch.rand(RANDOM_POOL, 784)
    y = torch.randint(0, 10, (RANDOM_POOL,))
    start = 0
    while True:
        if start + batch > RANDOM_POOL:
            start = 0
        yield x[start : start + batch], y[start : start + batch]
        start += batch


def mnist_feed(directory, batch):
    images = idx(find(directory, "train-images-idx3-ubyte"))
    labels = idx(find(directory, "train-labels-idx1-ubyte"))
    x_all = (torch.from_numpy(images.reshape(len(images), -1).astype(np.float32)) / 255.0 - MEAN) / STD
    y_all = torch.from_numpy(labels.astype(np.int64))
    n = len(x_all)
    while True:
        perm = torch.randperm(n)
        for i in range(0, n, batch):
            sel = perm[i : i + batch]
            yield x_all[sel], y_all[sel]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=10_000)
    p.add_argument("--window", type=int, default=1000)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--data", choices=["random", "mnist"], default="random")
    p.add_argument("--optim", choices=["adam", "sgd"], default="adam")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--mnist-dir", default="data/mnist")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if min(args.steps, args.window, args.batch) <= 0 or args.batch > RANDOM_POOL:
        p.error(f"--steps, --window and --batch must be positive, --batch at most {RANDOM_POOL}")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    model = torch.nn.Sequential(
        torch.nn.Linear(784, 256), torch.nn.ReLU(),
        torch.nn.Linear(256, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 10),
    )
    if args.optim == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
    feed = random_feed(args.batch) if args.data == "random" else mnist_feed(args.mnist_dir, args.batch)

    print(f"# pytorch long_run data={args.data} optim={args.optim} batch={args.batch} "
          f"steps={args.steps} window={args.window} threads={args.threads}")
    print("# kind\tfirst_step\tlast_step\tsamples_per_s\tloss")
    started = time.perf_counter()
    first, before, t = 0, 0, time.perf_counter()
    samples = 0
    for step in range(args.steps):
        x, y = next(feed)
        samples += len(x)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        done = step + 1
        if done % args.window == 0 or done == args.steps:
            value = loss.item()
            rate = (samples - before) / (time.perf_counter() - t)
            print(f"window\t{first + 1}\t{done}\t{rate:.0f}\t{value:.4f}", flush=True)
            first, before, t = done, samples, time.perf_counter()
    secs = time.perf_counter() - started
    print(f"total\t{args.steps}\t{secs:.3f}\t{samples / secs:.0f}")
    # ru_maxrss is in KiB on Linux.
    print(f"peak_rss_bytes\t{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}")


if __name__ == "__main__":
    main()
