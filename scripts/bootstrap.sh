#!/usr/bin/env bash
# Create (or reuse) a virtual env and install this package, with extras.
#   scripts/bootstrap.sh [VENV_DIR] [EXTRAS]   (default .venv and test; EXTRAS "" installs the package and its
#                                               own dependencies only: `make demo`; "test": `make test`)
# Packages come from pip's own configuration (pip.conf, PIP_* variables: PyPI unless configured
# otherwise); this script names no index. torch: an env that already has torch keeps it (a CUDA
# user's build stays). Otherwise a machine with an NVIDIA driver gets the default (CUDA) build, and a
# machine without one gets the CPU build: torch==TORCH_VERSION (default 2.13.0) from the configured
# sources plus PyTorch's CPU wheel index when it is reachable (TORCH_CPU_INDEX overrides it; set it
# empty to use the configured sources alone): its +cpu build then wins. The resolution is checked first, reading metadata only: if it
# would pull CUDA libraries (nvidia-* packages, gigabytes a CPU machine never uses), the script stops
# and says to set TORCH_CPU_INDEX or to install torch into the env first.
# Set DALI_BACKEND_SYSTEM_SITE=1 to create the env with --system-site-packages (reuse a system torch).
# WITH_TORCHVISION=1 also installs torchvision (AugmentSpec.from_torchvision), the build made for this torch:
# torchvision 0.(minor + 15) for torch 2.minor (2.13 -> 0.28), from the same sources as torch, so that a
# CPU torch gets the CPU torchvision (PyTorch's CPU wheel index); the general registry's torchvision is built
# for its CUDA torch and fails to import beside a CPU one ("operator torchvision::nms does not exist"). Without
# a reachable CPU index on a machine without a GPU the script stops before installing and says what to do;
# after installing it checks that torchvision's operators load.
set -euo pipefail
venv="${1:-.venv}"
extras="${2-test}"
with_tv="${WITH_TORCHVISION:-0}"
# PyTorch's own CPU wheel index (not a general package registry: it holds torch's +cpu builds)
cpu_index_default="${TORCH_CPU_INDEX-https://download.pytorch.org/whl/cpu}"
here="$(cd "$(dirname "$0")/.." && pwd)"
py="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
  flags=()
  [ "${DALI_BACKEND_SYSTEM_SITE:-0}" = 1 ] && flags+=(--system-site-packages)
  "$py" -m venv "${flags[@]+"${flags[@]}"}" "$venv"
fi
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
# torchvision's release for torch 2.minor: 0.(minor + 15).* (0.28.* for 2.13.0)
tv_for() { local minor; minor="$(cut -d. -f2 <<<"$1")"; echo "torchvision==0.$((minor + 15)).*"; }
tv_loads() { "$venv/bin/python" -c "import torch, torchvision; torchvision.ops.nms(torch.zeros(1, 4), torch.zeros(1), 0.5)" \
               >/dev/null 2>&1; }
reachable() { [ -n "$1" ] && "$venv/bin/python" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + '/torch/', timeout=5)" \
                "$1" >/dev/null 2>&1; }
refuse_tv() {  # WITH_TORCHVISION=1 beside a CPU torch, and no CPU index to take the matching torchvision from
  echo "bootstrap: WITH_TORCHVISION=1 without a GPU needs torch's and torchvision's CPU builds from one index" \
       "(PyTorch's CPU wheel index), and none is reachable: pip's configured sources hold torchvision built for" \
       "their CUDA torch, which fails to import beside a CPU torch (operator torchvision::nms does not exist)." \
       "Set TORCH_CPU_INDEX to a reachable CPU index and rerun, or install a matching pair into $venv first" \
       "(it is kept), e.g. pip install torch==2.14.1 torchvision==0.29.1 where a mirror holds that pair" >&2
  exit 1
}
if "$venv/bin/python" -c "import torch" >/dev/null 2>&1; then
  installed="$("$venv/bin/python" -c 'import torch; print(torch.__version__)')"
  echo "bootstrap: keeping the installed torch $installed"
  if [ "$with_tv" = 1 ] && ! tv_loads; then
    tv_extra=()
    case "$installed" in *+cpu*) reachable "$cpu_index_default" || refuse_tv
                                 tv_extra=(--extra-index-url "$cpu_index_default");; esac
    echo "bootstrap: installing $(tv_for "$installed") for torch $installed"
    "${pip[@]}" "torch==$installed" "$(tv_for "$installed")" "${tv_extra[@]+"${tv_extra[@]}"}"
  fi
elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "bootstrap: NVIDIA GPU found; installing the CUDA build of torch from pip's configured sources"
  tv=()
  [ "$with_tv" = 1 ] && tv=("$(tv_for "${TORCH_VERSION:-2.13.0}")")
  "${pip[@]}" "torch${TORCH_VERSION:+==$TORCH_VERSION}" "${tv[@]+"${tv[@]}"}"
else
  version="${TORCH_VERSION:-2.13.0}"
  # PyTorch's own CPU wheel index (not a general package registry: it holds torch's +cpu builds), used
  # when reachable; elsewhere (an offline mirror, a wheel house) pip's configured sources alone.
  cpu_index="$cpu_index_default"
  if [ -n "$cpu_index" ] && ! reachable "$cpu_index"; then
    echo "bootstrap: $cpu_index is not reachable; using pip's configured sources only"
    cpu_index=""
  fi
  TORCH_CPU_INDEX="$cpu_index"
  extra=()
  [ -n "$cpu_index" ] && extra=(--extra-index-url "$cpu_index")
  tv=()
  if [ "$with_tv" = 1 ]; then
    [ -n "$cpu_index" ] || refuse_tv
    tv=("$(tv_for "$version")")
  fi
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
  "${pip[@]}" "torch==$version" "${tv[@]+"${tv[@]}"}" "${extra[@]+"${extra[@]}"}"
fi
if [ "$with_tv" = 1 ] && ! tv_loads; then
  echo "bootstrap: torchvision was installed but its operators do not load beside torch" \
       "$("$venv/bin/python" -c 'import torch; print(torch.__version__)'): the two are not one build pair;" \
       "install the pair together from one index (see docs/guides/torchvision.md)" >&2
  exit 1
fi
echo "bootstrap: installing the package${extras:+ with the extras [$extras]}"
"${pip[@]}" -e "$here${extras:+[$extras]}"
