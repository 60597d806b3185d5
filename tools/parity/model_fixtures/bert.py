"""BERT fixtures: a WordPiece tokenizer trained on data/shakespeare/, and three tiny random
checkpoints of different layouts, with what transformers computes from them on a padded
batch.

- `mlm/`: `BertForMaskedLM` (keys under `bert.`, the decoder tied to the word embeddings,
  `cls.predictions.bias`), 3 heads of 10, `gelu`, one safetensors file, f32; with
  `tokenizer.json`. Inputs are the tokenizer's ids of `texts`.
- `cls/`: `BertForSequenceClassification` (pooler, `classifier`), 5 heads of 4,
  `gelu_new`, 3 token types, `layer_norm_eps` 1e-7, sharded safetensors, f32.
- `base/`: `BertModel` (no `bert.` prefix, pooler), 3 heads of 8, `relu`, a bf16 checkpoint;
  the expected outputs are the bf16 weights' computed in f32.
"""

import os

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import BertConfig, BertForMaskedLM, BertForSequenceClassification, BertModel

from .common import dir_size, save_json, save_tensors, seed

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
TEXTS = ["To be, or not to be: that is the question.", "O Romeo, Romeo!"]


def tokenizer(out):
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    trainer = trainers.WordPieceTrainer(vocab_size=400, special_tokens=special)
    files = [os.path.join(ROOT, "data", "shakespeare", f) for f in ("hamlet.txt", "macbeth.txt")]
    tok.train(files, trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    tok.save(os.path.join(out, "tokenizer.json"))
    encodings = [tok.encode(t) for t in TEXTS]
    checks = {
        "texts": TEXTS,
        "ids": [e.ids for e in encodings],
        "ids_plain": [tok.encode(t, add_special_tokens=False).ids for t in TEXTS],
        "decoded": [tok.decode(e.ids) for e in encodings],
        "vocab_size": tok.get_vocab_size(),
    }
    save_json(os.path.join(out, "tokenizer_checks.json"), checks)
    return tok, [e.ids for e in encodings]


def padded_batch(ids_lists, type_split=True):
    """Right-padded ids, the attention mask and token types (second half type 1)."""
    n = max(len(i) for i in ids_lists)
    ids = torch.zeros(len(ids_lists), n, dtype=torch.int64)
    mask = torch.zeros(len(ids_lists), n, dtype=torch.int64)
    types = torch.zeros(len(ids_lists), n, dtype=torch.int64)
    for b, row in enumerate(ids_lists):
        ids[b, : len(row)] = torch.tensor(row)
        mask[b, : len(row)] = 1
        if type_split:
            types[b, len(row) // 2 : len(row)] = 1
    return ids, mask, types


def randomize_norms(model):
    """LayerNorm weights and biases away from 1 and 0, so that a skipped one shows."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" in name:
                p.add_(torch.randn_like(p) * 0.2)


def make(out):
    os.makedirs(out, exist_ok=True)

    # --- MLM, with the tokenizer.
    d = os.path.join(out, "mlm")
    os.makedirs(d, exist_ok=True)
    seed(0)
    tok, ids_lists = tokenizer(d)
    config = BertConfig(
        vocab_size=tok.get_vocab_size(), hidden_size=30, num_hidden_layers=2, num_attention_heads=3,
        intermediate_size=37, hidden_act="gelu", max_position_embeddings=40, type_vocab_size=2,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )
    model = BertForMaskedLM(config).eval()
    randomize_norms(model)
    with torch.no_grad():
        model.cls.predictions.bias.add_(torch.randn_like(model.cls.predictions.bias) * 0.5)
    model.save_pretrained(d)
    ids, mask, types = padded_batch(ids_lists)
    with torch.no_grad():
        o = model(input_ids=ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True)
    save_tensors(os.path.join(d, "expected.safetensors"), {
        "input_ids": ids, "attention_mask": mask, "token_type_ids": types,
        "last_hidden_state": o.hidden_states[-1], "logits": o.logits,
    })

    # --- Sequence classification, sharded.
    d = os.path.join(out, "cls")
    os.makedirs(d, exist_ok=True)
    seed(1)
    config = BertConfig(
        vocab_size=50, hidden_size=20, num_hidden_layers=2, num_attention_heads=5, intermediate_size=24,
        hidden_act="gelu_new", max_position_embeddings=16, type_vocab_size=3, layer_norm_eps=1e-7,
        num_labels=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )
    model = BertForSequenceClassification(config).eval()
    randomize_norms(model)
    model.save_pretrained(d, max_shard_size="10KB")
    ids_lists = [[2, 7, 9, 11, 13, 17, 3], [2, 40, 41, 3], [2, 5, 6, 3, 8, 3]]
    ids, mask, types = padded_batch(ids_lists)
    types[2, 4:6] = 2
    with torch.no_grad():
        o = model(input_ids=ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True)
        pooled = model.bert(input_ids=ids, attention_mask=mask, token_type_ids=types).pooler_output
    save_tensors(os.path.join(d, "expected.safetensors"), {
        "input_ids": ids, "attention_mask": mask, "token_type_ids": types,
        "last_hidden_state": o.hidden_states[-1], "pooler_output": pooled, "logits": o.logits,
    })

    # --- Bare BertModel, bf16 checkpoint, no prefix.
    d = os.path.join(out, "base")
    os.makedirs(d, exist_ok=True)
    seed(2)
    config = BertConfig(
        vocab_size=40, hidden_size=24, num_hidden_layers=1, num_attention_heads=3, intermediate_size=30,
        hidden_act="relu", max_position_embeddings=12, type_vocab_size=2, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = BertModel(config).eval()
    randomize_norms(model)
    model = model.to(torch.bfloat16)
    model.save_pretrained(d)
    model = model.float()
    ids_lists = [[2, 7, 9, 11, 3], [2, 30, 3]]
    ids, mask, types = padded_batch(ids_lists, type_split=False)
    with torch.no_grad():
        o = model(input_ids=ids, attention_mask=mask)
    save_tensors(os.path.join(d, "expected.safetensors"), {
        "input_ids": ids, "attention_mask": mask,
        "last_hidden_state": o.last_hidden_state, "pooler_output": o.pooler_output,
    })
    print(f"bert: {dir_size(out)} bytes")
