#!/usr/bin/env python3
"""PyTorch's side of the rotary-embedding and grouped-query-attention parity tests
(crates/nn/tests/parity_rope_gqa.rs), written to tools/parity/fixtures/rope_gqa.safetensors:

- `rope_<name>_cos`, `rope_<name>_sin` [1, P, 16]: transformers' `LlamaRotaryEmbedding`
  (float32) for positions 0..P with rope_theta and rope_scaling of each scenario (P = 40,
  beyond the dynamic scenario's trained 16, where its base changes);
- `gqa_q`, `gqa_k`, `gqa_v`, `gqa_mask` and `gqa_out`, `gqa_dq`, `gqa_dk`, `gqa_dv`
  (float64): `F.scaled_dot_product_attention(q, k, v, attn_mask, enable_gqa=True)` of 6
  query heads over 2 key/value heads, and the gradients of `(out * gqa_r).sum()`; the same
  with `is_causal` as `gqa_causal_*`.

Regenerate (from the repository root; CI never runs this):

    /work/venv-torch/bin/python tools/parity/rope_gqa.py   # any Python with torch + transformers
"""

import os

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "rope_gqa.safetensors")
POSITIONS = 40

ROPE = {
    "default": dict(rope_theta=10000.0, rope_scaling=None),
    "linear": dict(rope_theta=500.0, rope_scaling={"rope_type": "linear", "factor": 4.0}),
    "llama3": dict(rope_theta=10000.0, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                     "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
    "dynamic": dict(rope_theta=10000.0, rope_scaling={"rope_type": "dynamic", "factor": 2.0}),
}


def rope_tables(out):
    for name, kw in ROPE.items():
        # head_dim 16; max_position_embeddings is the dynamic scaling's trained length.
        config = LlamaConfig(hidden_size=64, num_attention_heads=4, max_position_embeddings=16, **kw)
        rope = LlamaRotaryEmbedding(config)
        x = torch.zeros(1, POSITIONS, 16)
        pos = torch.arange(POSITIONS).unsqueeze(0)
        cos, sin = rope(x, pos)
        out[f"rope_{name}_cos"] = cos.float()
        out[f"rope_{name}_sin"] = sin.float()


def gqa(out):
    g = torch.Generator().manual_seed(5)
    q = torch.randn(2, 6, 5, 8, generator=g, dtype=torch.float64)
    k = torch.randn(2, 2, 7, 8, generator=g, dtype=torch.float64)
    v = torch.randn(2, 2, 7, 4, generator=g, dtype=torch.float64)
    mask = torch.rand(2, 1, 5, 7, generator=g) > 0.3
    mask[..., 0] = True  # every query sees a key
    r = torch.randn(2, 6, 5, 4, generator=g, dtype=torch.float64)
    out.update(gqa_q=q, gqa_k=k, gqa_v=v, gqa_mask=mask.to(torch.uint8), gqa_r=r)
    for tag, kwargs in [("gqa", dict(attn_mask=mask)), ("gqa_causal", dict(is_causal=True))]:
        qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
        y = F.scaled_dot_product_attention(qq, kk, vv, enable_gqa=True, **kwargs)
        (y * r).sum().backward()
        out[f"{tag}_out"] = y.detach()
        out[f"{tag}_dq"], out[f"{tag}_dk"], out[f"{tag}_dv"] = qq.grad, kk.grad, vv.grad


def main():
    out = {}
    rope_tables(out)
    gqa(out)
    save_file({k: v.contiguous() for k, v in out.items()}, OUT)
    print(f"wrote {OUT} ({os.path.getsize(OUT) // 1024} KB)")


if __name__ == "__main__":
    main()
