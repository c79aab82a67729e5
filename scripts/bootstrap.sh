#!/usr/bin/env bash
# Create (or reuse) a virtual env and install this package with its test extra.
#   scripts/bootstrap.sh [VENV_DIR]        (default .venv)
# torch: an env that already has torch keeps it (a CUDA user's build stays). Otherwise a machine
# with an NVIDIA driver gets PyPI's CUDA build, and a machine without one gets the CPU build
# (TORCH_CPU_INDEX, default download.pytorch.org/whl/cpu; pip also looks in its configured indexes
# and find-links), so a CPU machine never pulls a multi-GB CUDA torch.
# Set DALI_BACKEND_SYSTEM_SITE=1 to create the env with --system-site-packages (reuse a system torch).
set -euo pipefail
venv="${1:-.venv}"
here="$(cd "$(dirname "$0")/.." && pwd)"
py="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
  flags=()
  [ "${DALI_BACKEND_SYSTEM_SITE:-0}" = 1 ] && flags+=(--system-site-packages)
  "$py" -m venv "${flags[@]+"${flags[@]}"}" "$venv"
fi
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
if "$venv/bin/python" -c "import torch" >/dev/null 2>&1; then
  echo "bootstrap: keeping the installed torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)')"
elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "bootstrap: NVIDIA GPU found; installing PyPI's CUDA build of torch"
  "${pip[@]}" "torch${TORCH_VERSION:+==$TORCH_VERSION}"
else
  index="${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"
  echo "bootstrap: no GPU; installing the CPU build of torch ${TORCH_VERSION:-2.13.0}"
  if "$venv/bin/python" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + '/torch/', timeout=5)" "$index" >/dev/null 2>&1; then
    "${pip[@]}" "torch==${TORCH_VERSION:-2.13.0}" --index-url "$index" --extra-index-url https://pypi.org/simple
  else
    # CPU index unreachable: rely on pip's own configuration (a local wheel house or a CPU mirror).
    echo "bootstrap: $index unreachable; asking pip's configured sources for torch==${TORCH_VERSION:-2.13.0}"
    "${pip[@]}" "torch==${TORCH_VERSION:-2.13.0}"
  fi
fi
"${pip[@]}" -e "$here[test]"
