#!/usr/bin/env bash
# Training-step speed of one workload, ember vs PyTorch, on this machine, both at 2 threads,
# alternating which side runs first in each round so that load changes hit both alike:
#
#   tools/bench/step_compare.sh PACKAGE EXAMPLE TORCH_SCRIPT LABEL BATCH [ROUNDS]
#
# Each round runs ember's example EXAMPLE of crate PACKAGE (built in release) and the
# PyTorch script TORCH_SCRIPT; both print `step_ms=...`. Prints the median over rounds of
# each side's per-round median step time, the throughput at BATCH samples per step, and the
# ratio ember / PyTorch samples/s (above 1: ember is faster). The per-workload scripts
# (lstm_compare.sh, transformer_compare.sh) call this. Not part of CI: it needs PyTorch
# (PYTHON, default .venv-torch/bin/python).
set -euo pipefail
cd "$(dirname "$0")/../.."
package="$1" example="$2" torch_script="$3" label="$4" batch="$5"
rounds="${6:-5}"
python="${PYTHON:-.venv-torch/bin/python}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

cargo build --release -q -p "$package" --example "$example"
bin="${CARGO_TARGET_DIR:-target}/release/examples/$example"
for r in $(seq 1 "$rounds"); do
    if (( r % 2 )); then
        "$bin" >>"$out/ember"
        "$python" "$torch_script" >>"$out/torch"
    else
        "$python" "$torch_script" >>"$out/torch"
        "$bin" >>"$out/ember"
    fi
done

python3 - "$out/ember" "$out/torch" "$label" "$batch" <<'PY'
import re
import statistics
import sys


def load(path):
    ms = [float(m) for m in re.findall(r"step_ms=([\d.]+)", open(path).read())]
    return statistics.median(ms)


ember, torch = load(sys.argv[1]), load(sys.argv[2])
label, batch = sys.argv[3], float(sys.argv[4])
print(f"{'workload':<44} {'ember':>14} {'PyTorch':>14} {'ratio':>7}")
print(f"{label + ', step ms':<44} {ember:>14.2f} {torch:>14.2f}")
print(f"{'  samples/s':<44} {batch * 1e3 / ember:>14.0f} {batch * 1e3 / torch:>14.0f} {torch / ember:>6.2f}x")
PY
