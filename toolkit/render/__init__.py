"""The render stage: vendor/ + templates/ -> build.toml, torch-ext/, csrc/ (committed, generated code).

The stage protocol (the same in every stage package):
    plan(config, request) -> Plan     every generated file's bytes, validated; reads only (stage.plan)
    execute(plan) -> Report           write what is stale or missing, delete orphans (stage.write)
`check(plan)` lists what differs without writing (render --check, --dry-run). The work is in stage.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from toolkit.render.stage import FileChange, RenderPlan, check, write
from toolkit.render.stage import plan as _plan

Plan = RenderPlan

__all__ = ["Request", "Plan", "Report", "plan", "check", "execute"]


@dataclass(frozen=True)
class Request:
    """Render takes no options: the configuration and vendor/UPSTREAM decide everything."""


@dataclass(frozen=True)
class Report:
    plan: RenderPlan
    changed: tuple[FileChange, ...]  # what execute wrote ("stale", "missing") or removed ("orphan")


def plan(config, request: Request | None = None) -> RenderPlan:  # type: ignore[no-untyped-def]
    return _plan(config)


def execute(plan: RenderPlan) -> Report:
    return Report(plan, tuple(write(plan)))
