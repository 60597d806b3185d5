#!/usr/bin/env python3
"""PyTorch's side of the autograd parity tests: builds composite functions in PyTorch and
writes their inputs, outputs and gradients to tools/parity/fixtures/autograd.json, which
crates/autograd/tests/parity_autograd.rs rebuilds with ember and compares at 1e-5.

Regenerate (from the repository root, with any Python that has torch; CI never runs this):

    .venv-torch/bin/python tools/parity/autograd.py

then run `cargo test -p ember-autograd --test parity_autograd`. The output is
deterministic: every scenario seeds torch with the CRC-32 of its name, so adding a scenario
leaves the others' numbers unchanged. The file records the torch version that wrote it;
subgradient conventions move between versions (torch 2.15 gives clamp 0 at its bounds,
older versions 1), so regenerate with a recent torch.

Fixture format: {"scenarios": [{"name", "about", "inputs", "outputs", "grads"}]}. Each
tensor is {"dtype": "f64" | "f32" | "i64" | "u8", "shape": [...], "data": [row-major
values]}. `inputs` are the values the Rust side starts from (parameters and constants
alike); `outputs` are forward values; `grads` are the `.grad` of leaves (or retained
intermediates) after a backward, `null` where the gradient must be absent (None). A key
`name@stage` is that tensor's state after the named stage of a scenario with several
backward calls. Everything is float64 unless the scenario name ends in `_f32`.
"""

import json
import os
import sys
import warnings
import zlib

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "autograd.json")

DTYPE_NAMES = {torch.float64: "f64", torch.float32: "f32", torch.int64: "i64", torch.bool: "u8", torch.uint8: "u8"}


def encode(t):
    """A tensor as {dtype, shape, data}; bool masks become u8 (ember's mask dtype)."""
    t = t.detach()
    name = DTYPE_NAMES[t.dtype]
    if name in ("i64", "u8"):
        data = [int(v) for v in t.reshape(-1).tolist()]
    else:
        # float32 values are exactly representable as float64, so nothing is lost.
        data = [float(v) for v in t.reshape(-1).tolist()]
    return {"dtype": name, "shape": list(t.shape), "data": data}


class Scenario:
    """Collects one scenario's tensors; `param`/`const` make the leaves and record them."""

    def __init__(self, name, about):
        self.name = name
        self.about = about
        self.inputs = {}
        self.outputs = {}
        self.grads = {}
        self.dtype = torch.float32 if name.endswith("_f32") else torch.float64
        torch.manual_seed(zlib.crc32(name.encode()))

    def _record(self, key, t):
        assert key not in self.inputs, f"{self.name}: input {key} recorded twice"
        self.inputs[key] = encode(t)

    def randn(self, *shape):
        return torch.randn(*shape, dtype=self.dtype)

    def param(self, key, t):
        """A leaf that requires grad (ember: Var::param)."""
        t = t.to(self.dtype).detach().clone().requires_grad_(True)
        self._record(key, t)
        return t

    def const(self, key, t):
        """A leaf without grad (ember: Var::new); integer and bool tensors keep their dtype."""
        if t.is_floating_point():
            t = t.to(self.dtype)
        t = t.detach().clone()
        self._record(key, t)
        return t

    def output(self, key, t):
        assert key not in self.outputs, f"{self.name}: output {key} recorded twice"
        self.outputs[key] = encode(t)

    def grad(self, key, g):
        """An expected gradient; `None` means it must be absent."""
        assert key not in self.grads, f"{self.name}: grad {key} recorded twice"
        self.grads[key] = None if g is None else encode(g)

    def to_json(self):
        return {
            "name": self.name,
            "about": self.about,
            "inputs": self.inputs,
            "outputs": self.outputs,
            "grads": self.grads,
        }


SCENARIOS = []


def scenario(about):
    def register(f):
        SCENARIOS.append((f.__name__, about, f))
        return f

    return register


def weights(s, key, shape):
    """A fixed random weighting for turning a tensor into a scalar loss, so that gradients
    differ per element (a plain sum would give uniform upstream gradients)."""
    return s.const(key, s.randn(*shape))


# ---- composite functions -------------------------------------------------------------


@scenario("relu(x @ W^T + b), then a mean squared error to a target")
def mlp_layer(s):
    x = s.param("x", s.randn(4, 3))
    w = s.param("W", s.randn(5, 3))
    b = s.param("b", s.randn(5))
    target = s.const("target", s.randn(4, 5))
    h = torch.relu(x @ w.T + b)
    loss = ((h - target) ** 2).mean()
    loss.backward()
    s.output("h", h)
    s.output("loss", loss)
    for k, v in (("x", x), ("W", w), ("b", b)):
        s.grad(k, v.grad)


def mlp2_cross_entropy_impl(s):
    x = s.const("x", s.randn(6, 4))
    labels = s.const("labels", torch.randint(0, 3, (6,)))
    w1 = s.param("W1", s.randn(8, 4) * 0.5)
    b1 = s.param("b1", s.randn(8) * 0.1)
    w2 = s.param("W2", s.randn(3, 8) * 0.5)
    b2 = s.param("b2", s.randn(3) * 0.1)
    logits = torch.relu(x @ w1.T + b1) @ w2.T + b2
    logp = torch.log_softmax(logits, dim=1)
    loss = -logp.gather(1, labels.unsqueeze(1)).mean()
    # The composition must be cross entropy with class indices, or the scenario is wrong.
    assert torch.allclose(loss, F.cross_entropy(logits, labels))
    loss.backward()
    s.output("logits", logits)
    s.output("loss", loss)
    for k, v in (("W1", w1), ("b1", b1), ("W2", w2), ("b2", b2)):
        s.grad(k, v.grad)


@scenario("2-layer MLP, log_softmax + gather + negative mean (cross entropy with class indices)")
def mlp2_cross_entropy(s):
    mlp2_cross_entropy_impl(s)


@scenario("the 2-layer MLP with cross entropy in float32")
def mlp2_cross_entropy_f32(s):
    mlp2_cross_entropy_impl(s)


@scenario("((a * b) + c).exp() / d with shapes [2,3], [3], [2,1], [1]")
def broadcast_chain(s):
    a = s.param("a", s.randn(2, 3))
    b = s.param("b", s.randn(3))
    c = s.param("c", s.randn(2, 1))
    d = s.param("d", torch.rand(1, dtype=s.dtype) + 0.5)
    r = weights(s, "r", (2, 3))
    out = ((a * b) + c).exp() / d
    loss = (out * r).sum()
    loss.backward()
    s.output("out", out)
    s.output("loss", loss)
    for k, v in (("a", a), ("b", b), ("c", c), ("d", d)):
        s.grad(k, v.grad)


@scenario("(a - b) * c over [4,1,3], [2,1], [3]; tanh(y) + e * y^2 with a 0-d e; reductions to a scalar")
def broadcast_chain_batched(s):
    a = s.param("a", s.randn(4, 1, 3))
    b = s.param("b", s.randn(2, 1))
    c = s.param("c", s.randn(3))
    e = s.param("e", s.randn(()))
    y = (a - b) * c
    z = torch.tanh(y) + e * y**2
    col = z.sum(dim=(0, 2))
    loss = (col * torch.sigmoid(col)).sum()
    loss.backward()
    s.output("z", z)
    s.output("loss", loss)
    for k, v in (("a", a), ("b", b), ("c", c), ("e", e)):
        s.grad(k, v.grad)


@scenario("multi-path reuse: x * x, q + q * q, h = sigmoid(r) used by three consumers (retained), s @ s")
def multi_path_reuse(s):
    p = s.param("p", s.randn(4))
    q = s.param("q", s.randn(4))
    r = s.param("r", s.randn(3, 2))
    m = s.param("m", s.randn(3, 3) * 0.5)
    wq = weights(s, "wq", (4,))
    la = (p * p).sum()
    lb = ((q + q * q) * wq).sum()
    h = torch.sigmoid(r)
    h.retain_grad()
    lc = (h * h).sum() + h.exp().mean() * h.sum()
    ld = torch.tanh(m @ m).sum()
    loss = la + lb + lc + ld
    loss.backward()
    for k, v in (("la", la), ("lb", lb), ("lc", lc), ("ld", ld), ("loss", loss)):
        s.output(k, v)
    for k, v in (("p", p), ("q", q), ("r", r), ("m", m), ("h", h)):
        s.grad(k, v.grad)


@scenario("softmax, log_softmax (both dims), logsumexp, exp/log combined into one scalar")
def softmax_chain(s):
    x = s.param("x", s.randn(3, 5))
    r = weights(s, "r", (3, 5))
    sm = torch.softmax(x, dim=1)
    lse = torch.logsumexp(x, dim=1, keepdim=True)
    y = sm * lse + torch.log_softmax(x, dim=0) * torch.tanh(x) + torch.log(sm + 1.0) * x.exp()
    loss = (y * r).sum() + torch.logsumexp(x, dim=(0, 1))
    loss.backward()
    s.output("softmax", sm)
    s.output("logsumexp", lse)
    s.output("y", y)
    s.output("loss", loss)
    s.grad("x", x.grad)


@scenario("tanh, sigmoid, gelu (exact and tanh), silu, softplus, elu, leaky_relu, erf in one chain")
def activation_chain(s):
    x = s.param("x", s.randn(4, 5) * 1.5)
    r = weights(s, "r", (4, 5))
    y = (
        torch.tanh(x) * torch.sigmoid(x)
        + F.gelu(x)
        + F.gelu(x, approximate="tanh") * 0.5
        + F.silu(x)
        + F.softplus(x, beta=1.0, threshold=20.0)
        + F.elu(F.leaky_relu(x, 0.1), alpha=1.0)
        + torch.erf(x) * torch.sigmoid(torch.tanh(x))
    )
    loss = (y * r).sum()
    loss.backward()
    s.output("y", y)
    s.output("loss", loss)
    s.grad("x", x.grad)


@scenario("matmul with batch broadcasting [2,1,3,4] @ [3,4,5], then a vector on each side")
def matmul_batched(s):
    a = s.param("a", s.randn(2, 1, 3, 4))
    b = s.param("b", s.randn(3, 4, 5))
    v = s.param("v", s.randn(5))
    u = s.param("u", s.randn(3))
    r = weights(s, "r", (2, 3))
    out = a @ b  # [2, 3, 3, 5]
    mv = out @ v  # [2, 3, 3]
    uv = u @ mv  # [2, 3] (1-d on the left broadcasts as a row)
    loss = (torch.tanh(uv) * r).sum()
    loss.backward()
    s.output("out", out)
    s.output("uv", uv)
    s.output("loss", loss)
    for k, t in (("a", a), ("b", b), ("v", v), ("u", u)):
        s.grad(k, t.grad)


@scenario("views: transpose, narrow, cat, reshape, permute, expand, select, slice with a step, split, stack, pad")
def views_chain(s):
    x = s.param("x", s.randn(3, 4))
    y = s.param("y", s.randn(2, 3))
    r = weights(s, "r", (2, 6))
    n = x.transpose(0, 1).narrow(0, 1, 2)  # [2, 3]
    c = torch.cat([n, y], dim=0)  # [4, 3]
    p = c.reshape(2, 2, 3).permute(2, 0, 1)  # [3, 2, 2]
    e = p.unsqueeze(1).expand(3, 2, 2, 2)  # [3, 2, 2, 2]
    sel = e.select(0, 1) * e.select(0, 2)  # [2, 2, 2]
    flat = sel.flatten()  # [8]
    first, second = flat.split(4, dim=0)
    st = torch.stack([first, second.tanh()], dim=0)  # [2, 4]
    padded = F.pad(st, (1, 1), value=0.5)  # [2, 6]
    stepped = x[:, 0:4:2]  # [3, 2]
    loss = (padded * r).sum() + (stepped * stepped.sum(dim=0, keepdim=True)).sum()
    loss.backward()
    s.output("c", c)
    s.output("padded", padded)
    s.output("loss", loss)
    s.grad("x", x.grad)
    s.grad("y", y.grad)


@scenario("indexing: index_select with repeats, where with a broadcast branch, gather, masked_fill, scatter_add")
def indexing_chain(s):
    x = s.param("x", s.randn(5, 3))
    z = s.param("z", s.randn(3))
    base = s.param("base", s.randn(3, 2))
    idx = s.const("idx", torch.tensor([4, 0, 0, 2]))
    mask = s.const("mask", torch.rand(4, 3) > 0.5)
    gidx = s.const("gidx", torch.randint(0, 3, (4, 2)))
    fill = s.const("fill", torch.rand(4, 2) > 0.7)
    sidx = s.const("sidx", torch.randint(0, 3, (4, 2)))
    r = weights(s, "r", (3, 2))
    sel = x.index_select(0, idx)  # [4, 3]
    w = torch.where(mask, sel, z * 2.0)  # [4, 3]
    g = w.gather(1, gidx)  # [4, 2]
    m = g.masked_fill(fill, 0.0)
    sa = base.scatter_add(0, sidx, m)  # [3, 2]
    loss = (sa * r).sum() + (w * w).sum()
    loss.backward()
    s.output("w", w)
    s.output("sa", sa)
    s.output("loss", loss)
    for k, t in (("x", x), ("z", z), ("base", base)):
        s.grad(k, t.grad)


@scenario("reductions: sum, mean, max, min, var, std, prod, logsumexp over chosen dims")
def reductions_chain(s):
    x = s.param("x", s.randn(3, 4, 2))
    a = x.sum(dim=2)  # [3, 4]
    b = x.mean(dim=(0, 2), keepdim=True)  # [1, 4, 1]
    mx = x.amax(dim=1)  # [3, 2]
    mn = x.amin(dim=(0, 1))  # [2]
    v = x.var(dim=1, correction=1)  # [3, 2]
    sd = x.std(dim=(0, 1), correction=0)  # [2]
    pr = x.prod(dim=2)  # [3, 4]
    lse = x.logsumexp(dim=1)  # [3, 2]
    loss = (
        (a * a).sum()
        + (b * b.sum()).sum()
        + (mx * lse).sum()
        + (mn * sd).sum()
        + v.sum()
        + torch.tanh(pr).sum()
        + x.sum() * x.mean()
    )
    loss.backward()
    for k, t in (("a", a), ("b", b), ("max", mx), ("min", mn), ("var", v), ("std", sd), ("prod", pr)):
        s.output(k, t)
    s.output("logsumexp", lse)
    s.output("loss", loss)
    s.grad("x", x.grad)


@scenario("more views: repeat, tril, triu, chunk, squeeze, unsqueeze, a 0-d value expanded, contiguous of a transpose")
def views_chain_more(s):
    x = s.param("x", s.randn(3, 3))
    k = s.param("k", s.randn(()))
    v = s.param("v", s.randn(1, 4, 1))
    r = weights(s, "r", (6, 6))
    rep = x.repeat(2, 2)  # [6, 6]
    tri = rep.tril(-1) + rep.triu(2) * 0.5
    c1, c2, c3 = tri.chunk(3, dim=1)  # three [6, 2]
    mixed = torch.cat([c3, c1 * c2, c2.tanh()], dim=1)  # [6, 6]
    sq = v.squeeze(0).squeeze(-1)  # [4]
    kk = k.expand(4) * sq  # [4]
    tc = x.transpose(0, 1).contiguous().reshape(9)
    loss = (mixed * r).sum() + (kk.unsqueeze(0) * kk.unsqueeze(1)).sum() + (tc * tc.detach().sigmoid()).sum()
    loss.backward()
    s.output("mixed", mixed)
    s.output("loss", loss)
    for key, t in (("x", x), ("k", k), ("v", v)):
        s.grad(key, t.grad)


@scenario("subgradients at kinks and ties: relu/abs/leaky_relu/elu at 0, clamp at its bounds, max/min/maximum ties, prod with zeros, pow at 0, softplus at its threshold, logsumexp over -inf")
def kinks_and_ties(s):
    def leaf(key, values):
        return s.param(key, torch.tensor(values, dtype=s.dtype))

    at_zero = [0.0, 1.5, -0.5]
    bounds = [-1.0, 1.0, 0.5, 2.0, -3.0]
    relu_x, abs_x, leaky_x, elu_x = (leaf(k, at_zero) for k in ("relu_x", "abs_x", "leaky_x", "elu_x"))
    clamp_x, clamp_min_x, clamp_max_x = (leaf(k, bounds) for k in ("clamp_x", "clamp_min_x", "clamp_max_x"))
    ties = leaf("ties", [[2.0, 2.0, 1.0], [0.0, 5.0, 5.0]])
    max_a = leaf("max_a", [1.0, 2.0, 3.0])
    max_b = leaf("max_b", [1.0, 0.0, 3.5])
    zeros = leaf("zeros", [[1.0, 0.0, 3.0], [0.0, 0.0, 2.0], [2.0, 3.0, 4.0]])
    base = leaf("pow_base", [0.0, 2.0, 1.5])
    expo = leaf("pow_exp", [2.0, 0.0, -1.0])
    sp = leaf("softplus_x", [20.0, 25.0, 19.99, 5.0, 6.0])
    lse_x = leaf("lse_x", [[0.5, 1.0, -2.0], [3.0, -1.0, 0.0]])
    lse_mask = s.const("lse_mask", torch.tensor([[False, True, False], [True, True, False]]))
    terms = {
        "relu": torch.relu(relu_x),
        "abs": abs_x.abs(),
        "leaky_relu": F.leaky_relu(leaky_x, 0.1),
        "elu": F.elu(elu_x, alpha=2.0),
        "clamp": clamp_x.clamp(-1.0, 1.0),
        "clamp_min": clamp_min_x.clamp(min=-1.0) + torch.clamp_min(clamp_min_x, 0.5),
        "clamp_max": clamp_max_x.clamp(max=1.0) + torch.clamp_max(clamp_max_x, 0.5),
        "max_min": torch.cat([ties.amax(dim=1), ties.amin(dim=0), ties.amax().reshape(1)]),
        "maximum": torch.maximum(max_a, max_b) + torch.minimum(max_a, max_b) * 2.0,
        "prod": zeros.prod(dim=1),
        "pow": base**expo,
        "softplus": F.softplus(sp[:3], beta=1.0, threshold=20.0) + F.softplus(sp[2:], beta=2.0, threshold=10.0),
        "logsumexp": lse_x.masked_fill(lse_mask, float("-inf")).logsumexp(dim=1),
    }
    loss = sum((t * torch.arange(1, t.numel() + 1, dtype=s.dtype)).sum() for t in terms.values())
    loss.backward()
    for key, t in terms.items():
        s.output(key, t)
    s.output("loss", loss)
    leaves = [relu_x, abs_x, leaky_x, elu_x, clamp_x, clamp_min_x, clamp_max_x, ties, max_a, max_b, zeros]
    leaves += [base, expo, sp, lse_x]
    keys = ["relu_x", "abs_x", "leaky_x", "elu_x", "clamp_x", "clamp_min_x", "clamp_max_x", "ties", "max_a", "max_b"]
    keys += ["zeros", "pow_base", "pow_exp", "softplus_x", "lse_x"]
    for key, t in zip(keys, leaves):
        s.grad(key, t.grad)


@scenario("backward variants: a non-scalar root with grad_output, the same root twice with retain_graph, backward with create_graph then differentiating the gradient")
def backward_variants(s):
    x = s.param("x", s.randn(2, 3))
    go = s.const("grad_output", s.randn(2, 3))
    y = torch.tanh(x) * x
    y.backward(go)
    s.grad("x@grad_output", x.grad.clone())
    x.grad = None
    z = s.param("z", s.randn(3))
    lz = (z.sin() * z).sum()
    lz.backward(retain_graph=True)
    lz.backward()
    s.grad("z@twice", z.grad)
    u = s.param("u", s.randn(4))
    lu = (u**3 * u.exp()).sum()
    lu.backward(create_graph=True)
    gu = u.grad
    s.output("gu", gu)
    u.grad = None
    (gu * gu).sum().backward()
    s.grad("u@second", u.grad)
    s.output("y", y)


# ---- usage patterns (docs/design.md, "Accumulation rules") ---------------------------


@scenario("accumulation rule 2: u(param) -> w (retain_grad) -> L1, L2; backward(L1, retain_graph) then backward(L2)")
def usage_two_losses(s):
    u = s.param("u", s.randn(3))
    a = s.const("a", s.randn(3))
    w = torch.tanh(u) * 2.0
    w.retain_grad()
    l1 = (w * a).sum()
    l2 = (w**2).sum()
    l1.backward(retain_graph=True)
    s.grad("u@l1", u.grad.clone())
    s.grad("w@l1", w.grad.clone())
    l2.backward()
    # u.grad must be d(L1 + L2)/du: the second backward propagates only L2's signal.
    s.grad("u@l2", u.grad)
    s.grad("w@l2", w.grad)
    s.output("w", w)
    s.output("l1", l1)
    s.output("l2", l2)


@scenario("multi-task: x -> w_shared -> features -> two heads, two losses, backward twice")
def usage_multi_task(s):
    x = s.const("x", s.randn(3, 4))
    w_shared = s.param("w_shared", s.randn(4, 2))
    w1 = s.param("w1", s.randn(2, 1))
    w2 = s.param("w2", s.randn(2, 3))
    features = x @ w_shared
    # features is not retained: its .grad in ember is this backward's own signal (see
    # docs/design.md, "Accumulation rules"), which PyTorch exposes through a hook, not .grad.
    signals = []
    features.register_hook(lambda g: signals.append(g.clone()))
    out1 = torch.tanh(features @ w1).sum()
    out2 = ((features @ w2) ** 2).mean()
    out1.backward(retain_graph=True)
    s.grad("w_shared@out1", w_shared.grad.clone())
    s.grad("w1@out1", w1.grad.clone())
    s.grad("w2@out1", w2.grad)  # None: head 2 is not on out1's path
    s.grad("features@out1", signals[-1])
    out2.backward(retain_graph=True)
    s.grad("w_shared@out2", w_shared.grad)
    s.grad("w1@out2", w1.grad)
    s.grad("w2@out2", w2.grad)
    s.grad("features@out2", signals[-1])
    s.output("features", features)
    s.output("out1", out1)
    s.output("out2", out2)


@scenario("detach (GAN): D trained on G's output detached leaves G without grads; then the G loss")
def usage_gan_detach(s):
    noise = s.const("noise", s.randn(4, 3))
    real = s.const("real", s.randn(4, 2))
    wg = s.param("Wg", s.randn(3, 2))
    bg = s.param("bg", s.randn(2))
    wd = s.param("Wd", s.randn(2, 1))
    bd = s.param("bd", s.randn(1))

    def d(v):
        return torch.sigmoid(v @ wd + bd)

    fake = torch.tanh(noise @ wg + bg)
    d_loss = -torch.log(d(real)).mean() - torch.log(1.0 - d(fake.detach())).mean()
    d_loss.backward()
    s.grad("Wd@d_step", wd.grad.clone())
    s.grad("bd@d_step", bd.grad.clone())
    s.grad("Wg@d_step", wg.grad)  # None: the detach cut G off
    s.grad("bg@d_step", bg.grad)
    g_loss = -torch.log(d(fake)).mean()
    g_loss.backward()
    s.grad("Wg@g_step", wg.grad)
    s.grad("bg@g_step", bg.grad)
    # D's grads were not cleared (only G's optimizer zeroes before the G step), so they
    # hold the D loss's plus the G loss's contribution.
    s.grad("Wd@g_step", wd.grad)
    s.grad("bd@g_step", bd.grad)
    s.output("fake", fake)
    s.output("d_loss", d_loss)
    s.output("g_loss", g_loss)


@scenario("frozen middle layer: encoder -> frozen adapter (requires_grad=False) -> head")
def usage_frozen_adapter(s):
    x = s.const("x", s.randn(5, 3))
    target = s.const("target", s.randn(5, 2))
    we = s.param("We", s.randn(3, 4))
    be = s.param("be", s.randn(4))
    wa = s.param("Wa", s.randn(4, 4))
    wh = s.param("Wh", s.randn(4, 2))
    wa.requires_grad_(False)  # ember: Wa.freeze()
    h = torch.tanh(torch.relu(x @ we + be) @ wa)
    out = h @ wh
    loss = ((out - target) ** 2).mean()
    loss.backward()
    s.output("out", out)
    s.output("loss", loss)
    s.grad("We", we.grad)
    s.grad("be", be.grad)
    s.grad("Wh", wh.grad)
    s.grad("Wa", wa.grad)  # None: frozen, yet the encoder gets gradients through it


@scenario("gradient accumulation: two batches, two backward calls, then zero_grad and a third")
def usage_grad_accumulation(s):
    w = s.param("W", s.randn(3, 2))
    b = s.param("b", s.randn(2))
    x1, y1 = s.const("x1", s.randn(4, 3)), s.const("y1", s.randn(4, 2))
    x2, y2 = s.const("x2", s.randn(4, 3)), s.const("y2", s.randn(4, 2))

    def loss_of(x, y):
        return ((torch.tanh(x @ w + b) - y) ** 2).mean()

    l1 = loss_of(x1, y1)
    l1.backward()
    s.grad("W@batch1", w.grad.clone())
    s.grad("b@batch1", b.grad.clone())
    l2 = loss_of(x2, y2)
    l2.backward()
    s.grad("W@batch2", w.grad.clone())
    s.grad("b@batch2", b.grad.clone())
    w.grad = None  # zero_grad (set_to_none)
    b.grad = None
    loss_of(x2, y2).backward()
    s.grad("W@after_zero", w.grad)
    s.grad("b@after_zero", b.grad)
    s.output("l1", l1)
    s.output("l2", l2)


@scenario("higher order: torch.autograd.grad with create_graph for d2/dx2 (x^3 + sin x) and a mixed partial")
def usage_second_derivative(s):
    x = s.param("x", s.randn(5))
    w = s.param("w", s.randn(5))
    y = x**3 + torch.sin(x)
    (dy,) = torch.autograd.grad(y.sum(), x, create_graph=True)
    (d2y,) = torch.autograd.grad(dy.sum(), x)
    f = torch.tanh(x * w).sum()
    (gx,) = torch.autograd.grad(f, x, create_graph=True)
    gxx, gxw = torch.autograd.grad((gx**2).sum(), [x, w])
    for k, t in (("y", y), ("dy", dy), ("d2y", d2y), ("gx", gx), ("gxx", gxx), ("gxw", gxw)):
        s.output(k, t)
    # autograd.grad never writes .grad.
    s.grad("x", x.grad)
    s.grad("w", w.grad)


def render(doc):
    """JSON with one tensor per line, so that a regenerated fixture diffs readably."""

    def dump(v):
        return json.dumps(v, separators=(",", ":"))

    lines = ["{", f' "generator": {dump(doc["generator"])},', f' "torch": {dump(doc["torch"])},', ' "scenarios": [']
    for i, sc in enumerate(doc["scenarios"]):
        lines.append("  {")
        lines.append(f'   "name": {dump(sc["name"])},')
        lines.append(f'   "about": {dump(sc["about"])},')
        for j, section in enumerate(("inputs", "outputs", "grads")):
            entries = [f"    {dump(k)}: {dump(v)}" for k, v in sc[section].items()]
            body = ",\n".join(entries)
            end = "," if j < 2 else ""
            lines.append(f'   "{section}": {{\n{body}\n   }}{end}' if entries else f'   "{section}": {{}}{end}')
        lines.append("  }," if i + 1 < len(doc["scenarios"]) else "  }")
    lines += [" ]", "}", ""]
    text = "\n".join(lines)
    assert json.loads(text) == doc, "render must produce the same document"
    return text


def main():
    # backward_variants uses backward(create_graph=True) on purpose (ember has the same
    # entry point) and clears the gradient afterwards, which is what the warning asks.
    warnings.filterwarnings("ignore", message=r"Using backward\(\) with create_graph=True")
    torch.set_num_threads(1)
    out = []
    for name, about, f in SCENARIOS:
        s = Scenario(name, about)
        f(s)
        out.append(s.to_json())
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as fh:
        fh.write(render({"generator": "tools/parity/autograd.py", "torch": torch.__version__, "scenarios": out}))
    print(f"wrote {len(out)} scenarios to {os.path.relpath(OUT)} ({os.path.getsize(OUT)} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
