#!/usr/bin/env bash
# Both packages' verification on one NVIDIA GPU: `ggml-vendor build` of ggml-attn-kernels and gguf-kernels for
# this machine's torch (in parallel), then `ggml-vendor verify --host-toolchain` of each package (ABI, metadata,
# smoke import, the conformance gate against the float64 references), then the gate test that a silently
# flipped GDN kernel fails conformance (tests/gpu/test_conformance.py: it builds a flipped copy, ~3 min).
# Inputs (environment): WHEELS=<dir> wheels the machine lacks (kernels, kernel-abi-check, transformers, gguf,
# fla-core, the toolkit's own), installed with --no-deps into a private folder; RESULTS_DIR (default
# /tmp/verify-gates).
#
#   WHEELS=/path/to/wheels bash benchmarks/gpu_verify_gates.sh
set -uo pipefail
cd "$(dirname "$0")/.."
RESULTS=${RESULTS_DIR:-/tmp/verify-gates}
# shellcheck source=benchmarks/gpu_common.sh
source benchmarks/gpu_common.sh
install_wheels
python3 -m toolkit.cli build -j "$(nproc)" -p gguf-kernels >"$RESULTS/build-gguf.log" 2>&1 &
GGUF=$!
python3 -m toolkit.cli build -j "$(nproc)" -p ggml-attn-kernels >"$RESULTS/build-first.log" 2>&1
echo "ggml-attn-kernels build exit code $?"; tail -2 "$RESULTS/build-first.log"
wait "$GGUF"; echo "gguf-kernels build exit code $?"; tail -2 "$RESULTS/build-gguf.log"
for p in ggml-attn-kernels gguf-kernels; do
  timeout 150 python3 -m toolkit.cli verify -p "$p" --host-toolchain >"$RESULTS/verify-$p.log" 2>&1
  echo "verify -p $p exit code $?"; tail -25 "$RESULTS/verify-$p.log"
done
timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider -rs --tb=short -s tests/gpu/test_conformance.py \
  >"$RESULTS/conformance-test.log" 2>&1
echo "tests/gpu/test_conformance.py exit code $?"; tail -6 "$RESULTS/conformance-test.log"
