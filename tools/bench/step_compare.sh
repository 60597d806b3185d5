#!/usr/bin/env bash
# Training-step speed of one workload, ember vs PyTorch, on this machine, both at 2 threads,
# in interleaved sets (tools/bench/sets.py):
#
#   tools/bench/step_compare.sh PACKAGE EXAMPLE TORCH_SCRIPT LABEL BATCH [SETS] [COMMAND]
#
# Each set runs ember's example EXAMPLE of crate PACKAGE (built in release) and the PyTorch
# script TORCH_SCRIPT back to back, ember first in odd sets; both print `step_ms=...`. The
# report shows each set's throughput at BATCH samples per step and its ratio ember /
# PyTorch (above 1: ember is faster), then the median and the minimum ratio over the SETS
# sets (default 5). COMMAND is the command line the report names (the per-workload script
# that called this one: lstm_compare.sh, transformer_compare.sh). Not part of CI: it needs
# PyTorch (PYTHON, default .venv-torch/bin/python).
set -euo pipefail
cd "$(dirname "$0")/../.."
package="$1" example="$2" torch_script="$3" label="$4" batch="$5"
sets="${6:-5}"
command="${7:-tools/bench/step_compare.sh $package $example $torch_script \"$label\" $batch $sets}"
python="${PYTHON:-.venv-torch/bin/python}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

cargo build --release -q -p "$package" --example "$example"
bin="${CARGO_TARGET_DIR:-target}/release/examples/$example"
for s in $(seq 1 "$sets"); do
    if (( s % 2 )); then
        "$bin" >"$out/ember.$s"
        "$python" "$torch_script" >"$out/torch.$s"
    else
        "$python" "$torch_script" >"$out/torch.$s"
        "$bin" >"$out/ember.$s"
    fi
done

python3 - "$out" "$sets" "$label" "$batch" "$command" <<'PY'
import re
import sys

sys.path.insert(0, "tools/bench")
import sets  # noqa: E402

out, n, label, batch, command = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4]), sys.argv[5]


def step_ms(path):
    return float(re.search(r"step_ms=([\d.]+)", open(path).read()).group(1))


table = sets.Table("samples/s", higher_is_better=True, command=command)
for s in range(1, n + 1):
    ember, torch = step_ms(f"{out}/ember.{s}"), step_ms(f"{out}/torch.{s}")
    table.add(f"{label}, training", batch * 1e3 / ember, batch * 1e3 / torch)
table.print()
PY
