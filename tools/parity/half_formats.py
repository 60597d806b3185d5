#!/usr/bin/env python3
"""PyTorch's side of the 16-bit file-format tests (crates/io/tests/half_formats.rs and
crates/nn/tests/half_state.rs): float16 and bfloat16 tensors in `torch.save` checkpoints
and safetensors files, both ways.

Regenerate (from the repository root, with any Python that has torch; CI never runs this),
in three steps, because the middle one is ember's:

    .venv-torch/bin/python tools/parity/half_formats.py torch
    EMBER_WRITE_HALF_FIXTURES=1 cargo test -p ember-io --test half_formats
    .venv-torch/bin/python tools/parity/half_formats.py check

`torch` writes to tools/parity/fixtures/half/:
- state.pt: `torch.save` of a state dict holding float16, bfloat16, float32, int64 and
  bool tensors: special values (subnormals, the largest finite value, infinities, NaN,
  -0.0), a 0-d bfloat16, and float16 views of one shared storage (a transpose, and a slice
  with an offset).
- state.safetensors: the contiguous tensors of state.pt as a safetensors file. The
  `safetensors` package is used when installed; otherwise the file is written by hand (an
  8-byte little-endian header length, the JSON header padded with spaces to a multiple of
  8 bytes, then the data), which is the format's whole definition.
- model_bf16.pt: `torch.save(model.bfloat16().state_dict())` of a seeded Linear(3, 2) +
  BatchNorm1d(2), whose `num_batches_tracked` stays int64.
- values.json: every tensor's dtype, shape and bit patterns (uint16 for the 16-bit floats,
  uint32 for float32), in the file's order, and the model's state after PyTorch's own
  `load_state_dict` into a float32 model (which converts).

ember's tests then write ember_state.pt and ember_state.safetensors from what they read,
and ember_mlp_f16.onnx (an MLP with f16 parameters exported by ember) with its input and
ember's output (ember_mlp_f16_io.safetensors):

    EMBER_WRITE_HALF_FIXTURES=1 cargo test -p ember-onnx --test half

`check` loads the state files with `torch.load(weights_only=True)`, by parsing the
safetensors file and with `safetensors.torch.load_file` when installed, and verifies names,
dtypes, shapes and bits against values.json; with `onnx` and `onnxruntime` installed it
also checks the ONNX file and runs it in ONNX Runtime against ember's output.
"""

import json
import os
import struct
import sys
from collections import OrderedDict

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "half")

ST_DTYPES = {
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.float32: "F32",
    torch.int64: "I64",
    torch.bool: "BOOL",
    torch.uint8: "U8",
}
NAMES = {
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.float32: "f32",
    torch.int64: "i64",
    torch.bool: "bool",
    torch.uint8: "u8",
}


def bits(t):
    """The tensor's values as integers: bit patterns for floats, values otherwise."""
    t = t.contiguous().reshape(-1)
    if t.dtype in (torch.float16, torch.bfloat16):
        return [v & 0xFFFF for v in t.view(torch.int16).tolist()]
    if t.dtype == torch.float32:
        return [v & 0xFFFFFFFF for v in t.view(torch.int32).tolist()]
    if t.dtype == torch.bool:
        return [int(v) for v in t.tolist()]
    return t.tolist()


def describe(sd):
    return [{"name": k, "dtype": NAMES[v.dtype], "shape": list(v.shape), "bits": bits(v)} for k, v in sd.items()]


def state():
    inf, nan = float("inf"), float("nan")
    shared = torch.tensor([0.5, -1.25, 3.0, 1e-3, 2.0**-24, 1000.0], dtype=torch.float16)
    return OrderedDict(
        [
            (
                "half.special",
                torch.tensor([1.5, -2.0, 65504.0, 2.0**-24, -0.0, inf, -inf, nan, 0.1], dtype=torch.float16),
            ),
            (
                "bf16.special",
                torch.tensor([0.1, -3.0e38, 1e-40, inf, nan, -0.0, 1.0 / 3.0, 65536.0], dtype=torch.bfloat16),
            ),
            ("bf16.matrix", torch.arange(-6, 6, dtype=torch.float32).div(7).reshape(3, 4).to(torch.bfloat16)),
            ("bf16.scalar", torch.tensor(-7.5, dtype=torch.bfloat16)),
            ("f32", torch.tensor([0.1, -2.5, 1e-45], dtype=torch.float32)),
            ("steps", torch.tensor([-(2**63), 5, 2**40], dtype=torch.int64)),
            ("mask", torch.tensor([True, False, True])),
            # Views of one float16 storage: a transpose and a slice with an offset.
            ("half.transposed", shared.view(2, 3).t()),
            ("half.offset", shared[2:5]),
        ]
    )


def model():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    with torch.no_grad():
        m[1].running_mean.copy_(torch.tensor([0.3, -0.7]))
        m[1].running_var.copy_(torch.tensor([1.7, 0.45]))
        m[1].num_batches_tracked.fill_(11)
    return m


def write_safetensors(path, sd):
    try:
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in sd.items()}, path, metadata={"format": "pt"})
        return
    except ImportError:
        pass
    header, blobs, offset = {}, [], 0
    for k, v in sd.items():
        data = v.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        header[k] = {"dtype": ST_DTYPES[v.dtype], "shape": list(v.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    """A safetensors file parsed by hand, as (name, dtype name, shape, bits)."""
    by_st = {v: k for k, v in ST_DTYPES.items()}
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    data = raw[8 + n :]
    out = {}
    for k, e in header.items():
        if k == "__metadata__":
            continue
        dtype = by_st[e["dtype"]]
        start, end = e["data_offsets"]
        t = torch.frombuffer(bytearray(data[start:end]), dtype=torch.uint8).view(dtype).reshape(e["shape"])
        out[k] = t
    return out


def torch_side():
    os.makedirs(OUT, exist_ok=True)
    sd = state()
    torch.save(sd, os.path.join(OUT, "state.pt"))
    contiguous = OrderedDict((k, v) for k, v in sd.items() if v.is_contiguous() and v.storage_offset() == 0)
    write_safetensors(os.path.join(OUT, "state.safetensors"), contiguous)

    m = model().bfloat16()
    # BatchNorm's counter stays int64 under .bfloat16(), as ember's Module::to_dtype keeps it.
    assert m[1].num_batches_tracked.dtype == torch.int64
    torch.save(m.state_dict(), os.path.join(OUT, "model_bf16.pt"))
    wide = model()
    wide.load_state_dict(torch.load(os.path.join(OUT, "model_bf16.pt"), weights_only=True))
    assert all(v.dtype in (torch.float32, torch.int64) for v in wide.state_dict().values())
    values = {
        "state": describe(sd),
        "safetensors": [e["name"] for e in describe(contiguous)],
        "model_bf16": describe(m.state_dict()),
        "model_f32_loaded": describe(wide.state_dict()),
    }
    with open(os.path.join(OUT, "values.json"), "w") as f:
        json.dump(values, f, indent=1)
        f.write("\n")
    print(f"wrote {OUT}")


def same(expected, got, what):
    """`got` holds `expected` (names, dtypes, shapes, bits); ember has no bool dtype and
    holds masks as uint8, which it writes back as such."""
    names = [e["name"] for e in expected]
    assert list(got.keys()) == names, f"{what}: names {list(got.keys())} != {names}"
    for e in expected:
        t = got[e["name"]]
        want = "u8" if e["dtype"] == "bool" else e["dtype"]
        assert NAMES[t.dtype] == want, f"{what} {e['name']}: dtype {t.dtype}, want {want}"
        assert list(t.shape) == e["shape"], f"{what} {e['name']}: shape {list(t.shape)}, want {e['shape']}"
        assert bits(t) == e["bits"], f"{what} {e['name']}: bits differ"


def check():
    with open(os.path.join(OUT, "values.json")) as f:
        values = json.load(f)
    pt = torch.load(os.path.join(OUT, "ember_state.pt"), weights_only=True)
    same(values["state"], pt, "ember_state.pt")
    st = read_safetensors(os.path.join(OUT, "ember_state.safetensors"))
    wanted = [e for e in values["state"] if e["name"] in values["safetensors"]]
    # safetensors files list tensors in their data order; compare by name.
    same(wanted, OrderedDict((e["name"], st[e["name"]]) for e in wanted), "ember_state.safetensors")
    try:
        from safetensors.torch import load_file

        loaded = load_file(os.path.join(OUT, "ember_state.safetensors"))
        same(wanted, OrderedDict((e["name"], loaded[e["name"]]) for e in wanted), "safetensors.load_file")
        print("safetensors.torch.load_file reads ember_state.safetensors")
    except ImportError:
        print("safetensors is not installed: ember_state.safetensors checked by the hand parser only")
    print("PyTorch reads ember's 16-bit files bit for bit")
    check_onnx()


def check_onnx():
    """ember's export of an f16 model (ember_mlp_f16.onnx, written by
    crates/onnx/tests/half.rs) through onnx.checker and ONNX Runtime, against ember's own
    output on the same input (ember_mlp_f16_io.safetensors)."""
    # tools/parity/onnx.py, beside this script, would shadow the onnx package.
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]
    try:
        import onnx
        import onnxruntime
    except ImportError:
        print("onnx or onnxruntime is not installed: ember_mlp_f16.onnx not run")
        return
    path = os.path.join(OUT, "ember_mlp_f16.onnx")
    onnx.checker.check_model(onnx.load(path), full_check=True)
    io = read_safetensors(os.path.join(OUT, "ember_mlp_f16_io.safetensors"))
    x, want = io["input"], io["output"]
    assert x.dtype == torch.float16 and want.dtype == torch.float16
    sess = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    (got,) = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})
    got = torch.from_numpy(got)
    assert got.dtype == torch.float16 and got.shape == want.shape, (got.dtype, got.shape)
    # Distance in units in the last place of f16 (adjacent f16 values differ by 1). ember's
    # f16 Linear is a matrix product rounded to f16 and then a bias add rounded again. When
    # last run (ONNX Runtime 1.32) the two differed by 2 ulps: ember's output by 0 from that
    # rounding done in NumPy and by 2 from the exact sums rounded once, ONNX Runtime's by 1
    # from those.
    ulps = (got.view(torch.int16).int() - want.view(torch.int16).int()).abs().max().item()
    diff = (got.float() - want.float()).abs().max().item()
    print(f"ONNX Runtime {onnxruntime.__version__} runs ember's f16 export: max |diff| {diff:g}, {ulps} f16 ulps")
    assert ulps <= 4, f"{ulps} ulps"


if __name__ == "__main__":
    {"torch": torch_side, "check": check}[sys.argv[1] if len(sys.argv) > 1 else "torch"]()
