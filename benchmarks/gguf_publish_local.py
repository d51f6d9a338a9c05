"""Publish gguf-kernels to a local test Hub and load it the ways its users do: under its own repo id with
kernels.get_kernel, and under the id transformers' GGUF path asks for ("ggml-org/ggml-quantization", version 1)
through transformers' own lookup (get_gguf_kernel), which then reports the gemv types it will use.

    ggml-vendor build -p gguf-kernels && ggml-vendor verify -p gguf-kernels
    python3 benchmarks/gguf_publish_local.py

Needs a committed (clean) build: publish refuses dirty ones. Nothing leaves this machine (the Hub is local).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from toolkit.testing.localhub import HubServer, HubState, client_env

REPO = Path(__file__).resolve().parents[1]
TOKEN = "local-test-token"
REPOS = ("marcsun13/gguf-kernels", "ggml-org/ggml-quantization")
LOAD = """
import kernels
from transformers.integrations.gguf import kernels as hf
m = kernels.get_kernel("marcsun13/gguf-kernels", version=1)
print("get_kernel:", m.__name__, len(m.GEMV_TYPES), "gemv types, MAX_GEMV_ROWS", m.MAX_GEMV_ROWS)
k = hf.get_gguf_kernel()
print("transformers get_gguf_kernel:", type(k).__name__, "Q4_K", k.supports(12), "Q6_K", k.supports(14), "F16", k.supports(1))
sys_ok = type(k).__name__ == "GgufKernel" and k.supports(12) and k.supports(14) and not k.supports(1)
raise SystemExit(0 if sys_ok else 1)
"""


def main() -> int:
    state = HubState(tokens=(TOKEN,), trusted_orgs=tuple(sorted({r.split("/")[0] for r in REPOS})))
    with HubServer(state) as hub, tempfile.TemporaryDirectory() as tmp:
        for repo_id in REPOS:
            cmd = [sys.executable, "-m", "toolkit.cli", "publish", "-C", str(REPO), "-p", "gguf-kernels", "--repo",
                   repo_id, "--endpoint", hub.url, "--token", TOKEN, "--report", str(Path(tmp) / "report.json")]  # fmt: skip
            run = subprocess.run(cmd, capture_output=True, text=True)
            print(f"publish {repo_id}: exit {run.returncode}")
            if run.returncode:
                print((run.stdout + run.stderr)[-2000:])
                return run.returncode
        run = subprocess.run([sys.executable, "-c", LOAD], capture_output=True, text=True,
                             env=client_env(hub.url, Path(tmp) / "cache"))  # fmt: skip
        print("\n".join(line for line in (run.stdout + run.stderr).splitlines() if "Fetching" not in line))
        return run.returncode


if __name__ == "__main__":
    raise SystemExit(main())
