#!/usr/bin/env bash
# The GPU proof of issue 3 in one device call (the `run` tool's H200; see docs/gpu-results.md):
#   sync --check (vendor/ is the pinned real ggml) -> render --check -> ggml-vendor build (host variant)
#   -> the argument-error paths -> the GPU tests -> the accuracy table ->
#   compute-sanitizer memcheck of the edge cases.
# Needs, carried with the call: vendor (the synced ggml sources) and .whl (the toolkit's and the tests'
# wheels, which the device lacks). Everything it writes for docs lands in $OUT.
#
#   run: bash benchmarks/gpu_session.sh        (carry: vendor, .whl)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-session}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 GIT_PYTHON_REFRESH=quiet
log() { printf '\n=== %s (%ss)\n' "$*" "$SECONDS" | tee -a "$OUT/session.log"; }

log "wheels"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  >"$OUT/pip.log" 2>&1 || { echo "wheel install failed"; tail -20 "$OUT/pip.log"; }
export PYTHONPATH=/tmp/site:$PWD

log "environment"
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  python3 -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
  nvcc --version | tail -1; nproc; } 2>&1 | tee -a "$OUT/session.log"

log "sync --check / render --check"
python3 -m toolkit.cli sync --check 2>&1 | tee -a "$OUT/session.log"
python3 -m toolkit.cli render --check 2>&1 | tee -a "$OUT/session.log"

log "build (ggml-vendor build, host variant)"
if python3 -m toolkit.cli build -j "$(nproc)" --json >"$OUT/build.json" 2>"$OUT/build.err"; then
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); [print(v["name"], v["result"], v.get("id"), v.get("seconds", "")) for v in r["variants"]]' "$OUT/build.json" | tee -a "$OUT/session.log"
else
  echo "ggml-vendor build failed: the GPU steps below have nothing to load" | tee -a "$OUT/session.log"
  tail -30 "$OUT/build.err"
  exit 1
fi
ls build/*/ 2>&1 | tee -a "$OUT/session.log"

log "argument-error paths (each one a Python exception, never a crash)"
if timeout 120 python3 benchmarks/gpu_error_paths.py >"$OUT/error-paths.log" 2>&1; then
  cat "$OUT/error-paths.log" | grep -v Warning
else
  tail -40 "$OUT/error-paths.log"
  GDB=$(command -v cuda-gdb || ls /usr/local/cuda/bin/cuda-gdb 2>/dev/null)
  [ -n "$GDB" ] && timeout 240 "$GDB" -q -batch -ex "set pagination off" -ex run -ex bt \
    --args python3 benchmarks/gpu_error_paths.py >"$OUT/error-paths-gdb.log" 2>&1
  grep -B2 -A45 'received signal' "$OUT/error-paths-gdb.log" | head -70
fi

log "GPU tests"
timeout 330 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_ops_cuda.py -rs --durations=5 2>&1 | tee "$OUT/gpu-tests.log" | tail -25
if grep -q "Fatal Python error" "$OUT/gpu-tests.log"; then
  log "GPU tests again without the argument-error tests (the run above crashed)"
  timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_ops_cuda.py -rs \
    -k "not bad_arguments and not supports_is_exact" 2>&1 | tee "$OUT/gpu-tests-2.log" | tail -15
fi

log "accuracy table"
timeout 120 python3 benchmarks/gpu_accuracy.py 2>&1 | tee "$OUT/accuracy.md" | tail -60

log "compute-sanitizer memcheck"
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [ -n "$SAN" ]; then
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 200 "$SAN" --tool memcheck --error-exitcode 3 --print-limit 20 \
    python3 benchmarks/gpu_memcheck.py >"$OUT/memcheck.log" 2>&1
  echo "memcheck exit code $?" | tee -a "$OUT/memcheck.log"
  grep -E 'ERROR SUMMARY|MEMCHECK-SCRIPT-DONE|exit code|Invalid' "$OUT/memcheck.log" | head -20
else
  echo "compute-sanitizer not found"
fi
log "done"
