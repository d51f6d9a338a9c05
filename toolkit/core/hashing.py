"""Hash helpers shared by the lock, the build cache, publish's plan and the local test Hub (hex digests,
streamed files, git blob ids)."""

from __future__ import annotations

import hashlib
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
