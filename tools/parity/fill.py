#!/usr/bin/env python3
"""PyTorch's side of the fill parity test: which values `torch.full`, `full_like`,
`Tensor.fill_`, `Tensor.masked_fill`, `Tensor.masked_fill_` and `F.pad` accept for each
dtype, and what they store (in the tensor's own dtype: none of them promotes it), written
to tools/parity/fixtures/fill.tsv, which crates/tensor/tests/parity_fill.rs replays with
ember and compares.

Regenerate (from the repository root, with any Python that has torch; CI never runs this):

    .venv-torch/bin/python tools/parity/fill.py

Each line is `op <TAB> dtype <TAB> kind <TAB> value <TAB> result`: `kind` is `int` or
`float` (the Python type of the value, which is what decides the conversion), `value` and
`result` are Python `repr`s, and `result` is `error` where PyTorch refused the value.
"""

import os

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "fill.tsv")

DTYPES = {"u8": torch.uint8, "i64": torch.int64, "f32": torch.float32, "f64": torch.float64}

INTS = [0, 1, -1, 7, -7, 254, 255, 256, -255, -256, 300, -300, 2**31, 2**53 + 1, 2**63 - 1, -(2**63)]
FLOATS = [
    0.0, -0.0, 0.5, -0.5, 2.7, -2.7, -0.999, -1.0, 255.0, 255.9, 256.0, -255.0, 1e10, -1e10,
    9.2e18, 9.3e18, -9.2e18, -9.3e18, 3.4e38, 3.5e38, -3.5e38, 1e300, -1e300, 1e-300,
    float("inf"), float("-inf"), float("nan"),
]


def store(op, dtype, value):
    """What `op` stores for `value` in a tensor of `dtype`, as a repr, or `error`."""
    try:
        if op == "full":
            t = torch.full((2,), value, dtype=dtype)
        elif op == "full_like":
            t = torch.full_like(torch.zeros(2, dtype=dtype), value)
        elif op == "fill_":
            t = torch.zeros(2, dtype=dtype).fill_(value)
        elif op == "pad":
            t = torch.nn.functional.pad(torch.zeros(2, dtype=dtype), (1, 0), value=value)
        elif op == "masked_fill":
            t = torch.zeros(2, dtype=dtype).masked_fill(torch.tensor([True, False]), value)
        else:
            t = torch.zeros(2, dtype=dtype).masked_fill_(torch.tensor([True, False]), value)
    except (RuntimeError, OverflowError):
        return "error"
    # The replay checks that ember keeps the dtype too.
    assert t.dtype == dtype, f"{op} of {dtype} with {value!r} gave {t.dtype}"
    return repr(t[0].item())


def main():
    lines = []
    for op in ["full", "full_like", "fill_", "masked_fill", "masked_fill_", "pad"]:
        for name, dtype in DTYPES.items():
            for kind, values in [("int", INTS), ("float", FLOATS)]:
                for v in values:
                    lines.append(f"{op}\t{name}\t{kind}\t{v!r}\t{store(op, dtype, v)}\n")
    with open(OUT, "w") as f:
        f.writelines(lines)
    print(f"wrote {len(lines)} cases to {OUT}")


if __name__ == "__main__":
    main()
