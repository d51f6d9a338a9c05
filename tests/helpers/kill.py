"""A body run in a forked child that SIGKILLs itself at a numbered toolkit.core.fs checkpoint: the kill tests."""

from __future__ import annotations

import os
from collections.abc import Callable

from toolkit.core import fs


def run_killed_at(kill_at: int, body: Callable[[], object], *, reset: bool = True) -> int:
    """Run `body()` in a forked child with fs.KILL_ENV=`kill_at`; returns the wait status (a clean exit once
    `kill_at` is past the last checkpoint, exit code 1 if `body` raised). `reset` starts the child's checkpoint
    count at 1; without it the count goes on from the parent's (for a body that resets it itself)."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.environ[fs.KILL_ENV] = str(kill_at)
            if reset:
                fs.reset_checkpoints()
            body()
        except BaseException:  # noqa: BLE001 - reported through the exit code only
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return status
