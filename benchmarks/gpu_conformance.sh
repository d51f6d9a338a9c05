#!/usr/bin/env bash
# The conformance gate on a GPU (issue 11), in one go:
#   1. sync --check: vendor/ is the pinned upstream, byte for byte;
#   2. ggml-vendor build: the variant of this host's torch + CUDA;
#   3. ggml-vendor verify --host-toolchain (a local build: the manylinux ceilings are waived, as for any
#      build made with this machine's compiler): every check, conformance included (each op against the package's float64
#      reference of the documented contract on a fixed set of shapes); the conformance rows are printed;
#   4. the silent-change proof: tests/gpu/test_conformance.py copies the project, flips the vendored
#      gated_delta_net.cu's state indexing from [value][key] to [key][value] without touching any
#      declaration, rebuilds, and requires the gate to fail.
# Needs a CUDA GPU, nvcc, torch and the toolkit's dependencies (wheels placed in .whl/ are installed first).
#
#   bash benchmarks/gpu_conformance.sh [results-dir]      # default results-dir: build/gpu-conformance
set -uo pipefail
cd "$(dirname "$0")/.."
RESULTS=${1:-build/gpu-conformance}
mkdir -p "$RESULTS"
export PYTHONUNBUFFERED=1 GIT_PYTHON_REFRESH=quiet
log() { printf '\n=== %s (%ss)\n' "$*" "$SECONDS" | tee -a "$RESULTS/conformance.log"; }
status=0

if ls .whl/*.whl >/dev/null 2>&1; then
  log "installing the wheels in .whl/"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/ggml-vendor-site \
    .whl/*.whl >"$RESULTS/pip.log" 2>&1 || { echo "wheel install failed"; tail -20 "$RESULTS/pip.log"; }
  export PYTHONPATH=/tmp/ggml-vendor-site:$PWD
else
  export PYTHONPATH=$PWD
fi

log "environment"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
  nvcc --version | tail -1; } 2>&1 | tee -a "$RESULTS/conformance.log"

log "sync --check"
python3 -m toolkit.cli sync --check 2>&1 | tee -a "$RESULTS/conformance.log" || status=1

log "build (host variant)"
if ! python3 -m toolkit.cli build -j "$(nproc)" --json >"$RESULTS/build.json" 2>"$RESULTS/build.err"; then
  echo "ggml-vendor build failed" | tee -a "$RESULTS/conformance.log"; tail -30 "$RESULTS/build.err"; exit 1
fi

log "verify (conformance included)"
python3 -m toolkit.cli verify --json --host-toolchain >"$RESULTS/verify.json" 2>"$RESULTS/verify.err"
echo "verify exit code $?" | tee -a "$RESULTS/conformance.log"
python3 - "$RESULTS/verify.json" <<'PY' 2>&1 | tee -a "$RESULTS/conformance.log" || status=1
import json, sys
doc = json.load(open(sys.argv[1]))
rows = [f for v in doc["variants"] for f in v["findings"] if f["check"] == "conformance"]
for f in [f for v in doc["variants"] for f in v["findings"] if f["status"] == "fail"] + [f for f in doc.get("global", []) if f["status"] == "fail"]:
    print(f"  ({f['variant']} {f['check']}: {f['status']}: {f['message']})")
for r in rows:
    print(f"{r['variant']}: conformance {r['status']}: {r['message']}")
sys.exit(0 if rows and all(r["status"] == "pass" for r in rows) else 1)
PY

log "silent change: state indexing flipped must fail the gate"
timeout 900 python3 -m pytest -q -s -m gpu -p no:cacheprovider tests/gpu/test_conformance.py -k flipped -rs 2>&1 \
  | tee "$RESULTS/flip-test.log" | tail -30
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

log "done (exit $status)"
exit $status
