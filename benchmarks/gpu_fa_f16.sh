#!/usr/bin/env bash
# Decode attention in both K/V dtypes on a GPU in one go (docs/benchmarks.md, "Decode attention"): build the first
# package with vendor/patches, check it (the GPU tests of the ops and of the attention hook, compute-sanitizer
# memcheck of flash_attn's edge cases) and time it side by side (bench_fa.py: f16 and bf16 K/V, both head shapes,
# n_kv 512 / 4K / 16K / 32K; ggml unpatched, one block per Q head, the grouped kernel before and after the newest
# patch that changes it, the op, SDPA's backends; regressions against benchmarks/bench_fa_record.json).
#
#   bash benchmarks/gpu_fa_f16.sh [results-dir]     # default build/gpu-fa-f16; STEPS="build tests fa memcheck"
#   WHEELS=<dir> bash benchmarks/gpu_fa_f16.sh      # installs offline wheels (kernels, transformers, ...) first
#   FA_ARGS="--gqa-rows 4,16" ...                   # extra bench_fa.py arguments (here: two more grouped variants)
set -uo pipefail
cd "$(dirname "$0")/.."
RESULTS=${1:-build/gpu-fa-f16}
STEPS=${STEPS:-"build tests fa memcheck"}
FA_ARGS=${FA_ARGS:-}
mkdir -p "$RESULTS"
export PYTHONUNBUFFERED=1 GIT_PYTHON_REFRESH=quiet HF_HUB_OFFLINE=1
log() { printf '\n=== %s (%ss)\n' "$*" "$SECONDS" | tee -a "$RESULTS/session.log"; }
has() { [[ " $STEPS " == *" $1 "* ]]; }

if [ -n "${WHEELS:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl \
    >/tmp/pip.log 2>&1 || tail -5 /tmp/pip.log
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  python3 -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())'
  nvcc --version | tail -1
  python3 -m toolkit.cli sync --check 2>&1 | tail -1
  python3 -m toolkit.cli status 2>&1 | grep '^patch'; } 2>&1 | tee -a "$RESULTS/session.log"

# The raw harnesses (upstream's tree with the patches undone, and ours), cached by content under /tmp/rawbuild;
# bench_fa.py builds the grouped variants (before the newest patch, --gqa-rows) itself.
python3 - >/tmp/raw-build.log 2>&1 <<'PY' &
import sys
from pathlib import Path
sys.path.insert(0, "benchmarks")
from raw_ggml import loader
vendor, build = Path("vendor/ggml"), Path("/tmp/rawbuild")
pristine, _ = loader.pristine_tree(vendor, Path("vendor/patches"), build)
for tree in (pristine, vendor):
    print(loader.build(tree, build, quiet=False))
PY
RAW_PID=$!

if has build; then
  log "ggml-vendor build -p ggml-attn-kernels"
  timeout 300 python3 -m toolkit.cli build -j "$(nproc)" -p ggml-attn-kernels >"$RESULTS/build.log" 2>&1 \
    || { echo "build failed"; tail -30 "$RESULTS/build.log"; }
  tail -2 "$RESULTS/build.log"
fi
if has tests; then
  log "GPU tests (ops, attention hook)"
  timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_ops.py tests/gpu/test_layers.py \
    -k "test_ops or flash_attn" -rs 2>&1 | tee "$RESULTS/gpu-tests.log" | tail -4
fi
wait "$RAW_PID"
if has fa; then
  log "bench_fa $FA_ARGS"
  timeout 400 python3 benchmarks/bench_fa.py --out "$RESULTS" --build-dir /tmp/rawbuild $FA_ARGS >"$RESULTS/fa.log" 2>&1 \
    || tail -20 "$RESULTS/fa.log"
  sed -n '/^## Before \/ after/,/^### Environment/p' "$RESULTS/bench_fa.md"
fi
if has memcheck; then
  log "compute-sanitizer memcheck (flash_attn cases)"
  SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 200 "$SAN" --tool memcheck --error-exitcode 3 --print-limit 20 \
    python3 benchmarks/gpu_memcheck.py --fa-only >"$RESULTS/memcheck.log" 2>&1
  echo "memcheck exit code $?" | tee -a "$RESULTS/memcheck.log"
  grep -E 'ERROR SUMMARY|MEMCHECK-SCRIPT-DONE|Invalid' "$RESULTS/memcheck.log" | head -5
fi
log "done"
