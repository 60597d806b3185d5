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
step_ms() { sed -n 's/.*step_ms=\([0-9.]*\).*/\1/p' "$1"; }
for s in $(seq 1 "$sets"); do
    printf '#probe\t%s\t%s\n' "$s" "$(python3 tools/bench/sets.py probe)" >>"$out/sets.tsv"
    for shape in "${shapes[@]}"; do
        read -r hidden batch reps <<<"$shape"
        reps=$(python3 -c 'import sys; print(max(1, round(int(sys.argv[1]) * float(sys.argv[2]))))' "$reps" "${REPS_SCALE:-1}")
        args=(--hidden "$hidden" --batch "$batch" --reps "$reps")
        if (( s % 2 )); then
            "$bin" "${args[@]}" >"$out/ember"
            "$python" tools/bench/lstm_torch.py "${args[@]}" >"$out/torch"
        else
            "$python" tools/bench/lstm_torch.py "${args[@]}" >"$out/torch"
            "$bin" "${args[@]}" >"$out/ember"
        fi
        # samples/s from the median step time, as lstm_compare.sh reports it
        python3 -c 'import sys; b, e, t = map(float, sys.argv[2:]); print(f"{sys.argv[1]}\t{b * 1e3 / e}\t{b * 1e3 / t}")' \
            "LSTM(28, $hidden), T=28, batch $batch" "$batch" "$(step_ms "$out/ember")" "$(step_ms "$out/torch")" >>"$out/sets.tsv"
    done
done
python3 tools/bench/sets.py summarise --unit samples/s --command "tools/bench/lstm_grid.sh $sets" "$out/sets.tsv"
