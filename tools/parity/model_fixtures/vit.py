"""ViT fixtures in Hugging Face's layout (`ViTModel`, `ViTForImageClassification`):
`config.json` and `save_pretrained` make the checkpoints self-describing.

- `cls/`: `ViTForImageClassification` (keys under `vit.`, `classifier`, no pooler), image
  16, patch 4, 3 heads of 10, 2 layers, `gelu`, 4 labels, f32.
- `base/`: `ViTModel` (no prefix, with the pooler), image 12, patch 4, 2 channels, 3 heads
  of 6, `qkv_bias` off, `gelu_new`, `layer_norm_eps` 1e-6, a bf16 checkpoint; expected
  outputs are the bf16 weights' computed in f32.
"""

import os

import torch
from transformers import ViTConfig, ViTForImageClassification, ViTModel

from .common import dir_size, save_tensors, seed


def randomize(model):
    """Norm weights away from 1 and tokens away from their initial values."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layernorm" in name or "cls_token" in name or "position_embeddings" in name:
                p.add_(torch.randn_like(p) * 0.2)


def make(out):
    os.makedirs(out, exist_ok=True)
    d = os.path.join(out, "cls")
    seed(4)
    config = ViTConfig(
        hidden_size=30, num_hidden_layers=2, num_attention_heads=3, intermediate_size=37, hidden_act="gelu",
        image_size=16, patch_size=4, num_channels=3, num_labels=4, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = ViTForImageClassification(config).eval()
    randomize(model)
    model.save_pretrained(d)
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        o = model(pixel_values=x, output_hidden_states=True)
    save_tensors(os.path.join(d, "expected.safetensors"), {
        "pixel_values": x, "last_hidden_state": model.vit(pixel_values=x).last_hidden_state, "logits": o.logits,
    })

    d = os.path.join(out, "base")
    seed(5)
    config = ViTConfig(
        hidden_size=18, num_hidden_layers=1, num_attention_heads=3, intermediate_size=20, hidden_act="gelu_new",
        image_size=12, patch_size=4, num_channels=2, qkv_bias=False, layer_norm_eps=1e-6,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )
    model = ViTModel(config).eval()
    randomize(model)
    model = model.to(torch.bfloat16)
    model.save_pretrained(d)
    model = model.float()
    x = torch.randn(3, 2, 12, 12)
    with torch.no_grad():
        o = model(pixel_values=x)
    save_tensors(os.path.join(d, "expected.safetensors"), {
        "pixel_values": x, "last_hidden_state": o.last_hidden_state, "pooler_output": o.pooler_output,
    })
    print(f"vit: {dir_size(out)} bytes")
