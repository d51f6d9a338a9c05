"""Build benchmark (issues 4 and 8), in one run, side by side with ratios:

1. provisioning from PyPI — the pinned zig, the CUDA 13.0 toolkit (`cuda-toolkit[nvcc,cccl,cudart]`) and
   torch 2.13.0 (cu130, build-only) — into an empty cache (first) and again (cached, must be ~0 s);
2. N variants (torch 2.13 and 2.14 for CUDA 13.0 on this host, real torch builds, the hermetic zig
   toolchain) built cold with shared torch-independent objects vs each variant from scratch;
3. the no-op `ggml-vendor build --all` in a fresh process (goal: < 2 s and 0 compiler invocations).

    python3 benchmarks/bench_build.py                  # the miniature fixture package (fast builds)
    python3 benchmarks/bench_build.py --project .      # the real rendered project (needs sync + render)
    python3 benchmarks/bench_build.py --reuse          # provision into the user cache (first run downloads)

Needs pip access to PyPI (about 0.9 GB downloaded per fresh provisioning), a g++ (libstdc++ headers) and
this interpreter's CUDA torch (the torch 2.14 variant). Writes benchmarks/out/bench_build.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

FIXTURE = REPO / "tests" / "fixtures" / "build_kernel"
TORCH_B = ("2.13", "cu130", "2.13.0")  # the second torch, from PyPI
TOOLKIT = ("cuda", "cuda-toolkit[nvcc,cccl,cudart]", "13.0.3")


def provision_all() -> dict[str, float]:
    """Seconds per item (each item checked and renamed into place; an existing one is reused)."""
    from toolkit.build.provision import provision, toolkit_install, torch_install
    from toolkit.build.torchtree import default_envs_dir
    from toolkit.build.zig import zig_install

    items = {
        "zig 0.14.1": zig_install(),
        f"cuda-toolkit {TOOLKIT[2]}": toolkit_install(TOOLKIT[0], TOOLKIT[1], TOOLKIT[2], "pypi"),
        f"torch {TORCH_B[2]} ({TORCH_B[1]})": torch_install(*TORCH_B[:2], TORCH_B[2], "pypi", default_envs_dir()),
    }
    out = {}
    for name, item in items.items():
        t0 = time.monotonic()
        provision(item, say=lambda m: print(f"  {m}", flush=True))
        out[name] = time.monotonic() - t0
    return out


def build(project: Path, names: tuple[str, ...], cache: Path, jobs: int, host):
    from toolkit.build.stage import Request, execute, plan
    from toolkit.core.config import load

    os.environ["GGML_VENDOR_BUILD_CACHE"] = str(cache)
    t0 = time.monotonic()
    planned = plan(load(project), Request(patterns=names, host=host, toolchain="zig", jobs=jobs, progress=False))
    rep = execute(planned)
    wall = time.monotonic() - t0
    bad = [r for r in rep.results if r.result not in ("built", "up-to-date")]
    if bad:
        raise SystemExit(f"bench: {bad[0].name} {bad[0].result}: {bad[0].reason}\n{bad[0].tail}")
    return rep, wall


def noop_cli(project: Path, runs: int = 5) -> tuple[float, float, int | None]:
    """Best wall and CPU seconds of `build --all` (fresh process each time) and its compiler invocations."""
    best_wall, best_cpu, n = float("inf"), float("inf"), None
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        cli = subprocess.run(
            [sys.executable, "-m", "toolkit.cli", "build", "-C", str(project), "--all", "--toolchain", "zig", "--json"],
            capture_output=True,
            text=True,
            cwd=REPO,
        )
        best_wall = min(best_wall, time.monotonic() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        best_cpu = min(best_cpu, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
        if cli.returncode != 0:
            raise SystemExit(f"bench: no-op build --all failed: {cli.stderr[-600:]}")
        n = json.loads(cli.stdout)["compiler_invocations"]
    return best_wall, best_cpu, n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--project", type=Path, default=None, help="project root (default: the test fixture copy)")
    ap.add_argument("--reuse", action="store_true", help="provision into the user cache instead of a fresh one")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--json", type=Path, default=REPO / "benchmarks" / "out" / "bench_build.json")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-build-"))
    if not args.reuse:
        os.environ["GGML_VENDOR_TOOLCHAINS"] = str(work / "toolchains")
        os.environ["GGML_VENDOR_ENVS"] = str(work / "envs")
    try:
        print("1. provisioning (first):", flush=True)
        first = provision_all()
        cached = provision_all()
        from toolkit.build.envs import detect_host

        host = detect_host()
        src = args.project.resolve() if args.project else FIXTURE
        project = work / "proj"
        shutil.copytree(src, project, ignore=shutil.ignore_patterns(".cache", "build", ".git", "benchmarks"))
        names = (f"torch213-cxx11-cu130-{host.cpu}-linux", f"torch214-cxx11-cu130-{host.cpu}-linux")
        envs = {e.torch_minor: e.version for e in host.envs if e.compute == "cu130"}
        tks = [f"{t.version} at {t.root}" for t in host.toolkits]
        print(f"\nproject: {src}\nvariants: {', '.join(names)}\ntorch: {envs}\ntoolkits: {tks}")
        print(f"jobs: {args.jobs}, CPUs: {os.cpu_count()}\n2. builds (zig toolchain) ...", flush=True)

        shared, t_shared = build(project, names, work / "cache-shared", args.jobs, host)
        scratch = [build(project, (n,), work / f"cache-scratch-{n}", args.jobs, host) for n in names]
        n_shared = shared.stats.compiler_invocations
        n_scratch = sum(r.stats.compiler_invocations for r, _ in scratch)
        t_scratch = sum(t for _, t in scratch)
        os.environ["GGML_VENDOR_BUILD_CACHE"] = str(work / "cache-shared")
        print("3. no-op build --all (CLI, best of 5) ...", flush=True)
        t_cli, cpu_cli, n_cli = noop_cli(project)

        print(f"\n{'provisioning':34} {'first s':>8} {'cached ms':>10} {'first/cached':>13}")
        for k in first:
            print(f"{k:34} {first[k]:8.1f} {cached[k] * 1e3:10.2f} {first[k] / max(cached[k], 1e-6):12.0f}x")
        tf, tc = sum(first.values()), sum(cached.values())
        print(f"{'all':34} {tf:8.1f} {tc * 1e3:10.2f} {tf / max(tc, 1e-6):12.0f}x\n")
        print(f"{'build scenario':40} {'invocations':>11} {'by tool':>20} {'wall s':>8} {'vs scratch':>10}")
        per_scratch = {k: sum(r.stats.per_tool.get(k, 0) for r, _ in scratch) for k in ("nvcc", "c++")}
        for label, n, t, per in (
            (f"{len(names)} variants, shared objects, cold", n_shared, t_shared, shared.stats.per_tool),
            (f"{len(names)} variants, each from scratch", n_scratch, t_scratch, per_scratch),
            ("no-op `build --all` (CLI, best of 5)", n_cli, t_cli, {}),
        ):
            per_s = ", ".join(f"{k} {v}" for k, v in sorted(per.items())) or "-"
            print(f"{label:40} {n:>11} {per_s:>20} {t:8.2f} {t / t_scratch:9.2f}x")
        print(
            f"\nshared vs scratch: {n_shared}/{n_scratch} compiler invocations, {t_scratch / t_shared:.2f}x faster. "
            f"No-op build --all: {t_cli:.2f} s wall, {cpu_cli:.2f} s CPU, {n_cli} compiler invocations "
            f"(goal < 2 s, 0). Load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs."
        )
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "project": "fixture" if args.project is None else "project",
                    "variants": names,
                    "torch": envs,
                    "provision_first_s": first,
                    "provision_cached_s": cached,
                    "shared": {"invocations": n_shared, "seconds": t_shared, "per_tool": shared.stats.per_tool},
                    "scratch": {"invocations": n_scratch, "seconds": t_scratch, "per_tool": per_scratch},
                    "noop_cli": {"invocations": n_cli, "seconds_best_of_5": t_cli, "cpu_seconds": cpu_cli},
                    "jobs": args.jobs,
                    "cpus": os.cpu_count(),
                    "loadavg": os.getloadavg()[0],
                },
                indent=2,
            )
        )
        print(f"wrote {args.json.relative_to(REPO) if args.json.is_relative_to(REPO) else args.json}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
