"""Where a prompt's prefill spends its device time, by mode: one forward of a B=1 prompt through the
random-initialised Qwen3.5-4B-shaped model of bench_generate.py (8 layers: 6 gated-delta-rule, 2 full attention;
bf16, eager), the fla path against ours (our GDN layers and attention), each under torch.profiler after a warm-up
forward. Prints the wall time of the synchronised forward and each mode's kernels summed by name, the largest
first, so that the time-to-first-token gap of the prompt sweep can be read off kernel by kernel. Asserts nothing.

    python3 benchmarks/prefill_profile.py [--prompt 16384] [--modes fla,ours] [--top 14] [--kernel <repo root>]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _timing import kernel_totals  # noqa: E402
from bench_generate import GdnSwitch, build_model, load_kernel, prompt, register_attention, set_mode  # noqa: E402


def profile_forward(model, ids) -> tuple[float, dict[str, float]]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad():
        model(ids, use_cache=True)  # warm-up (fla's autotuning, allocator)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        model(ids, use_cache=True)
        torch.cuda.synchronize()
        wall_ms = 1e3 * (time.perf_counter() - t0)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            model(ids, use_cache=True)
            torch.cuda.synchronize()
    return wall_ms, kernel_totals(prof)


def main() -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompt", type=int, default=16384)
    ap.add_argument("--modes", default="fla,ours")
    ap.add_argument("--top", type=int, default=14)
    ap.add_argument("--kernel", type=Path, default=HERE.parent, help="folder holding build/<variant>/")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("prefill_profile: no CUDA device here; run it on a GPU machine", file=sys.stderr)
        return 2
    kernel = load_kernel(args.kernel)
    register_attention(kernel)
    model, family = build_model("qwen3.5-4b", torch.bfloat16)
    switch = GdnSwitch(family, kernel)
    ids = prompt(model, 1, args.prompt)
    for mode in args.modes.split(","):
        set_mode(model, switch, mode)
        wall, per = profile_forward(model, ids)
        top = {k: round(v, 1) for k, v in list(per.items())[: args.top]}
        row = {"mode": mode, "prompt": args.prompt, "wall_ms": round(wall, 2),
               "device_ms": round(sum(per.values()) / 1e3, 2), "top_us": top}  # fmt: skip
        print("PREFILL " + json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
