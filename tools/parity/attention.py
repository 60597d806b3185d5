#!/usr/bin/env python3
"""PyTorch's side of the attention parity tests: F.scaled_dot_product_attention with a bool
mask, a float mask with large negative entries, is_causal (L > S and L < S), a custom scale and broadcast batch
dimensions, its outputs and the query, key and value gradients written to
tools/parity/fixtures/attention.json, which crates/nn/tests/parity_attention.rs rebuilds
with ember and compares.

Regenerate (from the repository root, with any Python that has torch; CI never runs this):

    .venv-torch/bin/python tools/parity/attention.py

The fixture format, the seeding and the tensor encoding are those of
tools/parity/autograd.py, whose helpers this script reuses. Everything is float64 unless
the scenario name ends in `_f32`. Each scenario turns its output into a scalar loss with
fixed random weights (`r`), so that every gradient element differs.
"""

import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from autograd import Scenario, render, weights  # noqa: E402

OUT = os.path.join(HERE, "fixtures", "attention.json")

SCENARIOS = []


def scenario(about):
    def register(f):
        SCENARIOS.append((f.__name__, about, f))
        return f

    return register


def qkv(s, q, k, v):
    return s.param("q", s.randn(*q)), s.param("k", s.randn(*k)), s.param("v", s.randn(*v))


def backward_weighted(s, y, leaves):
    """loss = sum(y * r) with a fixed random r; records y and every leaf's gradient."""
    r = weights(s, "r", tuple(y.shape))
    (y * r).sum().backward()
    s.output("y", y)
    for k, v in leaves:
        s.grad(k, v.grad)


def bool_mask_impl(s):
    q, k, v = qkv(s, (2, 2, 5, 8), (2, 2, 7, 8), (2, 2, 7, 4))
    m = torch.rand(5, 7) > 0.3
    m[2] = False  # a query that sees no key
    m = s.const("m", m)
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
    backward_weighted(s, y, (("q", q), ("k", k), ("v", v)))


@scenario("[2, 2] batch, L 5, S 7, E 8, Ev 4, bool mask [5, 7] with an empty row")
def bool_mask(s):
    bool_mask_impl(s)


@scenario("the bool-mask scenario in float32")
def bool_mask_f32(s):
    bool_mask_impl(s)


@scenario("float mask [2, 1, 4, 6] broadcast over heads, with -1e30 entries (JSON has no -inf)")
def float_mask(s):
    q, k, v = qkv(s, (2, 3, 4, 5), (2, 3, 6, 5), (2, 3, 6, 5))
    m = torch.randn(2, 1, 4, 6, dtype=s.dtype)
    m[0, 0, 1, 2] = -1e30
    m[1, 0, 3, :4] = -1e30
    m = s.const("m", m)
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
    backward_weighted(s, y, (("q", q), ("k", k), ("v", v)))


@scenario("is_causal with L 6 > S 4, and with L 3 < S 5")
def causal(s):
    q, k, v = qkv(s, (2, 6, 4), (2, 4, 4), (2, 4, 3))
    u = s.param("u", s.randn(3, 4))
    w = s.param("w", s.randn(5, 4))
    x = s.param("x", s.randn(5, 2))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    z = F.scaled_dot_product_attention(u, w, x, is_causal=True)
    r, t = weights(s, "r", tuple(y.shape)), weights(s, "t", tuple(z.shape))
    ((y * r).sum() + (z * t).sum()).backward()
    s.output("y", y)
    s.output("z", z)
    for key, p in (("q", q), ("k", k), ("v", v), ("u", u), ("w", w), ("x", x)):
        s.grad(key, p.grad)


@scenario("scale 0.3, query [3, 1, 4, 8] broadcast against key and value [3, 2, 9, 8]")
def scale_broadcast(s):
    q, k, v = qkv(s, (3, 1, 4, 8), (3, 2, 9, 8), (2, 9, 8))
    y = F.scaled_dot_product_attention(q, k, v, scale=0.3)
    backward_weighted(s, y, (("q", q), ("k", k), ("v", v)))


@scenario("causal, L = S = 300 (more than one kernel block), float32")
def long_causal_f32(s):
    q, k, v = qkv(s, (1, 300, 4), (1, 300, 4), (1, 300, 2))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    backward_weighted(s, y, (("q", q), ("k", k), ("v", v)))


def main():
    torch.set_num_threads(1)
    out = []
    for name, about, f in SCENARIOS:
        s = Scenario(name, about)
        f(s)
        out.append(s.to_json())
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as fh:
        fh.write(render({"generator": "tools/parity/attention.py", "torch": torch.__version__, "scenarios": out}))
    print(f"wrote {len(out)} scenarios to {os.path.relpath(OUT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
