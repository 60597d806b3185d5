#!/usr/bin/env bash
# ember's tensor benchmarks against PyTorch's on this machine, both at 2 threads, in
# interleaved sets (tools/bench/sets.py):
#
#   tools/bench/tensor_compare.sh [SETS] [NAME_FILTER ...]      (default 3 sets)
#
# Each set runs ember's `tensor_bench` example and tools/bench/tensor_torch.py back to back,
# ember first in odd sets; tools/bench/tensor_table.py reports, per workload, each set's
# time per call on both sides and its ratio PyTorch / ember (above 1: ember is faster), then
# the median and the minimum ratio over the sets. Every set counts: on a shared machine a
# run is only as good as its quietest moment, so the report also gives, per set, the share
# of all CPUs that other processes took during each side's run, for the reader to weigh.
# Environment: PYTHON (the interpreter with torch, default .venv-torch/bin/python),
# SAMPLES (samples per workload and run, default 15), IDLE_WAIT (seconds to wait before
# each run for the CPUs to be at least 90% idle, default 0: on a machine shared with other
# jobs, PyTorch's OpenMP workers lose far more to contention than rayon's do) and
# CARGO_TARGET_DIR as usual. Needs /usr/bin/time and python3. Not part of CI: it needs
# PyTorch.
set -euo pipefail
cd "$(dirname "$0")/../.."

sets="${1:-3}"
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

run_ember() {
    wait_idle
    fe=$(foreign_load "$bin" --samples "$samples" "$@")
    mv "$out/run.tsv" "$out/ember_$s.tsv"
}

run_torch() {
    wait_idle
    ft=$(foreign_load "$python" tools/bench/tensor_torch.py --samples "$samples" "$@")
    mv "$out/run.tsv" "$out/torch_$s.tsv"
}

ember_files=()
torch_files=()
notes=()
for s in $(seq 1 "$sets"); do
    if (( s % 2 )); then
        run_ember "$@"
        run_torch "$@"
    else
        run_torch "$@"
        run_ember "$@"
    fi
    ember_files+=("$out/ember_$s.tsv")
    torch_files+=("$out/torch_$s.tsv")
    notes+=(--note "set $s: other processes took ${fe}% of the CPUs during ember's run, ${ft}% during PyTorch's")
    echo "set $s: other load ember ${fe}%, PyTorch ${ft}%" >&2
done

command="tools/bench/tensor_compare.sh $sets${*:+ $*}"
[[ "$samples" == 15 ]] || command="SAMPLES=$samples $command"
python3 tools/bench/tensor_table.py --command "$command" --ember "${ember_files[@]}" --torch "${torch_files[@]}" \
    "${notes[@]}"
