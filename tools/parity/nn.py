#!/usr/bin/env python3
"""PyTorch's side of the ember-nn parity test: builds small models and evaluates every loss
in PyTorch, and writes what ember must reproduce. crates/nn/tests/parity_nn.rs loads the
same weights into the same ember architectures and compares at 1e-5.

Regenerate (from the repository root, with any Python that has torch and safetensors; CI
never runs this):

    .venv-torch/bin/python tools/parity/nn.py

then run `cargo test -p ember-nn --test parity_nn`. The output is deterministic (fixed
seeds, one thread).

Written files:
- tools/parity/fixtures/nn_<model>.safetensors: `save_file(model.state_dict())` of each
  model, exactly as a PyTorch user would save it.
- tools/parity/fixtures/nn.json:
  {"generator", "torch",
   "models": [{"name", "file", "about", "state_dict_keys": [...], "input", "output",
               "loss": {"fn", "options", "target", "value"}, "grads": {param name: grad}}],
   "losses": [{"name", "fn", "options", "input", "target", "value", "input_grad"}]}
  Tensors are {"dtype": "f64" | "f32" | "i64", "shape": [...], "data": [row-major values]}.
  `value` is the loss with the case's reduction; `input_grad` is the gradient of the sum of
  `value` with respect to the input (null where ember deliberately differs: at
  probabilities of exactly 0 or 1 PyTorch's binary cross-entropy divides by an epsilon,
  ember gives 0). Options: {"reduction": "mean" | "sum" | "none", "label_smoothing",
  "ignore_index" (int or null), "delta"}, only those the loss takes.
"""

import json
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "fixtures")
OUT = os.path.join(FIXTURES, "nn.json")

DTYPE_NAMES = {torch.float64: "f64", torch.float32: "f32", torch.int64: "i64"}
REDUCTIONS = ("mean", "sum", "none")


def encode(t):
    """A tensor as {dtype, shape, data}."""
    t = t.detach()
    name = DTYPE_NAMES[t.dtype]
    if name == "i64":
        data = [int(v) for v in t.reshape(-1).tolist()]
    else:
        # float32 values are exactly representable as float64, so nothing is lost.
        data = [float(v) for v in t.reshape(-1).tolist()]
    return {"dtype": name, "shape": list(t.shape), "data": data}


# ---------------------------------------------------------------------------------------
# Models

def mlp():
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def mlp_act():
    # Every layer kind ember has, in one stack; the Dropout is in eval mode.
    return nn.Sequential(
        nn.Flatten(),  # 0: [N, 2, 4] -> [N, 8]
        nn.Linear(8, 16),  # 1
        nn.GELU(),  # 2
        nn.Linear(16, 16),  # 3
        nn.SiLU(),  # 4
        nn.Linear(16, 12),  # 5
        nn.Tanh(),  # 6
        nn.Dropout(0.2),  # 7
        nn.Linear(12, 8),  # 8
        nn.GELU(approximate="tanh"),  # 9
        nn.Linear(8, 8, bias=False),  # 10
        nn.LeakyReLU(0.1),  # 11
        nn.Identity(),  # 12
        nn.Linear(8, 6),  # 13
        nn.Sigmoid(),  # 14
        nn.Linear(6, 4),  # 15
        nn.LogSoftmax(dim=1),  # 16
        nn.Softmax(dim=-1),  # 17
    )


def embed_ln():
    # A token model: Embedding with a padding row, LayerNorm over one and two trailing
    # dimensions, and one without the affine part.
    model = nn.Sequential(
        nn.Embedding(10, 8, padding_idx=0),  # 0: [N, 3] token ids -> [N, 3, 8]
        nn.LayerNorm(8),  # 1
        nn.LayerNorm([3, 8], eps=1e-3),  # 2
        nn.Flatten(),  # 3: -> [N, 24]
        nn.Linear(24, 6),  # 4
        nn.Tanh(),  # 5
        nn.LayerNorm(6, elementwise_affine=False),  # 6
        nn.Linear(6, 4),  # 7
    )
    with torch.no_grad():
        # Scales and shifts other than PyTorch's ones and zeros, so that their use shows.
        for norm in (model[1], model[2]):
            norm.weight.normal_(1.0, 0.3)
            norm.bias.normal_(0.0, 0.3)
    return model


def tokens(shape):
    """Token ids in 0..10 with the padding id 0 at two places."""
    ids = torch.randint(1, 10, shape)
    ids[0, 0] = 0
    ids[2, 1] = 0
    return ids


def model_case(name, about, build, input_shape, loss_fn, seed, make_input=torch.randn):
    torch.manual_seed(seed)
    model = build()
    model.eval()
    x = make_input(input_shape)
    out = model(x)
    if loss_fn == "cross_entropy":
        target = torch.randint(0, out.shape[1], (out.shape[0],))
        options = {"reduction": "mean", "label_smoothing": 0.0, "ignore_index": None}
        loss = F.cross_entropy(out, target)
    else:
        target = torch.rand(out.shape)
        options = {"reduction": "mean"}
        loss = F.mse_loss(out, target)
    model.zero_grad()
    loss.backward()
    file = f"nn_{name}.safetensors"
    save_file(model.state_dict(), os.path.join(FIXTURES, file))
    return {
        "name": name,
        "file": file,
        "about": about,
        "state_dict_keys": list(model.state_dict().keys()),
        "input": encode(x),
        "output": encode(out),
        "loss": {"fn": loss_fn, "options": options, "target": encode(target), "value": encode(loss)},
        "grads": {n: encode(p.grad) for n, p in model.named_parameters()},
    }


# ---------------------------------------------------------------------------------------
# Losses

CASES = []


def case(name, fn, options, x, target, grad=True):
    """Evaluates F.<fn> on x (made a leaf that requires grad) and records the case."""
    x = x.detach().clone().requires_grad_(True)
    kwargs = dict(options)
    if kwargs.get("ignore_index", 0) is None:
        # ember's None means "no ignored value"; PyTorch's default -100 never occurs in these
        # targets, so it ignores nothing either.
        del kwargs["ignore_index"]
    value = getattr(F, fn)(x, target, **kwargs)
    value.sum().backward()
    for r in torch.isfinite(value).reshape(-1).tolist():
        assert r or "all_ignored" in name, f"{name}: non-finite loss"
    CASES.append({
        "name": name,
        "fn": fn,
        "options": options,
        "input": encode(x),
        "target": encode(target),
        "value": encode(value),
        "input_grad": encode(x.grad) if grad else None,
    })


def with_reductions(name, fn, x, target, grad=True, **options):
    for r in REDUCTIONS:
        case(f"{name}_{r}", fn, {"reduction": r, **options}, x, target, grad)


def loss_cases():
    f64 = torch.float64
    torch.manual_seed(1234)

    # Cross-entropy with class indices: plain, label smoothing, ignore_index, both.
    logits = torch.randn(6, 5, dtype=f64) * 2
    target = torch.tensor([0, 4, 2, 2, 1, 3])
    ce = dict(label_smoothing=0.0, ignore_index=None)
    with_reductions("ce", "cross_entropy", logits, target, **ce)
    with_reductions("ce_smooth", "cross_entropy", logits, target, label_smoothing=0.1, ignore_index=None)
    ignored = torch.tensor([0, -100, 2, -100, 1, 3])
    with_reductions("ce_ignore", "cross_entropy", logits, ignored, label_smoothing=0.0, ignore_index=-100)
    other_ignored = torch.tensor([0, 3, 2, 3, 1, 3])
    with_reductions("ce_ignore_class", "cross_entropy", logits, other_ignored, label_smoothing=0.0, ignore_index=3)
    with_reductions("ce_ignore_smooth", "cross_entropy", logits, ignored, label_smoothing=0.2, ignore_index=-100)
    # Spatial: [N, C, d1, d2] with targets [N, d1, d2].
    spatial = torch.randn(3, 4, 2, 2, dtype=f64)
    spatial_t = torch.randint(0, 4, (3, 2, 2))
    spatial_t[0, 1, 0] = -100
    with_reductions("ce_spatial", "cross_entropy", spatial, spatial_t, label_smoothing=0.05, ignore_index=-100)
    # A single unbatched sample.
    with_reductions("ce_unbatched", "cross_entropy", torch.randn(5, dtype=f64), torch.tensor(3), **ce)
    # Class-probability targets.
    probs = torch.softmax(torch.randn(6, 5, dtype=f64), dim=1)
    with_reductions("ce_probs", "cross_entropy", logits, probs, label_smoothing=0.0, ignore_index=None)
    with_reductions("ce_probs_smooth", "cross_entropy", logits, probs, label_smoothing=0.3, ignore_index=None)
    # Huge logits: stable in float32 and float64.
    huge = torch.tensor([[1e4, -1e4, 0.0], [-1e4, 1e4, 1e4], [0.0, 0.0, -1e4]])
    huge_t = torch.tensor([1, 2, 0])
    with_reductions("ce_huge_f32", "cross_entropy", huge, huge_t, label_smoothing=0.1, ignore_index=None)
    with_reductions("ce_huge_f64", "cross_entropy", huge.to(f64), huge_t, label_smoothing=0.0, ignore_index=None)
    # Every target ignored: the mean is 0 / 0.
    case("ce_all_ignored_sum", "cross_entropy", {"reduction": "sum", "label_smoothing": 0.0, "ignore_index": 1},
         logits[:2], torch.tensor([1, 1]))

    # NLL on log-probabilities.
    log_probs = torch.log_softmax(torch.randn(5, 4, dtype=f64), dim=1)
    nll_t = torch.tensor([3, 0, 1, 1, 2])
    with_reductions("nll", "nll_loss", log_probs, nll_t, ignore_index=None)
    with_reductions("nll_ignore", "nll_loss", log_probs, torch.tensor([3, -1, 1, -1, 2]), ignore_index=-1)

    # Regression losses.
    pred = torch.randn(4, 3, dtype=f64)
    goal = torch.randn(4, 3, dtype=f64)
    with_reductions("mse", "mse_loss", pred, goal)
    with_reductions("l1", "l1_loss", pred, goal)
    with_reductions("huber", "huber_loss", pred * 2, goal, delta=1.0)
    with_reductions("huber_delta", "huber_loss", pred * 2, goal, delta=0.5)
    with_reductions("mse_huge_f32", "mse_loss", huge, torch.zeros(3, 3))

    # Binary cross-entropy on probabilities, then on logits.
    p = torch.sigmoid(torch.randn(3, 4, dtype=f64))
    y = torch.rand(3, 4, dtype=f64)
    with_reductions("bce", "binary_cross_entropy", p, y)
    saturated = torch.tensor([0.0, 1.0, 0.0, 1.0, 0.5], dtype=f64)
    with_reductions("bce_saturated", "binary_cross_entropy", saturated, torch.tensor([0.0, 1.0, 1.0, 0.0, 1.0],
                    dtype=f64), grad=False)
    logit = torch.randn(3, 4, dtype=f64) * 3
    logit[0, 0] = 0.0
    with_reductions("bce_logits", "binary_cross_entropy_with_logits", logit, y)
    extreme = torch.tensor([1e4, -1e4, 1e4, -1e4, 0.0, 30.0, -30.0])
    extreme_y = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5, 0.3, 0.7])
    with_reductions("bce_logits_huge_f32", "binary_cross_entropy_with_logits", extreme, extreme_y)
    with_reductions("bce_logits_huge_f64", "binary_cross_entropy_with_logits", extreme.to(f64), extreme_y.to(f64))

    # More class-index shapes and option combinations (drawn last, so that the cases above
    # keep their inputs): [N, C, d] with smoothing and ignored targets, smoothing while a
    # valid class is the ignored one, a smoothed single sample, NLL on [N, C, d] and [C].
    seq = torch.randn(3, 4, 5, dtype=f64)
    seq_t = torch.randint(0, 4, (3, 5))
    seq_t[1, 2] = -100
    seq_t[2, 0] = -100
    with_reductions("ce_3d", "cross_entropy", seq, seq_t, label_smoothing=0.15, ignore_index=-100)
    with_reductions("ce_ignore_class_smooth", "cross_entropy", logits, other_ignored, label_smoothing=0.25,
                    ignore_index=3)
    with_reductions("ce_unbatched_smooth", "cross_entropy", torch.randn(5, dtype=f64), torch.tensor(1),
                    label_smoothing=0.2, ignore_index=-100)
    nll_seq = torch.log_softmax(torch.randn(2, 4, 3, dtype=f64), dim=1)
    with_reductions("nll_3d", "nll_loss", nll_seq, torch.tensor([[0, 3, -100], [2, 2, 1]]), ignore_index=-100)
    with_reductions("nll_unbatched", "nll_loss", log_probs[0], torch.tensor(2), ignore_index=None)


def render(doc):
    """One tensor per line, so that diffs of regenerated fixtures stay readable."""

    def dump(v):
        return json.dumps(v, separators=(",", ":"))

    def model(m):
        entries = [f"   {dump(k)}: {dump(v)}" for k, v in m.items() if k != "grads"]
        grads = ",\n".join(f"    {dump(k)}: {dump(v)}" for k, v in m["grads"].items())
        entries.append(f'   "grads": {{\n{grads}\n   }}')
        return "  {\n" + ",\n".join(entries) + "\n  }"

    lines = ["{", f' "generator": {dump(doc["generator"])},', f' "torch": {dump(doc["torch"])},', ' "models": [']
    lines.append(",\n".join(model(m) for m in doc["models"]))
    lines.append(" ],")
    lines.append(' "losses": [')
    lines.append(",\n".join("  " + dump(c) for c in doc["losses"]))
    lines.append(" ]")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main():
    torch.set_num_threads(1)
    os.makedirs(FIXTURES, exist_ok=True)
    models = [
        model_case("mlp", "Linear(8,16), ReLU, Linear(16,4) on [5, 8]; cross-entropy", mlp, (5, 8),
                   "cross_entropy", 7),
        model_case("mlp_act", "every layer kind, eval mode, on [5, 2, 4]; mean squared error", mlp_act, (5, 2, 4),
                   "mse_loss", 11),
        model_case("embed_ln", "Embedding (padding 0) and LayerNorms on [5, 3] token ids; cross-entropy", embed_ln,
                   (5, 3), "cross_entropy", 13, make_input=tokens),
    ]
    loss_cases()
    doc = {"generator": "tools/parity/nn.py", "torch": torch.__version__, "models": models, "losses": CASES}
    text = render(doc)
    json.loads(text)  # the renderer must produce valid JSON
    with open(OUT, "w") as fh:
        fh.write(text)


if __name__ == "__main__":
    main()
