"""The prefill grid, lean: transformers' `chunk_gated_delta_rule` call through our layer and through fla's chunked
kernel, side by side in one process, with the ratio ours / fla per (B, T). Same inputs as bench_gdn.py --prefill
(bench_gdn_prefill.prefill_inputs: bf16 q/k/v/beta, f32 g with strong decay on some heads, l2 norm in kernel,
final state out, 32 heads of 128), without its float64 reference and torch-chunk rows, so that the whole grid fits
a short GPU session. Timing: CUDA events around a synchronised call after an L2 flush, median of --reps. Also
prints ours against fla (rel. error of output and final state: fla runs in bf16) and whether two calls of ours
agree bit for bit. Asserts nothing. GGML_CUDA_GDN_CHUNKED=0/1 in the environment pins our op's path.

--f32 adds our layer on the same values in float32 (a float32 call: the chunked path's float32-accurate
three-product form, where the bf16 call runs single tf32 products, vendor/patches/0007), timed in the same process,
with its ratio to the bf16 call.

    python3 benchmarks/gdn_prefill_ratio.py [--cases 1x512,8x2048] [--no-fla] [--f32] [--reps 5] [--root DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _timing import Timer, rel_err  # noqa: E402
from bench_gdn_prefill import hf_call, layer_and_fla, prefill_inputs  # noqa: E402

GRID = "1x512,1x2048,1x8192,1x32768,8x512,8x2048,8x8192,8x32768"


def row_for(layer, fla, timer: Timer, B: int, T: int, reps: int, f32: bool = False) -> dict:
    x = prefill_inputs(B, T, seed=B * 1000 + T)
    row: dict = {"B": B, "T": T, "path": os.environ.get("GGML_CUDA_GDN_CHUNKED", "default")}
    with torch.no_grad():

        def ours():
            return hf_call(layer.forward, x)

        o, s = ours()
        o2, s2 = ours()
        row["ours_repeatable"] = bool(torch.equal(o, o2) and torch.equal(s, s2))
        row["ours_ms"] = round(timer.events_us(ours, samples=reps).median / 1000, 4)
        if f32:
            x32 = {name: t.float() for name, t in x.items()}

            def ours_f32():
                return hf_call(layer.forward, x32)

            o32, s32 = ours_f32()
            row["ours_f32_ms"] = round(timer.events_us(ours_f32, samples=reps).median / 1000, 4)
            row["f32/bf16"] = round(row["ours_f32_ms"] / row["ours_ms"], 3)
            row["err_o_bf16_vs_f32"] = float(f"{rel_err(o, o32.double()):.2e}")
            row["err_state_bf16_vs_f32"] = float(f"{rel_err(s, s32.double()):.2e}")
            del x32, o32, s32
        if fla is not None:

            def theirs():
                return hf_call(fla, x)

            fo, fs = theirs()
            row["fla_ms"] = round(timer.events_us(theirs, samples=reps).median / 1000, 4)
            row["ours/fla"] = round(row["ours_ms"] / row["fla_ms"], 3)
            row["err_o_vs_fla"] = float(f"{rel_err(o, fo.double()):.2e}")
            row["err_state_vs_fla"] = float(f"{rel_err(s, fs.double()):.2e}")
        row["nan"] = bool(o.isnan().any() or s.isnan().any())
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default=GRID, help=f"B x T list (default {GRID})")
    ap.add_argument("--no-fla", action="store_true", help="our layer only")
    ap.add_argument("--f32", action="store_true", help="also our layer on float32 inputs (float32-accurate path)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--root", default=str(HERE.parent), help="the package whose build/ is loaded")
    args = ap.parse_args()
    loaded = layer_and_fla("gdn_prefill_ratio", Path(args.root), not args.no_fla)
    if isinstance(loaded, int):
        return loaded
    (layer, fla), timer = loaded, Timer()
    for case in args.cases.split(","):
        B, T = (int(v) for v in case.split("x"))
        print("ROW " + json.dumps(row_for(layer, fla, timer, B, T, args.reps, args.f32)), flush=True)
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
