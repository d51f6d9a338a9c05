"""The entries check: a variant holds directories and regular files only.

What the Hub stores, and what `kernels` loads, is regular files. A symbolic link would make verify hash, and
publish upload, whatever it points at (a file outside the project, say); a named pipe would hang the first
check that opens it. collect refuses both in an artifact; verify fails the variant on them before any other
check opens a file, and publish refuses it (preflight) even when the link was made after verify passed.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from toolkit.verify.findings import FAIL, PASS, Finding

CHECK = "entries"
_KINDS = (
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _link(full: Path, variant_dir: Path) -> str:
    target = os.readlink(full)
    resolved = Path(os.path.realpath(full))
    inside = resolved == variant_dir or variant_dir in resolved.parents
    return f"a symbolic link to {target!r}" + ("" if inside else ", outside the variant")


def non_regular(variant_dir: Path) -> list[str]:
    """'<relative path> is <what>' for every entry of `variant_dir` that is neither a directory nor a regular
    file, found without following a link or opening a file."""
    variant_dir = Path(variant_dir)
    if variant_dir.is_symlink():  # build/<variant> itself: its files are wherever the link points
        return [f"{variant_dir.name} itself is a symbolic link to {os.readlink(variant_dir)!r}, not a directory"]
    # The directories above it may be links (build/ on another disk): only the variant's own entries count.
    variant_dir = Path(os.path.realpath(variant_dir.parent)) / variant_dir.name
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(variant_dir):  # never descends into a linked directory
        for name in sorted(dirnames + filenames):
            full = Path(dirpath) / name
            mode = full.lstat().st_mode
            if stat.S_ISDIR(mode) or stat.S_ISREG(mode):
                continue
            rel = full.relative_to(variant_dir).as_posix()
            what = _link(full, variant_dir) if stat.S_ISLNK(mode) else None
            what = what or next((kind for test, kind in _KINDS if test(mode)), "a special file")
            found.append(f"{rel} is {what}")
        dirnames.sort()
    return sorted(found)


def check_entries(variant: str, variant_dir: Path) -> list[Finding]:
    """FAIL naming the entries that are not regular files (links, pipes, sockets, devices); PASS otherwise."""
    found = non_regular(variant_dir)
    if not found:
        return [Finding(variant, CHECK, PASS, "directories and regular files only")]
    more = f" (+{len(found) - 2} more)" if len(found) > 2 else ""
    return [
        Finding(
            variant,
            CHECK,
            FAIL,
            f"not a regular file: {'; '.join(found[:2])}{more}",
            "remove it and rebuild the variant (ggml-vendor build): a variant ships regular files only",
            tuple(found),
        )
    ]
