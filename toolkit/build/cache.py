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
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from toolkit.core import fs
from toolkit.core.hashing import sha256_file


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists (one we may not signal counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return pid > 0


def scratch_dir(base: Path, prefix: str) -> Path:
    """A new scratch dir under `base`, named after this process (`<prefix>.<pid>-XXXX`), so a later run can
    tell a dead run's leftovers (SIGKILL skips every cleanup) from a live one's."""
    base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"{prefix}.{os.getpid()}-", dir=base))


def clean_dead_scratch(base: Path) -> int:
    """Remove the scratch dirs of runs that are no longer alive (and unnamed leftovers of older versions);
    returns how many were removed."""
    removed = 0
    if not base.is_dir():
        return 0
    for p in base.iterdir():
        pid_text = p.name.rpartition(".")[2].partition("-")[0]
        if pid_text.isdigit() and pid_alive(int(pid_text)):
            continue
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
        removed += 1
    return removed


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

    def store(self, kind: str, key: str, artefacts: dict[str, Path], deps: list[str], info: dict) -> CacheEntry:
        """Move artefacts into a new entry atomically (staged in the cache dir, renamed into place)."""
        final = self.entry_dir(kind, key)
        final.parent.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=f".{key[:12]}.", dir=final.parent))
        try:
            for name, src in artefacts.items():
                shutil.copy2(src, stage / name)
            rel_deps = {}
            for dep in deps:
                rel = self.in_project(dep)
                if rel is not None:
                    h = self.file_hash(rel)
                    if h is not None:
                        rel_deps[rel] = h
            manifest = {"key": key, "artefacts": sorted(artefacts), "deps": dict(sorted(rel_deps.items())), **info}
            (stage / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
            if final.exists():
                shutil.rmtree(final, ignore_errors=True)
            os.replace(stage, final)
        finally:
            shutil.rmtree(stage, ignore_errors=True)
        return CacheEntry(key, final)

    # -- variant stamps: what the assembled build/<variant>/ was made from --
    def stamp_path(self, variant: str) -> Path:
        return self.root / "variants" / f"{variant}.json"

    def read_stamp(self, variant: str) -> dict | None:
        try:
            return json.loads(self.stamp_path(variant).read_text())
        except (OSError, ValueError):
            return None

    def write_stamp(self, variant: str, stamp: dict) -> None:
        fs.atomic_write(self.stamp_path(variant), json.dumps(stamp, indent=1, sort_keys=True).encode())
