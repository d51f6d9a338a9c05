"""Content-addressed build cache: one entry per compile or link action, keyed by what determines its output.

The key of an action hashes its command line (flags, defines, include dirs as written), the identity of
its toolchain (compiler version, torch build), the content of its direct inputs, and the vendor lock. Each
entry also records the project files the compiler actually read (from its depfile) with their hashes, so a
header edited under vendor/ or csrc/ misses even when the lock did not change (ccache's "direct mode").
Files outside the project (toolkit, torch headers) are covered by the toolchain identity instead of being
hashed one by one: a torch or CUDA install is immutable per version and path.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit.core import fs
from toolkit.core.hashing import sha256_file


def scratch_prefix(step_id: str) -> str:
    """The name prefix of a step's scratch dirs under <cache>/tmp (`<step id>.<pid>-<hex>` once made by
    toolkit.core.fs, so a later run can tell a dead run's leftovers from a live one's)."""
    return f"{step_id}."


def digest_strings(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def parse_depfile(text: str) -> list[str]:
    """Paths named in a make-style depfile (`out: a b \\` continuation lines, escaped spaces)."""
    body = text.replace("\\\n", " ")
    _, _, deps = body.partition(": ")
    out: list[str] = []
    token = ""
    i = 0
    while i < len(deps):
        c = deps[i]
        if c == "\\" and i + 1 < len(deps) and deps[i + 1] == " ":
            token += " "
            i += 2
            continue
        if c.isspace():
            if token:
                out.append(token)
            token = ""
        else:
            token += c
        i += 1
    if token:
        out.append(token)
    return out


@dataclass(frozen=True)
class CacheEntry:
    key: str
    path: Path  # directory holding the artefact and manifest.json

    def artefact(self, name: str) -> Path:
        return self.path / name


class BuildCache:
    """Entries live at <root>/<kind>/<key[:2]>/<key>/ with the artefact and a manifest.json."""

    def __init__(self, root: Path, project: Path) -> None:
        self.root = root
        self.project = project.resolve()
        self._file_hashes: dict[str, str] = {}

    # -- hashing of project files, memoised for the run (a header is shared by many actions) --
    def file_hash(self, rel_or_abs: str) -> str | None:
        p = Path(rel_or_abs)
        full = p if p.is_absolute() else self.project / p
        k = str(full)
        if k not in self._file_hashes:
            try:
                self._file_hashes[k] = sha256_file(full)
            except OSError:
                return None
        return self._file_hashes[k]

    def in_project(self, dep: str) -> str | None:
        """The project-relative path of a dependency, or None if it lies outside the project."""
        p = Path(dep)
        full = (p if p.is_absolute() else self.project / p).resolve()
        try:
            return full.relative_to(self.project).as_posix()
        except ValueError:
            return None

    def entry_dir(self, kind: str, key: str) -> Path:
        return self.root / kind / key[:2] / key

    def lookup(self, kind: str, key: str) -> CacheEntry | None:
        """A valid entry for `key`: present, complete, and every recorded project dependency unchanged."""
        d = self.entry_dir(kind, key)
        try:
            manifest = json.loads((d / "manifest.json").read_text())
        except (OSError, ValueError):
            return None
        for rel, want in manifest.get("deps", {}).items():
            if self.file_hash(rel) != want:
                return None
        if not all((d / name).is_file() for name in manifest.get("artefacts", [])):
            return None
        return CacheEntry(key, d)

    def store(
        self, kind: str, key: str, artefacts: dict[str, Path], deps: list[str], info: dict[str, Any]
    ) -> CacheEntry:
        """Move artefacts into a new entry atomically (staged in the cache dir, swapped into place by
        toolkit.core.fs: a reader sees the old entry or the new one)."""
        final = self.entry_dir(kind, key)
        with fs.staged(final, f".{key[:12]}.") as stage:
            for name, src in artefacts.items():
                shutil.copy2(src, stage / name)
            manifest = {"key": key, "artefacts": sorted(artefacts), "deps": self._dep_hashes(deps), **info}
            (stage / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
        return CacheEntry(key, final)

    def _dep_hashes(self, deps: list[str]) -> dict[str, str]:
        """The project files among `deps`, with their hashes (sorted): what a later lookup re-checks."""
        rel_deps = {}
        for dep in deps:
            rel = self.in_project(dep)
            if rel is not None:
                h = self.file_hash(rel)
                if h is not None:
                    rel_deps[rel] = h
        return dict(sorted(rel_deps.items()))

    # -- variant stamps: what the assembled build/<variant>/ was made from --
    def stamp_path(self, variant: str) -> Path:
        return self.root / "variants" / f"{variant}.json"

    def read_stamp(self, variant: str) -> dict[str, Any] | None:
        try:
            stamp = json.loads(self.stamp_path(variant).read_text())
        except (OSError, ValueError):
            return None
        return stamp if isinstance(stamp, dict) else None  # a stamp is a JSON object; anything else is no stamp

    def write_stamp(self, variant: str, stamp: dict[str, Any]) -> None:
        fs.atomic_write(self.stamp_path(variant), json.dumps(stamp, indent=1, sort_keys=True).encode())
