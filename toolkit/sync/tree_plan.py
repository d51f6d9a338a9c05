"""The pure sync plan: `plan_sync` computes the new vendor/ tree and lock from a snapshot-like object
(anything with commit/layout/date/subject and `read`) and what vendor/ holds now, so plans are unit-tested
without git. It reads nothing from disk and writes nothing."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from toolkit import __version__
from toolkit.core import ggml_facts
from toolkit.core.errors import UpstreamError
from toolkit.core.hashing import sha256_bytes
from toolkit.core.lock import (
    LOCK_NAME,
    VERDICT_UPSTREAM,
    Lock,
    LockedFile,
    LockedPatch,
    render_lock,
)
from toolkit.core.package_table import Entry
from toolkit.sync import behaviour
from toolkit.sync.closure import Closure, compute_closure
from toolkit.sync.drift import fingerprints_of
from toolkit.sync.licenses import license_inventory
from toolkit.sync.patches import PatchResult, apply_patches
from toolkit.sync.vendor_tree import LOCK_CORRUPT, LOSSY, PATCHES_DIR, SOURCES_DIR, TreeFinding


class SnapshotLike(Protocol):
    commit: str
    layout: str
    date: str
    subject: str

    def read(self, path: str, *, root_fallback: bool = False) -> bytes | None: ...

    def blob_id(self, path: str, *, root_fallback: bool = False) -> str | None: ...


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
