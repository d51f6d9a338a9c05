#!/usr/bin/env bash
# gguf-kernels' confirmation on one NVIDIA GPU in one go, ordered so that the GPU works while the tool build
# compiles, stopping new steps once DEADLINE_S seconds have passed:
#   1. `ggml-vendor build -p ggml-attn-kernels -p gguf-kernels` (both packages for this machine's torch, in the
#      background: the conformance gate needs gguf-kernels built by the tool, the +gdn rows the first package),
#      and gguf-kernels linked from CUDA objects compiled elsewhere (benchmarks/gguf_local_build.py
#      --objects-only, same nvcc) for the build under test and for each variant beside it;
#   2. tests/gpu/test_gguf.py (every op and type against gguf's numpy reference) on the build under test;
#   3. benchmarks/gguf_variants.py: every variant against the first (bit-identity of all outputs), timed side
#      by side (GPU time in CUDA graphs, so the compiles running beside it do not move it);
#   4. benchmarks/bench_gguf.py: host µs per call and the gemv against cuBLAS (BENCH_ARGS);
#   5. tests/gpu/test_gguf_transformers.py (transformers end to end, correctness only, so it runs while the tool
#      build still compiles; its GDN cases need the first package, which that build makes first, ~40 s);
#   6. once the builds are done (generate() is host-bound: nothing else runs beside it), bench_gguf.py's
#      generate() packed vs dequantized, with and without the first package's layers (GEN_ARGS);
#   7. `ggml-vendor verify -p gguf-kernels --host-toolchain`: the conformance gate.
# On one H200 with 16 cores the tool build takes ~155 s (ggml-attn-kernels 41 s, gguf-kernels 115 s for sm_80 +
# sm_90), steps 2-4 ~50 s, step 5 ~105 s.
# Inputs (environment): WHEELS=<dir> wheels the machine lacks (transformers 5.22.2, gguf, kernels, fla-core, the
# toolkit's own), installed with --no-deps into a private folder; OBJECTS=<dir> the build under test's objects;
# VARIANTS="label=<dir> ..." more builds, each <dir> holding the objects that differ from OBJECTS (the first
# variant is the reference of the bit-identity check, e.g. the pin's sources without vendor/patches/0005);
# VARIANT_TYPES (default Q4_K,Q8_0,Q6_K,Q4_0); DEADLINE_S (default 900); RESULTS_DIR (default /tmp/gguf-confirm).
#
#   WHEELS=wheels OBJECTS=objs/new VARIANTS="upstream=objs/up patched=objs/cur" bash benchmarks/gpu_gguf_confirm.sh
set -uo pipefail
cd "$(dirname "$0")/.."
RESULTS=${RESULTS_DIR:-/tmp/gguf-confirm}
DEADLINE_S=${DEADLINE_S:-900}
# shellcheck source=benchmarks/gpu_common.sh
source benchmarks/gpu_common.sh
install_wheels
log_environment

log "builds: ggml-vendor build (both packages, background), gguf-kernels linked from objects"
python3 -m toolkit.cli build -j "$(nproc)" -p ggml-attn-kernels -p gguf-kernels >"$RESULTS/build-tool.log" 2>&1 &
TOOL_BUILD=$!
# shellcheck disable=SC2086
gguf_link_builds "$OBJECTS" ${VARIANTS:-}
gguf_resources "mul_mat_vec_qIL9ggml_type(12|8|14)ELi1ELb0ELb0ELb0E|dequantize_block_q(4_K|8_0)"  # some M = 1 gemv kernels, the dequantizers

GPU=(python3 -m pytest -q -m gpu -p no:cacheprovider -rs --tb=short)
step gguf-tests 60 "${GPU[@]}" tests/gpu/test_gguf.py --maxfail=10
# shellcheck disable=SC2086
TAIL=70 step variants 120 python3 benchmarks/gguf_variants.py $VLIST this="$GGUF_KERNELS_PATH" --out "$RESULTS" \
  --types "${VARIANT_TYPES:-Q4_K,Q8_0,Q6_K,Q4_0}"
# shellcheck disable=SC2086
TAIL=30 step bench-gemv 60 python3 benchmarks/bench_gguf.py --out "$RESULTS/gemv" ${BENCH_ARGS:---quick --types Q4_K,Q8_0,Q6_K,Q4_0}

TAIL=25 step e2e 150 "${GPU[@]}" -s tests/gpu/test_gguf_transformers.py

log "waiting for ggml-vendor build"
wait "$TOOL_BUILD"; echo "ggml-vendor build exit code $?: $(ls build build/gguf-kernels 2>/dev/null | grep torch | tr '\n' ' ')" \
  | tee -a "$RESULTS/session.log"; tail -4 "$RESULTS/build-tool.log"
# shellcheck disable=SC2086
TAIL=40 step generate 200 python3 benchmarks/bench_gguf.py --out "$RESULTS/generate" --no-gemv --generate \
  ${GEN_ARGS:---rounds 2 --new-tokens 32 --prompt-lens 32,512}

t=$(budget 120)
if [ "$t" -gt 0 ]; then
  log "conformance gate (ggml-vendor verify -p gguf-kernels, limit ${t}s)"
  timeout "$t" python3 -m toolkit.cli verify -p gguf-kernels --host-toolchain --json >"$RESULTS/verify.json" 2>"$RESULTS/verify.err"
  echo "verify exit code $?" | tee -a "$RESULTS/session.log"
  python3 - "$RESULTS/verify.json" <<'PY' 2>&1 | tee -a "$RESULTS/session.log"
import json, sys
try:
    doc = json.load(open(sys.argv[1]))
except Exception as exc:  # noqa: BLE001
    sys.exit(f"no verify report: {exc}")
for v in doc.get("variants", []):
    for f in v["findings"]:
        if f["status"] != "pass" or f["check"] == "conformance":
            print(f"  {v.get('variant', f.get('variant'))} {f['check']}: {f['status']}: {f['message'][:600]}")
for f in doc.get("global", []):
    if f["status"] != "pass":
        print(f"  global {f['check']}: {f['status']}: {f['message'][:300]}")
PY
  tail -5 "$RESULTS/verify.err"
else
  log "conformance gate: skipped (deadline)"
fi
log "done"
