#!/usr/bin/env bash
# Issue 10's GPU run in one go: build the op with vendor/patches applied, choose the patches' parameters
# (patch_sweep.py), check correctness (GPU tests, compute-sanitizer memcheck) and time everything side by side
# (bench_gdn.py, bench_fa.py: ggml unpatched vs patched vs the op vs fla vs SDPA).
#
#   bash benchmarks/gpu_patches.sh      # RESULTS_DIR=benchmarks/out; STEPS="build sweep tests memcheck gdn fa"
#   WHEELS=<dir> bash benchmarks/gpu_patches.sh   # installs offline wheels (fla-core, kernels, ...) first
set -uo pipefail
cd "$(dirname "$0")/.."
RESULTS_DIR=${RESULTS_DIR:-${1:-benchmarks/out}}
STEPS=${STEPS:-"build sweep tests memcheck gdn fa"}
QUICK=${QUICK:-}
mkdir -p "$RESULTS_DIR"
export PYTHONUNBUFFERED=1 GIT_PYTHON_REFRESH=quiet HF_HUB_OFFLINE=1
log() { printf '\n=== %s (%ss)\n' "$*" "$SECONDS" | tee -a "$RESULTS_DIR/session.log"; }
has() { [[ " $STEPS " == *" $1 "* ]]; }

if [ -n "${WHEELS:-}" ]; then
  log "wheels from $WHEELS"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl \
    >"$RESULTS_DIR/pip.log" 2>&1 || tail -5 "$RESULTS_DIR/pip.log"
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee -a "$RESULTS_DIR/session.log"
python3 -m toolkit.cli sync --check 2>&1 | tail -1 | tee -a "$RESULTS_DIR/session.log"
python3 -m toolkit.cli status 2>&1 | grep '^patch' | tee -a "$RESULTS_DIR/session.log"

if has build; then
  log "ggml-vendor build (the op, patches applied)"
  python3 -m toolkit.cli build -j "$(nproc)" >"$RESULTS_DIR/build.log" 2>&1 || { echo "build failed"; tail -30 "$RESULTS_DIR/build.log"; }
  tail -3 "$RESULTS_DIR/build.log"
fi
if has sweep; then
  log "patch parameter sweep"
  python3 benchmarks/patch_sweep.py --gdn-only --out "$RESULTS_DIR" --build-dir /tmp/rawbuild 2>&1 | grep -v '^\[raw_ggml\]' | tee "$RESULTS_DIR/sweep.log"
fi
if has tests; then
  log "GPU tests"
  timeout 400 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_ops.py -x -rs 2>&1 | tee "$RESULTS_DIR/gpu-tests.log" | tail -8
fi
if has memcheck; then
  log "compute-sanitizer memcheck"
  SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 200 "$SAN" --tool memcheck --error-exitcode 3 --print-limit 20 \
    python3 benchmarks/gpu_memcheck.py >"$RESULTS_DIR/memcheck.log" 2>&1
  echo "memcheck exit code $?" | tee -a "$RESULTS_DIR/memcheck.log"
  grep -E 'ERROR SUMMARY|MEMCHECK-SCRIPT-DONE|Invalid' "$RESULTS_DIR/memcheck.log" | head -5
fi
if has gdn; then
  log "bench_gdn"
  python3 benchmarks/bench_gdn.py --out "$RESULTS_DIR" --build-dir /tmp/rawbuild $QUICK >"$RESULTS_DIR/gdn.log" 2>&1 || tail -20 "$RESULTS_DIR/gdn.log"
  sed -n '/### Targets/,/### Environment/p' "$RESULTS_DIR/bench_gdn.md"
fi
if has fa; then
  log "bench_fa"
  python3 benchmarks/bench_fa.py --out "$RESULTS_DIR" --build-dir /tmp/rawbuild $QUICK >"$RESULTS_DIR/fa.log" 2>&1 || tail -20 "$RESULTS_DIR/fa.log"
  sed -n '/### Targets/,/### Environment/p' "$RESULTS_DIR/bench_fa.md"
fi
log "done"
