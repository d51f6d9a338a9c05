"""What a Ctrl-C of `ggml-vendor update` left behind, read back from disk: update writes vendor/ (sync's
atomic swap), the matrices, the generated sources and, last, its Markdown report, so the pin on disk, the
matrix files' bytes against those the plan saw, and the report's presence say how far it got. Kept apart
from update.py, whose job is to plan and carry out the update."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from toolkit.core.errors import Interrupted
from toolkit.core.hashing import sha256_file
from toolkit.core.lock import read_lock
from toolkit.sync.vendor_tree import recover

if TYPE_CHECKING:
    from toolkit.core.config import Config
    from toolkit.outdated.update import Plan


def matrix_digests(cfg: Config) -> tuple[tuple[Path, str | None], ...]:
    """Each package's variants file and the sha256 of its bytes now (None: missing), once per file."""
    paths = dict.fromkeys(view.variants_file for view in cfg.selected(()))
    return tuple((path, sha256_file(path) if path.is_file() else None) for path in paths)


def report_name(old: str, new: str) -> str:
    """build/reports/<this>: the update's Markdown report (the pull request's body), written last."""
    return f"update-{old[:12]}-{new[:12]}.md"


def _changed_matrices(plan: Plan) -> list[str]:
    return [path.name for path, was in plan.matrices_before if (sha256_file(path) if path.is_file() else None) != was]


def interrupted(plan: Plan) -> Interrupted:
    """The Interrupted error (exit 130) for a Ctrl-C once `plan` was made, the report's printing included:
    which pin vendor/ holds, which matrices changed and whether the report was written, read back from disk."""
    cfg, old = plan.cfg, plan.pin.commit
    recover(cfg.root)  # a journaled swap of vendor/ cut between its renames is rolled back first
    now = read_lock(cfg.vendor_dir)
    matrices = _changed_matrices(plan)
    changed = f"; {', '.join(matrices)} changed" if matrices else ""
    if now is None:
        return Interrupted(
            "vendor/ was left without a pin (read back from disk)" + changed, "run ggml-vendor sync --rev REV"
        )
    # None: a URL upstream, surveyed inside execute: whatever pin it moved to is the one planned
    target = plan.survey.new.lock.commit if plan.survey is not None else None
    report = cfg.reports_dir / report_name(old, now.commit)
    if report.is_file() and (target is None or now.commit in (old, target)):
        return Interrupted(
            f"the update had completed: vendor/ is at {now.commit[:12]} ({now.rev}){changed}, "
            f"the report is in {report} (read back from disk)",
            "nothing to undo",
        )
    if now.commit == old and not matrices:
        return Interrupted(
            f"nothing was updated: vendor/ kept its pin {old[:12]} and no matrix changed (read back from disk)",
            "run the update again",
        )
    if now.commit not in (old, target) and target is not None:
        return Interrupted(
            f"vendor/ is at {now.commit[:12]} ({now.rev}), neither the pin planned nor the previous one "
            "(read back from disk)",
            "another command changed it meanwhile: ggml-vendor status shows it",
        )
    pin = f"vendor/ moved to {now.commit[:12]} ({now.rev})" if now.commit != old else f"vendor/ kept {old[:12]}"
    return Interrupted(
        f"the update stopped part way: {pin}{changed}; the sources were not all rendered and no report was "
        "written (read back from disk)",
        "run ggml-vendor render (and ggml-vendor ci if a matrix changed) to finish; ggml-vendor outdated shows "
        "what is left",
    )
