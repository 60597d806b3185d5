#!/usr/bin/env bash
# Convolution speed, ember vs PyTorch, on this machine, both at 2 threads, in interleaved
# sets (tools/bench/sets.py):
#
#   tools/bench/conv_compare.sh [SETS]      (default 5)
#
# Each set runs ember's `conv_bench` example (crates/nn/examples/conv_bench.rs) and
# tools/bench/conv_torch.py back to back, ember first in odd sets: a Conv2d(c, c, 3,
# padding=1) with bias on a batch of 8, forward and forward + backward, for c=64 on 56x56
# and c=128 on 28x28. The report shows each set's median ms on both sides and its ratio
# PyTorch / ember (above 1: ember is faster), then the median and the minimum ratio over
# the sets. Not part of CI: it needs PyTorch (PYTHON, default .venv-torch/bin/python).
set -euo pipefail
cd "$(dirname "$0")/../.."
sets="${1:-5}"
python="${PYTHON:-.venv-torch/bin/python}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

cargo build --release -q -p ember-nn --example conv_bench
bin="${CARGO_TARGET_DIR:-target}/release/examples/conv_bench"
for s in $(seq 1 "$sets"); do
    if (( s % 2 )); then
        "$bin" >"$out/ember.$s"
        "$python" tools/bench/conv_torch.py >"$out/torch.$s"
    else
        "$python" tools/bench/conv_torch.py >"$out/torch.$s"
        "$bin" >"$out/ember.$s"
    fi
done

python3 - "$out" "$sets" <<'PY'
import re
import sys

sys.path.insert(0, "tools/bench")
import sets  # noqa: E402

out, n = sys.argv[1], int(sys.argv[2])


def load(path):
    """(c, hw, phase) -> ms. ember prints `c=64->64 k=3 hw=56 ...`, PyTorch `c=64 hw=56 ...`."""
    vals = {}
    for line in open(path):
        shape = re.match(r"c=(\d+)(?:->\d+)?(?: k=\d+)? hw=(\d+)", line)
        if shape:
            for phase, v in re.findall(r"(\w+)_ms=([\d.]+)", line):
                vals[(int(shape.group(1)), int(shape.group(2)), phase)] = float(v)
    return vals


table = sets.Table("ms", higher_is_better=False, command=f"tools/bench/conv_compare.sh {n}")
for s in range(1, n + 1):
    ember, torch = load(f"{out}/ember.{s}"), load(f"{out}/torch.{s}")
    for c, hw, phase in ember:
        label = f"conv2d {c}->{c} 3x3 pad 1 on {hw}x{hw}, batch 8, {phase.replace('_', ' + ')}"
        table.add(label, ember[(c, hw, phase)], torch[(c, hw, phase)])
table.print()
PY
