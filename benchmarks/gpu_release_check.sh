#!/usr/bin/env bash
# The release check on a CUDA GPU, in one go, on the tree as committed (vendor/ synced):
#   sync --check -> ggml-vendor build (the host variant, hermetic zig toolchain) -> verify with every check on
#   (manylinux_2_28 symbol ceilings, smoke import, conformance; no waivers) -> the GPU op tests -> the
#   silent-change proof (a [key][value] state flip must fail conformance) -> publish to a local test Hub ->
#   kernels.get_kernel from it.
# Inputs (environment):
#   WHEELS       optional folder of wheels the machine lacks (installed with --no-deps into a private dir);
#                may also hold zig-0.14.1-*.tar.xz, an unpacked-able ziglang tree for offline hosts
#   RESULTS_DIR  where logs and JSON land (default build/release-check)
#
#   WHEELS=/path/to/wheels bash benchmarks/gpu_release_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
RESULTS=${RESULTS_DIR:-build/release-check}
mkdir -p "$RESULTS"
export PYTHONUNBUFFERED=1 GIT_PYTHON_REFRESH=quiet PYTHONPATH=$PWD
if [ -n "${WHEELS:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/ggml-vendor-site \
    "$WHEELS"/*.whl >"$RESULTS/pip.log" 2>&1 || tail -5 "$RESULTS/pip.log"
  export PYTHONPATH=/tmp/ggml-vendor-site:$PWD
  for z in "$WHEELS"/zig-0.14.1-*.tar.xz; do
    [ -f "$z" ] || continue
    mkdir -p /tmp/ggml-vendor-zig && tar -xJf "$z" -C /tmp/ggml-vendor-zig
    export GGML_VENDOR_ZIG=/tmp/ggml-vendor-zig/ziglang/zig
  done
fi
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c 'import torch, huggingface_hub as h; print("torch", torch.__version__, torch.version.cuda, "hub", h.__version__)'
  ldd --version | head -1; } 2>&1 | tee "$RESULTS/env.log"
echo "== sync --check"; python3 -m toolkit.cli sync --check 2>&1 | tail -2
echo "== build"
python3 -m toolkit.cli build -j "$(nproc)" --json >"$RESULTS/build.json" 2>"$RESULTS/build.err" || {
  echo "build failed"; tail -30 "$RESULTS/build.err"; exit 1; }
python3 -c 'import json,sys; [print(v["name"], v["result"], round(v.get("seconds", 0), 1), "s") for v in json.load(open(sys.argv[1]))["variants"]]' "$RESULTS/build.json"
echo "== verify (every check, no waivers)"
python3 -m toolkit.cli verify --json >"$RESULTS/verify.json" 2>"$RESULTS/verify.err"; echo "verify exit code $?"
python3 - "$RESULTS/verify.json" <<'PY'
import json, sys
for v in json.load(open(sys.argv[1])).get("variants", []):
    for f in v.get("findings", []):
        if f.get("status") != "pass" or f.get("check") in ("abi", "symbols", "smoke", "conformance"):
            print(" ", f.get("check"), f.get("status"), str(f.get("message"))[:400])
PY
for so in build/*/*.so; do
  echo "$so: $(objdump -T "$so" | grep -oE 'GLIBC(XX)?_[0-9.]+|CXXABI_[0-9.]+' | sort -V | uniq | tr '\n' ' ')"
done
echo "== GPU op tests"; timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_ops.py 2>&1 | tail -2
echo "== silent change (state flipped) must fail conformance"
timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_conformance.py -k flipped -rs 2>&1 | tail -3
echo "== publish to a local test Hub, then get_kernel"
python3 -m toolkit.testing.localhub --port 8765 --token hf_test_token >"$RESULTS/hub.log" 2>&1 &
HUB=$!
sleep 2
export HF_ENDPOINT=http://127.0.0.1:8765 HF_TOKEN=hf_test_token HF_HOME=/tmp/ggml-vendor-hf
timeout 120 python3 -m toolkit.cli publish >"$RESULTS/publish.log" 2>&1; echo "publish exit code $?"; tail -3 "$RESULTS/publish.log"
REPO=$(python3 -c 'from toolkit.core.config import load; print(load(None).hub_repo)')
timeout 120 python3 -c "
import kernels
k = kernels.get_kernel('$REPO', version=1, trust_remote_code=True)
print('get_kernel ->', k.__name__, sorted(n for n in dir(k) if n.startswith(('gated', 'flash', 'supports'))))
" 2>&1 | tail -2
kill $HUB 2>/dev/null
