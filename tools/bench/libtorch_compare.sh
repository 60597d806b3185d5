#!/usr/bin/env bash
# ember on LibTorch (`torch-cpu`, the `libtorch` feature) beside ember's own CPU backend and
# PyTorch itself, all at 2 threads, in interleaved sets (tools/bench/sets.py):
#
#   tools/bench/libtorch_compare.sh [SETS]      (default 3)
#
# Workloads: the MNIST quick starts' training (the MLP and LeNet-5, `train_bench` eager at
# batch 64 against tools/bench/mlp_train.py), the convolution layer (`conv_bench` against
# tools/bench/conv_torch.py), the LSTM (`lstm_bench` against tools/bench/lstm_torch.py) and
# the Transformer encoder (`transformer_bench` against tools/bench/transformer_torch.py).
# ember's binaries are built once with the feature and run with `--device cpu` and
# `--device torch-cpu`. Each set runs the three sides of a workload back to back, the
# first side rotating from set to set so that a change of load hits each alike. The
# report is two tables per unit: torch-cpu against ember's cpu (above 1: LibTorch is
# faster), and torch-cpu against PyTorch (above 1: ember on LibTorch is faster than
# PyTorch, i.e. ember's own overhead per op is what separates them), each with every set,
# the medians, and the median and minimum ratio. (The tables' line on which side ran first
# is sets.py's wording for two sides; here the order rotates over the three as said.) A host
# probe (sets.py probe) is taken before each set.
#
# EPOCHS (default 1) sets the timed MNIST epochs. Not part of CI: it needs PyTorch (PYTHON,
# default .venv-torch/bin/python) and LibTorch (LIBTORCH_VENV, default /work/venv-libtorch;
# see tools/libtorch/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
sets="${1:-3}"
epochs="${EPOCHS:-1}"
python="${PYTHON:-.venv-torch/bin/python}"
eval "$(tools/libtorch/setup.sh --env "${LIBTORCH_VENV:-/work/venv-libtorch}")"
# The PyTorch baseline runs as the other comparisons run it; only LibTorch inside ember
# gets the passive OpenMP wait (see tools/libtorch/setup.sh).
unset OMP_WAIT_POLICY
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

cargo build --release -q --features ember/libtorch -p ember --example train_bench --example transformer_bench
cargo build --release -q -p ember-nn --features ember-tensor/libtorch --example conv_bench --example lstm_bench
bin="${CARGO_TARGET_DIR:-target}/release/examples"

# side WORKLOAD SIDE SET: one run of one side, its output in $out/WORKLOAD.SIDE.SET.
side() {
    local w="$1" s="$2" n="$3" args=() py=()
    case "$w" in
        mlp) args=(train_bench --model mlp --batch 64 --epochs "$epochs")
             py=(tools/bench/mlp_train.py --model mlp --batch 64 --epochs "$epochs") ;;
        lenet) args=(train_bench --model lenet --batch 64 --epochs "$epochs")
               py=(tools/bench/mlp_train.py --model lenet --batch 64 --epochs "$epochs") ;;
        conv) args=(conv_bench) py=(tools/bench/conv_torch.py) ;;
        lstm) args=(lstm_bench) py=(tools/bench/lstm_torch.py) ;;
        transformer) args=(transformer_bench) py=(tools/bench/transformer_torch.py) ;;
    esac
    case "$s" in
        cpu) "$bin/${args[0]}" "${args[@]:1}" --device cpu >"$out/$w.$s.$n" ;;
        torch) OMP_WAIT_POLICY=PASSIVE "$bin/${args[0]}" "${args[@]:1}" --device torch-cpu >"$out/$w.$s.$n" ;;
        pytorch) "$python" "${py[@]}" >"$out/$w.$s.$n" ;;
    esac
}

workloads=(mlp lenet conv lstm transformer)
rotations=("cpu torch pytorch" "torch pytorch cpu" "pytorch cpu torch")
for n in $(seq 1 "$sets"); do
    python3 tools/bench/sets.py probe >"$out/probe.$n"
    for w in "${workloads[@]}"; do
        for s in ${rotations[$(((n - 1) % 3))]}; do
            side "$w" "$s" "$n"
        done
    done
done

python3 - "$out" "$sets" <<'PY'
import re
import sys

sys.path.insert(0, "tools/bench")
import sets  # noqa: E402

out, n = sys.argv[1], int(sys.argv[2])
command = f"tools/bench/libtorch_compare.sh {n}"


def text(w, side, s):
    return open(f"{out}/{w}.{side}.{s}").read()


def mnist_rate(body):
    """samples/s of batch 64: `eager 64 RATE` (ember) or `pytorch 64 RATE`."""
    return float(re.search(r"^(?:eager|pytorch)\s+64\s+([\d.]+)", body, re.M).group(1))


def step_ms(body):
    return float(re.search(r"step_ms=([\d.]+)", body).group(1))


def conv_ms(body):
    """(c, hw, phase) -> ms, from ember's `c=64->64 k=3 hw=56 ...` or PyTorch's `c=64 hw=56 ...`."""
    vals = {}
    for line in body.splitlines():
        shape = re.match(r"c=(\d+)(?:->\d+)?(?: k=\d+)? hw=(\d+)", line)
        if shape:
            for phase, v in re.findall(r"(\w+)_ms=([\d.]+)", line):
                vals[(int(shape.group(1)), int(shape.group(2)), phase)] = float(v)
    return vals


# (unit, higher is better) -> rows of (workload, set, {side: figure}).
rows = {("samples/s", True): [], ("ms", False): []}
for s in range(1, n + 1):
    for w, label in (("mlp", "MNIST MLP training, batch 64"), ("lenet", "LeNet-5 training on MNIST, batch 64")):
        rows[("samples/s", True)].append((label, {side: mnist_rate(text(w, side, s)) for side in ("cpu", "torch", "pytorch")}))
    for w, label, batch in (
        ("lstm", "LSTM(28, 128), T=28, batch 64, training", 64),
        ("transformer", "Transformer encoder 4x128, seq 64, batch 32, training", 32),
    ):
        rate = {side: batch * 1e3 / step_ms(text(w, side, s)) for side in ("cpu", "torch", "pytorch")}
        rows[("samples/s", True)].append((label, rate))
    conv = {side: conv_ms(text("conv", side, s)) for side in ("cpu", "torch", "pytorch")}
    for c, hw, phase in conv["cpu"]:
        label = f"conv2d {c}->{c} 3x3 pad 1 on {hw}x{hw}, batch 8, {phase.replace('_', ' + ')}"
        rows[("ms", False)].append((label, {side: conv[side][(c, hw, phase)] for side in conv}))

for (unit, higher), entries in rows.items():
    for base, base_name in (("cpu", "ember cpu"), ("pytorch", "PyTorch")):
        table = sets.Table(unit, higher_is_better=higher, command=command, ember_name="ember torch-cpu", base_name=base_name)
        for label, fig in entries:
            table.add(label, fig["torch"], fig[base])
        for s in range(1, n + 1):
            table.set_probe(s, sets.Probe(*open(f"{out}/probe.{s}").read().split()))
        table.print()
        print()
PY
