"""Hash helpers shared by the lock, the build cache, publish's plan and the local test Hub (hex digests,
streamed files, git blob ids), and the one tree hash: what verify's verdicts, the build's source identity and
the embedded miniature's cache key are computed with."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks so large binaries are not held in memory."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def git_blob_id(data: bytes) -> str:
    """The id git gives `data` as a blob (sha1 of "blob <size>\\0" + data): what the Hub lists for non-LFS files."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def tree_digest(files: Iterable[tuple[str, str]]) -> str:
    """One sha256 over a tree given as (relative path, hex sha256 of its bytes) pairs, in the order given:
    each pair hashed as `path NUL sha256 LF`, so a renamed, added, removed or changed file changes it."""
    h = hashlib.sha256()
    for rel, digest in files:
        h.update(rel.encode() + b"\0" + digest.encode() + b"\n")
    return h.hexdigest()


def _bytecode(rel: str) -> bool:
    return "__pycache__" in rel.split("/") or rel.endswith(".pyc")


def tree_sha256(path: Path) -> str:
    """`tree_digest` of every regular file under `path`, sorted, Python bytecode left out (an import writes
    it; it is not what was built or verified)."""
    files = sorted(p for p in Path(path).rglob("*") if p.is_file())
    rels = [(f.relative_to(path).as_posix(), f) for f in files]
    return tree_digest((rel, sha256_file(f)) for rel, f in rels if not _bytecode(rel))
