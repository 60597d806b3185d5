#!/usr/bin/env bash
# Data-parallel scaling on this machine: the same global batch trained by
#   1 process  x 2 threads (RAYON_NUM_THREADS=2, batch 2B in one process), and
#   2 processes x 1 thread (mpirun -np 2, RAYON_NUM_THREADS=1, batch B per rank),
# for the MNIST MLP and the quick-start CNN, on synthetic MNIST-shaped data:
#
#   tools/bench/ddp_scaling.sh [STEPS] [B] [ROUNDS]     (defaults 60, 64, 3)
#
# Prints per configuration the median over rounds of: step time, samples/s, the all-reduce
# time per step (on the communication thread), the part of it the training thread waited
# for (exposed), and the fraction hidden behind backward (1 - exposed / all-reduce).
# Both runs go through DistributedDataParallel, so the 1-process figure includes the cost
# of a 1-rank all-reduce (a copy). BUCKET_MB (default 0.1) sets the bucket size: the MLP's
# first layer holds 85% of its 0.94 MB of gradients and is computed last, so only smaller
# buckets let the rest go out during backward. Open MPI's waiting threads spin; with
# ranks x threads at the core count they would take the compute threads' cores, so they are
# told to yield (mpi_yield_when_idle). Needs Open MPI; not part of CI.
set -euo pipefail
cd "$(dirname "$0")/../.."
steps="${1:-60}" batch="${2:-64}" rounds="${3:-3}"
bucket="${BUCKET_MB:-0.1}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

cargo build --release -q -p ember --features mpi --example mnist_ddp
bin="${CARGO_TARGET_DIR:-target}/release/examples/mnist_ddp"
common=(--synthetic --train-images 20000 --steps "$steps" --bench --bucket-cap-mb "$bucket")

for model in mlp cnn; do
    for r in $(seq 1 "$rounds"); do
        RAYON_NUM_THREADS=2 mpirun --oversubscribe -np 1 "$bin" --model "$model" --batch-size $((2 * batch)) \
            "${common[@]}" >>"$out/$model-1x2"
        RAYON_NUM_THREADS=1 mpirun --oversubscribe --bind-to none -np 2 "$bin" --model "$model" --batch-size "$batch" \
            "${common[@]}" >>"$out/$model-2x1"
    done
done

median() { # KEY FILE
    grep -o "$1=[0-9.]*" "$2" | cut -d= -f2 | sort -g | awk '{a[NR]=$1} END {print a[int((NR + 1) / 2)]}'
}
printf '%-5s %-22s %9s %10s %14s %12s %7s\n' model config step_ms samples/s allreduce_ms exposed_ms hidden
for model in mlp cnn; do
    for cfg in 1x2 2x1; do
        f="$out/$model-$cfg"
        label=$([ "$cfg" = 1x2 ] && echo "1 process x 2 threads" || echo "2 processes x 1 thread")
        printf '%-5s %-22s %9s %10s %14s %12s %7s\n' "$model" "$label" "$(median step_ms "$f")" \
            "$(median samples_per_s "$f")" "$(median allreduce_ms_per_step "$f")" \
            "$(median exposed_ms_per_step "$f")" "$(median hidden_fraction "$f")"
    done
done
