"""vendor/ on disk: compare it with the lock (`check_vendor`) and replace it atomically (`replace_vendor`).

Replacement builds a complete copy of the new vendor/ beside it (`.vendor.stage-*`, patches/ included),
verifies it, then swaps the two directories in one step (toolkit.core.fs.swap_dir: renameat2
RENAME_EXCHANGE, or a journaled two-rename fallback). A crash or SIGKILL at any point therefore leaves
vendor/ either entirely old or entirely new; the next run rolls an interrupted fallback swap back and removes
leftovers (see `recover`). Unchanged files are hard-linked from the old tree, so their bytes and mtimes
survive a sync that changes other files.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from toolkit.core import fs, ggml_facts
from toolkit.core.errors import VendorStateError
from toolkit.core.hashing import git_blob_id, sha256_bytes, sha256_file
from toolkit.core.lock import LOCK_NAME, Lock, read_lock
from toolkit.core.projectlock import SHARED, held_mode, project_lock

if TYPE_CHECKING:
    from toolkit.core.config import Config

PATCHES_DIR = "patches"
SOURCES_DIR = ggml_facts.VENDOR_SUBDIR  # vendor/ggml/<standalone path>
STAGE_PREFIX = ".vendor.stage-"
OLD_PREFIX = ".vendor.old-"
# The test hooks live in toolkit.core.fs (with the swap); re-exported for the tests that import them here.
KILL_ENV, INT_ENV, NO_FSYNC_ENV = fs.KILL_ENV, fs.INT_ENV, fs.NO_FSYNC_ENV
checkpoint = fs.checkpoint

# Kinds of TreeFinding. EDITED and EXTRA would be lost by an overwrite, so sync refuses them without --force;
# MISSING loses nothing (a fresh clone has only the lock) but still makes `sync --check` fail.
EDITED, MISSING, EXTRA, UNLOCKED = "edited", "missing", "extra", "unlocked"
PATCH_ADDED, PATCH_REMOVED, PATCH_EDITED = "patch-added", "patch-removed", "patch-edited"
# The file is the upstream blob the lock names, but the lock's sha256 for it is not that blob's: the lock
# was edited or corrupted. Sync refuses it without --force even when the new tree has the same bytes.
LOCK_CORRUPT = "lock-corrupt"
LOSSY = (EDITED, EXTRA, LOCK_CORRUPT)


@dataclass(frozen=True)
class TreeFinding:
    """One way vendor/ disagrees with vendor/UPSTREAM; `path` is relative to vendor/."""

    kind: str
    path: str
    detail: str = ""

    def line(self) -> str:
        return f"{self.kind:14} vendor/{self.path}" + (f"  ({self.detail})" if self.detail else "")

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind, "path": f"vendor/{self.path}", "detail": self.detail}


# --- reading vendor/ ---------------------------------------------------------------------------------


def tree_on_record(vendor_dir: Path) -> Path:
    """The directory that holds vendor/'s contents as recovery would leave them (toolkit.core.fs.tree_on_record):
    vendor/ itself, or the old tree a killed sync's journaled swap moved aside."""
    return fs.tree_on_record(vendor_dir)


@dataclass(frozen=True)
class VendorState:
    """vendor/ as one walk read it: every entry's sha256, the lock and the patch series. A plan reads it once
    (`read_vendor`) and passes it on; its findings against a lock need no second walk."""

    path: Path  # the directory read (tree_on_record's answer for a plan)
    lock: Lock | None
    hashes: Mapping[str, str | None]  # vendor/-relative path -> sha256 (None: not a regular file), all entries
    patches: tuple[tuple[str, bytes], ...]  # vendor/patches/*.patch in name order
    other_patch_files: Mapping[str, bytes]  # every other regular file under vendor/patches/, by relative path

    @property
    def exists(self) -> bool:
        return self.path.is_dir()

    def findings(self, lock: Lock | None = None) -> list[TreeFinding]:
        """This tree against `lock` (default: its own): edited, missing, extra files and changed patches."""
        return _findings(self, lock if lock is not None else self.lock)


def read_vendor(vendor_dir: Path) -> VendorState:
    """Read `vendor_dir` in one walk (offline, read-only): what `VendorState` holds."""
    vendor_dir = Path(vendor_dir)
    hashes: dict[str, str | None] = {}
    patches: list[tuple[str, bytes]] = []
    others: dict[str, bytes] = {}
    for rel in sorted(_all_files(vendor_dir)) if vendor_dir.is_dir() else ():
        path = vendor_dir / rel
        if path.is_symlink() or not path.is_file():
            hashes[rel] = None
            continue
        data = path.read_bytes()
        hashes[rel] = sha256_bytes(data)
        if rel.startswith(f"{PATCHES_DIR}/"):
            name = rel[len(PATCHES_DIR) + 1 :]
            (patches.append((name, data)) if _is_patch(name) else others.__setitem__(name, data))
    return VendorState(vendor_dir, read_lock(vendor_dir), hashes, tuple(patches), others)


def _is_patch(name: str) -> bool:
    """A patch of the series: vendor/patches/*.patch, directly in patches/."""
    return "/" not in name and Path(name).suffix == ".patch"


def patch_files(vendor_dir: Path) -> list[Path]:
    """vendor/patches/*.patch in application (file name) order."""
    d = vendor_dir / PATCHES_DIR
    return sorted((p for p in d.glob("*.patch") if p.is_file()), key=lambda p: p.name) if d.is_dir() else []


def _file_sha(path: Path) -> str | None:
    """sha256 of a regular file; None for a symlink or anything else (never followed)."""
    if path.is_symlink() or not path.is_file():
        return None
    return sha256_file(path)


def check_vendor_dir(vendor_dir: Path, lock: Lock | None = None) -> list[TreeFinding]:
    """vendor/ against its lock: edited, missing, extra files and changed patches (offline, read-only)."""
    return read_vendor(vendor_dir).findings(lock)


def _findings(state: VendorState, lock: Lock | None) -> list[TreeFinding]:
    present = [p for p in state.hashes if p != LOCK_NAME and not p.startswith(f"{PATCHES_DIR}/")]
    if lock is None:
        return [TreeFinding(UNLOCKED, LOCK_NAME, "no lock: run ggml-vendor sync --rev REV")] + [
            TreeFinding(EXTRA, p, "not in any lock") for p in present
        ]
    expected = {f"{SOURCES_DIR}/{p}": sha for p, sha in lock.files.items()}
    findings = [TreeFinding(EXTRA, rel, "not in vendor/UPSTREAM") for rel in present if rel not in expected]
    for rel, sha in sorted(expected.items()):
        finding = _locked_file_finding(state, lock, rel, sha)
        if finding is not None:
            findings.append(finding)
    findings += _patch_findings(state, lock)
    return sorted(findings, key=lambda f: (f.path, f.kind))


def _locked_file_finding(state: VendorState, lock: Lock, rel: str, sha: str) -> TreeFinding | None:
    """How the vendored file `rel` (vendor/-relative) disagrees with the `sha` its lock records; None if not."""
    path = state.path / rel
    if rel not in state.hashes and not os.path.lexists(path):
        return TreeFinding(MISSING, rel)
    actual = state.hashes.get(rel)
    if actual == sha:
        return None
    blob = _unpatched_blob(lock, rel) if actual is not None else ""
    if blob and git_blob_id(path.read_bytes()) == blob:  # only a file that differs is read again
        detail = f"the file is the locked upstream blob {blob[:12]}, but the lock says sha256 {sha[:12]}"
        return TreeFinding(LOCK_CORRUPT, rel, detail)
    detail = "not a regular file" if actual is None else f"sha256 {actual[:12]} != locked {sha[:12]}"
    return TreeFinding(EDITED, rel, detail)


def _unpatched_blob(lock: Lock, rel: str) -> str:
    """The upstream blob id the lock names for `rel` when no patch changes it ("" otherwise): a file that is
    still that blob was not edited, so a sha256 that disagrees means the lock itself was changed."""
    info = lock.info(rel[len(SOURCES_DIR) + 1 :])
    return info.blob if info is not None and not info.patched_by else ""


def _series_hashes(state: VendorState) -> dict[str, str]:
    """patch name -> sha256 of vendor/patches/*.patch (a link to a file counts as that file, as git shows it)."""
    out: dict[str, str] = {}
    for rel, sha in state.hashes.items():
        name = rel[len(PATCHES_DIR) + 1 :] if rel.startswith(f"{PATCHES_DIR}/") else ""
        if not _is_patch(name):
            continue
        if sha is None and (state.path / rel).is_file():
            sha = sha256_file(state.path / rel)
        if sha is not None:
            out[name] = sha
    return out


def _patch_findings(state: VendorState, lock: Lock) -> list[TreeFinding]:
    """vendor/patches/*.patch against the series the lock recorded: added, removed or edited since sync."""
    locked = {p.name: p.sha256 for p in lock.patches}
    current = _series_hashes(state)
    findings: list[TreeFinding] = []
    for name in sorted(set(locked) | set(current)):
        rel = f"{PATCHES_DIR}/{name}"
        if name not in current:
            findings.append(TreeFinding(PATCH_REMOVED, rel, "locked patch is gone: re-run sync"))
        elif name not in locked:
            findings.append(TreeFinding(PATCH_ADDED, rel, "not applied yet: re-run sync"))
        elif locked[name] != current[name]:
            findings.append(TreeFinding(PATCH_EDITED, rel, "changed since sync: re-run sync"))
    return findings


def check_vendor(cfg: Config) -> list[TreeFinding]:
    """The project's vendor/ against vendor/UPSTREAM; [] means clean. Used by verify/publish to refuse a
    dirty tree. Pure: while a killed sync's swap awaits recovery it reads the tree recovery puts back
    (`tree_on_record`), so it never reports a half state and never writes (a plan may call it)."""
    return read_vendor(tree_on_record(cfg.vendor_dir)).findings()


def current_hashes(vendor_dir: Path) -> dict[str, str | None]:
    """vendor-relative path -> sha256 (None for non-regular files) of everything vendor/ holds, the lock
    and patches included."""
    return {p: _file_sha(vendor_dir / p) for p in _all_files(vendor_dir)} if Path(vendor_dir).is_dir() else {}


def read_patches(vendor_dir: Path) -> tuple[list[tuple[str, bytes]], dict[str, bytes]]:
    """(vendor/patches/*.patch in name order, every other file under vendor/patches/ by relative path)."""
    state = read_vendor(vendor_dir)
    return list(state.patches), dict(state.other_patch_files)


# --- atomic replacement ------------------------------------------------------------------------------


def recover(root: Path) -> list[str]:
    """Finish what an interrupted replacement left behind: roll back a half-done journaled swap, then
    delete stage and old trees (toolkit.core.fs). Returns what it did (for the report). Safe to call any
    time; skipped while another process holds the project lock."""
    root = Path(root)
    actions: list[str] = []
    if held_mode(root) == SHARED:
        return actions  # a reader: no writer is active, and a reader never writes
    try:
        ctx = project_lock(root, command="sync", wait=False)
        ctx.__enter__()
    except (VendorStateError, OSError):
        return actions
    try:
        vendor = root / "vendor"
        actions += fs.recover_swap(vendor)
        # we hold the project lock exclusively: every stage/old tree is a dead run's
        for prefix in (STAGE_PREFIX, OLD_PREFIX):
            actions += [f"removed leftover {n}" for n in fs.stale_staging(root, prefix, only_dead=False)]
    finally:
        ctx.__exit__(None, None, None)
    return actions


def _safe_join(base: Path, rel: str) -> Path:
    """base/rel, refusing anything that could land outside base (absolute, .., empty parts)."""
    parts = rel.split("/")
    if rel.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\\" in rel or "\0" in rel:
        raise VendorStateError(
            f"refusing to write {rel!r}: it would land outside vendor/",
            "check the upstream tree and vendor/patches for odd paths",
        )
    return base.joinpath(*parts)


def replace_vendor(root: Path, desired: Mapping[str, bytes], *, known: Mapping[str, str] | None = None) -> list[str]:
    """Make vendor/ hold exactly `desired` (vendor-relative path -> bytes), atomically.

    `known` maps vendor-relative paths to the sha256 of what vendor/ holds now (current_hashes); files whose
    bytes do not change are hard-linked from the old tree, which keeps their mtimes. Returns the paths
    actually written (new bytes)."""
    fs.reset_checkpoints()
    root = Path(root)
    vendor = root / "vendor"
    if vendor.is_symlink() or (vendor.exists() and not vendor.is_dir()):
        raise VendorStateError(
            f"{vendor} is not a plain directory", "replace it with a directory (or remove it) and retry"
        )
    with project_lock(root, command="sync", wait=False):
        stage = fs.new_staging(root, STAGE_PREFIX)
        try:
            (stage / PATCHES_DIR).mkdir()  # always there, even empty: it is where users put patches
            checkpoint("stage created")
            written = _fill_stage(stage, vendor, desired, known or {})
            _verify_stage(stage, desired)
            fs.fsync_dir(stage)
            checkpoint("staged and verified")
            fs.swap_dir(stage, vendor)
        finally:
            if stage.exists():
                shutil.rmtree(stage, ignore_errors=True)
        checkpoint("cleaned")
    return written


def _fill_stage(stage: Path, vendor: Path, desired: Mapping[str, bytes], known: Mapping[str, str]) -> list[str]:
    """Write `desired` under `stage`, hard-linking unchanged files from `vendor`; returns the paths written."""
    written: list[str] = []
    for rel in sorted(desired):
        data = desired[rel]
        dest = _safe_join(stage, rel)
        dest.parent.mkdir(parents=True, exist_ok=True)
        old = vendor / rel
        if known.get(rel) == sha256_bytes(data) and old.is_file() and not old.is_symlink():
            try:
                os.link(old, dest)
                checkpoint(f"linked {rel}")
                continue
            except OSError:
                pass  # another filesystem or no hard links: fall through to a copy
        fs.write_new(dest, data)
        written.append(rel)
        checkpoint(f"wrote {rel}")
    return written


def _verify_stage(stage: Path, desired: Mapping[str, bytes]) -> None:
    """The staged tree holds exactly the desired bytes, nothing else (checked before it becomes visible)."""
    staged = {p: _file_sha(stage / p) for p in _all_files(stage)}
    want = {p: sha256_bytes(b) for p, b in desired.items()}
    if staged == want:
        return
    bad = sorted({p for p, _ in set(staged.items()) ^ set(want.items())})
    shown = ", ".join(f"vendor/{p}" for p in bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
    raise VendorStateError(
        f"the staged vendor/ tree does not hold the planned bytes ({shown}); vendor/ was not changed",
        "something else wrote vendor/ meanwhile: re-run ggml-vendor sync",
    )


def _all_files(base: Path) -> list[str]:
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
        rel = os.path.relpath(dirpath, base)
        names = filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        out += [os.path.normpath(os.path.join(rel, f)).replace(os.sep, "/") for f in names]
    return out
