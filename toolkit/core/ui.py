"""Terminal output: one rich console, one task wrapper for long steps, JSON for machines."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Any

from rich.console import Console
from rich.markup import escape

# stdout carries results (and --json documents); progress and diagnostics go to stderr so that
# `ggml-vendor ... --json | jq` always sees clean JSON.
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


class Task:
    """The log of one running step: its lines are shown live with --verbose, else kept and replayed only
    if the step fails (pradyunsg/vendoring's UI.task pattern: quiet on success, the whole story on failure)."""

    def __init__(self, label: str, *, verbose: bool) -> None:
        self.label = label
        self.verbose = verbose
        self.lines: list[str] = []

    def log(self, message: object) -> None:
        text = str(message)
        self.lines.append(text)
        if self.verbose:
            err.print(f"[dim]…[/] {escape(text)}")


@contextlib.contextmanager
def task(label: str, *, verbose: bool = False, quiet: bool = False) -> Iterator[Task]:
    """Run a step under a spinner (on a terminal, unless `quiet`: --json); pass `task.log` as the stage's
    progress callback. On success a ✓ line (terminal only); on an unexpected failure the captured log is
    replayed on stderr before the error propagates."""
    t = Task(label, verbose=verbose and not quiet)
    spinner = not quiet and not t.verbose and err.is_terminal
    try:
        if spinner:
            with err.status(label):
                yield t
        else:
            yield t
    except Exception as exc:
        # A VendorError is bad input or a refusal: its one line says what is wrong and what to do (rule of
        # the CLI), so the log is replayed only for failures nobody anticipated.
        from toolkit.core.errors import VendorError

        if t.lines and not t.verbose and not isinstance(exc, VendorError):
            err.print(f"[red]✗[/] {escape(label)} failed; its log:")
            for line in t.lines:
                err.print(f"  {escape(line)}")
        raise
    if spinner:
        err.print(f"[green]✓[/] {escape(label)}")


def emit_json(doc: Any) -> None:
    """Write one JSON document to stdout (sorted keys, so output is diffable)."""
    sys.stdout.write(json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()
