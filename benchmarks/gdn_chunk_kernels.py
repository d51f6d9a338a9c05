"""Where the prefill call's device time goes, kernel by kernel: transformers' `chunk_gated_delta_rule` call through
our layer on bf16 inputs (the chunked path's single-tf32 form, vendor/patches/0007), on the same values in float32
(its float32-accurate form) and through fla's chunked kernel, each under torch.profiler (CUDA activity only),
device microseconds per call summed by kernel name. Same inputs as gdn_prefill_ratio.py / bench_gdn.py --prefill
(bench_gdn_prefill.prefill_inputs: 32 heads of 128, l2 norm in kernel, final state out); "ours bf16, model layout"
is the bf16 call with v handed over as Qwen3.5 hands it (a token-major view of its causal conv's output, which the
preparation's tiled kernel reads) instead of contiguous. Asserts nothing.

Run it under Nsight Compute for stall reasons and occupancy of the chunk kernels, e.g.
    ncu --section SpeedOfLight --section Occupancy --section WarpStateStats -k regex:gated_delta_net_chunk \\
        python3 benchmarks/gdn_chunk_kernels.py --cases 1x8192 --calls 1 --no-fla --no-profile

    python3 benchmarks/gdn_chunk_kernels.py [--cases 1x8192,8x8192] [--calls 5] [--no-fla] [--root DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _timing import kernel_totals  # noqa: E402
from bench_gdn_prefill import hf_call, layer_and_fla, prefill_inputs  # noqa: E402


def kernel_us(fn, calls: int) -> dict[str, float]:
    """Device µs per call of every kernel `fn` launches (summed over launches of the same name)."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    return kernel_totals(prof, calls)


def model_layout(x: dict) -> dict:
    """v as a view of a [batch, channels, tokens] buffer transposed (token stride 1, a row's elements T apart), the
    layout Qwen3.5's causal conv leaves it in; q/k stay contiguous (the model's repeat_interleave copies)."""
    B, T, H, D = x["v"].shape
    conv = x["v"].flatten(2).transpose(1, 2).contiguous()  # [B, H*D, T]
    return {**x, "v": conv.transpose(1, 2).reshape(B, T, H, D)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default="1x8192,8x8192", help="B x T list")
    ap.add_argument("--calls", type=int, default=5, help="calls per profile")
    ap.add_argument("--no-fla", action="store_true")
    ap.add_argument("--no-profile", action="store_true", help="just make the calls (for an outside profiler)")
    ap.add_argument("--root", default=str(HERE.parent), help="the package whose build/ is loaded")
    args = ap.parse_args()
    loaded = layer_and_fla("gdn_chunk_kernels", Path(args.root), not args.no_fla)
    if isinstance(loaded, int):
        return loaded
    layer, fla = loaded
    for case in args.cases.split(","):
        B, T = (int(v) for v in case.split("x"))
        x = prefill_inputs(B, T, seed=B * 1000 + T)
        x32 = {name: t.float() for name, t in x.items()}
        calls = {"ours bf16 (tf32)": lambda x=x: hf_call(layer.forward, x),
                 "ours bf16, model layout": lambda x=model_layout(x): hf_call(layer.forward, x),
                 "ours f32 (3xtf32)": lambda x=x32: hf_call(layer.forward, x)}  # fmt: skip
        if fla is not None:
            calls["fla chunk"] = lambda x=x, fla=fla: hf_call(fla, x)
        for name, fn in calls.items():
            if args.no_profile:
                for _ in range(args.calls):
                    fn()
                torch.cuda.synchronize()
                continue
            per = kernel_us(fn, args.calls)
            row = {"B": B, "T": T, "call": name, "total_us": round(sum(per.values()), 1),
                   "kernels_us": {k: round(v, 1) for k, v in per.items()}}  # fmt: skip
            print("KERNELS " + json.dumps(row), flush=True)
        del x, x32, calls
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
