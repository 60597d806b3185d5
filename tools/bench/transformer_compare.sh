#!/usr/bin/env bash
# Transformer encoder training speed, ember vs PyTorch, both at 2 threads, in interleaved
# sets (tools/bench/step_compare.sh):
#
#   tools/bench/transformer_compare.sh [SETS]      (default 5)
#
# ember's `transformer_bench` example (crates/ember/examples/transformer_bench.rs) against
# tools/bench/transformer_torch.py: a 4-layer Transformer encoder (d_model 128, 4 heads,
# feed-forward 512, batch first, dropout 0) over sequences of 64, batch 32, mean pooling, a
# Linear head, cross entropy, backward and an Adam step.
set -euo pipefail
sets="${1:-5}"
exec "$(dirname "$0")/step_compare.sh" ember transformer_bench tools/bench/transformer_torch.py \
    "Transformer encoder 4x128, seq 64, batch 32" 32 "$sets" "tools/bench/transformer_compare.sh $sets"
