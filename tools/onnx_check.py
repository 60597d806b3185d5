#!/usr/bin/env python3
"""Runs ember's exported ONNX files through ONNX Runtime and compares with ember's outputs.

Not run by CI. First let ember write the files:

    cargo run --release --example onnx -- --out runs/onnx

which writes runs/onnx/mnist_mlp.onnx and runs/onnx/onnx_check.safetensors (`<model>.input`,
`<model>.expected`). Then, from the repository root:

    /work/main/.venv-torch/bin/python tools/onnx_check.py runs/onnx

It checks every model with `onnx.checker` (full check), runs it with ONNX Runtime on the
stored input, prints the largest absolute difference from ember's output and whether the
argmax predictions agree, and exits non-zero above 1e-5.

The ONNX round-trip tests write one model per exported operation the same way, each with
its own `<model>.io.safetensors` (`input`, further inputs `input_1`, ..., `expected`):

    EMBER_ONNX_CHECK_DIR=runs/onnx_ops cargo test -p ember --test onnx_roundtrip
    /work/main/.venv-torch/bin/python tools/onnx_check.py runs/onnx_ops
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402


def cases(folder):
    """`(name, inputs, expected)` for every model in `folder`."""
    shared = os.path.join(folder, "onnx_check.safetensors")
    if os.path.exists(shared):
        tensors = load_file(shared)
        for name in sorted({k.rsplit(".", 1)[0] for k in tensors}):
            yield name, [tensors[f"{name}.input"]], tensors[f"{name}.expected"]
    for file in sorted(os.listdir(folder)):
        if file.endswith(".io.safetensors"):
            tensors = load_file(os.path.join(folder, file))
            inputs = [tensors["input"]]
            while f"input_{len(inputs)}" in tensors:
                inputs.append(tensors[f"input_{len(inputs)}"])
            yield file[: -len(".io.safetensors")], inputs, tensors["expected"]


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else "runs/onnx"
    worst = 0.0
    for name, xs, want in cases(folder):
        path = os.path.join(folder, f"{name}.onnx")
        onnx.checker.check_model(onnx.load(path), full_check=True)
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        got = session.run(None, {i.name: x for i, x in zip(session.get_inputs(), xs)})[0]
        if got.shape != want.shape:
            print(f"{name}: ONNX Runtime gives shape {got.shape}, ember {want.shape}")
            worst = float("inf")
            continue
        diff = float(np.abs(got - want).max())
        same = bool((got.argmax(-1) == want.argmax(-1)).all())
        print(f"{name}: onnx.checker ok; ONNX Runtime vs ember: max abs diff {diff:.3e}, predictions equal: {same}")
        worst = max(worst, diff if same else float("inf"))
    sys.exit(0 if worst <= 1e-5 else 1)


if __name__ == "__main__":
    main()
