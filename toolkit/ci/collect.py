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
import shutil
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from toolkit.core.config import Config
from toolkit.core.errors import VendorError
from toolkit.core.hashing import sha256_file

RECORD = ".verified.json"
STAGING_PREFIX = ".collect-"


class CollectError(VendorError):
    """An artifact was refused, or collecting cannot start; build/ is unchanged."""

    exit_code = 11


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


def find_artifacts(paths: list[Path]) -> tuple[list[tuple[str, Path]], list[Refusal]]:
    """(artifact name, dir or .zip) for every argument: an artifact itself, or a directory of artifacts (what
    `download-artifact` writes: one sub-directory per artifact)."""
    found: list[tuple[str, Path]] = []
    refused: list[Refusal] = []
    for p in paths:
        if p.is_file() and zipfile.is_zipfile(p):
            found.append((p.name.removesuffix(".zip"), p))
        elif not p.exists():
            refused.append(Refusal(p.name or str(p), "", "not-an-artifact", f"{p} does not exist"))
        elif not p.is_dir():
            refused.append(Refusal(p.name, "", "not-an-artifact", f"{p} is neither a directory nor a zip file"))
        elif (p / "metadata.json").is_file():
            refused.append(
                Refusal(
                    p.name,
                    p.name,
                    "not-an-artifact",
                    f"{p} is a variant directory; pass the artifact that holds it (with its {RECORD})",
                )
            )
        elif _holds_variants(p):
            found.append((p.name, p))
        else:
            children = sorted(c for c in p.iterdir() if not c.name.startswith("."))
            inner = [c for c in children if (c.is_dir() and _holds_variants(c)) or zipfile.is_zipfile(c)]
            if not inner:
                refused.append(
                    Refusal(
                        p.name, "", "not-an-artifact", f"{p} holds no <variant>/metadata.json nor artifacts of them"
                    )
                )
            for c in inner:
                found.append((c.name.removesuffix(".zip"), c))
            for c in children:
                if c not in inner and c.is_dir():
                    refused.append(
                        Refusal(c.name, "", "incomplete", f"{c} holds no <variant>/metadata.json (empty artifact?)")
                    )
    return found, refused


def _extract(zip_path: Path, dest: Path) -> None:
    """Unpack a zip, refusing members that would land outside `dest` (absolute or ../ paths) or are links."""
    with zipfile.ZipFile(zip_path) as zf:
        for info in zf.infolist():
            rel = PurePosixPath(info.filename)
            if rel.is_absolute() or ".." in rel.parts:
                raise ValueError(f"member {info.filename!r} points outside the artifact")
            if (info.external_attr >> 16) & 0o170000 == 0o120000:
                raise ValueError(f"member {info.filename!r} is a symbolic link")
        zf.extractall(dest)


def _link_or_copy(src: str, dst: str) -> None:
    """Hard-link when the artifact is on the same filesystem (CUDA variants are hundreds of MB; nothing
    rewrites a file in place), else copy."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _links(d: Path) -> list[str]:
    return [p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_symlink()]


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
    prov = meta.get("provenance") if isinstance(meta.get("provenance"), dict) else {}
    ours = prov.get("ggml-vendor") if isinstance(prov.get("ggml-vendor"), dict) else {}
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
    kernel = prov.get("kernel") if isinstance(prov.get("kernel"), dict) else {}
    commit = kernel.get("commit")
    if commit and here.commit and commit != here.commit:
        return f"built from commit {str(commit)[:12]}, this checkout is at {here.commit[:12]}"
    return None


def _unverified(record_doc: dict[str, Any] | None, variant: str, tree: str) -> str | None:
    if record_doc is None:
        return f"the artifact has no {RECORD} (run ggml-vendor verify before uploading)"
    entry = (record_doc.get("variants") or {}).get(variant)
    if not isinstance(entry, dict):
        return f"its {RECORD} has no record for {variant}"
    if not entry.get("ok"):
        fails = "; ".join(entry.get("failures", [])[:1]) or "no details"
        return f"verify failed on its runner: {fails}"
    if entry.get("tree_sha256") != tree:
        return "its files differ from the ones verify passed on the runner"
    return None


def _read_record(root: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads((root / RECORD).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


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
    from toolkit.verify.findings import FAIL
    from toolkit.verify.runner import VerifyOptions, is_variant_dir, tree_sha256, verify_variant

    build_dir = build_dir or cfg.build_dir
    here = local_identity(cfg)
    lock = read_lock(cfg.vendor_dir)
    found, refusals = find_artifacts(paths)
    created_build = not build_dir.exists()
    build_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=build_dir))
    report = CollectReport(build_dir, [n for n, _ in found], [], refusals, [], dry_run)
    try:
        seen: dict[str, str] = {}
        for i, (name, src) in enumerate(found):
            if progress:
                progress(name)
            root = staging / f"a{i}"
            try:
                if src.is_file():
                    _extract(src, root)
                else:
                    links = _links(src)
                    if links:
                        raise ValueError(f"it contains symbolic links ({', '.join(links[:2])})")
                    shutil.copytree(src, root, copy_function=_link_or_copy)
            except (ValueError, OSError, zipfile.BadZipFile) as exc:
                refusals.append(Refusal(name, "", "incomplete", f"cannot be read: {exc}"))
                continue
            record_doc = _read_record(root)
            variant_dirs = sorted(c for c in root.iterdir() if c.is_dir() and not c.name.startswith("."))
            if not variant_dirs:
                refusals.append(Refusal(name, "", "incomplete", "it holds no variant directory"))
                continue
            for vd in variant_dirs:
                variant = vd.name
                if not is_variant_dir(vd) or not (vd / "metadata.json").is_file():
                    refusals.append(Refusal(name, variant, "incomplete", "no metadata.json"))
                    continue
                if _is_variant_name(name) and name != variant and len(variant_dirs) == 1:
                    refusals.append(
                        Refusal(
                            name, variant, "misnamed", f"the artifact {name} holds {variant} (named after its variant)"
                        )
                    )
                    continue
                if variant in seen:
                    refusals.append(Refusal(name, variant, "duplicate", f"{variant} also comes from {seen[variant]}"))
                    continue
                seen[variant] = name
                try:
                    meta = json.loads((vd / "metadata.json").read_text())
                    if not isinstance(meta, dict):
                        raise ValueError("not a JSON object")
                except (OSError, ValueError) as exc:
                    refusals.append(Refusal(name, variant, "incomplete", f"metadata.json is unreadable ({exc})"))
                    continue
                why = _completeness(vd, meta)
                if why:
                    refusals.append(Refusal(name, variant, "incomplete", why))
                    continue
                why = _foreign(meta, here)
                if why:
                    refusals.append(Refusal(name, variant, "foreign", why))
                    continue
                why = _unverified(record_doc, variant, tree_sha256(vd))
                if why:
                    refusals.append(Refusal(name, variant, "unverified", why))
                    continue
                record = dict((record_doc or {}).get("variants", {})[variant])
                waived = record.get("hub_compliant") is False
                rep = verify_variant(
                    cfg,
                    vd,
                    lock=lock,
                    options=VerifyOptions(smoke=False, check_vendor=False, host_toolchain_ok=waived, conformance=False),
                )
                failed = [f for f in rep.findings if f.status == FAIL]
                if failed:
                    f = failed[0]
                    more = f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""
                    refusals.append(Refusal(name, variant, "recheck", f"fails here: {f.check}: {f.message}{more}"))
                    continue
                checks = sorted({f.check for f in rep.findings if f.status != "skip"})
                action = "replace" if (build_dir / variant).exists() else "add"
                report.incoming.append(Incoming(variant, name, vd, action, record, checks))
        incoming = {i.variant for i in report.incoming}
        if build_dir.is_dir():
            report.kept = sorted(p.name for p in build_dir.iterdir() if is_variant_dir(p) and p.name not in incoming)
        if refusals:
            first = refusals[0]
            err = CollectError(
                f"refused {len(refusals)} artifact problem(s); first: {first.line()}",
                "re-run the job that uploaded it (same commit, verify passing); build/ is unchanged",
            )
            err.report = report  # type: ignore[attr-defined]
            raise err
        if not report.incoming:
            raise CollectError("no variants to collect", "pass the artifact directories (or zips) the jobs uploaded")
        if not dry_run:
            _commit(build_dir, staging, report.incoming)
            report.committed = True
        return report
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if created_build and not report.committed:
            with contextlib.suppress(OSError):
                build_dir.rmdir()  # only when we created it and left it empty


def _is_variant_name(name: str) -> bool:
    from toolkit.build.matrix import NAME_RE

    return NAME_RE.match(name) is not None


def _commit(build_dir: Path, staging: Path, incoming: list[Incoming]) -> None:
    """Swap every incoming variant into build/ and merge the records; on any failure (or Ctrl-C) undo what
    was done, so build/ ends in the old or the new state."""
    from toolkit.verify.runner import STAMP_NAME

    old = staging / "old"
    old.mkdir()
    moved: list[tuple[Incoming, bool]] = []  # (variant, had a previous directory)
    stamp = build_dir / STAMP_NAME
    stamp_before = stamp.read_bytes() if stamp.is_file() else None
    try:
        for item in incoming:
            target = build_dir / item.variant
            had = target.exists()
            if had:
                os.replace(target, old / item.variant)
            moved.append((item, had))
            os.replace(item.staged, target)
        _merge_records(stamp, incoming)
    except BaseException:
        for item, had in reversed(moved):
            target = build_dir / item.variant
            if target.exists():
                shutil.rmtree(target, ignore_errors=True)
            if had:
                os.replace(old / item.variant, target)
        stamp.with_name(stamp.name + ".tmp").unlink(missing_ok=True)
        if stamp_before is None:
            stamp.unlink(missing_ok=True)
        else:
            _write_atomic(stamp, stamp_before)
        raise


def _merge_records(stamp: Path, incoming: list[Incoming]) -> None:
    try:
        doc = json.loads(stamp.read_text())
    except (OSError, ValueError):
        doc = {}
    variants = doc.get("variants", {}) if isinstance(doc, dict) else {}
    for item in incoming:
        entry = dict(item.record)
        runner = {
            k: item.record[k]
            for k in ("ok", "hub_compliant", "tool_version", "failures", "conformance")
            if k in item.record
        }
        entry["collected"] = {"artifact": item.artifact, "rechecked": item.rechecked, "runner": runner}
        variants[item.variant] = entry
    _write_atomic(stamp, (json.dumps({"variants": variants}, indent=2, sort_keys=True) + "\n").encode())


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
