#!/usr/bin/env python3
"""PyTorch's side of the checkpoint tests (crates/nn/tests/checkpoint_pt.rs): PyTorch's
`torch.save` files that ember must read, and PyTorch reading the files ember writes.

Regenerate (from the repository root, with any Python that has torch; CI never runs this),
in three steps, because the middle one is ember's:

    .venv-torch/bin/python tools/parity/checkpoint.py torch
    EMBER_WRITE_PT_FIXTURES=1 cargo test -p ember-nn --test checkpoint_pt
    .venv-torch/bin/python tools/parity/checkpoint.py check

`torch` writes to tools/parity/fixtures/checkpoint/:
- layers.pt: the `state_dict()` of one instance of every layer ember has (a ModuleDict, so
  the names are `<layer>.<parameter>`), seeded, with every buffer set to random values
  (running statistics, `num_batches_tracked`) so that nothing is left at its default.
- adam.pt, sgd.pt: the `state_dict()` of Adam and SGD (momentum) after three steps on the
  linear layer of the zoo, for ember's optimizers to load; adam_step.pt and sgd_step.pt
  hold the input, the parameters after those steps and after a fourth, which ember takes
  from the loaded state.
- values.pt and values.json: plain data ember must read (views with strides and offsets,
  storages shared by two tensors, int32/int16/int8/bool tensors, nested containers, a
  0-d tensor) and what it holds, as JSON.

ember's test then writes ember_layers.pt (the zoo's state dict after loading layers.pt)
and ember_adam.pt; `check` loads them with `torch.load(weights_only=True)`, into the zoo
with `load_state_dict(strict=True)` and into Adam, verifies names, dtypes, shapes and
values, and writes what PyTorch saves back as roundtrip.pt, which ember's test reads and
compares bit for bit with what it wrote.
"""

import json
import os
import sys

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "checkpoint")


def zoo():
    """One instance of every layer with parameters or buffers that ember has, under the
    names the Rust test gives them."""
    tl = dict(dim_feedforward=16, dropout=0.0, batch_first=True)
    return nn.ModuleDict(
        {
            "linear": nn.Linear(4, 3),
            "conv1d": nn.Conv1d(2, 3, 3),
            "conv2d": nn.Conv2d(2, 4, 3),
            "conv_t1d": nn.ConvTranspose1d(3, 2, 3),
            "conv_t2d": nn.ConvTranspose2d(3, 2, 3),
            "bn1d": nn.BatchNorm1d(3),
            "bn2d": nn.BatchNorm2d(4),
            "gn": nn.GroupNorm(2, 4),
            "inorm": nn.InstanceNorm2d(3, affine=True, track_running_stats=True),
            "ln": nn.LayerNorm(4),
            "rms": nn.RMSNorm(4),
            "emb": nn.Embedding(5, 3),
            "rnn": nn.RNN(3, 4),
            "lstm": nn.LSTM(3, 4, num_layers=2, bidirectional=True, proj_size=2),
            "gru": nn.GRU(3, 4),
            "rnn_cell": nn.RNNCell(3, 4),
            "lstm_cell": nn.LSTMCell(3, 4),
            "gru_cell": nn.GRUCell(3, 4),
            "mha": nn.MultiheadAttention(8, 2),
            "enc": nn.TransformerEncoderLayer(8, 2, **tl),
            "dec": nn.TransformerDecoderLayer(8, 2, **tl),
        }
    )


def randomise_buffers(model):
    g = torch.Generator().manual_seed(1)
    for name, b in model.named_buffers():
        if b.dtype == torch.long:
            b.fill_(7)
        else:
            b.copy_(torch.rand(b.shape, generator=g, dtype=b.dtype) + 0.5)


def optimizer_fixtures(linear):
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(2))
    for name, make in [
        ("adam", lambda p: torch.optim.Adam(p, lr=0.01, betas=(0.8, 0.99), eps=1e-7, weight_decay=0.1)),
        ("sgd", lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01, nesterov=False)),
    ]:
        layer = nn.Linear(4, 3)
        layer.load_state_dict(linear.state_dict())
        opt = make(layer.parameters())

        def step():
            opt.zero_grad()
            (layer(x) ** 2).sum().backward()
            opt.step()

        for _ in range(3):
            step()
        torch.save(opt.state_dict(), os.path.join(OUT, f"{name}.pt"))
        before = {k: v.clone() for k, v in layer.state_dict().items()}
        step()
        # The input, the parameters after three steps and after a fourth, so that ember can
        # load the state and take the fourth step itself.
        torch.save({"x": x, "before": before, "after": layer.state_dict()}, os.path.join(OUT, f"{name}_step.pt"))


def values():
    base = torch.arange(24, dtype=torch.float64).reshape(4, 6)
    shared = torch.arange(10, dtype=torch.float32)
    data = {
        "transposed": base.t(),
        "strided": base[1:, ::2],
        "shared_whole": shared,
        "shared_tail": shared[3:],
        "int32": torch.tensor([-3, 0, 2**31 - 1], dtype=torch.int32),
        "int16": torch.tensor([-300, 7], dtype=torch.int16),
        "int8": torch.tensor([-128, 5], dtype=torch.int8),
        "uint8": torch.tensor([0, 255], dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]),
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 3),
        "nested": {"list": [1, -2, 2**40, 1.5, None, True, "text"], "tuple": (0.9, 0.999), 3: "int key"},
    }
    torch.save(data, os.path.join(OUT, "values.pt"))

    def describe(v):
        if isinstance(v, torch.Tensor):
            return {"shape": list(v.shape), "values": v.reshape(-1).to(torch.float64).tolist()}
        if isinstance(v, dict):
            return {"dict": [[describe(k), describe(x)] for k, x in v.items()]}
        if isinstance(v, (list, tuple)):
            return {type(v).__name__: [describe(x) for x in v]}
        return {type(v).__name__: v}

    with open(os.path.join(OUT, "values.json"), "w") as f:
        json.dump(describe(data), f, indent=1)
        f.write("\n")


def make_torch_fixtures():
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(0)
    model = zoo()
    randomise_buffers(model)
    torch.save(model.state_dict(), os.path.join(OUT, "layers.pt"))
    optimizer_fixtures(model["linear"])
    values()
    print("wrote layers.pt, adam.pt, sgd.pt, values.pt; now run the Rust test with EMBER_WRITE_PT_FIXTURES=1")


def check_ember_files():
    theirs = torch.load(os.path.join(OUT, "layers.pt"), weights_only=True)
    ours = torch.load(os.path.join(OUT, "ember_layers.pt"), weights_only=True)
    assert list(ours.keys()) == list(theirs.keys()), "ember's names or their order differ"
    for k in theirs:
        a, b = theirs[k], ours[k]
        assert a.dtype == b.dtype and a.shape == b.shape, f"{k}: {b.dtype}{list(b.shape)} vs {a.dtype}{list(a.shape)}"
        assert torch.equal(a, b), f"{k}: values differ"
    model = zoo()
    model.load_state_dict(ours, strict=True)

    opt_state = torch.load(os.path.join(OUT, "ember_adam.pt"), weights_only=True)
    layer = nn.Linear(4, 3)
    layer.load_state_dict(torch.load(os.path.join(OUT, "adam_step.pt"), weights_only=True)["before"])
    opt = torch.optim.Adam(layer.parameters(), lr=0.01, betas=(0.8, 0.99), eps=1e-7, weight_decay=0.1)
    opt.load_state_dict(opt_state)
    reference = torch.load(os.path.join(OUT, "adam.pt"), weights_only=True)
    for i, s in reference["state"].items():
        for name, t in s.items():
            assert torch.equal(opt.state_dict()["state"][i][name], t), f"adam state {i}.{name} differs"

    torch.save(model.state_dict(), os.path.join(OUT, "roundtrip.pt"))
    print("PyTorch read ember_layers.pt (strict) and ember_adam.pt; wrote roundtrip.pt")


if __name__ == "__main__":
    step = sys.argv[1] if len(sys.argv) > 1 else "torch"
    if step == "torch":
        make_torch_fixtures()
    elif step == "check":
        check_ember_files()
    else:
        sys.exit(f"unknown step {step!r}: use `torch` or `check`")
