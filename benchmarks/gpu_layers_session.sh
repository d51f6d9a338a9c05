#!/usr/bin/env bash
# The transformers hooks on one CUDA machine, in one go (docs/benchmarks.md, "generate() in transformers"):
#   wheels -> ggml-vendor build (host variant) -> tests/gpu/test_layers.py (and, alongside, fla's time to
#   first token in a fresh process with a cold Triton cache) -> ours' time to first token -> bench_generate.py.
# Needs: vendor/ synced (ggml-vendor sync), and a folder of wheels for what the machine lacks: transformers
# 5.22.2, kernels 0.17.2, fla-core 0.6.0, huggingface_hub 2.x (kernels 0.17.2 downloads "kernel"-type repos,
# which huggingface_hub 1.x refuses) with httpx2/httpcore2/truststore, and the toolkit's tomlkit, gitpython,
# platformdirs, e.g.
#   pip download --no-deps -d wheels transformers==5.22.2 kernels==0.17.2 fla-core==0.6.0 huggingface_hub==2.4.0 \
#     httpx2==2.16.2 httpcore2==2.16.2 truststore==0.10.5 regex tomlkit gitpython gitdb smmap platformdirs
#
#   WHEELS=wheels RESULTS_DIR=/tmp/gpu-layers BUDGET_S=300 bash benchmarks/gpu_layers_session.sh
# The op tests and compute-sanitizer (for vendor/patches) run too; per-call launches and host time come from
# benchmarks/bench_layer_calls.py.
set -uo pipefail
cd "$(dirname "$0")/.."
RESULTS=${RESULTS_DIR:-/tmp/gpu-layers}
WHEELS=${WHEELS:-wheels}
BUDGET_S=${BUDGET_S:-600}
mkdir -p "$RESULTS"
export PYTHONUNBUFFERED=1 GIT_PYTHON_REFRESH=quiet HF_HUB_DISABLE_XET=1
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cold-$$}
log() { printf '\n=== %s (%ss)\n' "$*" "$SECONDS" | tee -a "$RESULTS/session.log"; }

log "wheels"
if ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$WHEELS"/*.whl >>"$RESULTS/session.log" 2>&1 || echo "wheel install failed" | tee -a "$RESULTS/session.log"
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  python3 -c 'import sys, torch, transformers, kernels; print("python", sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__, "kernels", kernels.__version__)'
  python3 -c 'import fla; print("fla", fla.__version__)' || true; nproc; } 2>&1 | tee -a "$RESULTS/session.log"

log "build (ggml-vendor build, host variant)"
if ! python3 -m toolkit.cli build -j "$(nproc)" >>"$RESULTS/session.log" 2>&1; then
  echo "ggml-vendor build failed: nothing to test" | tee -a "$RESULTS/session.log"
  tail -30 "$RESULTS/session.log"
  exit 1
fi
ls build/ | tee -a "$RESULTS/session.log"

log "time to first token, fla (fresh process, cold Triton cache; runs beside the GPU tests)"
timeout 150 python3 benchmarks/bench_generate.py --ttft fla >"$RESULTS/ttft.log" 2>&1 &
TTFT_FLA=$!

log "GPU tests (tests/gpu/test_ops.py tests/gpu/test_layers.py)"
timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_ops.py tests/gpu/test_layers.py -rs \
  --durations=5 >"$RESULTS/gpu-tests.log" 2>&1
tail -25 "$RESULTS/gpu-tests.log"
wait $TTFT_FLA

log "compute-sanitizer memcheck (benchmarks/gpu_memcheck.py)"
if command -v compute-sanitizer >/dev/null 2>&1; then
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 180 compute-sanitizer --tool memcheck --error-exitcode 3 \
    python3 benchmarks/gpu_memcheck.py >"$RESULTS/memcheck.log" 2>&1
  echo "memcheck exit $?" | tee -a "$RESULTS/session.log"
  tail -2 "$RESULTS/memcheck.log"
else
  echo "compute-sanitizer not on PATH: memcheck skipped" | tee -a "$RESULTS/session.log"
fi

log "one call of each hook: launches and host time (benchmarks/bench_layer_calls.py)"
timeout 120 python3 benchmarks/bench_layer_calls.py 2>&1 | tee "$RESULTS/layer_calls.md"

log "time to first token, ours (fresh process)"
timeout 120 python3 benchmarks/bench_generate.py --ttft ours >>"$RESULTS/ttft.log" 2>&1
grep TTFT "$RESULTS/ttft.log" | tee -a "$RESULTS/session.log"

log "bench_generate (budget ${BUDGET_S}s)"
timeout $((BUDGET_S + 45)) python3 benchmarks/bench_generate.py --out "$RESULTS" --rounds 9 --f32 --profile --compile \
  --compile-modes fla,ours --budget-s "$BUDGET_S" 2>"$RESULTS/bench.log" | tail -80
log "done"
