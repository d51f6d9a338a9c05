"""Where the chunked prefill path (vendor/patches/0003) beats the token-sequential kernels: ggml's launcher on the
patched tree, timed in two processes, one with GGML_CUDA_GDN_CHUNKED=0 (token-sequential: the one-column
kernel, or patch 0001's vector kernel where it applies) and one with =1 (chunked for every call it supports),
over B x T. Prints both and their ratio; the op's own threshold is chosen from this table. Asserts nothing.

    python3 benchmarks/gdn_chunk_threshold.py [--cases 1x64,1x128,...] [--build-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CASES = [(b, t) for b in (1, 8, 32) for t in (16, 64, 128, 256, 512, 2048)]


def child(args) -> None:
    import torch

    sys.path.insert(0, str(HERE))
    from _timing import Timer
    from bench_gdn import eager_recurrence, make_inputs, raw_impl
    from raw_ggml import loader

    raw = loader.RawGgml(loader.build(Path(args.vendor), Path(args.build_dir), quiet=True))
    impl = raw_impl("ggml patched", raw, "")
    timer = Timer()
    for B, T in parse(args.cases):
        x = make_inputs(B, T, seed=B * 100 + T)
        row = {"B": B, "T": T}
        if B * T <= 4096:
            ro, rs = eager_recurrence(
                *(x[n].double() for n in ("q", "k", "v", "g", "beta", "state_kv")), dtype=torch.float64
            )
            o, s = impl.result(x)
            row["err"] = max(float((o - ro).norm() / ro.norm()), float((s - rs).norm() / rs.norm()))
        fn = (lambda f, y: lambda: f(y))(impl.call, x)
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        host = timer.host_us(fn, n=5)
        st = timer.hidden_us(fn, samples=15, host=host)
        row["us"] = st.median if st.median is not None else timer.events_us(fn, samples=3).median
        print("ROW " + json.dumps(row), flush=True)
        del x
        torch.cuda.empty_cache()


def parse(text: str | None) -> list[tuple[int, int]]:
    if not text:
        return CASES
    return [tuple(int(v) for v in c.split("x")) for c in text.split(",")]  # type: ignore[misc]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default=None)
    ap.add_argument("--vendor", default=str(ROOT / "vendor" / "ggml"))
    ap.add_argument("--build-dir", default=str(HERE / "out" / "raw_ggml_build"))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return 0
    rows: dict = {}
    for mode in ("0", "1"):
        argv = [sys.executable, __file__, "--child", "--vendor", args.vendor, "--build-dir", args.build_dir]
        argv += ["--cases", args.cases] if args.cases else []
        out = subprocess.run(argv, env=dict(os.environ, GGML_CUDA_GDN_CHUNKED=mode), capture_output=True, text=True)
        if out.returncode:
            print(f"GGML_CUDA_GDN_CHUNKED={mode}: failed\n{out.stderr[-3000:]}")
        for line in out.stdout.splitlines():
            if line.startswith("ROW "):
                r = json.loads(line[4:])
                rows.setdefault((r["B"], r["T"]), {})[mode] = r
    print("| B | T | token-sequential µs | chunked µs | chunked ÷ sequential | rel err (seq / chunked) |")
    print("|---|---|---|---|---|---|")
    for (B, T), m in sorted(rows.items()):
        s, c = m.get("0", {}), m.get("1", {})
        ratio = f"{c['us'] / s['us']:.2f}" if s.get("us") and c.get("us") else "–"
        err = f"{s.get('err', float('nan')):.1e} / {c.get('err', float('nan')):.1e}"
        print(f"| {B} | {T} | {s.get('us', float('nan')):.1f} | {c.get('us', float('nan')):.1f} | {ratio} | {err} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
