#!/usr/bin/env bash
# MNIST training throughput, ember (eager and traced) vs PyTorch, on this machine, both at
# 2 threads, alternating rounds so that load changes hit both sides alike:
#
#   tools/bench/mlp_train.sh [ROUNDS] [EPOCHS]
#   MODEL=lenet tools/bench/mlp_train.sh 3 2     # LeNet-5 (MODEL=cnn: the CNN quick start's model)
#
# Each round runs ember's `train_bench` example (eager, then traced) and
# tools/bench/mlp_train.py for batch 64 and 256; the table shows the median over rounds of
# samples/s and the ratio ember / PyTorch (above 1: ember is faster). Not part of CI: it
# needs PyTorch (PYTHON, default .venv-torch/bin/python).
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds="${1:-3}"
epochs="${2:-3}"
python="${PYTHON:-.venv-torch/bin/python}"
model="${MODEL:-mlp}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

cargo build --release -q -p ember --example train_bench
bin="${CARGO_TARGET_DIR:-target}/release/examples/train_bench"
for r in $(seq 1 "$rounds"); do
    if (( r % 2 )); then
        "$bin" --model "$model" --epochs "$epochs" --traced >>"$out/runs"
        "$python" tools/bench/mlp_train.py --model "$model" --epochs "$epochs" >>"$out/runs"
    else
        "$python" tools/bench/mlp_train.py --model "$model" --epochs "$epochs" >>"$out/runs"
        "$bin" --model "$model" --epochs "$epochs" --traced --traced-first >>"$out/runs"
    fi
done

python3 - "$out/runs" <<'PY'
import statistics
import sys

rates = {}
for line in open(sys.argv[1]):
    if line.startswith("#"):
        continue
    mode, batch, rate = line.split()
    rates.setdefault((mode, int(batch)), []).append(float(rate))
med = {k: statistics.median(v) for k, v in rates.items()}
print(f"{'batch':>5} {'ember eager':>12} {'ember traced':>13} {'PyTorch':>9} {'eager/PyTorch':>14} {'traced/eager':>13}")
for batch in sorted({b for _, b in med}):
    e, t, p = med[("eager", batch)], med[("traced", batch)], med[("pytorch", batch)]
    print(f"{batch:>5} {e:>12.0f} {t:>13.0f} {p:>9.0f} {e / p:>13.2f}x {t / e:>12.2f}x")
print(f"(samples/s, median of {len(rates[('eager', 64)])} rounds)")
PY
