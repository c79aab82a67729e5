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
# Stages and their time limits (seconds; a device command may run 10 minutes; tests/bench/test_bench.py checks
# that they add up to at most 480):
#   install 45 | versions + one mixed-decoder JPEG + every format's variants on mixed 45 | CUDA tests 90 | no host sync in a dali-gpu pass
#   (set_sync_debug_mode("error")) and the data wait under a GPU-bound step 30 | device choice under
#   several CUDA_VISIBLE_DEVICES (no CUDA context on another GPU) 40 | equivalence, decoders apart from
#   operators, every operation 70 | data 25 | benchmark fallback, dali-gpu and the RandomResizedCrop
#   recipe (an op-list loader), clips (frames/s), a failing contender reported and the next one run,
#   with nvidia-smi dmon 80 | telemetry values of a dali-gpu loader under a GPU-bound step 20 |
#   hw_decoder_load sweep 30 | the hardware JPEG decoder's use, from dmon's jpg column 5
# Readers of every DALI loader after the first GPU one start with spawn (DALI refuses fork once CUDA is
# up): the sync and device checks run in processes of their own, before the rest can spend the time.
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
  # DALI's CPU operators on a small shared machine stand in for the GPU: the rehearsal checks the script,
  # not its timing, so every limit is 3 times the GPU run's (which the literal numbers below keep)
  timeout() {
    local opts=()
    while [ $# -gt 0 ]; do case $1 in -s|-k) opts+=("$1" "$2"); shift 2;; *) break;; esac; done
    command timeout "${opts[@]}" $(( $1 * 3 )) "${@:2}"
  }
else
  device=gpu; probe=(); images=384; size=2048x1536; contenders=(fallback dali-gpu recipe-dali-gpu clips-dali-gpu)
  smi() { nvidia-smi "$@"; }
fi

stage "0. install DALI from /tmp/w (if not importable)"
if ! "$py" -c "import nvidia.dali" 2>/dev/null && ls /tmp/w/wheels.tar.part.* >/dev/null 2>&1; then
  timeout 45 bash -c "cat /tmp/w/wheels.tar.part.* | tar -x -C /tmp/w && \
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
timeout 15 "$py" -m bench.gpu_probe versions --out "$out" "${probe[@]}" 2>&1 | tee "$out/versions.txt"
timeout 20 "$py" -m bench.gpu_probe decode --out "$out" "${probe[@]}" 2>&1 | tee "$out/decode.txt"
rc=${PIPESTATUS[0]}
finish decode "$rc"
if [ "$rc" != 0 ]; then
  echo "gpu_check: stopping — DALI cannot decode a JPEG on this machine (see $out/decode.json)" | tee -a "$out/stages.log"
  exit 3
fi
# every format's variants (PNG, TIFF, BMP, WebP; those the machine's writers make) on the mixed decoder
# against OpenCV: PNG/BMP/WebP decode on CPU threads (exact expected), TIFF on nvTIFF where it can
timeout 10 "$py" -m bench.formats_table --device "$([ $dry = 1 ] && echo cpu || echo mixed)" \
  --json "$out/formats_mixed.json" > "$out/formats_mixed.md" 2> "$out/formats_mixed.err"
finish formats "$?"

cuda_tests() {  # cuda_tests NAME LIMIT ARGS...: CUDA-marked tests in a process of their own, a log and junit XML each
  local name=$1 limit=$2; shift 2
  timeout -s INT -k 5 "$limit" "$py" -m pytest -v -m "cuda or torchvision" -p no:cacheprovider --durations=0 \
    --junitxml="$out/pytest_$name.xml" "$@" > "$out/pytest_$name.log" 2>&1
  local rc=$?
  [ $dry = 1 ] && [ $rc = 5 ] && rc=0  # dry run: every CUDA test is skipped, none collected is fine
  tail -3 "$out/pytest_$name.log"
  finish "pytest $name" "$rc"
}

stage "2a. no host sync in the steady state of a dali-gpu pass; the data wait is host wait"
cuda_tests sync 25 tests/facade/test_host_syncs.py

stage "2b. device choice: a rank on its GPU, no CUDA context on another, under several CUDA_VISIBLE_DEVICES"
# the test runs one child per setting: all GPUs, all in reverse order and the last alone where there are
# several; unset and "0" with one (then LOCAL_RANK=3 maps onto it)
cuda_tests devices 35 tests/dali/test_gpu_setup.py -k "its_gpu"

stage "2c. the other CUDA-marked tests"
# among them the 16-bit cases (tests/transforms/test_window.py): Window on all 65536 uint16 values on the GPU,
# and 16-bit PNG/TIFF decoded on mixed, flipped, cropped and windowed, exact against the fallback
timeout -s INT -k 10 80 "$py" -m pytest -v -m "cuda or torchvision" -p no:cacheprovider --durations=0 \
  --junitxml="$out/pytest_cuda.xml" --ignore=tests/facade/test_host_syncs.py --deselect \
  "tests/dali/test_gpu_setup.py::test_a_rank_decodes_on_its_gpu_and_creates_no_context_on_another" \
  tests > "$out/pytest_cuda.log" 2>&1
rc=$?
[ $dry = 1 ] && [ $rc = 5 ] && rc=0  # dry run: every CUDA test is skipped, none collected is fine
tail -5 "$out/pytest_cuda.log"
finish pytest "$rc"

stage "3. DALI ($device) vs fallback pixels, row by row: decoders, operators on the same pixels, every operation"
# --bit-depth 16: also the operations that run before a Window on uint16 images (transform16: rows, 16-bit levels;
# their GPU bounds are not published yet: this run measures them, ~2 s of rows)
timeout 70 "$py" -m bench.equivalence --device "$device" --images 16 --transforms --bit-depth 16 \
  --json "$out/equivalence_$device.json" \
  2>&1 | tee "$out/equivalence_$device.txt"
finish equivalence "${PIPESTATUS[0]}"

stage "4. throughput: ${contenders[*]} on $images x $size, GPU sampled by nvidia-smi dmon"
w=${size%x*}; h=${size#*x}
data="/tmp/gpu-check-data-$images-$size"
timeout 25 "$py" -c "from dali_backend.synthetic import generate_defect_dataset as g; g('$data', n=$images, size=($w, $h), seed=0, progress=False)"
if [ $dry = 0 ]; then
  nvidia-smi dmon -s um -o T -d 1 > "$out/dmon.txt" 2>&1 &  # -s u: sm mem enc dec jpg ofa; until stage 7
  dmon=$!
  trap '[ -n "${dmon:-}" ] && kill "$dmon" 2>/dev/null' EXIT
fi
timeout 80 "$py" -m bench --data "$data" --epochs 2 --only "${contenders[@]}" --no-plot --json "$out/bench.json" 2>&1 \
  | tail -12 | tee "$out/bench.txt"
finish bench "${PIPESTATUS[0]}"  # a failing contender is in bench.json's "failed"; the others still ran
smi --query-gpu=memory.used,memory.total --format=csv >> "$out/bench.txt" 2>&1

stage "5. telemetry of a dali-gpu loader: no step, then a GPU-bound step of 40 ms a batch (data wait = host wait)"
timeout 20 "$py" -m bench.gpu_probe telemetry --data "$data" --out "$out" --batch-size 32 --step-ms 40 "${probe[@]}" \
  2>&1 | tee "$out/telemetry.txt"
finish telemetry "${PIPESTATUS[0]}"

stage "6. hw_decoder_load sweep (0.65 / 0.85 / 1.0) on the same data"
timeout 30 "$py" -m bench.gpu_probe sweep --data "$data" --out "$out" --epochs 2 "${probe[@]}" 2>&1 | tee "$out/sweep.txt"
finish sweep "${PIPESTATUS[0]}"
[ $dry = 0 ] && kill "$dmon" 2>/dev/null

stage "7. the hardware JPEG decoder's use: dmon's jpg column over stages 4-6"
timeout 5 "$py" -m bench.gpu_probe hwjpeg --dmon "$out/dmon.txt" --out "$out" "${probe[@]}" 2>&1 | tee "$out/hwjpeg.txt"
finish hwjpeg "${PIPESTATUS[0]}"

echo "gpu_check finished in $((SECONDS - t0)) s, status $status; files in $out:" | tee -a "$out/stages.log"
ls "$out"
exit $status
