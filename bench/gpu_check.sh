#!/usr/bin/env bash
# The GPU check (../shared/GPU.md): CUDA-marked tests, GPU-versus-CPU pixel differences, throughput.
#
# Prepare here:   ../shared/gpu/stage.sh            (DALI cuda130 wheels split into .gpu/p1 .. .gpu/pN)
# On the device:  one `run` per part, back to back:  mkdir -p /tmp/w && cp .gpu/pK/* /tmp/w/   (carry .gpu/pK)
#                 then one `run`:                    bash bench/gpu_check.sh                  (results in $OUT)
# Everything it needs beyond the GPU machine's own torch/numpy/opencv/pytest comes from /tmp/w.
set -uo pipefail
out="${OUT:-out/gpu}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
if ! python3 -c "import nvidia.dali" 2>/dev/null && ls /tmp/w/wheels.tar.part.* >/dev/null 2>&1; then
  (cat /tmp/w/wheels.tar.part.* | tar -x -C /tmp/w) &&
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/w/wheels/*.whl
  export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
fi
export PYTHONPATH="$PWD:${PYTHONPATH:-}"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c "import nvidia.dali, torch, cv2; print('DALI', nvidia.dali.__version__, '| torch', torch.__version__, \
'| CUDA available', torch.cuda.is_available(), '| OpenCV', cv2.__version__)"
} 2>&1 | tee "$out/env.txt"
t0=$SECONDS
echo "== 1. CUDA-marked tests"
timeout 240 python3 -m pytest -q -m cuda -p no:cacheprovider tests/test_dali_loader.py 2>&1 | tail -25 | tee "$out/pytest_cuda.log"
echo "== 2. GPU vs CPU pixels (uint8 levels)"
timeout 120 python3 -m bench.equivalence --device gpu --json "$out/equivalence_gpu.json" 2>&1 | tail -12 | tee "$out/equivalence_gpu.txt"
echo "== 3. throughput: dali-gpu against the fallback on all cores"
timeout 300 python3 -m bench --images 512 --epochs 3 --cache /tmp/bench-cache --json "$out/bench.json" 2>&1 | tail -12 | tee "$out/bench.txt"
nvidia-smi --query-gpu=memory.used --format=csv >> "$out/bench.txt" 2>&1
echo "gpu_check finished in $((SECONDS - t0)) s" | tee -a "$out/env.txt"
