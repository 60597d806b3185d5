#!/usr/bin/env bash
# The one script to run on the GPU machine: ember's device tests, ember's GPU benchmark and
# PyTorch's, on the same GPU, in one go.
#
#   bash tools/bench/cuda/device_run.sh        (from the repository root)
#
# That machine has no Rust toolchain: it runs prebuilt binaries from .devbin/ (built by
# tools/bench/cuda/build_devbin.sh, gzipped or not):
#   .devbin/cuda_bench           the cuda_bench example (--features cuda, release)
#   .devbin/<anything else>      test binaries (cuda_parity, cuda_backward, ...), each run
#                                with --test-threads=1
# and `python3` with a CUDA build of PyTorch for tools/bench/cuda/torch_gpu.py.
#
# Everything goes to $OUT (./device_out when unset) as eight files at most: env.log,
# cuda_parity.log, cuda_backward.log, tests_other.log, bench.log, ember_gpu.json,
# torch_gpu.json and summary.md (the step table and the comparison table, also printed
# last). Each step has its own timeout, cut further so that the whole script ends within
# about 5.5 minutes; a failing or hanging step does not stop the next.

set -u
cd "$(dirname "$0")/../../.." || exit 1
OUT="${OUT:-$PWD/device_out}"
mkdir -p "$OUT"
BUDGET=330 # seconds for the whole script
START=$SECONDS
SUMMARY="$OUT/summary.md"
STEPS=()

log() { echo "[device_run +$((SECONDS - START))s] $*"; }

# The timeout for a step: its own limit, or what is left of the budget (at least 10 s).
limit() {
    local want=$1 left=$((BUDGET - (SECONDS - START)))
    ((left < 10)) && left=10
    ((want < left)) && echo "$want" || echo "$left"
}

# run_step NAME LIMIT LOGFILE CMD...: runs CMD with a timeout, appending to LOGFILE, and
# records the outcome for the summary.
run_step() {
    local name=$1 lim=$2 logf=$3
    shift 3
    local t0=$SECONDS rc
    lim=$(limit "$lim")
    log "$name (timeout ${lim}s) -> $(basename "$logf")"
    {
        echo "===== $name: $* (timeout ${lim}s)"
    } >>"$logf"
    timeout --kill-after=10 "$lim" "$@" >>"$logf" 2>&1
    rc=$?
    local status="ok"
    if ((rc == 124 || rc == 137)); then
        status="TIMEOUT after ${lim}s"
    elif ((rc != 0)); then
        status="FAILED (exit $rc)"
    fi
    local result
    result=$(grep -E "^test result:" "$logf" | tail -1)
    echo "===== $name: $status in $((SECONDS - t0))s" >>"$logf"
    STEPS+=("| $name | $status | $((SECONDS - t0)) s | ${result:-} |")
    log "$name: $status"
}

# ---- the machine -------------------------------------------------------------------
ENV_LOG="$OUT/env.log"
: >"$ENV_LOG"
{
    echo "date: $(date -u)"
    echo "host: $(hostname)"
    nvidia-smi || echo "nvidia-smi failed"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
} >>"$ENV_LOG" 2>&1
cat "$ENV_LOG"
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)

# ---- the CUDA libraries cudarc loads at run time -----------------------------------------
SEARCH=(/usr/local/nvidia/lib64 /usr/local/cuda*/lib64 /usr/local/cuda*/targets/x86_64-linux/lib
    /usr/lib/x86_64-linux-gnu /usr/lib64
    /opt/torch/.venv/lib/python3.12/site-packages/nvidia/*/lib)
LIBDIRS=()
for lib in libcuda.so.1 libcublas.so.13 libcublasLt.so.13 libnvrtc.so.13; do
    found=""
    for d in "${SEARCH[@]}"; do
        if [[ -e "$d/$lib" ]]; then
            found="$d"
            break
        fi
    done
    if [[ -z "$found" ]]; then
        found=$(ldconfig -p 2>/dev/null | awk -v l="$lib" '$1 == l { print $NF; exit }' | xargs -r dirname)
    fi
    if [[ -n "$found" ]]; then
        echo "found $lib in $found" | tee -a "$ENV_LOG"
        [[ " ${LIBDIRS[*]} " == *" $found "* ]] || LIBDIRS+=("$found")
    else
        echo "NOT FOUND: $lib" | tee -a "$ENV_LOG"
    fi
done
LD_LIBRARY_PATH="$(IFS=:; echo "${LIBDIRS[*]}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" | tee -a "$ENV_LOG"
export RUST_BACKTRACE=1

# ---- the device tests --------------------------------------------------------------------
# build_devbin.sh ships the binaries gzipped.
for f in .devbin/*.gz; do
    [[ -f "$f" ]] && gunzip -kf "$f"
done
chmod +x .devbin/* 2>/dev/null
BENCH=""
TESTS=()
for f in .devbin/*; do
    [[ -f "$f" && -x "$f" ]] || continue
    case "$(basename "$f")" in
        *.gz | *.json | *.md | *.txt | *.log) ;;
        cuda_bench*) BENCH="$f" ;;
        *) TESTS+=("$f") ;;
    esac
done
[[ ${#TESTS[@]} -eq 0 ]] && log "no test binaries in .devbin/" && STEPS+=("| tests | MISSING: no binaries in .devbin/ | | |")
# cuda_parity and cuda_backward first: they matter most.
for f in $(printf '%s\n' "${TESTS[@]}" | awk '{ p = /cuda_parity/ ? 0 : /cuda_backward/ ? 1 : 2; print p " " $0 }' | sort | cut -d' ' -f2-); do
    name=$(basename "$f")
    case "$name" in
        cuda_parity*) run_step "$name" 150 "$OUT/cuda_parity.log" "$f" --test-threads=1 --nocapture ;;
        cuda_backward*) run_step "$name" 90 "$OUT/cuda_backward.log" "$f" --test-threads=1 --nocapture ;;
        *) run_step "$name" 60 "$OUT/tests_other.log" "$f" --test-threads=1 ;;
    esac
done

# ---- the benchmarks ----------------------------------------------------------------------
gpu_used_mib() {
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1 | tr -dc '0-9'
}

# bench NAME LIMIT JSON CMD...: runs a benchmark with a timeout into bench.log, sampling the
# GPU's used memory with nvidia-smi meanwhile; the peak above what was in use before it
# started goes into its JSON as process_peak_gpu_memory_bytes (the CUDA context and library
# workspaces included, which the allocators' own figures leave out).
bench() {
    local name=$1 lim=$2 json=$3
    shift 3
    local t0=$SECONDS rc status base peak=0 used
    lim=$(limit "$lim")
    log "$name (timeout ${lim}s) -> bench.log"
    echo "===== $name: $* (timeout ${lim}s)" >>"$OUT/bench.log"
    base=$(gpu_used_mib)
    base=${base:-0}
    timeout --kill-after=5 "$lim" "$@" >>"$OUT/bench.log" 2>&1 &
    local pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        used=$(gpu_used_mib)
        used=${used:-0}
        ((used > peak)) && peak=$used
        sleep 0.2
    done
    wait "$pid"
    rc=$?
    status="ok"
    if ((rc == 124 || rc == 137)); then
        status="TIMEOUT after ${lim}s"
    elif ((rc != 0)); then
        status="FAILED (exit $rc)"
    fi
    echo "===== $name: $status in $((SECONDS - t0))s" >>"$OUT/bench.log"
    STEPS+=("| $name | $status | $((SECONDS - t0)) s | |")
    log "$name: $status"
    if [[ -s "$json" ]] && ((peak > base)); then
        python3 - "$json" $(((peak - base) * 1024 * 1024)) <<'PY' || true
import json, sys
path, peak = sys.argv[1], int(sys.argv[2])
with open(path) as f:
    data = json.load(f)
data["process_peak_gpu_memory_bytes"] = peak
with open(path, "w") as f:
    json.dump(data, f, indent=2)
    f.write("\n")
PY
    fi
}

if [[ -n "$BENCH" ]]; then
    bench ember_bench 90 "$OUT/ember_gpu.json" \
        "$BENCH" --device cuda --out "$OUT/ember_gpu.json" --gpu-name "${GPU_NAME:-unknown}"
else
    log "no .devbin/cuda_bench"
    STEPS+=("| ember_bench | MISSING: no .devbin/cuda_bench | | |")
fi
bench torch_bench 90 "$OUT/torch_gpu.json" python3 tools/bench/cuda/torch_gpu.py --out "$OUT/torch_gpu.json"

# ---- the summary -------------------------------------------------------------------------
{
    echo "# device_run on ${GPU_NAME:-unknown GPU}, $(date -u)"
    echo
    echo "| step | status | time | tests |"
    echo "| --- | --- | ---: | --- |"
    printf '%s\n' "${STEPS[@]}"
    echo
    for f in cuda_parity cuda_backward tests_other; do
        [[ -f "$OUT/$f.log" ]] || continue
        fails=$(grep -cE "^test .* FAILED$" "$OUT/$f.log")
        echo "$f.log: $fails failing tests$( ((fails > 0)) && echo ": $(grep -E '^test .* FAILED$' "$OUT/$f.log" | awk '{print $2}' | tr '\n' ' ')")"
    done
    echo
    if [[ -s "$OUT/ember_gpu.json" && -s "$OUT/torch_gpu.json" ]]; then
        python3 tools/bench/cuda/compare.py "$OUT/ember_gpu.json" "$OUT/torch_gpu.json" || echo "compare.py failed"
    else
        echo "no comparison: ember_gpu.json or torch_gpu.json is missing (see bench.log)"
        [[ -s "$OUT/torch_gpu.json" ]] && cat "$OUT/torch_gpu.json"
        [[ -s "$OUT/ember_gpu.json" ]] && cat "$OUT/ember_gpu.json"
    fi
    echo
    echo "total: $((SECONDS - START)) s"
} >"$SUMMARY" 2>&1
cat "$SUMMARY"
exit 0
