"""Crash-safe file-system updates, the one implementation every stage uses: write a file atomically, swap a
staged directory into place, and clean up what runs killed mid-way left behind.

    atomic_write(path, data)          a reader sees the old bytes or the new ones, never a mix or nothing
    new_staging(parent, prefix)       a fresh, uniquely named staging directory (its creator's pid in the name)
    swap_dir(staged, target)          `staged` becomes `target` in one step; the old tree is removed
    swap_keeping_old(staged, target)  the same, the old tree left for the caller (returned)
    recover_swap(target)              roll back a fallback swap that a SIGKILL interrupted
    tree_on_record(target)            what `target` holds as that rollback would leave it (read-only)
    stale_staging(parent, prefix)     remove staging dirs/temp files whose creating process is dead
    staged(target)                    a `with` block that builds a new tree beside `target` and swaps it in
                                      on success (a dead run's staging and half swap cleaned first)
    scratch(parent, prefix)           a `with` block's own scratch directory, removed after it (or, after a
                                      kill, by the next `scratch` with that prefix)
    recover(target, prefix)           the same for one target, where a caller skips `staged` when done
    journaled_targets(parent)         the entries of `parent` whose fallback swap a run may have left half done
    recover_dir(parent, markers)      every interrupted swap in `parent` rolled back, and the staging dirs
                                      and old trees of dead runs removed (a stage's start-up cleanup)

`swap_dir` uses Linux renameat2(RENAME_EXCHANGE), so there is never an instant without a complete `target`;
elsewhere, two renames with a journal (`.<name>.journal`) between them, and `recover_swap` puts the old tree
back if a process died after the first (callers call it at their start; the project lock makes that safe).

Test hooks: GGML_VENDOR_KILL_AT=N SIGKILLs at the Nth `checkpoint` (from the last `reset_checkpoints`),
GGML_VENDOR_INTERRUPT_AT=LABEL raises a Ctrl-C at the checkpoint so labelled; GGML_VENDOR_NO_EXCHANGE forces the
fallback swap; GGML_VENDOR_NO_FSYNC skips fsync (power-loss safety only).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import json
import os
import re
import secrets
import shutil
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

KILL_ENV = "GGML_VENDOR_KILL_AT"
INT_ENV = "GGML_VENDOR_INTERRUPT_AT"
NO_FSYNC_ENV = "GGML_VENDOR_NO_FSYNC"
NO_EXCHANGE_ENV = "GGML_VENDOR_NO_EXCHANGE"

# --- test checkpoints ----------------------------------------------------------------------------------

_checkpoints = 0


def reset_checkpoints() -> None:
    """Start counting checkpoints from 1 again (at the start of one replacement)."""
    global _checkpoints
    _checkpoints = 0


def checkpoint(label: str) -> None:
    """A numbered point in an update where a test may SIGKILL us (KILL_ENV=N) or Ctrl-C us (INT_ENV=label)."""
    global _checkpoints
    _checkpoints += 1
    want = os.environ.get(KILL_ENV)
    if want and want.isdigit() and int(want) == _checkpoints:
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get(INT_ENV) == label:
        os.kill(os.getpid(), signal.SIGINT)  # a Ctrl-C landing right here (KeyboardInterrupt just after)


# --- durability ----------------------------------------------------------------------------------------


def _fsync_wanted() -> bool:
    return not os.environ.get(NO_FSYNC_ENV)


def fsync_dir(path: Path) -> None:
    """Make a directory's entries (renames, creations) durable; best effort (some filesystems refuse)."""
    if not _fsync_wanted():
        return
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_new(path: Path, data: bytes) -> None:
    """Create `path` (it must not exist) holding `data`, flushed to disk."""
    with open(path, "xb") as fh:
        fh.write(data)
        if _fsync_wanted():
            fh.flush()
            os.fsync(fh.fileno())


def _tmp_name(name: str) -> str:
    return f".{name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"


def atomic_write(path: Path, data: bytes) -> None:
    """Replace (or create) the file `path` with `data` atomically: written to a temp file beside it, then
    renamed over it. The parent is created if missing. The new file gets the old one's permission bits, or
    the umask's default for a new file (not mkstemp's 0600)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(_tmp_name(path.name))
    try:
        write_new(tmp, data)
        with contextlib.suppress(OSError):
            os.chmod(tmp, os.stat(path).st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(path.parent)


# --- directory swap ------------------------------------------------------------------------------------


def _load_renameat2() -> Callable[..., int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_RENAMEAT2 = _load_renameat2()
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def exchange(a: Path, b: Path) -> bool:
    """Atomically swap two existing directory entries; False if this kernel or filesystem cannot."""
    if _RENAMEAT2 is None or os.environ.get(NO_EXCHANGE_ENV):
        return False
    if _RENAMEAT2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(code, f"renameat2({a}, {b}, RENAME_EXCHANGE): {os.strerror(code)}")


def new_staging(parent: Path, prefix: str) -> Path:
    """Create and return `parent/<prefix><pid>-<random>`, a directory for building a tree before
    `swap_dir`; the pid lets `stale_staging` tell a dead run's leftovers from a live run's work."""
    parent = Path(parent)
    parent.mkdir(parents=True, exist_ok=True)
    path = parent / f"{prefix}{os.getpid()}-{secrets.token_hex(4)}"
    path.mkdir()
    return path


def journal_path(target: Path) -> Path:
    """Where the fallback swap of `target` records the old tree's name while it is moved aside."""
    return target.with_name(f".{target.name}.journal")


def old_prefix(target: Path) -> str:
    """The name prefix of `target`'s old tree while the fallback swap moves it aside."""
    return f".{target.name}.old-"


def swap_dir(staged: Path, target: Path) -> None:
    """Make the directory `staged` the new `target` (same filesystem), atomically, and remove the old tree.

    `target` missing: a plain rename. Otherwise renameat2(RENAME_EXCHANGE); where that is unavailable, the
    journaled two-rename fallback, whose interruption `recover_swap(target)` undoes."""
    target = Path(target)
    old = swap_keeping_old(staged, target)
    fsync_dir(target.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def swap_keeping_old(staged: Path, target: Path) -> Path | None:
    """`swap_dir` that leaves the previous tree for the caller (to remove, or to swap back if a later step of
    a larger update fails) and returns where it is: `staged`'s name after the exchange, the moved-aside name
    after the fallback, None when there was no `target`. No fsync: the caller's commit makes it durable."""
    staged, target = Path(staged), Path(target)
    if not os.path.lexists(target):
        os.rename(staged, target)
        checkpoint("renamed into place")
        return None
    if exchange(staged, target):
        checkpoint("swapped")  # `staged` now holds the old tree
        return staged
    return _journaled_swap(staged, target)


def _journaled_swap(staged: Path, target: Path) -> Path:
    """Two renames with a journal in between; `recover_swap` rolls back if we die after the first. Returns
    the moved-aside old tree."""
    old = target.with_name(f"{old_prefix(target)}{os.getpid()}-{secrets.token_hex(4)}")
    journal = journal_path(target)
    atomic_write(journal, json.dumps({"old": old.name, "new": staged.name, "pid": os.getpid()}).encode())
    checkpoint("journal written")
    os.rename(target, old)
    checkpoint("old tree moved aside")
    os.rename(staged, target)
    checkpoint("new tree in place")
    journal.unlink()
    return old


def journal_record(target: Path) -> tuple[Path | None, int]:
    """The old tree and the writer's pid that a fallback swap of `target` journaled: (None, 0) when there is
    no journal or it cannot be read. Read-only (a plan may look, only recover_swap acts)."""
    try:
        record = json.loads(journal_path(target).read_text())
        return target.with_name(record["old"]), int(record.get("pid", 0))
    except (ValueError, KeyError, TypeError, OSError):
        return None, 0


def tree_on_record(target: Path) -> Path:
    """`target`, or while a killed journaled swap has moved its old tree aside (`target` missing), that tree."""
    target = Path(target)
    if os.path.lexists(target) or not journal_path(target).is_file():
        return target
    old, _ = journal_record(target)
    return old if old is not None and old.is_dir() else target


def recover_swap(target: Path) -> list[str]:
    """Undo a fallback swap of `target` a dead process left half done (old tree aside, new one not in place): put
    the old tree back; returns what it did. A live writer's journal is left alone. Safe twice at once (shared lock)."""
    target = Path(target)
    journal = journal_path(target)
    if not journal.exists():
        return []
    old, pid = journal_record(target)
    if pid and _alive(pid):
        return []
    actions = []
    if old is not None and old.is_dir() and not os.path.lexists(target):
        with contextlib.suppress(FileNotFoundError):  # `old` gone: a recovery beside us put it back first
            os.rename(old, target)  # the swap stopped between its two renames: put the old tree back
            actions.append(f"restored {target.name}/ from an interrupted swap")
    journal.unlink(missing_ok=True)
    return actions


# --- leftovers of dead runs ----------------------------------------------------------------------------

# `<pid>-<hex>` ends every name new_staging, atomic_write and the fallback swap make.
_PID = re.compile(r"(\d+)-[0-9a-f]+$")
_JOURNAL = re.compile(r"^\.(.+)\.journal$")  # journal_path's naming


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    return True


def _owner_pid(name: str) -> int | None:
    match = _PID.search(name)
    return int(match.group(1)) if match else None


def stale_staging(parent: Path, prefix: str, *, only_dead: bool = True) -> list[str]:
    """Remove the entries of `parent` named `<prefix>*` (staging dirs, temp files, old trees) that a dead
    process left. With only_dead (the default) an entry whose creator's pid (from `new_staging`'s naming)
    still runs is kept; one without a pid in its name is treated as dead. A caller that holds a lock
    excluding every other writer passes only_dead=False. Returns the names removed, sorted. Symlinks are
    removed as links, never followed."""
    return stale_entries(parent, glob_escape(prefix) + "*", only_dead=only_dead)


def stale_entries(parent: Path, pattern: str, *, only_dead: bool = True) -> list[str]:
    """`stale_staging` for the entries of `parent` matching the glob `pattern` (e.g. every `*.partial-*`
    beside a set of installs, whatever their names)."""
    parent = Path(parent)
    if not parent.is_dir():
        return []
    removed = []
    for entry in sorted(parent.glob(pattern)):
        pid = _owner_pid(entry.name)
        if only_dead and pid is not None and _alive(pid):
            continue
        _remove(entry)
        removed.append(entry.name)
    return removed


def _remove(entry: Path) -> None:
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            entry.unlink()


def journaled_targets(parent: Path) -> list[Path]:
    """The entries of `parent` whose fallback swap left its journal (`.<name>.journal`), sorted: the swaps a
    killed run may have stopped between their two renames."""
    parent = Path(parent)
    if not parent.is_dir():
        return []
    return [parent / m.group(1) for e in sorted(parent.iterdir()) if (m := _JOURNAL.match(e.name))]


def recover_swaps(parent: Path) -> list[str]:
    """Every fallback swap under `parent` that a dead process stopped between its two renames, rolled back
    (`recover_swap` of each journal): what any command that reads `parent` does first, so a variant moved
    aside by a killed run is back before it is looked for. Returns what it did."""
    return [action for target in journaled_targets(parent) for action in recover_swap(target)]


def recover_dir(parent: Path, markers: tuple[str, ...], *, only_dead: bool = True) -> list[str]:
    """A stage's start-up cleanup of `parent`, where it swaps trees in: every interrupted fallback swap
    rolled back (`recover_swap` of each `.<name>.journal`), then the entries left by dead runs removed —
    staging dirs whose names hold one of `markers` (e.g. ".tmp-") and the swaps' old trees. Returns what
    it did."""
    parent = Path(parent)
    if not parent.is_dir():
        return []
    actions = recover_swaps(parent)
    for pattern in (*(f".*{glob_escape(m)}*" for m in markers), ".*.old-*"):
        actions += [f"removed leftover {n}" for n in stale_entries(parent, pattern, only_dead=only_dead)]
    return actions


# --- staged trees and scratch dirs ---------------------------------------------------------------------


def recover(target: Path, prefix: str, *, only_dead: bool = True) -> list[str]:
    """What killed runs left for `target` (staged with `prefix`): an interrupted fallback swap rolled back,
    then the staging dirs and old trees of dead runs removed. `staged` does it on entry; a caller that
    returns early when `target` is complete calls it first (a run killed just after its swap left them)."""
    actions = recover_swap(target)
    for pre in (prefix, old_prefix(target)):
        actions += [f"removed leftover {n}" for n in stale_staging(target.parent, pre, only_dead=only_dead)]
    return actions


@contextlib.contextmanager
def staged(
    target: Path, prefix: str | None = None, *, keep_existing: bool = False, only_dead: bool = True
) -> Iterator[Path]:
    """Build a new tree for `target` in the directory this yields (beside `target`, named `prefix` +
    `<pid>-<hex>`, default `.<name>.tmp-`); when the block ends without an error it becomes `target` in one
    step (`swap_dir`), else it is removed and `target` is untouched. With keep_existing a `target` that
    exists by then (another process made it meanwhile) is kept and the new tree dropped: for
    create-once trees whose name is their content's hash. On entry the leftovers a killed run left for
    `target` are cleaned: its interrupted swap rolled back, dead runs' staging dirs and old trees removed
    (all of them, live or not, with only_dead=False: the caller holds a lock excluding other writers)."""
    target = Path(target)
    prefix = prefix if prefix is not None else f".{target.name}.tmp-"
    target.parent.mkdir(parents=True, exist_ok=True)
    recover(target, prefix, only_dead=only_dead)
    stage = new_staging(target.parent, prefix)
    try:
        checkpoint("stage created")
        yield stage
        checkpoint("staged")
        if keep_existing and os.path.lexists(target):
            return
        fsync_dir(stage)
        try:
            swap_dir(stage, target)
        except OSError:
            if not (keep_existing and os.path.lexists(target)):
                raise  # made meanwhile by another process: theirs is as good as ours
    finally:
        if os.path.lexists(stage):
            shutil.rmtree(stage, ignore_errors=True)


@contextlib.contextmanager
def scratch(parent: Path, prefix: str) -> Iterator[Path]:
    """A scratch directory for the block (`parent/<prefix><pid>-<hex>`), removed after it; the scratch dirs
    of dead runs with the same prefix are removed first (SIGKILL skips every cleanup)."""
    stale_staging(parent, prefix)
    path = new_staging(parent, prefix)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def glob_escape(text: str) -> str:
    """`text` with glob metacharacters made literal."""
    return re.sub(r"([*?\[])", r"[\1]", text)
