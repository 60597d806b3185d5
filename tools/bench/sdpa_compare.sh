#!/usr/bin/env bash
# Scaled dot-product attention, forward + backward, ember's blocked kernel vs ember's plain
# composition vs PyTorch's F.scaled_dot_product_attention, all at 2 threads, f32, E = 64:
#
#   tools/bench/sdpa_compare.sh [REPS]
#
# Every measurement is its own process (ember's `sdpa_bench` example,
# crates/nn/examples/sdpa_bench.rs, or tools/bench/sdpa_torch.py) run under /usr/bin/time,
# so that its peak resident memory belongs to that configuration alone. The table shows
# the median time in ms and the peak RSS in MiB. Not part of CI: it needs PyTorch (PYTHON,
# default .venv-torch/bin/python).
set -euo pipefail
cd "$(dirname "$0")/../.."
reps="${1:-5}"
python="${PYTHON:-.venv-torch/bin/python}"

cargo build --release -q -p ember-nn --example sdpa_bench
bin="${CARGO_TARGET_DIR:-target}/release/examples/sdpa_bench"
printf '%-9s %2s %2s %5s %10s %9s\n' path B H L time_ms peak_MiB
for cfg in "1 4 512" "4 8 512" "1 4 2048" "4 8 2048"; do
    read -r b h l <<<"$cfg"
    for path in kernel composed torch; do
        log="$(mktemp)"
        if [[ $path == torch ]]; then
            line="$(/usr/bin/time -f '%M' -o "$log" "$python" tools/bench/sdpa_torch.py "$b" "$h" "$l" "$reps")"
        else
            line="$(/usr/bin/time -f '%M' -o "$log" "$bin" "$path" "$b" "$h" "$l" "$reps")"
        fi
        ms="${line##*forward_backward_ms=}"
        printf '%-9s %2s %2s %5s %10s %9d\n' "$path" "$b" "$h" "$l" "$ms" $(( $(tail -1 "$log") / 1024 ))
        rm -f "$log"
    done
done
