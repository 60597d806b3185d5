#!/usr/bin/env bash
# Transformer encoder training speed over a grid of shapes, ember vs PyTorch, both at 2
# threads, in interleaved sets (the protocol of tools/bench/sets.py):
#
#   tools/bench/transformer_grid.sh [SETS]      (default 3)
#
# The workload of tools/bench/transformer_compare.sh (4 encoder layers, heads d_model / 32,
# feed-forward 4 x d_model, dropout 0, batch first, mean pooling, a Linear head, cross
# entropy, Adam) at d_model {64, 256} x sequence {32, 256} x batch {16, 64}. Each set runs
# every shape once, ember and PyTorch back to back (ember first in odd sets), with a host
# probe per set; the step counts below aim at runs of 2-4 s on a quiet machine (the
# largest shapes' runs are longer: three untimed steps come first), REPS_SCALE=x
# multiplies them (a quick look on a busy machine: REPS_SCALE=0.2). One table: per shape, both
# sides' median samples/s, the median and the minimum ratio. Not part of CI: it needs
# PyTorch (PYTHON, default .venv-torch/bin/python).
# `EMBER_BIN=path` times that binary instead of building the example.
set -euo pipefail
cd "$(dirname "$0")/../.."
sets="${1:-3}"
python="${PYTHON:-.venv-torch/bin/python}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

# d_model seq batch timed-steps
shapes=(
    "64 32 16 150"
    "64 32 64 50"
    "64 256 16 20"
    "64 256 64 6"
    "256 32 16 25"
    "256 32 64 8"
    "256 256 16 3"
    "256 256 64 2"
)

# EMBER_BIN: an already built `transformer_bench` to time instead (a build kept from before a change).
bin="${EMBER_BIN:-}"
if [[ -z "$bin" ]]; then
    cargo build --release -q -p ember --example transformer_bench
    bin="${CARGO_TARGET_DIR:-target}/release/examples/transformer_bench"
fi
source tools/bench/grid_sets.sh
grid_shape() { # D_MODEL SEQ BATCH REPS
    args=(--d-model "$1" --seq "$2" --batch "$3" --reps "$4")
    name="4x$1, seq $2, batch $3"
    batch="$3"
}
grid_sets tools/bench/transformer_torch.py "tools/bench/transformer_grid.sh $sets"
