#!/usr/bin/env python3
"""PyTorch's side of the ONNX import test (crates/onnx/tests/parity_onnx.rs).

Three small models exported with `torch.onnx.export` (the TorchScript-based exporter,
`dynamo=False`, opset 17, constant folding on), in evaluation mode:

- `onnx_mlp.onnx`: 784-32-10 with ReLU (the quick start's shape, narrowed to stay small);
- `onnx_cnn.onnx`: two 3x3 convolutions with BatchNorm (random running statistics), ReLU,
  max and average pooling, dropout, global average pooling, flatten, a linear head and
  log-softmax, on [N, 1, 12, 12] images;
- `onnx_transformer.onnx`: token embedding, a 2-layer `nn.TransformerEncoder` (d_model 32,
  4 heads, feed-forward 64, GELU, batch_first) and a linear head with softmax, on [N, 6]
  token ids. PyTorch exports GELU with opset 17 in its Erf form.

Every model has a dynamic batch dimension. `onnx_io.safetensors` holds `<model>.input` and
`<model>.expected` for a batch of 3 (the Transformer's input as int64).

Regenerate (from the repository root; CI never runs this):

    /work/main/.venv-torch/bin/python tools/parity/onnx.py
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# This script is itself named onnx.py: without this, `import onnx` inside torch's exporter
# would import it instead of the onnx package.
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

FIXTURES = os.path.join(HERE, "fixtures")


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 4, 3, padding=1),
            nn.BatchNorm2d(4),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(4, 8, 3, stride=1),
            nn.BatchNorm2d(8),
            nn.Sigmoid(),
            nn.AvgPool2d(2),
            nn.Dropout(0.2),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(8, 10)

    def forward(self, x):
        x = self.pool(self.features(x))
        return torch.log_softmax(self.head(torch.flatten(x, 1)), dim=1)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 32)
        layer = nn.TransformerEncoderLayer(
            32, 4, dim_feedforward=64, dropout=0.1, activation="gelu", batch_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(32, 5)

    def forward(self, tokens):
        h = self.encoder(self.embed(tokens))
        return torch.softmax(torch.tanh(self.head(h)), dim=-1)


def export(name, model, x, **options):
    model.eval()
    with torch.no_grad():
        expected = model(x)
    path = os.path.join(FIXTURES, f"onnx_{name}.onnx")
    torch.onnx.export(
        model,
        (x,),
        path,
        dynamo=False,
        opset_version=17,
        do_constant_folding=True,
        input_names=["input"],
        output_names=["output"],
        dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
        **options,
    )
    print(f"{path}: {os.path.getsize(path)} bytes")
    return {f"{name}.input": x.contiguous(), f"{name}.expected": expected.contiguous()}


def main():
    torch.manual_seed(0)
    tensors = {}
    mlp = nn.Sequential(nn.Linear(784, 32), nn.ReLU(), nn.Linear(32, 10))
    tensors.update(export("mlp", mlp, torch.randn(3, 784)))

    cnn = Cnn()
    with torch.no_grad():
        for m in cnn.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn_like(m.running_mean) * 0.1)
                m.running_var.copy_(torch.rand_like(m.running_var) + 0.5)
                m.weight.copy_(torch.randn_like(m.weight) * 0.2 + 1)
                m.bias.copy_(torch.randn_like(m.bias) * 0.1)
    # PRESERVE keeps BatchNormalization nodes (in evaluation mode) instead of folding them
    # into the convolutions, so that the importer's BatchNormalization is tested.
    preserve = {"training": torch.onnx.TrainingMode.PRESERVE}
    tensors.update(export("cnn", cnn, torch.randn(3, 1, 12, 12), **preserve))

    enc = Encoder()
    tensors.update(export("transformer", enc, torch.randint(0, 50, (3, 6))))
    save_file(tensors, os.path.join(FIXTURES, "onnx_io.safetensors"))


if __name__ == "__main__":
    main()
