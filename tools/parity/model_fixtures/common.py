"""What every architecture's fixture module shares: seeding and writing tensors."""

import json
import os

import torch
from safetensors.torch import save_file


def seed(s):
    """Seeds torch's generators so that the tiny random checkpoints are reproducible."""
    torch.manual_seed(s)


def save_tensors(path, tensors):
    """Writes a dict of tensors (made contiguous, detached) as safetensors."""
    save_file({k: v.detach().contiguous() for k, v in tensors.items()}, path)


def save_json(path, value):
    """Writes `value` as indented JSON."""
    with open(path, "w") as f:
        json.dump(value, f, indent=1)
        f.write("\n")


def greedy_with_margins(logits_per_step):
    """The greedy token and the top-2 logit margin of each step's last-position logits."""
    tokens, margins = [], []
    for logits in logits_per_step:
        top = torch.topk(logits.double(), 2, dim=-1)
        tokens.append(top.indices[..., 0].tolist())
        margins.append((top.values[..., 0] - top.values[..., 1]).tolist())
    return tokens, margins


def dir_size(path):
    """Total bytes under `path`, to keep fixtures small."""
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
