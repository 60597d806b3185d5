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
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else "runs/onnx"
    tensors = load_file(os.path.join(folder, "onnx_check.safetensors"))
    names = sorted({k.rsplit(".", 1)[0] for k in tensors})
    worst = 0.0
    for name in names:
        path = os.path.join(folder, f"{name}.onnx")
        onnx.checker.check_model(onnx.load(path), full_check=True)
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        feed = {session.get_inputs()[0].name: tensors[f"{name}.input"]}
        got = session.run(None, feed)[0]
        want = tensors[f"{name}.expected"]
        diff = float(np.abs(got - want).max())
        same = bool((got.argmax(-1) == want.argmax(-1)).all())
        print(f"{name}: onnx.checker ok; ONNX Runtime vs ember: max abs diff {diff:.3e}, predictions equal: {same}")
        worst = max(worst, diff if same else float("inf"))
    sys.exit(0 if worst <= 1e-5 else 1)


if __name__ == "__main__":
    main()
