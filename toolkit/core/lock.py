"""vendor/UPSTREAM, the lock: what was vendored from where, every file's hash and reason, patches, licenses.

The lock is TOML written by hand-rolled, stable code (lock_text.py: sorted where order carries no meaning, one
table per file) so that a re-sync of the same revision produces the same bytes and a review diff reads well. It
holds no timestamps of its own: only facts of the pinned upstream commit.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import tomlkit

from toolkit.core import ggml_facts
from toolkit.core.errors import VendorStateError

# `as`: an explicit re-export, for build/inputs.py, which imports it from here (other modules use hashing's)
from toolkit.core.hashing import sha256_bytes
from toolkit.core.lock_text import lock_lines
from toolkit.core.records import fields_json

try:  # the standard library's parser is several times faster than tomlkit (no-op re-sync budget: 0.5 s)
    import tomllib as _toml

    _TomlError: tuple[type[Exception], ...] = (_toml.TOMLDecodeError,)
except ImportError:  # Python 3.10
    _toml = None  # type: ignore[assignment]
    _TomlError = ()
# What a malformed lock raises while it is parsed.
_LOCK_ERRORS: tuple[type[Exception], ...] = (
    KeyError,
    TypeError,
    ValueError,
    AttributeError,
    tomlkit.exceptions.ParseError,
    *_TomlError,
)

LOCK_NAME = "UPSTREAM"
# A table of the parsed lock (tomllib / tomlkit): keys to strings, numbers, arrays and tables.
TomlTable = dict[str, Any]
_COMMIT_RE = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_SHA256_RE = re.compile(r"[0-9a-f]{64}")

VERDICT_APPLIED = "applied"
VERDICT_UPSTREAM = "already-upstream"
VERDICT_CONFLICT = "conflict"


@dataclass(frozen=True)
class LockedFile:
    """One vendored file. `sha256` is of the bytes in vendor/ (after patches); `blob` is the upstream git
    blob id at the pinned commit ("" when a patch created the file)."""

    path: str
    sha256: str
    blob: str
    reason: str
    needed_by: tuple[str, ...] = ()  # "op/backend" closures that contain the file; () for always-ship
    patched_by: tuple[str, ...] = ()


@dataclass(frozen=True)
class LockedPatch:
    name: str
    sha256: str
    verdict: str  # VERDICT_APPLIED or VERDICT_UPSTREAM (a conflicting series is never locked)


@dataclass(frozen=True)
class LicenseInfo:
    """SPDX ids and copyright notices found in one vendored file.

    The lock records only where each notice stands (`copyright_at`, 1-based lines); the notice text itself
    stays in the vendored file, which the lock pins by sha256, and `read_lock` reads it back from there.
    So upstream's wording never enters a tracked file, and a notice that moves or changes still changes the
    file's hash."""

    path: str
    spdx: tuple[str, ...]
    copyright: tuple[str, ...]  # notice texts; () when read from a lock whose vendored file is absent
    copyright_at: tuple[int, ...] = ()


@dataclass(frozen=True)
class BehaviourPrint:
    """sha256 of one upstream function an op's semantics live in (toolkit.sync.behaviour), normalised:
    its declaration and its body separately."""

    ABSENT = "absent"

    path: str  # standalone-layout file it was found in; "" when absent
    signature: str  # sha256 of the normalised declaration, or ABSENT
    body: str  # sha256 of the normalised body, or ABSENT


@dataclass(frozen=True)
class Lock:
    upstream: str  # URL (or path, or "embedded") the commit came from
    layout: str  # ggml_facts.LAYOUT_GGML or LAYOUT_LLAMA_CPP
    commit: str  # full commit id
    rev: str  # what the user asked for (branch, tag, sha)
    date: str  # committer date, ISO 8601 with offset
    subject: str
    tool_version: str
    files: Mapping[str, str]  # path (standalone layout, relative to vendor/ggml) -> sha256
    file_info: tuple[LockedFile, ...] = ()
    patches: tuple[LockedPatch, ...] = ()
    licenses: tuple[LicenseInfo, ...] = ()
    entries: Mapping[str, Mapping[str, tuple[str, ...]]] = field(default_factory=dict)  # op -> backend -> entries
    closures: Mapping[str, Mapping[str, tuple[str, ...]]] = field(default_factory=dict)  # op -> backend -> files
    fingerprints: Mapping[str, str] = field(default_factory=dict)  # name -> sha256 of region, or "absent"
    llama_cpp_commit: str = ""  # ggml layout: the llama.cpp commit it was synced from (scripts/sync-llama.last)
    ggml_commit: str = ""  # llama.cpp layout: the last ggml commit synced into it (scripts/sync-ggml.last)
    behaviour: Mapping[str, BehaviourPrint] = field(default_factory=dict)  # ggml_facts.Behaviour.key -> hashes
    # package -> the op keys (of entries/closures) it owns; written only for a family of two or more packages.
    # Every key is "<package>:<op>" (toolkit.core.package_table.Package.key).
    packages: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def provenance_line(self) -> str:
        """What the pinned commit is, in words: the repository it belongs to and the twin commit when known."""
        if self.layout == ggml_facts.LAYOUT_LLAMA_CPP:
            twin = f"ggml commit {self.ggml_commit}" if self.ggml_commit else "ggml commit not recorded upstream"
            return f"Vendored llama.cpp commit: {self.commit} (its ggml/ tree; {twin})"
        line = f"Vendored ggml commit: {self.commit}"
        return line + (f" (synced from llama.cpp commit {self.llama_cpp_commit})" if self.llama_cpp_commit else "")

    def info(self, path: str) -> LockedFile | None:
        return next((f for f in self.file_info if f.path == path), None)

    def closure(self, op: str, backend: str) -> tuple[str, ...]:
        """Files of one op/backend closure (entry first), standalone layout; () if not vendored."""
        return tuple(self.closures.get(op, {}).get(backend, ()))

    def package_files(self, package: str) -> tuple[str, ...]:
        """Every vendored file a package needs (the union of its ops' closures), sorted; for a lock without a
        package table (one package), every closure file."""
        keys = self.packages.get(package, tuple(self.closures)) if self.packages else tuple(self.closures)
        return tuple(sorted({f for k in keys for files in self.closures.get(k, {}).values() for f in files}))

    def to_json(self) -> dict[str, Any]:
        return {
            **fields_json(self, "upstream layout commit rev date subject tool_version llama_cpp_commit ggml_commit"),
            "files": {
                f.path: {
                    "sha256": f.sha256,
                    "blob": f.blob,
                    "reason": f.reason,
                    "needed_by": list(f.needed_by),
                    "patched_by": list(f.patched_by),
                }
                for f in self.file_info
            },
            "patches": [{"name": p.name, "sha256": p.sha256, "verdict": p.verdict} for p in self.patches],
            "licenses": {
                lic.path: {
                    "spdx": list(lic.spdx),
                    "copyright": list(lic.copyright),
                    "copyright_lines": list(lic.copyright_at),
                }
                for lic in self.licenses
            },
            "packages": {name: list(keys) for name, keys in self.packages.items()},
            "entries": {op: {b: list(v) for b, v in per.items()} for op, per in self.entries.items()},
            "closures": {op: {b: list(v) for b, v in per.items()} for op, per in self.closures.items()},
            "fingerprints": dict(self.fingerprints),
            "behaviour": {
                k: {"path": v.path, "signature": v.signature, "body": v.body} for k, v in self.behaviour.items()
            },
        }


def package_view(lock: Lock, package: str, fingerprints: Iterable[str] = ()) -> Lock:
    """The lock as one package of the family sees it: its ops' entries, closures and behaviour prints, the files
    they need and the always-shipped ones (their needed-by narrowed to its ops), the licenses of those files and
    the patches that change them, the `fingerprints` named (the shared ones and the package's own), and no package
    table: the lock a project of that package alone pins. A package's build identity hashes it
    instead of the family's vendor/UPSTREAM, so adding a package leaves the others' identities alone. A lock
    without a package table (one package) is its own view."""
    if not lock.packages:
        return lock
    keys = set(lock.packages.get(package, ()))
    wanted = set(lock.package_files(package)) | {f.path for f in lock.file_info if not f.needed_by}
    infos = tuple(
        replace(f, needed_by=tuple(n for n in f.needed_by if n.rsplit("/", 1)[0] in keys))
        for f in lock.file_info
        if f.path in wanted
    )
    named = set(fingerprints)
    # A patch belongs to every package unless all the files it changes are other packages' alone.
    patching = {
        name: {f.path for f in lock.file_info if name in f.patched_by} for name in (p.name for p in lock.patches)
    }
    return replace(
        lock,
        files={p: h for p, h in lock.files.items() if p in wanted},
        patches=tuple(p for p in lock.patches if not patching[p.name] or patching[p.name] & wanted),
        file_info=infos,
        licenses=tuple(lic for lic in lock.licenses if lic.path in wanted),
        entries={k: v for k, v in lock.entries.items() if k in keys},
        closures={k: v for k, v in lock.closures.items() if k in keys},
        fingerprints={k: v for k, v in lock.fingerprints.items() if k in named},
        behaviour={k: v for k, v in lock.behaviour.items() if k.split(": ", 1)[0] in keys},
        packages={},
    )


def render_lock(lock: Lock) -> str:
    """The lock as TOML text (lock_text.py writes it): same Lock, same bytes."""
    return "\n".join(lock_lines(lock)) + "\n"


def _checked_upstream(doc: TomlTable) -> TomlTable:
    """The [upstream] table, its commit ids and the files' sha256 checked (ValueError naming the bad value)."""
    up: TomlTable = doc["upstream"]
    commit = str(up["commit"])
    if not _COMMIT_RE.fullmatch(commit):
        raise ValueError(f"upstream.commit {commit!r} is not a full commit id (40 or 64 hex digits)")
    for extra in ("llama-cpp-commit", "ggml-commit"):
        if extra in up and not _COMMIT_RE.fullmatch(str(up[extra])):
            raise ValueError(f"upstream.{extra} {up[extra]!r} is not a full commit id")
    for p, v in doc.get("files", {}).items():
        if not _SHA256_RE.fullmatch(str(v.get("sha256", ""))):
            raise ValueError(f"files.{p}.sha256 {v.get('sha256')!r} is not a sha256 (64 hex digits)")
    return up


def _file_info(doc: TomlTable) -> tuple[LockedFile, ...]:
    return tuple(
        LockedFile(
            path=p,
            sha256=str(v["sha256"]),
            blob=str(v.get("blob", "")),
            reason=str(v.get("reason", "")),
            needed_by=tuple(v.get("needed-by", ())),
            patched_by=tuple(v.get("patched-by", ())),
        )
        for p, v in doc.get("files", {}).items()
    )


def _per_op(doc: TomlTable, table: str) -> dict[str, dict[str, tuple[str, ...]]]:
    return {op: {b: tuple(v) for b, v in per.items()} for op, per in doc.get(table, {}).items()}


def _lock_of(doc: TomlTable) -> Lock:
    up = _checked_upstream(doc)
    file_info = _file_info(doc)
    return Lock(
        upstream=str(up["url"]),
        layout=str(up["layout"]),
        commit=str(up["commit"]),
        rev=str(up.get("rev", "")),
        date=str(up.get("date", "")),
        subject=str(up.get("subject", "")),
        tool_version=str(doc.get("tool", {}).get("version", "")),
        files={f.path: f.sha256 for f in file_info},
        file_info=file_info,
        patches=tuple(LockedPatch(str(p["name"]), str(p["sha256"]), str(p["verdict"])) for p in doc.get("patches", [])),
        licenses=tuple(
            LicenseInfo(
                p,
                tuple(v.get("spdx", ())),
                tuple(v.get("copyright", ())),
                tuple(int(n) for n in v.get("copyright-lines", ())),
            )
            for p, v in doc.get("licenses", {}).items()
        ),
        entries=_per_op(doc, "entries"),
        closures=_per_op(doc, "closures"),
        fingerprints={str(k): str(v) for k, v in doc.get("fingerprints", {}).items()},
        llama_cpp_commit=str(up.get("llama-cpp-commit", "")),
        ggml_commit=str(up.get("ggml-commit", "")),
        behaviour={
            str(k): BehaviourPrint(str(v.get("path", "")), str(v["signature"]), str(v["body"]))
            for k, v in doc.get("behaviour", {}).items()
        },
        packages={str(n): tuple(str(k) for k in v["ops"]) for n, v in doc.get("packages", {}).items()},
    )


def parse_lock(text: str, where: str = LOCK_NAME) -> Lock:
    """Parse lock text; a malformed lock is a VendorStateError naming what is wrong."""
    try:
        doc = _toml.loads(text) if _toml is not None else tomlkit.parse(text).unwrap()
        return _lock_of(doc)
    except _LOCK_ERRORS as exc:
        raise VendorStateError(
            f"{where} is not a valid lock ({type(exc).__name__}: {exc})",
            "restore it from git (git checkout vendor/UPSTREAM) or re-run ggml-vendor sync --rev REV --force",
        ) from None


def read_lock(vendor_dir: Path) -> Lock | None:
    """The lock in `vendor_dir`, or None when there is none yet. A lock from before every op key named its
    package is read with its keys qualified (lock_keys.qualified), and says so once."""
    from toolkit.core import lock_keys

    vendor_dir = Path(vendor_dir)
    if not (path := vendor_dir / LOCK_NAME).is_file():
        return None
    lock = lock_keys.qualified(parse_lock(path.read_text(encoding="utf-8"), str(path)), vendor_dir)
    return replace(lock, licenses=tuple(_with_notices(lic, lock, vendor_dir) for lic in lock.licenses))


def notice_text(line: str) -> str:  # a copyright line as the inventory shows it: comment markers removed
    return line.strip().lstrip("/*#; ").rstrip("*/ ").strip()


def _with_notices(lic: LicenseInfo, lock: Lock, vendor_dir: Path) -> LicenseInfo:
    """Fill in the notice texts from the vendored file, but only from the very bytes the lock pins."""
    src = vendor_dir / ggml_facts.VENDOR_SUBDIR / lic.path
    if lic.copyright or not lic.copyright_at or not src.is_file():
        return lic
    data = src.read_bytes()
    if sha256_bytes(data) != lock.files.get(lic.path):
        return lic
    text = data.decode("utf-8", "replace").splitlines()
    notices = tuple(notice_text(text[n - 1]) for n in lic.copyright_at if 0 < n <= len(text))
    return replace(lic, copyright=tuple(dict.fromkeys(notices)))
