#!/usr/bin/env bash
# Convolution speed, ember vs PyTorch, on this machine, both at 2 threads, alternating which
# side runs first in each round so that load changes hit both alike:
#
#   tools/bench/conv_compare.sh [ROUNDS]
#
# Each round runs ember's `conv_bench` example (crates/nn/examples/conv_bench.rs) and
# tools/bench/conv_torch.py: a Conv2d(c, c, 3, padding=1) with bias on a batch of 8,
# forward and forward + backward, for c=64 on 56x56 and c=128 on 28x28. The table shows
# the median over rounds of each side's per-round median, in ms, and the ratio
# PyTorch / ember (above 1: ember is faster). Not part of CI: it needs PyTorch (PYTHON,
# default .venv-torch/bin/python).
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds="${1:-5}"
python="${PYTHON:-.venv-torch/bin/python}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

cargo build --release -q -p ember-nn --example conv_bench
bin="${CARGO_TARGET_DIR:-target}/release/examples/conv_bench"
for r in $(seq 1 "$rounds"); do
    if (( r % 2 )); then
        "$bin" >>"$out/ember"
        "$python" tools/bench/conv_torch.py >>"$out/torch"
    else
        "$python" tools/bench/conv_torch.py >>"$out/torch"
        "$bin" >>"$out/ember"
    fi
done

python3 - "$out/ember" "$out/torch" <<'PY'
import re
import statistics
import sys


def load(path):
    vals = {}
    for line in open(path):
        shape = re.match(r"(c=\d+ hw=\d+)", line).group(1)
        for key, v in re.findall(r"(\w+)_ms=([\d.]+)", line):
            vals.setdefault((shape, key), []).append(float(v))
    return {k: statistics.median(v) for k, v in vals.items()}


ember, torch = load(sys.argv[1]), load(sys.argv[2])
print(f"{'workload (batch 8, 3x3, pad 1)':<40} {'ember ms':>9} {'PyTorch ms':>11} {'ratio':>7}")
for (shape, key) in sorted(ember):
    e, t = ember[(shape, key)], torch[(shape, key)]
    print(f"{shape + ' ' + key:<40} {e:>9.2f} {t:>11.2f} {t / e:>6.2f}x")
PY
