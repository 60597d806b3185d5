#!/usr/bin/env bash
# Installs the PyTorch release that `tch` 0.26 links against into a virtual
# environment, and prints the environment variables that let `torch-sys`
# build against it.
#
# Usage: tools/libtorch/setup.sh [--full] [VENV_DIR]     (default /work/venv-libtorch)
#   then: eval "$(tools/libtorch/setup.sh --env [VENV_DIR])"
#
# The CPU-only wheel index is tried first: its wheel is LibTorch without CUDA, and
# `import torch` works. Where it cannot be reached, PyPI's wheel (a CUDA build) is
# installed without its dependencies (the nvidia-* wheels, 2.7 GB) but for the two CUDA
# libraries that `libtorch_cpu.so` itself loads (the CUDA runtime and CUPTI, which load
# without a GPU or driver), and `torch-sys` links against a folder `VENV/libtorch-cpu` that
# holds LibTorch's headers and its CPU libraries only: given the wheel's own folder it
# would link `libtorch_cuda.so`, which needs every nvidia-* library. ember computes on
# PyTorch's CPU kernels only, so nothing else is needed; `import torch` does not work in
# such an environment. `--full` installs PyPI's wheel with every dependency instead (for
# Python scripts that use the same environment).
set -euo pipefail

TORCH_VERSION=2.13.0
# The versions torch 2.13.0's `cuda-toolkit==13.0.3` requirement resolves to.
CUDA_RUNTIME=nvidia-cuda-runtime==13.0.96
CUPTI=nvidia-cuda-cupti==13.0.85
CPU_INDEX=https://download.pytorch.org/whl/cpu

mode=install
full=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --env) mode=env; shift ;;
    --full) full=1; shift ;;
    *) break ;;
  esac
done
VENV=${1:-/work/venv-libtorch}
LINK_DIR="$VENV/libtorch-cpu"

site_packages() {
  "$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'
}

env_lines() {
  local site
  site=$(site_packages)
  echo "export PATH=\"$VENV/bin:\$PATH\""
  if [[ -d "$LINK_DIR" ]]; then
    echo "export LIBTORCH=\"$LINK_DIR\""
    # PyPI's wheels since torch 2.7 are built with the C++11 ABI.
    echo "export LIBTORCH_CXX11_ABI=1"
    echo "unset LIBTORCH_USE_PYTORCH"
    # The linked binaries find LibTorch's CPU libraries and the two CUDA libraries they
    # load through this path.
    echo "export LD_LIBRARY_PATH=\"$LINK_DIR/lib:$site/nvidia/cu13/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\""
  else
    echo "export LIBTORCH_USE_PYTORCH=1"
    echo "unset LIBTORCH"
    # The linked binaries find libtorch*.so at run time through this path.
    echo "export LD_LIBRARY_PATH=\"$site/torch/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\""
  fi
  # LibTorch's OpenMP workers otherwise spin after every parallel region, taking the cores
  # from the thread that issues the next op: the MNIST quick start on torch-cpu ran at 54
  # samples/s without this and 6018 with it (1500 images, dev profile, load average 18).
  # libgomp reads it when LibTorch loads, so a program cannot set it for itself.
  echo "export OMP_WAIT_POLICY=PASSIVE"
}

# The folder torch-sys links against: the wheel's headers, and its CPU libraries under the
# names torch-sys links (`libtorch.so`, which in the CUDA wheel only pulls in
# `libtorch_cpu.so` and `libtorch_cuda.so`, is `libtorch_cpu.so` here).
make_link_dir() {
  local torch
  torch="$(site_packages)/torch"
  rm -rf "$LINK_DIR"
  mkdir -p "$LINK_DIR/lib"
  ln -s "$torch/include" "$LINK_DIR/include"
  for lib in libc10.so libtorch_cpu.so libgomp.so.1; do
    ln -s "$torch/lib/$lib" "$LINK_DIR/lib/$lib"
  done
  ln -s "$torch/lib/libtorch_cpu.so" "$LINK_DIR/lib/libtorch.so"
}

if [[ $mode == env ]]; then
  env_lines
  exit 0
fi

if [[ ! -x "$VENV/bin/python" ]]; then
  python3 -m venv "$VENV"
fi

# `pip show` fails when torch is not installed; under `pipefail` that must not end the script.
installed=$({ "$VENV/bin/python" -m pip show torch 2>/dev/null || true; } | sed -n 's/^Version: //p' | cut -d+ -f1)
if [[ "$installed" == "$TORCH_VERSION" ]]; then
  echo "torch $TORCH_VERSION already installed in $VENV" >&2
  # An install without dependencies whose link folder is missing (an interrupted run).
  if [[ ! -d "$LINK_DIR" ]] && ! "$VENV/bin/python" -c 'import torch' >/dev/null 2>&1; then
    make_link_dir
  fi
elif [[ $full == 0 ]] && curl -fsS --max-time 20 -o /dev/null "$CPU_INDEX/torch/"; then
  "$VENV/bin/pip" install "torch==$TORCH_VERSION" --index-url "$CPU_INDEX"
elif [[ $full == 1 ]]; then
  "$VENV/bin/pip" install "torch==$TORCH_VERSION"
else
  echo "$CPU_INDEX unreachable; installing PyPI's wheel with the CUDA runtime and CUPTI only" >&2
  "$VENV/bin/pip" install --no-deps "torch==$TORCH_VERSION" "$CUDA_RUNTIME" "$CUPTI"
  make_link_dir
fi
env_lines
