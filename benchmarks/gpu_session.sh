#!/usr/bin/env bash
# The GPU checks of the CUDA ops in one script, for any machine with an NVIDIA GPU (docs/gpu-results.md):
#   sync --check (vendor/ is the pinned real ggml) -> render --check -> ggml-vendor build (host variant)
#   -> the argument-error paths -> the GPU tests -> the accuracy table ->
#   compute-sanitizer memcheck of the edge cases.
# Inputs: this repository with vendor/ synced (`ggml-vendor sync`), and a Python with the toolkit, torch (CUDA)
# and pytest installed (`pip install -e '.[test,cuda]'`), nvcc on PATH. On a machine without network access,
# WHEELS=<dir> installs the wheels in <dir> first. Logs and tables go to RESULTS_DIR (default /tmp/gpu-session).
#
#   bash benchmarks/gpu_session.sh
set -uo pipefail
cd "$(dirname "$0")/.."
RESULTS_DIR=${RESULTS_DIR:-/tmp/gpu-session}
mkdir -p "$RESULTS_DIR"
export PYTHONUNBUFFERED=1 GIT_PYTHON_REFRESH=quiet
log() { printf '\n=== %s (%ss)\n' "$*" "$SECONDS" | tee -a "$RESULTS_DIR/session.log"; }

if [ -n "${WHEELS:-}" ]; then
  log "wheels from $WHEELS"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl \
    >"$RESULTS_DIR/pip.log" 2>&1 || { echo "wheel install failed"; tail -20 "$RESULTS_DIR/pip.log"; }
  export PYTHONPATH=/tmp/site:$PWD
fi

log "environment"
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  python3 -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
  nvcc --version | tail -1; nproc; } 2>&1 | tee -a "$RESULTS_DIR/session.log"

log "sync --check / render --check"
python3 -m toolkit.cli sync --check 2>&1 | tee -a "$RESULTS_DIR/session.log"
python3 -m toolkit.cli render --check 2>&1 | tee -a "$RESULTS_DIR/session.log"

log "build (ggml-vendor build, host variant)"
if python3 -m toolkit.cli build -j "$(nproc)" --json >"$RESULTS_DIR/build.json" 2>"$RESULTS_DIR/build.err"; then
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); [print(v["name"], v["result"], v.get("id"), v.get("seconds", "")) for v in r["variants"]]' "$RESULTS_DIR/build.json" | tee -a "$RESULTS_DIR/session.log"
else
  echo "ggml-vendor build failed: the GPU steps below have nothing to load" | tee -a "$RESULTS_DIR/session.log"
  tail -30 "$RESULTS_DIR/build.err"
  exit 1
fi
ls build/*/ 2>&1 | tee -a "$RESULTS_DIR/session.log"

log "argument-error paths (each one a Python exception, never a crash)"
if timeout 120 python3 benchmarks/gpu_error_paths.py >"$RESULTS_DIR/error-paths.log" 2>&1; then
  cat "$RESULTS_DIR/error-paths.log" | grep -v Warning
else
  tail -40 "$RESULTS_DIR/error-paths.log"
  GDB=$(command -v cuda-gdb || ls /usr/local/cuda/bin/cuda-gdb 2>/dev/null)
  [ -n "$GDB" ] && timeout 240 "$GDB" -q -batch -ex "set pagination off" -ex run -ex bt \
    --args python3 benchmarks/gpu_error_paths.py >"$RESULTS_DIR/error-paths-gdb.log" 2>&1
  grep -B2 -A45 'received signal' "$RESULTS_DIR/error-paths-gdb.log" | head -70
fi

log "GPU tests"
timeout 330 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_ops.py -rs --durations=5 2>&1 | tee "$RESULTS_DIR/gpu-tests.log" | tail -25
if grep -q "Fatal Python error" "$RESULTS_DIR/gpu-tests.log"; then
  log "GPU tests again without the argument-error tests (the run above crashed)"
  timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_ops.py -rs \
    -k "not bad_arguments and not supports_is_exact" 2>&1 | tee "$RESULTS_DIR/gpu-tests-2.log" | tail -15
fi

log "accuracy table"
timeout 120 python3 benchmarks/gpu_accuracy.py 2>&1 | tee "$RESULTS_DIR/accuracy.md" | tail -60

log "compute-sanitizer memcheck"
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [ -n "$SAN" ]; then
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 200 "$SAN" --tool memcheck --error-exitcode 3 --print-limit 20 \
    python3 benchmarks/gpu_memcheck.py >"$RESULTS_DIR/memcheck.log" 2>&1
  echo "memcheck exit code $?" | tee -a "$RESULTS_DIR/memcheck.log"
  grep -E 'ERROR SUMMARY|MEMCHECK-SCRIPT-DONE|exit code|Invalid' "$RESULTS_DIR/memcheck.log" | head -20
else
  echo "compute-sanitizer not found"
fi
log "done"
