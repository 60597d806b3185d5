#!/usr/bin/env python3
"""PyTorch's side of the small-ResNet parity test (crates/nn/tests/parity_resnet.rs).

A ResNet-style network (a conv-BN-ReLU stem with max pooling, a basic residual block, a
strided block with a 1x1 conv-BN downsample, global average pooling and a linear head), in
float64. Its state_dict (with running statistics set away from their defaults, so that
evaluation mode is tested on real statistics) goes to
tools/parity/fixtures/resnet_state.safetensors; the inputs and everything PyTorch computes
from them go to tools/parity/fixtures/resnet_expected.safetensors:

- `train.*`: one forward in training mode: the logits, the cross-entropy loss, the gradient
  of every parameter (`train.grad.<name>`) and of the input, and the running statistics
  after the step (`train.state.<buffer name>`);
- `eval.*`: then, in evaluation mode on a second input: logits, loss and gradients.

Regenerate (from the repository root; CI never runs this):

    .venv-torch/bin/python tools/parity/resnet.py
"""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
STATE = os.path.join(HERE, "fixtures", "resnet_state.safetensors")
EXPECTED = os.path.join(HERE, "fixtures", "resnet_expected.safetensors")


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + identity)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.layer1 = Block(8, 8, 1)
        self.layer2 = Block(8, 16, 2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.bn1(self.conv1(x))))
        x = self.layer2(self.layer1(x))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def main():
    torch.manual_seed(0)
    net = Net().double()
    with torch.no_grad():
        for name, b in net.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(torch.randn_like(b) * 0.1)
            elif name.endswith("running_var"):
                b.copy_(torch.rand_like(b) + 0.5)
            elif name.endswith("num_batches_tracked"):
                b.fill_(3)
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, STATE)

    out = {}
    x = torch.randn(4, 3, 16, 16, dtype=torch.float64, requires_grad=True)
    target = torch.tensor([3, 0, 9, 5])
    out["train.input"] = x.detach().clone()
    out["train.target"] = target
    net.train()
    logits = net(x)
    loss = F.cross_entropy(logits, target)
    loss.backward()
    out["train.logits"] = logits.detach()
    out["train.loss"] = loss.detach()
    out["train.grad.input"] = x.grad.detach()
    for name, p in net.named_parameters():
        out[f"train.grad.{name}"] = p.grad.detach().clone()
    for name, b in net.named_buffers():
        out[f"train.state.{name}"] = b.detach().clone()

    net.zero_grad()
    net.eval()
    x2 = torch.randn(3, 3, 16, 16, dtype=torch.float64, requires_grad=True)
    target2 = torch.tensor([1, 7, 2])
    out["eval.input"] = x2.detach().clone()
    out["eval.target"] = target2
    logits = net(x2)
    loss = F.cross_entropy(logits, target2)
    loss.backward()
    out["eval.logits"] = logits.detach()
    out["eval.loss"] = loss.detach()
    out["eval.grad.input"] = x2.grad.detach()
    for name, p in net.named_parameters():
        out[f"eval.grad.{name}"] = p.grad.detach().clone()
    save_file({k: v.contiguous() for k, v in out.items()}, EXPECTED)
    print(f"wrote {STATE} and {EXPECTED} ({len(out)} tensors)")


if __name__ == "__main__":
    main()
