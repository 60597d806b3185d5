#!/usr/bin/env bash
# Per-op autograd overhead, ember vs PyTorch, on this machine, in interleaved sets
# (tools/bench/sets.py):
#
#   tools/bench/autograd_compare.sh [SETS]      (default 5)
#
# Each set runs ember's `overhead` example and tools/bench/autograd_torch.py back to back,
# ember first in odd sets. The report shows, per phase and tensor size, each set's µs per
# op on both sides and its ratio PyTorch / ember (above 1: ember is faster), then the
# median and the minimum ratio over the sets. Not part of CI: it needs PyTorch (PYTHON,
# default .venv-torch/bin/python).
set -euo pipefail
cd "$(dirname "$0")/../.."
sets="${1:-5}"
python="${PYTHON:-.venv-torch/bin/python}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

cargo build --release -q -p ember-autograd --example overhead
bin="${CARGO_TARGET_DIR:-target}/release/examples/overhead"
for s in $(seq 1 "$sets"); do
    if (( s % 2 )); then
        "$bin" >"$out/ember.$s"
        "$python" tools/bench/autograd_torch.py >"$out/torch.$s"
    else
        "$python" tools/bench/autograd_torch.py >"$out/torch.$s"
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
    """(phase, numel) -> µs per op, in the order the example prints them."""
    vals = {}
    for line in open(path):
        found = re.search(r"numel=(\d+)", line)
        if found:
            for key, v in re.findall(r"(\w+)_us=([\d.]+)", line):
                vals[(key, int(found.group(1)))] = float(v)
    return vals


table = sets.Table("µs per op", higher_is_better=False, command=f"tools/bench/autograd_compare.sh {n}")
for s in range(1, n + 1):
    ember, torch = load(f"{out}/ember.{s}"), load(f"{out}/torch.{s}")
    for key, numel in ember:
        table.add(f"autograd {key.replace('_', ' ')}, numel {numel}", ember[(key, numel)], torch[(key, numel)])
table.print()
PY
