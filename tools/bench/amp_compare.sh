#!/usr/bin/env bash
# Mixed-precision training speed and activation memory, ember vs PyTorch, both at 2 threads
# on the CPU, in interleaved sets (the protocol of tools/bench/step_compare.sh, reported by
# tools/bench/sets.py):
#
#   tools/bench/amp_compare.sh [SETS] [EPOCHS]      (defaults 3 1)
#
# Workloads: LeNet-5 on MNIST at batch 64 (as `MODEL=lenet tools/bench/mlp_train.sh` trains
# it: one warm-up epoch, the median samples/s over EPOCHS timed epochs) and the 4-layer
# Transformer encoder of tools/bench/transformer_compare.sh. Each set runs, back to back and
# ember first in odd sets: ember under bf16 autocast (`train_bench --amp bf16`,
# `transformer_bench --amp bf16`), ember in f32, and PyTorch under
# `torch.autocast("cpu", dtype=torch.bfloat16)` (tools/bench/amp_torch.py). The report has
# three tables: ember bf16 / PyTorch bf16, ember f32 / PyTorch bf16, and ember's activation
# bytes per step, bf16 / f32 (the peak live tensor bytes of a step above the parameters,
# gradients and Adam state; the target is bf16 <= 0.6x f32). `uptime` is printed before and
# after. Not part of CI: it needs PyTorch (PYTHON, default .venv-torch/bin/python).
#
# SLICES (default 3) cuts each set into that many alternating pairs of runs, ember bf16 and
# PyTorch in turn (ember first in odd slices of odd sets, as the sets alternate); a set's
# figure per side is the median over its slices, so that a slow stretch of the shared host
# (tens of seconds, seen on every machine) falls on both sides of a set rather than on the
# one run it happens to cover. ember's f32 run, which only feeds the second table and the
# memory ratio, runs once per set, in its first slice. SLICES=1 is the plain protocol.
#
# WORKLOADS="lenet transformer" (the default) picks the workloads, DATA (default
# data/mnist) the MNIST directory LeNet-5 trains on, and EMBER_BIN_DIR a directory of
# already built `train_bench` and `transformer_bench` binaries (skipping the build).
set -euo pipefail
cd "$(dirname "$0")/../.."
sets="${1:-3}"
epochs="${2:-1}"
slices="${SLICES:-3}"
python="${PYTHON:-.venv-torch/bin/python}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

workloads="${WORKLOADS:-lenet transformer}"
data="${DATA:-data/mnist}"
if [[ -n "${EMBER_BIN_DIR:-}" ]]; then
    dir="$EMBER_BIN_DIR"
else
    cargo build --release -q -p ember --example train_bench --example transformer_bench
    dir="${CARGO_TARGET_DIR:-target}/release/examples"
fi
# $1: set, $2: slice (ember's f32 runs only in a set's first slice).
ember() {
    if [[ " $workloads " == *" lenet "* ]]; then
        "$dir/train_bench" --model lenet --batch 64 --epochs "$epochs" --data "$data" --amp bf16 --memory >"$out/lenet-bf16.$1.$2"
        if (( $2 == 1 )); then
            "$dir/train_bench" --model lenet --batch 64 --epochs "$epochs" --data "$data" --memory >"$out/lenet-f32.$1"
        fi
    fi
    if [[ " $workloads " == *" transformer "* ]]; then
        "$dir/transformer_bench" --amp bf16 >"$out/tf-bf16.$1.$2"
        if (( $2 == 1 )); then
            "$dir/transformer_bench" >"$out/tf-f32.$1"
        fi
    fi
}
torch() {
    if [[ " $workloads " == *" lenet "* ]]; then
        "$python" tools/bench/amp_torch.py lenet --batch 64 --epochs "$epochs" --data "$data" >"$out/lenet-torch.$1.$2"
    fi
    if [[ " $workloads " == *" transformer "* ]]; then
        "$python" tools/bench/amp_torch.py transformer >"$out/tf-torch.$1.$2"
    fi
}
echo "load before: $(uptime)"
for s in $(seq 1 "$sets"); do
    for c in $(seq 1 "$slices"); do
        if (( (s + c) % 2 == 0 )); then
            ember "$s" "$c"
            torch "$s" "$c"
        else
            torch "$s" "$c"
            ember "$s" "$c"
        fi
    done
done
echo "load after: $(uptime)"

command="tools/bench/amp_compare.sh $sets $epochs"
[[ -n "${SLICES:-}" ]] && command="SLICES=$SLICES $command"
[[ "$workloads" == "lenet transformer" ]] || command="WORKLOADS=\"$workloads\" $command"
[[ "$data" == data/mnist ]] || command="DATA=$data $command"
python3 - "$out" "$sets" "$slices" "$command" <<'PY'
import os
import re
import statistics
import sys

sys.path.insert(0, "tools/bench")
import sets  # noqa: E402

out, n, slices, command = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]


def rows(path):
    """mode -> value, from `mode<TAB>batch<TAB>value` lines."""
    found = {}
    for line in open(path):
        if line.strip() and not line.startswith("#"):
            mode, _, value = line.split()
            found[mode] = float(value)
    return found


def field(path, name):
    return float(re.search(rf"{name}=([\d.]+)", open(path).read()).group(1))


def per_slice(prefix, s, value):
    """The median over set `s`'s slices of `value(path)` for the runs `prefix.s.*`."""
    return statistics.median(value(f"{prefix}.{s}.{c}") for c in range(1, slices + 1))


lenet = "LeNet-5 on MNIST, batch 64"
tf = "Transformer encoder 4x128, seq 64, batch 32"
speed = sets.Table("samples/s", higher_is_better=True, command=command, ember_name="ember bf16", base_name="PyTorch bf16")
f32 = sets.Table("samples/s", higher_is_better=True, command=command, ember_name="ember f32", base_name="PyTorch bf16")
memory = {}
for s in range(1, n + 1):
    if not os.path.exists(f"{out}/lenet-f32.{s}"):
        break
    lb = per_slice(f"{out}/lenet-bf16", s, lambda p: rows(p)["eager-bf16"])
    lt = per_slice(f"{out}/lenet-torch", s, lambda p: rows(p)["pytorch-bf16"])
    lf = rows(f"{out}/lenet-f32.{s}")
    speed.add(f"{lenet}, training", lb, lt)
    f32.add(f"{lenet}, training", lf["eager"], lt)
    bf16_bytes = rows(f"{out}/lenet-bf16.{s}.1")["activation_bytes-eager-bf16"]
    memory.setdefault(lenet, []).append((bf16_bytes, lf["activation_bytes-eager"]))
for s in range(1, n + 1):
    if not os.path.exists(f"{out}/tf-f32.{s}"):
        break
    tb = per_slice(f"{out}/tf-bf16", s, lambda p: 32e3 / field(p, "step_ms"))
    tt = per_slice(f"{out}/tf-torch", s, lambda p: 32e3 / field(p, "step_ms"))
    tfl = f"{out}/tf-f32.{s}"
    speed.add(f"{tf}, training", tb, tt)
    f32.add(f"{tf}, training", 32e3 / field(tfl, "step_ms"), tt)
    memory.setdefault(tf, []).append((field(f"{out}/tf-bf16.{s}.1", "activation_bytes"), field(tfl, "activation_bytes")))
speed.print()
print(f"\n(each set's figure per side: the median over its {slices} slice(s) of alternating runs)")
f32.print(with_header=False)
# Memory is not a speed: its own table, ratio bf16 / f32 (below 1: autocast holds less).
print("\nactivation bytes of one training step (peak live tensor bytes above parameters, gradients")
print("and Adam state); ratio = ember bf16 / ember f32, target <= 0.6\n")
print("| workload | ember bf16, per set | ember f32, per set | ratio, per set | median ratio | sets |")
print("|---|---|---|---|---|---|")
for workload, pairs in memory.items():
    ratios = [b / f for b, f in pairs]
    cells = [
        workload,
        " / ".join(f"{b:,.0f}" for b, _ in pairs),
        " / ".join(f"{f:,.0f}" for _, f in pairs),
        " / ".join(f"{r:.3f}" for r in ratios),
        f"**{statistics.median(ratios):.3f}**",
        str(len(pairs)),
    ]
    print("| " + " | ".join(cells) + " |")
PY
