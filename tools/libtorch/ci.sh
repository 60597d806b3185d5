#!/usr/bin/env bash
# The CI step of the LibTorch backend (feature `libtorch`), for .ci/run: installs torch
# 2.13.0 into a virtual environment (tools/libtorch/setup.sh: where the CPU wheel index
# cannot be reached, PyPI's wheel without the nvidia-* wheels, linked CPU-only; kept between
# runs when LIBTORCH_VENV points at a cached folder), builds tch's C++ shim against it,
# lints every crate of the workspace with the feature on (so each still compiles with the
# `torch-cpu` device in), and runs ember-tensor's tests with it: the LibTorch differential
# test (crates/tensor/tests/libtorch_differential.rs) and the other tests the feature
# changes all live there (no other crate's code or tests depend on it, and their tests ran
# on the CPU backend earlier in .ci/run). Prints the seconds each part took, so that the CI
# log records them.
set -euo pipefail
cd "$(dirname "$0")/../.."

venv="${LIBTORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ember/venv-libtorch}"
SECONDS=0
tools/libtorch/setup.sh "$venv" >/dev/null
eval "$(tools/libtorch/setup.sh --env "$venv")"
echo "libtorch step: install ${SECONDS} s ($(du -sh "$venv" | cut -f1) in $venv)"

SECONDS=0
cargo clippy --workspace --all-targets --features ember/libtorch -- -D warnings
# The tests' build, apart from running them, so that the log shows which took the time.
cargo test -p ember-tensor --features libtorch --no-run
echo "libtorch step: lint and build ${SECONDS} s"

SECONDS=0
cargo test -p ember-tensor --features libtorch
echo "libtorch step: tests ${SECONDS} s"
