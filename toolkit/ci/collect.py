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

It follows the stage protocol (toolkit/core/stage.py):

    plan(config, request, log) -> Plan      finds the artifacts and runs every check on their bytes where they
                                            lie (a .zip is unpacked into a private temporary directory outside
                                            the project and the cache, removed before plan returns); decides
                                            what is added, replaced, kept and refused; writes nothing
    execute(plan, log) -> Report            rolls back a swap a killed run left half done, copies the admitted
                                            variants into a staging directory beside build/, refuses any whose
                                            copy differs from the bytes the plan checked, then swaps them in
                                            and merges their records into build/.verified.json

Anything refused is named with its artifact and the reason, and build/ is not touched. Otherwise the variants
are swapped into build/ (each replacing its previous directory, other variants kept); an error or Ctrl-C
midway restores the previous state, so build/ is either the old or the new one.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import tempfile
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from toolkit.core import fs
from toolkit.core.config import Config
from toolkit.core.errors import CollectError, Interrupted
from toolkit.core.records import fields_json, sub_table
from toolkit.core.stage import Log, Verdict, quiet
from toolkit.verify import record as vrecord  # the one owner of the verification record

__all__ = ["Request", "Plan", "Report", "Refusal", "Incoming", "plan", "execute", "interrupted", "collect"]

RECORD = vrecord.NAME
STAGING_PREFIX = ".collect-"
SCRATCH_PREFIX = "ggml-vendor-collect-"  # the plan's private unpacking of a .zip, in the system temp dir
# What reading an artifact (unpacking a zip, copying a directory) may raise: a refusal, never a traceback.
_UNREADABLE = (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error)


@dataclass(frozen=True)
class Request:
    """The artifacts to collect (directories or .zip files, or directories of them); `build_dir` overrides
    the package's build/ (tests, a staging checkout)."""

    artifacts: tuple[Path, ...]
    build_dir: Path | None = None


@dataclass(frozen=True)
class Refusal:
    artifact: str
    variant: str  # "" when the artifact as a whole is refused
    kind: str  # not-an-artifact | incomplete | foreign | unverified | duplicate | misnamed | recheck | changed
    reason: str

    def line(self) -> str:
        who = f"{self.artifact}" + (f" ({self.variant})" if self.variant and self.variant != self.artifact else "")
        return f"artifact {who}: {self.kind}: {self.reason}"

    def to_json(self) -> dict[str, str]:
        return fields_json(self, "artifact variant kind reason")


@dataclass(frozen=True)
class Incoming:
    """A variant the plan admitted: where it comes from, what it does to build/, and the bytes it was
    checked on (`tree_sha256`: execute refuses a copy that differs)."""

    variant: str
    artifact: str
    source: Path  # the artifact (directory or .zip) execute copies the variant from
    action: str  # add | replace
    record: dict[str, Any]  # the runner's entry of .verified.json
    rechecked: tuple[str, ...]
    tree_sha256: str

    @property
    def hub_compliant(self) -> Any:
        """False where the runner's verify waived the Hub's ABI ceiling (the record's value, as written)."""
        return self.record.get("hub_compliant", True)

    def to_json(self) -> dict[str, Any]:
        return fields_json(self, "variant artifact action hub_compliant rechecked", rechecked=list)


def _refused(refusals: tuple[Refusal, ...], report: Any) -> CollectError | None:
    """The one error a refusal ends the command with (the report rides on it as `.report`), or None."""
    if not refusals:
        return None
    err = CollectError(
        f"refused {len(refusals)} artifact problem(s); first: {refusals[0].line()}",
        "re-run the job that uploaded it (same commit, verify passing); build/ is unchanged",
    )
    err.report = report  # type: ignore[attr-defined]
    return err


def _no_variants() -> CollectError:
    return CollectError("no variants to collect", "pass the artifact directories (or zips) the jobs uploaded")


def _json(plan: Plan, refusals: tuple[Refusal, ...], *, dry_run: bool, committed: bool) -> dict[str, Any]:
    return {
        "ok": not refusals and bool(plan.incoming),
        "dry_run": dry_run,
        "committed": committed,
        "build_dir": str(plan.build_dir),
        "artifacts": list(plan.artifacts),
        "variants": [i.to_json() for i in plan.incoming],
        "kept": list(plan.kept),
        "refused": [r.to_json() for r in refusals],
        "recover": list(plan.recover),
    }


def _lines(plan: Plan, refusals: tuple[Refusal, ...], verbs: dict[str, str] | None) -> list[str]:
    """The plan's or report's lines: the roll-backs, the variants (`verbs` per action; None: not brought in),
    the refusals and what build/ keeps."""
    out: list[str] = []
    if verbs is not None:
        out += [f"roll back the interrupted swap of {name}" for name in plan.recover]
        out += [
            f"{verbs[i.action]} {i.variant} from {i.artifact} (re-checked here: {', '.join(i.rechecked)})"
            for i in plan.incoming
        ]
    out += [f"refused {r.line()}" for r in refusals]
    out += [f"kept {name} (already in build/, no artifact replaces it)" for name in plan.kept]
    return out


@dataclass(frozen=True)
class Plan(Verdict):
    """What collect will do: the variants to swap into build/ (each checked), the refusals, the variants
    build/ keeps, and the interrupted swaps of killed runs to roll back first. Not ok when anything is
    refused (exit 11): then execute changes nothing but that roll-back."""

    cfg: Config
    build_dir: Path
    artifacts: tuple[str, ...]
    incoming: tuple[Incoming, ...]
    refusals: tuple[Refusal, ...]
    kept: tuple[str, ...]
    recover: tuple[str, ...] = ()

    dry_run = True  # the protocol's dry run prints the plan: the printer's word for "would"
    committed = False

    def failure(self) -> CollectError | None:
        refused = _refused(self.refusals, self)
        return refused if refused or self.incoming else _no_variants()

    def lines(self) -> list[str]:
        out = _lines(self, self.refusals, {"add": "would add", "replace": "would replace"})
        if self.ok:
            out.append(f"{len(self.incoming)} variant(s) would be collected; nothing changed (--dry-run)")
        return out

    def to_json(self) -> dict[str, Any]:
        return _json(self, self.refusals, dry_run=True, committed=False)


@dataclass(frozen=True)
class Report(Verdict):
    """What execute did: `committed` when the variants are in build/; `refusals` are the plan's and any
    found while copying (an artifact changed after the plan checked it), build/ then unchanged."""

    plan: Plan
    committed: bool = False
    refusals: tuple[Refusal, ...] = ()
    recovered: tuple[str, ...] = ()

    dry_run = False

    @property
    def build_dir(self) -> Path:
        return self.plan.build_dir

    @property
    def artifacts(self) -> tuple[str, ...]:
        return self.plan.artifacts

    @property
    def incoming(self) -> tuple[Incoming, ...]:
        return self.plan.incoming

    @property
    def kept(self) -> tuple[str, ...]:
        return self.plan.kept

    def failure(self) -> CollectError | None:
        refused = _refused(self.refusals, self)
        return refused if refused or self.committed else _no_variants()

    def lines(self) -> list[str]:
        verbs = {"add": "added", "replace": "replaced"} if self.committed else None
        out = list(self.recovered) + _lines(self.plan, self.refusals, verbs)
        if self.committed:
            out.append(f"collected {len(self.incoming)} variant(s) into {self.build_dir}; records merged into {RECORD}")
        return out

    def to_json(self) -> dict[str, Any]:
        return _json(self.plan, self.refusals, dry_run=False, committed=self.committed)


CollectReport = Report  # the name older callers use


# --- finding the artifacts ------------------------------------------------------------------------------


def _holds_variants(d: Path) -> bool:
    return (d / RECORD).is_file() or any(c.is_dir() and (c / "metadata.json").is_file() for c in d.iterdir())


def _child_artifact(c: Path) -> tuple[str, Path] | Refusal | None:
    """One entry of a directory of artifacts: an artifact, a refusal, or None (not ours: skipped)."""
    if c.is_dir() and _holds_variants(c):
        return c.name, c
    if c.is_file() and zipfile.is_zipfile(c):
        return c.name.removesuffix(".zip"), c
    if c.is_dir():
        return Refusal(c.name, "", "incomplete", f"{c} holds no <variant>/metadata.json (empty artifact?)")
    if c.name.endswith(".zip"):
        return Refusal(
            c.name.removesuffix(".zip"), "", "incomplete", f"{c} is not a readable zip (truncated download?)"
        )
    return None


def _artifacts_in(p: Path) -> tuple[list[tuple[str, Path]], list[Refusal]]:
    """The artifacts inside a directory of them (what `download-artifact` writes): sub-directories that hold
    variants and zips. A `.zip` that does not read as one (a truncated download) is refused, never skipped:
    skipping it would publish without its variant."""
    found: list[tuple[str, Path]] = []
    refused: list[Refusal] = []
    for c in sorted(c for c in p.iterdir() if not c.name.startswith(".")):
        entry = _child_artifact(c)
        if isinstance(entry, Refusal):
            refused.append(entry)
        elif entry is not None:
            found.append(entry)
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


# --- reading an artifact: in place, unpacked for the plan, copied for execute ------------------------------

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


def _regular_only(src: Path) -> None:
    """Refuse an artifact directory holding links or special files, before anything in it is opened (reading
    a named pipe would block): verify's check, the one rule for collect, verify and publish."""
    from toolkit.verify import non_regular

    found = non_regular(Path(os.path.realpath(src)))  # the path given may be a link; what it holds may not
    if found:
        raise ValueError(f"{found[0]}, not a regular file" + (f" (+{len(found) - 1} more)" if found[1:] else ""))


def _copy_in(src: Path, dest: Path) -> None:
    """Copy an artifact directory (never hard-link: a later write to the artifact must not change build/)."""
    _regular_only(src)
    shutil.copytree(src, dest, copy_function=shutil.copy2)


def _attempt(read: Callable[..., None], *args: Path) -> str | None:
    """Run one way of reading an artifact; why it cannot be read, or None. A damaged zip (bad deflate
    stream, bad CRC, truncated member) is a refusal like any other, never a traceback."""
    try:
        read(*args)
    except _UNREADABLE as exc:
        return f"cannot be read: {exc}"
    return None


def _read_artifact(src: Path, root: Path) -> str | None:
    """Unpack or copy one artifact into `root` (execute's staging); why it cannot be read, or None."""
    return _attempt(_extract, src, root) if src.is_file() else _attempt(_copy_in, src, root)


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
        proj = load_project(cfg, tool_version=__version__, store=False)
        prov = read_provenance(cfg.root)
    except BuildError as exc:
        raise CollectError(f"cannot identify this checkout's build inputs: {exc.message}", exc.remedy) from None
    return TreeIdentity(prov.lock_sha256, proj.source_id, prov.kernel_commit)  # the lock hashed once, there


def _digest_difference(files: dict[str, str], actual: dict[str, str]) -> str | None:
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


def _completeness(variant_dir: Path, meta: dict[str, Any]) -> str | None:
    """Why the variant's files are not exactly what its metadata.json digest lists, or None. The hashes are
    kernels' own (kernels' `Digest`, what the build wrote and what `kernels` checks)."""
    from toolkit.core.kernels_client import kernels_types

    Digest, DigestAlgorithm = kernels_types("Digest", "DigestAlgorithm")

    digest = meta.get("digest")
    files = digest.get("files") if isinstance(digest, dict) else None
    if not isinstance(files, dict) or not files:
        return "metadata.json lists no digest of its files (built by something other than ggml-vendor build?)"
    try:
        actual = dict(Digest.hash_variant(DigestAlgorithm.SHA256, str(variant_dir)).files)
    except Exception as exc:  # kernels raises its own exception types from Rust
        return f"its files cannot be hashed ({exc})"
    return _digest_difference(files, actual)


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
    commit = sub_table(prov, "kernel").get("commit")
    if commit and here.commit and commit != here.commit:
        return f"built from commit {str(commit)[:12]}, this checkout is at {here.commit[:12]}"
    return None


# --- the checks of one variant -------------------------------------------------------------------------


@dataclass
class _Context:
    """What every variant is checked against, and what the plan has seen so far."""

    cfg: Config
    here: TreeIdentity
    lock: Any
    build_dir: Path
    recovering: tuple[str, ...] = ()  # variants an interrupted swap moved aside (put back by execute)
    seen: dict[str, str] = field(default_factory=dict)  # variant -> the artifact it came from


def _read_meta(vd: Path) -> dict[str, Any] | str:
    try:
        meta = json.loads((vd / "metadata.json").read_text())
    except (OSError, ValueError) as exc:
        return f"metadata.json is unreadable ({exc})"
    return meta if isinstance(meta, dict) else "metadata.json is unreadable (not a JSON object)"


def _placement(ctx: _Context, name: str, vd: Path, alone: bool) -> Refusal | None:
    """Whether the variant directory belongs where it is: a variant, named by its artifact, seen once."""
    from toolkit.verify.runner import is_variant_dir

    variant = vd.name
    if not is_variant_dir(vd) or not (vd / "metadata.json").is_file():
        return Refusal(name, variant, "incomplete", "no metadata.json")
    if _is_variant_name(name) and name != variant and alone:
        return Refusal(name, variant, "misnamed", f"the artifact {name} holds {variant} (named after its variant)")
    if variant in ctx.seen:
        return Refusal(name, variant, "duplicate", f"{variant} also comes from {ctx.seen[variant]}")
    ctx.seen[variant] = name
    return None


def _admission(ctx: _Context, name: str, vd: Path, record_doc: dict[str, Any] | None, alone: bool) -> Refusal | None:
    """The first reason to refuse the variant `vd` of artifact `name` on its bytes, or None."""
    from toolkit.verify.runner import tree_sha256

    placed = _placement(ctx, name, vd, alone)
    if placed is not None:
        return placed
    meta = _read_meta(vd)
    if isinstance(meta, str):
        return Refusal(name, vd.name, "incomplete", meta)
    for kind, why in (
        ("incomplete", lambda: _completeness(vd, meta)),
        ("foreign", lambda: _foreign(meta, ctx.here)),
        ("unverified", lambda: vrecord.why_unverified(record_doc, vd.name, tree_sha256(vd))),
    ):
        reason = why()
        if reason:
            return Refusal(name, vd.name, kind, reason)
    return None


def _recheck(ctx: _Context, name: str, src: Path, vd: Path, record: dict[str, Any]) -> Refusal | Incoming:
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
    checks = tuple(sorted({f.check for f in rep.findings if f.status != "skip"}))
    present = (ctx.build_dir / vd.name).exists() or vd.name in ctx.recovering
    return Incoming(vd.name, name, src, "replace" if present else "add", record, checks, rep.tree_sha256)


def _check_variants(ctx: _Context, name: str, src: Path, root: Path) -> tuple[list[Incoming], list[Refusal]]:
    """Sort each variant of the artifact read at `root` into admitted or refused."""
    record_doc = vrecord.read(root)
    variant_dirs = sorted(c for c in root.iterdir() if c.is_dir() and not c.name.startswith("."))
    if not variant_dirs:
        return [], [Refusal(name, "", "incomplete", "it holds no variant directory")]
    incoming: list[Incoming] = []
    refused: list[Refusal] = []
    for vd in variant_dirs:
        refusal = _admission(ctx, name, vd, record_doc, alone=len(variant_dirs) == 1)
        outcome = refusal or _recheck(ctx, name, src, vd, dict((record_doc or {}).get("variants", {})[vd.name]))
        if isinstance(outcome, Incoming):
            incoming.append(outcome)
        else:
            refused.append(outcome)
    return incoming, refused


def _check_artifact(ctx: _Context, name: str, src: Path) -> tuple[list[Incoming], list[Refusal]]:
    """Check each variant of one artifact where it lies: a directory in place, a zip unpacked into a
    private temporary directory (outside the project and the cache) that is gone when this returns."""
    if src.is_dir():
        why = _attempt(_regular_only, src)
        return ([], [Refusal(name, "", "incomplete", why)]) if why else _check_variants(ctx, name, src, src)
    with tempfile.TemporaryDirectory(prefix=SCRATCH_PREFIX) as scratch:
        why = _attempt(_extract, src, Path(scratch))
        return ([], [Refusal(name, "", "incomplete", why)]) if why else _check_variants(ctx, name, src, Path(scratch))


# --- the plan ------------------------------------------------------------------------------------------


def _interrupted_swaps(build_dir: Path) -> tuple[str, ...]:
    """The variants whose swap a killed run left journaled (execute rolls each back before anything else)."""
    return tuple(target.name for target in fs.journaled_targets(build_dir))


def _kept(build_dir: Path, incoming: list[Incoming], recovering: tuple[str, ...]) -> tuple[str, ...]:
    """The variants build/ holds (or holds again once a roll-back is done) that no artifact replaces."""
    from toolkit.verify.runner import is_variant_dir

    present = {p.name for p in build_dir.iterdir() if is_variant_dir(p)} if build_dir.is_dir() else set()
    return tuple(sorted((present | set(recovering)) - {i.variant for i in incoming}))


def plan(config: Config, request: Request, log: Log = quiet) -> Plan:
    """Check every artifact against this checkout and decide what build/ becomes; writes nothing. Raises
    CollectError when there is nothing to compare with (no vendor/UPSTREAM, build inputs unreadable)."""
    from toolkit.core.lock import read_lock

    build_dir = request.build_dir or config.build_dir
    recovering = _interrupted_swaps(build_dir)
    ctx = _Context(config, local_identity(config), read_lock(config.vendor_dir), build_dir, recovering)
    found, refusals = find_artifacts(list(request.artifacts))
    incoming: list[Incoming] = []
    for name, src in found:
        log(f"checking {name}")
        admitted, refused = _check_artifact(ctx, name, src)
        incoming += admitted
        refusals += refused
    kept = _kept(build_dir, incoming, recovering)
    return Plan(config, build_dir, tuple(n for n, _ in found), tuple(incoming), tuple(refusals), kept, recovering)


def _is_variant_name(name: str) -> bool:
    from toolkit.build.matrix import NAME_RE

    return NAME_RE.match(name) is not None


# --- execute: roll back, copy, swap ----------------------------------------------------------------------


def _recover(build_dir: Path, swaps: tuple[str, ...]) -> tuple[str, ...]:
    """What killed runs left in build/: the planned swaps stopped between their two renames are rolled back
    (the previous variant put back), and their staging and moved-aside trees are removed (only those whose
    process is dead: a dry run may be reading beside us). Returns what was put back."""
    if not build_dir.is_dir():
        return ()
    done = [action for name in swaps for action in fs.recover_swap(build_dir / name)]
    fs.stale_staging(build_dir, STAGING_PREFIX)
    fs.stale_entries(build_dir, ".*.old-*")
    return tuple(done)


def _stage(plan: Plan, staging: Path, log: Log) -> tuple[list[tuple[Incoming, Path]], list[Refusal]]:
    """Copy (or unpack) every admitted variant's artifact into `staging`, once per artifact; a variant whose
    copy is not the tree the plan checked (the artifact changed since) is refused."""
    copies: dict[Path, Path | str] = {}  # artifact -> its copy, or why it cannot be read
    staged: list[tuple[Incoming, Path]] = []
    refused: list[Refusal] = []
    for item in plan.incoming:
        log(f"copying {item.variant} from {item.artifact}")
        if item.source not in copies:
            root = staging / f"a{len(copies)}"
            copies[item.source] = _read_artifact(item.source, root) or root
        copy = copies[item.source]
        if isinstance(copy, str):
            refused.append(Refusal(item.artifact, item.variant, "incomplete", copy))
        elif not (copy / item.variant).is_dir() or vrecord.tree_sha256(copy / item.variant) != item.tree_sha256:
            why = "its files changed after collect checked them; run collect again"
            refused.append(Refusal(item.artifact, item.variant, "changed", why))
        else:
            staged.append((item, copy / item.variant))
    return staged, refused


def execute(plan: Plan, log: Log = quiet) -> Report:
    """Do what `plan` lists: the roll-backs, then (when nothing was refused) the copies and the swap into
    build/ with the merged records; build/ ends in the old state or the new one."""
    recovered = _recover(plan.build_dir, plan.recover)
    if not plan.ok:
        return Report(plan, refusals=plan.refusals, recovered=recovered)
    created = not plan.build_dir.exists()
    staging = fs.new_staging(plan.build_dir, STAGING_PREFIX)
    committed = False
    try:
        staged, refused = _stage(plan, staging, log)
        if refused:
            return Report(plan, refusals=tuple(refused), recovered=recovered)
        _commit(plan.build_dir, staging, staged)
        committed = True
        return Report(plan, committed=True, recovered=recovered)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if created and not committed:
            with contextlib.suppress(OSError):
                plan.build_dir.rmdir()  # only when we created it and left it empty


def interrupted(plan: Plan) -> Interrupted:
    """The Interrupted error (exit 130) for a Ctrl-C anywhere after `plan` was made, the report's printing
    included: which admitted variants build/ holds, with their records, read back from disk (a swap a kill
    cut between its renames rolled back first)."""
    fs.recover_swaps(plan.build_dir)
    records = vrecord.entries(plan.build_dir)
    held = []
    for item in plan.incoming:
        tree = plan.build_dir / item.variant
        same = tree.is_dir() and vrecord.tree_sha256(tree) == item.tree_sha256
        if same and records.get(item.variant, {}).get("collected", {}).get("artifact") == item.artifact:
            held.append(item.variant)
    if plan.ok and plan.incoming and len(held) == len(plan.incoming):
        return Interrupted(
            f"build/ holds the collected {', '.join(held)} and their records (read back from disk): "
            "the collect had completed",
            "nothing to undo",
        )
    if not held:
        return Interrupted("build/ is as it was: nothing was collected (read back from disk)", "run the collect again")
    missing = [i.variant for i in plan.incoming if i.variant not in held]
    return Interrupted(
        f"build/ holds the collected {', '.join(held)} but not {', '.join(missing)} (read back from disk)",
        "run the collect again",
    )


def _swap_back(target: Path, old: Path | None) -> None:
    if old is None:
        shutil.rmtree(target, ignore_errors=True)
    elif not fs.exchange(old, target):
        shutil.rmtree(target, ignore_errors=True)
        os.rename(old, target)


def _commit(build_dir: Path, staging: Path, staged: list[tuple[Incoming, Path]]) -> None:
    """Swap every staged variant into build/ and merge the records; on any failure (or Ctrl-C) undo what
    was done, so build/ ends in the old or the new state."""
    fs.reset_checkpoints()
    # (target, its previous tree or None), kept until the whole merge is done so a failure can put it back; a
    # SIGKILL inside the fallback swap's two renames is rolled back by the next run's `_recover`
    moved: list[tuple[Path, Path | None]] = []
    record_before = vrecord.snapshot(build_dir)
    try:
        for item, tree in staged:
            target = build_dir / item.variant
            moved.append((target, fs.swap_keeping_old(tree, target)))
        _merge_records(build_dir, [item for item, _ in staged])
    except BaseException:
        for target, old in reversed(moved):
            _swap_back(target, old)
        vrecord.restore(build_dir, record_before)
        raise
    for _target, old in moved:
        if old is not None and staging not in old.parents:
            shutil.rmtree(old, ignore_errors=True)  # the fallback's moved-aside trees (the rest go with staging)


def _merge_records(build_dir: Path, incoming: list[Incoming]) -> None:
    vrecord.merge_collected(build_dir, ((i.variant, i.record, i.artifact, list(i.rechecked)) for i in incoming))


# --- library use -----------------------------------------------------------------------------------------


def collect(
    cfg: Config,
    paths: list[Path],
    *,
    dry_run: bool = False,
    build_dir: Path | None = None,
    progress: Log | None = None,
) -> Plan | Report:
    """plan + execute (only plan when `dry_run`) in one call, for library use and tests. Raises CollectError
    when anything is refused (the plan or report rides on the exception as `.report`)."""
    log = progress or quiet
    planned = plan(cfg, Request(tuple(paths), build_dir), log)
    result: Plan | Report = planned if dry_run else execute(planned, log)
    error = result.error()
    if error is not None:
        raise error
    return result
