#!/usr/bin/env bash
# Runs ember's tensor benchmarks and PyTorch's back to back on this machine and prints
# `workload, ember, PyTorch, ratio` (see BENCHMARKS.md).
#
#   tools/bench/tensor_compare.sh [ROUNDS] [NAME_FILTER ...]
#
# ROUNDS (default 3) alternates ember and PyTorch runs; each workload reports the median of
# the rounds' medians. On a shared machine a run is only as good as its quietest moment, so
# each run's share of CPU taken by other processes is measured and rounds above MAX_FOREIGN
# (default 10%) are run again, up to TRIES (default 3 x ROUNDS) in all.
# Environment: PYTHON (the interpreter with torch, default .venv-torch/bin/python),
# SAMPLES (samples per workload and round, default 15), IDLE_WAIT (seconds to wait before
# each run for the CPUs to be at least 90% idle, default 0: on a machine shared with other
# jobs, PyTorch's OpenMP workers lose far more to contention than rayon's do), and
# MAX_FOREIGN, TRIES (above) and CARGO_TARGET_DIR as usual. Needs /usr/bin/time and python3.
# Not part of CI: it needs PyTorch.
set -euo pipefail
cd "$(dirname "$0")/../.."

rounds="${1:-3}"
shift || true
python="${PYTHON:-.venv-torch/bin/python}"
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

# Runs "$@" with stdout to $out/run.tsv and prints the share of all CPUs (percent) that
# other processes used meanwhile: busy time from /proc/stat minus the run's own CPU time.
foreign_load() {
    local a b t0 t1 busy=0
    read -ra a < <(grep '^cpu ' /proc/stat)
    t0=$(date +%s.%N)
    /usr/bin/time -f "%U %S" -o "$out/cpu" "$@" >"$out/run.tsv"
    t1=$(date +%s.%N)
    read -ra b < <(grep '^cpu ' /proc/stat)
    for i in 1 2 3 6 7 8; do busy=$((busy + b[i] - a[i])); done
    python3 -c "import sys; u, s = map(float, open('$out/cpu').read().split()[-2:]); \
print(max(0, round(100 * ($busy / $(getconf CLK_TCK) - u - s) / (($t1 - $t0) * $(nproc)))))"
}

# A round counts when neither side shared the machine with more than MAX_FOREIGN percent
# of other load; up to TRIES rounds are run to collect ROUNDS clean ones.
max_foreign="${MAX_FOREIGN:-10}"
tries="${TRIES:-$((rounds * 3))}"
ember_files=()
torch_files=()
kept=0
for t in $(seq 1 "$tries"); do
    ((kept < rounds)) || break
    wait_idle
    fe=$(foreign_load "$bin" --samples "$samples" "$@")
    mv "$out/run.tsv" "$out/ember_$t.tsv"
    wait_idle
    ft=$(foreign_load "$python" tools/bench/tensor_torch.py --samples "$samples" "$@")
    mv "$out/run.tsv" "$out/torch_$t.tsv"
    if ((fe <= max_foreign && ft <= max_foreign)); then
        kept=$((kept + 1))
        ember_files+=("$out/ember_$t.tsv")
        torch_files+=("$out/torch_$t.tsv")
        echo "try $t: other load ember ${fe}%, PyTorch ${ft}%: kept" >&2
    else
        echo "try $t: other load ember ${fe}%, PyTorch ${ft}%: dropped" >&2
        last_ember="$out/ember_$t.tsv" last_torch="$out/torch_$t.tsv"
    fi
done
if ((kept == 0)); then
    echo "WARNING: no round ran without other load above ${max_foreign}%; showing the last one" >&2
    ember_files=("$last_ember")
    torch_files=("$last_torch")
fi

echo "$(date -u +%Y-%m-%dT%H:%MZ), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores visible"
python3 tools/bench/tensor_table.py --ember "${ember_files[@]}" --torch "${torch_files[@]}"
