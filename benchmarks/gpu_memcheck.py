"""The ops' edge cases under compute-sanitizer (memcheck): every path that could read past an allocation.

    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --error-exitcode 3 \
        python3 benchmarks/gpu_memcheck.py [--root build/ggml-attn-kernels]

With the caching allocator off, every tensor is its own cudaMalloc, so a read past a tensor's storage is a read
past an allocation and memcheck reports it. Covered: flash_attn with n_kv not a multiple of 256 from exactly
sized K/V (read in place: the kernel stops at n_kv, vendor/patches/0002), from a slice of a larger cache, n_kv = 1,
odd n_q (two query
columns per block), bf16, a broadcast mask, one query with GQA groups of Q heads per block (0004); gated_delta_net with GQA, KDA, in-place state and head dim 16; the
transformers layers' one-call op (its preparation kernel, csrc/cuda/gdn_prep.cu) on strided bf16/f16 views with
grouped heads, l2 norm and KDA gates. `--chunked` runs the same with vendor/patches/0003's chunked prefill path
switched on (GGML_CUDA_GDN_CHUNKED=1: every call of head dim 128 with more than one token), which covers a
partial last chunk, GQA, in-place state and the layers' path through it.
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--root",
        default=str(Path(__file__).resolve().parents[1] / "build" / "ggml-attn-kernels"),
        help="folder of variants",
    )
    ap.add_argument("--chunked", action="store_true", help="switch the chunked prefill path on first")
    ap.add_argument("--fa-only", action="store_true", help="flash_attn's cases only (no gated_delta_net)")
    args = ap.parse_args()
    if args.chunked:  # read by the op once per process, at its first gated_delta_net call
        os.environ["GGML_CUDA_GDN_CHUNKED"] = "1"
    import kernels

    op = kernels.get_local_kernel(Path(args.root))
    F = torch.nn.functional
    dev = "cuda"
    for n_kv, n_q, dtype in [
        (1, 1, torch.float16),
        (100, 3, torch.float16),
        (1000, 1, torch.bfloat16),
        (257, 2, torch.float16),
        (512, 19, torch.float16),
    ]:
        q = torch.randn(1, 8, n_q, 128, device=dev)
        k = torch.randn(1, 2, n_kv, 128, device=dev, dtype=dtype)
        v = torch.randn(1, 2, n_kv, 128, device=dev, dtype=dtype)
        mask = torch.zeros(1, 1, n_q, n_kv, device=dev)
        op.flash_attn(q, k, v, None)
        op.flash_attn(q, k, v, mask)
        cap = (n_kv + 255) // 256 * 256
        kc = torch.zeros(1, 2, cap, 128, device=dev, dtype=dtype)
        vc = torch.zeros_like(kc)
        op.flash_attn(q, kc[:, :, :n_kv], vc[:, :, :n_kv], mask)
    # One query with GQA, exactly sized K/V, several sequences, a mask: below and above the lengths from which the
    # op takes the grouped kernel (vendor/patches/0004: D=128 from 4096, D=256 from 16384, ratio divisible by 4).
    for B, H, Hkv, n_kv, D, dtype in [
        (2, 16, 2, 1, 64, torch.float16),
        (2, 16, 4, 100, 256, torch.bfloat16),
        (1, 8, 4, 1000, 128, torch.float16),
        (3, 32, 4, 257, 128, torch.bfloat16),
        (2, 12, 6, 3000, 256, torch.float16),
        (2, 32, 4, 4097, 128, torch.float16),
        (2, 16, 4, 16385, 256, torch.bfloat16),
        (1, 16, 4, 20000, 256, torch.float16),  # f16 K/V in the grouped kernel's K rows loaded ahead (0010)
    ]:
        q = torch.randn(B, H, 1, D, device=dev)
        k = torch.randn(B, Hkv, n_kv, D, device=dev, dtype=dtype)
        v = torch.randn(B, Hkv, n_kv, D, device=dev, dtype=dtype)
        op.flash_attn(q, k, v, None)
        op.flash_attn(q, k, v, torch.zeros(B, 1, 1, n_kv, device=dev))
    gdn_cases = (
        []
        if args.fa_only
        else [
            (2, 3, 2, 4, 16, False),
            (1, 5, 4, 8, 128, True),
            (3, 1, 3, 3, 64, False),
            (8, 2, 16, 32, 128, False),  # the vectorised decode path (vendor/patches)
            (3, 3, 32, 32, 128, True),
            (6, 2, 22, 22, 64, False),
            (1, 130, 2, 4, 128, False),  # with --chunked: the chunked prefill path, a partial last chunk
            (2, 256, 32, 32, 128, False),
        ]
    )
    for B, T, Hk, H, D, kda in gdn_cases:
        q = F.normalize(torch.randn(B, T, Hk, D, device=dev), dim=-1)
        k = F.normalize(torch.randn(B, T, Hk, D, device=dev), dim=-1)
        v = torch.randn(B, T, H, D, device=dev)
        g = F.logsigmoid(torch.randn(B, T, H, D, device=dev) if kda else torch.randn(B, T, H, device=dev))
        beta = torch.sigmoid(torch.randn(B, T, H, device=dev))
        state = torch.randn(B, H, D, D, device=dev)
        op.gated_delta_net(q, k, v, g, beta, state)
        op.gated_delta_net(q, k, v, g, beta, state, inplace=True)
        # The layers' path: q/k/v as views of one fused projection (transformers' split), half precision.
        half = torch.bfloat16 if kda else torch.float16
        mixed = torch.randn(B, T, (2 * Hk + H) * D, device=dev, dtype=half)
        qs, ks, vs = torch.split(mixed, [Hk * D, Hk * D, H * D], dim=-1)
        qs, ks, vs = qs.reshape(B, T, Hk, D), ks.reshape(B, T, Hk, D), vs.reshape(B, T, H, D)
        layer = op.layers.fused_recurrent_kda() if kda else op.layers.fused_recurrent_gated_delta_rule()
        st = state.transpose(-1, -2).contiguous().transpose(-1, -2)
        layer(
            qs,
            ks,
            vs,
            g.to(half),
            beta[..., None].expand(B, T, H, 2)[..., 0],
            initial_state=st,
            output_final_state=True,
            use_qk_l2norm_in_kernel=True,
        )
    torch.cuda.synchronize()
    print("MEMCHECK-SCRIPT-DONE", math.isfinite(1.0))


if __name__ == "__main__":
    main()
