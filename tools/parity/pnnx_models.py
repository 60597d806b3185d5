#!/usr/bin/env python3
"""PNNX fixtures for crates/pnnx/tests/pnnx.rs: three small PyTorch models converted by
PyTorch's PNNX tool (the `pnnx` wheel from PyPI) to `.pnnx.param` + `.pnnx.bin`, with an
input and PyTorch's output for each, saved with torch.save (which ember reads).

Regenerate (from the repository root; CI never runs this):

    .venv-torch/bin/pip install pnnx
    .venv-torch/bin/python tools/parity/pnnx_models.py

Models: an MLP (flatten, 784-16-10, log_softmax), a CNN (conv, ReLU, BatchNorm after the
ReLU so that PNNX cannot fold it into the convolution, max pool, conv, average pool,
flatten, linear) and a Transformer encoder (2 post-norm layers, d_model 16, 2 heads,
batch_first), all in eval mode.
"""

import os
import shutil
import sys
import tempfile

import pnnx
import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "pnnx")


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(4, 6, 3, stride=1, padding=0, groups=2)
        self.avg = nn.AvgPool2d(2)
        self.fc = nn.Linear(6 * 2 * 2, 10)

    def forward(self, x):
        x = self.pool(self.bn(torch.relu(self.conv1(x))))
        x = self.avg(torch.sigmoid(self.conv2(x)))
        return self.fc(torch.flatten(x, 1))


def models():
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Flatten(), nn.Linear(784, 16), nn.ReLU(), nn.Linear(16, 10), nn.LogSoftmax(1))
    cnn = Cnn()
    with torch.no_grad():
        cnn.bn.running_mean.uniform_(-0.5, 0.5)
        cnn.bn.running_var.uniform_(0.5, 1.5)
        cnn.bn.weight.uniform_(0.5, 1.5)
        cnn.bn.bias.uniform_(-0.5, 0.5)
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    return {
        "mlp": (mlp, torch.rand(3, 1, 28, 28)),
        "cnn": (cnn, torch.rand(2, 1, 12, 12)),
        "encoder": (encoder, torch.rand(2, 5, 16)),
    }


def main():
    os.makedirs(OUT, exist_ok=True)
    io = {}
    for name, (model, x) in models().items():
        model.eval()
        with torch.no_grad():
            y = model(x)
        io[name] = {"input": x, "output": y}
        work = tempfile.mkdtemp()
        traced = os.path.join(work, f"{name}.pt")
        torch.jit.trace(model, x, check_trace=False).save(traced)
        try:
            pnnx.convert(traced, (x,))
        except SyntaxError:
            # pnnx then imports the Python module it generated, which is invalid for
            # nn.Sequential's numeric child names; the .param and .bin are written by then.
            pass
        for ext in ("pnnx.param", "pnnx.bin"):
            shutil.copy(os.path.join(work, f"{name}.{ext}"), os.path.join(OUT, f"{name}.{ext}"))
        shutil.rmtree(work)
    torch.save(io, os.path.join(OUT, "io.pt"))
    print("wrote", ", ".join(sorted(os.listdir(OUT))))


if __name__ == "__main__":
    sys.exit(main())
