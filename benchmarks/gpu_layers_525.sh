#!/usr/bin/env bash
# The transformers 5.25 hooks on one CUDA machine, in one go, within 8 minutes (docs/transformers.md, "What changed
# in transformers 5.25"):
#   wheels -> ggml-vendor build (host variant) -> tests/gpu/test_layers_525.py (un-repeated q/k with Hk < Hv in
#   float64, rollback through transformers' cache, the conv against transformers' in float64, and the acceptance
#   check: a random-initialised Qwen3.5 with Hk < Hv switched the documented way, conv included, gives the torch
#   fallback's float32 greedy tokens) and tests/gpu/test_layers.py -> bench_generate.py: eager bf16 decode at batch 1,
#   torch / fla / ours (GDN and conv on ggml) side by side, ours ÷ fla printed.
# Needs: vendor/ synced (ggml-vendor sync), nvcc, torch (2.11 was the last measured), and a folder of wheels for what
# the machine lacks, downloaded for its Python (kernels 0.19.1 and regex ship one wheel per CPython), e.g. for 3.12:
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 -d wheels \
#     transformers==5.25.0 kernels==0.19.1 fla-core==0.6.0 huggingface_hub==2.4.0 httpx2==2.17.0 httpcore2==2.17.0 \
#     truststore==0.10.5 tokenizers==0.23.3 safetensors==0.8.0 regex tomlkit gitpython gitdb smmap platformdirs
#
#   WHEELS=wheels RESULTS_DIR=/tmp/gpu-525 bash benchmarks/gpu_layers_525.sh
# Every step has its own time limit and none starts after DEADLINE_S (default 470 s); results and logs go to
# RESULTS_DIR. Exit code: 0 when the build, both test files and the benchmark ran clean, else the first failure's.
set -uo pipefail
cd "$(dirname "$0")/.."
RESULTS=${RESULTS_DIR:-/tmp/gpu-525}
DEADLINE_S=${DEADLINE_S:-470}
source benchmarks/gpu_common.sh
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-$$}
STATUS=0
note() { [ "$STATUS" -eq 0 ] && STATUS=$1; }

# The wheels of WHEELS (one per CPython for some): install the ones that fit this Python, by name, from that folder.
log "wheels"
if [ -n "${WHEELS:-}" ]; then
  names=$(ls "$WHEELS"/*.whl | xargs -n1 basename | cut -d- -f1 | sort -u)
  # shellcheck disable=SC2086
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    --find-links "$WHEELS" $names >"$RESULTS/pip.log" 2>&1 || { tail -5 "$RESULTS/pip.log"; note 2; }
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
log_environment
python3 -c 'import kernels, transformers; from transformers.utils import is_kernels_available as ok
print("kernels", kernels.__version__, "transformers", transformers.__version__, "transformers accepts kernels:", ok())
import fla; print("fla", fla.__version__)' 2>&1 | tee -a "$RESULTS/session.log"

TAIL=4 step build 210 python3 -m toolkit.cli build -j "$(nproc)" || {
  echo "ggml-vendor build failed: nothing to test"; tail -30 "$RESULTS/build.log"; exit 1; }
ls build/ | tee -a "$RESULTS/session.log"

# The 5.25 tests first (the acceptance check among them), then the layer tests that hold for every release.
TAIL=30 step gpu-tests 170 python3 -m pytest -q -m gpu -p no:cacheprovider -rs --durations=8 \
  tests/gpu/test_layers_525.py tests/gpu/test_layers.py || note $?

# Eager bf16 decode at batch 1 on the Qwen3.5-4B shape (16 key / 32 value heads: Hk < Hv, un-repeated on 5.25),
# 128 new tokens, the modes interleaved round by round; "ours" switches GDN and conv to this package's layers.
TAIL=40 step bench 150 python3 benchmarks/bench_generate.py --out "$RESULTS" --rounds 5 --shapes qwen3.5-4b \
  --batches 1 --modes torch,fla,ours --budget-s 100 || note $?

log "summary"
{ grep -E "passed|failed|error" "$RESULTS/gpu-tests.log" | tail -2
  grep -E "test_tiny_qwen35_switched_the_documented_way" "$RESULTS/gpu-tests.log" | head -3
  grep -E "^#### |^\| mode |^\| (torch|fla|ours) \|" "$RESULTS/bench.log" | tail -5; } 2>/dev/null | tee -a "$RESULTS/session.log"
echo "acceptance: the documented-switch test above passed = float32 greedy tokens equal the torch fallback's;" \
  "the ours row's '÷ fla' column = eager bf16 decode at batch 1 against fla (goal >= 1.15)" | tee -a "$RESULTS/session.log"
log "done (exit $STATUS)"
exit "$STATUS"
