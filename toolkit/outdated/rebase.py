"""Our patch series carried from one pin to another by a three-way apply, in memory.

For each patch, in name order: the patch applies as it is at the new pin (kept byte for byte), or upstream
already carries it (its reverse applies, or the three-way result is the new upstream file itself: dropped), or
its hunks no longer apply as they are but `git merge-file` merges the change (pin before, pin before + patch,
new pin) without a conflict: the patch is rewritten against the new pin, its message and author kept. Anything
else is a conflict, named by patch, file and hunk. Nothing here writes outside a private temporary directory.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from toolkit.core.errors import PatchError
from toolkit.core.lock import VERDICT_APPLIED, VERDICT_UPSTREAM
from toolkit.sync.patch_workflow import format_patch
from toolkit.sync.patches import apply_patches, describe, message_of

KEPT = "applies"  # applies as it is
REBASED = "rebased"  # rewritten by the three-way apply
UPSTREAM = "already-upstream"  # upstream carries it in full: dropped
CONFLICT = "conflicts"


@dataclass(frozen=True)
class Rebased:
    """One patch's fate at the new pin."""

    name: str
    description: str
    verdict: str  # KEPT | REBASED | UPSTREAM | CONFLICT
    data: bytes | None  # the patch to keep (None: dropped or in conflict)
    detail: str = ""  # a conflict's "hunk #N `@@ ... @@` of PATH"; what a rebase merged

    def line(self) -> str:
        state = {
            KEPT: "applies",
            REBASED: "rebased by a three-way apply" + (f" ({self.detail})" if self.detail else ""),
            UPSTREAM: "already upstream: dropped",
            CONFLICT: f"conflicts at {self.detail}",
        }[self.verdict]
        return f"{self.name}: {state}" + (f" — {self.description}" if self.description else "")

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "description": self.description, "verdict": self.verdict, "detail": self.detail}


_FROM_RE = re.compile(r"^From: (.+?) <([^>]*)>$", re.M)
_DATE_RE = re.compile(r"^Date: .*$", re.M)


def _author(data: bytes) -> tuple[str, str]:
    m = _FROM_RE.search(data.decode("utf-8", "replace").partition("\n\n")[0])
    return (m.group(1), m.group(2)) if m else ("ggml-vendor", "ggml-vendor@localhost")


def _keep_date(new: bytes, old: bytes) -> bytes:
    """The rebased patch keeps the original's Date header, so a rebase of the same inputs is the same bytes."""
    old_date = _DATE_RE.search(old.decode("utf-8", "replace").partition("\n\n")[0])
    text = new.decode("utf-8", "surrogateescape")
    if old_date is None:
        return new
    return _DATE_RE.sub(lambda _m: old_date.group(0), text, count=1).encode("utf-8", "surrogateescape")


def merge_file(current: bytes, base: bytes, other: bytes) -> tuple[bytes, int]:
    """`git merge-file -p current base other`: (merged bytes, number of conflicts)."""
    with tempfile.TemporaryDirectory(prefix="ggml-vendor-rebase-") as tmp:
        names = []
        for label, data in (("new-pin", current), ("old-pin", base), ("patched", other)):
            path = Path(tmp) / label
            path.write_bytes(data)
            names.append(str(path))
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env["GIT_CONFIG_NOSYSTEM"] = "1"
        proc = subprocess.run(
            ["git", "merge-file", "-p", "-L", "new pin", "-L", "old pin", "-L", "patch", *names],
            capture_output=True,
            env=env,
            check=False,
        )
    if proc.returncode < 0 or proc.returncode > 127:
        raise PatchError(f"git merge-file failed: {proc.stderr.decode(errors='replace').strip()}", None)
    return proc.stdout, proc.returncode


def _where(exc: PatchError) -> str:
    return str(getattr(exc, "where", None) or exc.message)


@dataclass
class _Trees:
    old: dict[str, bytes]  # the old pin with the series so far applied
    new: dict[str, bytes]  # the new pin with the rebased series so far applied


def _three_way(name: str, data: bytes, trees: _Trees, where: str) -> Rebased:
    """The patch merged onto the new pin, or the conflict that stops it."""
    desc = describe(data)
    try:
        after_old, _ = apply_patches(trees.old, [(name, data)])
    except PatchError as exc:  # it does not even apply at the old pin: nothing to merge from
        return Rebased(name, desc, CONFLICT, None, _where(exc))
    touched = sorted(p for p in set(after_old) | set(trees.old) if after_old.get(p) != trees.old.get(p))
    merged: dict[str, bytes] = {}
    for path in touched:
        base, ours, theirs = trees.old.get(path), after_old.get(path), trees.new.get(path)
        if base is None or ours is None or theirs is None:
            return Rebased(name, desc, CONFLICT, None, f"{path} (added, removed or no longer vendored)")
        result, conflicts = merge_file(theirs, base, ours)
        if conflicts:
            return Rebased(name, desc, CONFLICT, None, where)
        merged[path] = result
    trees.old = after_old
    if all(merged[p] == trees.new[p] for p in merged):
        return Rebased(name, desc, UPSTREAM, None, "the three-way result is the new upstream file")
    before = {p: trees.new[p] for p in merged}
    patch = format_patch(before, merged, message_of(data) or name, author=_author(data))
    trees.new = {**trees.new, **merged}
    return Rebased(name, desc, REBASED, _keep_date(patch, data), ", ".join(merged))


def rebase_series(
    old_files: Mapping[str, bytes], new_files: Mapping[str, bytes], patches: list[tuple[str, bytes]]
) -> tuple[Rebased, ...]:
    """Each patch of the series carried from `old_files` (the pristine old pin) to `new_files` (the pristine new
    pin), never raising for a conflict: a conflicting patch is reported and the ones after it are tried without
    it (as `patch list` does)."""
    trees = _Trees(dict(old_files), dict(new_files))
    out: list[Rebased] = []
    for name, data in patches:
        try:
            new_tree, (res,) = apply_patches(trees.new, [(name, data)])
        except PatchError as exc:
            out.append(_three_way(name, data, trees, _where(exc)))
            continue
        try:
            trees.old, _ = apply_patches(trees.old, [(name, data)])
        except PatchError:
            pass  # it applies at the new pin only (written for it already): the old tree just lacks it
        if res.verdict == VERDICT_UPSTREAM:
            out.append(Rebased(name, describe(data), UPSTREAM, None, "its reverse applies at the new pin"))
        else:
            assert res.verdict == VERDICT_APPLIED
            trees.new = new_tree
            out.append(Rebased(name, describe(data), KEPT, data))
    return tuple(out)


def first_conflict(results: tuple[Rebased, ...]) -> PatchError | None:
    """The error that stops an update: the first conflicting patch, its file and hunk."""
    for r in results:
        if r.verdict == CONFLICT:
            err = PatchError(
                f"patch {r.name} conflicts at the new pin: {r.detail} does not apply, even by a three-way merge; "
                "vendor/ was not changed",
                f"refresh vendor/patches/{r.name} by hand (ggml-vendor patch save after syncing), or drop it, "
                "then run the update again",
            )
            err.where = r.detail  # type: ignore[attr-defined]
            return err
    return None


__all__ = ["CONFLICT", "KEPT", "REBASED", "UPSTREAM", "Rebased", "first_conflict", "merge_file", "rebase_series"]
