"""Every argument-error path of the CUDA ops, one call at a time with a line printed before each, so a crash
(instead of a Python exception) is pinned to the call that caused it. Run on a GPU, under cuda-gdb for a
native backtrace if it crashes:

    cuda-gdb -q -batch -ex run -ex bt --args python3 benchmarks/gpu_error_paths.py [--root build/ggml-attn-kernels]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--root",
        default=str(Path(__file__).resolve().parents[1] / "build" / "ggml-attn-kernels"),
        help="folder of variants",
    )
    args = ap.parse_args()
    import kernels

    op = kernels.get_local_kernel(Path(args.root))
    dev = "cuda"
    B, T, H, D = 2, 3, 4, 64
    q = torch.randn(B, T, H, D, device=dev)
    k, v = torch.randn_like(q), torch.randn_like(q)
    g, beta = torch.randn(B, T, H, device=dev), torch.rand(B, T, H, device=dev)
    state = torch.randn(B, H, D, D, device=dev)
    fq = torch.randn(1, 8, 1, 128, device=dev)
    fk = torch.randn(1, 2, 300, 128, device=dev, dtype=torch.float16)
    fv = torch.randn_like(fk)
    cases = {
        "gdn ok": lambda: op.gated_delta_net(q, k, v, g, beta, state),
        "gdn string-only message (g layout)": lambda: op.gated_delta_net(
            q, k, v, g.transpose(0, 1).contiguous().transpose(0, 1), beta, state
        ),
        "gdn int in message (head_dim 8)": lambda: op.gated_delta_net(
            q[..., :8].contiguous(),
            k[..., :8].contiguous(),
            v[..., :8].contiguous(),
            g,
            beta,
            state[..., :8, :8].contiguous(),
        ),
        "gdn sizes in message (state shape)": lambda: op.gated_delta_net(q, k, v, g, beta, state[:, :, :32]),
        "gdn dtype in message": lambda: op.gated_delta_net(q.half(), k, v, g, beta, state),
        "gdn cpu": lambda: op.gated_delta_net(q.cpu(), k.cpu(), v.cpu(), g.cpu(), beta.cpu(), state.cpu()),
        "fa ok": lambda: op.flash_attn(fq, fk, fv),
        "fa n_q": lambda: op.flash_attn(torch.randn(1, 8, 20, 128, device=dev), fk, fv),
        "fa head_dim": lambda: op.flash_attn(
            fq[..., :96].contiguous(), fk[..., :96].contiguous(), fv[..., :96].contiguous()
        ),
        "fa k dtype": lambda: op.flash_attn(fq, fk.float(), fv.float()),
        "fa nan scale": lambda: op.flash_attn(fq, fk, fv, None, float("nan")),
    }
    for name, call in cases.items():
        print(f"-> {name}", flush=True)
        try:
            call()
            torch.cuda.synchronize()
            print("   ok", flush=True)
        except Exception as exc:  # noqa: BLE001 - printing what each path raises is the point
            print(f"   {type(exc).__name__}: {str(exc).splitlines()[0][:160]}", flush=True)
    print("ERROR-PATHS-DONE", flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
