"""Per-call host time, stable-ABI build against per-torch build, side by side in one run (issue 30; needs an NVIDIA GPU).

Times two built variants of one package (`build/<package>/<per-torch variant>` and
`build/<package>/torch-stable-abi210-...`) on the calls the eager decode path makes:

- ggml-attn-kernels: `gated_delta_rule_` at B=1 T=1 (the layers' eager fast path, float32 in ggml's layout) and
  `gated_delta_net` (the op the issue quotes at ~9 us from Python);
- gguf-kernels (`--package gguf-kernels`): `mul_mat_vec` Q4_0 M=1 (the issue quotes ~18 us above device time).

The two builds register the same op namespace (`_<module>_<backend>_<uid>`: one package, one source identity), and
torch accepts one registration of a namespace per process, so each build is timed in its own child process. The
rounds alternate the builds (per-torch, stable, per-torch, ...), a fresh child each time, so that clock drift hits
both alike; each child warms up before it times.

Host time per call = wall time of N calls launched back to back with no synchronisation in between, divided by N
(the GPU is idle-fast at these shapes, so the host is the bound); device time is reported beside it from CUDA
events. Prints one row per op: per-torch us, stable us, and the ratio stable / per-torch (target: <= 1.0).

    python benchmarks/bench_stable_abi.py --per-torch build/ggml-attn-kernels/torch214-cxx11-cu130-x86_64-linux \\
        --stable build/ggml-attn-kernels/torch-stable-abi210-cu130-x86_64-linux [--package gguf-kernels] \\
        [--calls 2000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path


def _import(path: Path):
    """Import a built variant directory as a package (what kernels does after it picked the variant)."""
    import importlib.util

    init = path / "__init__.py"
    name = f"bench_{path.name.replace('-', '_').replace('.', '_')}"
    spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(path)])
    if spec is None or spec.loader is None:
        sys.exit(f"error: {path} holds no built variant (__init__.py missing); build it first")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _host_us(fn, calls: int) -> float:
    import torch

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / calls * 1e6


def _device_us(fn, calls: int) -> float:
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / calls * 1e3


def _gdn_calls(mod):
    import torch

    ops = mod._ops.ops
    d, h = 128, 16
    q = torch.randn(1, 1, h, d, device="cuda")
    k, v = torch.randn_like(q), torch.randn_like(q)
    g, beta = torch.rand(1, 1, h, device="cuda"), torch.rand(1, 1, h, device="cuda")
    state = torch.zeros(1, h, d, d, device="cuda")
    return {
        "gated_delta_rule_ B=1 T=1 (fast path)": lambda: ops.gated_delta_rule_(
            q, k, v, g, beta, state, state, False, torch.float32
        ),
        "gated_delta_net B=1 T=1": lambda: ops.gated_delta_net(q, k, v, g, beta, state),
    }


def _gguf_calls(mod):
    import torch

    ops = mod._ops.ops
    n, kdim, q4_0 = 4096, 4096, 2
    blocks = torch.randint(0, 255, (n, kdim // 32 * 18), dtype=torch.uint8, device="cuda")
    x = torch.randn(1, kdim, device="cuda")
    return {"mul_mat_vec Q4_0 4096x4096 M=1": lambda: ops.mul_mat_vec(blocks, x, q4_0, n)}


def child(build: Path, package: str, calls: int) -> int:
    """One round for one build: warm up, then print {op: [host us, device us]} as JSON."""
    mod = _import(build)
    make = _gdn_calls if package == "ggml-attn-kernels" else _gguf_calls
    out = {}
    for op, fn in make(mod).items():
        _host_us(fn, 50)  # first-call costs (lazy loading, allocator growth) stay out of the round
        out[op] = [_host_us(fn, calls), _device_us(fn, calls)]
    print("RESULT " + json.dumps(out))
    return 0


def _round(build: Path, package: str, calls: int) -> dict[str, list[float]]:
    argv = [sys.executable, __file__, "--child", str(build), "--package", package, "--calls", str(calls)]
    proc = subprocess.run(argv, capture_output=True, text=True)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        sys.exit(f"error: timing {build.name} failed (exit {proc.returncode}): {proc.stderr.strip()[-400:]}")
    return json.loads(line[len("RESULT ") :])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-torch", type=Path, help="build/<package>/<per-torch variant>")
    ap.add_argument("--stable", type=Path, help="build/<package>/torch-stable-abi<MM>-... of the same package")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)  # one round of one build, in its own process
    ap.add_argument("--package", choices=("ggml-attn-kernels", "gguf-kernels"), default="ggml-attn-kernels")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        sys.exit("error: no CUDA device: this benchmark times CUDA launches; run it on a machine with an NVIDIA GPU")
    if args.child:
        return child(args.child, args.package, args.calls)
    if args.per_torch is None or args.stable is None:
        ap.error("--per-torch and --stable are both required")
    builds = {"per-torch": args.per_torch, "stable": args.stable}
    for p in builds.values():
        if not (p / "__init__.py").is_file():
            sys.exit(f"error: {p} is not a built variant directory; run `ggml-vendor build --variant {p.name}`")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, {args.calls} calls x {args.rounds} rounds")
    rounds: dict[str, list[dict[str, list[float]]]] = {label: [] for label in builds}
    for _ in range(args.rounds):
        for label, build in builds.items():  # alternate the builds, a fresh process each
            rounds[label].append(_round(build, args.package, args.calls))
    print(f"{'op':42s} {'per-torch us':>12s} {'stable us':>10s} {'ratio':>6s} {'stable device us':>17s}")
    for op in rounds["per-torch"][0]:
        a = statistics.median(r[op][0] for r in rounds["per-torch"])
        b = statistics.median(r[op][0] for r in rounds["stable"])
        dev = statistics.median(r[op][1] for r in rounds["stable"])
        print(f"{op:42s} {a:12.2f} {b:10.2f} {b / a:6.3f} {dev:17.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
