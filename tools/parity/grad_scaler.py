#!/usr/bin/env python3
"""PyTorch's side of the gradient-scaler tests (crates/optim/tests/grad_scaler_parity.rs):
`torch.amp.GradScaler("cpu")` driving SGD through scripted iterations with infinite and NaN
gradients in chosen steps, the state files ember must read, and PyTorch reading the file
ember writes.

Regenerate (from the repository root, with any Python that has torch; CI never runs this),
in three steps, because the middle one is ember's:

    .venv-torch/bin/python tools/parity/grad_scaler.py torch
    EMBER_WRITE_PT_FIXTURES=1 cargo test -p ember-optim --test grad_scaler_parity
    .venv-torch/bin/python tools/parity/grad_scaler.py check

`torch` writes to tools/parity/fixtures/grad_scaler/:
- grad_scaler.json: three scenarios. Each has the scaler's settings, SGD's, the initial
  parameters `w` [5] and `b` [2, 3], and its iterations: the inputs `x` and `z` of the loss
  `scaler.scale((w * x).sum() + (b * z).sum())`, the value written into one gradient after
  backward (`inject`: "nan", "inf" or "-inf" at a flat index), whether `unscale_` was
  called before `step`, a manual `update(new_scale)` where there is one, and what PyTorch
  gave: whether the optimizer stepped (`found_inf` was 0), the unscaled gradients, the
  parameters after the step, and the scale and growth tracker after the update. Float
  tensors are lists of their float32 bit patterns, so infinities and NaNs survive JSON and
  the comparison is bit for bit.
  - `powers_of_two`: PyTorch's factors (2 and 0.5), growth interval 3, momentum 0.5; a NaN
    gradient, an overflow in backward (an input of 3e38), and a -inf gradient in a row,
    then growth again.
  - `odd_factors`: scale 1000, growth 1.5, backoff 0.3, interval 2, so the inverse scale
    and every new scale are rounded (to float32), and one manual `update(777.7)`.
  - `ceiling`: scale 2^127 with interval 1: every growth would overflow float32 and is
    dropped.
- checkpoint.pt: `{"optimizer": sgd.state_dict(), "scaler": scaler.state_dict()}` of
  `powers_of_two` after iteration `checkpoint_after`, the usual PyTorch training
  checkpoint, which ember loads to run the remaining iterations.
- scaler_state.pt: `scaler.state_dict()` at the end of `odd_factors`.

ember's test then writes ember_scaler_state.pt (its own state at the end of `odd_factors`);
`check` loads it with `torch.load(weights_only=True)` into `GradScaler("cpu")` and compares
its state dict with PyTorch's own, entry by entry and type by type, and runs one more
iteration from it.
"""

import json
import math
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "grad_scaler")

SCENARIOS = [
    {
        "name": "powers_of_two",
        "scaler": dict(init_scale=256.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=3),
        "sgd": dict(lr=0.0625, momentum=0.5),
        "checkpoint_after": 6,
        # (inject, manual unscale_, huge input, new_scale) per iteration.
        "plan": [
            (None, True, False, None),
            (None, False, False, None),
            (None, False, False, None),
            (("w", 1, "nan"), False, False, None),
            (None, False, True, None),
            (("b", 4, "-inf"), True, False, None),
            (None, False, False, None),
            (None, True, False, None),
            (None, False, False, None),
            (None, False, False, None),
        ],
    },
    {
        "name": "odd_factors",
        "scaler": dict(init_scale=1000.0, growth_factor=1.5, backoff_factor=0.3, growth_interval=2),
        "sgd": dict(lr=0.0625, momentum=0.5),
        "plan": [
            (None, False, False, None),
            (None, False, False, None),
            (("b", 0, "inf"), False, False, None),
            (None, True, False, None),
            (None, False, False, None),
            (("w", 3, "nan"), False, False, None),
            (None, False, False, 777.7),
            (None, False, False, None),
            (None, False, False, None),
        ],
    },
    {
        "name": "ceiling",
        "scaler": dict(init_scale=2.0**127, growth_factor=2.0, backoff_factor=0.5, growth_interval=1),
        "sgd": dict(lr=0.0625, momentum=0.0),
        "plan": [(None, False, False, None)] * 3,
    },
]


def bits(t):
    """A float32 tensor as the list of its bit patterns."""
    return t.detach().reshape(-1).contiguous().view(torch.int32).tolist()


def run(scenario, gen, checkpoint_path=None):
    w = torch.randn(5, generator=gen).requires_grad_()
    b = torch.randn(2, 3, generator=gen).requires_grad_()
    record = {
        "name": scenario["name"],
        "scaler": scenario["scaler"],
        "sgd": scenario["sgd"],
        "w0": bits(w),
        "b0": bits(b),
        "steps": [],
    }
    if "checkpoint_after" in scenario:
        record["checkpoint_after"] = scenario["checkpoint_after"]
    opt = torch.optim.SGD([w, b], **scenario["sgd"])
    scaler = torch.amp.GradScaler("cpu", **scenario["scaler"])
    small = scenario["name"] == "ceiling"
    for i, (inject, manual, huge, new_scale) in enumerate(scenario["plan"]):
        x = torch.randn(5, generator=gen)
        z = torch.randn(2, 3, generator=gen)
        if small:
            # Gradients of 2^127 * x must stay finite in float32.
            x, z = x * 1e-3, z * 1e-3
        if huge:
            x[2] = 3e38
        opt.zero_grad()
        scale_used = scaler.get_scale()
        loss = (w * x).sum() + (b * z).sum()
        scaler.scale(loss).backward()
        if inject is not None:
            name, index, value = inject
            p = w if name == "w" else b
            p.grad.view(-1)[index] = float(value)
        if manual:
            scaler.unscale_(opt)
        scaler.step(opt)
        found_inf = sum(v.item() for v in scaler._found_inf_per_device(opt).values())
        step = {
            "x": bits(x),
            "z": bits(z),
            "inject": None if inject is None else {"param": inject[0], "index": inject[1], "value": inject[2]},
            "manual_unscale": manual,
            "new_scale": new_scale,
            "scale_used": scale_used,
            "stepped": found_inf == 0,
            "grad_w": bits(w.grad),
            "grad_b": bits(b.grad),
            "w": bits(w),
            "b": bits(b),
        }
        if new_scale is None:
            scaler.update()
        else:
            scaler.update(new_scale)
        step["scale_after"] = scaler.get_scale()
        step["tracker_after"] = scaler._get_growth_tracker()
        record["steps"].append(step)
        if checkpoint_path is not None and i + 1 == scenario.get("checkpoint_after"):
            torch.save({"optimizer": opt.state_dict(), "scaler": scaler.state_dict()}, checkpoint_path)
    return record, scaler


def make_torch_fixtures():
    os.makedirs(OUT, exist_ok=True)
    gen = torch.Generator().manual_seed(0)
    records = []
    for scenario in SCENARIOS:
        record, scaler = run(scenario, gen, os.path.join(OUT, "checkpoint.pt"))
        records.append(record)
        if scenario["name"] == "odd_factors":
            torch.save(scaler.state_dict(), os.path.join(OUT, "scaler_state.pt"))
    with open(os.path.join(OUT, "grad_scaler.json"), "w") as f:
        json.dump({"scenarios": records}, f, indent=1)
        f.write("\n")
    skipped = sum(not s["stepped"] for r in records for s in r["steps"])
    print(f"wrote grad_scaler.json ({skipped} skipped steps), checkpoint.pt, scaler_state.pt;")
    print("now run the Rust test with EMBER_WRITE_PT_FIXTURES=1, then `check`")


def check_ember_file():
    theirs = torch.load(os.path.join(OUT, "scaler_state.pt"), weights_only=True)
    ours = torch.load(os.path.join(OUT, "ember_scaler_state.pt"), weights_only=True)
    assert list(ours.keys()) == list(theirs.keys()), f"keys {list(ours.keys())} vs {list(theirs.keys())}"
    for k in theirs:
        assert type(ours[k]) is type(theirs[k]), f"{k}: {type(ours[k]).__name__} vs {type(theirs[k]).__name__}"
        assert ours[k] == theirs[k], f"{k}: {ours[k]} vs {theirs[k]}"
    scaler = torch.amp.GradScaler("cpu")
    scaler.load_state_dict(ours)
    assert scaler.state_dict() == theirs, f"{scaler.state_dict()} vs {theirs}"
    # And it runs: one clean iteration from the loaded state ends where the same iteration
    # from PyTorch's own state does.
    reference = torch.amp.GradScaler("cpu")
    reference.load_state_dict(theirs)
    for s in (scaler, reference):
        w = torch.ones(3, requires_grad=True)
        opt = torch.optim.SGD([w], lr=0.1)
        s.scale((w * 2.0).sum()).backward()
        s.step(opt)
        s.update()
    assert scaler.state_dict() == reference.state_dict(), f"{scaler.state_dict()} vs {reference.state_dict()}"
    assert not math.isnan(scaler.get_scale())
    print(f"PyTorch loaded ember_scaler_state.pt: {ours}; one more iteration gives {scaler.state_dict()}")


if __name__ == "__main__":
    step = sys.argv[1] if len(sys.argv) > 1 else "torch"
    if step == "torch":
        make_torch_fixtures()
    elif step == "check":
        check_ember_file()
    else:
        sys.exit(f"unknown step {step!r}: use `torch` or `check`")
