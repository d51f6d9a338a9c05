"""Where the chunked prefill path (vendor/patches/0003) beats the token-sequential kernels: this package's op (the
build under --root, loaded through kernels; f32 inputs, H = 32, S_v = 128), timed in three processes, one with
GGML_CUDA_GDN_CHUNKED=0 (token-sequential: the one-column kernel, or patch 0001's vector kernel where it applies),
one with =1 (chunked for every call it supports) and one with the variable unset (the op's own choice), over
B x T. Prints all three and the ratio; the op's threshold (gated_delta_net_chunk_min_tokens) is chosen from this
table, and the default column shows it picking the faster path. Asserts nothing.

    python3 benchmarks/gdn_chunk_threshold.py [--cases 1x64,1x128,...] [--root DIR]
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
CASES = [(b, t) for b in (1, 2, 4, 8, 32) for t in (16, 64, 128, 256, 512, 2048)]
MODES = {"0": "token-sequential", "1": "chunked", "": "default"}


def child(args) -> None:
    import kernels
    import torch

    sys.path.insert(0, str(HERE))
    from _timing import Timer
    from bench_gdn import eager_recurrence, make_inputs

    op = kernels.get_local_kernel(Path(args.root))
    timer = Timer()
    for B, T in parse(args.cases):
        x = make_inputs(B, T, seed=B * 100 + T)
        row = {"B": B, "T": T}
        args_ = tuple(x[n] for n in ("q", "k", "v", "g", "beta", "state_vk"))
        if B * T <= 4096:
            ro, rs = eager_recurrence(
                *(x[n].double() for n in ("q", "k", "v", "g", "beta", "state_kv")), dtype=torch.float64
            )
            o, s = op.gated_delta_net(*args_)
            s = s.transpose(-1, -2)
            row["err"] = max(float((o - ro).norm() / ro.norm()), float((s - rs).norm() / rs.norm()))
        fn = (lambda f, y: lambda: f(*y))(op.gated_delta_net, args_)
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
    ap.add_argument("--root", default=str(ROOT), help="the package whose build/ is loaded (default: this repository)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return 0
    rows: dict = {}
    for mode in MODES:
        argv = [sys.executable, __file__, "--child", "--root", args.root]
        argv += ["--cases", args.cases] if args.cases else []
        env = dict(os.environ)
        env.pop("GGML_CUDA_GDN_CHUNKED", None)
        if mode:
            env["GGML_CUDA_GDN_CHUNKED"] = mode
        out = subprocess.run(argv, env=env, capture_output=True, text=True)
        if out.returncode:
            print(f"{MODES[mode]} (GGML_CUDA_GDN_CHUNKED={mode or 'unset'}): failed\n{out.stderr[-3000:]}")
        for line in out.stdout.splitlines():
            if line.startswith("ROW "):
                r = json.loads(line[4:])
                rows.setdefault((r["B"], r["T"]), {})[mode] = r
    print(render(rows))
    return 0


def render(rows: dict) -> str:
    nan = float("nan")
    lines = [
        "| B | T | token-sequential µs | chunked µs | chunked ÷ sequential | default µs | rel err (seq / chunked) |",
        "|---|---|---|---|---|---|---|",
    ]
    for (B, T), m in sorted(rows.items()):
        s, c, d = m.get("0", {}), m.get("1", {}), m.get("", {})
        ratio = f"{c['us'] / s['us']:.2f}" if s.get("us") and c.get("us") else "–"
        err = f"{s.get('err', nan):.1e} / {c.get('err', nan):.1e}"
        lines.append(
            f"| {B} | {T} | {s.get('us', nan):.1f} | {c.get('us', nan):.1f} | {ratio} | {d.get('us', nan):.1f} | {err} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
