"""The demo's last task: `kernels.get_kernel` in a fresh process against the local Hub, and on a GPU each
loaded op checked against a float64 reference. Apart from the tasks because it is a child program of its own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from toolkit.core.errors import VendorError

_LOAD_CHILD = r"""
import json, math, sys
import torch, kernels
repo, version = sys.argv[1], int(sys.argv[2])
mod = kernels.get_kernel(repo, version=version, trust_remote_code=True)
names = list(getattr(mod, "__all__", []))
ops = sorted(n for n in torch._C._dispatch_get_all_op_names() if n.startswith(mod.__name__ + "::"))
out = {"module": mod.__name__, "functions": names, "ops": ops, "file": getattr(mod, "__file__", ""),
       "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, "ran": []}


def rel(x, ref):
    return float((x.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


if torch.cuda.is_available():
    gen = torch.Generator(device="cuda").manual_seed(0)
    rnd = lambda *s: torch.randn(*s, device="cuda", generator=gen)
    if hasattr(mod, "gated_delta_net"):
        D = next((d for d in (128, 64, 32, 16) if mod.supports_gated_delta_net(d)), None)
        B, T, H = 2, 5, 4
        q = torch.nn.functional.normalize(rnd(B, T, H, D), dim=-1)
        k = torch.nn.functional.normalize(rnd(B, T, H, D), dim=-1)
        v, g = rnd(B, T, H, D), -0.5 * torch.rand(B, T, H, device="cuda", generator=gen)
        beta, s0 = torch.sigmoid(rnd(B, T, H)), 0.1 * rnd(B, H, D, D)
        o, s1 = mod.gated_delta_net(q, k, v, g, beta, s0.clone())
        # float64 reference: ggml's recurrence, [value][key] state, output scaled by 1/sqrt(D)
        s, ref = s0.double(), torch.empty(B, T, H, D, dtype=torch.float64, device="cuda")
        for t in range(T):
            qt, kt, vt = q[:, t].double(), k[:, t].double(), v[:, t].double()
            gt = g[:, t].double().exp()[..., None]
            kv = (s * kt[:, :, None, :]).sum(-1)
            delta = (vt - gt * kv) * beta[:, t].double()[..., None]
            s = gt[..., None] * s + delta[..., None] * kt[:, :, None, :]
            ref[:, t] = (s * qt[:, :, None, :]).sum(-1) / math.sqrt(D)
        err = max(rel(o, ref), rel(s1, s))
        out["ran"].append({"op": "gated_delta_net", "shape": [B, T, H, D], "rel_err": err, "ok": err < 2e-3})
    if hasattr(mod, "flash_attn"):
        D = next((d for d in (128, 64, 256) if mod.supports_flash_attn(1, d, d)), None)
        B, H, HKV, NQ, NKV = 1, 8, 2, 1, 300
        q, k, v = rnd(B, H, NQ, D), rnd(B, HKV, NKV, D).half(), rnd(B, HKV, NKV, D).half()
        o = mod.flash_attn(q, k, v)
        kk, vv = (t.double().repeat_interleave(H // HKV, dim=1) for t in (k, v))
        p = torch.softmax((q.double() @ kk.transpose(-1, -2)) / math.sqrt(D), dim=-1)
        ref = (p @ vv).transpose(1, 2)
        err = rel(o, ref)
        out["ran"].append({"op": "flash_attn", "shape": [B, H, HKV, NQ, NKV, D], "rel_err": err, "ok": err < 2e-2})
    torch.cuda.synchronize()
print("DEMO" + json.dumps(out))
"""


def load_with_get_kernel(endpoint: str, repo: str, version: int, cache: Path) -> dict[str, Any]:
    """kernels.get_kernel(repo, version=N, trust_remote_code=True) in a fresh process against `endpoint`."""
    from toolkit.testing.localhub import client_env

    env = client_env(endpoint, cache)
    proc = subprocess.run(
        [sys.executable, "-c", _LOAD_CHILD, repo, str(version)], env=env, capture_output=True, text=True, timeout=600
    )
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("DEMO")), None)
    if proc.returncode != 0 or line is None:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise VendorError(f"get_kernel failed in a fresh process: {tail}", "see the traceback by running it by hand")
    loaded: dict[str, Any] = json.loads(line[4:])  # the child prints one JSON object (_LOAD_CHILD's `out`)
    return loaded
