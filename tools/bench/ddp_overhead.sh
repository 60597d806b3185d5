#!/usr/bin/env bash
# The cost of DistributedDataParallel itself: the quick-start MLP (784-256-128-10) and CNN
# trained with Adam on random MNIST-shaped batches, plain and wrapped in DDP over a one-rank
# LocalGroup (whose all-reduce has nothing to combine), in alternating windows of one process
# (crates/ember/examples/ddp_overhead.rs):
#
#   tools/bench/ddp_overhead.sh [STEPS] [BATCH] [SETS]     (defaults 300, 128, 5)
#
# A set is STEPS steps of each configuration for the CNN (MLP_STEPS, default 10 x STEPS, for
# the MLP, whose step is about 30 times shorter), cut into SLICES (default 10) alternating
# slices so that both share whatever speed the shared host gives during the set; DDP first
# in odd sets. The report (tools/bench/sets.py) shows each set's samples/s of both and the
# ratio DDP / plain (1 is free; the target is 0.95 or more in every set), then the median and
# the minimum ratio. THREADS sets the threads of both (RAYON_NUM_THREADS; default: ember's).
# Counting instructions per step instead (repeatable on a loaded machine):
#
#   valgrind --tool=callgrind target/release/examples/ddp_overhead --model mlp --only ddp --steps 20
#
# twice with different --steps, subtracted, for each of --only plain and --only ddp.
set -euo pipefail
cd "$(dirname "$0")/../.."
steps="${1:-300}" batch="${2:-128}" sets="${3:-5}"
mlp_steps="${MLP_STEPS:-$((steps * 10))}" slices="${SLICES:-10}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
[[ -n "${THREADS:-}" ]] && export RAYON_NUM_THREADS="$THREADS"

cargo build --release -q -p ember --features distributed --example ddp_overhead
bin="${CARGO_TARGET_DIR:-target}/release/examples/ddp_overhead"
"$bin" --model mlp --batch "$batch" --steps "$mlp_steps" --sets "$sets" --slices "$slices" >"$out/mlp"
"$bin" --model cnn --batch "$batch" --steps "$steps" --sets "$sets" --slices "$slices" >"$out/cnn"

command="tools/bench/ddp_overhead.sh $steps $batch $sets"
[[ -n "${MLP_STEPS:-}" ]] && command="MLP_STEPS=$MLP_STEPS $command"
[[ -n "${SLICES:-}" ]] && command="SLICES=$SLICES $command"
[[ -n "${THREADS:-}" ]] && command="THREADS=$THREADS $command"
python3 - "$out" "$batch" "$command" <<'PY'
import re
import sys

sys.path.insert(0, "tools/bench")
import sets  # noqa: E402

out, batch, command = sys.argv[1], int(sys.argv[2]), sys.argv[3]
models = {"mlp": "MLP 784-256-128-10", "cnn": "CNN quick start"}
table = sets.Table("samples/s", higher_is_better=True, command=command, ember_name="1-rank DDP", base_name="plain")
for m, name in models.items():
    for line in open(f"{out}/{m}"):
        fields = dict(re.findall(r"(\w+)=([\d.]+)", line))
        table.add(f"{name}, batch {batch}", fields["ddp_samples_per_s"], fields["plain_samples_per_s"])
table.print()
PY
