#!/usr/bin/env bash
# The chunked GDN prefill path (vendor/patches/0003) checked and timed on one NVIDIA GPU in one short go, most
# important first, each step under its own limit and none started past DEADLINE_S: build (ggml-vendor build),
# the chunked path's float64-reference tests with the path forced on, our layer's prefill grid
# (gdn_prefill_ratio.py, the op's default dispatch), compute-sanitizer memcheck with the path on, the default
# dispatch test, then the grid again beside fla's chunked kernel, and the chunked vs token-sequential crossover.
# Inputs (environment): WHEELS=<dir> wheels the machine lacks (fla-core, transformers, kernels and the toolkit's
# own), installed with --no-deps into a private folder; DEADLINE_S (default 600); RESULTS_DIR (default
# /tmp/chunk-check); CASES (default the issue's grid); STEPS (default all of the above, run in the order given).
#
#   WHEELS=/path/to/wheels DEADLINE_S=300 bash benchmarks/gpu_chunk_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
RESULTS=${RESULTS_DIR:-/tmp/chunk-check}
DEADLINE_S=${DEADLINE_S:-600}
CASES=${CASES:-1x512,1x2048,1x8192,1x32768,8x512,8x2048,8x8192,8x32768}
STEPS=${STEPS:-"build forced grid memcheck dispatch fla threshold"}
export HF_HUB_OFFLINE=1
STEP_SHOW="^ROW|passed|failed|error|Error|ERROR SUMMARY|MEMCHECK-SCRIPT-DONE"
# shellcheck source=benchmarks/gpu_common.sh
source benchmarks/gpu_common.sh
install_wheels
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee -a "$RESULTS/session.log"
GPU=(python3 -m pytest -q -m gpu -p no:cacheprovider -rs --tb=short)
for s in $STEPS; do  # in the order given
  case $s in
    build) step build 150 python3 -m toolkit.cli build -j "$(nproc)" -p ggml-attn-kernels || exit 1 ;;
    forced) GGML_CUDA_GDN_CHUNKED=1 step forced 60 "${GPU[@]}" tests/gpu/test_ops.py -k "chunked_prefill or from_chunked_prefill" ;;
    grid) TAIL=20 step grid 40 python3 benchmarks/gdn_prefill_ratio.py --no-fla --cases "$CASES" ;;
    memcheck) PYTORCH_NO_CUDA_MEMORY_CACHING=1 step memcheck 40 \
      compute-sanitizer --tool memcheck --error-exitcode 3 --print-limit 20 python3 benchmarks/gpu_memcheck.py --chunked ;;
    dispatch) step dispatch 60 "${GPU[@]}" tests/gpu/test_ops.py tests/gpu/test_layers.py -k "dispatch or long_bf16" ;;
    fla) TAIL=20 step fla 300 python3 benchmarks/gdn_prefill_ratio.py --cases "$CASES" ;;
    threshold) TAIL=40 step threshold 120 python3 benchmarks/gdn_chunk_threshold.py ${THRESHOLD_CASES:+--cases $THRESHOLD_CASES} ;;
    *) echo "unknown step: $s (steps: build forced grid memcheck dispatch fla threshold)"; exit 2 ;;
  esac
done
log done
