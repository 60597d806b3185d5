#!/usr/bin/env bash
# The test step of the LibTorch backend (feature `libtorch`), for .ci/run: installs torch
# 2.13.0 into a virtual environment where it is not there yet (tools/libtorch/setup.sh:
# where the CPU wheel index cannot be reached, PyPI's wheel without the nvidia-* wheels,
# linked CPU-only; kept between runs when LIBTORCH_VENV points at a cached folder), builds
# tch's C++ shim against it and runs ember-tensor's tests with the feature: the LibTorch
# differential test (crates/tensor/tests/libtorch_differential.rs) and the other tests the
# feature changes all live there (no other crate's code or tests depend on it, and their
# tests ran on the CPU backend earlier in .ci/run, which also lints every crate with the
# feature on). Prints the seconds each part took, so that the CI log records them.
set -euo pipefail
cd "$(dirname "$0")/../.."

venv="${LIBTORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ember/venv-libtorch}"
SECONDS=0
tools/libtorch/setup.sh "$venv" >/dev/null
eval "$(tools/libtorch/setup.sh --env "$venv")"
echo "libtorch step: install ${SECONDS} s ($(du -sh "$venv" | cut -f1) in $venv)"

SECONDS=0
# The tests' build, apart from running them, so that the log shows which took the time.
cargo test -p ember-tensor --features libtorch --no-run
echo "libtorch step: build ${SECONDS} s"

SECONDS=0
cargo test -p ember-tensor --features libtorch
echo "libtorch step: tests ${SECONDS} s"
