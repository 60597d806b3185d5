#!/usr/bin/env python3
"""PyTorch's side of the convolution parity tests: convolutions, transposed convolutions,
unfold and fold in PyTorch, their outputs and gradients written to
tools/parity/fixtures/conv.json, which crates/nn/tests/parity_conv.rs rebuilds with ember
(functional forms and layers) and compares.

Regenerate (from the repository root, with any Python that has torch; CI never runs this):

    .venv-torch/bin/python tools/parity/conv.py

The fixture format, the seeding (CRC-32 of each scenario's name) and the tensor encoding
are those of tools/parity/autograd.py, whose helpers this script reuses. Everything is
float64 unless the scenario name ends in `_f32`. Each scenario turns its results into a
scalar loss with fixed random weights (`r`), so that every gradient element differs.
"""

import os
import sys
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from autograd import Scenario, render, weights  # noqa: E402

OUT = os.path.join(HERE, "fixtures", "conv.json")

SCENARIOS = []


def scenario(about):
    def register(f):
        SCENARIOS.append((f.__name__, about, f))
        return f

    return register


def backward_weighted(s, y, leaves):
    """loss = sum(y * r) with a fixed random r; records y and every leaf's gradient."""
    r = weights(s, "r", tuple(y.shape))
    (y * r).sum().backward()
    s.output("y", y)
    for k, v in leaves:
        s.grad(k, v.grad)


def conv2d_basic_impl(s):
    x = s.param("x", s.randn(2, 3, 6, 5))
    w = s.param("w", s.randn(4, 3, 3, 3))
    b = s.param("b", s.randn(4))
    y = F.conv2d(x, w, b, padding=1)
    backward_weighted(s, y, (("x", x), ("w", w), ("b", b)))


@scenario("conv2d 3 -> 4 channels, 3x3 kernel, padding 1, with bias")
def conv2d_basic(s):
    conv2d_basic_impl(s)


@scenario("the basic conv2d in float32")
def conv2d_basic_f32(s):
    conv2d_basic_impl(s)


@scenario("conv2d with stride (2, 1), padding (1, 2), dilation (2, 1), 2 groups, a 3x2 kernel")
def conv2d_strided_dilated_grouped(s):
    x = s.param("x", s.randn(2, 4, 9, 8))
    w = s.param("w", s.randn(6, 2, 3, 2))
    b = s.param("b", s.randn(6))
    y = F.conv2d(x, w, b, stride=(2, 1), padding=(1, 2), dilation=(2, 1), groups=2)
    backward_weighted(s, y, (("x", x), ("w", w), ("b", b)))


@scenario("depthwise conv2d (groups = channels) with padding='same' and an even 4x4 kernel, no bias")
def conv2d_depthwise_same(s):
    x = s.param("x", s.randn(1, 3, 7, 6))
    w = s.param("w", s.randn(3, 1, 4, 4))
    y = F.conv2d(x, w, None, padding="same", groups=3)
    backward_weighted(s, y, (("x", x), ("w", w)))


@scenario("conv1d with stride 2, padding 2, dilation 2, 2 groups, bias; and padding='valid' on an unbatched input")
def conv1d_mixed(s):
    x = s.param("x", s.randn(2, 4, 11))
    w = s.param("w", s.randn(6, 2, 3))
    b = s.param("b", s.randn(6))
    y = F.conv1d(x, w, b, stride=2, padding=2, dilation=2, groups=2)
    u = s.param("u", s.randn(3, 9))
    v = s.param("v", s.randn(2, 3, 4))
    z = F.conv1d(u, v, None, padding="valid")
    r = weights(s, "r", tuple(y.shape))
    q = weights(s, "q", tuple(z.shape))
    ((y * r).sum() + (z * q).sum()).backward()
    s.output("y", y)
    s.output("z", z)
    for k, t in (("x", x), ("w", w), ("b", b), ("u", u), ("v", v)):
        s.grad(k, t.grad)


@scenario("conv_transpose2d with stride 2, padding 1, output_padding 1, dilation (1, 2), 2 groups, bias")
def conv_transpose2d_mixed(s):
    x = s.param("x", s.randn(2, 4, 3, 4))
    w = s.param("w", s.randn(4, 3, 3, 3))
    b = s.param("b", s.randn(6))
    y = F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1, groups=2, dilation=(1, 2))
    backward_weighted(s, y, (("x", x), ("w", w), ("b", b)))


@scenario("conv_transpose1d with stride 3, padding 1, output_padding 2, bias")
def conv_transpose1d_mixed(s):
    x = s.param("x", s.randn(2, 2, 5))
    w = s.param("w", s.randn(2, 3, 4))
    b = s.param("b", s.randn(3))
    y = F.conv_transpose1d(x, w, b, stride=3, padding=1, output_padding=2)
    backward_weighted(s, y, (("x", x), ("w", w), ("b", b)))


@scenario("unfold with kernel (2, 3), dilation (1, 2), padding 1, stride (2, 1); fold of other columns")
def unfold_fold(s):
    x = s.param("x", s.randn(2, 3, 6, 5))
    cols = F.unfold(x, (2, 3), dilation=(1, 2), padding=1, stride=(2, 1))
    c = s.param("c", s.randn(*cols.shape))
    img = F.fold(c, (6, 5), (2, 3), dilation=(1, 2), padding=1, stride=(2, 1))
    r = weights(s, "r", tuple(cols.shape))
    q = weights(s, "q", tuple(img.shape))
    ((cols * r).sum() + (img * q).sum()).backward()
    s.output("cols", cols)
    s.output("img", img)
    s.grad("x", x.grad)
    s.grad("c", c.grad)


@scenario("nn.Conv2d(3, 4, 3, stride=2, padding=1) -> tanh -> nn.ConvTranspose2d(4, 2, 4, stride=2, padding=1), f32")
def conv_layers_f32(s):
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3, stride=2, padding=1), nn.Tanh(), nn.ConvTranspose2d(4, 2, 4, stride=2, padding=1)
    )
    params = {k: s.param(k, v) for k, v in model.state_dict().items()}
    model.load_state_dict({k: v.detach() for k, v in params.items()})
    model = model.to(s.dtype)
    x = s.const("x", s.randn(2, 3, 8, 8))
    y = model(x)
    r = weights(s, "r", tuple(y.shape))
    (y * r).sum().backward()
    s.output("y", y)
    for k, p in model.named_parameters():
        s.grad(k, p.grad)


@scenario("WGAN-GP penalty through a conv critic: ((|dD/dx| - 1)^2).mean(), backward to the critic's weights")
def conv_gradient_penalty(s):
    w1 = s.param("w1", s.randn(4, 2, 3, 3) * 0.5)
    b1 = s.param("b1", s.randn(4) * 0.1)
    w2 = s.param("w2", s.randn(1, 4, 3, 3) * 0.5)
    x = s.const("x", s.randn(3, 2, 6, 6)).requires_grad_(True)
    h = torch.tanh(F.conv2d(x, w1, b1, stride=2, padding=1))
    score = F.conv2d(h, w2).sum()
    (g,) = torch.autograd.grad(score, x, create_graph=True)
    norm = g.flatten(1).norm(2, dim=1)
    gp = ((norm - 1) ** 2).mean()
    gp.backward()
    s.output("norm", norm)
    s.output("gp", gp)
    for k, p in (("w1", w1), ("b1", b1), ("w2", w2)):
        s.grad(k, p.grad)


def main():
    warnings.filterwarnings("ignore", message=r"Using padding='same' with even kernel lengths")
    torch.set_num_threads(1)
    out = []
    for name, about, f in SCENARIOS:
        s = Scenario(name, about)
        f(s)
        out.append(s.to_json())
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as fh:
        fh.write(render({"generator": "tools/parity/conv.py", "torch": torch.__version__, "scenarios": out}))
    print(f"wrote {len(out)} scenarios to {os.path.relpath(OUT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
