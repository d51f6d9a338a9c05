"""build/<variant>/ on disk: whether it is intact, and its replacement, staged beside it and swapped in by
toolkit.core.fs (both executors write it this way), with the next run's cleanup after a kill."""

from __future__ import annotations

import base64
import hashlib
import json
from contextlib import AbstractContextManager
from pathlib import Path

from toolkit.core import fs

STAGE_MARKER = ".tmp-"  # staging dirs are hidden siblings of the variant dirs: build/.<variant>.tmp-<pid>-<hex>


def b64_sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return base64.b64encode(h.digest()).decode()


def variant_intact(out: Path) -> bool:
    """build/<variant>/ exactly as its metadata digest says: same file set, same bytes."""
    try:
        meta = json.loads((out / "metadata.json").read_text())
        files = meta["digest"]["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    present = {
        p.relative_to(out).as_posix()
        for p in out.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }
    present -= {"metadata.json", "metadata.json.sigstore"}
    if present != set(files):
        return False
    return all(b64_sha256_file(out / rel) == want for rel, want in files.items())


def digest_files(out: Path) -> dict | None:
    try:
        return json.loads((out / "metadata.json").read_text())["digest"]["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def clean_stale_stages(build_dir: Path) -> list[str]:
    """What a killed build left in build/ (SIGKILL skips our cleanup) is undone on the next run: an
    interrupted swap rolled back, staging dirs and old trees removed (the project lock is ours alone)."""
    return fs.recover_dir(build_dir, (STAGE_MARKER,), only_dead=False)


def variant_stage(final: Path) -> AbstractContextManager[Path]:
    """The staged tree of build/<variant>/ (toolkit.core.fs.staged): swapped in when complete, so readers
    see the old variant or the new one, never a missing or half-written one."""
    return fs.staged(final, f".{final.name}{STAGE_MARKER}", only_dead=False)
