#!/usr/bin/env bash
# LSTM training speed, ember vs PyTorch, both at 2 threads, in interleaved sets
# (tools/bench/step_compare.sh):
#
#   tools/bench/lstm_compare.sh [SETS]      (default 5)
#
# ember's `lstm_bench` example (crates/nn/examples/lstm_bench.rs) against
# tools/bench/lstm_torch.py: LSTM(28, 128) over 28 steps, batch 64, a Linear head, cross
# entropy, backward and an SGD update.
set -euo pipefail
sets="${1:-5}"
exec "$(dirname "$0")/step_compare.sh" ember-nn lstm_bench tools/bench/lstm_torch.py \
    "LSTM(28, 128), T=28, batch 64" 64 "$sets" "tools/bench/lstm_compare.sh $sets"
