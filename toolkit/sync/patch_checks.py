"""What `patch save` refuses before it diffs anything: vendor/ entries that are not regular files, and a
vendor/ that no longer matches its pin (edits outside the vendored sources, a changed series)."""

from __future__ import annotations

import stat
from pathlib import Path

from toolkit.core.config import Config
from toolkit.core.errors import PatchError, VendorStateError
from toolkit.core.lock import Lock
from toolkit.sync.vendor_tree import EDITED, EXTRA, SOURCES_DIR, check_vendor_dir


def _file_kind(path: Path) -> str | None:
    """What `path` is when it is not a regular file ("a symbolic link", "a directory", ...); None for a
    regular file or nothing. Never follows a link and never opens the file (a FIFO would block)."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISREG(mode):
        return None
    kinds = (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a named pipe"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), "a device or other special file")


def refuse_odd_files(cfg: Config, lock: Lock) -> None:
    """A patch saves file contents: a vendored path that is a link, directory, pipe... is vendor state
    sync must repair first (a link would make us save a file from outside the tree, a FIFO would hang)."""
    base = cfg.vendor_dir / SOURCES_DIR
    for rel in sorted(lock.files):
        kind = _file_kind(base / rel)
        if kind is not None:
            raise VendorStateError(
                f"vendor/{SOURCES_DIR}/{rel} is {kind}, not a regular file: a patch can only save file contents",
                "replace it with a regular file holding your edits, or restore it with ggml-vendor sync --force",
            )


def check_pin(cfg: Config, lock: Lock, *, allow_edits: bool) -> list[str]:
    """Refuse a vendor/ that does not stand on its pin; return the edited vendored files (vendor/ggml-relative)."""
    refuse_odd_files(cfg, lock)
    findings = check_vendor_dir(cfg.vendor_dir, lock)
    extra = [f for f in findings if f.kind == EXTRA]
    if extra:
        shown = ", ".join(f"vendor/{f.path}" for f in extra[:3]) + (
            f" and {len(extra) - 3} more" if len(extra) > 3 else ""
        )
        raise PatchError(
            f"edits outside the vendored files: {shown} not pinned by vendor/UPSTREAM",
            "a patch may only change files sync vendored; move or delete those files first",
        )
    dirty = [f for f in findings if f.kind != EDITED]
    if dirty:
        f = dirty[0]
        raise VendorStateError(
            f"the pin is dirty: vendor/{f.path} is {f.kind}"
            + (f" ({f.detail})" if f.detail else "")
            + (f", and {len(dirty) - 1} more finding(s)" if len(dirty) > 1 else ""),
            "run ggml-vendor sync so vendor/ matches vendor/UPSTREAM first (it refuses to overwrite edits)",
        )
    edited = [f.path[len(SOURCES_DIR) + 1 :] for f in findings if f.kind == EDITED]
    if edited and not allow_edits:
        raise VendorStateError(
            f"vendor/ has unsaved edits ({', '.join(f'vendor/{SOURCES_DIR}/{p}' for p in edited[:3])})",
            "save them first with ggml-vendor patch save NAME -m '...' (or discard them with ggml-vendor sync --force)",
        )
    return edited
