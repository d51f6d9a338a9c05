"""collect's admission: the checks a variant of an artifact must pass before it may enter build/ (complete,
from this source tree, verified on the runner, and still sound under verify's host-independent checks here),
and `Incoming`, a variant that passed them.

Split from toolkit/ci/collect.py, whose plan calls `check_artifact` for every artifact intake found; judging a
variant is a job apart from finding its bytes (toolkit/ci/intake.py) and swapping it in (collect.py).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit.ci.intake import Refusal, attempt, extract, regular_only
from toolkit.core.config import Config
from toolkit.core.errors import CollectError
from toolkit.core.records import fields_json, sub_table
from toolkit.verify import record as vrecord

SCRATCH_PREFIX = "ggml-vendor-collect-"  # the plan's private unpacking of a .zip, in the system temp dir


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
class Context:
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


def _placement(ctx: Context, name: str, vd: Path, alone: bool) -> Refusal | None:
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


def _admission(ctx: Context, name: str, vd: Path, record_doc: dict[str, Any] | None, alone: bool) -> Refusal | None:
    """The first reason to refuse the variant `vd` of artifact `name` on its bytes, or None."""
    from toolkit.verify.runner import tree_sha256

    placed = _placement(ctx, name, vd, alone)
    if placed is not None:
        return placed
    meta = _read_meta(vd)
    if isinstance(meta, str):
        return Refusal(name, vd.name, "incomplete", meta)
    checks: tuple[tuple[str, Callable[[], str | None]], ...] = (
        ("incomplete", lambda: _completeness(vd, meta)),
        ("foreign", lambda: _foreign(meta, ctx.here)),
        ("unverified", lambda: vrecord.why_unverified(record_doc, vd.name, tree_sha256(vd))),
    )
    for kind, why in checks:
        reason = why()
        if reason:
            return Refusal(name, vd.name, kind, reason)
    return None


def _recheck(ctx: Context, name: str, src: Path, vd: Path, record: dict[str, Any]) -> Refusal | Incoming:
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


def _check_variants(ctx: Context, name: str, src: Path, root: Path) -> tuple[list[Incoming], list[Refusal]]:
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


def check_artifact(ctx: Context, name: str, src: Path) -> tuple[list[Incoming], list[Refusal]]:
    """Check each variant of one artifact where it lies: a directory in place, a zip unpacked into a
    private temporary directory (outside the project and the cache) that is gone when this returns."""
    if src.is_dir():
        why = attempt(regular_only, src)
        return ([], [Refusal(name, "", "incomplete", why)]) if why else _check_variants(ctx, name, src, src)
    with tempfile.TemporaryDirectory(prefix=SCRATCH_PREFIX) as scratch:
        why = attempt(extract, src, Path(scratch))
        return ([], [Refusal(name, "", "incomplete", why)]) if why else _check_variants(ctx, name, src, Path(scratch))


def _is_variant_name(name: str) -> bool:
    from toolkit.build.matrix import NAME_RE

    return NAME_RE.match(name) is not None
