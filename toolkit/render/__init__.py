"""The render stage: vendor/ + templates/ -> build.toml, torch-ext/, csrc/ (committed, generated code).

It follows the stage protocol (toolkit.core.stage):
    plan(config, request, log) -> Plan     every generated file's bytes, validated, and what differs from the
                                           tree; reads only (stage.plan, stage.check)
    execute(plan, log) -> Report           write what is stale or missing, delete orphans (stage.write); with
                                           `Request(check=True)` write nothing and fail (exit 6) on any drift
The work is in stage.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from toolkit.core.config import Config
from toolkit.core.errors import RenderError
from toolkit.core.stage import Log, Verdict, quiet
from toolkit.render.stage import FileChange, RenderPlan, check, write
from toolkit.render.stage import plan as _plan

__all__ = ["Request", "Plan", "Report", "plan", "check", "execute"]


@dataclass(frozen=True)
class Request:
    """The configuration and vendor/UPSTREAM decide what is rendered; `check` only compares (render --check)."""

    check: bool = False


def _changes_json(changes: tuple[FileChange, ...]) -> list[dict[str, str]]:
    return [{"path": d.path, "kind": d.kind} for d in changes]


@dataclass(frozen=True)
class Plan:
    """The rendered files and how the tree differs from them (`drift`; empty: up to date)."""

    rendered: RenderPlan
    drift: tuple[FileChange, ...]
    request: Request = Request()

    @property
    def files(self) -> tuple[Any, ...]:
        return self.rendered.files

    def lines(self) -> list[str]:
        return [f"{d.kind:8} {d.path}" for d in self.drift] or [f"{len(self.files)} generated files are up to date"]

    def to_json(self) -> dict[str, Any]:
        return {"ok": not self.drift, "files": [f.path for f in self.files], "drift": _changes_json(self.drift)}


@dataclass(frozen=True)
class Report(Verdict):
    """What execute changed ("stale", "missing": written; "orphan": removed), or under `check` what differs."""

    plan: Plan
    changed: tuple[FileChange, ...]
    checked: bool = False

    def failure(self) -> RenderError | None:
        if not (self.checked and self.changed):
            return None
        names = ", ".join(f"{d.path} ({d.kind})" for d in self.changed)
        return RenderError(
            f"generated files are out of date: {names}",
            "run `ggml-vendor render` and commit the result (never edit generated files)",
        )

    def lines(self) -> list[str]:
        if self.checked:
            return self.plan.lines()
        verbs = [f"{'removed' if d.kind == 'orphan' else 'wrote':8} {d.path}" for d in self.changed]
        return [*verbs, f"{len(self.plan.files)} generated files, {len(self.changed)} changed"]

    def to_json(self) -> dict[str, Any]:
        if self.checked:
            return self.plan.to_json()
        return {"ok": True, "files": [f.path for f in self.plan.files], "changed": _changes_json(self.changed)}


def plan(config: Config, request: Request | None = None, log: Log = quiet) -> Plan:
    request = request or Request()
    rendered = _plan(config)
    log(f"rendered {len(rendered.files)} files from {config.templates_dir}")
    return Plan(rendered, tuple(check(rendered)), request)


def execute(plan: Plan, log: Log = quiet) -> Report:
    if plan.request.check:
        return Report(plan, plan.drift, checked=True)
    changed = tuple(write(plan.rendered))
    for d in changed:
        log(f"{d.kind}: {d.path}")
    return Report(plan, changed)
