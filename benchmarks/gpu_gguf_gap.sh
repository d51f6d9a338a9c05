#!/usr/bin/env bash
# The packed-vs-dequantized logit gap of the GGUF end-to-end test, diagnosed on any machine with an NVIDIA GPU:
# links the gguf-kernels build (benchmarks/gguf_local_build.py; OBJECTS=<dir> reuses CUDA objects compiled
# elsewhere with the same toolkit) and runs benchmarks/gguf_logit_gap.py (per-layer hidden states of the packed
# model with our ops, with the gemv swapped for exact / emulated arithmetic, against the dequantized model).
# WHEELS=<dir> installs the wheels there first (transformers 5.22.2, gguf). Results in RESULTS_DIR.
#
#   bash benchmarks/gpu_gguf_gap.sh
set -uo pipefail
cd "$(dirname "$0")/.."
RESULTS_DIR=${RESULTS_DIR:-/tmp/gguf-gap}
VENDOR=${VENDOR:-vendor/ggml}
BUILD=${BUILD:-/tmp/gguf-build}
mkdir -p "$RESULTS_DIR" "$BUILD"
export PYTHONUNBUFFERED=1
if [ -n "${WHEELS:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl \
    >"$RESULTS_DIR/pip.log" 2>&1 || { echo "wheel install failed"; tail -20 "$RESULTS_DIR/pip.log"; }
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
ARCH=$(python3 -c 'import torch; m, n = torch.cuda.get_device_capability(); print(f"{m}{n}")')
if [ -n "${OBJECTS:-}" ]; then mkdir -p "$BUILD/obj-sm$ARCH" && cp "$OBJECTS"/*.o "$BUILD/obj-sm$ARCH/"; fi
python3 benchmarks/gguf_local_build.py --vendor "$VENDOR" --out "$BUILD" --link-only -j "$(nproc)" >"$RESULTS_DIR/build.log" 2>&1 \
  || { echo "build failed"; tail -20 "$RESULTS_DIR/build.log"; exit 1; }
echo "built in ${SECONDS}s"
GGUF_KERNELS_PATH=$BUILD/pkg timeout ${GAP_TIMEOUT:-400} python3 benchmarks/gguf_logit_gap.py --out "$RESULTS_DIR" ${GAP_ARGS:-} 2>&1 \
  | grep -v "Loading weights\|falling back" | tee "$RESULTS_DIR/gap.log"
echo "done in ${SECONDS}s"
