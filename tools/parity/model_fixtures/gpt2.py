"""GPT-2 fixtures: tiny random checkpoints in transformers' layouts, their logits and
hidden states, greedy continuations with margins, logits-processor outputs on fixed
logits, a byte-level BPE tokenizer trained on data/shakespeare/ with its ids on fixed
texts, and transformers' logits of a directory ember wrote (when it exists).

Checkpoints (each a directory under tools/parity/fixtures/models/gpt2/):
- tied/: GPT2LMHeadModel, n_embd 48 with 3 heads, tied head, gelu_new, one
  model.safetensors, f32; the tokenizer's vocabulary.
- untied-sharded/: GPT2LMHeadModel, 4 heads of 8, untied head, exact gelu, n_inner 80,
  layer-index scaling, epsilon 1e-6, other n_positions and vocabulary, sharded safetensors.
- base-bf16/: GPT2Model (keys without `transformer.`), bf16, 2 heads, relu.

The ember-saved/ directory is written by ember (`cargo run -p ember --features models
--example finetune_lm -- --model tools/parity/fixtures/models/gpt2/tied --text
data/shakespeare/hamlet.txt --steps 2 --out tools/parity/fixtures/models/gpt2/ember-saved`);
running this file afterwards (`python tools/parity/model_fixtures/gpt2.py`) records what
transformers computes from it.
"""

import glob
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from model_fixtures.common import dir_size, greedy_with_margins, save_json, save_tensors, seed
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GenerationConfig, GPT2Config, GPT2LMHeadModel, GPT2Model
from transformers.generation.logits_process import (
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
TEXTS = [
    "To be, or not to be, that is the question:",
    "O Romeo, Romeo! wherefore art thou Romeo?",
    "Out, damned spot! out, I say!",
    "Blow, winds, and crack your cheeks! rage! blow!",
    "naïve ümlauts — and numbers 12345\n\ttabs",
]
VOCAB = 512


def train_tokenizer(out):
    """A byte-level BPE of VOCAB tokens over the Shakespeare texts, GPT-2's scheme."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    files = sorted(glob.glob(os.path.join(ROOT, "data", "shakespeare", "*.txt")))
    tok.train(files, trainer)
    tok.save(os.path.join(out, "tokenizer.json"))
    ids = [tok.encode(t, add_special_tokens=False).ids for t in TEXTS]
    decoded = [tok.decode(i) for i in ids]
    save_json(os.path.join(out, "tokenizer_ids.json"), {"texts": TEXTS, "ids": ids, "decoded": decoded})
    return tok


def tiny(vocab, **kw):
    """A GPT2Config without dropout whose special tokens lie in the vocabulary."""
    return GPT2Config(
        vocab_size=vocab,
        bos_token_id=vocab - 1,
        eos_token_id=vocab - 1,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        **kw,
    )


def randomize(model):
    """Perturbs every parameter, layer norms and biases too, so that a swapped or dropped
    one shows and greedy continuations do not settle on one token."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.15)


def inputs(vocab, positions):
    """Two rows of random ids, and an attention mask that left-pads the second by 3."""
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(0, vocab, (2, positions), generator=g)
    mask = torch.ones(2, positions, dtype=torch.long)
    mask[1, :3] = 0
    return ids, mask


def outputs(model, head_weight, ids, mask):
    """Logits and last hidden states, unpadded and left-padded."""
    with torch.no_grad():
        out = {"input_ids": ids, "attention_mask": mask}
        for suffix, m in (("", None), ("_padded", mask)):
            base = model.transformer if isinstance(model, GPT2LMHeadModel) else model
            hidden = base(input_ids=ids, attention_mask=m).last_hidden_state.float()
            out["last_hidden_state" + suffix] = hidden
            out["logits" + suffix] = hidden @ head_weight.float().T
    return out


def greedy(model, prompts, steps=32):
    """transformers' greedy generation of each prompt alone: tokens and top-2 margins."""
    config = GenerationConfig(
        do_sample=False, max_new_tokens=steps, min_new_tokens=0, eos_token_id=None, bos_token_id=None, pad_token_id=0
    )
    rows = []
    for p in prompts:
        with torch.no_grad():
            out = model.generate(
                torch.tensor([p]),
                attention_mask=torch.ones(1, len(p), dtype=torch.long),
                generation_config=config,
                output_logits=True,
                return_dict_in_generate=True,
            )
        tokens, margins = greedy_with_margins(out.logits)
        new = out.sequences[0, len(p) :].tolist()
        assert [t[0] for t in tokens] == new and len(new) == steps, (tokens, new)
        rows.append({"prompt": p, "tokens": new, "margins": [m[0] for m in margins]})
    return rows


def processors(out):
    """transformers' logits processors, in generate's order, on fixed logits."""
    g = torch.Generator().manual_seed(11)
    logits = torch.randn(3, 64, generator=g) * 3
    history = torch.randint(0, 64, (3, 6), generator=g)
    cases = [
        {"repetition_penalty": 1.3},
        {"temperature": 0.7, "top_k": 5},
        {"top_p": 0.8},
        {"temperature": 1.5, "top_p": 0.6},
        {"repetition_penalty": 0.8, "temperature": 0.9, "top_k": 20, "top_p": 0.9},
    ]
    tensors = {"logits": logits, "history": history}
    for i, case in enumerate(cases):
        scores = logits.clone()
        if "repetition_penalty" in case:
            scores = RepetitionPenaltyLogitsProcessor(case["repetition_penalty"])(history, scores)
        if "temperature" in case:
            scores = TemperatureLogitsWarper(case["temperature"])(history, scores)
        if "top_k" in case:
            scores = TopKLogitsWarper(case["top_k"])(history, scores)
        if "top_p" in case:
            scores = TopPLogitsWarper(case["top_p"])(history, scores)
        tensors[f"case{i}"] = scores
    save_tensors(os.path.join(out, "processors.safetensors"), tensors)
    save_json(os.path.join(out, "processors.json"), {"cases": cases})


def make_tied(out, tok):
    seed(1)
    config = tiny(tok.get_vocab_size(), n_embd=48, n_head=3, n_layer=2, n_positions=64)
    model = GPT2LMHeadModel(config).eval()
    randomize(model)
    d = os.path.join(out, "tied")
    model.save_pretrained(d)
    ids, mask = inputs(config.vocab_size, 10)
    save_tensors(os.path.join(out, "tied_outputs.safetensors"), outputs(model, model.lm_head.weight, ids, mask))
    # Prompts of different lengths, so that batching them needs padding.
    prompts = [tok.encode(t, add_special_tokens=False).ids[:n] for t, n in zip(TEXTS[:3], (17, 6, 11))]
    save_json(os.path.join(out, "tied_greedy.json"), greedy(model, prompts))


def make_untied_sharded(out):
    seed(2)
    config = tiny(
        300,
        n_embd=32,
        n_head=4,
        n_layer=3,
        n_positions=40,
        n_inner=80,
        activation_function="gelu",
        layer_norm_epsilon=1e-6,
        scale_attn_by_inverse_layer_idx=True,
        tie_word_embeddings=False,
    )
    model = GPT2LMHeadModel(config).eval()
    randomize(model)
    with torch.no_grad():
        model.lm_head.weight.copy_(torch.randn_like(model.lm_head.weight) * 0.05)
    d = os.path.join(out, "untied-sharded")
    model.save_pretrained(d, max_shard_size="60KB")
    assert os.path.exists(os.path.join(d, "model.safetensors.index.json")), os.listdir(d)
    ids, mask = inputs(config.vocab_size, 12)
    save_tensors(
        os.path.join(out, "untied-sharded_outputs.safetensors"), outputs(model, model.lm_head.weight, ids, mask)
    )
    prompts = [[5, 17, 250, 3], [99, 1, 2, 3, 4, 5, 6, 7, 8]]
    save_json(os.path.join(out, "untied-sharded_greedy.json"), greedy(model, prompts))


def make_base_bf16(out):
    seed(3)
    config = tiny(200, n_embd=24, n_head=2, n_layer=2, n_positions=32, activation_function="relu")
    model = GPT2Model(config).eval()
    randomize(model)
    model = model.to(torch.bfloat16)
    d = os.path.join(out, "base-bf16")
    model.save_pretrained(d)
    # The reference runs in f32 on the bf16 weights (widening is exact).
    ids, mask = inputs(config.vocab_size, 8)
    wide = model.float()
    save_tensors(os.path.join(out, "base-bf16_outputs.safetensors"), outputs(wide, wide.wte.weight, ids, mask))


def check_ember_saved(out):
    """transformers' logits of the directory ember wrote, on fixed ids."""
    d = os.path.join(out, "ember-saved")
    if not os.path.isdir(d):
        print("no ember-saved/ yet: run the finetune_lm example (see this file's docstring), then rerun")
        return
    model, info = GPT2LMHeadModel.from_pretrained(d, output_loading_info=True)
    model.eval()
    ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6, 5, 3]])
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    save_tensors(os.path.join(out, "ember-saved_transformers.safetensors"), {"input_ids": ids, "logits": logits})
    save_json(
        os.path.join(out, "ember-saved_transformers.json"),
        {
            "loaded_by": f"transformers {__import__('transformers').__version__} GPT2LMHeadModel.from_pretrained",
            "missing_keys": sorted(info["missing_keys"]),
            "unexpected_keys": sorted(info["unexpected_keys"]),
            "mismatched_keys": sorted(str(k) for k in info["mismatched_keys"]),
            "tie_word_embeddings": model.config.tie_word_embeddings,
            "head_is_embedding": model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr(),
        },
    )


def make(out):
    tok = train_tokenizer(out)
    make_tied(out, tok)
    make_untied_sharded(out)
    make_base_bf16(out)
    processors(out)
    check_ember_saved(out)
    size = dir_size(out)
    assert size < 3_000_000, size
    print(f"gpt2 fixtures: {size} bytes")


if __name__ == "__main__":
    # Only the check of ember's directory, without rewriting the other fixtures:
    #   python tools/parity/model_fixtures/gpt2.py
    check_ember_saved(os.path.join(ROOT, "tools", "parity", "fixtures", "models", "gpt2"))
