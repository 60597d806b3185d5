#!/usr/bin/env bash
# Data-parallel scaling on this machine: the same global batch trained by
#   1 process  x 2 threads (RAYON_NUM_THREADS=2, batch 2B, the plain model: no MPI, no DDP), and
#   2 processes x 1 thread (mpirun -np 2, RAYON_NUM_THREADS=1, batch B per rank),
# for the MNIST MLP and the quick-start CNN, on synthetic MNIST-shaped data, in interleaved
# sets (tools/bench/sets.py):
#
#   tools/bench/ddp_scaling.sh [STEPS] [B] [SETS]     (defaults 60, 64, 3)
#
# A set runs both configurations of one model back to back, the 2-process run first in odd
# sets. The report shows each set's samples/s for both and its ratio 2 processes / 1 process
# (above 1: the two ranks are faster; the targets are 1.0 for the CNN and 0.85 for the MLP in
# every set), then the median and the minimum ratio over the sets;
# then per configuration the medians over the sets of: step time, samples/s, the all-reduce
# time per step (on the communication thread), the part of it the training thread waited
# for (exposed), and the fraction hidden behind backward (1 - exposed / all-reduce).
# The 1-process run trains the plain model (mnist_ddp --plain), so the ratio charges data
# parallelism with everything it costs. BUCKET_MB (default 0.1) sets the bucket size: the MLP's
# first layer holds 85% of its 0.94 MB of gradients and is computed last, so only smaller
# buckets let the rest go out during backward. Each rank is bound to a core (Open MPI's
# default for two ranks, spelled out): unbound, the two ranks' training, communication and
# data threads wander between the cores, and the MLP's step took 1.50-1.76 ms against
# 1.37-1.38 ms bound (alternating runs on the quiet machine). Open MPI's waiting threads
# spin; with ranks x threads at the core count they would take the compute threads' cores,
# so they are told to yield (mpi_yield_when_idle). Every configuration trains STEPS steps (the synthetic
# training set holds 2 x B x STEPS images). Needs Open MPI; not part of CI.
set -euo pipefail
cd "$(dirname "$0")/../.."
steps="${1:-60}" batch="${2:-64}" sets="${3:-3}"
bucket="${BUCKET_MB:-0.1}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

cargo build --release -q -p ember --features mpi --example mnist_ddp
bin="${CARGO_TARGET_DIR:-target}/release/examples/mnist_ddp"
common=(--synthetic --train-images $((2 * batch * steps)) --steps "$steps" --bench --bucket-cap-mb "$bucket")

one_process() { # MODEL SET
    RAYON_NUM_THREADS=2 "$bin" --plain --model "$1" --batch-size $((2 * batch)) "${common[@]}" >"$out/$1-1x2.$2"
}
two_processes() { # MODEL SET
    RAYON_NUM_THREADS=1 mpirun --bind-to core -np 2 "$bin" --model "$1" --batch-size "$batch" \
        "${common[@]}" >"$out/$1-2x1.$2"
}

for model in mlp cnn; do
    for s in $(seq 1 "$sets"); do
        if (( s % 2 )); then
            two_processes "$model" "$s"
            one_process "$model" "$s"
        else
            one_process "$model" "$s"
            two_processes "$model" "$s"
        fi
    done
done

command="tools/bench/ddp_scaling.sh $steps $batch $sets"
[[ "$bucket" == 0.1 ]] || command="BUCKET_MB=$bucket $command"
python3 - "$out" "$sets" "$batch" "$command" <<'PY'
import re
import statistics
import sys

sys.path.insert(0, "tools/bench")
import sets  # noqa: E402

out, n, batch, command = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
models = {"mlp": "MLP 784-256-128-10", "cnn": "CNN quick start"}
configs = {"1x2": "plain, 1 process x 2 threads", "2x1": "DDP, 2 processes x 1 thread"}
keys = ("step_ms", "samples_per_s", "allreduce_ms_per_step", "exposed_ms_per_step", "hidden_fraction")


def load(model, config, s):
    text = open(f"{out}/{model}-{config}.{s}").read()
    return {k: float(re.search(rf"\b{k}=([\d.]+)", text).group(1)) for k in keys}


runs = {(m, c, s): load(m, c, s) for m in models for c in configs for s in range(1, n + 1)}
table = sets.Table(
    "samples/s", higher_is_better=True, command=command, ember_name=configs["2x1"], base_name=configs["1x2"]
)
for m, name in models.items():
    for s in range(1, n + 1):
        label = f"DDP MNIST {name}, global batch {2 * batch}"
        table.add(label, runs[(m, "2x1", s)]["samples_per_s"], runs[(m, "1x2", s)]["samples_per_s"])
table.print()
print("\nmedians over the sets:\n")
print("| model | setup | step ms | samples/s | all-reduce ms | exposed ms | hidden |")
print("|---|---|---|---|---|---|---|")
for m, name in models.items():
    for c, setup in configs.items():
        med = {k: statistics.median(runs[(m, c, s)][k] for s in range(1, n + 1)) for k in keys}
        print(
            f"| {name} | {setup} | {med['step_ms']:.2f} | {med['samples_per_s']:,.0f} "
            f"| {med['allreduce_ms_per_step']:.2f} | {med['exposed_ms_per_step']:.2f} | {med['hidden_fraction']:.0%} |"
        )
PY
