#!/usr/bin/env bash
# Today's client stack on one NVIDIA GPU, for both packages: build (this machine's torch, in parallel), `verify`
# under the installed kernels (0.19.1 where WHEELS carries it: digest, kernels-minver and arch checks on, the
# smoke import and the conformance gate through get_local_kernel with check_arch left on), a tampered file
# (verify must fail in one line naming it, and the client's own load must refuse it), then publish both packages
# to a local test Hub on 127.0.0.1 and load each back with get_kernel(repo, version=1) in a fresh process, and
# list them with kernels' own resolver (get_kernel_variants, what `kernels variants` prints).
# Inputs (environment): WHEELS=<dir> of wheels the machine lacks (kernels, huggingface_hub and what it needs,
# transformers, kernel-abi-check, auditwheel, pyelftools, lief, gitpython, tomlkit, platformdirs, gguf), installed
# with --no-deps into a private folder; RESULTS_DIR (default /tmp/stack-check); DEADLINE_S (default 540).
#
#   WHEELS=/path/to/wheels bash benchmarks/gpu_stack_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
RESULTS=${RESULTS_DIR:-/tmp/stack-check}
DEADLINE_S=${DEADLINE_S:-540}
# shellcheck source=benchmarks/gpu_common.sh
source benchmarks/gpu_common.sh
install_wheels
log_environment
python3 -c 'import kernels, huggingface_hub as h; print("kernels", kernels.__version__, "huggingface_hub", h.__version__)' \
  | tee -a "$RESULTS/session.log"

log "build both packages"
python3 -m toolkit.cli build -j "$(nproc)" -p gguf-kernels >"$RESULTS/build-gguf.log" 2>&1 &
GGUF=$!
timeout 420 python3 -m toolkit.cli build -j "$(nproc)" -p ggml-attn-kernels >"$RESULTS/build-first.log" 2>&1
echo "ggml-attn-kernels build exit code $?"; tail -2 "$RESULTS/build-first.log"
wait "$GGUF"; echo "gguf-kernels build exit code $?"; tail -2 "$RESULTS/build-gguf.log"

for p in ggml-attn-kernels gguf-kernels; do
  TAIL=14 step "verify-$p" 200 python3 -m toolkit.cli verify -p "$p" --host-toolchain
done

# A tampered file: verify says so in one line, and the client's own load refuses it (kernels >= 0.18 hashes every
# load against metadata.json's digest). The file is restored afterwards.
VARIANT_DIR=$(find build -mindepth 1 -maxdepth 1 -type d -name 'torch*' | head -1)
log "tamper $VARIANT_DIR/_ops.py"
if [ -n "$VARIANT_DIR" ]; then
  cp "$VARIANT_DIR/_ops.py" /tmp/_ops.py.orig
  echo "# tampered" >>"$VARIANT_DIR/_ops.py"
  python3 -m toolkit.cli verify -p ggml-attn-kernels --host-toolchain --no-smoke >"$RESULTS/verify-tampered.log" 2>&1
  echo "verify of the tampered build exit code $? (8 expected)"; grep -i "digest" "$RESULTS/verify-tampered.log" | head -3
  python3 -c "import sys, kernels; from pathlib import Path; kernels.get_local_kernel(Path(sys.argv[1]))" "$VARIANT_DIR" \
    >"$RESULTS/load-tampered.log" 2>&1
  echo "get_local_kernel of the tampered build exit code $? (non-zero expected)"; tail -1 "$RESULTS/load-tampered.log"
  cp /tmp/_ops.py.orig "$VARIANT_DIR/_ops.py"
fi

log "publish both packages to a local test Hub, get_kernel each back"
python3 -m toolkit.testing.localhub --port 8765 >"$RESULTS/hub.log" 2>&1 &
HUB=$!
sleep 2
export HF_HUB_DISABLE_XET=1
for p in ggml-attn-kernels gguf-kernels; do
  timeout 120 python3 -m toolkit.cli publish -p "$p" --repo "local/$p" --endpoint http://127.0.0.1:8765 \
    --token hf_test_token >"$RESULTS/publish-$p.log" 2>&1
  echo "publish -p $p exit code $?"; tail -4 "$RESULTS/publish-$p.log"
done
timeout 200 env HF_ENDPOINT=http://127.0.0.1:8765 HF_HUB_CACHE=/tmp/hubcache KERNELS_CACHE=/tmp/hubcache \
  python3 - <<'PY' 2>&1 | tee "$RESULTS/get-kernel.log" | grep -v "^WARNING"
import torch, kernels
for repo in ("local/ggml-attn-kernels", "local/gguf-kernels"):
    try:
        k = kernels.get_kernel(repo, version=1, trust_remote_code=True)
    except Exception as exc:  # noqa: BLE001
        print(f"get_kernel({repo!r}) FAILED: {type(exc).__name__}: {str(exc).splitlines()[0]}")
        continue
    print(f"get_kernel({repo!r}) ->", k.__name__, "exports", len(getattr(k, "__all__", [])), "names")
try:
    k = kernels.get_kernel("local/ggml-attn-kernels", version=1, trust_remote_code=True)
    q = torch.randn(1, 1, 16, 128, device="cuda")
    kv = torch.randn(1, 512, 4, 128, device="cuda", dtype=torch.float16)
    print("flash_attn ran:", tuple(k.flash_attn(q, kv, kv, None, 128 ** -0.5).shape))
    # kernels' public resolver over what the Hub lists (what `kernels variants` prints)
    for d in kernels.get_kernel_variants("local/ggml-attn-kernels", version=1):
        print("variant", d.variant.variant_str, type(d).__name__)
except Exception as exc:  # noqa: BLE001
    print(f"FAILED: {type(exc).__name__}: {str(exc).splitlines()[0]}")
PY
kill "$HUB" 2>/dev/null
