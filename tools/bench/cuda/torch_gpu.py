#!/usr/bin/env python3
"""PyTorch's side of the GPU benchmarks: the measurements of ember's `cuda_bench`
example, on the same GPU, printed as JSON with the same keys.

    python3 tools/bench/cuda/torch_gpu.py [--out torch_gpu.json] [--device cuda]
        [--sizes 1024,2048,4096,8192] [--mlp-steps 500] [--cnn-steps 300] [--warmup 50]
        [--data data/mnist]

1. matmul_tflops: square f32 products with TF32 off (PyTorch's default for matmul), a
   batch of products timed with CUDA events, the median batch of 10 after 3 warm-up
   batches, as TFLOP/s (2 n^3 per product).
2. add_us_per_call: `a + b` called many times in a row on 1-element and on 1M-element
   tensors, one synchronize at the end: the time per call.
3. mnist_mlp / mnist_cnn: training throughput of ember's `mnist` and `mnist_cnn` examples
   done the same way: the same models (PyTorch's default initialisation), Adam at lr 1e-3
   with cosine annealing over 3 epochs, batches of 64 drawn by a shuffled permutation from
   the standardised training images held on the host, each batch copied to the device,
   the loss read back with `.item()` every step; samples/s over the timed steps after
   the warm-up steps.
4. peak_memory_bytes: torch.cuda.max_memory_allocated() over the training runs.

`--device cpu` runs the same program on the CPU (to try it without a GPU).
"""

import argparse
import gzip
import json
import math
import os
import statistics
import struct
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

MEAN, STD = 0.1307, 0.3081
BATCH = 64
EPOCHS = 3


def matmul_batch(n):
    """Products per timed batch (the same table as cuda_bench.rs)."""
    if n <= 1024:
        return 20
    if n <= 2048:
        return 10
    if n <= 4096:
        return 3
    return 1


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def matmul_tflops(dev, n):
    a = torch.randn(n, n, device=dev)
    b = torch.randn(n, n, device=dev)
    batch = matmul_batch(n)
    times = []
    for rep in range(13):
        if dev.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(batch):
                torch.matmul(a, b)
            end.record()
            end.synchronize()
            secs = start.elapsed_time(end) / 1e3
        else:
            t0 = time.perf_counter()
            for _ in range(batch):
                torch.matmul(a, b)
            secs = time.perf_counter() - t0
        if rep >= 3:
            times.append(secs / batch)
    return 2.0 * n**3 / statistics.median(times) / 1e12


def add_us_per_call(dev, numel, calls):
    a = torch.randn(numel, device=dev)
    b = torch.randn(numel, device=dev)
    for _ in range(min(calls, 100)):
        a + b
    sync(dev)
    t0 = time.perf_counter()
    for _ in range(calls):
        a + b
    sync(dev)
    return (time.perf_counter() - t0) / calls * 1e6


def read_idx(path):
    """An IDX file (gzip-compressed) as a uint8 tensor of its shape."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    zero, dtype, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    dims = struct.unpack(">" + "I" * ndim, data[4 : 4 + 4 * ndim])
    body = bytearray(data[4 + 4 * ndim :])
    return torch.frombuffer(body, dtype=torch.uint8).reshape(dims)


def load_mnist(data_dir):
    """The training split as ember's mnist::load gives it: [N, 784] f32 standardised, i64."""
    images = read_idx(os.path.join(data_dir, "train-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(data_dir, "train-labels-idx1-ubyte.gz"))
    x = (images.reshape(images.shape[0], 784).to(torch.float32) / 255.0 - MEAN) / STD
    return x, labels.to(torch.int64)


def mlp():
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))


def cnn():
    return nn.Sequential(
        nn.Unflatten(1, (1, 28, 28)),
        nn.Conv2d(1, 16, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 7 * 7, 128),
        nn.ReLU(),
        nn.Linear(128, 10),
    )


def train(dev, images, labels, build, warmup, steps, seed):
    model = build().to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    n = labels.shape[0]
    steps_per_epoch = math.ceil(n / BATCH)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=EPOCHS * steps_per_epoch, eta_min=0.0)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    done, last_loss = 0, float("nan")
    start = time.perf_counter()
    while done < warmup + steps:
        perm = torch.randperm(n, generator=gen)
        for i in range(0, n, BATCH):
            idx = perm[i : i + BATCH]
            x, y = images[idx], labels[idx]
            if done == warmup:
                sync(dev)
                start = time.perf_counter()
            logits = model(x.to(dev))
            loss = F.cross_entropy(logits, y.to(dev))
            opt.zero_grad()
            loss.backward()
            opt.step()
            last_loss = loss.item()
            sched.step()
            done += 1
            if done == warmup + steps:
                break
    sync(dev)
    secs = time.perf_counter() - start
    return {"samples_per_s": steps * BATCH / secs, "steps": steps, "batch_size": BATCH, "last_loss": last_loss}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--sizes", default="1024,2048,4096,8192")
    p.add_argument("--mlp-steps", type=int, default=500)
    p.add_argument("--cnn-steps", type=int, default=300)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--add-calls", type=int, default=10_000)
    p.add_argument("--data", default="data/mnist")
    p.add_argument("--out")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        sys.exit("torch_gpu.py: CUDA is not available to PyTorch")
    # PyTorch's defaults, set so that a changed default cannot skew the comparison: FP32
    # matmuls (no TF32), while cuDNN may use TF32 for convolutions (recorded in the JSON).
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(args.seed)
    gpu = torch.cuda.get_device_name(dev) if dev.type == "cuda" else None
    print(f"torch_gpu: PyTorch {torch.__version__} on {dev} ({gpu})", file=sys.stderr)

    out = {
        "framework": "pytorch",
        "version": torch.__version__,
        "device": str(dev),
        "gpu": gpu,
        "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "matmul_tflops": {},
        "add_us_per_call": {},
    }

    def save():
        # Rewritten after every measurement, so that a run cut short keeps what it took.
        if args.out:
            with open(args.out, "w") as f:
                f.write(json.dumps(out, indent=2) + "\n")

    def measured(what, fn):
        try:
            return fn()
        except Exception as e:  # one failing workload must not cost the others their numbers
            print(f"  {what}: FAILED: {e!r}", file=sys.stderr)
            return None

    for n in [int(s) for s in args.sizes.split(",") if s]:
        t = measured(f"matmul {n}", lambda: matmul_tflops(dev, n))
        out["matmul_tflops"][str(n)] = t
        if t is not None:
            print(f"  matmul {n}x{n} f32: {t:.2f} TFLOP/s", file=sys.stderr)
        save()
    for numel, calls in [(1, args.add_calls), (1 << 20, max(args.add_calls // 10, 1))]:
        us = measured(f"add of {numel}", lambda: add_us_per_call(dev, numel, calls))
        out["add_us_per_call"][str(numel)] = us
        if us is not None:
            print(f"  add of {numel} elements: {us:.2f} us per call ({calls} calls)", file=sys.stderr)
        save()

    images, labels = load_mnist(args.data)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    for key, build, steps in [("mnist_mlp", mlp, args.mlp_steps), ("mnist_cnn", cnn, args.cnn_steps)]:
        r = measured(key, lambda: train(dev, images, labels, build, args.warmup, steps, args.seed))
        out[key] = r
        if r is not None:
            print(f"  {key}: {r['samples_per_s']:.0f} samples/s, loss {r['last_loss']:.4f}", file=sys.stderr)
        save()
    out["peak_memory_bytes"] = torch.cuda.max_memory_allocated(dev) if dev.type == "cuda" else None
    save()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
