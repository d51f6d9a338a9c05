#!/usr/bin/env bash
# The gguf-kernels GPU checks in one script, for any machine with an NVIDIA GPU: build (benchmarks/
# gguf_local_build.py), the op tests against gguf's numpy reference, transformers end to end, and
# benchmarks/bench_gguf.py (gemv / dequantize per type, generate() packed vs dequantized).
# Inputs: a ggml tree (VENDOR, default vendor/ggml, as `ggml-vendor sync` writes it), nvcc and a CUDA build of
# torch; WHEELS=<dir> installs the wheels there first (transformers 5.22.2 for its packed GGUF path, gguf);
# OBJECTS=<dir> reuses CUDA objects compiled elsewhere with the same toolkit (else they are compiled here).
# Logs and tables go to RESULTS_DIR (default /tmp/gguf-session).
#
#   bash benchmarks/gpu_gguf_session.sh
set -uo pipefail
cd "$(dirname "$0")/.."
RESULTS_DIR=${RESULTS_DIR:-/tmp/gguf-session}
VENDOR=${VENDOR:-vendor/ggml}
BUILD=${BUILD:-/tmp/gguf-build}
mkdir -p "$RESULTS_DIR" "$BUILD"
export PYTHONUNBUFFERED=1
log() { printf '\n=== %s (%ss)\n' "$*" "$SECONDS" | tee -a "$RESULTS_DIR/session.log"; }

if [ -n "${WHEELS:-}" ]; then
  log "wheels from $WHEELS"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl \
    >"$RESULTS_DIR/pip.log" 2>&1 || { echo "wheel install failed"; tail -20 "$RESULTS_DIR/pip.log"; }
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi

log "environment"
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  python3 -c 'import torch, transformers, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)'
  nvcc --version | tail -1; nproc; } 2>&1 | tee -a "$RESULTS_DIR/session.log"

log "build"
ARCH=$(python3 -c 'import torch; m, n = torch.cuda.get_device_capability(); print(f"{m}{n}")')
if [ -n "${OBJECTS:-}" ]; then mkdir -p "$BUILD/obj-sm$ARCH" && cp "$OBJECTS"/*.o "$BUILD/obj-sm$ARCH/"; fi
built=0
if python3 benchmarks/gguf_local_build.py --vendor "$VENDOR" --out "$BUILD" --link-only -j "$(nproc)" >"$RESULTS_DIR/build.log" 2>&1 \
   && PYTHONPATH=$BUILD/pkg:$PYTHONPATH python3 -c 'import gguf_kernels as g; print("GEMV_TYPES", g.GEMV_TYPES)' 2>&1 | tee -a "$RESULTS_DIR/session.log"; then
  built=1
else
  log "build with the given objects failed; compiling everything here"
  tail -5 "$RESULTS_DIR/build.log"
  rm -rf "$BUILD/obj-sm$ARCH"
  python3 benchmarks/gguf_local_build.py --vendor "$VENDOR" --out "$BUILD" -j "$(nproc)" >"$RESULTS_DIR/build2.log" 2>&1 \
    && PYTHONPATH=$BUILD/pkg:$PYTHONPATH python3 -c 'import gguf_kernels' && built=1
  tail -5 "$RESULTS_DIR/build2.log"
fi
[ "$built" = 1 ] || { echo "no build: nothing to test"; exit 1; }
export GGUF_KERNELS_PATH=$BUILD/pkg

log "op tests (tests/gpu/test_gguf.py)"
timeout ${TEST_TIMEOUT:-420} python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_gguf.py -rs --tb=short --maxfail=10 \
  2>&1 | tee "$RESULTS_DIR/gpu-tests.log" | tail -25

log "transformers end to end (tests/gpu/test_gguf_transformers.py)"
timeout ${E2E_TIMEOUT:-300} python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_gguf_transformers.py -rs -s --tb=short \
  2>&1 | grep -v "Loading weights\|falling back" | tee "$RESULTS_DIR/e2e.log" | tail -20

log "benchmark (benchmarks/bench_gguf.py${BENCH_ARGS:+ $BENCH_ARGS})"
timeout ${BENCH_TIMEOUT:-600} python3 benchmarks/bench_gguf.py --out "$RESULTS_DIR" ${BENCH_ARGS:-} 2>&1 | grep -v "Loading weights\|falling back" \
  | tee "$RESULTS_DIR/bench.log" | tail -80
log "done"
