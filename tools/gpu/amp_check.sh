#!/usr/bin/env bash
# The 16-bit float (f16, bf16) and TF32 checks of the CUDA backend, on a real GPU.
#
#   bash tools/gpu/amp_check.sh               (from the repository root, on the GPU machine)
#
# With cargo on that machine, it builds the test binaries with `--features cuda` first.
# Without a Rust toolchain there, build them here and carry .devbin/ over:
#
#   bash tools/gpu/amp_check.sh --build-only  (here; writes .devbin/amp_*)
#
# What runs, each with its own timeout, a failure not stopping the next:
#   1. the lib test the_kernels_compile_with_nvrtc (NVRTC compiles every kernel, the
#      16-bit ones included, for sm_80);
#   2. the half_* tests of crates/tensor/tests/cuda_parity.rs: every 16-bit kernel and
#      composition on cuda:0 against the CPU within 16-bit tolerances;
#   3. crates/tensor/tests/matmul_precision.rs: "highest" keeps FP32, "high" and "medium"
#      stay within TF32's bound;
#   4. the rest of cuda_parity (the f32/f64 suites: the cuBLAS math mode and the kernel
#      source changed with the 16-bit work).
# Logs go to $OUT (./amp_out when unset): amp_check.log and summary.txt (printed last).
# The timeouts bound the whole run to about 11 minutes; it has not been timed on a GPU yet.

set -u
cd "$(dirname "$0")/../.." || exit 1
OUT="${OUT:-$PWD/amp_out}"
BIN=.devbin

# The path of the test executable cargo builds for `ARGS...` (a --test NAME or --lib).
test_binary() {
    cargo test -p ember-tensor --features cuda "$@" --no-run --message-format=json 2>/dev/null |
        python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["executable"])
' | tail -1
}

build() {
    mkdir -p "$BIN"
    local name bin
    for spec in "amp_lib --lib" "amp_cuda_parity --test cuda_parity" "amp_matmul_precision --test matmul_precision"; do
        read -r name args <<<"$spec"
        # shellcheck disable=SC2086 # two words: the flag and the test name
        bin=$(test_binary $args)
        if [[ -z "$bin" ]]; then
            echo "building $name failed; rerun: cargo test -p ember-tensor --features cuda $args --no-run" >&2
            exit 1
        fi
        cp "$bin" "$BIN/$name"
        echo "  $BIN/$name"
    done
}

if [[ "${1:-}" == "--build-only" ]]; then
    build
    echo "carry $BIN/amp_* to the GPU machine and run: bash tools/gpu/amp_check.sh"
    exit 0
fi
if command -v cargo >/dev/null; then
    build || exit 1
fi
for b in amp_lib amp_cuda_parity amp_matmul_precision; do
    [[ -x "$BIN/$b" ]] || { echo "missing $BIN/$b: run with --build-only where cargo is" >&2; exit 1; }
done

mkdir -p "$OUT"
LOG="$OUT/amp_check.log"
SUMMARY="$OUT/summary.txt"
: >"$LOG"
: >"$SUMMARY"
{
    echo "date: $(date -u)"
    echo "commit: $(git log -1 --format='%h %s' 2>/dev/null || echo unknown)"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 || echo "nvidia-smi failed"
} | tee -a "$SUMMARY"

# The CUDA 13 libraries cudarc opens at run time (as tools/bench/cuda/device_run.sh finds them).
SEARCH=(/usr/local/nvidia/lib64 /usr/local/cuda*/lib64 /usr/local/cuda*/targets/x86_64-linux/lib
    /usr/lib/x86_64-linux-gnu /usr/lib64
    /opt/torch/.venv/lib/python3*/site-packages/nvidia/*/lib
    /opt/torch/.venv/lib/python3*/site-packages/nvidia/*/*/lib
    /opt/torch/.venv/lib/python3*/site-packages/torch/lib)
LIBDIRS=()
for lib in libcuda.so.1 libcublas.so.13 libcublasLt.so.13 libnvrtc.so.13; do
    found=""
    for d in "${SEARCH[@]}"; do
        [[ -e "$d/$lib" ]] && found="$d" && break
    done
    [[ -z "$found" ]] && found=$(ldconfig -p 2>/dev/null | awk -v l="$lib" '$1 == l { print $NF; exit }' | xargs -r dirname)
    if [[ -n "$found" ]]; then
        echo "found $lib in $found" | tee -a "$SUMMARY"
        [[ " ${LIBDIRS[*]:-} " == *" $found "* ]] || LIBDIRS+=("$found")
    else
        echo "NOT FOUND: $lib" | tee -a "$SUMMARY"
    fi
done
LD_LIBRARY_PATH="$(IFS=:; echo "${LIBDIRS[*]:-}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH RUST_BACKTRACE=0

# step NAME TIMEOUT CMD...: runs CMD into the log and records the outcome.
step() {
    local name=$1 lim=$2 t0=$SECONDS rc status
    shift 2
    echo "===== $name: $* (timeout ${lim}s)" | tee -a "$LOG"
    timeout --kill-after=10 "$lim" "$@" >>"$LOG" 2>&1
    rc=$?
    status="ok"
    ((rc == 124 || rc == 137)) && status="TIMEOUT after ${lim}s"
    ((rc != 0 && rc != 124 && rc != 137)) && status="FAILED (exit $rc)"
    echo "$name: $status in $((SECONDS - t0)) s; $(grep -E '^test result:' "$LOG" | tail -1)" | tee -a "$SUMMARY"
}

step "NVRTC compiles the kernels" 120 "$BIN/amp_lib" the_kernels_compile_with_nvrtc --nocapture
step "cuda_parity half_*" 240 "$BIN/amp_cuda_parity" half_ --test-threads=1 --nocapture
step "matmul_precision" 60 "$BIN/amp_matmul_precision" --nocapture
step "cuda_parity (all other tests)" 240 "$BIN/amp_cuda_parity" --skip half_ --test-threads=1
{
    echo
    echo "failing tests:"
    grep -E "^test .* FAILED$" "$LOG" || echo "  none"
    echo "skipped (no device) lines:"
    grep -E "skipped, no CUDA device|skipped, NVRTC" "$LOG" || echo "  none"
} >>"$SUMMARY"
echo
cat "$SUMMARY"
