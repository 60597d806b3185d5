#!/usr/bin/env python3
"""PyTorch's side of the autocast parity test: the output dtype of each operation ember has
an autocast policy for (and a representative set of others) inside `torch.autocast`, on
the CPU (bf16 and f16) and on CUDA (f16 and bf16), written to
tools/parity/fixtures/autocast.tsv, which crates/autograd/tests/autocast_fixture.rs and
crates/nn/tests/autocast_fixture.rs replay with ember on the CPU and on the emulated
`cuda:0`.

Regenerate (from the repository root, with any Python that has torch; CI never runs this):

    /work/venv-torch/bin/python tools/parity/autocast.py

No GPU is needed: the CUDA rows run PyTorch's CUDA autocast dispatch on fake CUDA tensors
(`FakeTensorMode`), with autocast switched on through `torch.set_autocast_enabled`, because
`torch.autocast("cuda")` disables itself without a GPU.

Each line is `op <TAB> device <TAB> autocast dtype <TAB> inputs <TAB> output dtype`, where
`inputs` says which dtype the operation's float inputs have: `f32` (all f32), `low` (all
in the autocast dtype), `mixed` (the first in the autocast dtype, the others f32), `f64`
(all f64). The output is `error` where PyTorch refused the call.
"""

import os

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "autocast.tsv")

NAMES = {torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32", torch.float64: "f64",
         torch.int64: "i64", torch.uint8: "u8", torch.bool: "u8"}


def rnn_weights(r, gates, inp, hidden):
    return [r(gates * hidden, inp), r(gates * hidden, hidden), r(gates * hidden), r(gates * hidden)]


def full_rnn(mode, x, h0, c0, ws):
    if mode == "lstm":
        return torch._VF.lstm(x, (h0, c0), ws, True, 1, 0.0, False, False, False)[0]
    if mode == "gru":
        return torch._VF.gru(x, h0, ws, True, 1, 0.0, False, False, False)[0]
    return torch._VF.rnn_tanh(x, h0, ws, True, 1, 0.0, False, False, False)[0]


def cases(dev):
    """Each op: (its ember name, a function of `r`, which makes a float tensor of a shape
    given the position of the float input (0 first), returning the output)."""
    i64 = lambda *v: torch.tensor(v, dtype=torch.int64, device=dev)
    zeros_i = lambda *s: torch.zeros(*s, dtype=torch.int64, device=dev)
    return {
        "matmul": lambda r: r(0, 2, 3, 4) @ r(1, 4, 3),
        "linear": lambda r: F.linear(r(0, 2, 4), r(1, 5, 4), r(2, 5)),
        "conv1d": lambda r: F.conv1d(r(0, 1, 2, 5), r(1, 3, 2, 2), r(2, 3)),
        "conv2d": lambda r: F.conv2d(r(0, 1, 2, 5, 5), r(1, 3, 2, 2, 2), r(2, 3)),
        "conv_transpose1d": lambda r: F.conv_transpose1d(r(0, 1, 2, 5), r(1, 2, 3, 2), r(2, 3)),
        "conv_transpose2d": lambda r: F.conv_transpose2d(r(0, 1, 2, 5, 5), r(1, 2, 3, 2, 2), r(2, 3)),
        "scaled_dot_product_attention": lambda r: F.scaled_dot_product_attention(r(0, 1, 2, 3, 4), r(1, 1, 2, 3, 4), r(2, 1, 2, 3, 4)),
        "lstm": lambda r: full_rnn("lstm", r(0, 2, 1, 4), r(1, 1, 1, 3), r(1, 1, 1, 3), [r(1, *w.shape) for w in rnn_weights(lambda *s: torch.empty(*s), 4, 4, 3)]),
        "gru": lambda r: full_rnn("gru", r(0, 2, 1, 4), r(1, 1, 1, 3), None, [r(1, *w.shape) for w in rnn_weights(lambda *s: torch.empty(*s), 3, 4, 3)]),
        "rnn_tanh": lambda r: full_rnn("rnn", r(0, 2, 1, 4), r(1, 1, 1, 3), None, [r(1, *w.shape) for w in rnn_weights(lambda *s: torch.empty(*s), 1, 4, 3)]),
        "lstm_cell": lambda r: torch.lstm_cell(r(0, 2, 4), (r(1, 2, 3), r(1, 2, 3)), r(1, 12, 4), r(1, 12, 3), r(1, 12), r(1, 12))[0],
        "gru_cell": lambda r: torch.gru_cell(r(0, 2, 4), r(1, 2, 3), r(1, 9, 4), r(1, 9, 3), r(1, 9), r(1, 9)),
        "rnn_tanh_cell": lambda r: torch.rnn_tanh_cell(r(0, 2, 4), r(1, 2, 3), r(1, 3, 4), r(1, 3, 3), r(1, 3), r(1, 3)),
        "softmax": lambda r: r(0, 2, 3).softmax(-1),
        "log_softmax": lambda r: r(0, 2, 3).log_softmax(-1),
        "layer_norm": lambda r: F.layer_norm(r(0, 2, 4), [4], r(1, 4), r(2, 4)),
        "rms_norm": lambda r: F.rms_norm(r(0, 2, 4), [4], r(1, 4)),
        "group_norm": lambda r: F.group_norm(r(0, 2, 4, 3), 2, r(1, 4), r(2, 4)),
        "batch_norm": lambda r: F.batch_norm(r(0, 2, 4, 3), None, None, r(1, 4), r(2, 4), training=True),
        "instance_norm": lambda r: F.instance_norm(r(0, 2, 4, 3), None, None, r(1, 4), r(2, 4)),
        "cross_entropy": lambda r: F.cross_entropy(r(0, 2, 3), i64(0, 2)),
        "nll_loss": lambda r: F.nll_loss(r(0, 2, 3), i64(0, 2)),
        "mse_loss": lambda r: F.mse_loss(r(0, 2, 3), r(1, 2, 3)),
        "l1_loss": lambda r: F.l1_loss(r(0, 2, 3), r(1, 2, 3)),
        "huber_loss": lambda r: F.huber_loss(r(0, 2, 3), r(1, 2, 3)),
        "binary_cross_entropy": lambda r: F.binary_cross_entropy(r(0, 2, 3).sigmoid(), r(1, 2, 3).sigmoid()),
        "binary_cross_entropy_with_logits": lambda r: F.binary_cross_entropy_with_logits(r(0, 2, 3), r(1, 2, 3)),
        "sum_all": lambda r: r(0, 2, 3).sum(),
        "sum": lambda r: r(0, 2, 3).sum(1),
        "mean": lambda r: r(0, 2, 3).mean(1),
        "prod": lambda r: r(0, 2, 3).prod(1),
        "logsumexp": lambda r: r(0, 2, 3).logsumexp(1),
        "max": lambda r: r(0, 2, 3).amax(1),
        "var": lambda r: r(0, 2, 3).var(1),
        "std": lambda r: r(0, 2, 3).std(1),
        "exp": lambda r: r(0, 2, 3).exp(),
        "log": lambda r: r(0, 2, 3).log(),
        "log1p": lambda r: r(0, 2, 3).log1p(),
        "expm1": lambda r: r(0, 2, 3).expm1(),
        "rsqrt": lambda r: r(0, 2, 3).rsqrt(),
        "recip": lambda r: r(0, 2, 3).reciprocal(),
        "softplus": lambda r: F.softplus(r(0, 2, 3)),
        "pow_scalar": lambda r: r(0, 2, 3).pow(2.0),
        "rpow_scalar": lambda r: torch.pow(2.0, r(0, 2, 3)),
        "pow": lambda r: r(0, 2, 3).pow(r(1, 2, 3)),
        "sqrt": lambda r: r(0, 2, 3).sqrt(),
        "tanh": lambda r: r(0, 2, 3).tanh(),
        "sigmoid": lambda r: r(0, 2, 3).sigmoid(),
        "relu": lambda r: r(0, 2, 3).relu(),
        "gelu": lambda r: F.gelu(r(0, 2, 3)),
        "sin": lambda r: r(0, 2, 3).sin(),
        "cos": lambda r: r(0, 2, 3).cos(),
        "erf": lambda r: r(0, 2, 3).erf(),
        "abs": lambda r: r(0, 2, 3).abs(),
        "add": lambda r: r(0, 2, 3) + r(1, 2, 3),
        "sub": lambda r: r(0, 2, 3) - r(1, 2, 3),
        "mul": lambda r: r(0, 2, 3) * r(1, 2, 3),
        "div": lambda r: r(0, 2, 3) / r(1, 2, 3),
        "maximum": lambda r: torch.maximum(r(0, 2, 3), r(1, 2, 3)),
        "cat": lambda r: torch.cat([r(0, 2, 3), r(1, 2, 3)]),
        "stack": lambda r: torch.stack([r(0, 2, 3), r(1, 2, 3)]),
        "scatter_add": lambda r: r(0, 2, 3).scatter_add(0, zeros_i(2, 3), r(1, 2, 3)),
        "index_select": lambda r: r(0, 2, 3).index_select(0, i64(1, 0)),
        "gather": lambda r: r(0, 2, 3).gather(0, zeros_i(2, 3)),
        "where_cond": lambda r: torch.where(torch.tensor([True, False, True], device=dev), r(0, 2, 3), r(1, 2, 3)),
        "avg_pool2d": lambda r: F.avg_pool2d(r(0, 1, 2, 4, 4), 2),
        "max_pool2d": lambda r: F.max_pool2d(r(0, 1, 2, 4, 4), 2),
        "adaptive_avg_pool2d": lambda r: F.adaptive_avg_pool2d(r(0, 1, 2, 4, 4), 2),
        "interpolate": lambda r: F.interpolate(r(0, 1, 2, 4, 4), scale_factor=2.0),
        "embedding": lambda r: F.embedding(i64(0, 2), r(0, 3, 4)),
    }


def run_all(dev, low):
    rows = []
    for op, f in cases(dev).items():
        for kind in ["f32", "low", "mixed", "f64"]:
            def r(pos, *shape):
                dt = {"f32": torch.float32, "low": low, "f64": torch.float64}.get(kind)
                if dt is None:
                    dt = low if pos == 0 else torch.float32
                return torch.randn(*shape, device=dev).to(dt)
            try:
                out = NAMES[f(r).dtype]
            except (RuntimeError, NotImplementedError, ValueError):
                out = "error"
            rows.append((op, dev, NAMES[low], kind, out))
    return rows


def main():
    torch.manual_seed(0)
    rows = []
    for low in [torch.bfloat16, torch.float16]:
        with torch.autocast("cpu", dtype=low):
            rows += run_all("cpu", low)
    with FakeTensorMode(allow_non_fake_inputs=True):
        for low in [torch.float16, torch.bfloat16]:
            torch.set_autocast_enabled("cuda", True)
            torch.set_autocast_dtype("cuda", low)
            torch.autocast_increment_nesting()
            try:
                rows += run_all("cuda", low)
            finally:
                torch.autocast_decrement_nesting()
                torch.set_autocast_enabled("cuda", False)
    with open(OUT, "w") as f:
        f.write("# op\tdevice\tautocast\tinputs\toutput (tools/parity/autocast.py, torch %s)\n" % torch.__version__)
        for row in rows:
            f.write("\t".join(row) + "\n")
    print(f"wrote {len(rows)} rows to {OUT}")


if __name__ == "__main__":
    main()
