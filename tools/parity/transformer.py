#!/usr/bin/env python3
"""PyTorch's side of the attention and Transformer parity test
(crates/nn/tests/parity_transformer.rs).

Five scenarios in float64 (d_model 16, 2 heads, feed-forward 32, sequences of 5, batch 3,
dropout 0), each stored in tools/parity/fixtures/transformer.safetensors under
`<scenario>.<kind>.<name>`:

- `param.<state_dict name>`: the module's parameters, drawn as randn * 0.3 so that the
  stacked layers differ and every bias is non-zero;
- `input.<name>`: the inputs (`query`/`key`/`value`, `src`, `tgt`/`memory`), the masks
  (boolean masks as uint8, 1 = may not attend, PyTorch's MultiheadAttention convention)
  and `loss_weights` (and `weights_loss_weights` where attention weights are returned);
- `expected.<name>`: the outputs (`output`, `weights`) and `loss = sum(output *
  loss_weights) [+ sum(weights * weights_loss_weights)]`;
- `grad.<name>`: the gradient of that loss for every parameter and every float input.

Regenerate (from the repository root; CI never runs this):

    .venv-torch/bin/python tools/parity/transformer.py
"""

import os

import torch
import torch.nn as nn
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "transformer.safetensors")

D, H, FF, L, B = 16, 2, 32, 5, 3


def randomise(module):
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
    return module


def padding(batch, length):
    """uint8 key padding mask with the last key padded in sequence 1 and the last two in 2."""
    m = torch.zeros(batch, length, dtype=torch.uint8)
    m[1, -1] = 1
    m[2, -2:] = 1
    return m


def causal(n):
    return nn.Transformer.generate_square_subsequent_mask(n, dtype=torch.float64)


def record(out, name, module, inputs, masks, run):
    """Runs `run(**inputs, **masks)` -> (output, weights or None), backpropagates the
    weighted loss and records everything under `name.*`."""
    module = module.double()
    for k, p in module.named_parameters():
        out[f"{name}.param.{k}"] = p.detach().clone()
    leaves = {k: v.detach().clone().requires_grad_(True) for k, v in inputs.items()}
    for k, v in leaves.items():
        out[f"{name}.input.{k}"] = v.detach().clone()
    for k, v in masks.items():
        out[f"{name}.input.{k}"] = v.clone()
    torch_masks = {k: (v.bool() if v.dtype == torch.uint8 else v) for k, v in masks.items()}
    output, weights = run(module, leaves, torch_masks)
    lw = torch.randn_like(output)
    out[f"{name}.input.loss_weights"] = lw
    loss = (output * lw).sum()
    if weights is not None:
        ww = torch.randn_like(weights)
        out[f"{name}.input.weights_loss_weights"] = ww
        loss = loss + (weights * ww).sum()
        out[f"{name}.expected.weights"] = weights.detach().clone()
    loss.backward()
    out[f"{name}.expected.output"] = output.detach().clone()
    out[f"{name}.expected.loss"] = loss.detach().clone()
    for k, p in module.named_parameters():
        out[f"{name}.grad.{k}"] = p.grad.detach().clone()
    for k, v in leaves.items():
        out[f"{name}.grad.{k}"] = v.grad.detach().clone()


def main():
    torch.manual_seed(0)
    out = {}
    dt = torch.float64

    # Self-attention, sequence first, bool key padding mask and a float [L, L] mask, weights
    # per head.
    mha = randomise(nn.MultiheadAttention(D, H))
    attn = torch.randn(L, L, dtype=dt)
    attn[0, 3] = float("-inf")
    x = torch.randn(L, B, D, dtype=dt)

    def run_mha(m, i, k):
        y = i["query"]
        return m(y, y, y, key_padding_mask=k["key_padding_mask"], attn_mask=k["attn_mask"],
                 need_weights=True, average_attn_weights=False)

    record(out, "mha", mha, {"query": x}, {"key_padding_mask": padding(B, L), "attn_mask": attn}, run_mha)

    # Cross-attention with kdim/vdim, bias_kv, zero attention, batch first, a 3-D bool mask
    # and a float key padding mask; averaged weights.
    mha_kv = randomise(nn.MultiheadAttention(D, H, kdim=6, vdim=7, add_bias_kv=True, add_zero_attn=True,
                                             batch_first=True))
    S = 4
    mask3 = (torch.rand(B * H, L, S) < 0.3).to(torch.uint8)
    mask3[:, :, 0] = 0
    kpm = torch.zeros(B, S, dtype=dt)
    kpm[0, 2] = -1.5
    kpm[2, 3] = float("-inf")

    def run_mha_kv(m, i, k):
        return m(i["query"], i["key"], i["value"], key_padding_mask=k["key_padding_mask"],
                 attn_mask=k["attn_mask"], need_weights=True)

    record(out, "mha_kv", mha_kv,
           {"query": torch.randn(B, L, D, dtype=dt), "key": torch.randn(B, S, 6, dtype=dt),
            "value": torch.randn(B, S, 7, dtype=dt)},
           {"key_padding_mask": kpm, "attn_mask": mask3}, run_mha_kv)

    # Two post-norm ReLU layers, sequence first, causal float mask and bool padding.
    enc = randomise(nn.TransformerEncoder(
        nn.TransformerEncoderLayer(D, H, FF, dropout=0.0), 2, enable_nested_tensor=False))

    def run_enc(m, i, k):
        return m(i["src"], mask=k["src_mask"], src_key_padding_mask=k["src_key_padding_mask"],
                 is_causal=True), None

    record(out, "encoder_post", enc, {"src": torch.randn(L, B, D, dtype=dt)},
           {"src_mask": causal(L), "src_key_padding_mask": padding(B, L)}, run_enc)

    # Two pre-norm GELU layers, batch first, a final norm, a bool [L, L] mask and padding.
    enc_pre = randomise(nn.TransformerEncoder(
        nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, activation="gelu", batch_first=True, norm_first=True),
        2, norm=nn.LayerNorm(D), enable_nested_tensor=False))
    band = torch.zeros(L, L, dtype=torch.uint8)
    band[0, 4] = band[4, 0] = band[2, 3] = 1

    def run_enc_pre(m, i, k):
        return m(i["src"], mask=k["src_mask"], src_key_padding_mask=k["src_key_padding_mask"]), None

    record(out, "encoder_pre_gelu", enc_pre, {"src": torch.randn(B, L, D, dtype=dt)},
           {"src_mask": band, "src_key_padding_mask": padding(B, L)}, run_enc_pre)

    # One post-norm decoder layer: causal target mask, target and memory padding.
    dec = randomise(nn.TransformerDecoderLayer(D, H, FF, dropout=0.0))
    M = 4

    def run_dec(m, i, k):
        return m(i["tgt"], i["memory"], tgt_mask=k["tgt_mask"], tgt_key_padding_mask=k["tgt_key_padding_mask"],
                 memory_key_padding_mask=k["memory_key_padding_mask"], tgt_is_causal=True), None

    record(out, "decoder", dec,
           {"tgt": torch.randn(L, B, D, dtype=dt), "memory": torch.randn(M, B, D, dtype=dt)},
           {"tgt_mask": causal(L), "tgt_key_padding_mask": padding(B, L),
            "memory_key_padding_mask": padding(B, M)}, run_dec)

    save_file({k: v.contiguous() for k, v in out.items()}, OUT)
    print(f"wrote {OUT} ({len(out)} tensors, {os.path.getsize(OUT)} bytes)")


if __name__ == "__main__":
    main()
