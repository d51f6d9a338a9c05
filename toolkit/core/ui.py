"""Terminal output: one rich console, quiet progress for long steps, JSON for machines."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Any

from rich.console import Console

# stdout carries results (and --json documents); progress and diagnostics go to stderr so that
# `ggml-vendor ... --json | jq` always sees clean JSON.
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


@contextlib.contextmanager
def task(label: str, *, quiet: bool = False) -> Iterator[None]:
    """A spinner on stderr while a step runs; nothing is left behind on success except a ✓ line."""
    if quiet or not err.is_terminal:
        yield
        return
    with err.status(label):
        yield
    err.print(f"[green]✓[/] {label}")


def emit_json(doc: Any) -> None:
    """Write one JSON document to stdout (sorted keys, so output is diffable)."""
    sys.stdout.write(json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()
