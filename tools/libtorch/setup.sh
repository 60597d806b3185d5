#!/usr/bin/env bash
# Installs the PyTorch release that `tch` 0.26 links against into a virtual
# environment, and prints the environment variables that let `torch-sys`
# build against it.
#
# Usage: tools/libtorch/setup.sh [VENV_DIR]     (default /work/venv-libtorch)
#   then: eval "$(tools/libtorch/setup.sh --env [VENV_DIR])"
#
# The CPU-only wheel index is tried first because PyPI's Linux wheels are CUDA
# builds that pull several GB of nvidia-* packages; PyPI is the fallback.
set -euo pipefail

TORCH_VERSION=2.13.0
CPU_INDEX=https://download.pytorch.org/whl/cpu

print_env=0
if [[ "${1:-}" == "--env" ]]; then
  print_env=1
  shift
fi
VENV=${1:-/work/venv-libtorch}

env_lines() {
  local site
  site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "export LIBTORCH_USE_PYTORCH=1"
  echo "export PATH=\"$VENV/bin:\$PATH\""
  # The linked binaries find libtorch*.so at run time through this path.
  echo "export LD_LIBRARY_PATH=\"$site/torch/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\""
  # LibTorch's OpenMP workers otherwise spin after every parallel region, taking the cores
  # from the thread that issues the next op: the MNIST quick start on torch-cpu ran at 54
  # samples/s without this and 6018 with it (1500 images, dev profile, load average 18).
  # libgomp reads it when LibTorch loads, so a program cannot set it for itself.
  echo "export OMP_WAIT_POLICY=PASSIVE"
}

if [[ $print_env == 1 ]]; then
  env_lines
  exit 0
fi

if [[ ! -x "$VENV/bin/python" ]]; then
  python3 -m venv "$VENV"
fi

have=$("$VENV/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || true)
if [[ "$have" == "$TORCH_VERSION" ]]; then
  echo "torch $TORCH_VERSION already installed in $VENV" >&2
else
  if curl -fsS --max-time 20 -o /dev/null "$CPU_INDEX/torch/"; then
    "$VENV/bin/pip" install "torch==$TORCH_VERSION" --index-url "$CPU_INDEX"
  else
    echo "$CPU_INDEX unreachable; installing the PyPI (CUDA) wheel" >&2
    "$VENV/bin/pip" install "torch==$TORCH_VERSION"
  fi
fi
env_lines
