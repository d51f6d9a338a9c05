"""`ggml-vendor patch save | list | drop`: keep our changes to the vendored ggml as a patch series.

Each verb is a plan (`plan_save`, `plan_drop`: computed, nothing written; what --dry-run prints) and an
execute (`execute_save`, `execute_drop`: one atomic swap of vendor/); `list_patches` only reads.

save  diffs the edited vendor/ggml against the pinned upstream with the patches *before* it applied (the
      later ones, which may build on it, taken back off the edited tree first), writes
      vendor/patches/NNNN-name.patch in `git format-patch` form (the description as its message) and
      re-locks vendor/ in one atomic swap, after checking that the series reproduces the edits exactly.
list  each patch's description and health at the pin, or at another revision (--rev), changing nothing:
      applies / already-upstream / conflicts at hunk N.
drop  removes a patch and un-applies it (vendor/ re-materialised from the pin and the rest of the series).

Bad input (no pin, no edits, edits outside the vendored files, a pin that vendor/ does not match) is one
VendorError with nothing written. Beside it: patch_plans.py (the plans and reports), patch_checks.py (the
refusals before a save diffs anything), patch_names.py (which patch NAME designates, the file a save writes),
patch_format.py (the patch file, written by git format-patch) and patch_stage.py (save and drop through the
stage protocol).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from toolkit.core.config import Config
from toolkit.core.errors import Interrupted, PatchError, VendorStateError
from toolkit.core.hashing import sha256_bytes
from toolkit.core.lock import LOCK_NAME, VERDICT_APPLIED, Lock, read_lock
from toolkit.sync import embedded
from toolkit.sync.patch_checks import check_pin
from toolkit.sync.patch_format import format_patch, git_identity
from toolkit.sync.patch_names import check_name, save_target
from toolkit.sync.patch_names import match as match_patch
from toolkit.sync.patch_plans import (
    HEALTH_APPLIES,
    HEALTH_CONFLICT,
    HEALTH_UPSTREAM,
    DropPlan,
    DropReport,
    ListReport,
    PatchHealth,
    SavePlan,
    SaveResult,
)
from toolkit.sync.patches import apply_patches, describe, unapply_patches
from toolkit.sync.tree_plan import SyncPlan, plan_sync
from toolkit.sync.vendor_tree import (
    SOURCES_DIR,
    current_hashes,
    recover,
    replace_vendor,
)

__all__ = [
    "plan_save",
    "execute_save",
    "plan_drop",
    "execute_drop",
    "list_patches",
    "check_series",
    "interrupted",
    "patch_descriptions",
    "format_patch",
    "SavePlan",
    "SaveResult",
    "DropPlan",
    "DropReport",
    "ListReport",
    "PatchHealth",
    "HEALTH_APPLIES",
    "HEALTH_UPSTREAM",
    "HEALTH_CONFLICT",
]

# --- internals -----------------------------------------------------------------------------------------


def _series(cfg: Config) -> tuple[list[tuple[str, bytes]], dict[str, bytes]]:
    from toolkit.sync.vendor_tree import read_patches

    return read_patches(cfg.vendor_dir)


def _require_lock(cfg: Config) -> Lock:
    lock = read_lock(cfg.vendor_dir)
    if lock is None:
        raise VendorStateError("vendor/ has no pin (no vendor/UPSTREAM)", "run ggml-vendor sync --rev REV first")
    return lock


def _pristine_plan(
    cfg: Config, lock: Lock, patches: list[tuple[str, bytes]], *, rev: str | None, mirror: Path | None, **kw: Any
) -> SyncPlan:
    """plan_sync of `patches` at `rev` (None: the pinned commit) of the lock's upstream."""
    from toolkit.sync.project_plan import family_facts
    from toolkit.sync.upstream import open_upstream

    if rev is None:
        resolve = embedded.BRANCH if lock.upstream == embedded.EMBEDDED else lock.commit
    else:
        resolve = rev
    source, commit = open_upstream(lock.upstream, resolve, mirror=mirror)
    try:
        snapshot = source.snapshot(commit)
        return plan_sync(
            cfg.all_entries(None),
            snapshot,
            upstream=source.recorded,
            rev=lock.rev if rev is None else rev,
            patches=patches,
            previous=lock,
            prefetch=snapshot.prefetch,
            **family_facts(cfg),
            **kw,
        )
    finally:
        source.close()


def _sources(desired: Mapping[str, bytes]) -> dict[str, bytes]:
    prefix = f"{SOURCES_DIR}/"
    return {p[len(prefix) :]: b for p, b in desired.items() if p.startswith(prefix)}


# --- the three verbs ---------------------------------------------------------------------------------


def plan_save(cfg: Config, name: str, message: str | None, *, mirror: Path | None = None) -> SavePlan:
    """What `patch save` would write: vendor/patches/NNNN-<name>.patch made from the edits in vendor/ggml
    (or refreshed), the series checked to reproduce the edits exactly, and the re-locked vendor/. Writes
    nothing."""
    check_name(name)
    lock = _require_lock(cfg)
    edited = check_pin(cfg, lock, allow_edits=True)
    patches, others_files = _series(cfg)
    save = save_target(name, message, patches, edited)
    target = save.name
    others = [(n, b) for n, b in patches if n != target]
    # The patch is a diff against the pin plus the patches *before* it in the series; the ones after it
    # may build on it, so they are taken back off the edited tree first and checked on top again below.
    names = [n for n, _ in patches]
    at = names.index(target) if save.refreshed else len(patches)
    before, later = patches[:at], patches[at + 1 :]
    baseline = _sources(_pristine_plan(cfg, lock, before, rev=None, mirror=mirror).desired)
    base_dir = cfg.vendor_dir / SOURCES_DIR
    current = {p: (base_dir / p).read_bytes() for p in lock.files}
    mine = _without_later(baseline, current, patches[at] if save.refreshed else None, later)
    changed = sorted(p for p in {*mine, *baseline} if mine.get(p) != baseline.get(p))
    if not changed:
        raise PatchError(
            f"no edits to save: vendor/ggml equals the pin with the other patches applied ({target} would be empty)",
            f"edit files under vendor/ggml, or drop it: ggml-vendor patch drop {target}",
        )
    data = format_patch(
        {p: baseline[p] for p in changed if p in baseline},
        {p: mine[p] for p in changed if p in mine},
        save.message,
        author=git_identity(cfg.root),
    )
    try:
        plan = _pristine_plan(
            cfg,
            lock,
            sorted([*others, (target, data)]),
            rev=None,
            mirror=mirror,
            extra_patch_files=others_files,
            current=current_hashes(cfg.vendor_dir),
        )
    except PatchError as exc:
        raise _later_conflict(target, exc) from None
    _check_reproduces(plan.desired, current, target)
    added, removed = _counts(data)
    result = SaveResult(target, describe(data), save.refreshed, tuple(changed), added, removed, False)
    return SavePlan(cfg.root, plan.desired, result)


def _without_later(
    baseline: Mapping[str, bytes],
    current: Mapping[str, bytes],
    refreshed: tuple[str, bytes] | None,
    later: list[tuple[str, bytes]],
) -> dict[str, bytes]:
    """The edited tree as it stands right after the patch being saved: `current` with the `later` patches
    of the series that apply (on the pin, the patches before, and the old version of the refreshed one)
    taken back off; a later patch already upstream was never applied and stays out of it."""
    if not later:
        return dict(current)
    series = ([refreshed] if refreshed is not None else []) + later
    _, results = apply_patches(baseline, series)
    applied = [p for p, r in zip(series, results, strict=True) if r.verdict == VERDICT_APPLIED and p in later]
    return unapply_patches(current, applied)


def _later_conflict(target: str, exc: PatchError) -> PatchError:
    """A later patch that no longer applies on top of the saved `target`, worded for `patch save`: sync's
    words ("does not apply at the new pin", "re-run sync") would send the user to a pin that did not move."""
    name, where = getattr(exc, "patch", None), getattr(exc, "where", None)
    if name is None or where is None or name == target:
        return exc
    return PatchError(
        f"with {target} saved, the later patch {name} no longer applies on top of it ({where} conflicts); "
        "nothing was written",
        f"keep the lines {name} builds on as they were, or save the edits as a new patch after it "
        "(ggml-vendor patch save NEW-NAME -m '...')",
    )


def _check_reproduces(desired: Mapping[str, bytes], current: Mapping[str, bytes], target: str) -> None:
    got = _sources(desired)
    mismatch = [p for p in current if got.get(p) != current[p]]
    if mismatch:
        raise PatchError(
            f"the series with {target} does not reproduce the edits of vendor/{SOURCES_DIR}/{mismatch[0]} "
            "(a later patch overlaps them)",
            "save the edits under a name that sorts after the patches they build on; nothing was written",
        )


def _counts(data: bytes) -> tuple[int, int]:
    """(lines added, lines removed) by a patch."""
    diff_lines = data.decode("utf-8", "replace").partition("\ndiff --git ")[2].splitlines()
    added = sum(1 for ln in diff_lines if ln.startswith("+") and not ln.startswith("+++"))
    removed = sum(1 for ln in diff_lines if ln.startswith("-") and not ln.startswith("---"))
    return added, removed


def _write_vendor(root: Path, desired: Mapping[str, bytes]) -> None:
    vendor = root / "vendor"
    replace_vendor(root, desired, known={k: v for k, v in current_hashes(vendor).items() if v})


def execute_save(plan: SavePlan) -> SaveResult:
    """Write the planned patch and re-lock vendor/ in one atomic swap."""
    _write_vendor(plan.root, plan.desired)
    return replace(plan.result, written=True)


def check_series(files: Mapping[str, bytes], patches: list[tuple[str, bytes]]) -> list[PatchHealth]:
    """Each patch's health on `files` in series, never raising: a conflicting patch is reported and the
    ones after it are checked on the tree without it."""
    tree = dict(files)
    out: list[PatchHealth] = []
    for name, data in patches:
        sha = sha256_bytes(data)
        try:
            tree, (res,) = apply_patches(tree, [(name, data)])
        except PatchError as exc:
            where = getattr(exc, "where", None) or exc.message
            out.append(PatchHealth(name, describe(data), sha, HEALTH_CONFLICT, where))
            continue
        health = HEALTH_APPLIES if res.verdict == VERDICT_APPLIED else HEALTH_UPSTREAM
        out.append(PatchHealth(name, describe(data), sha, health))
    return out


def list_patches(cfg: Config, *, rev: str | None = None, mirror: Path | None = None) -> ListReport:
    """Each patch's health at the pin (or at `rev`). Reads the upstream; writes nothing."""
    lock = _require_lock(cfg)
    patches, _ = _series(cfg)
    plan = _pristine_plan(cfg, lock, [], rev=rev, mirror=mirror)
    return ListReport(rev, plan.lock.commit, tuple(check_series(_sources(plan.desired), patches)))


def plan_drop(cfg: Config, name: str, *, mirror: Path | None = None) -> DropPlan:
    """What `patch drop` would do: vendor/patches/<name> removed and un-applied (vendor/ from the pin and
    the rest of the series). Writes nothing."""
    lock = _require_lock(cfg)
    patches, others_files = _series(cfg)
    target = match_patch([n for n, _ in patches], name)
    if target is None:
        have = ", ".join(n for n, _ in patches) or "none"
        raise PatchError(f"no patch named {name!r} in vendor/patches (have: {have})", "ggml-vendor patch list")
    check_pin(cfg, lock, allow_edits=False)
    rest = [(n, b) for n, b in patches if n != target]
    try:
        plan = _pristine_plan(
            cfg,
            lock,
            rest,
            rev=None,
            mirror=mirror,
            extra_patch_files=others_files,
            current=current_hashes(cfg.vendor_dir),
        )
    except PatchError as exc:
        raise PatchError(
            f"without {target} the series no longer applies: {exc.message}",
            "refresh the later patches first; nothing was written",
        ) from None
    return DropPlan(cfg.root, plan.desired, target)


def execute_drop(plan: DropPlan) -> DropReport:
    """Carry the drop out: vendor/ re-locked without the patch, in one atomic swap."""
    _write_vendor(plan.root, plan.desired)
    return DropReport(plan.dropped, True)


def interrupted(plan: SavePlan | DropPlan) -> Interrupted:
    """The Interrupted error (exit 130) for a Ctrl-C of `patch save` / `patch drop` after the plan was made,
    the report's printing included: whether vendor/ holds the new series, read back from its lock (a swap a
    kill cut between its renames rolled back first)."""
    recover(plan.root)
    try:
        on_disk = (plan.root / "vendor" / LOCK_NAME).read_bytes()
    except OSError:
        on_disk = None
    if isinstance(plan, SavePlan):
        done = f"vendor/ holds the saved vendor/patches/{plan.result.name} and its lock (read back from disk)"
    else:
        done = f"vendor/ holds the series without vendor/patches/{plan.dropped} (read back from disk)"
    if on_disk == plan.desired.get(LOCK_NAME):
        return Interrupted(done, "nothing to undo")
    return Interrupted("vendor/ is as it was: nothing was written (read back from disk)", "run the command again")


def patch_descriptions(vendor_dir: Path) -> dict[str, str]:
    """vendor/patches/*.patch name -> one-line description (for status, the drift report and the card)."""
    d = vendor_dir / "patches"
    if not d.is_dir():
        return {}
    return {p.name: describe(p.read_bytes()) for p in sorted(d.glob("*.patch")) if p.is_file()}


__all__ = [
    "HEALTH_APPLIES",
    "HEALTH_CONFLICT",
    "HEALTH_UPSTREAM",
    "PatchHealth",
    "DropPlan",
    "DropReport",
    "ListReport",
    "SavePlan",
    "SaveResult",
    "check_series",
    "execute_drop",
    "execute_save",
    "format_patch",
    "interrupted",
    "list_patches",
    "patch_descriptions",
    "plan_drop",
    "plan_save",
]
