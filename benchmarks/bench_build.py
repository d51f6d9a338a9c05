"""Build-matrix benchmark (issue 4): two torch versions of the host's CUDA variant, built with shared
torch-independent objects (ggml-vendor's plan) vs each variant from scratch; plus a no-op `build --all`.

Prints compiler invocations and wall time side by side, with ratios. Run:

    python3 benchmarks/bench_build.py                       # the miniature fixture package (fast)
    python3 benchmarks/bench_build.py --project .           # the real rendered project (needs sync + render)
    python3 benchmarks/bench_build.py --second-python /path/to/venv/bin/python   # a real second torch

Honesty note: a CUDA build of a second torch minor is not installable on every machine (here pip is capped
at torch 2.14.1). Without --second-python the second environment is *simulated*: this interpreter's torch
presented as the other minor (same headers, a distinct toolchain identity), so the binding really compiles a
second time. Invocation counts are exact; the wall time of that binding is representative, not measured
against real torch 2.13 headers. The output says which case ran.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from toolkit.build.envs import TorchEnv, detect_host, discover_envs  # noqa: E402
from toolkit.build.stage import execute, host_variant, prepare  # noqa: E402
from toolkit.core.config import load  # noqa: E402

FIXTURE = REPO / "tests" / "fixtures" / "build_kernel"


def _other_minor(minor: str) -> str:
    major, m = minor.split(".")
    return f"{major}.{int(m) - 1}"


def hosts(second_python: str | None):
    host = detect_host()
    base = next(e for e in host.envs if not e.managed)
    if second_python:
        env = next((e for e in discover_envs() if os.path.realpath(e.python) == os.path.realpath(second_python)), None)
        if env is None:  # a venv outside the managed dir: read it directly
            out = subprocess.run(
                [
                    second_python,
                    "-c",
                    "import importlib.util as u;print(u.find_spec('torch').submodule_search_locations[0])",
                ],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            from toolkit.build.envs import read_torch_version

            version, cuda, hip = read_torch_version(Path(out))
            env = TorchEnv(second_python, version, out, cuda=cuda, hip=hip, managed=True)
        simulated = False
    else:
        local = base.version.split("+", 1)[1] if "+" in base.version else ""
        env = replace(base, version=f"{_other_minor(base.torch_minor)}.0+{local}".rstrip("+"))
        simulated = True
    return replace(host, envs=(base, env)), base, env, simulated


def run(project: Path, host, names: tuple[str, ...], cache: Path, jobs: int):
    os.environ["GGML_VENDOR_BUILD_CACHE"] = str(cache)
    cfg = load(project)
    t0 = time.monotonic()
    prep = prepare(cfg, patterns=names, host=host)
    report = execute(prep, jobs=jobs, progress=False)
    wall = time.monotonic() - t0
    bad = [r for r in report.results if r.result not in ("built", "up-to-date")]
    if bad:
        raise SystemExit(f"bench: {bad[0].name} {bad[0].result}: {bad[0].reason}\n{bad[0].tail}")
    return report, wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--project", type=Path, default=None, help="project root (default: the test fixture copy)")
    ap.add_argument("--second-python", default=None, help="interpreter of a real second torch environment")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--json", type=Path, default=REPO / "benchmarks" / "out" / "bench_build.json")
    args = ap.parse_args()

    host, base, second, simulated = hosts(args.second_python)
    work = Path(tempfile.mkdtemp(prefix="bench-build-"))
    try:
        src = args.project.resolve() if args.project else FIXTURE
        project = work / "proj"
        shutil.copytree(src, project, ignore=shutil.ignore_patterns(".cache", "build", ".git", "benchmarks"))
        v1 = host_variant(host)
        v2 = replace(v1, torch=second.torch_minor)
        if second.compute != base.compute:
            raise SystemExit(f"bench: second torch is {second.compute}, the first {base.compute}: use the same CUDA")
        names = (v1.name, v2.name)
        print(f"project: {src}\nvariants: {', '.join(names)}")
        print(f"torch A: {base.version} ({base.python})")
        print(
            f"torch B: {second.version} ({second.python})"
            + (f"  [SIMULATED: torch A's install presented as {second.torch_minor}]" if simulated else "")
        )
        print(f"jobs: {args.jobs}, CPUs: {os.cpu_count()}\n")

        # 1. ggml-vendor: both variants in one build, shared objects, cold cache.
        shared, t_shared = run(project, host, names, work / "cache-shared", args.jobs)
        # 2. From scratch: each variant alone with its own cold cache (what building each variant whole does).
        scratch = []
        for name in names:
            rep, t = run(project, host, (name,), work / f"cache-scratch-{name}", args.jobs)
            scratch.append((rep, t))
        n_scratch = sum(r.stats.compiler_invocations for r, _ in scratch)
        t_scratch = sum(t for _, t in scratch)
        # 3. No-op: the shared build again (everything cached, outputs intact).
        noop, t_noop = run(project, host, names, work / "cache-shared", args.jobs)
        # 4. The CLI's own no-op `build --all` (a fresh process: start-up included), real host only.
        os.environ["GGML_VENDOR_BUILD_CACHE"] = str(work / "cache-shared")
        subprocess.run(
            [sys.executable, "-m", "toolkit.cli", "build", "-C", str(project), "--all", "--json"],
            capture_output=True,
            cwd=REPO,
        )  # warm: builds whatever --all adds for the real host
        # Best of 5 (a shared 2-core machine adds noise), plus the CPU time the process itself used.
        import resource

        t_cli, cpu_cli = float("inf"), float("inf")
        for _ in range(5):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.monotonic()
            cli = subprocess.run(
                [sys.executable, "-m", "toolkit.cli", "build", "-C", str(project), "--all", "--json"],
                capture_output=True,
                text=True,
                cwd=REPO,
            )
            t_cli = min(t_cli, time.monotonic() - t0)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu_cli = min(cpu_cli, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
        cli_doc = json.loads(cli.stdout) if cli.returncode == 0 else {"compiler_invocations": None}

        n_shared = shared.stats.compiler_invocations
        rows = [
            ("ggml-vendor (shared objects), cold", n_shared, t_shared, shared.stats.per_tool),
            (
                "each variant from scratch",
                n_scratch,
                t_scratch,
                {k: sum(r.stats.per_tool.get(k, 0) for r, _ in scratch) for k in ("nvcc", "c++")},
            ),
            ("no-op rebuild (in process)", noop.stats.compiler_invocations, t_noop, noop.stats.per_tool),
            ("no-op `build --all` (CLI, best of 5)", cli_doc["compiler_invocations"], t_cli, {}),
        ]
        print(f"{'scenario':40} {'invocations':>11} {'by tool':>22} {'wall s':>8} {'vs scratch':>10}")
        for label, n, t, per in rows:
            per_s = ", ".join(f"{k} {v}" for k, v in sorted(per.items())) or "-"
            print(f"{label:40} {n if n is not None else 'err':>11} {per_s:>22} {t:8.2f} {t / t_scratch:10.2f}x")
        print(
            f"\nshared/scratch: {n_shared}/{n_scratch} invocations, wall {t_shared / t_scratch:.2f}x "
            f"({t_scratch / t_shared:.2f}x faster). no-op CLI: {t_cli:.2f}s with "
            f"{cli_doc['compiler_invocations']} compiler invocations, {cpu_cli:.2f}s CPU (target < 2 s, 0). "
            f"Load average now: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs."
        )
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "project": str(src),
                    "variants": names,
                    "simulated_second_torch": simulated,
                    "torch": [base.version, second.version],
                    "jobs": args.jobs,
                    "cpus": os.cpu_count(),
                    "shared": {"invocations": n_shared, "seconds": t_shared, "per_tool": shared.stats.per_tool},
                    "scratch": {"invocations": n_scratch, "seconds": t_scratch},
                    "noop": {"invocations": noop.stats.compiler_invocations, "seconds": t_noop},
                    "noop_cli": {
                        "invocations": cli_doc["compiler_invocations"],
                        "seconds_best_of_5": t_cli,
                        "cpu_seconds": cpu_cli,
                    },
                    "loadavg": os.getloadavg()[0],
                },
                indent=2,
            )
        )
        print(f"wrote {args.json}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
