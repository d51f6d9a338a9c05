"""`ggml-vendor sync`: config -> `prepare` (a Prepared: the stage's Plan) -> `execute` -> SyncReport.

`plan_sync` is pure over a snapshot-like object (anything with commit/layout/date/subject and `read`),
so plans are unit-tested without git. `prepare` is the stage's plan: it reads the upstream and vendor/ and
writes nothing anywhere, not even the tool's cache. When the upstream's objects are not local yet (a URL
whose cache lacks the commit, the embedded miniature not built), the plan says so as its first step
(`Prepared.fetch`) instead of fetching. `execute` runs that fetch, plans again with the objects at hand,
finishes an interrupted replacement, swaps the new tree in atomically (vendor_tree) and writes the drift
report. The CLI, the demo and the tests run the two in a row; --dry-run prints the plan.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from toolkit import __version__
from toolkit.core import fs, ggml_facts, package_facts
from toolkit.core.config import Config, Entry
from toolkit.core.errors import Interrupted, UpstreamError, VendorStateError
from toolkit.core.lock import (
    LOCK_NAME,
    VERDICT_UPSTREAM,
    LicenseInfo,
    Lock,
    LockedFile,
    LockedPatch,
    notice_text,
    read_lock,
    render_lock,
    sha256_bytes,
)
from toolkit.core.projectlock import project_lock
from toolkit.sync import behaviour, embedded
from toolkit.sync.closure import Closure, compute_closure
from toolkit.sync.drift import Drift, compute_drift, fingerprints_of, report_paths, write_report
from toolkit.sync.embedded import EMBEDDED
from toolkit.sync.outcome import Succeeded
from toolkit.sync.patches import PatchResult, apply_patches, describe
from toolkit.sync.upstream import NeedsFetch, Snapshot, Source, check_recorded, open_upstream
from toolkit.sync.vendor_tree import (
    LOCK_CORRUPT,
    LOSSY,
    PATCHES_DIR,
    SOURCES_DIR,
    TreeFinding,
    check_vendor,
    check_vendor_dir,
    current_hashes,
    recover,
    replace_vendor,
)

__all__ = [
    "SyncRequest",
    "SyncPlan",
    "SyncReport",
    "Prepared",
    "plan_sync",
    "prepare",
    "execute",
    "interrupted",
    "check_vendor",
    "license_inventory",
]

Progress = Callable[[str], object]


def _quiet(_line: str) -> None:
    """The progress hook that drops every line."""


class SnapshotLike(Protocol):
    commit: str
    layout: str
    date: str
    subject: str

    def read(self, path: str, *, root_fallback: bool = False) -> bytes | None: ...

    def blob_id(self, path: str, *, root_fallback: bool = False) -> str | None: ...


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


@dataclass(frozen=True)
class SyncPlan:
    """Everything sync will do to vendor/, as data: print it (--dry-run), test it, then execute it."""

    lock: Lock
    lock_text: str
    desired: Mapping[str, bytes]  # vendor/-relative path -> bytes of the complete new vendor/
    closure: Closure
    patches: tuple[PatchResult, ...]
    changes: tuple[tuple[str, str], ...]  # (vendor/-relative path, "add" | "update" | "remove")
    overwrites: tuple[TreeFinding, ...]  # local changes the new tree would destroy (refused without --force)
    previous: Lock | None

    @property
    def noop(self) -> bool:
        return not self.changes


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


# --- license inventory -------------------------------------------------------------------------------
_SPDX_RE = re.compile(r"SPDX-License-Identifier:\s*([^\s*]+(?:\s+(?:OR|AND|WITH)\s+[^\s*]+)*)")
_COPYRIGHT_RE = re.compile(r"(?im)^[^\n]*\bcopyright\s+(?:\(c\)|©)?\s*\d{4}[^\n]*$")


def license_inventory(files: Mapping[str, bytes]) -> tuple[LicenseInfo, ...]:
    """SPDX ids (tags, or license texts ggml_facts recognises) and copyright lines found per file; files
    with neither are left out."""
    out = []
    for path in sorted(files):
        text = files[path].decode("utf-8", "replace")
        spdx = list(dict.fromkeys(m.group(1) for m in _SPDX_RE.finditer(text)))
        spdx += [sid for sid, marker in ggml_facts.LICENSE_TEXT_MARKERS if marker in text and sid not in spdx]
        found = {
            notice_text(m.group(0)): text.count("\n", 0, m.start()) + 1
            for m in reversed(list(_COPYRIGHT_RE.finditer(text)))
        }  # reversed: a notice repeated keeps its first line
        notices = sorted(found, key=found.__getitem__)
        if spdx or notices:
            out.append(LicenseInfo(path, tuple(spdx), tuple(notices), tuple(found[n] for n in notices)))
    return tuple(out)


# --- the pure plan -----------------------------------------------------------------------------------


def plan_sync(
    entries: list[tuple[str, str, Entry]],
    snapshot: SnapshotLike,
    *,
    upstream: str,
    rev: str,
    patches: list[tuple[str, bytes]],
    extra_patch_files: Mapping[str, bytes] | None = None,
    previous: Lock | None = None,
    current: Mapping[str, str | None] | None = None,
    findings: list[TreeFinding] | None = None,
    drop_upstreamed: bool = False,
    prefetch: Callable[[list[str]], None] | None = None,
    tool_version: str = __version__,
    packages: Mapping[str, tuple[str, ...]] | None = None,
    fingerprints: tuple[ggml_facts.Fingerprint, ...] = ggml_facts.FINGERPRINTS,
    behaviour_specs: tuple[ggml_facts.Behaviour, ...] = (),
) -> SyncPlan:
    """Compute the new vendor/ tree and lock. `patches` are vendor/patches/*.patch (name order);
    `extra_patch_files` are other files under vendor/patches/ (kept as they are); `current` maps
    vendor/-relative paths to the sha256 of what is there now; `findings` is check_vendor_dir's result.
    `entries` is the union of every package's ops (Config.all_entries); `packages` (package -> its op keys)
    is recorded in the lock when the project holds more than one package. `fingerprints` and `behaviour_specs`
    are the regions and functions to hash (toolkit.core.package_facts: shared ones and every package's)."""
    behaviour_specs = behaviour.wanted({op for op, _, _ in entries}, {b for _, b, _ in entries}, behaviour_specs)
    if prefetch is not None:  # one round trip for the entries and the always-shipped files (URL upstreams)
        prefetch(_prefetch_paths(entries, behaviour_specs))
    closure = compute_closure(entries, snapshot.read, where=snapshot.commit[:12], prefetch=prefetch)
    pristine = _pristine_files(closure, snapshot)
    patched, results = apply_patches(pristine.files, patches)
    patched_by = _patched_by(results)
    kept = [r for r in results if not (drop_upstreamed and r.verdict == VERDICT_UPSTREAM)]
    file_info = _file_info(patched, pristine, closure, patched_by)
    lock = _make_lock(
        snapshot,
        upstream,
        rev,
        tool_version,
        file_info,
        kept,
        patched,
        closure,
        pristine.files,
        fingerprints,
        behaviour_specs,
        packages,
    )
    lock_text = render_lock(lock)
    desired = _desired_tree(lock_text, patched, dict(patches), kept, extra_patch_files or {})
    now = dict(current or {})
    return SyncPlan(
        lock=lock,
        lock_text=lock_text,
        desired=desired,
        closure=closure,
        patches=tuple(results),
        changes=_changes(desired, now),
        overwrites=_overwrites(findings or [], desired, now),
        previous=previous,
    )


def _make_lock(
    snapshot: SnapshotLike,
    upstream: str,
    rev: str,
    tool_version: str,
    file_info: tuple[LockedFile, ...],
    kept: list[PatchResult],
    patched: Mapping[str, bytes],
    closure: Closure,
    pristine: Mapping[str, bytes],
    fingerprints: tuple[ggml_facts.Fingerprint, ...],
    behaviour_specs: tuple[ggml_facts.Behaviour, ...],
    packages: Mapping[str, tuple[str, ...]] | None,
) -> Lock:
    """The new vendor/UPSTREAM as data."""
    llama_commit, ggml_commit = _recorded_commits(snapshot)
    return Lock(  # one pin for every package of the project
        upstream=upstream,
        layout=snapshot.layout,
        commit=snapshot.commit,
        rev=rev,
        date=snapshot.date,
        subject=snapshot.subject,
        tool_version=tool_version,
        files={f.path: f.sha256 for f in file_info},
        file_info=file_info,
        patches=tuple(LockedPatch(r.name, r.sha256, r.verdict) for r in kept),
        licenses=license_inventory(patched),
        entries=_per_op(closure, "entries"),
        closures=_per_op(closure, "files"),
        fingerprints=fingerprints_of(pristine, fingerprints),
        llama_cpp_commit=llama_commit,
        ggml_commit=ggml_commit,
        behaviour=behaviour.behaviour_of(snapshot.read, behaviour_specs),
        packages=dict(packages) if packages and len(packages) > 1 else {},
    )


def _file_info(
    patched: Mapping[str, bytes], pristine: _Pristine, closure: Closure, patched_by: Mapping[str, list[str]]
) -> tuple[LockedFile, ...]:
    """The lock's record of each vendored file: its bytes' sha256, upstream blob, why and for whom."""
    # A file no upstream path explains was added by a patch: the first patch that touches it says why.
    added = {p: f"added by patch {names[0]}" for p, names in patched_by.items()}
    reasons = {**added, **pristine.reasons}
    return tuple(
        LockedFile(
            path=p,
            sha256=sha256_bytes(patched[p]),
            blob=pristine.blobs.get(p, ""),
            reason=reasons[p],
            needed_by=closure.needed_by.get(p, ()),
            patched_by=tuple(patched_by.get(p, ())),
        )
        for p in sorted(patched)
    )


def _prefetch_paths(entries: list[tuple[str, str, Entry]], specs: tuple[ggml_facts.Behaviour, ...]) -> list[str]:
    """Every path the plan reads before following includes: entries, always-shipped files, behaviour specs."""
    return (
        [alt for _, _, e in entries for alt in e.alternatives]
        + [*ggml_facts.ALWAYS_SHIP, *ggml_facts.OPTIONAL_SHIP, ggml_facts.LLAMA_CPP_SYNC_FILE]
        + sorted({p for spec in specs for p in spec.paths})
    )


@dataclass(frozen=True)
class _Pristine:
    """The vendored files as upstream has them, before our patches: the closure plus the files that always
    ship (license notices)."""

    files: Mapping[str, bytes]  # path -> upstream bytes
    blobs: Mapping[str, str]  # path -> upstream blob id
    reasons: Mapping[str, str]  # path -> why it is vendored


def _pristine_files(closure: Closure, snapshot: SnapshotLike) -> _Pristine:
    """The closure's files and the always-shipped ones read from `snapshot`."""
    pristine: dict[str, bytes] = {}
    blobs: dict[str, str] = {}
    reasons = dict(closure.reasons)
    for path in closure.files:
        pristine[path] = snapshot.read(path) or b""
        blobs[path] = snapshot.blob_id(path) or ""
    for name in ggml_facts.ALWAYS_SHIP + ggml_facts.OPTIONAL_SHIP:
        data = snapshot.read(name, root_fallback=True)
        if data is None:
            if name in ggml_facts.ALWAYS_SHIP:
                raise UpstreamError(
                    f"{name} is missing at {snapshot.commit[:12]}; its notice must travel with the vendored code",
                    "pick a revision of ggml or llama.cpp that has it",
                )
            continue
        pristine[name] = data
        blobs[name] = snapshot.blob_id(name, root_fallback=True) or ""
        reasons[name] = (
            "always ships (license notice)" if name in ggml_facts.ALWAYS_SHIP else "always ships when present"
        )
    return _Pristine(pristine, blobs, reasons)


def _patched_by(results: list[PatchResult]) -> dict[str, list[str]]:
    """path -> the patches that change it, in series order (applied ones: an already-upstream patch changes
    nothing)."""
    patched_by: dict[str, list[str]] = {}
    for r in results:
        if r.verdict != VERDICT_UPSTREAM:
            for p in r.files:
                patched_by.setdefault(p, []).append(r.name)
    return patched_by


def _recorded_commits(snapshot: SnapshotLike) -> tuple[str, str]:
    """(the llama.cpp commit a ggml tree was synced from, the ggml commit a llama.cpp tree carries), each
    "" when the upstream does not record a full commit id."""

    def commit_in(path: str, **kw: bool) -> str:
        data = snapshot.read(path, **kw)
        text = data.decode("ascii", "replace").strip() if data else ""
        return text if re.fullmatch(r"[0-9a-f]{40}", text) else ""

    llama_commit = commit_in(ggml_facts.LLAMA_CPP_SYNC_FILE)
    ggml_commit = (
        commit_in(ggml_facts.GGML_SYNC_FILE, root_fallback=True)
        if snapshot.layout == ggml_facts.LAYOUT_LLAMA_CPP
        else ""
    )
    return llama_commit, ggml_commit


def _per_op(closure: Closure, attr: str) -> dict[str, dict[str, tuple[str, ...]]]:
    """op -> backend -> the closure's `entries` or `files` for that pair (the lock's two tables)."""
    table: dict[str, dict[str, tuple[str, ...]]] = {}
    for oc in closure.ops:
        table.setdefault(oc.op, {})[oc.backend] = getattr(oc, attr)
    return table


def _desired_tree(
    lock_text: str,
    patched: Mapping[str, bytes],
    patch_bytes: Mapping[str, bytes],
    kept: list[PatchResult],
    extra_patch_files: Mapping[str, bytes],
) -> dict[str, bytes]:
    """vendor/-relative path -> bytes of the complete new vendor/: lock, sources, patches, other patch files."""
    desired: dict[str, bytes] = {LOCK_NAME: lock_text.encode()}
    desired.update({f"{SOURCES_DIR}/{p}": data for p, data in patched.items()})
    desired.update({f"{PATCHES_DIR}/{r.name}": patch_bytes[r.name] for r in kept})
    desired.update({f"{PATCHES_DIR}/{p}": data for p, data in extra_patch_files.items()})
    return desired


def _changes(desired: Mapping[str, bytes], current: Mapping[str, str | None]) -> tuple[tuple[str, str], ...]:
    changes: list[tuple[str, str]] = []
    for path in sorted(set(desired) | set(current)):
        if path not in desired:
            changes.append((path, "remove"))
        elif path not in current:
            changes.append((path, "add"))
        elif current[path] != sha256_bytes(desired[path]):
            changes.append((path, "update"))
    return tuple(changes)


def _overwrites(
    findings: list[TreeFinding], desired: Mapping[str, bytes], current: Mapping[str, str | None]
) -> tuple[TreeFinding, ...]:
    """The local changes the new tree would destroy. A local change is only lost if the new tree does not
    hold those same bytes. A lock that contradicts itself (LOCK_CORRUPT) is refused whatever the new bytes:
    the tree can no longer be told apart from a local edit, exactly as `sync --check` reports it."""
    return tuple(
        f
        for f in findings
        if f.kind == LOCK_CORRUPT
        or (f.kind in LOSSY and (f.path not in desired or current.get(f.path) != sha256_bytes(desired[f.path])))
    )


# --- planning against the project ----------------------------------------------------------------------


def read_patches(vendor_dir: Path) -> tuple[list[tuple[str, bytes]], dict[str, bytes]]:
    """(vendor/patches/*.patch in name order, every other file under vendor/patches/ by relative path)."""
    pdir = vendor_dir / PATCHES_DIR
    patches, others = [], {}
    if pdir.is_dir():
        for path in sorted(p for p in pdir.rglob("*") if p.is_file() and not p.is_symlink()):
            rel = path.relative_to(pdir).as_posix()
            if path.parent == pdir and path.suffix == ".patch":
                patches.append((path.name, path.read_bytes()))
            else:
                others[rel] = path.read_bytes()
    return patches, others


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


def _previous_lock(root: Path) -> Lock | None:
    """vendor/UPSTREAM, or the old tree's lock while an interrupted swap awaits recovery (read-only)."""
    vendor = root / "vendor"
    if not vendor.exists() and fs.journal_path(vendor).is_file():
        old, _ = fs.journal_record(vendor)
        return read_lock(old) if old is not None and old.is_dir() else None
    return read_lock(vendor)


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
    step = progress or _quiet
    previous = _previous_lock(cfg.root)
    target = _target(cfg, req, previous)
    step(f"resolving {target.resolve} in {target.upstream}")
    laps = _Laps()
    try:
        source, commit = open_upstream(
            target.upstream, target.resolve, mirror=req.mirror, configured=cfg.upstream, offline=not online
        )
        try:
            rev = _recorded_rev(target.rev, commit, previous)
            return _plan_from(cfg, req, source, commit, rev, previous, step, laps, t0)
        finally:
            source.close()
    except NeedsFetch as need:
        step(f"planned first: {need.what}")
        return Prepared(cfg, req, None, None, current_hashes(cfg.vendor_dir), time.perf_counter() - t0, {}, need.what)


def _plan_from(
    cfg: Config,
    req: SyncRequest,
    source: Source,
    commit: str,
    rev: str,
    previous: Lock | None,
    step: Progress,
    laps: _Laps,
    t0: float,
) -> Prepared:
    """The tree plan and the drift for `commit` of the opened `source`."""
    snapshot = source.snapshot(commit)
    check_recorded(source, snapshot)
    laps.lap("resolve")
    step(f"computing the include closure at {commit[:12]} ({snapshot.layout} layout)")
    vendor = cfg.vendor_dir
    patches, other_patch_files = read_patches(vendor)
    current = current_hashes(vendor)
    plan = plan_sync(
        cfg.all_entries(req.backends),
        snapshot,
        upstream=source.recorded,
        rev=rev,
        patches=patches,
        extra_patch_files=other_patch_files,
        previous=previous,
        current=current,
        findings=check_vendor_dir(vendor, previous) if vendor.exists() else [],
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
    return Prepared(cfg, req, plan, drift, current, time.perf_counter() - t0, laps.timings)


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


# --- execution ---------------------------------------------------------------------------------------


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
        return _execute_locked(prep, progress or _quiet, recovered)


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
    try:  # the state report itself is not interruptible
        old_handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: signals go elsewhere anyway
        old_handler = None
    try:
        recover(cfg.root)  # a journaled swap cut between its renames is rolled back first
        try:
            on_disk = (cfg.vendor_dir / LOCK_NAME).read_text(encoding="utf-8")
        except OSError:
            on_disk = None
        findings = check_vendor_dir(cfg.vendor_dir) if on_disk is not None else []
        reported = drift is not None and all(p.is_file() for p in report_paths(cfg.build_dir, drift))
    finally:
        if old_handler is not None:
            signal.signal(signal.SIGINT, old_handler)
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
