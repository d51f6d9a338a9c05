#!/usr/bin/env bash
# The side-by-side benchmarks on a machine with an NVIDIA GPU (docs/benchmarks.md): build the host variant, then
# bench_gdn.py and bench_fa.py, each writing bench_<op>.md/.json and a log into RESULTS_DIR.
# Inputs: this repository with vendor/ synced (`ggml-vendor sync`); a Python with the toolkit, torch (CUDA),
# kernels and fla-core installed (`pip install -e '.[cuda]' fla-core==0.6.0`); nvcc on PATH. On a machine without
# network access, WHEELS=<dir> installs the wheels in <dir> first.
#
#   bash benchmarks/gpu_bench.sh            # RESULTS_DIR defaults to benchmarks/out
set -euo pipefail
cd "$(dirname "$0")/.."
RESULTS_DIR=${RESULTS_DIR:-benchmarks/out}
mkdir -p "$RESULTS_DIR"
export PYTHONUNBUFFERED=1 GIT_PYTHON_REFRESH=quiet
if [ -n "${WHEELS:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl
  export PYTHONPATH=/tmp/site:$PWD
fi
python3 -m toolkit.cli build -j "$(nproc)" >"$RESULTS_DIR/build.log" 2>&1 || { tail -30 "$RESULTS_DIR/build.log"; exit 1; }
python3 benchmarks/bench_gdn.py --out "$RESULTS_DIR" 2>&1 | tee "$RESULTS_DIR/gdn.log" | tail -20
python3 benchmarks/bench_fa.py --out "$RESULTS_DIR" 2>&1 | tee "$RESULTS_DIR/fa.log" | tail -20
