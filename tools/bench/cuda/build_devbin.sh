#!/usr/bin/env bash
# Builds what tools/bench/cuda/device_run.sh runs on the GPU machine, which has no Rust
# toolchain, into .devbin/ (from the repository root):
#
#   bash tools/bench/cuda/build_devbin.sh            # the real backend (--features cuda)
#   FEATURE= BENCH_PROFILE=dev bash tools/bench/cuda/build_devbin.sh   # to try the flow here (emulated cuda:0)
#
# .devbin/cuda_parity, .devbin/cuda_backward (and .devbin/device_plumbing where that test
# exists) are the test binaries under fixed names; .devbin/cuda_bench is the release build
# of the cuda_bench example. Each is stripped and gzipped (device_run.sh unpacks them): the
# working tree sent to the GPU machine must stay small, and an unstripped test binary
# is about 20 MB.

set -euo pipefail
cd "$(dirname "$0")/../../.."
FEATURE="${FEATURE:-cuda}"
mkdir -p .devbin
rm -f .devbin/*

# The path of the test executable cargo built for `--test NAME`.
test_binary() {
    local pkg=$1 name=$2 features=$3
    cargo test -p "$pkg" --features "$features" --test "$name" --no-run --message-format=json 2>/dev/null |
        python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == sys.argv[1]:
        print(m["executable"])
' "$name"
}

pack() {
    local src=$1 name=$2
    cp "$src" ".devbin/$name"
    strip ".devbin/$name" 2>/dev/null || true
    gzip -9f ".devbin/$name"
    echo "  .devbin/$name.gz ($(du -h ".devbin/$name.gz" | cut -f1))"
}

# The ember crate's own `cuda` features arrive with the device plumbing; before that the
# tensor crate's feature is the whole backend.
ember_features="${FEATURE:+ember-tensor/$FEATURE}"
[[ -n $FEATURE ]] && grep -qE "^$FEATURE *=" crates/ember/Cargo.toml && ember_features="$FEATURE"

echo "building with features: ${FEATURE:-(none: the emulated cuda:0)}"
for spec in "ember-tensor cuda_parity $FEATURE" "ember-autograd cuda_backward $FEATURE" "ember-full-tests device_plumbing $ember_features"; do
    read -r pkg name features <<<"$spec"
    if [[ $name == device_plumbing && ! -f crates/ember/full-tests/tests/device_plumbing.rs ]]; then
        continue
    fi
    bin=$(test_binary "$pkg" "$name" "$features")
    if [[ -z "$bin" ]]; then
        echo "building the $name test failed; rerun: cargo test -p $pkg --features $features --test $name --no-run" >&2
        exit 1
    fi
    pack "$bin" "$name"
done
# BENCH_PROFILE=dev builds the example faster, for trying the flow; timings want release.
profile="${BENCH_PROFILE:-release}"
cargo build --profile "$profile" -p ember --example cuda_bench --features "$ember_features"
dir=$([[ $profile == dev ]] && echo debug || echo "$profile")
pack "target/$dir/examples/cuda_bench" cuda_bench
echo "carry .devbin to the GPU machine and run: bash tools/bench/cuda/device_run.sh"
