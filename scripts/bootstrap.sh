#!/usr/bin/env bash
# Create (or reuse) a virtual env and install this package with its test extra.
#   scripts/bootstrap.sh [VENV_DIR]        (default .venv)
# Packages come from pip's own configuration (pip.conf, PIP_* variables: PyPI unless configured
# otherwise); this script names no index. torch: an env that already has torch keeps it (a CUDA
# user's build stays). Otherwise a machine with an NVIDIA driver gets the default (CUDA) build, and a
# machine without one gets the CPU build: torch==TORCH_VERSION (default 2.13.0) from the configured
# sources plus PyTorch's CPU wheel index when it is reachable (TORCH_CPU_INDEX overrides it; set it
# empty to use the configured sources alone): its +cpu build then wins. The resolution is checked first, reading metadata only: if it
# would pull CUDA libraries (nvidia-* packages, gigabytes a CPU machine never uses), the script stops
# and says to set TORCH_CPU_INDEX or to install torch into the env first.
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
  echo "bootstrap: NVIDIA GPU found; installing the CUDA build of torch from pip's configured sources"
  "${pip[@]}" "torch${TORCH_VERSION:+==$TORCH_VERSION}"
else
  version="${TORCH_VERSION:-2.13.0}"
  # PyTorch's own CPU wheel index (not a general package registry: it holds torch's +cpu builds), used
  # when reachable; elsewhere (an offline mirror, a wheel house) pip's configured sources alone.
  cpu_index="${TORCH_CPU_INDEX-https://download.pytorch.org/whl/cpu}"
  if [ -n "$cpu_index" ] && ! "$venv/bin/python" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + '/torch/', timeout=5)" "$cpu_index" >/dev/null 2>&1; then
    echo "bootstrap: $cpu_index is not reachable; using pip's configured sources only"
    cpu_index=""
  fi
  TORCH_CPU_INDEX="$cpu_index"
  extra=()
  [ -n "$cpu_index" ] && extra=(--extra-index-url "$cpu_index")
  echo "bootstrap: no GPU; installing the CPU build of torch $version from pip's configured sources${TORCH_CPU_INDEX:+ and $TORCH_CPU_INDEX}"
  # Resolve without installing (pip >= 22.2; an older pip skips the check): a CUDA build of torch
  # depends on nvidia-* packages.
  if report="$("$venv/bin/python" -m pip install --dry-run --quiet --disable-pip-version-check --report - \
                "torch==$version" "${extra[@]+"${extra[@]}"}" 2>/dev/null)" \
     && grep -Eq '"name": *"nvidia-' <<<"$report"; then
    echo "bootstrap: pip's configured sources offer torch $version here only as a CUDA build (it pulls nvidia-*" \
         "packages, several GB, useless without a GPU). Set TORCH_CPU_INDEX to a CPU wheel index (PyTorch" \
         "publishes one) and rerun, or install the torch you want into $venv first (it is kept)" >&2
    exit 1
  fi
  "${pip[@]}" "torch==$version" "${extra[@]+"${extra[@]}"}"
fi
"${pip[@]}" -e "$here[test]"
