"""One lock per project, held for a whole command that writes vendor/, build/ or the Hub.

It is an flock(2) on the project directory itself: no lock file to go stale or to commit, and the kernel
releases it when the process dies, even on SIGKILL. Writers take it exclusively, commands that only read
the project (`sync --check`, `status`, dry runs) take it shared, so they never report a tree that another
command is halfway through replacing. The second command waits with a message, or refuses with --no-wait.

The lock is reentrant within a process: a command holds it, and the library calls it makes (sync's
execute, replace_vendor, recover) take it again without blocking on themselves. Nothing is written to
disk to say who holds it: the holder records its command name itself, as the name of an abstract Unix
socket (Linux) that it binds for as long as it holds the lock and that the kernel removes with the process,
even on SIGKILL. The waiting command reads the holder's pid from /proc/locks and that name from
/proc/net/unix to say what it waits for.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from toolkit.core.errors import VendorStateError

EXCLUSIVE, SHARED = "exclusive", "shared"


class ProjectBusy(VendorStateError):
    """Another ggml-vendor command holds the project lock and --no-wait was given."""


@dataclass
class _Held:
    fd: int
    mode: str
    depth: int


_held: dict[str, _Held] = {}


def _key(root: Path) -> str:
    return str(Path(root).resolve())


def held_mode(root: Path) -> str | None:
    """EXCLUSIVE or SHARED when this process holds the lock of `root`, else None."""
    h = _held.get(_key(root))
    return h.mode if h else None


# The holder's record: an abstract socket named "<prefix><lock id>/<pid>/<command>" (no file, no cleanup).
_RECORD = "ggml-vendor-lock/"


def _lock_id(st: os.stat_result) -> str:
    return f"{st.st_dev}:{st.st_ino}"


def _record(root: Path, command: str) -> socket.socket | None:
    """Record that this process holds the lock of `root` for `command`; None where abstract sockets are
    unavailable (the waiting line then says "another ggml-vendor command")."""
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    except (OSError, AttributeError):
        return None
    try:
        sock.bind(f"\0{_RECORD}{_lock_id(os.stat(root))}/{os.getpid()}/{command}")
    except OSError:
        sock.close()
        return None
    return sock


def _recorded_command(st: os.stat_result, pid: str) -> str | None:
    """The command the process `pid` recorded for the lock `st` (see `_record`), or None."""
    prefix = f"@{_RECORD}{_lock_id(st)}/{pid}/"
    for line in Path("/proc/net/unix").read_text(errors="replace").splitlines():
        at = line.find(prefix)
        if at >= 0:
            return line[at + len(prefix) :].strip() or None
    return None


def _flock_holders(st: os.stat_result) -> list[str]:
    """The pids /proc/locks lists as holding a flock on the file `st` describes (this process excepted)."""
    pids = []
    for line in Path("/proc/locks").read_text().splitlines():
        parts = line.split()
        if "FLOCK" not in parts or len(parts) < 6:
            continue
        i = parts.index("FLOCK")
        pid, dev_ino = parts[i + 3], parts[i + 4]
        major, minor, ino = dev_ino.split(":")
        if int(ino) != st.st_ino or (int(major, 16), int(minor, 16)) != (os.major(st.st_dev), os.minor(st.st_dev)):
            continue
        if int(pid) != os.getpid():
            pids.append(pid)
    return pids


def holder(root: Path) -> str:
    """'ggml-vendor sync (pid 123)' for a process holding the lock of `root` (its pid from /proc/locks, its
    command from the record it made itself), or 'another ggml-vendor command' where that is not known."""
    with contextlib.suppress(OSError, ValueError):
        st = os.stat(root)
        for pid in _flock_holders(st):
            return f"ggml-vendor {_recorded_command(st, pid) or 'command'} (pid {pid})"
    return "another ggml-vendor command"


@contextlib.contextmanager
def project_lock(
    root: Path,
    *,
    command: str = "command",
    shared: bool = False,
    wait: bool = True,
    on_wait: Callable[[str], object] | None = None,
) -> Iterator[None]:
    """Hold the project lock of `root` for the body. Blocks while another process holds it (calling
    `on_wait` once with a message), or raises ProjectBusy when `wait` is False."""
    key = _key(root)
    mine = _held.get(key)
    if mine is not None:
        if not shared and mine.mode == SHARED:
            # Upgrading could deadlock against another reader doing the same; no command does this.
            raise RuntimeError("project lock: cannot upgrade a shared hold to exclusive")
        mine.depth += 1
        try:
            yield
        finally:
            mine.depth -= 1
        return
    fd = os.open(key, os.O_RDONLY)
    try:
        op = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
        try:
            fcntl.flock(fd, op | fcntl.LOCK_NB)
        except BlockingIOError:
            who = holder(Path(key))
            if not wait:
                raise ProjectBusy(
                    f"{who} is using {key} (vendor/, build/ or the Hub) right now",
                    "wait for it to finish, or run again without --no-wait to wait for it",
                ) from None
            if on_wait is not None:
                on_wait(f"waiting for {who} to finish with {key} (Ctrl-C to give up; --no-wait refuses instead)")
            fcntl.flock(fd, op)
        except OSError as exc:  # a filesystem without flock (some network mounts): run unserialised
            if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise
        _held[key] = _Held(fd, SHARED if shared else EXCLUSIVE, 1)
        record = _record(Path(key), command)
        try:
            yield
        finally:
            del _held[key]
            if record is not None:
                record.close()
    finally:
        os.close(fd)  # closing the last descriptor releases the flock
