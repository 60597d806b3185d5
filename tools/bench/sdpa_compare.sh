#!/usr/bin/env bash
# Scaled dot-product attention, forward + backward, ember's blocked kernel and ember's plain
# composition vs PyTorch's F.scaled_dot_product_attention, all at 2 threads, f32, E = 64,
# in interleaved sets (tools/bench/sets.py):
#
#   tools/bench/sdpa_compare.sh [SETS] [REPS]      (defaults 3 5)
#
# Every measurement is its own process (ember's `sdpa_bench` example,
# crates/nn/examples/sdpa_bench.rs, or tools/bench/sdpa_torch.py, each timing the median of
# REPS repetitions after a warm-up) run under /usr/bin/time, so that its peak resident
# memory belongs to that configuration alone. A set runs, for each shape, the kernel, the
# composition and PyTorch back to back, in that order in odd sets and the reverse in even
# ones. The report shows each set's ms and its ratio PyTorch / ember for both ember paths
# (above 1: ember is faster), then the median and the minimum ratio over the sets, and the
# median peak RSS in MiB. Not part of CI: it needs PyTorch (PYTHON, default
# .venv-torch/bin/python).
set -euo pipefail
cd "$(dirname "$0")/../.."
sets="${1:-3}"
reps="${2:-5}"
python="${PYTHON:-.venv-torch/bin/python}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

cargo build --release -q -p ember-nn --example sdpa_bench
bin="${CARGO_TARGET_DIR:-target}/release/examples/sdpa_bench"
for s in $(seq 1 "$sets"); do
    paths=(kernel composed torch)
    (( s % 2 )) || paths=(torch composed kernel)
    for cfg in "1 4 512" "4 8 512" "1 4 2048" "4 8 2048"; do
        read -r b h l <<<"$cfg"
        for path in "${paths[@]}"; do
            if [[ $path == torch ]]; then
                line="$(/usr/bin/time -f '%M' -o "$out/rss" "$python" tools/bench/sdpa_torch.py "$b" "$h" "$l" "$reps")"
            else
                line="$(/usr/bin/time -f '%M' -o "$out/rss" "$bin" "$path" "$b" "$h" "$l" "$reps")"
            fi
            printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$s" "$b" "$h" "$l" "$path" "${line##*forward_backward_ms=}" \
                "$(tail -1 "$out/rss")" >>"$out/runs"
        done
    done
done

python3 - "$out/runs" "tools/bench/sdpa_compare.sh $sets $reps" <<'PY'
import statistics
import sys

sys.path.insert(0, "tools/bench")
import sets  # noqa: E402

runs, command = sys.argv[1], sys.argv[2]
ms, rss = {}, {}
for line in open(runs):
    s, b, h, l, path, t, kib = line.split()
    ms[(int(s), f"B={b} H={h} L={l}", path)] = float(t)
    rss.setdefault((f"B={b} H={h} L={l}", path), []).append(int(kib) / 1024)

names = {"kernel": "blocked kernel", "composed": "plain composition"}
table = sets.Table("ms", higher_is_better=False, command=command)
for (s, shape, path), t in ms.items():
    if path != "torch":
        table.add(f"scaled_dot_product_attention fwd+bwd, {shape} E=64, {names[path]}", t, ms[(s, shape, "torch")])
table.print()
print("\npeak resident memory of the process, MiB, median over the sets:\n")
print("| shape | blocked kernel | plain composition | PyTorch |")
print("|---|---|---|---|")
for shape in dict.fromkeys(shape for shape, _ in rss):
    mib = [f"{statistics.median(rss[(shape, p)]):,.0f}" for p in ("kernel", "composed", "torch")]
    print(f"| {shape} E=64 | " + " | ".join(mib) + " |")
PY
