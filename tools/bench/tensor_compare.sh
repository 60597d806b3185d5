#!/usr/bin/env bash
# Runs ember's tensor benchmarks and PyTorch's back to back on this machine and prints
# `workload, ember, PyTorch, ratio` (see BENCHMARKS.md).
#
#   tools/bench/tensor_compare.sh [ROUNDS] [NAME_FILTER ...]
#
# ROUNDS (default 3) alternates ember and PyTorch runs so that a burst of load from
# elsewhere hits both sides; each workload reports the median of the rounds' medians.
# Environment: PYTHON (the interpreter with torch, default /work/.venv-torch/bin/python),
# SAMPLES (samples per workload and round, default 15), CARGO_TARGET_DIR as usual.
# Not part of CI: it needs PyTorch.
set -euo pipefail
cd "$(dirname "$0")/../.."

rounds="${1:-3}"
shift || true
python="${PYTHON:-/work/.venv-torch/bin/python}"
samples="${SAMPLES:-15}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

cargo build --release -q -p ember-tensor --example tensor_bench
bin="${CARGO_TARGET_DIR:-target}/release/examples/tensor_bench"

ember_files=()
torch_files=()
for r in $(seq 1 "$rounds"); do
    echo "round $r/$rounds: ember" >&2
    "$bin" --samples "$samples" "$@" >"$out/ember_$r.tsv"
    echo "round $r/$rounds: PyTorch" >&2
    "$python" tools/bench/tensor_torch.py --samples "$samples" "$@" >"$out/torch_$r.tsv"
    ember_files+=("$out/ember_$r.tsv")
    torch_files+=("$out/torch_$r.tsv")
done

echo "$(date -u +%Y-%m-%dT%H:%MZ), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores visible"
python3 tools/bench/tensor_table.py --ember "${ember_files[@]}" --torch "${torch_files[@]}"
