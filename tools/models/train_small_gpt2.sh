#!/usr/bin/env bash
# Trains the small GPT-2-layout model shipped in data/models/gpt2-shakespeare/ with ember
# itself: a fresh model of tools/models/gpt2-shakespeare.config.json (3 blocks, n_embd 128,
# 4 heads, 256 positions, tied head), the byte-level BPE of 512 tokens that
# tools/parity/model_fixtures/gpt2.py trains on data/shakespeare/, AdamW on random windows
# of the four plays (batches of 16 windows of 128 tokens, lr 1e-3). Run from the
# repository root; STEPS (default 350, what the shipped model had) and PROFILE (default
# dev, the workspace's opt-level-1 profile) may be set in the environment. More steps give
# a better model: the shipped one is short-trained to fit a loaded 2-core machine.
set -euo pipefail
STEPS="${STEPS:-350}"
PROFILE="${PROFILE:-dev}"
cargo run --profile "$PROFILE" -p ember --features models --example finetune_lm -- \
    --init-config tools/models/gpt2-shakespeare.config.json \
    --tokenizer tools/parity/fixtures/models/gpt2/tokenizer.json \
    --text data/shakespeare \
    --out data/models/gpt2-shakespeare \
    --steps "$STEPS" --batch-size 16 --context 128 --lr 1e-3 --weight-decay 0.01 --seed 0 --log-every 50
