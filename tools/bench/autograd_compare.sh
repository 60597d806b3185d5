#!/usr/bin/env bash
# Per-op autograd overhead, ember vs PyTorch, on this machine, one after the other:
#
#   tools/bench/autograd_compare.sh [ROUNDS]
#
# Each round runs ember's `overhead` example and tools/bench/autograd_torch.py; the table
# shows the median over rounds of each side's per-round median, in µs per op, and the
# ratio PyTorch / ember (above 1: ember is faster). Not part of CI: it needs PyTorch
# (PYTHON, default .venv-torch/bin/python).
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds="${1:-3}"
python="${PYTHON:-.venv-torch/bin/python}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

cargo build --release -q -p ember-autograd --example overhead
bin="${CARGO_TARGET_DIR:-target}/release/examples/overhead"
for r in $(seq 1 "$rounds"); do
    "$bin" >>"$out/ember"
    "$python" tools/bench/autograd_torch.py >>"$out/torch"
done

python3 - "$out/ember" "$out/torch" <<'PY'
import re
import statistics
import sys


def load(path):
    vals = {}
    for line in open(path):
        n = re.search(r"numel=(\d+)", line).group(1)
        for key, v in re.findall(r"(\w+)_us=([\d.]+)", line):
            vals.setdefault((n, key), []).append(float(v))
    return {k: statistics.median(v) for k, v in vals.items()}


ember, torch = load(sys.argv[1]), load(sys.argv[2])
print(f"{'workload':<34} {'ember µs/op':>12} {'PyTorch µs/op':>14} {'ratio':>7}")
for (n, key) in sorted(ember):
    e, t = ember[(n, key)], torch[(n, key)]
    print(f"{key + ' numel=' + n:<34} {e:>12.3f} {t:>14.3f} {t / e:>6.1f}x")
PY
