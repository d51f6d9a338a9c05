"""`ggml-vendor demo`: the whole pipeline on the embedded miniature upstream, offline, in a throwaway
workspace — sync, render, build what this machine can, verify, publish to a local Hub, load it back with
`kernels.get_kernel` in a fresh process — and one report of the run.

The demo is itself a stage (`plan(project, request, log)`, `execute(plan, log)`), and its execute is a
sequence of small tasks, each one stage's plan + execute (nox's `workflow.execute` over task functions):
every task reads what the earlier ones left in the run's `Context` and returns its detail line and data; the
first failure is recorded in the report and the tasks after it are skipped.

A project of several packages: one sync (the union), then the package tasks render → get_kernel for each
package in turn, each package's stages named "<stage> <package>". A package whose entry files the embedded miniature does not hold is left out of the
workspace and reported as one visibly skipped stage naming the missing files (the run stays green). A package
whose entries the miniature holds as closure-only stand-ins (files that say so, e.g. gguf-kernels' mmvq.cu) is
synced, rendered and its build planned; its compile, verify, publish and get_kernel stages are skipped, saying so.
The plan decides all of that (`Plan.stages` is the run's stage list, `--dry-run` prints it per package); execute
follows it. Policy stays with the stages: a host with nothing to build fails the build task with the build
stage's own one line (NothingToBuildError: every variant's reason and what to do).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit import __version__
from toolkit.core.config import Config
from toolkit.core.config import load as load_config
from toolkit.core.errors import VendorError
from toolkit.core.stage import Log, Verdict, quiet

DEMO_OWNER = "ggml-demo"
DEMO_REPO = f"{DEMO_OWNER}/ggml-attn-kernels"
DEMO_TOKEN = "hf_demo_local_only"
# What the workspace copies from the project: its configuration and templates, never vendor/ or build/.
COPIED = ("pyproject.toml", "variants", "templates")

OK, FAILED, SKIPPED = "ok", "failed", "skipped"
# What the miniature's closure-only stand-ins say in their first line: they carry a package's closure (names,
# includes, declarations) for sync, render and the build plan, but no kernels to compile.
STAND_IN_MARK = b"closure-only stand-in"


@dataclass
class Stage:
    """One task's outcome (mutable while the run fills it in)."""

    name: str
    status: str = SKIPPED
    seconds: float = 0.0
    detail: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "stage": self.name,
            "status": self.status,
            "seconds": round(self.seconds, 3),
            "detail": self.detail,
            "data": self.data,
        }


@dataclass
class DemoReport(Verdict):
    """What the run did: one Stage per task, in order. A protocol Report (exit 1 when a stage failed)."""

    workspace: str
    stages: list[Stage]
    kept: bool = True  # the workspace is still on disk

    def failure(self) -> VendorError | None:
        failed = next((s for s in self.stages if s.status == FAILED), None)
        if failed is None:
            return None
        return VendorError(
            f"demo stage '{failed.name}' failed: {failed.detail}", f"inspect the workspace {self.workspace}"
        )

    def lines(self) -> list[str]:
        return [f"{s.name}: {s.status} ({s.seconds:.1f}s) {s.detail}" for s in self.stages]

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "workspace": self.workspace,
            "tool_version": __version__,
            "stages": [s.to_json() for s in self.stages],
        }


@dataclass(frozen=True)
class Request:
    """`upstream`/`rev` replace the embedded miniature with a real ggml or llama.cpp (a local clone or URL);
    `engine`/`toolchain` are `build`'s options; `workspace` is kept, a temporary one only with `keep` (or
    when a stage failed)."""

    workspace: Path | None = None
    keep: bool = False
    jobs: int | None = None
    upstream: str | None = None
    rev: str | None = None
    engine: str = "auto"
    toolchain: str = "auto"


@dataclass(frozen=True)
class LeftOut:
    """A package the workspace leaves out: the embedded miniature lacks its entry files."""

    package: str
    missing: tuple[str, ...]

    def detail(self) -> str:
        return (
            f"skipped: its entry files {', '.join(self.missing)} are not in the embedded miniature upstream "
            "(run the demo with --upstream PATH to a ggml clone to include it)"
        )


@dataclass(frozen=True)
class Plan:
    """What the demo will run: the project whose configuration it copies, the packages the workspace keeps
    (each gets the package tasks, in order) and those it leaves out (one skipped stage each)."""

    source: Path  # the project whose configuration is copied
    request: Request
    packages: tuple[str, ...] = ()
    left_out: tuple[LeftOut, ...] = ()
    # packages kept on the miniature's closure-only stand-ins -> why only render and a planned build run (the
    # reason; the stages put "skipped: " before it)
    plan_only: Mapping[str, str] = field(default_factory=dict)

    @property
    def stages(self) -> tuple[str, ...]:
        """The run's stage names, in the order the report lists them."""
        names = [name for name, _ in SETUP] + [x.package for x in self.left_out] + [name for name, _ in SYNC]
        for package in self.packages or ("",):  # ("",): a configuration the setup will refuse
            names += [f"{name} {package}".rstrip() for name, _ in PACKAGE_TASKS]  # plan-only: the rest skipped
        return tuple(names)

    def lines(self) -> list[str]:
        where = self.request.workspace or "a temporary directory"
        upstream = self.request.upstream or "the embedded miniature upstream"
        tasks = " -> ".join(name for name, _ in PACKAGE_TASKS)
        planned = " -> ".join(name for name, _ in PLAN_ONLY_TASKS)
        out = [f"would run, in {where}, on {upstream}:"]
        out.append(f"  setup: copy {', '.join(COPIED)} from {self.source}")
        out.append(f"  sync: one pin for {', '.join(self.packages) or 'the project'}")
        for package in self.packages:
            why = self.plan_only.get(package)
            out.append(
                f"  {package}: {planned} (planned, not compiled); the rest skipped: {why}"
                if why
                else f"  {package}: {tasks}"
            )
        out += [f"  {x.package}: {x.detail()}" for x in self.left_out]
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "workspace": str(self.request.workspace or "a temporary directory"),
            "stages": list(self.stages),
            "packages": list(self.packages),
            "skipped": {x.package: x.detail() for x in self.left_out},
            "plan_only": dict(self.plan_only),
        }


@dataclass
class Context:
    """What the tasks share: each reads what the earlier ones left here."""

    plan: Plan
    workspace: Path
    endpoint: str = ""
    log: Log = quiet
    cfg: Config | None = None
    built: list[str] = field(default_factory=list)

    @property
    def config(self) -> Config:
        assert self.cfg is not None, "the setup task loads the workspace's config first"
        return self.cfg


def _source_project(start: Path | None) -> Path:
    """The project whose configuration the demo copies: --project, else the nearest one, else the tool's own
    repository (a source checkout installed with pip -e)."""
    from toolkit.core.config import find_root

    try:
        return find_root(start)
    except VendorError:
        here = Path(__file__).resolve().parents[1]
        if (here / "pyproject.toml").is_file() and (here / "templates").is_dir():
            return here
        raise


def make_workspace(
    source: Path, dest: Path, upstream: str | None = None, left_out: tuple[str, ...] | None = None
) -> Path:
    """A copy of the project's configuration pointing at the embedded miniature upstream (or `upstream`),
    without the packages `left_out` (None: those the miniature cannot serve, see `left_out`)."""
    from toolkit.core.config import set_value
    from toolkit.sync.embedded import EMBEDDED

    dest.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        src = source / name
        if src.is_dir():
            shutil.copytree(src, dest / name, dirs_exist_ok=True)
        elif src.is_file():
            shutil.copy2(src, dest / name)
    # Patches target the real upstream; the miniature is our own code and needs none.
    (dest / "vendor" / "patches").mkdir(parents=True, exist_ok=True)
    set_value(dest, "upstream", upstream or EMBEDDED)
    if left_out is None:
        left_out = tuple(x.package for x in packages_left_out(load_config(source), embedded=upstream is None))
    _packages_for_demo(dest, left_out)
    return dest


def demo_repo(package: str) -> str:
    """The local test Hub's repo of a package (DEMO_REPO for ggml-attn-kernels)."""
    return f"{DEMO_OWNER}/{package}"


def _miniature() -> Mapping[str, bytes]:
    from toolkit.sync.embedded import mini_files

    return mini_files()


def _entries_in(pkg: Any, have: Mapping[str, bytes]) -> list[tuple[Any, str | None]]:
    """Each entry file of the package with the alternative of it the miniature holds (None: none)."""
    return [
        (entry, next((alt for alt in entry.alternatives if alt in have), None))
        for op in pkg.ops
        for entries in op.entries.values()
        for entry in entries
    ]


def missing_in_miniature(pkg: Any, have: Mapping[str, bytes] | None = None) -> list[str]:
    """The package's entry files (no alternative present) that the embedded miniature does not hold."""
    return [str(entry) for entry, found in _entries_in(pkg, _miniature() if have is None else have) if found is None]


def packages_left_out(cfg: Config, *, embedded: bool, have: Mapping[str, bytes] | None = None) -> tuple[LeftOut, ...]:
    """The packages a workspace on the embedded miniature cannot serve (none on a real upstream)."""
    if not embedded:
        return ()
    have = _miniature() if have is None else have
    found = ((pkg.name, tuple(missing_in_miniature(pkg, have))) for pkg in cfg.packages)
    return tuple(LeftOut(name, missing) for name, missing in found if missing)


def stand_in_entries(pkg: Any, have: Mapping[str, bytes] | None = None) -> list[str]:
    """The package's entry files that the embedded miniature holds as closure-only stand-ins."""
    have = _miniature() if have is None else have
    found = (f for _, f in _entries_in(pkg, have) if f is not None)
    return list(dict.fromkeys(f for f in found if STAND_IN_MARK in have[f].split(b"\n", 1)[0]))


def _packages_for_demo(dest: Path, left_out: tuple[str, ...]) -> None:
    """Point each package at its demo Hub repo, and drop those left out."""
    import tomlkit

    from toolkit.core import fs
    from toolkit.core.config import TABLE, parse_toml

    cfg = load_config(dest)
    doc = parse_toml(dest / "pyproject.toml")
    tables = doc["tool"][TABLE].get("packages", {})
    for pkg in cfg.packages:
        if pkg.name in left_out:
            del tables[pkg.name]
        else:
            tables[pkg.name]["hub-repo"] = demo_repo(pkg.name)
    fs.atomic_write(dest / "pyproject.toml", tomlkit.dumps(doc).encode("utf-8"))


_LOAD_CHILD = r"""
import json, math, sys
import torch, kernels
repo, version = sys.argv[1], int(sys.argv[2])
mod = kernels.get_kernel(repo, version=version, trust_remote_code=True)
names = list(getattr(mod, "__all__", []))
ops = sorted(n for n in torch._C._dispatch_get_all_op_names() if n.startswith(mod.__name__ + "::"))
out = {"module": mod.__name__, "functions": names, "ops": ops, "file": getattr(mod, "__file__", ""),
       "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, "ran": []}


def rel(x, ref):
    return float((x.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


if torch.cuda.is_available():
    gen = torch.Generator(device="cuda").manual_seed(0)
    rnd = lambda *s: torch.randn(*s, device="cuda", generator=gen)
    if hasattr(mod, "gated_delta_net"):
        D = next((d for d in (128, 64, 32, 16) if mod.supports_gated_delta_net(d)), None)
        B, T, H = 2, 5, 4
        q = torch.nn.functional.normalize(rnd(B, T, H, D), dim=-1)
        k = torch.nn.functional.normalize(rnd(B, T, H, D), dim=-1)
        v, g = rnd(B, T, H, D), -0.5 * torch.rand(B, T, H, device="cuda", generator=gen)
        beta, s0 = torch.sigmoid(rnd(B, T, H)), 0.1 * rnd(B, H, D, D)
        o, s1 = mod.gated_delta_net(q, k, v, g, beta, s0.clone())
        # float64 reference: ggml's recurrence, [value][key] state, output scaled by 1/sqrt(D)
        s, ref = s0.double(), torch.empty(B, T, H, D, dtype=torch.float64, device="cuda")
        for t in range(T):
            qt, kt, vt = q[:, t].double(), k[:, t].double(), v[:, t].double()
            gt = g[:, t].double().exp()[..., None]
            kv = (s * kt[:, :, None, :]).sum(-1)
            delta = (vt - gt * kv) * beta[:, t].double()[..., None]
            s = gt[..., None] * s + delta[..., None] * kt[:, :, None, :]
            ref[:, t] = (s * qt[:, :, None, :]).sum(-1) / math.sqrt(D)
        err = max(rel(o, ref), rel(s1, s))
        out["ran"].append({"op": "gated_delta_net", "shape": [B, T, H, D], "rel_err": err, "ok": err < 2e-3})
    if hasattr(mod, "flash_attn"):
        D = next((d for d in (128, 64, 256) if mod.supports_flash_attn(1, d, d)), None)
        B, H, HKV, NQ, NKV = 1, 8, 2, 1, 300
        q, k, v = rnd(B, H, NQ, D), rnd(B, HKV, NKV, D).half(), rnd(B, HKV, NKV, D).half()
        o = mod.flash_attn(q, k, v)
        kk, vv = (t.double().repeat_interleave(H // HKV, dim=1) for t in (k, v))
        p = torch.softmax((q.double() @ kk.transpose(-1, -2)) / math.sqrt(D), dim=-1)
        ref = (p @ vv).transpose(1, 2)
        err = rel(o, ref)
        out["ran"].append({"op": "flash_attn", "shape": [B, H, HKV, NQ, NKV, D], "rel_err": err, "ok": err < 2e-2})
    torch.cuda.synchronize()
print("DEMO" + json.dumps(out))
"""


def load_with_get_kernel(endpoint: str, repo: str, version: int, cache: Path) -> dict[str, Any]:
    """kernels.get_kernel(repo, version=N, trust_remote_code=True) in a fresh process against `endpoint`."""
    from toolkit.testing.localhub import client_env

    env = client_env(endpoint, cache)
    proc = subprocess.run(
        [sys.executable, "-c", _LOAD_CHILD, repo, str(version)], env=env, capture_output=True, text=True, timeout=600
    )
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("DEMO")), None)
    if proc.returncode != 0 or line is None:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise VendorError(f"get_kernel failed in a fresh process: {tail}", "see the traceback by running it by hand")
    return json.loads(line[4:])


# --- the tasks: each one stage's plan + execute, returning (detail, data) ------------------------------------


def _setup(ctx: Context) -> tuple[str, dict[str, Any]]:
    upstream = ctx.plan.request.upstream
    make_workspace(ctx.plan.source, ctx.workspace, upstream, tuple(x.package for x in ctx.plan.left_out))
    cfg = ctx.cfg = load_config(ctx.workspace)
    source = ctx.plan.source
    detail = (
        f"copied {', '.join(COPIED)} from {source} into {ctx.workspace}; upstream = {upstream or 'embedded miniature'}"
    )
    if len(cfg.packages) > 1:
        detail += f"; packages: {', '.join(cfg.package_names())}"
    return detail, {"packages": list(cfg.package_names())}


def skipped_packages(ctx: Context) -> list[Stage]:
    """One deliberately skipped stage per package the plan left out of the workspace (none when the setup
    failed: the stages after it say so)."""
    if ctx.cfg is None:
        return []
    return [Stage(x.package, SKIPPED, detail=x.detail()) for x in ctx.plan.left_out]


def _sync(ctx: Context) -> tuple[str, dict[str, Any]]:
    from toolkit import sync
    from toolkit.sync.embedded import EMBEDDED, TAG

    upstream, rev = ctx.plan.request.upstream, ctx.plan.request.rev
    request = sync.Request(rev=rev or (TAG if upstream is None else "HEAD"), upstream=upstream or EMBEDDED)
    rep = sync.execute(sync.plan(ctx.config, request))
    assert rep.plan is not None  # execute always reports the tree plan it carried out
    lock = rep.plan.lock
    ctx.cfg = load_config(ctx.config.root)
    detail = f"{rep.status}: {len(lock.files)} files at {lock.commit[:12]} ({lock.layout} layout)"
    return detail, {"commit": lock.commit, "files": sorted(lock.files)}


def _render(ctx: Context) -> tuple[str, dict[str, Any]]:
    from toolkit import render

    files = [f.path for f in render.execute(render.plan(ctx.config)).plan.files]
    return f"{len(files)} files (build.toml validated by kernels' parser)", {"files": files}


def _build_failure(rep: Any) -> VendorError:
    f = rep.failed[0]
    last = (f.tail or "").strip().splitlines()[-1:]
    return VendorError(
        f"{f.name} failed at {f.failed_step or f.reason or 'an unnamed step'}" + (f": {last[0]}" if last else ""),
        f"full log: {f.log}" if f.log else "re-run `ggml-vendor build -C <workspace>` to see the error",
    )


def _build(ctx: Context) -> tuple[str, dict[str, Any]]:
    from toolkit import build

    req = ctx.plan.request
    request = build.Request(engine=req.engine, toolchain=req.toolchain, jobs=req.jobs, progress=False)
    # A host with nothing to build is the build stage's refusal (NothingToBuildError, its one line naming
    # every variant's reason): the task fails with it, so whatever execute returns built something or failed.
    rep = build.execute(build.plan(ctx.config, request))
    ctx.built = [r.name for r in rep.results if r.result in ("built", "up-to-date")]
    skipped = [r for r in rep.results if r.result == "skipped"]
    if rep.failed:
        raise _build_failure(rep)
    detail = (
        f"built {', '.join(ctx.built)} ({rep.stats.compiler_invocations} compiler runs); "
        f"{len(skipped)} other variants skipped here"
    )
    return detail, rep.to_json()


def _build_plan(ctx: Context) -> tuple[str, dict[str, Any]]:
    """A package on closure-only stand-ins: its build planned (pure), not compiled."""
    from toolkit import build

    req = ctx.plan.request
    planned = build.plan(ctx.config, build.Request(engine=req.engine, toolchain=req.toolchain, jobs=req.jobs))
    here = planned.plan.buildable()
    steps = len(planned.plan.steps_for(here))
    detail = (
        f"planned, not compiled: {len(here)} variant(s) buildable here ({steps} steps), "
        f"{len(planned.plan.variants) - len(here)} elsewhere; {ctx.plan.plan_only[ctx.config.name]}"
    )
    return detail, planned.to_json()


def _stand_in_reason(stand_ins: list[str]) -> str:
    return (
        f"the embedded miniature's {', '.join(stand_ins)} are closure-only stand-ins (run the demo "
        "with --upstream PATH to a ggml clone to build it)"
    )


def _verify(ctx: Context) -> tuple[str, dict[str, Any]]:
    from toolkit import verify

    # A host-toolchain build may exceed manylinux_2_28 (e.g. glibc 2.32+ symbols from a newer libstdc++):
    # reported as a warning here; publishing such a build to huggingface.co is still refused.
    request = verify.Request(tuple(ctx.built), verify.VerifyOptions(host_toolchain_ok=True))
    rep = verify.execute(verify.plan(ctx.config, request))
    if not rep.ok:
        f = rep.failures()[0]
        raise VendorError(
            f"{len(rep.failures())} check(s) failed; first: {f.variant}: {f.check}: {f.message}",
            f.remedy or "run ggml-vendor verify -C <workspace>",
        )
    n = sum(len(v.findings) for v in rep.variants)
    warns = [f"{f.check}: {f.message}" for v in rep.variants for f in v.findings if f.status == "warn"]
    detail = f"{len(rep.variants)} variant(s), {n} findings, none failing (smoke: get_local_kernel import)" + (
        f"; warnings: {'; '.join(warns)[:400]}" if warns else ""
    )
    return detail, rep.to_json()


def _publish(ctx: Context) -> tuple[str, dict[str, Any]]:
    from toolkit import publish

    request = publish.Request(tuple(ctx.built), endpoint=ctx.endpoint, token=DEMO_TOKEN)
    res = publish.execute(publish.plan(ctx.config, request, ctx.log), ctx.log)
    detail = (
        f"{res.target} branch v{ctx.config.version}: {len(res.commits)} commits, "
        f"{res.verified['files_checked']} files re-listed and matched"
    )
    return detail, res.to_json()


def _get_kernel(ctx: Context) -> tuple[str, dict[str, Any]]:
    cfg = ctx.config
    repo = demo_repo(cfg.name)
    info = load_with_get_kernel(ctx.endpoint, repo, cfg.version, cfg.root / "hf-cache")
    ran = "; ".join(f"{r['op']} on {info['device']}: max rel err {r['rel_err']:.1e} vs float64" for r in info["ran"])
    if any(not r["ok"] for r in info["ran"]):
        raise VendorError(f"the loaded kernel disagrees with the float64 reference: {ran}", "run the GPU tests")
    detail = (
        f"get_kernel({repo!r}, version={cfg.version}) -> {info['module']}: "
        f"{len(info['functions'])} functions, {len(info['ops'])} ops"
        + (f"; {ran}" if ran else "; no GPU here: not executed")
    )
    return detail, info


Task = Callable[[Context], tuple[str, dict[str, Any]]]
# The project's tasks (one sync for the whole family), then the tasks run once per package.
SETUP: tuple[tuple[str, Task], ...] = (("setup", _setup),)
SYNC: tuple[tuple[str, Task], ...] = (("sync", _sync),)
PACKAGE_TASKS: tuple[tuple[str, Task], ...] = (
    ("render", _render),
    ("build", _build),
    ("verify", _verify),
    ("publish", _publish),
    ("get_kernel", _get_kernel),
)
# A package on the miniature's closure-only stand-ins: rendered and planned; the rest is skipped, saying why.
PLAN_ONLY_TASKS: tuple[tuple[str, Task], ...] = (("render", _render), ("build", _build_plan))
TASKS = SETUP + SYNC + PACKAGE_TASKS
STAGES = tuple(name for name, _ in TASKS)


def _run_task(ctx: Context, st: Stage, task: Task) -> None:
    """One task into its Stage: a failure is recorded (the table shows it, not a traceback)."""
    ctx.log(f"{st.name} …")
    t0 = time.perf_counter()
    try:
        st.detail, st.data = task(ctx)
        st.status = OK
    except VendorError as exc:
        st.status, st.detail = FAILED, exc.one_line()
    except Exception as exc:  # a demo reports every failure in its table instead of a traceback
        st.status, st.detail = FAILED, f"{type(exc).__name__}: {exc}"
    st.seconds = time.perf_counter() - t0


def run_tasks(
    ctx: Context, tasks: tuple[tuple[str, Task], ...] = TASKS, stages: list[Stage] | None = None, suffix: str = ""
) -> list[Stage]:
    """Run `tasks` in order, appended to `stages` (each named with `suffix`); after the first failure in
    `stages` the rest are skipped, saying so."""
    stages = [] if stages is None else stages
    for name, task in tasks:
        st = Stage(name + suffix)
        stages.append(st)
        if any(s.status == FAILED for s in stages[:-1]):
            st.detail = "not run: an earlier stage failed"
        else:
            _run_task(ctx, st, task)
    return stages


def _run_all(ctx: Context) -> list[Stage]:
    """setup, the packages left out, sync, then the package tasks for each package of the workspace."""
    stages = run_tasks(ctx, SETUP)
    stages += skipped_packages(ctx)
    run_tasks(ctx, SYNC, stages)
    project = ctx.cfg
    for view in project.selected(()) if project is not None else (None,):
        ctx.cfg, ctx.built = view, []
        suffix = "" if view is None else f" {view.name}"
        why = ctx.plan.plan_only.get(view.name) if view is not None else None
        if why:
            run_tasks(ctx, PLAN_ONLY_TASKS, stages, suffix)
            skipped = [name for name, _ in PACKAGE_TASKS if name not in dict(PLAN_ONLY_TASKS)]
            stages += [Stage(n + suffix, SKIPPED, detail=f"skipped: {why}") for n in skipped]
        else:
            run_tasks(ctx, PACKAGE_TASKS, stages, suffix)
    return stages


def plan(project: Path | None, request: Request | None = None, log: Log = quiet) -> Plan:
    """The project to copy (--project, else the nearest, else the tool's own repository), the packages the
    workspace keeps and those it leaves out (on the embedded miniature: the packages whose entry files it
    lacks). Reads the project's configuration only."""
    request = request or Request()
    source = _source_project(project)
    try:
        cfg = load_config(source)
    except VendorError:
        return Plan(source, request)  # the setup task reports the broken configuration
    if request.upstream is not None:  # a real upstream serves every package
        return Plan(source, request, cfg.package_names())
    have = _miniature()  # read once: it decides both what is left out and what is only planned
    left_out = packages_left_out(cfg, embedded=True, have=have)
    dropped = {x.package for x in left_out}
    kept = tuple(n for n in cfg.package_names() if n not in dropped)
    stand_ins = {pkg.name: stand_in_entries(pkg, have) for pkg in cfg.packages if pkg.name in kept}
    plan_only = {name: _stand_in_reason(files) for name, files in stand_ins.items() if files}
    return Plan(source, request, kept, left_out, plan_only)


def execute(plan: Plan, log: Log = quiet) -> DemoReport:
    """The pipeline in a fresh workspace, task by task, with a local test Hub to publish to and load from."""
    from toolkit.testing.localhub import HubServer, HubState

    ws = plan.request.workspace or Path(tempfile.mkdtemp(prefix="ggml-vendor-demo-"))
    ctx = Context(plan, ws, log=log)
    with HubServer(HubState(tokens=(DEMO_TOKEN,))) as hub:
        ctx.endpoint = hub.url
        report = DemoReport(str(ws), _run_all(ctx))
    if plan.request.workspace is None and not plan.request.keep and report.ok:
        shutil.rmtree(ws, ignore_errors=True)
        report.kept = False
    return report


def run_demo(project: Path | None = None, *, say: Log | None = None, **options: Any) -> DemoReport:
    """plan + execute in one call (library use and tests): `options` are Request's fields."""
    return execute(plan(project, Request(**options)), say or quiet)
