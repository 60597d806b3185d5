#!/usr/bin/env bash
# A Linear layer's three training products (forward x @ w^T, input gradient g @ w, weight
# gradient g^T @ x, with the operand layouts the layer passes) at the Transformer's d_model
# 256 shapes, ember against PyTorch, in interleaved runs (tools/bench/sets.py's protocol; a
# run is one set):
#
#   tools/bench/linear_products.sh [RUNS]          (default 6)
#
# Each run starts one process per configuration: ember at 2 threads, ember at 1 thread
# (crates/tensor/examples/linear_products.rs) and PyTorch at 2 threads
# (tools/bench/linear_products_torch.py); ember's come first in odd runs, PyTorch first in
# even ones. Every process times each product REPS times (default 11) after one untimed one
# and reports the median GFLOP/s. The report: per product, the median and minimum ratio
# ember 2 threads / PyTorch 2 threads and ember 2 threads / ember 1 thread over the runs.
# Environment: PYTHON (default /work/venv-torch/bin/python or .venv-torch/bin/python),
# TOKENS (default 2048,16384), LAYERS (in:out pairs, default 256:768,256:256,256:1024,1024:256),
# REPS. Not part of CI: it needs PyTorch.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs="${1:-6}"
tokens="${TOKENS:-2048,16384}"
layers="${LAYERS:-256:768,256:256,256:1024,1024:256}"
reps="${REPS:-11}"
source tools/bench/three_way.sh
find_python linear_products.sh
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

cargo build --release -q -p ember-tensor --example linear_products
bin="${CARGO_TARGET_DIR:-target}/release/examples/linear_products"
args=(--tokens "$tokens" --layers "$layers" --reps "$reps")

three_way_runs "$out" "$runs" "$bin" tools/bench/linear_products_torch.py "${args[@]}"

python3 - "$out" "$runs" "tools/bench/linear_products.sh $runs" <<'PY'
import sys

sys.path.insert(0, "tools/bench")
import sets  # noqa: E402

out, runs, command = sys.argv[1], int(sys.argv[2]), sys.argv[3]


def load(path):
    """(product, tokens, in, out) -> median GFLOP/s."""
    rows = {}
    for line in open(path):
        f = line.rstrip("\n").split("\t")
        rows[(f[2], int(f[3]), int(f[4]), int(f[5]))] = float(f[6])
    return rows


vs_torch = sets.Table("GFLOP/s", True, command, "ember 2 threads", "PyTorch 2 threads")
scaling = sets.Table("GFLOP/s", True, command, "ember 2 threads", "ember 1 thread")
for r in range(1, runs + 1):
    e2, e1, pt = load(f"{out}/ember2.{r}"), load(f"{out}/ember1.{r}"), load(f"{out}/torch.{r}")
    alone, together = open(f"{out}/probe.{r}").read().split()
    for table in (vs_torch, scaling):
        table.set_probe(r, sets.Probe(alone, together))
    for key in e2:
        product, tokens, inn, outn = key
        shapes = {
            "forward": f"[{tokens}, {inn}] @ [{inn}, {outn}]",
            "input": f"[{tokens}, {outn}] @ [{outn}, {inn}]",
            "weight": f"[{outn}, {tokens}] @ [{tokens}, {inn}]",
        }
        workload = f"{product} {shapes[product]}"
        vs_torch.add(workload, e2[key], pt[key])
        scaling.add(workload, e2[key], e1[key])
vs_torch.print()
scaling.print(with_header=False)
PY
