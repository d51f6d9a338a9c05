"""The demo's tasks: each one stage's plan + execute on the workspace (nox's `workflow.execute` over task
functions), returning its detail line and data; every task reads what the earlier ones left in the run's
`Context`, and the first failure is recorded and the tasks after it skipped. Apart from the stage
(toolkit/demo/__init__.py), which plans the run and reports it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.core.config import Config
from toolkit.core.config import load as load_config
from toolkit.core.errors import VendorError
from toolkit.core.stage import Log, quiet
from toolkit.demo.load import load_with_get_kernel
from toolkit.demo.workspace import COPIED, DEMO_TOKEN, demo_repo, make_workspace

if TYPE_CHECKING:
    from toolkit.demo import Plan

OK, FAILED, SKIPPED = "ok", "failed", "skipped"


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


def run_all(ctx: Context) -> list[Stage]:
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
