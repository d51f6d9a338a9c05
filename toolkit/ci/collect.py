"""`ggml-vendor collect`: merge per-variant build artifacts (one per CI job) into build/.

An artifact is what a job of the generated workflow uploads: a directory (or the .zip a browser downloads)
holding `<variant>/` and `.verified.json`, the verification record `ggml-vendor verify` wrote on the runner.
Each variant is admitted only when it is

* complete: metadata.json parses and every file its digest lists is there with that hash, nothing else;
* from this source tree: the lock (vendor/UPSTREAM), the build inputs (source-id: rendered sources + vendor/)
  and the repository commit it records are this checkout's;
* verified: the record says verify passed on the runner for exactly these bytes;
* still sound here: verify's host-independent checks (layout, metadata, binaries, archs, ABI, symbols,
  Metal library, provenance) pass again on this machine. The import test needs the variant's own platform
  and is not repeated.

Anything refused is named with its artifact and the reason, and build/ is not touched. Otherwise the variants
are swapped into build/ (each replacing its previous directory, other variants kept) and their records are
merged into build/.verified.json with what was re-checked; an error or Ctrl-C midway restores the previous
state, so build/ is either the old or the new one.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from toolkit.core import fs
from toolkit.core.config import Config
from toolkit.core.errors import CollectError
from toolkit.core.hashing import sha256_file
from toolkit.core.records import sub_table
from toolkit.verify import record as vrecord  # the one owner of the verification record

RECORD = vrecord.NAME
STAGING_PREFIX = ".collect-"


@dataclass(frozen=True)
class Refusal:
    artifact: str
    variant: str  # "" when the artifact as a whole is refused
    kind: str  # not-an-artifact | incomplete | foreign | unverified | duplicate | misnamed | recheck
    reason: str

    def line(self) -> str:
        who = f"{self.artifact}" + (f" ({self.variant})" if self.variant and self.variant != self.artifact else "")
        return f"artifact {who}: {self.kind}: {self.reason}"

    def to_json(self) -> dict[str, str]:
        return {"artifact": self.artifact, "variant": self.variant, "kind": self.kind, "reason": self.reason}


@dataclass
class Incoming:
    variant: str
    artifact: str
    staged: Path
    action: str  # add | replace
    record: dict[str, Any]
    rechecked: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "variant": self.variant,
            "artifact": self.artifact,
            "action": self.action,
            "hub_compliant": self.record.get("hub_compliant", True),
            "rechecked": self.rechecked,
        }


@dataclass
class CollectReport:
    build_dir: Path
    artifacts: list[str]
    incoming: list[Incoming]
    refusals: list[Refusal]
    kept: list[str]  # variants already in build/ that no artifact replaces
    dry_run: bool
    committed: bool = False

    @property
    def ok(self) -> bool:
        return not self.refusals

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "dry_run": self.dry_run,
            "committed": self.committed,
            "build_dir": str(self.build_dir),
            "artifacts": self.artifacts,
            "variants": [i.to_json() for i in self.incoming],
            "kept": self.kept,
            "refused": [r.to_json() for r in self.refusals],
        }


# --- finding the artifacts ------------------------------------------------------------------------------


def _holds_variants(d: Path) -> bool:
    return (d / RECORD).is_file() or any(c.is_dir() and (c / "metadata.json").is_file() for c in d.iterdir())


def _artifacts_in(p: Path) -> tuple[list[tuple[str, Path]], list[Refusal]]:
    """The artifacts inside a directory of them (what `download-artifact` writes): sub-directories that hold
    variants and zips. A `.zip` that does not read as one (a truncated download) is refused, never skipped:
    skipping it would publish without its variant."""
    found: list[tuple[str, Path]] = []
    refused: list[Refusal] = []
    children = sorted(c for c in p.iterdir() if not c.name.startswith("."))
    for c in children:
        if c.is_dir() and _holds_variants(c):
            found.append((c.name, c))
        elif c.is_file() and zipfile.is_zipfile(c):
            found.append((c.name.removesuffix(".zip"), c))
        elif c.is_dir():
            refused.append(Refusal(c.name, "", "incomplete", f"{c} holds no <variant>/metadata.json (empty artifact?)"))
        elif c.name.endswith(".zip"):
            name = c.name.removesuffix(".zip")
            refused.append(Refusal(name, "", "incomplete", f"{c} is not a readable zip (truncated download?)"))
    if not found and not refused:
        refused.append(
            Refusal(p.name, "", "not-an-artifact", f"{p} holds no <variant>/metadata.json nor artifacts of them")
        )
    return found, refused


def _one_argument(p: Path) -> tuple[list[tuple[str, Path]], list[Refusal]]:
    if p.is_file() and zipfile.is_zipfile(p):
        return [(p.name.removesuffix(".zip"), p)], []
    if not p.exists():
        return [], [Refusal(p.name or str(p), "", "not-an-artifact", f"{p} does not exist")]
    if not p.is_dir():
        return [], [Refusal(p.name, "", "not-an-artifact", f"{p} is neither a directory nor a zip file")]
    if (p / "metadata.json").is_file():
        why = f"{p} is a variant directory; pass the artifact that holds it (with its {RECORD})"
        return [], [Refusal(p.name, p.name, "not-an-artifact", why)]
    if _holds_variants(p):
        return [(p.name, p)], []
    return _artifacts_in(p)


def find_artifacts(paths: list[Path]) -> tuple[list[tuple[str, Path]], list[Refusal]]:
    """(artifact name, dir or .zip) for every argument: an artifact itself, or a directory of artifacts (what
    `download-artifact` writes: one sub-directory per artifact)."""
    found: list[tuple[str, Path]] = []
    refused: list[Refusal] = []
    for p in paths:
        f, r = _one_argument(p)
        found += f
        refused += r
    return found, refused


_SPECIAL = {stat.S_IFIFO: "a named pipe", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a device", stat.S_IFBLK: "a device"}


def _extract(zip_path: Path, dest: Path) -> None:
    """Unpack a zip, refusing members that would land outside `dest` (absolute or ../ paths), links and
    special files (pipes, sockets, devices): a variant is regular files and directories only."""
    with zipfile.ZipFile(zip_path) as zf:
        for info in zf.infolist():
            rel = PurePosixPath(info.filename)
            if rel.is_absolute() or ".." in rel.parts:
                raise ValueError(f"member {info.filename!r} points outside the artifact")
            kind = stat.S_IFMT(info.external_attr >> 16)
            if kind == stat.S_IFLNK:
                raise ValueError(f"member {info.filename!r} is a symbolic link")
            if kind in _SPECIAL:
                raise ValueError(f"member {info.filename!r} is {_SPECIAL[kind]}, not a regular file")
        zf.extractall(dest)


def _copy_in(src: Path, dest: Path) -> None:
    """Copy an artifact directory (never hard-link: a later write to the artifact must not change build/),
    refusing links and special files before anything is opened (reading a named pipe would block)."""
    for p in sorted(src.rglob("*")):
        rel = p.relative_to(src).as_posix()
        mode = p.lstat().st_mode
        if stat.S_ISLNK(mode):
            raise ValueError(f"it contains symbolic links ({rel})")
        if stat.S_IFMT(mode) in _SPECIAL:
            raise ValueError(f"{rel} is {_SPECIAL[stat.S_IFMT(mode)]}, not a regular file")
    shutil.copytree(src, dest, copy_function=shutil.copy2)


def _read_artifact(src: Path, root: Path) -> str | None:
    """Unpack or copy one artifact into `root`; why it cannot be read, or None. A damaged zip (bad deflate
    stream, bad CRC, truncated member) is a refusal like any other, never a traceback."""
    try:
        if src.is_file():
            _extract(src, root)
        else:
            _copy_in(src, root)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
        return f"cannot be read: {exc}"
    return None


# --- the checks -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TreeIdentity:
    """What makes two builds come from the same source tree."""

    lock_sha256: str | None
    source_id: str
    commit: str | None


def local_identity(cfg: Config) -> TreeIdentity:
    from toolkit import __version__
    from toolkit.build.inputs import load_project, read_provenance
    from toolkit.core.errors import BuildError

    lock = cfg.vendor_dir / "UPSTREAM"
    if not lock.is_file():
        raise CollectError(
            f"{lock} is missing: nothing to compare the artifacts' source tree with",
            "run collect in the checkout the artifacts were built from (vendor/UPSTREAM is committed)",
        )
    try:
        proj = load_project(cfg, tool_version=__version__)
        prov = read_provenance(cfg.root)
    except BuildError as exc:
        raise CollectError(f"cannot identify this checkout's build inputs: {exc.message}", exc.remedy) from None
    return TreeIdentity(sha256_file(lock), proj.source_id, prov.kernel_commit)


def _completeness(variant_dir: Path, meta: dict[str, Any]) -> str | None:
    """Why the variant's files are not exactly what its metadata.json digest lists, or None. The hashes are
    kernels' own (kernels' `Digest`, what the build wrote and what `kernels` checks)."""
    from toolkit.core.kernels_bindings import kernels_types

    Digest, DigestAlgorithm = kernels_types("Digest", "DigestAlgorithm")

    digest = meta.get("digest")
    files = digest.get("files") if isinstance(digest, dict) else None
    if not isinstance(files, dict) or not files:
        return "metadata.json lists no digest of its files (built by something other than ggml-vendor build?)"
    try:
        actual = dict(Digest.hash_variant(DigestAlgorithm.SHA256, str(variant_dir)).files)
    except Exception as exc:  # kernels raises its own exception types from Rust
        return f"its files cannot be hashed ({exc})"
    missing = sorted(set(files) - set(actual))
    if missing:
        return "missing " + ", ".join(missing[:3]) + (f" (+{len(missing) - 3} more)" if len(missing) > 3 else "")
    extra = sorted(set(actual) - set(files))
    if extra:
        return "files not in its digest: " + ", ".join(extra[:3])
    changed = sorted(rel for rel, want in files.items() if actual[rel] != want)
    if changed:
        return f"{changed[0]} does not match its digest (truncated or altered in transit)"
    return None


def _foreign(meta: dict[str, Any], here: TreeIdentity) -> str | None:
    prov = sub_table(meta, "provenance")
    ours = sub_table(prov, "ggml-vendor")
    lock, source = ours.get("lock-sha256"), ours.get("source-id")
    if not lock or not source:
        return "metadata.json records no lock-sha256/source-id, so its source tree is unknown"
    if lock != here.lock_sha256:
        return (
            f"built against another vendor/UPSTREAM (lock sha256 {str(lock)[:12]}, here {str(here.lock_sha256)[:12]})"
        )
    if source != here.source_id:
        return (
            f"built from other sources (source-id {str(source)[:12]}, here {here.source_id[:12]}): render/sync differ"
        )
    kernel = sub_table(prov, "kernel")
    commit = kernel.get("commit")
    if commit and here.commit and commit != here.commit:
        return f"built from commit {str(commit)[:12]}, this checkout is at {here.commit[:12]}"
    return None


def _unverified(record_doc: dict[str, Any] | None, variant: str, tree: str) -> str | None:
    return vrecord.why_unverified(record_doc, variant, tree)


def _read_record(root: Path) -> dict[str, Any] | None:
    return vrecord.read(root)


# --- the checks of one variant -------------------------------------------------------------------------


@dataclass
class _Context:
    """What every variant is checked against, and what the run has seen so far."""

    cfg: Config
    here: TreeIdentity
    lock: Any
    build_dir: Path
    seen: dict[str, str] = field(default_factory=dict)  # variant -> the artifact it came from


def _read_meta(vd: Path) -> dict[str, Any] | str:
    try:
        meta = json.loads((vd / "metadata.json").read_text())
    except (OSError, ValueError) as exc:
        return f"metadata.json is unreadable ({exc})"
    return meta if isinstance(meta, dict) else "metadata.json is unreadable (not a JSON object)"


def _admission(ctx: _Context, name: str, vd: Path, record_doc: dict[str, Any] | None, alone: bool) -> Refusal | None:
    """The first reason to refuse the variant `vd` of artifact `name` on its bytes, or None."""
    from toolkit.verify.runner import is_variant_dir, tree_sha256

    variant = vd.name
    if not is_variant_dir(vd) or not (vd / "metadata.json").is_file():
        return Refusal(name, variant, "incomplete", "no metadata.json")
    if _is_variant_name(name) and name != variant and alone:
        return Refusal(name, variant, "misnamed", f"the artifact {name} holds {variant} (named after its variant)")
    if variant in ctx.seen:
        return Refusal(name, variant, "duplicate", f"{variant} also comes from {ctx.seen[variant]}")
    ctx.seen[variant] = name
    meta = _read_meta(vd)
    if isinstance(meta, str):
        return Refusal(name, variant, "incomplete", meta)
    for kind, why in (
        ("incomplete", lambda: _completeness(vd, meta)),
        ("foreign", lambda: _foreign(meta, ctx.here)),
        ("unverified", lambda: _unverified(record_doc, variant, tree_sha256(vd))),
    ):
        reason = why()
        if reason:
            return Refusal(name, variant, kind, reason)
    return None


def _recheck(ctx: _Context, name: str, vd: Path, record: dict[str, Any]) -> Refusal | Incoming:
    """verify's host-independent checks, again on this machine; the variant as Incoming when they pass."""
    from toolkit.verify.findings import FAIL
    from toolkit.verify.runner import VerifyOptions, verify_variant

    waived = record.get("hub_compliant") is False
    options = VerifyOptions(smoke=False, check_vendor=False, host_toolchain_ok=waived, conformance=False)
    rep = verify_variant(ctx.cfg, vd, lock=ctx.lock, options=options)
    failed = [f for f in rep.findings if f.status == FAIL]
    if failed:
        more = f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""
        return Refusal(name, vd.name, "recheck", f"fails here: {failed[0].check}: {failed[0].message}{more}")
    checks = sorted({f.check for f in rep.findings if f.status != "skip"})
    action = "replace" if (ctx.build_dir / vd.name).exists() else "add"
    return Incoming(vd.name, name, vd, action, record, checks)


def _check_artifact(ctx: _Context, name: str, src: Path, root: Path, report: CollectReport) -> None:
    """Read one artifact into `root` and sort each of its variants into report.incoming or .refusals."""
    why = _read_artifact(src, root)
    if why:
        report.refusals.append(Refusal(name, "", "incomplete", why))
        return
    record_doc = _read_record(root)
    variant_dirs = sorted(c for c in root.iterdir() if c.is_dir() and not c.name.startswith("."))
    if not variant_dirs:
        report.refusals.append(Refusal(name, "", "incomplete", "it holds no variant directory"))
        return
    for vd in variant_dirs:
        refusal = _admission(ctx, name, vd, record_doc, alone=len(variant_dirs) == 1)
        if refusal is None:
            record = dict((record_doc or {}).get("variants", {})[vd.name])
            outcome = _recheck(ctx, name, vd, record)
            if isinstance(outcome, Incoming):
                report.incoming.append(outcome)
                continue
            refusal = outcome
        report.refusals.append(refusal)


# --- the merge ------------------------------------------------------------------------------------------


def collect(
    cfg: Config,
    paths: list[Path],
    *,
    dry_run: bool = False,
    build_dir: Path | None = None,
    progress: Any = None,
) -> CollectReport:
    """Check every artifact, then (unless `dry_run` or anything was refused) swap the variants into build/.
    Raises CollectError when any artifact is refused (the report rides on the exception as `.report`)."""
    from toolkit.core.lock import read_lock

    build_dir = build_dir or cfg.build_dir
    ctx = _Context(cfg, local_identity(cfg), read_lock(cfg.vendor_dir), build_dir)
    found, refusals = find_artifacts(paths)
    created_build = not build_dir.exists()
    if not dry_run:
        _recover(build_dir)
    staging = fs.new_staging(build_dir, STAGING_PREFIX)
    report = CollectReport(build_dir, [n for n, _ in found], [], refusals, [], dry_run)
    try:
        for i, (name, src) in enumerate(found):
            if progress:
                progress(name)
            _check_artifact(ctx, name, src, staging / f"a{i}", report)
        _settle(report, staging)
        return report
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if created_build and not report.committed:
            with contextlib.suppress(OSError):
                build_dir.rmdir()  # only when we created it and left it empty


def _settle(report: CollectReport, staging: Path) -> None:
    """Refuse (build/ untouched) or commit the incoming variants (unless a dry run)."""
    from toolkit.verify.runner import is_variant_dir

    incoming = {i.variant for i in report.incoming}
    build_dir = report.build_dir
    if build_dir.is_dir():
        report.kept = sorted(p.name for p in build_dir.iterdir() if is_variant_dir(p) and p.name not in incoming)
    if report.refusals:
        first = report.refusals[0]
        err = CollectError(
            f"refused {len(report.refusals)} artifact problem(s); first: {first.line()}",
            "re-run the job that uploaded it (same commit, verify passing); build/ is unchanged",
        )
        err.report = report  # type: ignore[attr-defined]
        raise err
    if not report.incoming:
        raise CollectError("no variants to collect", "pass the artifact directories (or zips) the jobs uploaded")
    if not report.dry_run:
        _commit(build_dir, staging, report.incoming)
        report.committed = True


def _is_variant_name(name: str) -> bool:
    from toolkit.build.matrix import NAME_RE

    return NAME_RE.match(name) is not None


_JOURNAL = re.compile(r"^\.(?P<name>.+)\.journal$")


def _recover(build_dir: Path) -> None:
    """What killed runs left in build/: a variant swap stopped between its two renames is rolled back (the
    previous variant put back), and their staging and moved-aside trees are removed (only those whose
    process is dead: a dry run may be reading beside us)."""
    if not build_dir.is_dir():
        return
    for entry in sorted(build_dir.iterdir()):
        m = _JOURNAL.match(entry.name)
        if m:
            fs.recover_swap(build_dir / m.group("name"))
    fs.stale_staging(build_dir, STAGING_PREFIX)
    for entry in sorted(build_dir.iterdir()):
        if entry.name.startswith(".") and ".old-" in entry.name:
            fs.stale_staging(build_dir, entry.name[: entry.name.index(".old-") + len(".old-")])


def _swap_in(staged: Path, target: Path) -> Path | None:
    """Put the variant tree `staged` at `target`, keeping the previous one (returned) until the whole merge
    is done, so a later failure can put it back. There is no instant without a complete `target`:
    renameat2(RENAME_EXCHANGE) where the filesystem has it, else two renames journaled as fs.swap_dir's
    fallback does (a SIGKILL between them is rolled back by the next run's `_recover`)."""
    if not os.path.lexists(target):
        os.rename(staged, target)
        fs.checkpoint("renamed into place")
        return None
    if fs.exchange(staged, target):
        fs.checkpoint("swapped")
        return staged  # now the previous tree, removed with the staging directory
    old = target.with_name(f"{fs.old_prefix(target)}{os.getpid()}-{os.urandom(4).hex()}")
    journal = fs.journal_path(target)
    fs.atomic_write(journal, json.dumps({"old": old.name, "new": staged.name, "pid": os.getpid()}).encode())
    fs.checkpoint("journal written")
    os.rename(target, old)
    fs.checkpoint("old tree moved aside")
    os.rename(staged, target)
    fs.checkpoint("new tree in place")
    journal.unlink()
    return old


def _swap_back(target: Path, old: Path | None) -> None:
    if old is None:
        shutil.rmtree(target, ignore_errors=True)
    elif not fs.exchange(old, target):
        shutil.rmtree(target, ignore_errors=True)
        os.rename(old, target)


def _commit(build_dir: Path, staging: Path, incoming: list[Incoming]) -> None:
    """Swap every incoming variant into build/ and merge the records; on any failure (or Ctrl-C) undo what
    was done, so build/ ends in the old or the new state."""
    fs.reset_checkpoints()
    moved: list[tuple[Path, Path | None]] = []  # (target, its previous tree or None)
    record_before = vrecord.snapshot(build_dir)
    try:
        for item in incoming:
            target = build_dir / item.variant
            moved.append((target, _swap_in(item.staged, target)))
        _merge_records(build_dir, incoming)
    except BaseException:
        for target, old in reversed(moved):
            _swap_back(target, old)
        vrecord.restore(build_dir, record_before)
        raise
    for _target, old in moved:
        if old is not None and staging not in old.parents:
            shutil.rmtree(old, ignore_errors=True)  # the fallback's moved-aside trees (the rest go with staging)


def _merge_records(build_dir: Path, incoming: list[Incoming]) -> None:
    vrecord.merge_collected(build_dir, ((i.variant, i.record, i.artifact, i.rechecked) for i in incoming))
