#!/usr/bin/env bash
# The CI step of the LibTorch backend (feature `libtorch`), for .ci/run: installs torch
# 2.13.0 into a virtual environment (tools/libtorch/setup.sh; kept between runs when
# LIBTORCH_VENV points at a cached folder), builds tch's C++ shim against it, lints the
# backend and runs the workspace tests with `torch-cpu` compiled in, the LibTorch
# differential test (crates/tensor/tests/libtorch_differential.rs) among them.
set -euo pipefail
cd "$(dirname "$0")/../.."

venv="${LIBTORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ember/venv-libtorch}"
tools/libtorch/setup.sh "$venv" >/dev/null
eval "$(tools/libtorch/setup.sh --env "$venv")"

cargo clippy -p ember-tensor --features libtorch --all-targets -- -D warnings
cargo test --workspace --features ember/libtorch
