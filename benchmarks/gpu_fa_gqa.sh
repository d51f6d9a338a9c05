#!/usr/bin/env bash
# Issue 19 item 2 (GQA-grouped decode attention) on a GPU in one go: build the first package with vendor/patches
# (0004: the grouped vector kernel), check it (the GPU tests of the ops and of the attention hook, compute-sanitizer
# memcheck of flash_attn's edge cases, the conformance gate of `ggml-vendor verify`) and time it side by side
# (bench_fa.py: ggml unpatched vs one block per Q head vs grouped vs the op vs SDPA's backends, bf16, n_kv 512 /
# 4K / 16K / 32K). The raw harnesses bench_fa.py compares against are compiled while the package builds.
#
#   bash benchmarks/gpu_fa_gqa.sh [results-dir]       # default build/gpu-fa-gqa; STEPS="build tests fa memcheck verify"
#   WHEELS=<dir> bash benchmarks/gpu_fa_gqa.sh        # installs offline wheels (kernels, transformers, ...) first
set -uo pipefail
cd "$(dirname "$0")/.."
RESULTS=${1:-build/gpu-fa-gqa}
STEPS=${STEPS:-"build tests fa memcheck verify"}
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
  python3 -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
  python3 -m toolkit.cli sync --check 2>&1 | tail -1
  python3 -m toolkit.cli status 2>&1 | grep '^patch'; } 2>&1 | tee -a "$RESULTS/session.log"

# The raw harnesses (upstream's tree with the patches undone, and ours), cached by content under /tmp/rawbuild.
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
  tail -3 "$RESULTS/build.log"
fi
if has tests; then
  log "GPU tests (ops, attention hook)"
  timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_ops.py tests/gpu/test_layers.py \
    -k "test_ops or flash_attn" -rs 2>&1 | tee "$RESULTS/gpu-tests.log" | tail -8
fi
wait "$RAW_PID"
if has fa; then
  log "bench_fa $FA_ARGS"
  timeout 300 python3 benchmarks/bench_fa.py --out "$RESULTS" --build-dir /tmp/rawbuild $FA_ARGS >"$RESULTS/fa.log" 2>&1 \
    || tail -20 "$RESULTS/fa.log"
  sed -n '/### Targets/,/### Environment/p' "$RESULTS/bench_fa.md"
fi
if has memcheck; then
  log "compute-sanitizer memcheck (flash_attn cases)"
  SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 200 "$SAN" --tool memcheck --error-exitcode 3 --print-limit 20 \
    python3 benchmarks/gpu_memcheck.py --fa-only >"$RESULTS/memcheck.log" 2>&1
  echo "memcheck exit code $?" | tee -a "$RESULTS/memcheck.log"
  grep -E 'ERROR SUMMARY|MEMCHECK-SCRIPT-DONE|Invalid' "$RESULTS/memcheck.log" | head -5
fi
if has verify; then
  log "verify (conformance included)"
  timeout 200 python3 -m toolkit.cli verify --json --host-toolchain -p ggml-attn-kernels >"$RESULTS/verify.json" 2>/tmp/verify.err
  echo "verify exit code $?" | tee -a "$RESULTS/session.log"
  tail -5 /tmp/verify.err | tee -a "$RESULTS/session.log"
  python3 - "$RESULTS/verify.json" <<'PY' 2>&1 | tee -a "$RESULTS/session.log"
import json, sys
doc = json.load(open(sys.argv[1]))
for v in doc["variants"]:
    for f in v["findings"]:
        if f["check"] == "conformance" or f["status"] == "fail":
            print(f"{f['variant']} {f['check']}: {f['status']}: {f['message']}"[:400])
PY
fi
log "done"
