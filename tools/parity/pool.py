#!/usr/bin/env python3
"""PyTorch's side of the pooling parity tests: max, average and adaptive pooling,
interpolation and the pooling layers in PyTorch, their outputs, argmax indices and gradients
written to tools/parity/fixtures/pool.json, which crates/nn/tests/parity_pool.rs rebuilds
with ember (functional forms and layers) and compares.

Regenerate (from the repository root, with any Python that has torch; CI never runs this):

    .venv-torch/bin/python tools/parity/pool.py

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

OUT = os.path.join(HERE, "fixtures", "pool.json")

SCENARIOS = []


def scenario(about):
    def register(f):
        SCENARIOS.append((f.__name__, about, f))
        return f

    return register


def weighted(s, key, y):
    """sum(y * r_key) with a fixed random r_key; records y as output `key`."""
    s.output(key, y)
    return (y * weights(s, "r_" + key, tuple(y.shape))).sum()


def max_pool2d_basic_impl(s):
    x = s.param("x", s.randn(2, 3, 6, 6))
    y, i = F.max_pool2d(x, 2, return_indices=True)
    s.output("i", i)
    weighted(s, "y", y).backward()
    s.grad("x", x.grad)


@scenario("max_pool2d 2x2 (stride 2) with indices")
def max_pool2d_basic(s):
    max_pool2d_basic_impl(s)


@scenario("the 2x2 max pool in float32")
def max_pool2d_basic_f32(s):
    max_pool2d_basic_impl(s)


@scenario("max_pool2d 3x3, stride 2, padding 1, ceil_mode, float32")
def max_pool2d_ceil_padded_f32(s):
    x = s.param("x", s.randn(2, 2, 7, 8))
    y, i = F.max_pool2d(x, 3, stride=2, padding=1, ceil_mode=True, return_indices=True)
    s.output("i", i)
    weighted(s, "y", y).backward()
    s.grad("x", x.grad)


@scenario("max_pool2d with a (2, 3) kernel, stride (2, 1), padding 1, dilation (3, 2), ceil_mode; unbatched too")
def max_pool2d_dilated(s):
    x = s.param("x", s.randn(1, 2, 9, 8))
    u = s.param("u", s.randn(2, 5, 5))
    y, i = F.max_pool2d(x, (2, 3), stride=(2, 1), padding=1, dilation=(3, 2), ceil_mode=True, return_indices=True)
    z = F.max_pool2d(u, 2, stride=1)
    s.output("i", i)
    (weighted(s, "y", y) + weighted(s, "z", z)).backward()
    s.grad("x", x.grad)
    s.grad("u", u.grad)


@scenario("max_pool1d kernel 3, stride 2, padding 1, dilation 2, ceil_mode; unbatched kernel 2")
def max_pool1d_mixed(s):
    x = s.param("x", s.randn(2, 3, 11))
    u = s.param("u", s.randn(3, 8))
    y, i = F.max_pool1d(x, 3, stride=2, padding=1, dilation=2, ceil_mode=True, return_indices=True)
    z = F.max_pool1d(u, 2)
    s.output("i", i)
    (weighted(s, "y", y) + weighted(s, "z", z)).backward()
    s.grad("x", x.grad)
    s.grad("u", u.grad)


@scenario("avg_pool2d 3x3 stride 2 padding 1 ceil_mode, padding counted and not; divisor_override 5")
def avg_pool2d_mixed(s):
    x = s.param("x", s.randn(2, 2, 7, 6))
    a = F.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True)
    b = F.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)
    c = F.avg_pool2d(x, (2, 3), stride=1, divisor_override=5)
    (weighted(s, "a", a) + weighted(s, "b", b) + weighted(s, "c", c)).backward()
    s.grad("x", x.grad)


@scenario("avg_pool2d 2x2 in float32")
def avg_pool2d_f32(s):
    x = s.param("x", s.randn(2, 3, 6, 6))
    weighted(s, "y", F.avg_pool2d(x, 2)).backward()
    s.grad("x", x.grad)


@scenario("avg_pool1d kernel 3, stride 2, padding 1, ceil_mode, padding not counted; unbatched")
def avg_pool1d_mixed(s):
    x = s.param("x", s.randn(2, 3, 9))
    u = s.param("u", s.randn(3, 6))
    y = F.avg_pool1d(x, 3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)
    z = F.avg_pool1d(u, 2)
    (weighted(s, "y", y) + weighted(s, "z", z)).backward()
    s.grad("x", x.grad)
    s.grad("u", u.grad)


@scenario("adaptive_avg_pool2d to (3, 4) from 7x5 and to (2, 2) unbatched; adaptive_avg_pool1d 10 -> 4")
def adaptive_avg_pool_mixed(s):
    x = s.param("x", s.randn(2, 3, 7, 5))
    u = s.param("u", s.randn(3, 5, 5))
    v = s.param("v", s.randn(2, 3, 10))
    a = F.adaptive_avg_pool2d(x, (3, 4))
    b = F.adaptive_avg_pool2d(u, 2)
    c = F.adaptive_avg_pool1d(v, 4)
    (weighted(s, "a", a) + weighted(s, "b", b) + weighted(s, "c", c)).backward()
    for k, t in (("x", x), ("u", u), ("v", v)):
        s.grad(k, t.grad)


@scenario("adaptive_max_pool2d to (3, 2) from 7x5, with indices")
def adaptive_max_pool2d_indices(s):
    x = s.param("x", s.randn(2, 2, 7, 5))
    y, i = F.adaptive_max_pool2d(x, (3, 2), return_indices=True)
    s.output("i", i)
    weighted(s, "y", y).backward()
    s.grad("x", x.grad)


@scenario("nearest: scale 2, size (5, 7), scale (0.7, 0.5), 1-d scale 1.5 and recomputed scale 1.5")
def interpolate_nearest(s):
    x = s.param("x", s.randn(1, 2, 3, 4))
    u = s.param("u", s.randn(1, 2, 5, 6))
    v = s.param("v", s.randn(2, 1, 5))
    a = F.interpolate(x, scale_factor=2)
    b = F.interpolate(x, size=(5, 7))
    c = F.interpolate(u, scale_factor=(0.7, 0.5))
    d = F.interpolate(v, scale_factor=1.5)
    e = F.interpolate(v, scale_factor=1.5, recompute_scale_factor=True)
    loss = sum(weighted(s, k, t) for k, t in (("a", a), ("b", b), ("c", c), ("d", d), ("e", e)))
    loss.backward()
    for k, t in (("x", x), ("u", u), ("v", v)):
        s.grad(k, t.grad)


def interpolate_linear_impl(s):
    x = s.param("x", s.randn(2, 2, 3, 4))
    u = s.param("u", s.randn(1, 1, 6, 5))
    v = s.param("v", s.randn(2, 1, 5))
    a = F.interpolate(x, size=(5, 7), mode="bilinear", align_corners=True)
    b = F.interpolate(x, size=(5, 7), mode="bilinear", align_corners=False)
    c = F.interpolate(u, scale_factor=0.6, mode="bilinear")
    d = F.interpolate(x, scale_factor=1.7, mode="bilinear", recompute_scale_factor=True)
    e = F.interpolate(v, scale_factor=2.5, mode="linear")
    f = F.interpolate(v, size=3, mode="linear", align_corners=True)
    parts = (("a", a), ("b", b), ("c", c), ("d", d), ("e", e), ("f", f))
    sum(weighted(s, k, t) for k, t in parts).backward()
    for k, t in (("x", x), ("u", u), ("v", v)):
        s.grad(k, t.grad)


@scenario("bilinear to (5, 7) with and without align_corners, scale 0.6, recomputed scale 1.7; linear 1-d")
def interpolate_linear(s):
    interpolate_linear_impl(s)


@scenario("the linear interpolations in float32")
def interpolate_linear_f32(s):
    interpolate_linear_impl(s)


@scenario("layers: MaxPool2d(2) -> Upsample(scale 2, bilinear) -> AvgPool2d(3, 2, 1) -> AdaptiveAvgPool2d((2, 3)), float32")
def pool_layers_f32(s):
    x = s.param("x", s.randn(2, 3, 8, 8))
    model = nn.Sequential(
        nn.MaxPool2d(2),
        nn.Upsample(scale_factor=2, mode="bilinear"),
        nn.AvgPool2d(3, 2, 1),
        nn.AdaptiveAvgPool2d((2, 3)),
        nn.Flatten(),
        nn.Unflatten(1, (3, 6)),
    )
    weighted(s, "y", model(x)).backward()
    s.grad("x", x.grad)


@scenario("double backward: g = d/dx sum(avg_pool(max_pool(tanh(x))) * r), loss = sum(g^2), backward to x")
def pool_double_backward(s):
    x = s.param("x", s.randn(2, 2, 6, 6))
    y = F.avg_pool2d(F.max_pool2d(torch.tanh(x), 2, stride=1), 2, padding=1)
    r = weights(s, "r", tuple(y.shape))
    (g,) = torch.autograd.grad((y * r).sum(), x, create_graph=True)
    loss = (g * g).sum()
    loss.backward()
    s.output("loss", loss)
    s.grad("x", x.grad)


def main():
    torch.set_num_threads(1)
    out = []
    for name, about, f in SCENARIOS:
        s = Scenario(name, about)
        f(s)
        out.append(s.to_json())
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as fh:
        fh.write(render({"generator": "tools/parity/pool.py", "torch": torch.__version__, "scenarios": out}))
    print(f"wrote {len(out)} scenarios to {os.path.relpath(OUT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
