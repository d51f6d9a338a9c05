"""Op keys of vendor/UPSTREAM written before every package was declared alike: the first package's ops were bare
names ("flash_attn"), the others "<package>:<op>". Such a lock is read with every key qualified, in memory, with one
line of notice; the next `ggml-vendor sync` writes the qualified keys."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from toolkit.core import ui

if TYPE_CHECKING:  # the lock reads this module: types only, no import cycle
    from toolkit.core.lock import BehaviourPrint, Lock, LockedFile

SEPARATOR = ":"  # toolkit.core.config.KEY_SEPARATOR
_noticed: set[Path] = set()


def _bare(keys: object) -> list[str]:
    return [k for k in keys if isinstance(k, str) and SEPARATOR not in k]  # type: ignore[attr-defined]


def _owner(lock: Lock, vendor_dir: Path) -> str:
    """The package whose keys are bare: the one the [packages] table lists them under, else the project's
    package declared first (a one-package lock has no table), else "" (no project to ask)."""
    for name, keys in lock.packages.items():
        if _bare(keys):
            return name
    from toolkit.core.config import load
    from toolkit.core.errors import ConfigError

    try:
        return load(vendor_dir.parent).packages[0].name
    except (ConfigError, OSError):
        return ""


def _key(key: str, owner: str) -> str:
    return key if SEPARATOR in key else f"{owner}{SEPARATOR}{key}"


def _file(f: LockedFile, owner: str) -> LockedFile:
    return replace(f, needed_by=tuple(sorted(_key(n, owner) for n in f.needed_by)))


def _print_key(key: str, owner: str) -> str:
    op, sep, func = key.partition(": ")  # behaviour keys: "<op key>: <function>"
    return f"{_key(op, owner)}{sep}{func}"


def qualified(lock: Lock, vendor_dir: Path) -> Lock:
    """`lock` with every op key "<package>:<op>" (itself when it has no bare key)."""
    bare = _bare(lock.entries) or _bare(lock.closures)
    if not bare:
        return lock
    owner = _owner(lock, vendor_dir)
    if not owner:
        return lock
    if vendor_dir not in _noticed:
        _noticed.add(vendor_dir)
        ui.warn(
            "notice:",
            f"{vendor_dir / 'UPSTREAM'}: read the op keys {', '.join(bare)} as {owner}{SEPARATOR}<op> "
            "(the next `ggml-vendor sync` writes them so)",
        )
    behaviour: dict[str, BehaviourPrint] = {_print_key(k, owner): v for k, v in lock.behaviour.items()}
    return replace(
        lock,
        file_info=tuple(_file(f, owner) for f in lock.file_info),
        entries={_key(k, owner): v for k, v in lock.entries.items()},
        closures={_key(k, owner): v for k, v in lock.closures.items()},
        behaviour=behaviour,
        packages={n: tuple(_key(k, n if n == owner else owner) for k in keys) for n, keys in lock.packages.items()},
    )
