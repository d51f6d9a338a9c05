"""One lock per project, held for a whole command that writes vendor/, build/ or the Hub.

It is an flock(2) on the project directory itself: no lock file to go stale or to commit, and the kernel
releases it when the process dies, even on SIGKILL. Writers take it exclusively, commands that only read
the project (`sync --check`, `status`, dry runs) take it shared, so they never report a tree that another
command is halfway through replacing. The second command waits with a message, or refuses with --no-wait.

The lock is reentrant within a process: a command holds it, and the library calls it makes (sync's
execute, replace_vendor, recover) take it again without blocking on themselves. Who holds it is
never written down: the waiting command reads the holder's pid from /proc/locks (Linux) to say what it
waits for.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import sys
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


def holder(root: Path) -> str:
    """'ggml-vendor sync (pid 123)' for a process holding the lock of `root` (read from /proc/locks, so
    nothing is written to say who holds it), or 'another ggml-vendor command' where that is not known."""
    with contextlib.suppress(OSError, ValueError):
        st = os.stat(root)
        for line in Path("/proc/locks").read_text().splitlines():
            parts = line.split()
            if "FLOCK" not in parts or len(parts) < 6:
                continue
            i = parts.index("FLOCK")
            pid, dev_ino = parts[i + 3], parts[i + 4]
            major, minor, ino = dev_ino.split(":")
            if int(ino) != st.st_ino or (int(major, 16), int(minor, 16)) != (os.major(st.st_dev), os.minor(st.st_dev)):
                continue
            if int(pid) == os.getpid():
                continue
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            words = [a.decode("utf-8", "replace") for a in argv if a]
            command = next((w for w in words if w in _commands()), "command")
            return f"ggml-vendor {command} (pid {pid})"
    return "another ggml-vendor command"


def _commands() -> tuple[str, ...]:
    """The command names, from the commands package's own list (one source: a new command is named too)."""
    from toolkit.commands import COMMAND_MODULES

    return COMMAND_MODULES


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
        try:
            yield
        finally:
            del _held[key]
    finally:
        os.close(fd)  # closing the last descriptor releases the flock


def stderr_notice(message: str) -> None:
    """Default `on_wait` for library callers: one line on stderr."""
    print(message, file=sys.stderr, flush=True)
