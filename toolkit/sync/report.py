"""What sync did (or, for a dry run, would do), as the CLI prints it and --json writes it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from toolkit.core.lock import VERDICT_UPSTREAM
from toolkit.sync.drift import Drift
from toolkit.sync.outcome import Succeeded
from toolkit.sync.tree_plan import SyncPlan


@dataclass(frozen=True)
class SyncReport(Succeeded):
    """What sync did (or, for "dry-run", would do). Refusals are raised as VendorErrors, so a report that
    exists is a success: `ok` is always true and `exit_code` 0 (the protocol's fields, for the CLI)."""

    status: str  # "synced" | "unchanged" | "dry-run"
    plan: SyncPlan | None  # None only for a dry run whose first step is a fetch (`fetch` says which)
    written: tuple[str, ...] = ()
    drift: Drift | None = None
    drift_paths: tuple[str, ...] = ()
    recovered: tuple[str, ...] = ()
    seconds: float = 0.0
    timings: Mapping[str, float] = field(default_factory=dict)
    fetch: str = ""

    def lines(self, verbose: bool = False) -> list[str]:
        """The report as the CLI prints it (`verbose`: every file with its reason, every change)."""
        if self.plan is None:
            return [
                f"dry run: would first {self.fetch}, then sync vendor/ from it",
                "  the file list needs those objects, and a dry run neither fetches nor builds anything: "
                "run the sync itself (or pass --mirror PATH to a local clone) to see it",
            ]
        return _head_lines(self) + _detail_lines(self, verbose) + _tail_lines(self)

    def to_json(self) -> dict[str, object]:
        if self.plan is None:
            return {"status": self.status, "fetch": self.fetch, "changes": None, "recovered": list(self.recovered)}
        return {**_lock_json(self.plan), **_outcome_json(self)}


def _lock_json(plan: SyncPlan) -> dict[str, Any]:
    lock = plan.lock
    return {
        "upstream": lock.upstream,
        "layout": lock.layout,
        "rev": lock.rev,
        "commit": lock.commit,
        "date": lock.date,
        "subject": lock.subject,
        "llama_cpp_commit": lock.llama_cpp_commit,
        "ggml_commit": lock.ggml_commit,
        "previous_commit": plan.previous.commit if plan.previous else None,
        "files": {
            f.path: {"sha256": f.sha256, "reason": f.reason, "needed_by": list(f.needed_by)} for f in lock.file_info
        },
        "closures": {op: {b: list(v) for b, v in per.items()} for op, per in lock.closures.items()},
        "patches": [p.to_json() for p in plan.patches],
        "changes": [{"path": f"vendor/{p}", "change": c} for p, c in plan.changes],
        "overwritten": [f.to_json() for f in plan.overwrites],
    }


def _outcome_json(rep: SyncReport) -> dict[str, Any]:
    return {
        "status": rep.status,
        "fetch": rep.fetch or None,
        "written": [f"vendor/{p}" for p in rep.written],
        "drift": rep.drift.to_json() if rep.drift else None,
        "drift_report": list(rep.drift_paths),
        "recovered": list(rep.recovered),
        "seconds": round(rep.seconds, 4),
        "timings": {k: round(v, 4) for k, v in rep.timings.items()},
    }


def _head_lines(rep: SyncReport) -> list[str]:
    plan, lock = rep.plan, rep.plan.lock  # type: ignore[union-attr]
    short = lock.commit[:12]
    if rep.status == "unchanged":
        head = f"vendor/ is already at {short} ({lock.rev}) from {lock.upstream}: nothing written"
    elif rep.status == "dry-run":
        head = (
            f"dry run: would sync vendor/ to {short} ({lock.rev}, {lock.layout} layout) "
            f"from {lock.upstream}; {len(plan.changes)} changes"  # type: ignore[union-attr]
        )
    else:
        head = f"synced vendor/ to {short} ({lock.rev}, {lock.layout} layout) from {lock.upstream}"
    per_op = ", ".join(f"{oc.key} {len(oc.files)}" for oc in plan.closure.ops)  # type: ignore[union-attr]
    extra = ", ".join(p for p in lock.files if p not in plan.closure.files) or "nothing"  # type: ignore[union-attr]
    return [head, f"  {lock.date}  {lock.subject}", f"  {len(lock.files)} files ({per_op}; plus {extra})"]


def _detail_lines(rep: SyncReport, verbose: bool) -> list[str]:
    plan = rep.plan
    assert plan is not None
    out: list[str] = []
    if verbose or rep.status == "dry-run":
        out += [f"    {f.path:45} {f.reason}" for f in plan.lock.file_info]
        out += [f"    {change:7} vendor/{path}" for path, change in plan.changes]
    for p in plan.patches:
        line = f"  patch {p.name}: {p.verdict}"
        if p.verdict == VERDICT_UPSTREAM:
            line += " (drop it: ggml-vendor sync --drop-upstreamed, or git rm vendor/patches/" + p.name + ")"
        out.append(line)
    verb = "overwrote" if rep.status == "synced" else "would overwrite"
    out += [f"{verb} {f.line()}" for f in plan.overwrites]
    out += [f"recovered: {action}" for action in rep.recovered]
    return out


def _tail_lines(rep: SyncReport) -> list[str]:
    out: list[str] = []
    if rep.drift is not None:
        out += [f"  {line}" for line in rep.drift.summary_lines()]
        out += [f"  drift report: {path}" for path in rep.drift_paths]
    if rep.status == "synced":
        linked = len(rep.plan.desired) - len(rep.written)  # type: ignore[union-attr]
        out.append(f"  wrote {len(rep.written)} files, linked {linked} unchanged, in {rep.seconds:.2f} s")
    return out
