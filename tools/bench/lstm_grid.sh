#!/usr/bin/env bash
# LSTM training speed over a grid of shapes, ember vs PyTorch, both at 2 threads, in
# interleaved sets (the protocol of tools/bench/sets.py):
#
#   tools/bench/lstm_grid.sh [SETS]      (default 3)
#
# The workload of tools/bench/lstm_compare.sh (LSTM(28, hidden) over 28 steps, a Linear
# head on the last hidden state, cross entropy, backward, SGD) at hidden {64, 256} x batch
# {16, 64}. Each set runs every shape once, ember and PyTorch back to back (ember first in
# odd sets), with a host probe per set; the step counts below aim at runs of 2-4 s on a
# quiet machine (REPS_SCALE=x multiplies them: a quick look on a busy machine). One
# table: per shape, both sides' median samples/s, the median and the minimum ratio. Not part
# of CI: it needs PyTorch (PYTHON, default .venv-torch/bin/python). `EMBER_BIN=path` times
# that binary instead of building the example.
set -euo pipefail
cd "$(dirname "$0")/../.."
sets="${1:-3}"
python="${PYTHON:-.venv-torch/bin/python}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

# hidden batch timed-steps
shapes=(
    "64 16 1500"
    "64 64 700"
    "256 16 150"
    "256 64 60"
)

# EMBER_BIN: an already built `lstm_bench` to time instead (a build kept from before a change).
bin="${EMBER_BIN:-}"
if [[ -z "$bin" ]]; then
    cargo build --release -q -p ember-nn --example lstm_bench
    bin="${CARGO_TARGET_DIR:-target}/release/examples/lstm_bench"
fi
source tools/bench/grid_sets.sh
grid_shape() { # HIDDEN BATCH REPS
    args=(--hidden "$1" --batch "$2" --reps "$3")
    name="LSTM(28, $1), T=28, batch $2"
    batch="$2"
}
grid_sets tools/bench/lstm_torch.py "tools/bench/lstm_grid.sh $sets"
