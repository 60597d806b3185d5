#!/usr/bin/env bash
# One all_reduce between 2 MPI processes on this host, through shared memory (MpiGroup's
# default on one host) and through MPI's own all-reduce, at 0.1-8 MB, in alternating rounds:
#
#   tools/bench/allreduce.sh [ROUNDS] [REPS]      (defaults 15, 50)
#
# Prints the median time per all-reduce of each path and the ratio. Open MPI's waiting
# threads are told to yield (as in ddp_scaling.sh). Needs Open MPI; not part of CI.
set -euo pipefail
cd "$(dirname "$0")/../.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
cargo build --release -q -p ember-distributed --features mpi --example allreduce_bench
bin="${CARGO_TARGET_DIR:-target}/release/examples/allreduce_bench"
RAYON_NUM_THREADS=1 mpirun --oversubscribe --bind-to none -np 2 "$bin" "$@"
