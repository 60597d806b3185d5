#!/usr/bin/env python3
"""PyTorch's side of the normalization parity tests: batch norm (layers over several
training steps, with momentum 0.1 and None, then evaluation; the functional form), group
norm, instance norm and RMS norm, their outputs, gradients and running statistics written to
tools/parity/fixtures/norm.json, which crates/nn/tests/parity_norm.rs rebuilds with ember
and compares.

Regenerate (from the repository root, with any Python that has torch; CI never runs this):

    .venv-torch/bin/python tools/parity/norm.py

The fixture format, the seeding (CRC-32 of each scenario's name) and the tensor encoding
are those of tools/parity/autograd.py, whose helpers this script reuses. Everything is
float64 unless the scenario name ends in `_f32`. Each scenario turns its results into a
scalar loss with fixed random weights (`r`), so that every gradient element differs.
"""

import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from autograd import Scenario, render, weights  # noqa: E402

OUT = os.path.join(HERE, "fixtures", "norm.json")

SCENARIOS = []


def scenario(about):
    def register(f):
        SCENARIOS.append((f.__name__, about, f))
        return f

    return register


def train_steps(s, layer, shape, steps=3):
    """`steps` training steps of `layer` (weight and bias loaded from params `w` and `b` when
    affine): each step's input `x{i}` is a param, its loss `sum(y * r{i})`; records each
    step's output and running statistics, the inputs' gradients and the accumulated weight and
    bias gradients; then one evaluation step on the const `xe`."""
    layer = layer.to(s.dtype)
    affine = getattr(layer, "weight", None) is not None
    if affine:
        w = s.param("w", s.randn(*layer.weight.shape))
        b = s.param("b", s.randn(*layer.bias.shape))
        with torch.no_grad():
            layer.weight.copy_(w)
            layer.bias.copy_(b)
    layer.train()
    xs = []
    for i in range(steps):
        x = s.param(f"x{i}", s.randn(*shape) * 2 + 0.5)
        y = layer(x)
        (y * weights(s, f"r{i}", tuple(y.shape))).sum().backward()
        s.output(f"y{i}", y)
        if layer.running_mean is not None:
            s.output(f"running_mean{i}", layer.running_mean)
            s.output(f"running_var{i}", layer.running_var)
        xs.append(x)
    for i, x in enumerate(xs):
        s.grad(f"x{i}", x.grad)
    if affine:
        s.grad("w", layer.weight.grad)
        s.grad("b", layer.bias.grad)
    if layer.running_mean is not None:
        s.output("num_batches_tracked", layer.num_batches_tracked.to(s.dtype))
    layer.eval()
    xe = s.const("xe", s.randn(*shape))
    s.output("ye", layer(xe))


@scenario("BatchNorm2d(3), momentum 0.1: 3 training steps on [4, 3, 3, 2], then eval")
def bn2d_momentum(s):
    train_steps(s, nn.BatchNorm2d(3), (4, 3, 3, 2))


@scenario("BatchNorm2d(3), momentum 0.1, float32")
def bn2d_momentum_f32(s):
    train_steps(s, nn.BatchNorm2d(3), (4, 3, 3, 2))


@scenario("BatchNorm1d(4, momentum=None) (cumulative average) on [5, 4, 3]: 3 steps, then eval")
def bn1d_cumulative(s):
    train_steps(s, nn.BatchNorm1d(4, momentum=None), (5, 4, 3))


@scenario("BatchNorm1d(3, affine=False) on [6, 3]: 3 steps, then eval")
def bn1d_rank2_no_affine(s):
    train_steps(s, nn.BatchNorm1d(3, affine=False), (6, 3))


@scenario("BatchNorm2d(2, track_running_stats=False): batch statistics in eval too")
def bn2d_untracked(s):
    train_steps(s, nn.BatchNorm2d(2, track_running_stats=False), (3, 2, 2, 2), steps=1)


@scenario("F.batch_norm in training (momentum 0.3) and eval on [3, 2, 4], with weight and bias")
def bn_functional(s):
    x = s.param("x", s.randn(3, 2, 4))
    w = s.param("w", s.randn(2))
    b = s.param("b", s.randn(2))
    rm = s.const("rm", s.randn(2))
    rv = s.const("rv", s.randn(2).abs() + 0.5)
    y = F.batch_norm(x, rm, rv, w, b, training=True, momentum=0.3, eps=1e-3)
    z = F.batch_norm(x, rm, rv, w, b, training=False, eps=1e-3)
    r = weights(s, "r", tuple(y.shape))
    q = weights(s, "q", tuple(z.shape))
    ((y * r).sum() + (z * q).sum()).backward()
    s.output("y", y)
    s.output("z", z)
    s.output("rm_after", rm)
    s.output("rv_after", rv)
    for k, t in (("x", x), ("w", w), ("b", b)):
        s.grad(k, t.grad)


@scenario("F.group_norm with 3 groups of [2, 6, 3, 2], affine; and 1 and 4 groups of [3, 4, 5] without")
def group_norm_mixed(s):
    x = s.param("x", s.randn(2, 6, 3, 2) * 3 + 1)
    w = s.param("w", s.randn(6))
    b = s.param("b", s.randn(6))
    u = s.param("u", s.randn(3, 4, 5))
    y = F.group_norm(x, 3, w, b, eps=1e-5)
    z1 = F.group_norm(u, 1, eps=1e-5)
    z4 = F.group_norm(u, 4, eps=1e-5)
    loss = (y * weights(s, "r", tuple(y.shape))).sum()
    loss = loss + (z1 * weights(s, "q1", tuple(z1.shape))).sum() + (z4 * weights(s, "q4", tuple(z4.shape))).sum()
    loss.backward()
    s.output("y", y)
    s.output("z1", z1)
    s.output("z4", z4)
    for k, t in (("x", x), ("w", w), ("b", b), ("u", u)):
        s.grad(k, t.grad)


@scenario("nn.GroupNorm(2, 4) in float32 on [3, 4, 2, 3]")
def group_norm_layer_f32(s):
    layer = nn.GroupNorm(2, 4).to(s.dtype)
    w = s.param("w", s.randn(4))
    b = s.param("b", s.randn(4))
    with torch.no_grad():
        layer.weight.copy_(w)
        layer.bias.copy_(b)
    x = s.param("x", s.randn(3, 4, 2, 3))
    y = layer(x)
    (y * weights(s, "r", tuple(y.shape))).sum().backward()
    s.output("y", y)
    s.grad("x", x.grad)
    s.grad("w", layer.weight.grad)
    s.grad("b", layer.bias.grad)


@scenario("InstanceNorm2d(3, affine=True, track_running_stats=True): 3 steps on [2, 3, 3, 4], then eval")
def instance_norm_tracked(s):
    train_steps(s, nn.InstanceNorm2d(3, affine=True, track_running_stats=True), (2, 3, 3, 4))


@scenario("InstanceNorm2d(2) defaults (no affine, no running stats) on [3, 2, 2, 3]")
def instance_norm_plain(s):
    train_steps(s, nn.InstanceNorm2d(2), (3, 2, 2, 3), steps=1)


@scenario("F.rms_norm over (4, 5) of [3, 4, 5] with a weight and eps None; over (5,) with eps 1e-3, no weight")
def rms_norm_mixed(s):
    x = s.param("x", s.randn(3, 4, 5))
    w = s.param("w", s.randn(4, 5))
    y = F.rms_norm(x, (4, 5), w)
    z = F.rms_norm(x, (5,), eps=1e-3)
    ((y * weights(s, "r", tuple(y.shape))).sum() + (z * weights(s, "q", tuple(z.shape))).sum()).backward()
    s.output("y", y)
    s.output("z", z)
    s.grad("x", x.grad)
    s.grad("w", w.grad)


@scenario("nn.RMSNorm([6]) in float32 on [4, 6] (eps None: float32's machine epsilon)")
def rms_norm_layer_f32(s):
    layer = nn.RMSNorm([6]).to(s.dtype)
    w = s.param("w", s.randn(6))
    with torch.no_grad():
        layer.weight.copy_(w)
    x = s.param("x", s.randn(4, 6) * 1e-3)
    y = layer(x)
    (y * weights(s, "r", tuple(y.shape))).sum().backward()
    s.output("y", y)
    s.grad("x", x.grad)
    s.grad("w", layer.weight.grad)


def main():
    torch.set_num_threads(1)
    out = []
    for name, about, f in SCENARIOS:
        s = Scenario(name, about)
        f(s)
        out.append(s.to_json())
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as fh:
        fh.write(render({"generator": "tools/parity/norm.py", "torch": torch.__version__, "scenarios": out}))
    print(f"wrote {len(out)} scenarios to {os.path.relpath(OUT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
