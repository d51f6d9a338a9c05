"""Variants of our kernel patches side by side, to choose their parameters (run on a GPU, prints a table).

GDN: upstream's kernel (vendor/patches undone) against the patched vector path with 4, 8 or 16 state
columns per warp, and the launcher's own choice, over B in
{1, 2, 4, 8, 16, 32, 64} x T in {1, 2, 4, 8}; each checked against
a float64 recurrence. FA: the vec kernel with upstream's launch bounds against builds that ask for 3 or 4
resident blocks per SM (a register cap; parallel_blocks follows the occupancy, as in launch_fattn).

    python3 benchmarks/patch_sweep.py [--out DIR] [--gdn-only | --fa-only]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import bench_fa  # noqa: E402
import bench_gdn  # noqa: E402
from _timing import Timer, rel_err  # noqa: E402
from raw_ggml import loader  # noqa: E402

GDN_GRID = [(b, t) for b in (1, 2, 4, 8, 32, 64) for t in (1, 4, 8)]
FA_SHAPES = [(256, 16, 4), (128, 32, 8)]
FA_NKV = (512, 4096, 16384, 32768)
LB_RE = re.compile(r"__launch_bounds__\(ggml_cuda_fattn_vec_get_nthreads_device\(\), 1\)")


def fa_variant_tree(base: Path, out: Path, min_blocks: str) -> Path:
    """A copy of `base` whose vec kernel asks for `min_blocks` (a C++ expression of D) resident blocks."""
    tree = out / f"fa-lb-{re.sub(r'[^0-9a-z]+', '_', min_blocks)}" / "ggml"
    if tree.exists():
        shutil.rmtree(tree)
    shutil.copytree(base, tree)
    f = tree / "src" / "ggml-cuda" / "fattn-vec.cuh"
    text = f.read_text()
    if not LB_RE.search(text):
        raise SystemExit("fattn-vec.cuh has no upstream launch bounds to vary (already patched?)")
    f.write_text(LB_RE.sub(f"__launch_bounds__(ggml_cuda_fattn_vec_get_nthreads_device(), ({min_blocks}))", text))
    return tree


def gdn_args(x, B, T):
    q, v, b = x["q"], x["v"], x["beta"]
    H, D = bench_gdn.H, bench_gdn.D
    return (
        q.data_ptr(), x["k"].data_ptr(), v.data_ptr(), x["g"].data_ptr(), b.data_ptr(), x["state_vk"].data_ptr(),
        x["raw_out"].data_ptr(), x["raw_state"].data_ptr(), D, H, T, B,
        q.stride(2), q.stride(1), q.stride(0), v.stride(2), v.stride(1), v.stride(0),
        b.stride(2), b.stride(1), b.stride(0), H, 1,
    )  # fmt: skip


def sweep_gdn(libs: dict, timer: Timer, samples: int) -> list[dict]:
    dev = torch.cuda.current_device()
    stream = torch._C._cuda_getCurrentRawStream
    variants = [("unpatched", libs["unpatched"], None), ("patched", libs["patched"], None)]
    variants += [(f"cols={c}", libs["patched"], c) for c in (4, 8, 16)]
    rows = []
    for ci, (B, T) in enumerate(GDN_GRID):
        n_sets = bench_gdn.graph_sets(B, T, 60 << 20)
        sets = [bench_gdn.make_inputs(B, T, seed=7000 + 100 * ci + s) for s in range(n_sets)]
        x0 = sets[0]
        ref_out, ref_state = bench_gdn.eager_recurrence(
            *(x0[n].double() for n in ("q", "k", "v", "g", "beta", "state_kv")), dtype=torch.float64
        )
        for name, lib, cols in variants:

            def call(x, lib=lib, cols=cols):
                a = x.setdefault(("args", B, T), gdn_args(x, B, T))
                if cols is None:
                    rc = lib.lib.raw_gdn_launch(*a, 0, stream(dev))
                else:
                    rc = lib.lib.raw_gdn_launch_cols(*a, cols, stream(dev))
                if rc:
                    lib.check(rc)

            row = {"op": "gdn", "B": B, "T": T, "variant": name}
            try:
                x0["raw_out"].fill_(float("nan"))
                x0["raw_state"].fill_(float("nan"))
                call(x0)
                torch.cuda.synchronize()
                row["err_out"] = rel_err(x0["raw_out"], ref_out)
                row["err_state"] = rel_err(x0["raw_state"].transpose(-1, -2), ref_state)
                row["hidden"] = timer.hidden_us(lambda: call(x0), samples=samples).median
                row["graph"] = timer.graph_us([(lambda s: lambda: call(s))(s) for s in sets]).median
            except Exception as exc:
                torch.cuda.synchronize()
                row["error"] = str(exc).splitlines()[0][:160]
            rows.append(row)
        base = next(r for r in rows if r["B"] == B and r["T"] == T and r["variant"] == "unpatched")
        line = " ".join(
            f"{r['variant']} {r.get('hidden', float('nan')):.1f}/{r.get('graph', float('nan')):.1f}"
            + (f" err{max(r['err_out'], r['err_state']):.0e}" if "err_out" in r else f" ERR {r.get('error')}")
            for r in rows
            if r["B"] == B and r["T"] == T
        )
        print(f"[gdn] B={B} T={T} (hidden/graph µs; unpatched {base.get('hidden', 0):.1f}): {line}", flush=True)
        del sets
        torch.cuda.empty_cache()
    return rows


def sweep_fa(libs: dict, timer: Timer, samples: int) -> list[dict]:
    dev = torch.cuda.current_device()
    stream = torch._C._cuda_getCurrentRawStream
    nsm = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for D, H, H_KV in FA_SHAPES:
        bench_fa.D, bench_fa.H, bench_fa.H_KV = D, H, H_KV  # make_inputs / reference read the module's shape
        for ci, n_kv in enumerate(FA_NKV):
            kv_bytes = 2 * H_KV * n_kv * D * 2
            n_sets = max(2, min(64, math.ceil(3 * (60 << 20) / kv_bytes)))
            sets = [bench_fa.make_inputs(n_kv, seed=900 + 10 * ci + s) for s in range(n_sets)]
            ref = bench_fa.reference(sets[0])
            for name, lib in libs.items():
                if not name.startswith(("unpatched", "patched", "fa-")):
                    continue
                occ = lib.fa_occupancy(D)
                pb = bench_fa.parallel_blocks(occ, nsm, n_kv, head_dim=D, n_heads=H)
                tmp = torch.empty(pb * H * D, device="cuda")
                meta = torch.empty(pb * H * 2, device="cuda")

                def args(x, pb=pb, tmp=tmp, meta=meta):
                    q, k, v = x["q32"], x["k"], x["v"]
                    return (
                        D, q.data_ptr(), k.data_ptr(), v.data_ptr(), None, x["raw_out"].data_ptr(),
                        tmp.data_ptr(), meta.data_ptr(), pb, 1.0 / math.sqrt(D), 1, H, 1,
                        q.stride(2) * 4, q.stride(1) * 4, q.stride(0) * 4, n_kv, H_KV,
                        k.stride(2) * 2, k.stride(1) * 2, k.stride(0) * 2,
                        v.stride(2) * 2, v.stride(1) * 2, v.stride(0) * 2, 0, 0, 0, 0, 0, 0,
                    )  # fmt: skip

                def call(x, lib=lib, args=args):
                    rc = lib.lib.raw_fa_launch(*args(x), stream(dev))
                    if rc:
                        lib.check(rc)

                row = {"op": "fa", "D": D, "n_kv": n_kv, "variant": name, "occupancy": occ, "pb": pb}
                try:
                    sets[0]["raw_out"].fill_(float("nan"))
                    call(sets[0])
                    torch.cuda.synchronize()
                    row["err"] = rel_err(sets[0]["raw_out"], ref)
                    row["hidden"] = timer.hidden_us(lambda x=sets[0]: call(x), samples=samples).median
                    row["graph"] = timer.graph_us([(lambda s: lambda: call(s))(s) for s in sets]).median
                except Exception as exc:
                    torch.cuda.synchronize()
                    row["error"] = str(exc).splitlines()[0][:160]
                rows.append(row)
            line = " ".join(
                f"{r['variant']}(occ{r['occupancy']},pb{r['pb']}) {r.get('hidden', float('nan')):.1f}/"
                f"{r.get('graph', float('nan')):.1f}"
                + (f" err{r['err']:.0e}" if "err" in r else f" ERR {r.get('error')}")
                for r in rows
                if r["D"] == D and r["n_kv"] == n_kv
            )
            print(f"[fa] D={D} {H}/{H_KV} n_kv={n_kv} (hidden/graph µs): {line}", flush=True)
            del sets
            torch.cuda.empty_cache()
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(HERE / "out"))
    p.add_argument("--build-dir", default=str(HERE / "out" / "raw_ggml_build"))
    p.add_argument("--samples", type=int, default=20)
    p.add_argument("--gdn-only", action="store_true")
    p.add_argument("--fa-only", action="store_true")
    p.add_argument(
        "--fa-min-blocks",
        nargs="*",
        default=["D == 256 ? 3 : 4", "4"],
        help="C++ expressions of D for the vec kernel's min blocks per SM, one build each",
    )
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("patch_sweep: no CUDA device here", file=sys.stderr)
        return 2
    vendor, build = ROOT / "vendor" / "ggml", Path(args.build_dir)
    t0 = time.time()
    pristine, undone = loader.pristine_tree(vendor, ROOT / "vendor" / "patches", build)
    trees = {"unpatched": pristine, "patched": vendor}
    if not args.gdn_only:
        for mb in args.fa_min_blocks:
            trees[f"fa-lb({mb})"] = fa_variant_tree(pristine, build, mb)
    with ThreadPoolExecutor(len(trees)) as pool:
        built = dict(zip(trees, pool.map(lambda t: loader.build(t, build, quiet=False), trees.values()), strict=True))
    libs = {k: loader.RawGgml(v) for k, v in built.items()}
    print(f"[sweep] undone patches: {undone}; built {len(libs)} libraries in {time.time() - t0:.0f} s", flush=True)
    timer = Timer()
    rows = []
    if not args.fa_only:
        rows += sweep_gdn(libs, timer, args.samples)
    if not args.gdn_only:
        rows += sweep_fa(libs, timer, args.samples)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "patch_sweep.json").write_text(json.dumps(rows, indent=1))
    print(f"[sweep] done in {time.time() - t0:.0f} s; wrote {out / 'patch_sweep.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
