"""The upstream side of `outdated` and `update`: where the upstream's head is, the commits since the pin that
touch the vendored closure (with dates), what sync's drift report says about them (files, fingerprints,
behaviour), and the patch series carried to the head by a three-way apply. Reads an opened upstream only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from toolkit.core import ggml_facts, package_facts
from toolkit.core.config import Config
from toolkit.core.errors import UpstreamError
from toolkit.core.lock import Lock, package_view
from toolkit.outdated.rebase import Rebased, rebase_series
from toolkit.sync.drift import Drift, compute_drift
from toolkit.sync.git_run import run_git
from toolkit.sync.patches import describe
from toolkit.sync.project_plan import family_facts
from toolkit.sync.tree_plan import SyncPlan, plan_sync
from toolkit.sync.upstream import Snapshot, Source
from toolkit.sync.vendor_tree import SOURCES_DIR, read_patches


@dataclass(frozen=True)
class Commit:
    sha: str
    date: str  # ISO 8601, committer date
    subject: str

    def to_json(self) -> dict[str, str]:
        return {"sha": self.sha, "date": self.date, "subject": self.subject}


def head_ref(source: Source, lock: Lock) -> str:
    """What "the upstream's head" is for this pin: the branch the lock records when the source has it (the pin
    follows `master`), else the source's HEAD (its default branch)."""
    rev = lock.rev or ""
    for ref in (f"refs/heads/{rev}", f"refs/remotes/origin/{rev}"):
        if rev and run_git(source.git_dir, "rev-parse", "--verify", "--quiet", ref, check=False).returncode == 0:
            return rev
    head = run_git(source.git_dir, "symbolic-ref", "--quiet", "--short", "HEAD", check=False).stdout.strip()
    return head or "HEAD"  # the default branch by name (master), so the new lock follows it


def commits_between(source: Source, old: str, new: str, repo_paths: list[str]) -> tuple[Commit, ...] | None:
    """Commits in old..new touching `repo_paths`, newest first; None when the source lacks that history."""
    if not (source.has_commit(old) and source.has_commit(new)):
        return None
    proc = run_git(source.git_dir, "log", "--format=%H%x09%cI%x09%s", f"{old}..{new}", "--", *repo_paths, check=False)
    if proc.returncode != 0:
        return None
    out = []
    for line in proc.stdout.splitlines():
        parts = line.split("\t", 2)
        if len(parts) == 3:
            out.append(Commit(*parts))
    return tuple(out)


def pristine(cfg: Config, snapshot: Snapshot, upstream: str, rev: str, previous: Lock | None = None) -> SyncPlan:
    """sync's plan of `snapshot` without our patches: the closure, the pristine files and their lock."""
    return plan_sync(
        cfg.all_entries(None),
        snapshot,
        upstream=upstream,
        rev=rev,
        patches=[],
        previous=previous,
        prefetch=snapshot.prefetch,
        **family_facts(cfg),
    )


def sources_of(plan: SyncPlan) -> dict[str, bytes]:
    prefix = f"{SOURCES_DIR}/"
    return {p[len(prefix) :]: b for p, b in plan.desired.items() if p.startswith(prefix)}


@dataclass(frozen=True)
class Survey:
    """The upstream between the pin and a target commit, as `outdated` reports it and `update` acts on it."""

    upstream: str
    pin: Lock
    target_rev: str
    new: SyncPlan  # the pristine plan at the target
    drift: Drift  # the whole family's
    commits: tuple[Commit, ...] | None  # touching any package's closure; None: history not in the source
    patches: tuple[Rebased, ...]
    per_package_commits: Mapping[str, tuple[Commit, ...] | None]

    @property
    def moved(self) -> bool:
        return self.new.lock.commit != self.pin.commit


def _repo_paths(layout: str, files: list[str]) -> list[str]:
    prefix = ggml_facts.LAYOUT_PREFIX.get(layout, "")
    return sorted({prefix + p for p in files})


def survey(cfg: Config, source: Source, pin: Lock, target: str, rev: str) -> Survey:
    """Compare the pin with `target` (a full commit id of `source`; `rev` is what the new lock would record)."""
    if not source.has_commit(pin.commit):
        raise UpstreamError(
            f"the pinned commit {pin.commit[:12]} is not in {source.recorded}",
            "point --upstream/--mirror at a clone of the repository the pin came from",
        )
    old_plan = pristine(cfg, source.snapshot(pin.commit), source.recorded, pin.rev or pin.commit)
    new_snap = source.snapshot(target)
    new_plan = pristine(cfg, new_snap, source.recorded, rev, previous=pin)
    old_snap = source.snapshot(pin.commit)
    drift = compute_drift(
        old_plan.lock,
        new_plan.lock,
        log=source.log,
        old_text=lambda p: _read(old_snap, p),
        new_text=lambda p: _read(new_snap, p),
        log_function=source.log_function,
        fingerprints=package_facts.fingerprints(cfg),
        behaviour_specs=package_facts.behaviour(cfg),
    )
    patches, _ = read_patches(cfg.vendor_dir)
    rebased = rebase_series(sources_of(old_plan), sources_of(new_plan), patches)
    drift = replace(drift, patches=tuple((r.name, r.verdict, describe(dict(patches)[r.name])) for r in rebased))
    files = sorted(set(old_plan.lock.files) | set(new_plan.lock.files))
    per_package: dict[str, tuple[Commit, ...] | None] = {}
    for p in cfg.packages or (cfg.package,):
        mine = sorted(set(package_view(old_plan.lock, p.name).files) | set(package_view(new_plan.lock, p.name).files))
        per_package[p.name] = commits_between(source, pin.commit, target, _repo_paths(new_snap.layout, mine))
    return Survey(
        source.recorded,
        pin,
        rev,
        new_plan,
        drift,
        commits_between(source, pin.commit, target, _repo_paths(new_snap.layout, files)),
        rebased,
        per_package,
    )


def _read(snapshot: Snapshot, path: str) -> bytes | None:
    try:
        return snapshot.read(path)
    except UpstreamError:
        return None


__all__ = ["Commit", "Survey", "commits_between", "head_ref", "pristine", "sources_of", "survey"]
