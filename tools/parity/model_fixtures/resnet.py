"""ResNet fixtures: torchvision's ResNet layout (a twin of `torchvision.models.resnet`, whose
state-dict keys and block structure it copies, since no torchvision release matches the
installed torch), with a base width so that the tensors stay tiny, saved with
`torch.save(model.state_dict())` as torchvision's `.pth` files are.

- `resnet18_w4.pth`: BasicBlock, layers [2, 2, 2, 2], base width 4, 7 classes, f32.
- `resnet50_w4.pth`: Bottleneck, layers [3, 4, 6, 3], base width 4, 5 classes, f32.
- `resnet18_w4_bf16.pth`: the first one in bf16; its expected logits are the bf16 weights'
  computed in f32.

Batch-norm statistics, weights and biases are random, so that evaluation mode's use of the
running statistics shows. Logits on a fixed `[2, 3, 32, 32]` batch, in eval mode.
"""

import os

import torch
from torch import nn

from .common import dir_size, save_tensors, seed


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, block, layers, num_classes, width=64):
        super().__init__()
        self.inplanes = width
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._make_layer(block, width, layers[0])
        self.layer2 = self._make_layer(block, width * 2, layers[1], 2)
        self.layer3 = self._make_layer(block, width * 4, layers[2], 2)
        self.layer4 = self._make_layer(block, width * 8, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(width * 8 * block.expansion, num_classes)

    def _make_layer(self, block, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * block.expansion, 1, stride, bias=False),
                nn.BatchNorm2d(planes * block.expansion),
            )
        layers = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def randomize_bn(model):
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0, 0.2)
                m.running_mean.normal_(0, 0.2)
                m.running_var.uniform_(0.5, 2.0)
                m.num_batches_tracked.fill_(7)


def make(out):
    os.makedirs(out, exist_ok=True)
    seed(3)
    x = torch.randn(2, 3, 32, 32)
    expected = {"input": x}
    for name, block, layers, classes in [
        ("resnet18_w4", BasicBlock, [2, 2, 2, 2], 7),
        ("resnet50_w4", Bottleneck, [3, 4, 6, 3], 5),
    ]:
        model = ResNet(block, layers, classes, width=4).eval()
        randomize_bn(model)
        torch.save(model.state_dict(), os.path.join(out, f"{name}.pth"))
        with torch.no_grad():
            expected[f"{name}.logits"] = model(x)
        if name == "resnet18_w4":
            model = model.to(torch.bfloat16)
            torch.save(model.state_dict(), os.path.join(out, f"{name}_bf16.pth"))
            with torch.no_grad():
                expected[f"{name}_bf16.logits"] = model.float()(x)
    save_tensors(os.path.join(out, "expected.safetensors"), expected)
    print(f"resnet: {dir_size(out)} bytes")
