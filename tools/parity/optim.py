#!/usr/bin/env python3
"""PyTorch's side of the optimizer parity tests: runs torch.optim's SGD, Adam, AdamW and
RMSprop for 20 steps on a small fixed problem, steps each LR scheduler, clips fixed
gradients with clip_grad_norm_, and writes everything to tools/parity/fixtures/optim.json,
which crates/optim/tests/parity_optim.rs replays with ember and compares.

Regenerate (from the repository root, with any Python that has torch; CI never runs this):

    .venv-torch/bin/python tools/parity/optim.py

then run `cargo test -p ember-optim --test parity_optim`. The output is deterministic.

The problem. Four parameters: W [3, 4] and b [3] of a linear regression, `late` [2, 2] and
`unused` [3]. Step k (1-based) computes, from the current parameters,

    loss = mean((x @ W^T + b - y)^2)                       every step
         + 0.5 * sum((late - late_target)^2)                from step LATE_FROM on

then backward and optimizer.step() (and scheduler.step(), where the scenario has one),
with all gradients set to None before each step. So `late` has no gradient for its first
steps (the optimizer must skip it and start its state later: Adam's bias correction then
counts its own steps) and `unused` never has one (it must not move and gets no state).

Fixture format (every tensor is {"dtype": "f64" | "f32", "shape": [...], "data": [...]}):

- "problem": the initial parameters and the constants, in float64; f32 scenarios round
  them to float32 first.
- "optimizers": [{"name", "optimizer": "sgd" | "adam" | "adamw" | "rmsprop", "config":
  {ember config field: value}, "dtype", "scheduler": null | {...}, "lrs": [lr used by each
  step], "trajectory": {param: [value after step 1, ..., after step 20]}, "state": {key:
  tensor or number}}]. `state` is the optimizer's per-parameter state after the last step,
  keyed like ember's OptimizerState (`state.{i}.{name}`, parameters numbered W, b, late, unused).
- "schedulers": [{"name", "scheduler": {...}, "base_lr", "lrs": [lr after construction,
  after step 1, ...]}].
- "clip": [{"name", "dtype", "max_norm", "norm_type" (a number or "inf"), "grads": {param:
  tensor or null}, "total_norm", "clipped": {param: tensor or null}}].

A scheduler is {"kind": "step", "step_size", "gamma"} | {"kind": "cosine", "t_max",
"eta_min"} | {"kind": "lambda", "fn": name}; the lambda functions are defined by name
here and in the Rust test (LAMBDAS).
"""

import json
import math
import os
import sys
import warnings

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "optim.json")

STEPS = 20
LATE_FROM = 11
PARAM_NAMES = ["W", "b", "late", "unused"]
DTYPES = {torch.float64: "f64", torch.float32: "f32"}

LAMBDAS = {
    "exp_0.9": lambda e: 0.9**e,
    "warmup_4": lambda e: min(1.0, (e + 1) / 4),
    "halve_every_3_plus_linear": lambda e: 0.5 ** (e // 3) + 0.01 * e,
}


def encode(t):
    t = t.detach()
    # float32 values are exactly representable as float64, so nothing is lost.
    return {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data": [float(v) for v in t.reshape(-1).tolist()]}


def make_problem():
    g = torch.Generator().manual_seed(20240611)

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    return {
        "x": randn(8, 4),
        "y": randn(8, 3),
        "W": randn(3, 4) * 0.5,
        "b": randn(3) * 0.5,
        "late": randn(2, 2),
        "late_target": randn(2, 2),
        "unused": randn(3),
    }


def loss_at(step, problem, params):
    W, b, late = params["W"], params["b"], params["late"]
    d = problem["x"] @ W.T + b - problem["y"]
    loss = (d * d).mean()
    if step >= LATE_FROM:
        e = late - problem["late_target"]
        loss = loss + (e * e).sum() * 0.5
    return loss


def build_optimizer(kind, params, c):
    lr = c["lr"]
    if kind == "sgd":
        return torch.optim.SGD(
            params,
            lr=lr,
            momentum=c.get("momentum", 0.0),
            dampening=c.get("dampening", 0.0),
            nesterov=c.get("nesterov", False),
            weight_decay=c.get("weight_decay", 0.0),
            foreach=False,
        )
    if kind in ("adam", "adamw"):
        cls = torch.optim.Adam if kind == "adam" else torch.optim.AdamW
        return cls(
            params,
            lr=lr,
            betas=tuple(c.get("betas", (0.9, 0.999))),
            eps=c.get("eps", 1e-8),
            weight_decay=c.get("weight_decay", 0.0 if kind == "adam" else 1e-2),
            amsgrad=c.get("amsgrad", False),
            foreach=False,
        )
    if kind == "rmsprop":
        return torch.optim.RMSprop(
            params,
            lr=lr,
            alpha=c.get("alpha", 0.99),
            eps=c.get("eps", 1e-8),
            weight_decay=c.get("weight_decay", 0.0),
            momentum=c.get("momentum", 0.0),
            centered=c.get("centered", False),
            foreach=False,
        )
    raise ValueError(kind)


def build_scheduler(spec, opt):
    if spec["kind"] == "step":
        return torch.optim.lr_scheduler.StepLR(opt, step_size=spec["step_size"], gamma=spec["gamma"])
    if spec["kind"] == "cosine":
        return torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=spec["t_max"], eta_min=spec["eta_min"])
    if spec["kind"] == "lambda":
        return torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda=LAMBDAS[spec["fn"]])
    raise ValueError(spec)


def state_of(opt, params):
    """The optimizer's per-parameter state, keyed like ember's OptimizerState."""
    out = {}
    for i, p in enumerate(params):
        for k, v in opt.state.get(p, {}).items():
            if v is None:
                continue
            if k == "step":
                out[f"state.{i}.step"] = float(v)
            else:
                out[f"state.{i}.{k}"] = encode(v)
    return out


OPTIMIZERS = [
    # (name, optimizer, config, dtype, scheduler)
    ("sgd_plain", "sgd", {"lr": 0.1}, torch.float64, None),
    ("sgd_momentum", "sgd", {"lr": 0.05, "momentum": 0.9}, torch.float64, None),
    ("sgd_nesterov", "sgd", {"lr": 0.05, "momentum": 0.9, "nesterov": True}, torch.float64, None),
    ("sgd_dampening", "sgd", {"lr": 0.05, "momentum": 0.9, "dampening": 0.5}, torch.float64, None),
    ("sgd_weight_decay", "sgd", {"lr": 0.05, "weight_decay": 0.1}, torch.float64, None),
    ("sgd_momentum_weight_decay", "sgd", {"lr": 0.05, "momentum": 0.8, "weight_decay": 0.1}, torch.float64, None),
    ("adam", "adam", {"lr": 0.05}, torch.float64, None),
    ("adam_amsgrad", "adam", {"lr": 0.05, "betas": [0.9, 0.8], "amsgrad": True}, torch.float64, None),
    ("adam_weight_decay", "adam", {"lr": 0.05, "weight_decay": 0.1}, torch.float64, None),
    (
        "adam_amsgrad_weight_decay",
        "adam",
        {"lr": 0.03, "betas": [0.8, 0.9], "eps": 1e-6, "weight_decay": 0.2, "amsgrad": True},
        torch.float64,
        None,
    ),
    ("adamw", "adamw", {"lr": 0.05, "weight_decay": 0.1}, torch.float64, None),
    ("adamw_amsgrad", "adamw", {"lr": 0.05, "betas": [0.9, 0.8], "weight_decay": 0.05, "amsgrad": True}, torch.float64, None),
    ("rmsprop", "rmsprop", {"lr": 0.01}, torch.float64, None),
    ("rmsprop_centered", "rmsprop", {"lr": 0.01, "centered": True}, torch.float64, None),
    ("rmsprop_momentum", "rmsprop", {"lr": 0.01, "momentum": 0.9}, torch.float64, None),
    (
        "rmsprop_centered_momentum_weight_decay",
        "rmsprop",
        {"lr": 0.005, "alpha": 0.9, "eps": 1e-6, "weight_decay": 0.1, "momentum": 0.5, "centered": True},
        torch.float64,
        None,
    ),
    # The f32 kernels, on the same problem rounded to float32.
    ("sgd_nesterov_weight_decay_f32", "sgd", {"lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 0.1}, torch.float32, None),
    ("adam_amsgrad_weight_decay_f32", "adam", {"lr": 0.05, "betas": [0.9, 0.8], "weight_decay": 0.1, "amsgrad": True}, torch.float32, None),
    ("adamw_f32", "adamw", {"lr": 0.05, "weight_decay": 0.1}, torch.float32, None),
    ("rmsprop_centered_momentum_f32", "rmsprop", {"lr": 0.01, "momentum": 0.9, "centered": True}, torch.float32, None),
    # Schedulers driving an optimizer's lr between steps.
    ("sgd_momentum_step_lr", "sgd", {"lr": 0.1, "momentum": 0.9}, torch.float64, {"kind": "step", "step_size": 5, "gamma": 0.5}),
    ("adam_cosine", "adam", {"lr": 0.1}, torch.float64, {"kind": "cosine", "t_max": 8, "eta_min": 0.01}),
    ("rmsprop_lambda", "rmsprop", {"lr": 0.02}, torch.float64, {"kind": "lambda", "fn": "warmup_4"}),
]

SCHEDULERS = [
    ("step_lr", {"kind": "step", "step_size": 3, "gamma": 0.5}, 0.1, 12),
    ("step_lr_gamma_0.1", {"kind": "step", "step_size": 1, "gamma": 0.1}, 1.0, 6),
    ("cosine", {"kind": "cosine", "t_max": 10, "eta_min": 0.001}, 0.1, 35),
    ("cosine_eta_min_0", {"kind": "cosine", "t_max": 7, "eta_min": 0.0}, 0.05, 15),
    ("lambda_exp", {"kind": "lambda", "fn": "exp_0.9"}, 0.2, 10),
    ("lambda_warmup", {"kind": "lambda", "fn": "warmup_4"}, 1.0, 8),
    ("lambda_mixed", {"kind": "lambda", "fn": "halve_every_3_plus_linear"}, 0.3, 10),
]

CLIPS = [
    # (name, dtype, max_norm, norm_type)
    ("l2_clipped", torch.float64, 1.0, 2.0),
    ("l2_not_clipped", torch.float64, 100.0, 2.0),
    ("inf_clipped", torch.float64, 0.5, math.inf),
    ("inf_not_clipped", torch.float64, 10.0, math.inf),
    ("l1_clipped", torch.float64, 2.0, 1.0),
    ("l3_clipped", torch.float64, 1.0, 3.0),
    ("l2_clipped_f32", torch.float32, 1.0, 2.0),
]


def run_optimizer(problem, name, kind, config, dtype, sched_spec):
    params = {k: problem[k].to(dtype).clone().requires_grad_(True) for k in PARAM_NAMES}
    plist = [params[k] for k in PARAM_NAMES]
    consts = {k: problem[k].to(dtype) for k in ("x", "y", "late_target")}
    opt = build_optimizer(kind, plist, config)
    sched = build_scheduler(sched_spec, opt) if sched_spec else None
    trajectory = {k: [] for k in PARAM_NAMES}
    lrs = []
    for step in range(1, STEPS + 1):
        opt.zero_grad(set_to_none=True)
        loss_at(step, consts, params).backward()
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        if sched:
            sched.step()
        for k in PARAM_NAMES:
            trajectory[k].append(encode(params[k]))
    return {
        "name": name,
        "optimizer": kind,
        "config": config,
        "dtype": DTYPES[dtype],
        "scheduler": sched_spec,
        "lrs": lrs,
        "trajectory": trajectory,
        "state": state_of(opt, plist),
    }


def run_scheduler(name, spec, base_lr, epochs):
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=base_lr)
    sched = build_scheduler(spec, opt)
    lrs = [opt.param_groups[0]["lr"]]
    for _ in range(epochs):
        opt.step()
        sched.step()
        lrs.append(opt.param_groups[0]["lr"])
    return {"name": name, "scheduler": spec, "base_lr": base_lr, "lrs": lrs}


def run_clip(name, dtype, max_norm, norm_type):
    g = torch.Generator().manual_seed(7)
    shapes = {"W": (3, 4), "b": (3,), "late": (2, 2), "unused": (3,)}
    params = {k: torch.zeros(s, dtype=dtype, requires_grad=True) for k, s in shapes.items()}
    grads = {}
    for k in ("W", "b", "late"):
        params[k].grad = torch.randn(shapes[k], generator=g, dtype=torch.float64).to(dtype)
        grads[k] = encode(params[k].grad)
    grads["unused"] = None
    total = torch.nn.utils.clip_grad_norm_([params[k] for k in PARAM_NAMES], max_norm, norm_type=norm_type)
    clipped = {k: (encode(params[k].grad) if params[k].grad is not None else None) for k in PARAM_NAMES}
    return {
        "name": name,
        "dtype": DTYPES[dtype],
        "max_norm": max_norm,
        "norm_type": "inf" if math.isinf(norm_type) else norm_type,
        "grads": grads,
        "total_norm": float(total),
        "clipped": clipped,
    }


def render(doc):
    """JSON with one entry per line, small enough to diff."""

    def dump(v):
        return json.dumps(v, separators=(",", ":"))

    lines = ["{"]
    keys = list(doc.keys())
    for i, key in enumerate(keys):
        end = "," if i + 1 < len(keys) else ""
        v = doc[key]
        if isinstance(v, list):
            body = ",\n".join(f"  {dump(e)}" for e in v)
            lines.append(f" {dump(key)}: [\n{body}\n ]{end}")
        elif isinstance(v, dict):
            body = ",\n".join(f"  {dump(k)}: {dump(e)}" for k, e in v.items())
            lines.append(f" {dump(key)}: {{\n{body}\n }}{end}")
        else:
            lines.append(f" {dump(key)}: {dump(v)}{end}")
    lines += ["}", ""]
    text = "\n".join(lines)
    assert json.loads(text) == doc, "render must produce the same document"
    return text


def main():
    # The schedulers-only runs step an optimizer without gradients; that is deliberate.
    warnings.filterwarnings("ignore", category=UserWarning)
    torch.set_num_threads(1)
    problem = make_problem()
    doc = {
        "generator": "tools/parity/optim.py",
        "torch": torch.__version__,
        "steps": STEPS,
        "late_from": LATE_FROM,
        "problem": {k: encode(v) for k, v in problem.items()},
        "optimizers": [run_optimizer(problem, *o) for o in OPTIMIZERS],
        "schedulers": [run_scheduler(*s) for s in SCHEDULERS],
        "clip": [run_clip(*c) for c in CLIPS],
    }
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as fh:
        fh.write(render(doc))
    n = len(doc["optimizers"]) + len(doc["schedulers"]) + len(doc["clip"])
    print(f"wrote {n} scenarios to {os.path.relpath(OUT)} ({os.path.getsize(OUT)} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
