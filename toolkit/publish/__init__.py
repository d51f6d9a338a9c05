"""The publish stage: verified build/ variants -> branch v<N> of a Hub kernel repo (or a git remote).

The stage protocol (the same in every stage package):
    plan(config, request) -> Plan     preflight, read the live repository and diff it against build/
                                      (plan.py, pure over both trees); pushes and writes nothing
    execute(plan) -> Report           push in parent-commit-guarded batches, re-list and compare, write the
                                      report (hub.py over the HTTP API, git.py with git-lfs)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

# Imported before `plan` below is defined: the function, not the submodule, is `toolkit.publish.plan`
# as an attribute (`from toolkit.publish.plan import X` still reads the module).
import toolkit.publish.plan as _plan_module  # noqa: F401

if TYPE_CHECKING:
    from toolkit.publish.hub import PublishResult as Report

__all__ = ["Request", "Plan", "plan", "execute"]


@dataclass(frozen=True)
class Request:
    variants: tuple[str, ...] = ()  # names under build/ (empty: all)
    repo: str | None = None  # Hub repo id (None: the config's hub-repo)
    to: str | None = None  # a git remote (URL or path): git-lfs instead of the Hub HTTP API
    endpoint: str | None = None
    token: str | None = None
    create_pr: bool = False
    batch_size: int = 1000
    report: Path | None = None
    check_vendor: bool = True


@dataclass(frozen=True)
class Plan:
    config: Any
    request: Request
    preview: Report  # the dry run: its .plan lists every file action per branch

    def lines(self) -> list[str]:
        return self.preview.plan.lines()


def _run(config: Any, request: Request, *, dry_run: bool, progress: Callable[[str], None] | None) -> Report:
    names = list(request.variants) or None
    if request.to:
        from toolkit.publish.git import publish_git

        return publish_git(
            config,
            names,
            remote=request.to,
            dry_run=dry_run,
            report_path=request.report,
            check_vendor=request.check_vendor,
            progress=progress,
        )
    from toolkit.publish.hub import publish_hub

    return publish_hub(
        config,
        names,
        repo_id=request.repo,
        token=request.token,
        endpoint=request.endpoint,
        create_pr=request.create_pr,
        dry_run=dry_run,
        batch_size=request.batch_size,
        report_path=request.report,
        check_vendor=request.check_vendor,
        progress=progress,
    )


def plan(config: Any, request: Request, *, progress: Callable[[str], None] | None = None) -> Plan:
    return Plan(config, request, _run(config, request, dry_run=True, progress=progress))


def execute(plan: Plan, *, progress: Callable[[str], None] | None = None) -> Report:
    """Push. The live tree is read again under the parent-commit guard: it may have moved since the plan."""
    return _run(plan.config, plan.request, dry_run=False, progress=progress)
