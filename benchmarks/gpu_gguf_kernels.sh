#!/usr/bin/env bash
# gguf-kernels' kernel changes checked and timed on one NVIDIA GPU in a few minutes, without the tool build:
#   1. gguf-kernels linked from CUDA objects compiled elsewhere (benchmarks/gguf_local_build.py --objects-only,
#      same nvcc) for the build under test (OBJECTS) and for each variant beside it (VARIANTS);
#   2. tests/gpu/test_gguf.py (every op and type against gguf's numpy reference) on the build under test;
#   3. benchmarks/gguf_variants.py: every build against the first variant (bit-identity of all outputs), timed
#      side by side in one process (VARIANT_TYPES, default Q4_K,Q8_0);
#   4. benchmarks/bench_gguf.py on the build under test: the gemv against cuBLAS bf16/f32 and the dequantize
#      bandwidth (BENCH_ARGS, default --quick --types Q4_K,Q8_0,Q6_K,Q4_0);
#   5. with E2E=1, tests/gpu/test_gguf_transformers.py (transformers end to end; its GDN cases skip without the
#      first package).
# Inputs (environment): WHEELS=<dir> wheels the machine lacks (transformers 5.22.2, gguf, accelerate, ...),
# installed with --no-deps into a private folder; OBJECTS=<dir> the build under test's objects;
# VARIANTS="label=<dir> ..." more builds, each <dir> holding the objects that differ from OBJECTS; DEADLINE_S
# (default 600); RESULTS_DIR (default /tmp/gguf-kernels-check). Steps' limits: TEST_S, VARIANTS_S, BENCH_S, E2E_S;
# TEST_K / E2E_K: a pytest -k expression selecting some of the op / end-to-end tests; CHECK_TYPES: the
# types of gguf_variants.py's bit-identity check (default all).
#
#   OBJECTS=objs/new VARIANTS="cur=objs/cur" bash benchmarks/gpu_gguf_kernels.sh
set -uo pipefail
cd "$(dirname "$0")/.."
RESULTS=${RESULTS_DIR:-/tmp/gguf-kernels-check}
DEADLINE_S=${DEADLINE_S:-600}
# shellcheck source=benchmarks/gpu_common.sh
source benchmarks/gpu_common.sh
install_wheels
log_environment

log "builds: gguf-kernels linked from objects"
# shellcheck disable=SC2086
gguf_link_builds "$OBJECTS" ${VARIANTS:-}
gguf_resources "mul_mat_vec_qIL9ggml_type12ELi1ELb0ELb0ELb0E|mul_mat_vec_q4_K|dequantize_block_q4_K"  # registers of the Q4_K M = 1 gemv kernels and of the dequantizers

GPU=(python3 -m pytest -q -m gpu -p no:cacheprovider -rs --tb=short)
TAIL=20 step gguf-tests "${TEST_S:-90}" "${GPU[@]}" tests/gpu/test_gguf.py --maxfail=10 ${TEST_K:+-k "$TEST_K"}
# shellcheck disable=SC2086
TAIL=70 step variants "${VARIANTS_S:-120}" python3 benchmarks/gguf_variants.py $VLIST this="$GGUF_KERNELS_PATH" \
  --out "$RESULTS" --types "${VARIANT_TYPES:-Q4_K,Q8_0}" ${CHECK_TYPES:+--check-types "$CHECK_TYPES"}
# shellcheck disable=SC2086
TAIL=40 step bench "${BENCH_S:-90}" python3 benchmarks/bench_gguf.py --out "$RESULTS/bench" \
  ${BENCH_ARGS:---quick --types Q4_K,Q8_0,Q6_K,Q4_0}
if [ "${E2E:-0}" = 1 ]; then
  TAIL=25 step e2e "${E2E_S:-150}" "${GPU[@]}" -s tests/gpu/test_gguf_transformers.py ${E2E_K:+-k "$E2E_K"}
fi
log "done"
