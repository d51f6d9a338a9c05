#!/usr/bin/env bash
# The prefill work (issue 19) on one CUDA machine, in one go:
#   wheels -> ggml-vendor build (host variant, vendor/patches applied) -> the GDN GPU tests (chunked path
#   included) -> where the chunked path wins (gdn_chunk_threshold.py) -> compute-sanitizer memcheck -> the prefill
#   grid (bench_gdn.py --prefill) -> the bf16 / float32 / fla ratios and the per-kernel profile (gdn_prefill_ratio.py
#   --f32, gdn_chunk_kernels.py, ncu where installed) -> one prompt's forward per mode kernel by kernel
#   (prefill_profile.py) -> bench_fa.py (n_kv 512..32K) -> bench_generate.py's compiled rows under
#   transformers' default compile config (with their compile diagnostics) and its prompt sweep.
# Needs vendor/ synced (ggml-vendor sync) and, on a machine without network access, a folder of wheels
# (WHEELS=<dir>): transformers 5.22.2, kernels 0.17.2, fla-core 0.6.0, huggingface_hub 2.4.0, httpx2, httpcore2,
# truststore, tomlkit, gitpython, gitdb, smmap, platformdirs.
#
#   WHEELS=wheels RESULTS_DIR=/tmp/gpu-prefill STEPS="build tests threshold prefill" bash benchmarks/gpu_prefill_session.sh
#
# NCU_KERNEL narrows Nsight Compute to one kernel (a regex, default every chunk kernel) and NCU_SECTIONS adds
# sections, e.g. NCU_KERNEL=chunk_state NCU_SECTIONS="--section SourceCounters --section SchedulerStats" for where
# the state pass's warps stall.
set -uo pipefail
cd "$(dirname "$0")/.."
RESULTS=${RESULTS_DIR:-/tmp/gpu-prefill}
STEPS=${STEPS:-"build tests threshold prefill ratio kernels profile memcheck fa compile sweep"}
mkdir -p "$RESULTS"
export PYTHONUNBUFFERED=1 GIT_PYTHON_REFRESH=quiet HF_HUB_OFFLINE=1 HF_HUB_DISABLE_XET=1
log() { printf '\n=== %s (%ss)\n' "$*" "$SECONDS" | tee -a "$RESULTS/session.log"; }
has() { [[ " $STEPS " == *" $1 "* ]]; }

if [ -n "${WHEELS:-}" ] && ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$WHEELS"/*.whl >"$RESULTS/pip.log" 2>&1 || { echo "wheel install failed"; tail -5 "$RESULTS/pip.log"; }
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
  python3 -c 'import sys, torch, transformers; print("python", sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__)'
  python3 -c 'import fla; print("fla", fla.__version__)' || true; } 2>&1 | tee -a "$RESULTS/session.log"
python3 -m toolkit.cli sync --check 2>&1 | tail -1 | tee -a "$RESULTS/session.log"

if has build; then
  log "ggml-vendor build (host variant, patches applied)"
  python3 -m toolkit.cli build -j "$(nproc)" -p "${PACKAGE:-ggml-attn-kernels}" >"$RESULTS/build.log" 2>&1 || { echo "build failed"; grep -E "error|Error" "$RESULTS/build.log" | head -20; tail -20 "$RESULTS/build.log"; exit 1; }
  tail -2 "$RESULTS/build.log"
fi
if has tests; then
  log "GDN GPU tests (tests/gpu/test_ops.py -k gdn, the chunked path first)"
  timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_ops.py tests/gpu/test_layers.py -k "chunk or dispatch or long_bf16 or token_major" -rs 2>&1 | tee "$RESULTS/gpu-tests-chunk.log" | tail -6
  [ -n "${CHUNK_TESTS_ONLY:-}" ] || timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_ops.py \
    tests/gpu/test_layers.py -k "not chunk and not dispatch and not long_bf16 and not token_major" -rs 2>&1 | tee "$RESULTS/gpu-tests.log" | tail -6
fi
if has threshold; then
  log "chunked vs token-sequential (gdn_chunk_threshold.py)"
  timeout 240 python3 benchmarks/gdn_chunk_threshold.py ${THRESHOLD_CASES:+--cases $THRESHOLD_CASES} 2>&1 | tee "$RESULTS/threshold.md" | tail -25
fi
if has memcheck; then
  log "compute-sanitizer memcheck (benchmarks/gpu_memcheck.py)"
  if [ -z "${CHUNKED_MEMCHECK_ONLY:-}" ]; then
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 240 compute-sanitizer --tool memcheck --error-exitcode 3 --print-limit 20 \
      python3 benchmarks/gpu_memcheck.py >"$RESULTS/memcheck.log" 2>&1
    echo "memcheck exit code $?" | tee -a "$RESULTS/session.log"
    grep -E 'ERROR SUMMARY|MEMCHECK-SCRIPT-DONE|Invalid' "$RESULTS/memcheck.log" | head -5
  fi
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 240 compute-sanitizer --tool memcheck --error-exitcode 3 --print-limit 20 \
    python3 benchmarks/gpu_memcheck.py --chunked >"$RESULTS/memcheck-chunked.log" 2>&1
  echo "memcheck (chunked path on) exit code $?" | tee -a "$RESULTS/session.log"
  grep -E 'ERROR SUMMARY|MEMCHECK-SCRIPT-DONE|Invalid' "$RESULTS/memcheck-chunked.log" | head -5
fi
if has prefill; then
  log "prefill grid (bench_gdn.py --prefill)"
  timeout 420 python3 benchmarks/bench_gdn.py --prefill --out "$RESULTS" --build-dir /tmp/rawbuild ${NO_RAW:+--no-raw} ${PREFILL_CASES:+--prefill-cases $PREFILL_CASES} >"$RESULTS/prefill.log" 2>&1 || tail -20 "$RESULTS/prefill.log"
  sed -n '/^| B /,/^### Environment/p' "$RESULTS/bench_gdn_prefill.md" 2>/dev/null || tail -30 "$RESULTS/prefill.log"
fi
if has ratio; then
  # patch 0007 side by side: our bf16 call (single tf32 products), the same values in float32 (the float32-accurate
  # form) and fla's chunk in one process; then the B=8 rows with the chunked path off (patch 0001's vector kernel),
  # which the dispatch rule weighs against the tf32 form.
  log "prefill ratios (gdn_prefill_ratio.py --f32; B=8 with GGML_CUDA_GDN_CHUNKED=0)"
  timeout 300 python3 benchmarks/gdn_prefill_ratio.py --f32 ${RATIO_CASES:+--cases $RATIO_CASES} 2>&1 | tee "$RESULTS/ratio.log" | grep -E "^ROW|op:|Error" | cut -c1-400
  GGML_CUDA_GDN_CHUNKED=0 timeout 200 python3 benchmarks/gdn_prefill_ratio.py --no-fla --cases "${VECTOR_CASES:-8x512,8x2048,8x8192}" 2>&1 | tee "$RESULTS/ratio-vector.log" | grep -E "^ROW|Error" | cut -c1-300
fi
if has kernels; then
  log "device time per kernel (gdn_chunk_kernels.py) and Nsight Compute of the chunk kernels"
  timeout 200 python3 benchmarks/gdn_chunk_kernels.py ${KERNEL_CASES:+--cases $KERNEL_CASES} 2>&1 | tee "$RESULTS/kernels.log" | grep -E "^KERNELS|Error" | cut -c1-600
  if command -v ncu >/dev/null; then
    timeout "${NCU_TIMEOUT_S:-150}" ncu --clock-control none --section SpeedOfLight --section Occupancy --section WarpStateStats \
      --section LaunchStats ${NCU_SECTIONS:-} -k "regex:${NCU_KERNEL:-gated_delta_net_chunk}" python3 benchmarks/gdn_chunk_kernels.py --cases "${NCU_CASE:-1x8192}" \
      --calls 1 --no-fla --no-profile >"$RESULTS/ncu.log" 2>&1
    echo "ncu exit code $?"
    grep -E "gated_delta_net_chunk|Duration|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Stall|Issued Warp|No Eligible|Block Limit" "$RESULTS/ncu.log" | head -120
  else
    echo "ncu not on PATH: no Nsight Compute profile"
  fi
fi
if has profile; then
  # One prompt's forward through the bench model per mode, kernels summed by name: where the time-to-first-token
  # gap of the sweep is (the input preparation, the chunk kernels, the rest of the model).
  log "prefill profile (prefill_profile.py at ${PROFILE_PROMPTS:-4096,16384} tokens)"
  for n in $(echo "${PROFILE_PROMPTS:-4096,16384}" | tr , ' '); do
    timeout 150 python3 benchmarks/prefill_profile.py --prompt "$n" --top "${PROFILE_TOP:-14}" 2>&1 | tee -a "$RESULTS/prefill-profile.log" | grep -E "^PREFILL|Error" | cut -c1-1500
  done
fi
if has fa; then
  log "bench_fa (n_kv 512, 4K, 16K, 32K)"
  timeout 240 python3 benchmarks/bench_fa.py --out "$RESULTS" --build-dir /tmp/rawbuild >"$RESULTS/fa.log" 2>&1 || tail -20 "$RESULTS/fa.log"
  sed -n '/### Targets/,/### Environment/p' "$RESULTS/bench_fa.md"
fi
if has compile; then
  # What a user gets unasked: generate(cache_implementation="static") with transformers' default CompileConfig()
  # (inductor, mode="reduce-overhead"). dynamo's graph-break / recompile / CUDA-graph-skip logs go to compile.log.
  log "bench_generate compiled rows, transformers' default compile config (inductor, reduce-overhead)"
  mkdir -p "$RESULTS/compile"
  TORCH_LOGS="${COMPILE_TORCH_LOGS:-graph_breaks,recompiles,perf_hints}" timeout "${COMPILE_TIMEOUT_S:-420}" \
    python3 benchmarks/bench_generate.py --out "$RESULTS/compile" --compile-only --compile-backend default \
    --compile-modes "${COMPILE_MODES:-fla,ours}" --compile-rounds "${COMPILE_ROUNDS:-5}" --compile-profile \
    --shapes qwen3.5-4b --batches "${COMPILE_BATCHES:-1,32}" --budget-s "${COMPILE_BUDGET_S:-300}" \
    2>"$RESULTS/compile.log" | tail -40
  grep -ciE "graph break|recompil" "$RESULTS/compile.log" | sed 's/^/compile.log graph-break\/recompile lines: /'
  grep -iE "skipping cudagraphs" "$RESULTS/compile.log" | sort | uniq -c | head -5
fi
if has sweep; then
  log "bench_generate prompt sweep (32, 512, 4096, 16384; eager, batch 1)"
  timeout "${SWEEP_TIMEOUT_S:-420}" python3 benchmarks/bench_generate.py --out "$RESULTS" \
    --prompts "${PROMPTS:-32,512,4096,16384}" --sweep-modes "${SWEEP_MODES:-torch,fla,ours}" --sweep-only --rounds "${SWEEP_ROUNDS:-2}" \
    --budget-s "${SWEEP_BUDGET_S:-300}" 2>"$RESULTS/sweep.log" | tail -20
fi
log "done"
