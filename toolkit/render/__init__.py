"""The render stage: vendor/ + templates/<name>/ -> build/<name>/src/ (build.toml, torch-ext/, csrc/): generated
code, never tracked, that build, the Nix build and publish read from there.

It follows the stage protocol (toolkit.core.stage):
    plan(config, request, log) -> Plan     every generated file's bytes, validated, and what differs from the
                                           tree; reads only (stage.plan, stage.check). With `check`, a second
                                           render from scratch, compared byte for byte with the first
    execute(plan, log) -> Report           write what is stale or missing, delete orphans (stage.write); with
                                           `Request(check=True)` write nothing and fail (exit 6) when the two
                                           renders differ (generated files must be reproducible)
The work is in stage.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit.core.config import Config
from toolkit.core.errors import Interrupted, RenderError
from toolkit.core.stage import Log, Verdict, quiet
from toolkit.render.stage import FileChange, RenderPlan, check, read_back, unreproducible, write
from toolkit.render.stage import plan as _plan

__all__ = ["Request", "Plan", "Report", "plan", "check", "execute"]


@dataclass(frozen=True)
class Request:
    """The configuration and vendor/UPSTREAM decide what is rendered; `check` only compares (render --check)."""

    check: bool = False


@dataclass(frozen=True)
class Plan:
    """The rendered files of one package and how its source tree differs from them (`drift`; empty: up to date),
    or under `check` the files two renders disagree on. Paths are shown relative to the project root (`prefix`:
    the package's source tree, build/<name>/src)."""

    rendered: RenderPlan
    drift: tuple[FileChange, ...]
    request: Request = Request()
    package: str = ""
    prefix: str = ""
    templates: str = ""  # the package's templates directory, relative to the project root

    # The rendered plan's own interface (stage.RenderPlan), for callers that check or write it directly.
    @property
    def files(self) -> tuple[Any, ...]:
        return self.rendered.files

    @property
    def root(self) -> Path:
        return self.rendered.root

    @property
    def orphans(self) -> tuple[str, ...]:
        return self.rendered.orphans

    def by_path(self) -> dict[str, Any]:
        return self.rendered.by_path()

    def shown(self, path: str) -> str:
        return f"{self.prefix}/{path}" if self.prefix else path

    def changes_json(self, changes: tuple[FileChange, ...]) -> list[dict[str, str]]:
        return [{"path": self.shown(d.path), "kind": d.kind} for d in changes]

    def lines(self) -> list[str]:
        drift = [f"{d.kind:8} {self.shown(d.path)}" for d in self.drift]
        if self.request.check:
            return drift or [f"{len(self.files)} generated files of {self.package} render the same bytes twice"]
        return drift or [f"{len(self.files)} generated files of {self.package} are up to date"]

    def to_json(self) -> dict[str, Any]:
        files = [self.shown(f.path) for f in self.files]
        return {"ok": not self.drift, "files": files, "drift": self.changes_json(self.drift)}


@dataclass(frozen=True)
class Report(Verdict):
    """What execute changed ("stale", "missing": written; "orphan": removed), or under `check` what differs."""

    plan: Plan
    changed: tuple[FileChange, ...]
    checked: bool = False

    def failure(self) -> RenderError | None:
        if not (self.checked and self.changed):
            return None
        names = ", ".join(f"{self.plan.shown(d.path)} ({d.kind})" for d in self.changed)
        return RenderError(
            f"generated files are not reproducible (two renders differ): {names}",
            "make the template's output depend only on its inputs (no sets, clocks or addresses)",
        )

    def lines(self) -> list[str]:
        if self.checked:
            return self.plan.lines()
        verbs = [f"{'removed' if d.kind == 'orphan' else 'wrote':8} {self.plan.shown(d.path)}" for d in self.changed]
        return [*verbs, f"{len(self.plan.files)} generated files of {self.plan.package}, {len(self.changed)} changed"]

    def to_json(self) -> dict[str, Any]:
        if self.checked:
            return self.plan.to_json()
        files = [self.plan.shown(f.path) for f in self.plan.files]
        return {"ok": True, "files": files, "changed": self.plan.changes_json(self.changed)}


def plan(config: Config, request: Request | None = None, log: Log = quiet) -> Plan:
    request = request or Request()
    rendered = _plan(config)
    log(f"rendered {len(rendered.files)} files from {config.templates_dir}")
    drift = unreproducible(config, rendered) if request.check else check(rendered)
    prefix = config.package_root.relative_to(config.root).as_posix()
    return Plan(rendered, tuple(drift), request, config.name, prefix, config.package.templates)


def execute(plan: Plan, log: Log = quiet) -> Report:
    if plan.request.check:
        return Report(plan, plan.drift, checked=True)
    changed = tuple(write(plan.rendered))
    for d in changed:
        log(f"{d.kind}: {d.path}")
    return Report(plan, changed)


def interrupted(plan: Plan) -> Interrupted:
    """The Interrupted error (exit 130) for a Ctrl-C after `plan` was made: which generated files are as
    rendered now, read back from disk (render --check writes nothing)."""
    if plan.request.check:
        return Interrupted("nothing was written (render --check only compares)", "run it again")
    return read_back(plan.rendered, plan.drift, "ggml-vendor render")
