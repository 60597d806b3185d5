#!/usr/bin/env python3
"""PyTorch's side of the higher-order parity tests: gradients of gradients (create_graph)
in PyTorch, written to tools/parity/fixtures/higher_order.json, which
crates/autograd/tests/higher_order.rs rebuilds with ember and compares at 1e-5.

Regenerate (from the repository root, with any Python that has torch; CI never runs this):

    .venv-torch/bin/python tools/parity/higher_order.py

The fixture format, the seeding (CRC-32 of each scenario's name) and the tensor encoding
are those of tools/parity/autograd.py, whose helpers this script reuses. Everything is
float64.
"""

import os
import sys
import warnings

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from autograd import Scenario, render  # noqa: E402

OUT = os.path.join(HERE, "fixtures", "higher_order.json")

SCENARIOS = []


def scenario(about):
    def register(f):
        SCENARIOS.append((f.__name__, about, f))
        return f

    return register


def critic_params(s):
    """A 3 -> 8 -> 8 -> 1 critic's weights, in nn.Linear's layout (out, in)."""
    return [
        s.param("W1", s.randn(8, 3) * 0.6),
        s.param("b1", s.randn(8) * 0.1),
        s.param("W2", s.randn(8, 8) * 0.4),
        s.param("b2", s.randn(8) * 0.1),
        s.param("W3", s.randn(1, 8) * 0.4),
        s.param("b3", s.randn(1) * 0.1),
    ]


def critic(params, x, act):
    w1, b1, w2, b2, w3, b3 = params
    h = act(x @ w1.T + b1)
    h = act(h @ w2.T + b2)
    return h @ w3.T + b3


def wgan_gp(s, act):
    params = critic_params(s)
    real = s.const("real", s.randn(6, 3))
    fake = s.const("fake", s.randn(6, 3) + 0.5)
    eps = s.const("eps", torch.rand(6, 1, dtype=torch.float64))
    x_hat = (eps * real + (1 - eps) * fake).requires_grad_(True)
    d_hat = critic(params, x_hat, act)
    (g,) = torch.autograd.grad(d_hat.sum(), x_hat, create_graph=True)
    norm = g.norm(2, dim=1)
    gp = ((norm - 1) ** 2).mean()
    loss = critic(params, fake, act).mean() - critic(params, real, act).mean() + 10.0 * gp
    loss.backward()
    s.output("norm", norm)
    s.output("gp", gp)
    s.output("loss", loss)
    for k, p in zip(("W1", "b1", "W2", "b2", "W3", "b3"), params):
        s.grad(k, p.grad)


@scenario("WGAN-GP critic loss with a tanh critic: ((|dD/dx| - 1)^2).mean() at interpolates, backward to D")
def wgan_gp_tanh(s):
    wgan_gp(s, torch.tanh)


@scenario("WGAN-GP critic loss with a leaky-ReLU critic (slope 0.2)")
def wgan_gp_leaky_relu(s):
    wgan_gp(s, lambda t: F.leaky_relu(t, 0.2))


@scenario("Hessian-vector product of a 2-layer softplus MLP's mean squared error, and its gradient")
def hvp_mlp(s):
    w1 = s.param("W1", s.randn(5, 4) * 0.5)
    b1 = s.param("b1", s.randn(5) * 0.1)
    w2 = s.param("W2", s.randn(2, 5) * 0.5)
    x = s.const("x", s.randn(7, 4))
    y = s.const("y", s.randn(7, 2))
    v1 = s.const("v1", s.randn(5, 4))
    vb = s.const("vb", s.randn(5))
    v2 = s.const("v2", s.randn(2, 5))
    params = [w1, b1, w2]
    pred = F.softplus(x @ w1.T + b1) @ w2.T
    loss = ((pred - y) ** 2).mean()
    grads = torch.autograd.grad(loss, params, create_graph=True)
    dot = sum((g * v).sum() for g, v in zip(grads, (v1, vb, v2)))
    hv = torch.autograd.grad(dot, params, create_graph=True)
    for k, t in zip(("hv_W1", "hv_b1", "hv_W2"), hv):
        s.output(k, t)
    # The gradient of |Hv|^2 needs third derivatives of softplus.
    sum((h**2).sum() for h in hv).backward()
    for k, p in (("W1", w1), ("b1", b1), ("W2", w2)):
        s.grad(k, p.grad)


@scenario("input-gradient penalty of a softmax classifier: |d CE / dx|^2 backpropagated to the weights")
def input_gradient_penalty(s):
    w1 = s.param("W1", s.randn(6, 4) * 0.5)
    w2 = s.param("W2", s.randn(3, 6) * 0.5)
    x = s.param("x", s.randn(5, 4))
    onehot = s.const("onehot", F.one_hot(torch.tensor([0, 2, 1, 1, 0]), 3).to(torch.float64))
    logits = torch.tanh(x @ w1.T) @ w2.T
    ce = -(F.log_softmax(logits, dim=1) * onehot).sum(1).mean()
    (gx,) = torch.autograd.grad(ce, x, create_graph=True)
    penalty = (gx**2).sum()
    penalty.backward()
    s.output("ce", ce)
    s.output("gx", gx)
    s.output("penalty", penalty)
    for k, p in (("W1", w1), ("W2", w2), ("x", x)):
        s.grad(k, p.grad)


def main():
    warnings.filterwarnings("ignore", message=r"Using backward\(\) with create_graph=True")
    torch.set_num_threads(1)
    out = []
    for name, about, f in SCENARIOS:
        s = Scenario(name, about)
        f(s)
        out.append(s.to_json())
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as fh:
        fh.write(render({"generator": "tools/parity/higher_order.py", "torch": torch.__version__, "scenarios": out}))
    print(f"wrote {len(out)} scenarios to {os.path.relpath(OUT)}")


if __name__ == "__main__":
    main()
