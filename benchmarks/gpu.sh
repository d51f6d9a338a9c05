#!/usr/bin/env bash
# The GPU run, in one script, for any machine with an NVIDIA GPU and this repository (vendor/ synced):
#   environment -> both packages built through the tool (`ggml-vendor build -p <package>`) -> `ggml-vendor
#   verify --host-toolchain` of each (the conformance gate included) -> the GPU tests
#   (tests/gpu, which load what the tool built) -> compute-sanitizer memcheck where installed -> the benchmark
#   suites (`python -m benchmarks run`), all within a time budget.
#
#   bash benchmarks/gpu.sh OUT_DIR [SUITE...]      # default suites: decode prefill attention gguf e2e
#
# Environment:
#   BUDGET_S  seconds for the whole run (default 1800): each step's limit is trimmed to what is left, a step
#             past it is skipped, and the suites that no longer fit are reported as skipped for time
#   WHEELS    a folder of wheels a machine without internet lacks, installed with
#             `pip install --no-index --no-deps --target` into OUT_DIR/site (put first on PYTHONPATH); a
#             zig-*.tar.xz there is unpacked and used as the build's zig (GGML_VENDOR_ZIG)
#   TESTS=0   skip the GPU tests; MEMCHECK=0 skip memcheck; RECORD=1 append the suites' runs to
#             benchmarks/results/ (the record later runs are judged against)
# Every step's log is OUT_DIR/<step>.log; OUT_DIR/session.log has the exit codes; the suites write
# OUT_DIR/bench/<suite>.json (benchmarks/record.py's schema) and OUT_DIR/bench/summary.json.
#
# Sourced (`source benchmarks/gpu.sh` with RESULTS set), it only defines the step runner below.

# ---- the step runner: a results folder, each step under its own limit, none started past the deadline
log() { printf '\n=== %s (%ss)\n' "$*" "$SECONDS" | tee -a "$RESULTS/session.log"; }

# a step's timeout: its own limit, or what is left before BUDGET_S (0: too little left, skip the step)
budget() {
  local left=$((${BUDGET_S:-1800} - SECONDS))
  if [ "$left" -lt "$1" ]; then echo $((left > 10 ? left : 0)); else echo "$1"; fi
}

# step NAME LIMIT COMMAND...: run under its budget, output to RESULTS/NAME.log, its tail shown (TAIL lines,
# default 12; STEP_SHOW: only lines matching that extended regex); returns the command's exit code (124: stopped
# by the limit), 99 when skipped for the deadline
step() {
  local name=$1 t rc; t=$(budget "$2"); shift 2
  if [ "$t" -le 0 ]; then log "$name: skipped (deadline)"; return 99; fi
  log "$name (limit ${t}s)"
  timeout "$t" "$@" >"$RESULTS/$name.log" 2>&1; rc=$?
  if [ -n "${STEP_SHOW:-}" ]; then grep -E "$STEP_SHOW" "$RESULTS/$name.log"; else grep -v "Loading weights\|falling back" "$RESULTS/$name.log"; fi \
    | tail -"${TAIL:-12}"
  echo "$name exit code $rc" | tee -a "$RESULTS/session.log"
  return $rc
}

# the wheels of WHEELS=<dir> (if set) into RESULTS/site, --no-deps, from that folder only; PYTHONPATH then
# puts them and this checkout (the toolkit, the benchmarks) first
install_wheels() {
  if [ -n "${WHEELS:-}" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$RESULTS/site" \
      "$WHEELS"/*.whl >"$RESULTS/pip.log" 2>&1 || tail -5 "$RESULTS/pip.log"
    export PYTHONPATH=$RESULTS/site:$PWD
    local z
    for z in "$WHEELS"/zig-*.tar.xz; do
      [ -f "$z" ] || continue
      mkdir -p "$RESULTS/zig" && tar -xJf "$z" -C "$RESULTS/zig"
      GGML_VENDOR_ZIG=$(find "$RESULTS/zig" -maxdepth 3 -type f -name zig | head -1)
      export GGML_VENDOR_ZIG
    done
  else
    export PYTHONPATH=$PWD
  fi
}

# the machine and versions every run's log starts with
log_environment() {
  log "environment"
  { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)'
    nvcc --version | tail -1; nproc; } 2>&1 | tee -a "$RESULTS/session.log"
}

main() {
  if [ $# -lt 1 ]; then
    echo "usage: bash benchmarks/gpu.sh OUT_DIR [SUITE...] (BUDGET_S, WHEELS, TESTS, MEMCHECK, RECORD in the environment)" >&2
    return 2
  fi
  RESULTS=$(mkdir -p "$1" && cd "$1" && pwd) || { echo "error: cannot create the output folder $1" >&2; return 2; }
  shift
  local suites=("$@") status=0 p san left record=()
  [ ${#suites[@]} -gt 0 ] || suites=(decode prefill attention gguf e2e)
  cd "$(dirname "${BASH_SOURCE[0]}")/.." || return 2
  export PYTHONUNBUFFERED=1 GIT_PYTHON_REFRESH=quiet HF_HUB_DISABLE_XET=1
  install_wheels
  log_environment

  for p in ggml-attn-kernels gguf-kernels; do
    TAIL=4 step "build-$p" 900 python3 -m toolkit.cli build -j "$(nproc)" -p "$p" || status=1
  done
  for p in ggml-attn-kernels gguf-kernels; do  # ABI, metadata, smoke import and the conformance gate on this GPU
    TAIL=14 step "verify-$p" 300 python3 -m toolkit.cli verify -p "$p" --host-toolchain || status=1
  done
  if [ "${TESTS:-1}" = 1 ]; then
    STEP_SHOW="passed|failed|skipped|error|SKIPPED|FAILED" TAIL=30 step gpu-tests 900 \
      python3 -m pytest -q -m gpu -p no:cacheprovider -rs tests/gpu || status=1
  fi
  san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
  if [ "${MEMCHECK:-1}" = 1 ] && [ -n "$san" ]; then
    STEP_SHOW="ERROR SUMMARY|MEMCHECK-SCRIPT-DONE|Invalid" PYTORCH_NO_CUDA_MEMORY_CACHING=1 step memcheck 300 \
      "$san" --tool memcheck --error-exitcode 3 --print-limit 20 python3 benchmarks/gpu_memcheck.py || status=1
  fi

  [ "${RECORD:-0}" = 1 ] && record=(--record)
  left=$((${BUDGET_S:-1800} - SECONDS))
  log "suites: ${suites[*]} (${left}s left)"
  python3 -m benchmarks run "${suites[@]}" --out "$RESULTS/bench" --budget-s "$left" "${record[@]}" \
    2>&1 | tee "$RESULTS/suites.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  log "done (exit $status)"
  return $status
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -uo pipefail
  main "$@"
  exit $?
elif [ -n "${RESULTS:-}" ]; then
  mkdir -p "$RESULTS"
fi
