"""Ctrl-C while a command tells what it left behind: the read-back that says so is not itself cut short."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator


@contextlib.contextmanager
def no_interrupt() -> Iterator[None]:
    """SIGINT ignored inside the block (a second Ctrl-C does not cut a read-back short, and its one line is still
    printed); the previous handler restored after it."""
    try:
        old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: signals go elsewhere anyway
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
