"""The sync stage's plan against the project: resolve the revision in the upstream, read vendor/ once
(`read_vendor`, the tree recovery would leave when a killed sync's swap awaits it), make the pure plan
(tree_plan.plan_sync) and the drift. It reads the upstream and vendor/ and writes nothing anywhere, not even
the tool's cache: when the upstream's objects are not local yet, the plan says so as its first step
(`Prepared.fetch`) instead of fetching."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from toolkit.core import package_facts
from toolkit.core.config import Config
from toolkit.core.errors import UpstreamError, VendorStateError
from toolkit.core.lock import Lock
from toolkit.sync import embedded
from toolkit.sync.drift import Drift, compute_drift
from toolkit.sync.embedded import EMBEDDED
from toolkit.sync.patches import describe
from toolkit.sync.report import SyncReport
from toolkit.sync.tree_plan import SyncPlan, plan_sync
from toolkit.sync.upstream import NeedsFetch, Snapshot, Source, check_recorded, open_upstream
from toolkit.sync.vendor_tree import LOCK_CORRUPT, TreeFinding, VendorState, read_vendor, tree_on_record

Progress = Callable[[str], object]


def quiet_progress(_line: str) -> None:
    """The progress hook that drops every line."""


@dataclass(frozen=True)
class SyncRequest:
    rev: str | None = None  # None: re-sync the locked commit
    upstream: str | None = None  # None: config's upstream (or the lock's, when re-syncing the pin)
    mirror: Path | None = None  # a local clone to read objects from instead of the network
    force: bool = False
    dry_run: bool = False
    drop_upstreamed: bool = False
    backends: tuple[str, ...] | None = None  # None: every enabled backend
    wait: bool = True  # another command holds the project lock: wait for it (False: refuse, ProjectBusy)


def _overwrite_error(overwrites: tuple[TreeFinding, ...]) -> VendorStateError:
    corrupt = [f for f in overwrites if f.kind == LOCK_CORRUPT]
    if corrupt:
        shown = ", ".join(f"vendor/{f.path}" for f in corrupt[:3])
        return VendorStateError(
            f"vendor/UPSTREAM does not match vendor/ for {shown}: the lock's sha256 was changed by hand or corrupted",
            "restore it (git checkout vendor/UPSTREAM), or pass --force to overwrite vendor/ and rewrite the lock",
        )
    shown = ", ".join(f"vendor/{f.path} ({f.kind})" for f in overwrites[:3])
    more = f" and {len(overwrites) - 3} more" if len(overwrites) > 3 else ""
    return VendorStateError(
        f"vendor/ has local changes that sync would overwrite: {shown}{more}",
        "move them into vendor/patches/*.patch, or pass --force to overwrite them",
    )


@dataclass(frozen=True)
class Prepared:
    """The sync stage's Plan: the pure plan plus the state it was made against, or, when the upstream's
    objects are not local yet, the fetch that must come first (`fetch`; `plan` is then None and execute
    plans again once it has fetched)."""

    cfg: Config
    request: SyncRequest
    plan: SyncPlan | None
    drift: Drift | None
    current: Mapping[str, str | None]  # vendor/-relative path -> sha256 when the plan was made
    seconds: float
    timings: Mapping[str, float]
    fetch: str = ""  # e.g. "fetch v0.9 from https://... into the tool's cache"; "" when nothing is fetched

    def dry_run_report(self) -> SyncReport:
        """The report of `--dry-run`: the plan, nothing written."""
        return SyncReport(
            "dry-run", self.plan, drift=self.drift, seconds=self.seconds, timings=self.timings, fetch=self.fetch
        )

    def lines(self) -> list[str]:
        return self.dry_run_report().lines(verbose=True)

    def to_json(self) -> dict[str, object]:
        return self.dry_run_report().to_json()


def family_facts(cfg: Config) -> dict[str, Any]:
    """plan_sync's keywords for a family: package -> the lock keys of its ops, in config order (the lock's
    [packages] table), and the regions and functions every package's facts name."""
    return {
        "packages": {p.name: tuple(p.key(op.name) for op in p.ops) for p in cfg.packages},
        "fingerprints": package_facts.fingerprints(cfg),
        "behaviour_specs": package_facts.behaviour(cfg),
    }


def _recorded_rev(rev: str, commit: str, previous: Lock | None) -> str:
    """The rev the lock records. Naming the pinned commit by its own sha (or a prefix of it) is not a new
    pin: the lock keeps the rev it had (e.g. `master`), so that sync is a no-op and writes nothing."""
    names_commit = re.fullmatch(r"[0-9a-fA-F]{4,64}", rev) is not None and commit.startswith(rev.lower())
    if previous is not None and previous.commit == commit and previous.rev and names_commit:
        return previous.rev
    return rev


@dataclass
class _Laps:
    """Seconds per planning step, for the report's timings."""

    timings: dict[str, float] = field(default_factory=dict)
    t: float = field(default_factory=time.perf_counter)

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.timings[name] = now - self.t
        self.t = now


@dataclass(frozen=True)
class _Target:
    """Where a sync request points."""

    rev: str  # what the lock records (before _recorded_rev keeps the pin's own name for its commit)
    resolve: str  # what is resolved in the upstream (the pinned commit itself when re-syncing the pin)
    upstream: str  # the upstream to read, as named


def _target(cfg: Config, req: SyncRequest, previous: Lock | None) -> _Target:
    """The revision and upstream `req` names, the pin's when it names none."""
    upstream = _target_upstream(cfg, req, previous)
    if _embedded_default(req, previous):
        # The miniature has one commit, whose id follows its content (which changes with the toolkit):
        # "the pin" of an embedded sync is whatever this toolkit ships.
        return _Target(embedded.BRANCH, embedded.BRANCH, upstream)
    if req.rev is not None:
        return _Target(req.rev, req.rev, upstream)
    if previous is None:
        raise UpstreamError("vendor/ has no pin yet (no vendor/UPSTREAM)", "pass --rev REV (a sha, tag or branch)")
    return _Target(previous.rev or previous.commit, previous.commit, upstream)


def _embedded_default(req: SyncRequest, previous: Lock | None) -> bool:
    """Whether `req` re-syncs the embedded miniature without naming a rev (its own or the pin's upstream)."""
    return req.rev is None and (
        req.upstream == EMBEDDED or (req.upstream is None and previous is not None and previous.upstream == EMBEDDED)
    )


def _target_upstream(cfg: Config, req: SyncRequest, previous: Lock | None) -> str:
    """The upstream to read: the request's, else the pin's when re-syncing it, else the configured one."""
    if req.upstream is not None:
        return req.upstream
    if req.rev is None and previous is not None:
        return previous.upstream  # re-materialise the pin from where it came
    return cfg.upstream


def prepare(cfg: Config, req: SyncRequest, *, progress: Progress | None = None, online: bool = False) -> Prepared:
    """The stage's plan: resolve the upstream and compute the tree plan and the drift. Reads the upstream
    and vendor/ and writes nothing, anywhere, unless `online` (what execute passes once the plan's fetch
    step is due): then a URL upstream is fetched into the tool's cache and the embedded miniature built
    there. Offline, objects that are not local yet make a plan whose first step is that fetch. Raises a
    VendorError subclass on any refusal."""
    t0 = time.perf_counter()
    step = progress or quiet_progress
    vendor = read_vendor(tree_on_record(cfg.vendor_dir))  # the one read of vendor/ this plan makes
    previous = vendor.lock
    target = _target(cfg, req, previous)
    step(f"resolving {target.resolve} in {target.upstream}")
    laps = _Laps()
    try:
        source, commit = open_upstream(
            target.upstream, target.resolve, mirror=req.mirror, configured=cfg.upstream, offline=not online
        )
        try:
            rev = _recorded_rev(target.rev, commit, previous)
            return _plan_from(cfg, req, source, commit, rev, vendor, step, laps, t0)
        finally:
            source.close()
    except NeedsFetch as need:
        step(f"planned first: {need.what}")
        return Prepared(cfg, req, None, None, vendor.hashes, time.perf_counter() - t0, {}, need.what)


def _plan_from(
    cfg: Config,
    req: SyncRequest,
    source: Source,
    commit: str,
    rev: str,
    vendor: VendorState,
    step: Progress,
    laps: _Laps,
    t0: float,
) -> Prepared:
    """The tree plan and the drift for `commit` of the opened `source`, against `vendor` as read."""
    snapshot = source.snapshot(commit)
    check_recorded(source, snapshot)
    laps.lap("resolve")
    step(f"computing the include closure at {commit[:12]} ({snapshot.layout} layout)")
    previous, patches = vendor.lock, list(vendor.patches)
    plan = plan_sync(
        cfg.all_entries(req.backends),
        snapshot,
        upstream=source.recorded,
        rev=rev,
        patches=patches,
        extra_patch_files=vendor.other_patch_files,
        previous=previous,
        current=vendor.hashes,
        findings=vendor.findings(previous) if vendor.exists else [],
        drop_upstreamed=req.drop_upstreamed,
        prefetch=snapshot.prefetch,
        **family_facts(cfg),
    )
    laps.lap("plan")
    if plan.overwrites and not req.force:
        raise _overwrite_error(plan.overwrites)
    drift = None
    if previous is not None and previous.commit != commit:
        drift = _drift(cfg, source, snapshot, previous, plan, patches)
        laps.lap("drift")
    return Prepared(cfg, req, plan, drift, vendor.hashes, time.perf_counter() - t0, laps.timings)


def _drift(
    cfg: Config,
    source: Source,
    snapshot: Snapshot,
    previous: Lock,
    plan: SyncPlan,
    patches: list[tuple[str, bytes]],
) -> Drift:
    """What changed upstream between the previous pin and the planned one (read from `source`)."""
    old_snap = source.snapshot(previous.commit) if source.has_commit(previous.commit) else None

    def old_text(path: str) -> bytes | None:
        try:
            return old_snap.read(path) if old_snap else None
        except UpstreamError:
            return None

    drift = compute_drift(
        previous,
        plan.lock,
        log=source.log,
        old_text=old_text,
        new_text=snapshot.read,
        log_function=source.log_function,
        fingerprints=package_facts.fingerprints(cfg),
        behaviour_specs=package_facts.behaviour(cfg),
    )
    described = {n: describe(b) for n, b in patches}
    return replace(drift, patches=tuple((r.name, r.verdict, described[r.name]) for r in plan.patches))
