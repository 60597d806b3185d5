#!/usr/bin/env bash
# ember's f32 matrix product against PyTorch's at 2 threads, and ember's 2-thread scaling, in
# interleaved runs (tools/bench/sets.py's protocol; a run is one set):
#
#   tools/bench/matmul_threads.sh [RUNS]          (default 10)
#
# Each run starts one process per configuration: ember at 2 threads, ember at 1 thread
# (crates/tensor/examples/matmul_threads.rs) and PyTorch at 2 threads
# (tools/bench/matmul_threads_torch.py, torch.set_num_threads(2)); ember's come first in odd
# runs, PyTorch first in even ones. Every process times SIZES (default 256,512,1024,2048),
# each REPS times (default 11) after one untimed product, and reports the median GFLOP/s
# and its user+system CPU time over the wall time of those products (getrusage: near 2 when
# both threads computed throughout). A host probe (sets.py probe) runs before each run.
#
# The report: per size, the median and the minimum ratio ember / PyTorch over the runs; the
# scaling, ember 2 threads / ember 1 thread, likewise; then per run the user/wall of both,
# the share of the parallel loops' blocks that ember's helper thread ran (a count: about
# 0.5 when the blocks are shared evenly), and the share of the machine's CPU time other
# processes and the hypervisor (steal) took meanwhile. Environment: PYTHON (default
# /work/venv-torch/bin/python or .venv-torch/bin/python), SIZES, REPS, CARGO_TARGET_DIR as
# usual; EMBER_* settings pass through to ember. Not part of CI: it needs PyTorch.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs="${1:-10}"
sizes="${SIZES:-256,512,1024,2048}"
reps="${REPS:-11}"
source tools/bench/three_way.sh
find_python matmul_threads.sh
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

cargo build --release -q -p ember-tensor --example matmul_threads
bin="${CARGO_TARGET_DIR:-target}/release/examples/matmul_threads"
args=(--sizes "$sizes" --reps "$reps")

three_way_runs "$out" "$runs" "$bin" tools/bench/matmul_threads_torch.py "${args[@]}"

command="tools/bench/matmul_threads.sh $runs"
[[ "$sizes" == 256,512,1024,2048 && "$reps" == 11 ]] || command="SIZES=$sizes REPS=$reps $command"
python3 - "$out" "$runs" "$command" <<'PY'
import statistics
import sys

sys.path.insert(0, "tools/bench")
import sets  # noqa: E402

out, runs, command = sys.argv[1], int(sys.argv[2]), sys.argv[3]


def load(path):
    """n -> the line's fields after the size: median GFLOP/s, slowest, user/wall, GFLOP per
    CPU-s, then ember's helper CPU share, helper blocks share, others' CPU share, steal."""
    rows = {}
    for line in open(path):
        fields = line.split("\t")
        rows[int(fields[2])] = [float(f) for f in fields[3:]]
    return rows


vs_torch = sets.Table("GFLOP/s", True, command, "ember 2 threads", "PyTorch 2 threads")
scaling = sets.Table("GFLOP/s", True, command, "ember 2 threads", "ember 1 thread")
per_run = []
for r in range(1, runs + 1):
    e2, e1, pt = load(f"{out}/ember2.{r}"), load(f"{out}/ember1.{r}"), load(f"{out}/torch.{r}")
    alone, together = open(f"{out}/probe.{r}").read().split()
    for table in (vs_torch, scaling):
        table.set_probe(r, sets.Probe(alone, together))
    for n in sorted(e2):
        workload = f"f32 [{n}, {n}] @ [{n}, {n}]"
        vs_torch.add(workload, e2[n][0], pt[n][0])
        scaling.add(workload, e2[n][0], e1[n][0])
        per_run.append((n, r, e2[n], pt[n]))

vs_torch.print()
scaling.print(with_header=False)
print("\nPer run, 2 threads: CPU time / wall time during the products and the work per CPU-second (a thread's")
print("own speed, which waiting for a CPU does not lower), for ember and PyTorch; the share of ember's tiles its")
print("helper ran; the share of all vCPUs' time other processes and the hypervisor (steal) took meanwhile.\n")
print("| size | run | ember user/wall | PyTorch user/wall | ember GFLOP/CPU-s | PyTorch GFLOP/CPU-s "
      "| ember helper tiles | others' CPU | steal |")
print("|---|---|---|---|---|---|---|---|---|")
for n, r, e, t in sorted(per_run):
    print(f"| {n} | {r} | {e[2]:.2f} | {t[2]:.2f} | {e[3]:.1f} | {t[3]:.1f} | {e[5]:.2f} | {e[6]:.2f} | {e[7]:.2f} |")
print()
for n in sorted({n for n, *_ in per_run}):
    ratios = [e[2] for m, _, e, _ in per_run if m == n]
    print(f"- {n}: ember user/wall median {statistics.median(ratios):.2f}, minimum {min(ratios):.2f}")
PY
