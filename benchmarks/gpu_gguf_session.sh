#!/usr/bin/env bash
# The gguf-kernels GPU checks in one script, for any machine with an NVIDIA GPU: build (benchmarks/
# gguf_local_build.py) and the first package (ggml-vendor build -p ggml-attn-kernels, for the GDN rows), the op
# tests against gguf's numpy reference, transformers end to end (also with the first package's layers switched
# on), the launch-parameter variants side by side (benchmarks/gguf_variants.py), a profiler pass
# (benchmarks/gguf_profile.py under ncu) and benchmarks/bench_gguf.py (gemv / dequantize per type, generate()).
# Inputs: a ggml tree (VENDOR, default vendor/ggml, as `ggml-vendor sync` writes it, patches applied), nvcc and a
# CUDA build of torch; WHEELS=<dir> installs the wheels there first (transformers 5.22.2 for its packed GGUF
# path, gguf, kernels and the toolkit's own); OBJECTS=<dir> reuses CUDA objects compiled elsewhere with the same
# toolkit (else they are compiled here); VARIANTS="label=<objects dir> ..." links more builds from objects
# (e.g. the pin's sources without vendor/patches/0005) and compares them with this one; FIRST_PACKAGE=0 skips
# the first package; TESTS=0 skips the op and end-to-end tests; PROFILE=0 skips ncu; DEADLINE_S stops starting
# steps once that many seconds have passed. The generate() rows alone, with and without the first package's
# layers: TESTS=0 PROFILE=0 BENCH_ARGS="--generate --no-gemv" bash benchmarks/gpu_gguf_session.sh
# Logs and tables go to RESULTS_DIR (default /tmp/gguf-session).
#
#   bash benchmarks/gpu_gguf_session.sh
set -uo pipefail
cd "$(dirname "$0")/.."
RESULTS_DIR=${RESULTS_DIR:-/tmp/gguf-session}
VENDOR=${VENDOR:-vendor/ggml}
BUILD=${BUILD:-/tmp/gguf-build}
DEADLINE_S=${DEADLINE_S:-900}
mkdir -p "$RESULTS_DIR" "$BUILD"
export PYTHONUNBUFFERED=1 GIT_PYTHON_REFRESH=quiet HF_HUB_DISABLE_XET=1
log() { printf '\n=== %s (%ss)\n' "$*" "$SECONDS" | tee -a "$RESULTS_DIR/session.log"; }
# timeout for a step: its own limit, or what is left before DEADLINE_S (0: skip the step)
budget() { local left=$((DEADLINE_S - SECONDS)); [ "$left" -lt "$1" ] && echo $((left > 10 ? left : 0)) || echo "$1"; }

if [ -n "${WHEELS:-}" ]; then
  log "wheels from $WHEELS"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl \
    >"$RESULTS_DIR/pip.log" 2>&1 || { echo "wheel install failed"; tail -20 "$RESULTS_DIR/pip.log"; }
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi

log "environment"
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  python3 -c 'import torch, transformers, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)'
  nvcc --version | tail -1; nproc; } 2>&1 | tee -a "$RESULTS_DIR/session.log"

ARCH=$(python3 -c 'import torch; m, n = torch.cuda.get_device_capability(); print(f"{m}{n}")')
link_build() {  # link_build OUT [OBJECTS]: objects copied in, then linked with the torch binding
  local out=$1 objs=${2:-}
  mkdir -p "$out"
  if [ -n "$objs" ]; then mkdir -p "$out/obj-sm$ARCH" && cp "$objs"/*.o "$out/obj-sm$ARCH/"; fi
  python3 benchmarks/gguf_local_build.py --vendor "$VENDOR" --out "$out" --link-only -j "$(nproc)"
}

log "build (gguf-kernels${VARIANTS:+, variants $VARIANTS}${FIRST_PACKAGE:+, first package})"
if [ "${FIRST_PACKAGE:-1}" = 1 ]; then
  python3 -m toolkit.cli build -j "$(nproc)" -p ggml-attn-kernels >"$RESULTS_DIR/build-first.log" 2>&1 &
  FIRST=$!
fi
declare -A VPID
for spec in ${VARIANTS:-}; do
  label=${spec%%=*}
  link_build "/tmp/gguf-$label" "${spec#*=}" >"$RESULTS_DIR/build-$label.log" 2>&1 &
  VPID[$label]=$!
done
built=0
if link_build "$BUILD" "${OBJECTS:-}" >"$RESULTS_DIR/build.log" 2>&1 \
   && PYTHONPATH=$BUILD/pkg:$PYTHONPATH python3 -c 'import gguf_kernels as g; print("GEMV_TYPES", g.GEMV_TYPES)' 2>&1 | tee -a "$RESULTS_DIR/session.log"; then
  built=1
else
  log "build with the given objects failed; compiling everything here"
  tail -5 "$RESULTS_DIR/build.log"
  rm -rf "$BUILD/obj-sm$ARCH"
  python3 benchmarks/gguf_local_build.py --vendor "$VENDOR" --out "$BUILD" -j "$(nproc)" >"$RESULTS_DIR/build2.log" 2>&1 \
    && PYTHONPATH=$BUILD/pkg:$PYTHONPATH python3 -c 'import gguf_kernels' && built=1
  tail -5 "$RESULTS_DIR/build2.log"
fi
[ "$built" = 1 ] || { echo "no build: nothing to test"; exit 1; }
export GGUF_KERNELS_PATH=$BUILD/pkg
VLIST=""  # in the order given: the first is the reference of the comparison
for spec in ${VARIANTS:-}; do
  label=${spec%%=*}
  if wait "${VPID[$label]}"; then VLIST="$VLIST $label=/tmp/gguf-$label/pkg"; else echo "variant $label failed"; tail -5 "$RESULTS_DIR/build-$label.log"; fi
done
if [ -n "${FIRST:-}" ]; then
  wait "$FIRST" && echo "first package built: $(ls build | grep torch | tr '\n' ' ')" | tee -a "$RESULTS_DIR/session.log" \
    || { echo "first package build failed"; tail -15 "$RESULTS_DIR/build-first.log"; }
fi
log "built"

t=$(budget ${TEST_TIMEOUT:-420})
if [ "${TESTS:-1}" = 1 ] && [ "$t" -gt 0 ]; then
  log "op tests (tests/gpu/test_gguf.py)"
  timeout "$t" python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_gguf.py -rs --tb=short --maxfail=10 \
    2>&1 | tee "$RESULTS_DIR/gpu-tests.log" | tail -8
fi

t=$(budget ${E2E_TIMEOUT:-300})
if [ "${TESTS:-1}" = 1 ] && [ "$t" -gt 0 ]; then
  log "transformers end to end (tests/gpu/test_gguf_transformers.py)"
  timeout "$t" python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_gguf_transformers.py -rs -s --tb=short \
    2>&1 | grep -v "Loading weights\|falling back" | tee "$RESULTS_DIR/e2e.log" | tail -25
fi

t=$(budget ${VARIANTS_TIMEOUT:-200})
if [ -n "$VLIST" ] && [ "$t" -gt 0 ]; then
  log "variants side by side (benchmarks/gguf_variants.py)"
  # shellcheck disable=SC2086
  timeout "$t" python3 benchmarks/gguf_variants.py $VLIST this=$BUILD/pkg --out "$RESULTS_DIR" 2>&1 \
    | tee "$RESULTS_DIR/variants.log" | tail -60
fi

t=$(budget ${PROFILE_TIMEOUT:-90})
if [ "${PROFILE:-1}" = 1 ] && command -v ncu >/dev/null 2>&1 && [ "$t" -gt 0 ]; then
  log "profile (ncu, benchmarks/gguf_profile.py)"
  read -r ref_variant _ <<<"$VLIST"  # the reference build beside this one
  # shellcheck disable=SC2086
  timeout "$t" ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section MemoryWorkloadAnalysis -k regex:'mul_mat_vec_q|quantize_q8_1|dequantize_block' \
    python3 benchmarks/gguf_profile.py ${ref_variant:-} this=$BUILD/pkg >"$RESULTS_DIR/ncu.log" 2>&1
  echo "ncu exit $?"; grep -E "^  [a-z_]+.*\(|^== |Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Size|Grid Size|Waves Per SM" \
    "$RESULTS_DIR/ncu.log" | head -150 >"$RESULTS_DIR/ncu-summary.log"; head -60 "$RESULTS_DIR/ncu-summary.log"
  for o in /tmp/gguf-*/obj-sm"$ARCH"/gguf_mmvq.o "$BUILD"/obj-sm"$ARCH"/gguf_mmvq.o; do  # registers of the M = 1 kernels
    [ -f "$o" ] && command -v cuobjdump >/dev/null && { echo "$o"; cuobjdump --dump-resource-usage "$o" \
      | grep -A1 -E "mul_mat_vec_qIL9ggml_type(12|8|2|14)ELi1ELb0ELb0ELb0E" | grep -o "REG:[0-9]*.*SHARED:[0-9]*"; }
  done >"$RESULTS_DIR/resources.log" 2>&1; cat "$RESULTS_DIR/resources.log"
fi

t=$(budget ${BENCH_TIMEOUT:-600})
if [ "$t" -gt 0 ]; then
  log "benchmark (benchmarks/bench_gguf.py${BENCH_ARGS:+ $BENCH_ARGS})"
  # shellcheck disable=SC2086
  timeout "$t" python3 benchmarks/bench_gguf.py --out "$RESULTS_DIR" ${BENCH_ARGS:-} 2>&1 | grep -v "Loading weights\|falling back" \
    | tee "$RESULTS_DIR/bench.log" | tail -60
fi
log "done"
