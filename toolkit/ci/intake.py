"""collect's intake: finding the artifacts among the paths given (an artifact, a directory of them, a .zip),
and reading one (unpacked or copied) with only regular files and directories admitted. A problem is a
`Refusal`, never a traceback.

Split from toolkit/ci/collect.py (the plan and the swap into build/) and toolkit/ci/admission.py (the checks a
variant must pass): getting at the bytes is a job apart from judging them.
"""

from __future__ import annotations

import os
import shutil
import stat
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from toolkit.core.records import fields_json
from toolkit.verify import record as vrecord

RECORD = vrecord.NAME
# What reading an artifact (unpacking a zip, copying a directory) may raise: a refusal, never a traceback.
_UNREADABLE = (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error)


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


def extract(zip_path: Path, dest: Path) -> None:
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


def regular_only(src: Path) -> None:
    """Refuse an artifact directory holding links or special files, before anything in it is opened (reading
    a named pipe would block): verify's check, the one rule for collect, verify and publish."""
    from toolkit.verify import non_regular

    found = non_regular(Path(os.path.realpath(src)))  # the path given may be a link; what it holds may not
    if found:
        raise ValueError(f"{found[0]}, not a regular file" + (f" (+{len(found) - 1} more)" if found[1:] else ""))


def _copy_in(src: Path, dest: Path) -> None:
    """Copy an artifact directory (never hard-link: a later write to the artifact must not change build/)."""
    regular_only(src)
    shutil.copytree(src, dest, copy_function=shutil.copy2)


def attempt(read: Callable[..., None], *args: Path) -> str | None:
    """Run one way of reading an artifact; why it cannot be read, or None. A damaged zip (bad deflate
    stream, bad CRC, truncated member) is a refusal like any other, never a traceback."""
    try:
        read(*args)
    except _UNREADABLE as exc:
        return f"cannot be read: {exc}"
    return None


def read_artifact(src: Path, root: Path) -> str | None:
    """Unpack or copy one artifact into `root` (execute's staging); why it cannot be read, or None."""
    return attempt(extract, src, root) if src.is_file() else attempt(_copy_in, src, root)
