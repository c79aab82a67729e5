#!/usr/bin/env bash
# The GPU check (../shared/GPU.md) as one run that cannot waste the GPU machine.
#
# Prepare here:   ../shared/gpu/stage.sh psutil simplejpeg tqdm 'torchvision==0.26.*'
#                 (DALI cuda130 wheel set plus what this project needs beyond the GPU machine's torch, numpy,
#                 OpenCV and pytest: psutil for the benchmark's figures, simplejpeg and tqdm for indexing;
#                 torchvision built for that machine's torch 2.11 (CUDA), so that the from_torchvision tests,
#                 which skip on CPU machines, run against real torchvision there; split into .gpu/p1 .. .gpu/pN)
#                 bash bench/gpu_check.sh --dry-run    (the whole script on the CPU, GPU parts stubbed)
# On the device:  one `run` per part but the last, back to back (carry .gpu/pK):
#                     mkdir -p /tmp/w && cp .gpu/pK/* /tmp/w/
#                 then one `run` (carry the last part) that copies it and runs the check:
#                     mkdir -p /tmp/w && cp .gpu/pN/* /tmp/w/ && bash bench/gpu_check.sh
# Results (JSON, logs, junit XML) land in $OUT (default out/gpu) as each stage finishes.
#
# Stages and their time limits (seconds; a device command may run 10 minutes; tests/test_bench.py checks
# that they add up to at most 480):
#   install 50 | versions + one mixed-decoder JPEG 45 | CUDA tests 100 | equivalence, decoders apart from
#   operators, every operation 85 | data 30 | benchmark fallback, dali-gpu and the RandomResizedCrop recipe
#   (an op-list loader), clips (frames/s) with nvidia-smi dmon 110 | hw_decoder_load sweep 50
# Every stage leaves its files even when its limit cuts it short: the equivalence JSON is rewritten
# after each row, the benchmark JSON after each contender, pytest logs each test as it ends (-v) and
# gets SIGINT first, on which it still writes its junit XML.
set -uo pipefail
dry=0
[ "${1:-}" = "--dry-run" ] && dry=1
out="${OUT:-out/gpu}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
export PYTHONUNBUFFERED=1 PYTORCH_NVML_BASED_CUDA_CHECK=1
py="${PYTHON:-python3}"
[ $dry = 1 ] && [ -z "${PYTHON:-}" ] && [ -x .venv/bin/python ] && py=.venv/bin/python  # `make install`'s env
t0=$SECONDS
status=0
stage() { echo "== $1 [$((SECONDS - t0)) s]" | tee -a "$out/stages.log"; }
finish() { echo "stage '$1' exit $2 after $((SECONDS - t0)) s" >> "$out/stages.log"; [ "$2" = 0 ] || status=1; }
if [ $dry = 1 ]; then
  device=cpu; probe=(--dry-run); images=24; size=640x480; contenders=(fallback dali-cpu recipe-dali-cpu clips-dali-cpu)
  smi() { echo "nvidia-smi (dry run): no GPU here"; }
else
  device=gpu; probe=(); images=384; size=2048x1536; contenders=(fallback dali-gpu recipe-dali-gpu clips-dali-gpu)
  smi() { nvidia-smi "$@"; }
fi

stage "0. install DALI from /tmp/w (if not importable)"
if ! "$py" -c "import nvidia.dali" 2>/dev/null && ls /tmp/w/wheels.tar.part.* >/dev/null 2>&1; then
  timeout 50 bash -c "cat /tmp/w/wheels.tar.part.* | tar -x -C /tmp/w && \
    '$py' -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/w/wheels/*.whl" \
    > "$out/install.log" 2>&1
  finish install $?
  export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
fi
export PYTHONPATH="$PWD:${PYTHONPATH:-}"

stage "1. versions and one JPEG through the mixed decoder"
for mod in psutil simplejpeg tqdm torchvision; do
  "$py" -c "import $mod" 2>/dev/null || echo "gpu_check: warning: $mod is not importable (stage it: ../shared/gpu/stage.sh psutil simplejpeg tqdm 'torchvision==0.26.*'); stages or tests that need it will fail or skip" | tee -a "$out/stages.log"
done
smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tee "$out/gpu.txt"
timeout 20 "$py" -m bench.gpu_probe versions --out "$out" "${probe[@]}" 2>&1 | tee "$out/versions.txt"
timeout 25 "$py" -m bench.gpu_probe decode --out "$out" "${probe[@]}" 2>&1 | tee "$out/decode.txt"
rc=${PIPESTATUS[0]}
finish decode "$rc"
if [ "$rc" != 0 ]; then
  echo "gpu_check: stopping — DALI cannot decode a JPEG on this machine (see $out/decode.json)" | tee -a "$out/stages.log"
  exit 3
fi

stage "2. CUDA-marked tests"
timeout -s INT -k 10 100 "$py" -m pytest -v -m "cuda or torchvision" -p no:cacheprovider --junitxml="$out/pytest_cuda.xml" \
  tests > "$out/pytest_cuda.log" 2>&1
rc=$?
[ $dry = 1 ] && [ $rc = 5 ] && rc=0  # dry run: every CUDA test is skipped, none collected is fine
tail -5 "$out/pytest_cuda.log"
finish pytest "$rc"

stage "3. DALI ($device) vs fallback pixels, row by row: decoders, operators on the same pixels, every operation"
timeout 85 "$py" -m bench.equivalence --device "$device" --images 16 --transforms --json "$out/equivalence_$device.json" \
  2>&1 | tee "$out/equivalence_$device.txt"
finish equivalence "${PIPESTATUS[0]}"

stage "4. throughput: ${contenders[*]} on $images x $size, GPU sampled by nvidia-smi dmon"
w=${size%x*}; h=${size#*x}
data="/tmp/gpu-check-data-$images-$size"
timeout 30 "$py" -c "from dali_backend.synthetic import generate_defect_dataset as g; g('$data', n=$images, size=($w, $h), seed=0, progress=False)"
if [ $dry = 0 ]; then
  nvidia-smi dmon -s um -o T -d 1 > "$out/dmon.txt" 2>&1 &
  dmon=$!
  trap '[ -n "${dmon:-}" ] && kill "$dmon" 2>/dev/null' EXIT
fi
timeout 110 "$py" -m bench --data "$data" --epochs 2 --only "${contenders[@]}" --no-plot --json "$out/bench.json" 2>&1 \
  | tail -12 | tee "$out/bench.txt"
finish bench "${PIPESTATUS[0]}"
[ $dry = 0 ] && kill "$dmon" 2>/dev/null
smi --query-gpu=memory.used,memory.total --format=csv >> "$out/bench.txt" 2>&1

stage "5. hw_decoder_load sweep (0.65 / 0.85 / 1.0) on the same data"
timeout 50 "$py" -m bench.gpu_probe sweep --data "$data" --out "$out" --epochs 2 "${probe[@]}" 2>&1 | tee "$out/sweep.txt"
finish sweep "${PIPESTATUS[0]}"

echo "gpu_check finished in $((SECONDS - t0)) s, status $status; files in $out:" | tee -a "$out/stages.log"
ls "$out"
exit $status
