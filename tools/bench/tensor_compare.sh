#!/usr/bin/env bash
# Runs ember's tensor benchmarks and PyTorch's back to back on this machine and prints
# `workload, ember, PyTorch, ratio` (see BENCHMARKS.md).
#
#   tools/bench/tensor_compare.sh [ROUNDS] [NAME_FILTER ...]
#
# ROUNDS (default 3) alternates ember and PyTorch runs so that a burst of load from
# elsewhere hits both sides; each workload reports the median of the rounds' medians.
# Environment: PYTHON (the interpreter with torch, default /work/.venv-torch/bin/python),
# SAMPLES (samples per workload and round, default 15), IDLE_WAIT (seconds to wait before
# each run for the CPUs to be at least 90% idle, default 0: on a machine shared with other
# jobs, PyTorch's OpenMP workers lose far more to contention than rayon's do), and
# CARGO_TARGET_DIR as usual.
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

# Busy share of all CPUs over one second, in percent, from /proc/stat.
busy_percent() {
    local a b
    read -ra a < <(grep '^cpu ' /proc/stat)
    sleep 1
    read -ra b < <(grep '^cpu ' /proc/stat)
    local total=0 idle=$((b[4] + b[5] - a[4] - a[5]))
    for i in 1 2 3 4 5 6 7 8; do total=$((total + b[i] - a[i])); done
    echo $(((total - idle) * 100 / (total > 0 ? total : 1)))
}

wait_idle() {
    local deadline=$((SECONDS + ${IDLE_WAIT:-0}))
    while ((SECONDS < deadline)); do
        (($(busy_percent) <= 10)) && return 0
    done
    return 0
}

ember_files=()
torch_files=()
for r in $(seq 1 "$rounds"); do
    wait_idle
    echo "round $r/$rounds: ember (CPUs $(busy_percent)% busy before)" >&2
    "$bin" --samples "$samples" "$@" >"$out/ember_$r.tsv"
    wait_idle
    echo "round $r/$rounds: PyTorch (CPUs $(busy_percent)% busy before)" >&2
    "$python" tools/bench/tensor_torch.py --samples "$samples" "$@" >"$out/torch_$r.tsv"
    ember_files+=("$out/ember_$r.tsv")
    torch_files+=("$out/torch_$r.tsv")
done

echo "$(date -u +%Y-%m-%dT%H:%MZ), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores visible"
python3 tools/bench/tensor_table.py --ember "${ember_files[@]}" --torch "${torch_files[@]}"
