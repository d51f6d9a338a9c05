#!/usr/bin/env bash
# The whole tree's confirmation on one NVIDIA GPU in one go, correctness first, stopping new steps once
# DEADLINE_S seconds have passed:
#   1. the first package built by `ggml-vendor build -p ggml-attn-kernels`; gguf-kernels linked from CUDA objects
#      compiled elsewhere (benchmarks/gguf_local_build.py), and built by `ggml-vendor build -p gguf-kernels` in
#      the background (the conformance gate verifies what the tool builds);
#   2. two lanes of correctness work side by side (tests only, nothing timed): the GDN lane — the chunked prefill
#      path's tests (if they fail the timed rows run with GGML_CUDA_GDN_CHUNKED=0 and the log says so), the other
#      GPU op/layer tests, compute-sanitizer memcheck of the chunked path — and the gguf lane — the
#      gguf op tests, transformers end to end (also with the first package's GDN layers), then the conformance
#      gate `ggml-vendor verify -p gguf-kernels` once the tool build is done (needs kernel-abi-check among the
#      wheels; benchmarks/gpu_verify_gates.sh verifies both packages and runs the flipped-kernel gate test);
#   3. timed, one at a time with nothing beside them: gguf generate() rows (packed vs dequantized, with and
#      without the first package's layers), the prefill grid (our layer vs fla's chunk, ratios:
#      benchmarks/gdn_prefill_ratio.py; bench_gdn.py --prefill adds the torch chunk and float64 errors), the
#      chunked vs token-sequential crossover.
# Inputs (environment): WHEELS=<dir> wheels the machine lacks (fla-core, transformers, kernels, gguf, the
# toolkit's own), installed with --no-deps into a private folder; GGUF_OBJECTS=<dir> gguf-kernels' CUDA objects
# compiled elsewhere with the same nvcc (`gguf_local_build.py --objects-only`; else compiled here);
# PREFILL_CASES (default the issue's grid); TIMED (default "generate prefill threshold": which timed steps run);
# DEADLINE_S (default 900); RESULTS_DIR (default /tmp/wave-check).
#
#   WHEELS=/path/to/wheels bash benchmarks/gpu_wave_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
RESULTS=${RESULTS_DIR:-/tmp/wave-check}
DEADLINE_S=${DEADLINE_S:-900}
# shellcheck source=benchmarks/gpu_common.sh
source benchmarks/gpu_common.sh
install_wheels
log_environment

log "build: ggml-attn-kernels (ggml-vendor build), gguf-kernels linked (gguf_local_build.py), in parallel"
python3 -m toolkit.cli build -j "$(nproc)" -p ggml-attn-kernels >"$RESULTS/build-first.log" 2>&1 &
FIRST=$!
ARCH=$(python3 -c 'import torch; m, n = torch.cuda.get_device_capability(); print(f"{m}{n}")')
GGUF=/tmp/gguf-build
mkdir -p "$GGUF"
if [ -n "${GGUF_OBJECTS:-}" ]; then
  mkdir -p "$GGUF/obj-sm$ARCH" && cp "$GGUF_OBJECTS"/*.o "$GGUF/obj-sm$ARCH/"
  python3 benchmarks/gguf_local_build.py --vendor vendor/ggml --out "$GGUF" --link-only -j 4 >"$RESULTS/build-gguf.log" 2>&1
else
  python3 benchmarks/gguf_local_build.py --vendor vendor/ggml --out "$GGUF" -j "$(nproc)" >"$RESULTS/build-gguf.log" 2>&1
fi
echo "gguf link exit code $?" | tee -a "$RESULTS/session.log"
wait "$FIRST"; echo "first package build exit code $?: $(ls build | grep torch | tr '\n' ' ')" | tee -a "$RESULTS/session.log"
tail -3 "$RESULTS/build-first.log"
export GGUF_KERNELS_PATH=$GGUF/pkg
log "build: ggml-vendor build -p gguf-kernels (background, for the conformance gate)"
python3 -m toolkit.cli build -j "$(nproc)" -p gguf-kernels >"$RESULTS/build-gguf-tool.log" 2>&1 &
TOOL_BUILD=$!

GPU=(python3 -m pytest -q -m gpu -p no:cacheprovider -rs --tb=short)
gdn_lane() {
  if ! step gdn-chunk-tests 150 "${GPU[@]}" tests/gpu/test_ops.py tests/gpu/test_layers.py -k "chunk or dispatch or long_bf16"; then
    touch "$RESULTS/CHUNKED-FAILED"
    log "THE CHUNKED PATH FAILED ITS TESTS: the timed rows run with GGML_CUDA_GDN_CHUNKED=0"
  fi
  # tests/gpu/test_conformance.py (it builds a flipped copy of the project, minutes) is gpu_verify_gates.sh's
  step gpu-tests 200 "${GPU[@]}" tests/gpu/test_ops.py tests/gpu/test_layers.py -k "not chunk and not dispatch and not long_bf16"
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 step memcheck-chunked 120 \
    compute-sanitizer --tool memcheck --error-exitcode 3 --print-limit 20 python3 benchmarks/gpu_memcheck.py --chunked
  grep -E 'ERROR SUMMARY|MEMCHECK-SCRIPT-DONE' "$RESULTS/memcheck-chunked.log" | head -3
}
gguf_lane() {
  step gguf-tests 60 "${GPU[@]}" tests/gpu/test_gguf.py --maxfail=10
  TAIL=25 step gguf-e2e 200 "${GPU[@]}" -s tests/gpu/test_gguf_transformers.py
  wait "$TOOL_BUILD"; echo "gguf-kernels tool build exit code $?: $(ls build/gguf-kernels 2>/dev/null | tr '\n' ' ')" \
    | tee -a "$RESULTS/session.log"; tail -3 "$RESULTS/build-gguf-tool.log"
  TAIL=20 step verify-gguf 150 python3 -m toolkit.cli verify -p gguf-kernels --host-toolchain
}
log "correctness: the GDN lane and the gguf lane side by side"
gdn_lane > "$RESULTS/lane-gdn.log" 2>&1 &
LANE=$!
gguf_lane > "$RESULTS/lane-gguf.log" 2>&1
wait "$LANE"
cat "$RESULTS/lane-gdn.log" "$RESULTS/lane-gguf.log"
[ -e "$RESULTS/CHUNKED-FAILED" ] && export GGML_CUDA_GDN_CHUNKED=0

timed() { [[ " ${TIMED:-generate prefill threshold} " == *" $1 "* ]]; }
timed generate && TAIL=40 step gguf-generate 220 python3 benchmarks/bench_gguf.py --out "$RESULTS" --generate --no-gemv \
  ${GEN_ARGS:---rounds 2 --new-tokens 32}
timed prefill && TAIL=40 step prefill 170 python3 benchmarks/gdn_prefill_ratio.py \
  --cases "${PREFILL_CASES:-1x512,1x2048,1x8192,1x32768,8x512,8x2048,8x8192,8x32768}"
timed threshold && TAIL=30 step threshold 120 python3 benchmarks/gdn_chunk_threshold.py ${THRESHOLD_CASES:+--cases $THRESHOLD_CASES}
log "done"
