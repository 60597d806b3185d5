#!/usr/bin/env bash
# Transformer encoder training speed, ember vs PyTorch, on this machine, both at 2 threads, alternating
# which side runs first in each round so that load changes hit both alike:
#
#   tools/bench/transformer_compare.sh [ROUNDS]
#
# Each round runs ember's `transformer_bench` example (crates/ember/examples/transformer_bench.rs) and
# tools/bench/transformer_torch.py: a 4-layer Transformer encoder (d_model 128, 4 heads,
# feed-forward 512, batch first, dropout 0) over sequences of 64, batch 32, mean pooling, a
# Linear head, cross entropy, backward and an Adam step. Prints the median over rounds of each side's
# per-round median step time and throughput, and the ratio ember / PyTorch samples/s (above
# 1: ember is faster). Not part of CI: it needs PyTorch (PYTHON, default
# .venv-torch/bin/python).
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds="${1:-5}"
python="${PYTHON:-.venv-torch/bin/python}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

cargo build --release -q -p ember --example transformer_bench
bin="${CARGO_TARGET_DIR:-target}/release/examples/transformer_bench"
for r in $(seq 1 "$rounds"); do
    if (( r % 2 )); then
        "$bin" >>"$out/ember"
        "$python" tools/bench/transformer_torch.py >>"$out/torch"
    else
        "$python" tools/bench/transformer_torch.py >>"$out/torch"
        "$bin" >>"$out/ember"
    fi
done

python3 - "$out/ember" "$out/torch" <<'PY'
import re
import statistics
import sys


def load(path):
    ms = [float(m) for m in re.findall(r"step_ms=([\d.]+)", open(path).read())]
    return statistics.median(ms)


ember, torch = load(sys.argv[1]), load(sys.argv[2])
print(f"{'workload':<44} {'ember':>14} {'PyTorch':>14} {'ratio':>7}")
print(f"{'Transformer encoder 4x128, seq 64, batch 32, ms':<44} {ember:>14.2f} {torch:>14.2f}")
print(f"{'  samples/s':<44} {32e3 / ember:>14.0f} {32e3 / torch:>14.0f} {torch / ember:>6.2f}x")
PY
