"""Carrying out a sync plan: run its fetch step first (then plan again with the objects at hand), recover
what a killed sync left half done (planning again if that changed vendor/), swap the new tree in
atomically (vendor_tree) and write the drift report; and the one line a Ctrl-C ends with, read back from
disk."""

from __future__ import annotations

import time

from toolkit.core.config import Config
from toolkit.core.errors import Interrupted
from toolkit.core.hashing import sha256_bytes
from toolkit.core.interrupts import no_interrupt
from toolkit.core.lock import LOCK_NAME, read_lock
from toolkit.core.projectlock import project_lock
from toolkit.sync.drift import Drift, report_paths, write_report
from toolkit.sync.project_plan import Prepared, Progress, prepare, quiet_progress
from toolkit.sync.report import SyncReport
from toolkit.sync.tree_plan import SyncPlan
from toolkit.sync.vendor_tree import TreeFinding, check_vendor_dir, current_hashes, recover, replace_vendor


def execute(
    prep: Prepared, *, progress: Progress | None = None, recovered: tuple[str, ...] | None = None
) -> SyncReport:
    """Carry out a prepared sync: run its fetch step first (then plan again with the objects at hand), finish
    any interrupted replacement (planning again if that changed vendor/), then swap the new tree in
    atomically and write the drift report.

    Runs under the project lock (the CLI already holds it from the plan on; a library caller gets it here):
    if vendor/ is no longer what the plan was made against (another command wrote it meanwhile), the plan
    is made again first, so the report always describes the tree on disk."""
    cfg = prep.cfg
    with project_lock(cfg.root, command="sync", wait=prep.request.wait):
        return _execute_locked(prep, progress or quiet_progress, recovered)


def _replanned(prep: Prepared, step: Progress, recovered: tuple[str, ...]) -> Prepared:
    """`prep`, or a new plan when its fetch is due or vendor/ changed since it was made."""
    cfg = prep.cfg
    if prep.plan is None:
        step(prep.fetch)
        return prepare(cfg, prep.request, progress=step, online=True)
    if recovered:
        return prepare(cfg, prep.request, progress=step, online=True)
    if current_hashes(cfg.vendor_dir) != dict(prep.current):
        step("vendor/ changed since the plan was made: planning again")
        return prepare(cfg, prep.request, progress=step, online=True)
    return prep


def _execute_locked(prep: Prepared, step: Progress, recovered: tuple[str, ...] | None) -> SyncReport:
    t0 = time.perf_counter()
    cfg = prep.cfg
    if recovered is None:
        recovered = tuple(recover(cfg.root))
    fetched = prep.fetch
    prep = _replanned(prep, step, recovered)
    plan, drift, timings = prep.plan, prep.drift, dict(prep.timings)
    assert plan is not None  # an online plan never asks for a fetch
    if plan.noop:
        return SyncReport("unchanged", plan, recovered=recovered, seconds=prep.seconds, timings=timings, fetch=fetched)
    step(f"writing vendor/ ({len(plan.changes)} changes)")
    try:
        written = replace_vendor(cfg.root, plan.desired, known={k: v for k, v in prep.current.items() if v})
        timings["write"] = time.perf_counter() - t0
        drift_paths: tuple[str, ...] = ()
        if drift is not None:
            drift_paths = tuple(str(p) for p in write_report(cfg.build_dir, drift))
    except KeyboardInterrupt:
        raise _interrupted(cfg, plan, drift) from None
    return SyncReport(
        "synced",
        plan,
        written=tuple(written),
        drift=drift,
        drift_paths=drift_paths,
        recovered=recovered,
        seconds=prep.seconds + time.perf_counter() - t0,
        timings=timings,
        fetch=fetched,
    )


def _interrupted(cfg: Config, plan: SyncPlan, drift: Drift | None = None) -> Interrupted:
    """Ctrl-C during or after the swap: say which tree vendor/ holds now, read back from disk."""
    with no_interrupt():  # the state report itself is not interruptible
        recover(cfg.root)  # a journaled swap cut between its renames is rolled back first
        try:
            on_disk = (cfg.vendor_dir / LOCK_NAME).read_text(encoding="utf-8")
        except OSError:
            on_disk = None
        findings = check_vendor_dir(cfg.vendor_dir) if on_disk is not None else []
        reported = drift is not None and all(p.is_file() for p in report_paths(cfg.build_dir, drift))
    return _state_line(cfg, plan, on_disk, findings, drift, reported)


def _state_line(
    cfg: Config, plan: SyncPlan, on_disk: str | None, findings: list[TreeFinding], drift: Drift | None, reported: bool
) -> Interrupted:
    lock = plan.lock
    if on_disk == plan.lock_text and not findings:
        if drift is None:
            after = "nothing to undo (ggml-vendor status shows the pin)"
        elif reported:
            after = "nothing to undo; the drift report is in " + str(report_paths(cfg.build_dir, drift)[0])
        else:
            after = "nothing to undo; the drift report was not written (ggml-vendor status shows the pin)"
        return Interrupted(f"vendor/ is at the new pin {lock.commit[:12]} ({lock.rev}): the sync had completed", after)
    prev = plan.previous
    now = read_lock(cfg.vendor_dir) if on_disk is not None else None
    if now is None:
        return Interrupted("vendor/ was left without a pin: nothing was synced", "run ggml-vendor sync --rev REV again")
    if prev is not None and now.commit == prev.commit:
        return Interrupted(f"vendor/ kept its previous pin {prev.commit[:12]} ({prev.rev})", "run the sync again")
    return Interrupted(
        f"vendor/ is at {now.commit[:12]} ({now.rev}), neither the pin planned nor the previous one",
        "another command changed it meanwhile: ggml-vendor status shows it",
    )


def interrupted(prep: Prepared) -> Interrupted:
    """The Interrupted error (exit 130) for a Ctrl-C that lands anywhere after `prep` was planned, the
    report's printing included: it says truthfully which tree vendor/ holds, read back from disk."""
    if prep.plan is None:
        return _interrupted_after_fetch(prep)
    return _interrupted(prep.cfg, prep.plan, prep.drift)


def _interrupted_after_fetch(prep: Prepared) -> Interrupted:
    """A Ctrl-C in a sync whose plan began with a fetch: the tree plan was made later, inside execute, so
    vendor/UPSTREAM is compared with the bytes it had when the fetch was planned."""
    recover(prep.cfg.root)
    lock_file = prep.cfg.vendor_dir / LOCK_NAME
    now = sha256_bytes(lock_file.read_bytes()) if lock_file.is_file() else None
    if now == prep.current.get(LOCK_NAME):
        return Interrupted("vendor/ was not changed (interrupted while fetching or planning)", "run the sync again")
    lock = read_lock(prep.cfg.vendor_dir)
    if lock is None:
        return Interrupted("vendor/ was left without a pin: nothing was synced", "run ggml-vendor sync --rev REV again")
    return Interrupted(
        f"vendor/ is at the new pin {lock.commit[:12]} ({lock.rev}): the sync had completed",
        "nothing to undo (ggml-vendor status shows the pin)",
    )
