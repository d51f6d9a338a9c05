"""build/<variant>/ on disk: whether it is intact, and its replacement, staged beside it and swapped in by
toolkit.core.fs (both executors write it this way), with the next run's cleanup after a kill."""

from __future__ import annotations

import base64
import hashlib
import json
from contextlib import AbstractContextManager
from pathlib import Path

from toolkit.core import fs
from toolkit.core.errors import Interrupted

STAGE_MARKER = ".tmp-"  # staging dirs are hidden siblings of the variant dirs: build/.<variant>.tmp-<pid>-<hex>


def b64_sha256_file(path: Path) -> str:
    with open(path, "rb") as fh:
        return base64.b64encode(hashlib.file_digest(fh, "sha256").digest()).decode()


def intact_files(out: Path) -> dict[str, str] | None:
    """build/<variant>/'s metadata digest (relative path -> base64 sha256) when the tree is exactly what it
    says (same file set, same bytes); None when it is not, or has no readable digest."""
    try:
        meta = json.loads((out / "metadata.json").read_text())
        files: dict[str, str] = meta["digest"]["files"]  # metadata.json's digest: path -> base64 sha256
    except (OSError, ValueError, KeyError, TypeError):
        return None
    present = {
        p.relative_to(out).as_posix()
        for p in out.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }
    present -= {"metadata.json", "metadata.json.sigstore"}
    if present != set(files):
        return None
    return files if all(b64_sha256_file(out / rel) == want for rel, want in files.items()) else None


def variant_intact(out: Path) -> bool:
    """build/<variant>/ exactly as its metadata digest says: same file set, same bytes."""
    return intact_files(out) is not None


def clean_stale_stages(build_dir: Path) -> list[str]:
    """What a killed build left in build/ (SIGKILL skips our cleanup) is undone on the next run: an
    interrupted swap rolled back, staging dirs and old trees removed (the project lock is ours alone)."""
    return fs.recover_dir(build_dir, (STAGE_MARKER,), only_dead=False)


def variant_stage(final: Path) -> AbstractContextManager[Path]:
    """The staged tree of build/<variant>/ (toolkit.core.fs.staged): swapped in when complete, so readers
    see the old variant or the new one, never a missing or half-written one."""
    return fs.staged(final, f".{final.name}{STAGE_MARKER}", only_dead=False)


def fingerprint(out: Path) -> str | None:
    """What build/<variant>/ holds, cheaply: the sha256 of its metadata.json (which carries every file's
    digest); None when there is none."""
    try:
        return hashlib.sha256((out / "metadata.json").read_bytes()).hexdigest()
    except OSError:
        return None


def read_back(build_dir: Path, before: tuple[tuple[str, Path, str | None], ...]) -> Interrupted:
    """The one line for a Ctrl-C of a build: which of the planned variants (name, build/<variant>, its
    fingerprint when planned) build/ now holds anew, read back from disk after a cut swap is rolled back."""
    clean_stale_stages(build_dir)
    new, same, broken = [], [], []
    for name, out, was in before:
        now = fingerprint(out) if variant_intact(out) else None
        if now is not None and now != was:
            new.append(name)
        elif now == was:
            same.append(name)
        else:
            broken.append(name)
    if broken:
        return Interrupted(
            f"build/ holds no intact {', '.join(broken)} (read back from disk)", "run ggml-vendor build again"
        )
    if not new:
        return Interrupted(
            "build/ is as it was: no variant was replaced (read back from disk)", "run ggml-vendor build again"
        )
    rest = f"; {', '.join(same)} as before" if same else ""
    return Interrupted(
        f"build/ holds the new build of {', '.join(new)}{rest} (read back from disk)",
        "nothing is half-written; ggml-vendor build again finishes the rest and skips what is up to date"
        if same
        else "nothing to undo",
    )
