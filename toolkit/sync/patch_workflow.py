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
VendorError with nothing written.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from toolkit.core.config import Config
from toolkit.core.errors import Interrupted, PatchError, VendorStateError
from toolkit.core.lock import LOCK_NAME, VERDICT_APPLIED, VERDICT_UPSTREAM, Lock, read_lock, sha256_bytes
from toolkit.sync import embedded
from toolkit.sync.outcome import Succeeded
from toolkit.sync.patches import apply_patches, describe, lay_files, message_of, unapply_patches
from toolkit.sync.tree_plan import SyncPlan, plan_sync
from toolkit.sync.vendor_tree import (
    EDITED,
    EXTRA,
    SOURCES_DIR,
    check_vendor_dir,
    current_hashes,
    recover,
    replace_vendor,
)

HEALTH_APPLIES = "applies"
HEALTH_UPSTREAM = VERDICT_UPSTREAM
HEALTH_CONFLICT = "conflicts"

MAX_NAME = 100  # NNNN-<name>.patch stays far below the 255 bytes a file name may have
_NAME_RE = re.compile(r"^(?:(\d{4})-)?([A-Za-z0-9][A-Za-z0-9._-]*?)(?:\.patch)?$")


@dataclass(frozen=True)
class PatchHealth:
    name: str
    description: str
    sha256: str
    health: str  # HEALTH_APPLIES | HEALTH_UPSTREAM | HEALTH_CONFLICT
    detail: str = ""  # for a conflict: which hunk of which file

    def line(self) -> str:
        state = f"conflicts at {self.detail}" if self.health == HEALTH_CONFLICT else self.health
        return f"{self.name}: {state}" + (f" — {self.description}" if self.description else "")

    def to_json(self) -> dict[str, str]:
        return asdict(self)  # every field is a string: the JSON is the record itself


@dataclass(frozen=True)
class SaveResult(Succeeded):
    """`patch save`'s Report (stage protocol): the patch written, or with `written` false what a dry run
    would write."""

    name: str
    description: str
    refreshed: bool
    files: tuple[str, ...]
    added: int
    removed: int
    written: bool

    def lines(self) -> list[str]:
        verb = (
            ("refreshed" if self.refreshed else "saved")
            if self.written
            else ("would refresh" if self.refreshed else "would save")
        )
        head = (
            f"{verb} vendor/patches/{self.name}: {len(self.files)} file(s), +{self.added} -{self.removed}"
            f" — {self.description}"
        )
        return [head] + [f"  {f}" for f in self.files]

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "path": f"vendor/patches/{self.name}",
            "description": self.description,
            "refreshed": self.refreshed,
            "files": list(self.files),
            "lines_added": self.added,
            "lines_removed": self.removed,
            "written": self.written,
        }


@dataclass(frozen=True)
class SavePlan:
    """`patch save`'s Plan: the new vendor/ (series and lock included) and the report it makes."""

    root: Path
    desired: Mapping[str, bytes]
    result: SaveResult  # written=False

    def lines(self) -> list[str]:
        return self.result.lines()

    def to_json(self) -> dict[str, object]:
        return self.result.to_json()


@dataclass(frozen=True)
class ListReport(Succeeded):
    """`patch list`'s Report: each patch's health at `commit` (`rev`, or the pin when rev is None)."""

    rev: str | None
    commit: str
    health: tuple[PatchHealth, ...]

    def lines(self, verbose: bool = False) -> list[str]:
        where = f"{self.rev} ({self.commit[:12]})" if self.rev else f"the pin ({self.commit[:12]})"
        if not self.health:
            return [f"no patches in vendor/patches (checked at {where})"]
        bad = sum(h.health == HEALTH_CONFLICT for h in self.health)
        out = [f"{len(self.health)} patch(es) at {where}" + (f": {bad} conflict(s)" if bad else "")]
        for h in self.health:
            out.append(f"  {h.line()}")
            if verbose:
                out.append(f"    {h.to_json()}")
        return out

    def to_json(self) -> dict[str, object]:
        return {"rev": self.rev, "commit": self.commit, "patches": [h.to_json() for h in self.health]}


@dataclass(frozen=True)
class DropReport(Succeeded):
    """`patch drop`'s Report (and, with `written` false, its Plan's printout)."""

    dropped: str
    written: bool

    def lines(self) -> list[str]:
        return [f"{'dropped' if self.written else 'would drop'} vendor/patches/{self.dropped}"]

    def to_json(self) -> dict[str, object]:
        return {"dropped": self.dropped, "written": self.written}


@dataclass(frozen=True)
class DropPlan:
    root: Path
    desired: Mapping[str, bytes]
    dropped: str

    def lines(self) -> list[str]:
        return DropReport(self.dropped, False).lines()

    def to_json(self) -> dict[str, object]:
        return DropReport(self.dropped, False).to_json()


# --- internals -----------------------------------------------------------------------------------------


def _series(cfg: Config) -> tuple[list[tuple[str, bytes]], dict[str, bytes]]:
    from toolkit.sync.vendor_tree import read_patches

    return read_patches(cfg.vendor_dir)


def _require_lock(cfg: Config) -> Lock:
    lock = read_lock(cfg.vendor_dir)
    if lock is None:
        raise VendorStateError("vendor/ has no pin (no vendor/UPSTREAM)", "run ggml-vendor sync --rev REV first")
    return lock


def _match(existing: list[str], name: str) -> str | None:
    """The file in `existing` that `name` designates: its file name, without `.patch`, or without `NNNN-`."""
    for n in existing:
        stem = n.removesuffix(".patch")
        if name in (n, stem) or (re.match(r"^\d{4}-", stem) and name == stem[5:]):
            return n
    return None


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


def _git_identity(root: Path) -> tuple[str, str]:
    def get(key: str) -> str:
        r = subprocess.run(["git", "-C", str(root), "config", key], capture_output=True, text=True, check=False)
        return r.stdout.strip()

    return get("user.name") or "ggml-vendor", get("user.email") or "ggml-vendor@localhost"


def format_patch(
    before: Mapping[str, bytes], after: Mapping[str, bytes], message: str, *, author: tuple[str, str]
) -> bytes:
    """`git format-patch` of the change `before` -> `after` (paths relative to vendor/ggml), with `message`
    (first line the subject) as the commit message. Made in a private temporary repository."""
    with tempfile.TemporaryDirectory(prefix="ggml-vendor-save-") as tmp:
        work = Path(tmp) / "ggml"
        work.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env.update(
            GIT_CEILING_DIRECTORIES=tmp,
            GIT_CONFIG_NOSYSTEM="1",
            HOME=tmp,
            GIT_AUTHOR_NAME=author[0],
            GIT_AUTHOR_EMAIL=author[1],
            GIT_COMMITTER_NAME=author[0],
            GIT_COMMITTER_EMAIL=author[1],
        )

        def git(*args: str) -> bytes:
            # bytes, never text: a CRLF or binary edit must reach the patch exactly as it is
            r = subprocess.run(["git", *args], cwd=work, env=env, capture_output=True, check=False)
            if r.returncode != 0:
                detail = r.stderr.decode("utf-8", "replace").strip()
                raise PatchError(f"git {args[0]} failed while writing the patch: {detail}", None)
            return r.stdout

        def lay(files: Mapping[str, bytes]) -> None:
            lay_files(work, {*before, *after}, files)

        git("init", "-q")
        git("config", "core.autocrlf", "false")
        lay(before)
        git("add", "-A")
        git("commit", "-q", "--allow-empty", "-m", "pinned upstream")
        lay(after)
        git("add", "-A")
        (Path(tmp) / "msg").write_text(message.strip() + "\n")
        git("commit", "-q", "-F", str(Path(tmp) / "msg"))
        # --binary: an edit git sees as binary is kept as a binary diff (applies exactly), not "Binary files differ"
        return git(
            "-c",
            "core.autocrlf=false",
            "format-patch",
            "-1",
            "--stdout",
            "--binary",
            "--no-signature",
            "--zero-commit",
            "--no-renames",
        )


def _file_kind(path: Path) -> str | None:
    """What `path` is when it is not a regular file ("a symbolic link", "a directory", ...); None for a
    regular file or nothing. Never follows a link and never opens the file (a FIFO would block)."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISREG(mode):
        return None
    kinds = (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a named pipe"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), "a device or other special file")


def _refuse_odd_files(cfg: Config, lock: Lock) -> None:
    """A patch saves file contents: a vendored path that is a link, directory, pipe... is vendor state
    sync must repair first (a link would make us save a file from outside the tree, a FIFO would hang)."""
    base = cfg.vendor_dir / SOURCES_DIR
    for rel in sorted(lock.files):
        kind = _file_kind(base / rel)
        if kind is not None:
            raise VendorStateError(
                f"vendor/{SOURCES_DIR}/{rel} is {kind}, not a regular file: a patch can only save file contents",
                "replace it with a regular file holding your edits, or restore it with ggml-vendor sync --force",
            )


def _check_pin(cfg: Config, lock: Lock, *, allow_edits: bool) -> list[str]:
    """Refuse a vendor/ that does not stand on its pin; return the edited vendored files (vendor/ggml-relative)."""
    _refuse_odd_files(cfg, lock)
    findings = check_vendor_dir(cfg.vendor_dir, lock)
    extra = [f for f in findings if f.kind == EXTRA]
    if extra:
        shown = ", ".join(f"vendor/{f.path}" for f in extra[:3]) + (
            f" and {len(extra) - 3} more" if len(extra) > 3 else ""
        )
        raise PatchError(
            f"edits outside the vendored files: {shown} not pinned by vendor/UPSTREAM",
            "a patch may only change files sync vendored; move or delete those files first",
        )
    dirty = [f for f in findings if f.kind != EDITED]
    if dirty:
        f = dirty[0]
        raise VendorStateError(
            f"the pin is dirty: vendor/{f.path} is {f.kind}"
            + (f" ({f.detail})" if f.detail else "")
            + (f", and {len(dirty) - 1} more finding(s)" if len(dirty) > 1 else ""),
            "run ggml-vendor sync so vendor/ matches vendor/UPSTREAM first (it refuses to overwrite edits)",
        )
    edited = [f.path[len(SOURCES_DIR) + 1 :] for f in findings if f.kind == EDITED]
    if edited and not allow_edits:
        raise VendorStateError(
            f"vendor/ has unsaved edits ({', '.join(f'vendor/{SOURCES_DIR}/{p}' for p in edited[:3])})",
            "save them first with ggml-vendor patch save NAME -m '...' (or discard them with ggml-vendor sync --force)",
        )
    return edited


# --- the three verbs ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _SaveTarget:
    """The patch file `patch save` writes and the description it carries."""

    name: str  # NNNN-<name>.patch
    refreshed: bool  # it replaces a patch of the series (the one `name` designates)
    message: str


def _save_target(name: str, message: str | None, patches: list[tuple[str, bytes]], edited: list[str]) -> _SaveTarget:
    """The patch to write for `patch save NAME [-m MESSAGE]`, refusing what cannot be saved."""
    target = _match([n for n, _ in patches], name)
    if not edited and not (target is not None and message is not None):  # a refresh may change only the description
        raise PatchError(
            "no edits to save: vendor/ggml matches its pin and patches",
            "edit files under vendor/ggml first" + (f" (to refresh {target})" if target else ""),
        )
    old = dict(patches)[target] if target is not None else None
    return _SaveTarget(target or _next_name(name, patches), target is not None, _description(message, old))


def _description(message: str | None, refreshed: bytes | None) -> str:
    """The description to save: `message`, else the refreshed patch's own (a new patch must be given one)."""
    if message is not None and not message.strip():
        raise PatchError("the description is empty", "pass -m 'what the patch changes and why'")
    if message is None:
        message = message_of(refreshed) if refreshed is not None else ""
        if not message:
            raise PatchError("a new patch needs a description", "pass -m 'what the patch changes and why'")
    return message


def _next_name(name: str, patches: list[tuple[str, bytes]]) -> str:
    """NNNN-<name>.patch numbered after the last patch of the series, so that it applies last."""
    m = _NAME_RE.match(name)
    assert m is not None  # _check_name has refused anything else
    numbers = [int(n[:4]) for n, _ in patches if re.match(r"^\d{4}-", n)]
    return f"{(max(numbers) + 1 if numbers else 1):04d}-{m.group(2)}.patch"


def _check_name(name: str) -> None:
    m = _NAME_RE.match(name or "")
    if not m or "/" in name:
        raise PatchError(
            f"{name!r} is not a patch name", "use letters, digits, '.', '_' and '-', e.g. gdn-decode-vectorised"
        )
    if len(name) > MAX_NAME:
        raise PatchError(
            f"the patch name ({len(name)} characters) is too long for a file name",
            f"use at most {MAX_NAME} characters, e.g. gdn-decode-vectorised",
        )


def plan_save(cfg: Config, name: str, message: str | None, *, mirror: Path | None = None) -> SavePlan:
    """What `patch save` would write: vendor/patches/NNNN-<name>.patch made from the edits in vendor/ggml
    (or refreshed), the series checked to reproduce the edits exactly, and the re-locked vendor/. Writes
    nothing."""
    _check_name(name)
    lock = _require_lock(cfg)
    edited = _check_pin(cfg, lock, allow_edits=True)
    patches, others_files = _series(cfg)
    save = _save_target(name, message, patches, edited)
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
        author=_git_identity(cfg.root),
    )
    plan = _pristine_plan(
        cfg,
        lock,
        sorted([*others, (target, data)]),
        rev=None,
        mirror=mirror,
        extra_patch_files=others_files,
        current=current_hashes(cfg.vendor_dir),
    )
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
    target = _match([n for n, _ in patches], name)
    if target is None:
        have = ", ".join(n for n, _ in patches) or "none"
        raise PatchError(f"no patch named {name!r} in vendor/patches (have: {have})", "ggml-vendor patch list")
    _check_pin(cfg, lock, allow_edits=False)
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
