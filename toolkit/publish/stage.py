"""The publish stage's Request, Plan and Report (toolkit/core/stage.py's interfaces), shared by both transports."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit import __version__
from toolkit.core import fs
from toolkit.publish.diff import FileAction, PublishPlan, batches
from toolkit.publish.preflight import Ready

REPORT_NAME = "publish-report.json"


@dataclass(frozen=True)
class Request:
    variants: tuple[str, ...] = ()  # names under build/ (empty: all)
    repo: str | None = None  # Hub repo id (None: the config's hub-repo)
    to: str | None = None  # a git remote (URL or path): git-lfs instead of the Hub HTTP API
    endpoint: str | None = None
    token: str | None = field(default=None, repr=False)  # never printed, not even in a repr
    create_pr: bool = False
    batch_size: int = 1000
    report: Path | None = None
    check_vendor: bool = True


@dataclass(frozen=True)
class Plan:
    """One publish, decided: the file actions per branch, cut into the commits execute makes, and the live
    heads they were computed against (execute pushes on top of exactly those, or refuses)."""

    transport: str  # "hub" (HTTP API) or "git" (git-lfs to a remote)
    request: Any  # toolkit.publish.Request
    ready: Ready  # what preflight established (variants, version, conformance)
    files: PublishPlan  # the actions per branch (diff.py)
    target: str  # the repository's URL (hub) or the remote
    report_path: Path
    repo_exists: bool = True
    heads: dict[str, str] = field(default_factory=dict)  # branch -> commit the plan read (absent: new)
    batch_size: int = 1000
    endpoint: str | None = None

    @property
    def commit_batches(self) -> dict[str, list[tuple[FileAction, ...]]]:
        """branch -> its changes in commit-sized groups (the HTTP transport commits each group)."""
        return {b.branch: batches(b.actions, self.batch_size) for b in self.files.branches}

    @property
    def conformance(self) -> dict[str, str]:
        return dict(self.ready.conformance)

    @property
    def preview(self) -> PublishResult:
        """What `--dry-run` reports: this plan, nothing pushed."""
        return PublishResult("dry-run", self.files, self.target, conformance=self.conformance)

    def lines(self) -> list[str]:
        return self.files.lines()

    def to_json(self) -> dict[str, Any]:
        return self.preview.to_json()


@dataclass(frozen=True)
class PublishResult:
    """The Report: what was pushed and what the re-listing (or fresh clone) found."""

    status: str  # "dry-run", "published" or "up-to-date"
    plan: PublishPlan
    target: str
    commits: tuple[str, ...] = ()
    pull_requests: tuple[str, ...] = ()
    verified: dict[str, Any] = field(default_factory=dict)
    report_path: str = ""
    conformance: dict[str, str] = field(default_factory=dict)  # variant -> "passed: ..." / "not run (why)"

    @property
    def ok(self) -> bool:
        return bool(self.verified.get("ok", True))

    @property
    def exit_code(self) -> int:
        from toolkit.core.errors import PublishError

        return 0 if self.ok else PublishError.exit_code

    def lines(self) -> list[str]:
        out = self.plan.lines()
        out += [f"  {name}: conformance: {status}" for name, status in sorted(self.conformance.items())]
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "conformance": dict(self.conformance),
            "target": self.target,
            "tool_version": __version__,
            "plan": self.plan.to_json(),
            "commits": list(self.commits),
            "pull_requests": list(self.pull_requests),
            "verified": self.verified,
        }


Report = PublishResult


def write_report(path: Path, result: PublishResult) -> str:
    fs.atomic_write(path, (json.dumps(result.to_json(), indent=2, sort_keys=True) + "\n").encode())
    return str(path)


def finish(plan: Plan, commits: tuple[str, ...], prs: tuple[str, ...], verified: dict[str, Any]) -> PublishResult:
    """The report, written next to build/ (both transports); a push that did not verify is an error."""
    status = "published" if commits else "up-to-date"
    result = PublishResult(status, plan.files, plan.target, commits, prs, verified, conformance=plan.conformance)
    result = dataclasses.replace(result, report_path=write_report(plan.report_path, result))
    if not result.ok:
        from toolkit.core.errors import PublishError

        raise PublishError(
            "the upload did not verify: " + "; ".join(verified["mismatches"][:3]),
            f"see {plan.report_path}; re-run publish to repair",
        )
    return result
