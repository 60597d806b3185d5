#!/usr/bin/env bash
# Every ember vs PyTorch comparison in tools/bench/, in one invocation, and one Markdown
# table of them all:
#
#   tools/bench/all.sh                          # the defaults below, about 60 minutes on 2 vCPUs
#   WORKLOADS="lstm conv" tools/bench/all.sh    # a subset
#   QUICK=1 tools/bench/all.sh                  # tiny settings: proves the scripts run, measures nothing
#
# Each workload's script runs its interleaved sets (tools/bench/sets.py: a set is one ember
# run and one PyTorch run back to back, the order alternating between sets; the figure is
# the median and the minimum ratio over all sets, none discarded). The table has one row
# per workload: the command that measured it, ember's and PyTorch's medians, the median and
# the minimum ratio (above 1: ember is faster) and the number of sets, under the date, the
# machine (CPU model, vCPU count, avx512_bf16 / avx512_fp16), the ember commit and the
# PyTorch version, and above each script's run time. It goes to stdout and to
# OUT_DIR/table.md; OUT_DIR (default target/bench/all-DATE) also keeps each script's whole
# report (NAME.log), with the per-set figures and the workloads' other columns (peak
# memory, windows, all-reduce times, the other load during the tensor runs).
#
# Workloads (WORKLOADS, default all, in this order), their commands at the defaults, and
# the time each should take on a quiet 2-vCPU machine once the examples are built: the
# work per set at the throughputs in BENCHMARKS.md plus about 2 s to start each PyTorch
# process, times 7 sets. PyTorch slows down far more than ember on a loaded machine, so a
# busy one takes longer; the table's footer gives the times measured.
#
#   mlp          tools/bench/mlp_train.sh 7 3                             ~2.5 min
#   lenet        MODEL=lenet tools/bench/mlp_train.sh 7 1                 ~5 min
#   tensor       SAMPLES=15 tools/bench/tensor_compare.sh 7               ~3.5 min
#   autograd     tools/bench/autograd_compare.sh 7                        ~0.5 min
#   conv         tools/bench/conv_compare.sh 7                            ~0.5 min
#   lstm         tools/bench/lstm_compare.sh 7                            ~0.5 min
#   transformer  tools/bench/transformer_compare.sh 7                     ~0.5 min
#   sdpa         tools/bench/sdpa_compare.sh 7 5                          ~6 min
#   long_run     PROBE_SECONDS=30 tools/bench/long_run.sh 10000 1000 7    ~40 min (8 configurations)
#   ddp          tools/bench/ddp_scaling.sh 60 64 7                       ~2 min (needs mpirun; skipped without)
#
# Settings (environment): SETS (sets per workload, default 7), MLP_EPOCHS (3), LENET_EPOCHS
# (1), TENSOR_SAMPLES (15), SDPA_REPS (5), LONG_RUN_STEPS (10000), LONG_RUN_WINDOW (1000),
# LONG_RUN_SETS (SETS), LONG_RUN_CONFIGS (long_run.sh's CONFIGS, default all eight),
# PROBE_SECONDS (30), DDP_STEPS (60), DDP_BATCH (64), OUT_DIR, and PYTHON (the interpreter
# with torch, default .venv-torch/bin/python) as for every script. QUICK=1 changes the
# defaults to 2 sets, 1 epoch, 3 samples, 1 repetition, 400-step long runs in 100-step
# windows of two configurations with a 2 s probe, and 10 DDP steps; explicit settings
# still win. A workload whose script fails is reported under the table, the others go on,
# and all.sh exits with status 1 at the end.
set -euo pipefail
cd "$(dirname "$0")/../.."

quick="${QUICK:-}"
q() { # QUICK_VALUE DEFAULT: the default for this mode
    if [[ -n "$quick" ]]; then echo "$1"; else echo "$2"; fi
}
sets="${SETS:-$(q 2 7)}"
mlp_epochs="${MLP_EPOCHS:-$(q 1 3)}"
lenet_epochs="${LENET_EPOCHS:-1}"
tensor_samples="${TENSOR_SAMPLES:-$(q 3 15)}"
sdpa_reps="${SDPA_REPS:-$(q 1 5)}"
long_steps="${LONG_RUN_STEPS:-$(q 400 10000)}"
long_window="${LONG_RUN_WINDOW:-$(q 100 1000)}"
long_sets="${LONG_RUN_SETS:-$sets}"
long_configs="${LONG_RUN_CONFIGS:-$(q "random:64:adam mnist:256:sgd" "")}"
probe_seconds="${PROBE_SECONDS:-$(q 2 30)}"
ddp_steps="${DDP_STEPS:-$(q 10 60)}"
ddp_batch="${DDP_BATCH:-64}"
workloads="${WORKLOADS:-mlp lenet tensor autograd conv lstm transformer sdpa long_run ddp}"
python="${PYTHON:-.venv-torch/bin/python}"
export PYTHON="$python"
out_dir="${OUT_DIR:-target/bench/all-$(date -u +%Y%m%dT%H%MZ)}"

# NAME -> the command line that measures it (run with bash -c, so env prefixes work).
command_for() {
    case "$1" in
    mlp) echo "tools/bench/mlp_train.sh $sets $mlp_epochs" ;;
    lenet) echo "MODEL=lenet tools/bench/mlp_train.sh $sets $lenet_epochs" ;;
    tensor) echo "SAMPLES=$tensor_samples tools/bench/tensor_compare.sh $sets" ;;
    autograd) echo "tools/bench/autograd_compare.sh $sets" ;;
    conv) echo "tools/bench/conv_compare.sh $sets" ;;
    lstm) echo "tools/bench/lstm_compare.sh $sets" ;;
    transformer) echo "tools/bench/transformer_compare.sh $sets" ;;
    sdpa) echo "tools/bench/sdpa_compare.sh $sets $sdpa_reps" ;;
    long_run)
        local c="PROBE_SECONDS=$probe_seconds tools/bench/long_run.sh $long_steps $long_window $long_sets"
        [[ -z "$long_configs" ]] || c="CONFIGS='$long_configs' $c"
        echo "$c"
        ;;
    ddp) echo "tools/bench/ddp_scaling.sh $ddp_steps $ddp_batch $sets" ;;
    *) return 1 ;;
    esac
}

for name in $workloads; do
    command_for "$name" >/dev/null || {
        echo "all.sh: unknown workload '$name'" \
            "(known: mlp lenet tensor autograd conv lstm transformer sdpa long_run ddp)" >&2
        exit 2
    }
done

mkdir -p "$out_dir"
started="$(date -u '+%Y-%m-%d %H:%M UTC')"
failed=0
notes=()
tsvs=()
for name in $workloads; do
    cmd="$(command_for "$name")"
    if [[ "$name" == ddp ]] && ! command -v mpirun >/dev/null; then
        notes+=("- $name: skipped, no mpirun on this machine")
        echo "all.sh: $name skipped: no mpirun" >&2
        continue
    fi
    echo "all.sh: $name: $cmd (log: $out_dir/$name.log)" >&2
    rm -f "$out_dir/$name.tsv"
    t0=$SECONDS
    if SETS_TSV="$out_dir/$name.tsv" bash -c "$cmd" >"$out_dir/$name.log" 2>&1; then
        notes+=("- $name: $((SECONDS - t0)) s")
    else
        rc=$?
        failed=$((failed + 1))
        notes+=("- $name: FAILED (exit $rc) after $((SECONDS - t0)) s; see $out_dir/$name.log")
        echo "all.sh: $name failed (exit $rc); the last lines of its log:" >&2
        tail -5 "$out_dir/$name.log" >&2
    fi
    tsvs+=("$out_dir/$name.tsv")
done

protocol="both sides at 2 threads; per workload: the median and the minimum ratio over every set of one"
protocol+=" invocation (a set: one ember and one PyTorch run back to back, ember first in odd sets),"
protocol+=" none discarded; ratio above 1: ember faster"
torch_version="$("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo "not found at $python")"
header=(
    --started "$started"
    --note "PyTorch: $torch_version; rustc: $(rustc --version 2>/dev/null || echo unknown)"
    --note "$protocol"
)
[[ -z "$quick" ]] || header+=(--note "QUICK=1: tiny settings that prove the scripts run; these figures measure nothing")
{
    python3 tools/bench/sets.py table "${header[@]}" "${tsvs[@]}"
    echo
    echo "Run times and failures (each script's build check included):"
    echo
    printf '%s\n' "${notes[@]}"
} | tee "$out_dir/table.md"
echo "all.sh: the table is in $out_dir/table.md, each workload's report in $out_dir/NAME.log" >&2
if ((failed > 0)); then
    echo "all.sh: $failed workload(s) failed" >&2
    exit 1
fi
