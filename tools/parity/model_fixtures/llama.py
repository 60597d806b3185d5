"""LLaMA-family fixtures (LLaMA, Mistral, Qwen2 layouts) for crates/models/tests/llama.rs.

Each configuration gets a directory `<name>/` with `checkpoint/` (what `save_pretrained`
writes, sometimes rewritten into the older `rope_theta` + `rope_scaling` config spelling
that most published checkpoints use) and `expected.safetensors`:

- `input_ids` [1, 7], `logits` [1, 7, vocab], `hidden` [1, 7, hidden] (after the final norm);
- `padded_input_ids` [2, 7], `padded_mask` [2, 7] (row 0 left-padded by 3), `padded_logits`;
- `greedy_prompt` [1, 5], `greedy_tokens` [32], `greedy_margins` [32] (f64): the tokens of
  `generate(do_sample=False)` and the top-2 logit margin of each step.

bf16 checkpoints hold weights rounded to bf16; the expected numbers are the f32 model on those
rounded weights, so loading with an f32 conversion must match to 1e-4.
"""

import copy
import json
import os
import shutil

import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from .common import dir_size, greedy_with_margins, save_tensors, seed

VOCAB = 97
SEQ = 7
PAD = 3
NEW_TOKENS = 32

# (name, config class, model class, config kwargs, options)
CONFIGS = [
    # Plain multi-head attention, untied, single file, v5 `rope_parameters` spelling.
    ("llama_mha", LlamaConfig, LlamaForCausalLM,
     dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
          num_key_value_heads=4, rope_theta=10000.0, tie_word_embeddings=False),
     dict()),
    # GQA ratio 2, linear rope scaling, tied embeddings, v4 spelling.
    ("llama_gqa2_linear", LlamaConfig, LlamaForCausalLM,
     dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
          num_key_value_heads=2, rope_theta=500.0, rope_scaling={"rope_type": "linear", "factor": 2.0},
          tie_word_embeddings=True, rms_norm_eps=1e-5),
     dict(legacy_rope=True)),
    # GQA ratio 4, llama3 rope scaling (a short original window so that all three frequency
    # bands occur), sharded safetensors, untied, v4 spelling.
    ("llama_gqa4_llama3", LlamaConfig, LlamaForCausalLM,
     dict(hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=8,
          num_key_value_heads=2, rope_theta=10000.0,
          rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                        "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
          tie_word_embeddings=False),
     dict(legacy_rope=True, shard="60KB")),
    # Odd head count: 5 heads of 16 (head_dim != hidden / heads) sharing 1 kv head, with
    # attention and MLP biases, a bf16 checkpoint.
    ("llama_odd_bf16", LlamaConfig, LlamaForCausalLM,
     dict(hidden_size=40, intermediate_size=56, num_hidden_layers=2, num_attention_heads=5,
          num_key_value_heads=1, head_dim=16, attention_bias=True, mlp_bias=True,
          rope_theta=10000.0, tie_word_embeddings=False),
     dict(bf16=True)),
    # Qwen2: q/k/v biases always, 3 heads of 16 on 1 kv head, tied, a larger theta.
    ("qwen2", Qwen2Config, Qwen2ForCausalLM,
     dict(hidden_size=48, intermediate_size=64, num_hidden_layers=2, num_attention_heads=3,
          num_key_value_heads=1, rope_theta=1000000.0, tie_word_embeddings=True, rms_norm_eps=1e-6),
     dict(legacy_rope=True)),
    # Mistral: GQA ratio 2, untied; the sliding window is longer than every sequence here.
    ("mistral", MistralConfig, MistralForCausalLM,
     dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
          num_key_value_heads=2, head_dim=8, rope_theta=10000.0, sliding_window=4096,
          tie_word_embeddings=False),
     dict()),
    # Mistral with a sliding window of 4 over sequences of 7 (and 37 in generation).
    ("mistral_window", MistralConfig, MistralForCausalLM,
     dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
          num_key_value_heads=1, head_dim=8, rope_theta=10000.0, sliding_window=4,
          tie_word_embeddings=True),
     dict(legacy_rope=True)),
]


def legacy_rope_config(path):
    """Rewrites a v5 `rope_parameters` config into `rope_theta` + `rope_scaling` (v4)."""
    with open(path) as f:
        cfg = json.load(f)
    params = cfg.pop("rope_parameters")
    cfg["rope_theta"] = params.pop("rope_theta")
    cfg["rope_scaling"] = None if params.get("rope_type", "default") == "default" else params
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2)


def position_ids(mask):
    """Hugging Face's positions under left padding: cumsum(mask) - 1, padding at 1."""
    pos = mask.long().cumsum(-1) - 1
    return pos.masked_fill(mask == 0, 1)


def make_one(out_dir, index, name, config_cls, model_cls, kwargs, opts):
    seed(1000 + index)
    config = config_cls(vocab_size=VOCAB, max_position_embeddings=256, bos_token_id=1, eos_token_id=None,
                        pad_token_id=0, **kwargs)
    config._attn_implementation = "eager"
    model = model_cls(config).eval()
    with torch.no_grad():
        # Random weights larger than the initializer's 0.02, so that logits differ visibly.
        for name_p, p in model.named_parameters():
            if "norm" in name_p:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.2 * torch.randn_like(p))
        if opts.get("bf16"):
            for p in model.parameters():
                p.copy_(p.to(torch.bfloat16).float())
    d = os.path.join(out_dir, name)
    shutil.rmtree(d, ignore_errors=True)
    ckpt = os.path.join(d, "checkpoint")
    save_kwargs = {}
    if opts.get("shard"):
        save_kwargs["max_shard_size"] = opts["shard"]
    if opts.get("bf16"):
        # A copy: converting the model itself would also round its rotary `inv_freq`
        # buffer, which `.float()` does not undo.
        copy.deepcopy(model).to(torch.bfloat16).save_pretrained(ckpt, **save_kwargs)
    else:
        model.save_pretrained(ckpt, **save_kwargs)
    if opts.get("legacy_rope"):
        legacy_rope_config(os.path.join(ckpt, "config.json"))
    gen_cfg = os.path.join(ckpt, "generation_config.json")
    if os.path.exists(gen_cfg):
        os.remove(gen_cfg)

    g = torch.Generator().manual_seed(7 + index)
    ids = torch.randint(2, VOCAB, (1, SEQ), generator=g)
    other = torch.randint(2, VOCAB, (1, SEQ), generator=g)
    padded = torch.cat([torch.cat([torch.zeros(1, PAD, dtype=torch.long), ids[:, : SEQ - PAD]], 1), other], 0)
    mask = torch.ones(2, SEQ, dtype=torch.long)
    mask[0, :PAD] = 0
    with torch.no_grad():
        out = model(input_ids=ids, output_hidden_states=True)
        padded_out = model(input_ids=padded, attention_mask=mask, position_ids=position_ids(mask))
        prompt = ids[:, :5].clone()
        gen = model.generate(prompt, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False,
                             output_logits=True, return_dict_in_generate=True, pad_token_id=0, eos_token_id=None)
    tokens, margins = greedy_with_margins([l[0] for l in gen.logits])
    assert gen.sequences[0, 5:].tolist() == tokens, (name, "generate disagrees with its own logits")
    save_tensors(os.path.join(d, "expected.safetensors"), {
        "input_ids": ids,
        "logits": out.logits.float(),
        "hidden": out.hidden_states[-1].float(),
        "padded_input_ids": padded,
        "padded_mask": mask,
        "padded_logits": padded_out.logits.float(),
        "greedy_prompt": prompt,
        "greedy_tokens": torch.tensor(tokens, dtype=torch.long),
        "greedy_margins": torch.tensor(margins, dtype=torch.float64),
    })
    print(f"  {name}: {dir_size(d) / 1024:.0f} KB, min greedy margin {min(margins):.2e}")


def make(out_dir):
    for i, (name, config_cls, model_cls, kwargs, opts) in enumerate(CONFIGS):
        make_one(out_dir, i, name, config_cls, model_cls, kwargs, opts)
    print(f"  total {dir_size(out_dir) / 1024:.0f} KB")
