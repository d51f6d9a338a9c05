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

The run's tasks are in tasks.py, the workspace and what the miniature serves in workspace.py, the fresh
process that loads the published kernel in load.py.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from secrets import token_hex
from typing import Any

from toolkit import __version__
from toolkit.core.config import load as load_config
from toolkit.core.errors import Interrupted, VendorError
from toolkit.core.interrupts import no_interrupt
from toolkit.core.lock import read_lock
from toolkit.core.stage import Log, Verdict, quiet
from toolkit.demo import tasks
from toolkit.demo.tasks import FAILED, Context, Stage, run_all
from toolkit.demo.workspace import (
    COPIED,
    DEMO_TOKEN,
    LeftOut,
    miniature,
    packages_left_out,
    source_project,
    stand_in_entries,
    stand_in_reason,
)


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
    # The temporary workspace's path when no --workspace is given: named here, created by execute (as mkdtemp
    # would, private and new), so that a Ctrl-C's read-back knows where to look.
    scratch: Path = field(default_factory=lambda: Path(tempfile.gettempdir()) / f"ggml-vendor-demo-{token_hex(8)}")

    @property
    def workspace(self) -> Path:
        """Where the run happens: --workspace (kept), else the temporary `scratch`."""
        return self.request.workspace or self.scratch

    @property
    def temporary(self) -> bool:
        """The workspace is the demo's own, removed after a green run unless --keep (and on a Ctrl-C)."""
        return self.request.workspace is None and not self.request.keep

    @property
    def stages(self) -> tuple[str, ...]:
        """The run's stage names, in the order the report lists them."""
        names = (
            [name for name, _ in tasks.SETUP] + [x.package for x in self.left_out] + [name for name, _ in tasks.SYNC]
        )
        for package in self.packages or ("",):  # ("",): a configuration the setup will refuse
            names += [f"{name} {package}".rstrip() for name, _ in tasks.PACKAGE_TASKS]  # plan-only: the rest skipped
        return tuple(names)

    def lines(self) -> list[str]:
        where = self.request.workspace or "a temporary directory"
        upstream = self.request.upstream or "the embedded miniature upstream"
        steps = " -> ".join(name for name, _ in tasks.PACKAGE_TASKS)
        planned = " -> ".join(name for name, _ in tasks.PLAN_ONLY_TASKS)
        out = [f"would run, in {where}, on {upstream}:"]
        out.append(f"  setup: copy {', '.join(COPIED)} from {self.source}")
        out.append(f"  sync: one pin for {', '.join(self.packages) or 'the project'}")
        for package in self.packages:
            why = self.plan_only.get(package)
            out.append(
                f"  {package}: {planned} (planned, not compiled); the rest skipped: {why}"
                if why
                else f"  {package}: {steps}"
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


def plan(project: Path | None, request: Request | None = None, log: Log = quiet) -> Plan:
    """The project to copy (--project, else the nearest, else the tool's own repository), the packages the
    workspace keeps and those it leaves out (on the embedded miniature: the packages whose entry files it
    lacks). Reads the project's configuration only."""
    request = request or Request()
    source = source_project(project)
    try:
        cfg = load_config(source)
    except VendorError:
        return Plan(source, request)  # the setup task reports the broken configuration
    if request.upstream is not None:  # a real upstream serves every package
        return Plan(source, request, cfg.package_names())
    have = miniature()  # read once: it decides both what is left out and what is only planned
    left_out = packages_left_out(cfg, embedded=True, have=have)
    dropped = {x.package for x in left_out}
    kept = tuple(n for n in cfg.package_names() if n not in dropped)
    stand_ins = {pkg.name: stand_in_entries(pkg, have) for pkg in cfg.packages if pkg.name in kept}
    plan_only = {name: stand_in_reason(files) for name, files in stand_ins.items() if files}
    return Plan(source, request, kept, left_out, plan_only)


def execute(plan: Plan, log: Log = quiet) -> DemoReport:
    """The pipeline in a fresh workspace, task by task, with a local test Hub to publish to and load from. A
    Ctrl-C removes a temporary workspace (not one given with --workspace or --keep)."""
    from toolkit.testing.hub_state import HubState
    from toolkit.testing.localhub import HubServer

    ws = plan.workspace
    if plan.request.workspace is None:
        ws.mkdir(mode=0o700)  # new and private, as mkdtemp makes it: an existing path is refused
    ctx = Context(plan, ws, log=log)
    try:
        with HubServer(HubState(tokens=(DEMO_TOKEN,))) as hub:
            ctx.endpoint = hub.url
            report = DemoReport(str(ws), run_all(ctx))
    except KeyboardInterrupt:
        if plan.temporary:
            with no_interrupt():  # a second Ctrl-C does not leave it half removed
                shutil.rmtree(ws, ignore_errors=True)
        raise
    if plan.temporary and report.ok:
        shutil.rmtree(ws, ignore_errors=True)
        report.kept = False
    return report


def _holds(ws: Path) -> list[str]:
    """What the demo's workspace holds, read back: the copied configuration, vendor/'s pin, rendered sources."""
    held = ["the copied configuration"] if (ws / "pyproject.toml").is_file() else []
    lock = read_lock(ws / "vendor") if (ws / "vendor").is_dir() else None
    if lock is not None:
        held.append(f"vendor/ synced at {lock.commit[:12]}")
    build = ws / "build"
    rendered = sorted(d.name for d in build.iterdir() if (d / "src" / "build.toml").is_file()) if build.is_dir() else []
    if rendered:
        held.append(f"the rendered sources of {', '.join(rendered)}")
    return held


def interrupted(plan: Plan) -> Interrupted:
    """The Interrupted error (exit 130) for a Ctrl-C once the demo's plan is made, the report's printing
    included: what its workspace holds, or that it was removed, read back from disk. The demo writes into its
    workspace alone, never into the project it copies."""
    ws, untouched = plan.workspace, f"the project {plan.source} is not written by the demo"
    if not ws.exists():
        where = "temporary workspace" if plan.request.workspace is None else "workspace"
        return Interrupted(
            f"the demo's {where} {ws} is not on disk: it was removed (read back from disk); {untouched}",
            "nothing to undo; run the demo again",
        )
    held = _holds(ws)
    return Interrupted(
        f"the demo's workspace {ws} is kept, holding {', '.join(held) if held else 'nothing yet'} "
        f"(read back from disk); {untouched}",
        "inspect it, or remove it when done",
    )


def run_demo(project: Path | None = None, *, say: Log | None = None, **options: Any) -> DemoReport:
    """plan + execute in one call (library use and tests): `options` are Request's fields."""
    return execute(plan(project, Request(**options)), say or quiet)
