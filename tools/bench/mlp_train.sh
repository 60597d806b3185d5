#!/usr/bin/env bash
# MNIST training throughput, ember (eager and traced) vs PyTorch, on this machine, both at
# 2 threads, in interleaved sets (tools/bench/sets.py):
#
#   tools/bench/mlp_train.sh [SETS] [EPOCHS]      (defaults 3 3)
#   MODEL=lenet tools/bench/mlp_train.sh 3 1      # LeNet-5 (MODEL=cnn: the CNN quick start's model)
#
# Each set runs ember's `train_bench` example (eager, then traced; traced first in even
# sets) and tools/bench/mlp_train.py for batch 64 and 256, back to back, ember first in
# odd sets. The report shows each set's samples/s and its ratio ember / PyTorch (above 1:
# ember is faster), for eager and traced mode each against the same set's PyTorch run,
# then the median and the minimum ratio over the sets. Not part of CI: it needs PyTorch
# (PYTHON, default .venv-torch/bin/python).
set -euo pipefail
cd "$(dirname "$0")/../.."
sets="${1:-3}"
epochs="${2:-3}"
python="${PYTHON:-.venv-torch/bin/python}"
model="${MODEL:-mlp}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

cargo build --release -q -p ember --example train_bench
bin="${CARGO_TARGET_DIR:-target}/release/examples/train_bench"
for s in $(seq 1 "$sets"); do
    if (( s % 2 )); then
        "$bin" --model "$model" --epochs "$epochs" --traced >"$out/ember.$s"
        "$python" tools/bench/mlp_train.py --model "$model" --epochs "$epochs" >"$out/torch.$s"
    else
        "$python" tools/bench/mlp_train.py --model "$model" --epochs "$epochs" >"$out/torch.$s"
        "$bin" --model "$model" --epochs "$epochs" --traced --traced-first >"$out/ember.$s"
    fi
done

command="tools/bench/mlp_train.sh $sets $epochs"
[[ "$model" == mlp ]] || command="MODEL=$model $command"
python3 - "$out" "$sets" "$model" "$command" <<'PY'
import sys

sys.path.insert(0, "tools/bench")
import sets  # noqa: E402

out, n, model, command = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
names = {"mlp": "MNIST MLP training", "lenet": "LeNet-5 training on MNIST", "cnn": "MNIST CNN quick start training"}


def load(path):
    """(mode, batch) -> samples/s, from `mode<TAB>batch<TAB>samples_per_s` lines."""
    rates = {}
    for line in open(path):
        if line.strip() and not line.startswith("#"):
            mode, batch, rate = line.split()
            rates[(mode, int(batch))] = float(rate)
    return rates


table = sets.Table("samples/s", higher_is_better=True, command=command)
for s in range(1, n + 1):
    ember, torch = load(f"{out}/ember.{s}"), load(f"{out}/torch.{s}")
    for batch in sorted({b for _, b in torch}):
        for mode in ("eager", "traced"):
            label = f"{names.get(model, model)}, batch {batch}, {mode}"
            table.add(label, ember[(mode, batch)], torch[("pytorch", batch)])
table.print()
PY
