"""Binaries are real: ELF/Mach-O/metallib magic, never Git LFS pointer stubs; .gitattributes covers them."""

from __future__ import annotations

import fnmatch
from pathlib import Path

from toolkit.verify.findings import FAIL, PASS, Finding
from toolkit.verify.objfile import binary_format

# A clone made without git-lfs (or with GIT_LFS_SKIP_SMUDGE=1) holds these ~130-byte stubs in place of the
# real files (docs/hub-contract.md §3.8). Uploading one publishes a kernel that dies with "invalid ELF header".
LFS_POINTER_PREFIX = b"version https://git-lfs.github.com/spec/v1"
METALLIB_MAGIC = b"MTLB"

# Suffix -> what its first bytes must be. Everything a loader maps or Metal parses.
BINARY_SUFFIXES = {".so": ("elf", "macho"), ".dylib": ("macho",), ".pyd": ("pe",), ".metallib": ("metallib",)}
# What the git transport must send through LFS (docs/hub-contract.md §3.8: the Hub rejects plain binary pushes).
GIT_LFS_PATTERNS = tuple(f"*{suffix}" for suffix in BINARY_SUFFIXES)


def is_lfs_pointer(data: bytes) -> bool:
    return data.lstrip()[: len(LFS_POINTER_PREFIX)] == LFS_POINTER_PREFIX


def file_kind(data: bytes) -> str | None:
    if data.startswith(METALLIB_MAGIC):
        return "metallib"
    return binary_format(data)


def check_file(rel: str, data: bytes) -> str | None:
    """Why this file must not be shipped, or None when it is fine."""
    if is_lfs_pointer(data):
        return f"{rel} is a Git LFS pointer stub ({len(data)} bytes), not the real file"
    suffix = Path(rel).suffix
    wanted = BINARY_SUFFIXES.get(suffix)
    if wanted is None:
        return None
    kind = file_kind(data)
    if kind not in wanted:
        head = data[:8].hex(" ") or "empty file"
        return f"{rel} is not a {'/'.join(wanted)} binary (first bytes: {head})"
    return None


def check_variant_binaries(variant: str, path: Path) -> list[Finding]:
    """Every file of the variant: no LFS stubs anywhere, real magic for every binary suffix."""
    problems: list[str] = []
    count = 0
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        rel = f.relative_to(path).as_posix()
        count += 1
        with f.open("rb") as fh:
            head = fh.read(4096)
        why = check_file(rel, head)
        if why:
            problems.append(why)
    if problems:
        return [
            Finding(variant, "binaries", FAIL, why, "fetch the real files (git lfs pull) or rebuild the variant")
            for why in problems
        ]
    return [Finding(variant, "binaries", PASS, f"{count} files, binaries have real ELF/Mach-O/metallib headers")]


# --- .gitattributes --------------------------------------------------------------------------------------


def _lfs_patterns(text: str) -> list[str]:
    """Patterns that a .gitattributes routes through the lfs filter (last matching line wins in git; we only
    need to know which patterns are set to filter=lfs and not later unset)."""
    state: dict[str, bool] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        pattern, *attrs = line.split()
        for attr in attrs:
            if attr == "filter=lfs":
                state[pattern] = True
            elif attr in ("-filter", "!filter") or (attr.startswith("filter=") and attr != "filter=lfs"):
                state[pattern] = False
    return [p for p, on in state.items() if on]


def gitattributes_covers(text: str, filename: str) -> bool:
    """Whether `filename` (a path in the repository) is stored through LFS according to this .gitattributes."""
    base = filename.rsplit("/", 1)[-1]
    for pattern in _lfs_patterns(text):
        target = filename if "/" in pattern.strip("/") else base
        if fnmatch.fnmatchcase(target, pattern.lstrip("/")):
            return True
    return False


def check_gitattributes(text: str | None, where: str = ".gitattributes") -> list[Finding]:
    """A git-transport target must route *.so, *.dylib, *.metallib (and *.pyd) through git-lfs."""
    if text is None:
        return [
            Finding(
                "*",
                "gitattributes",
                FAIL,
                f"{where} is missing",
                "add lines like '*.so filter=lfs diff=lfs merge=lfs -text' for " + ", ".join(GIT_LFS_PATTERNS),
            )
        ]
    missing = [p for p in GIT_LFS_PATTERNS if not gitattributes_covers(text, "build/v/x" + p[1:])]
    if missing:
        return [
            Finding(
                "*",
                "gitattributes",
                FAIL,
                f"{where} does not route {', '.join(missing)} through git-lfs",
                "add '<pattern> filter=lfs diff=lfs merge=lfs -text' for each",
            )
        ]
    return [Finding("*", "gitattributes", PASS, f"{where} routes {', '.join(GIT_LFS_PATTERNS)} through git-lfs")]


def gitattributes_text(existing: str | None) -> str:
    """`existing` plus whatever LFS lines are missing (idempotent; keeps the user's lines and order)."""
    text = existing or ""
    add = [p for p in GIT_LFS_PATTERNS if not gitattributes_covers(text, "build/v/x" + p[1:])]
    if not add:
        return text
    if text and not text.endswith("\n"):
        text += "\n"
    return text + "".join(f"{p} filter=lfs diff=lfs merge=lfs -text\n" for p in add)
