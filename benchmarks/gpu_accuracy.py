"""Accuracy table for docs/gpu-checks.md: the built ops (through kernels.get_local_kernel) against the float64
references of templates/reference.py (the ones the package's conformance cases in verify use), on fresh random inputs, outputs allocated from NaN-poisoned memory.
Prints markdown; asserts nothing (the pass/fail lives in tests/gpu/test_ops.py).

    python3 benchmarks/gpu_accuracy.py [--root build/ggml-attn-kernels]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.gpu import test_ops as t  # noqa: E402  (the input makers; the references come from templates/reference.py)


def per_call_us(fn, n=200) -> float:
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=str(ROOT / "build" / "ggml-attn-kernels"), help="folder of variants")
    args = ap.parse_args()
    import kernels

    op = kernels.get_local_kernel(Path(args.root))
    print(f"loaded {op.__name__} from {Path(op.__file__).parent}")
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}\n")

    print("### gated_delta_net vs float64 (state [value][key], GQA tiled)\n")
    print("| B | T | H_k | H | D | gates | rel err out | rel err state | NaN left | µs/call (Python loop) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    cases = list(t.GDN_CASES) + [(32, 1, 32, 32, 128, False), (1, 4, 16, 32, 128, False), (2, 64, 8, 16, 128, True)]
    for B, T, Hk, H, D, kda in cases:
        q, k, v, g, beta, state = t.gdn_inputs(torch, B, T, Hk, H, D, kda, seed=1234 + B + T + D)
        ref_out, ref_state = t.gdn_reference(torch, q, k, v, g, beta, state)
        t.poison(torch, (B, T, H, D), (B, H, D, D))
        out, final = op.gated_delta_net(q, k, v, g, beta, state)
        torch.cuda.synchronize()
        nan = bool(out.isnan().any() or final.isnan().any())
        us = per_call_us(lambda: op.gated_delta_net(q, k, v, g, beta, state)) if T <= 4 else float("nan")
        print(
            f"| {B} | {T} | {Hk} | {H} | {D} | {'KDA' if kda else 'scalar'} | {t.rel_err(out, ref_out):.1e} "
            f"| {t.rel_err(final, ref_state):.1e} | {'yes' if nan else 'no'} | "
            f"{'' if math.isnan(us) else f'{us:.1f}'} |"
        )

    print("\n### flash_attn vs float64 softmax (16 q heads over 4 kv heads, D=128, f16 K/V, n_q=1)\n")
    print("| n_kv | mask | K/V storage | rel err | NaN left |")
    print("|---|---|---|---|---|")
    B, H, Hkv, D = 2, 16, 4, 128
    for n_kv in (1, 100, 256, 1000, 4096):
        for masked in (False, True):
            q, k, v = t.fa_inputs(torch, B, H, Hkv, 1, n_kv, D, seed=n_kv + masked)
            mask = t.causal_like_mask(torch, B, 1, n_kv, seed=n_kv)[0] if masked else None
            ref = t.fa_reference(torch, q, k, v, mask, 1 / math.sqrt(D))
            cap = (n_kv + 255) // 256 * 256
            kc = torch.zeros(B, Hkv, cap, D, device="cuda", dtype=torch.float16)
            vc = torch.zeros_like(kc)
            kc[:, :, :n_kv], vc[:, :, :n_kv] = k, v
            storages = [("exact size" + (" (padded copy)" if cap != n_kv else ""), k, v)]
            if cap != n_kv:
                storages.append((f"slice of a {cap}-row cache (in place)", kc[:, :, :n_kv], vc[:, :, :n_kv]))
            for label, kk, vv in storages:
                t.poison(torch, (B, 1, H, D))
                out = op.flash_attn(q, kk, vv, mask)
                torch.cuda.synchronize()
                print(
                    f"| {n_kv} | {'yes' if masked else 'no'} | {label} | {t.rel_err(out, ref):.1e} | "
                    f"{'yes' if out.isnan().any() else 'no'} |"
                )

    print("\n### flash_attn, other shapes (random quarter of positions masked)\n")
    print("| B | H | H_kv | n_q | n_kv | D | K/V | rel err |")
    print("|---|---|---|---|---|---|---|---|")
    for B, H, Hkv, n_q, n_kv, D, dtype in t.FA_CASES:
        q, k, v = t.fa_inputs(torch, B, H, Hkv, n_q, n_kv, D, getattr(torch, dtype), seed=7 + n_kv)
        mask, _ = t.causal_like_mask(torch, B, n_q, n_kv, seed=n_q)
        out = op.flash_attn(q, k, v, mask)
        print(
            f"| {B} | {H} | {Hkv} | {n_q} | {n_kv} | {D} | {dtype} | "
            f"{t.rel_err(out, t.fa_reference(torch, q, k, v, mask, 1 / math.sqrt(D))):.1e} |"
        )


if __name__ == "__main__":
    main()
