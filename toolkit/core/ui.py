"""Terminal output: one rich console, one task wrapper for long steps (quiet on success, its log replayed on failure), JSON for machines.

Messages are literal text: `print` and `log` on these consoles do not parse rich markup unless the caller
passes `markup=True` (and escapes what it interpolates). Messages name TOML tables such as
[tool.ggml-vendor] or [[variant]], paths and reprs; parsing them as markup would silently drop the
bracketed text. `error`/`warn`/`note` style a label and keep the message verbatim.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterable, Iterator
from typing import Any

from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment
from rich.text import Text

from toolkit.core.text import printable


def _printable(obj: Any) -> Any:
    return printable(obj) if isinstance(obj, str) else obj


class _Console(Console):
    """A Console whose print/log treat strings as plain text unless `markup=True` is asked for, and which
    never writes a control character it was handed: text from an upstream (a commit subject, a file name)
    is shown with its escape sequences spelled out (`core.text.printable`), whatever printed it. Only the
    console's own styling and cursor control reach the terminal."""

    def print(self, *objects: Any, markup: bool | None = None, **kwargs: Any) -> None:
        # Strings are spelled out before rich sees them: it would drop some controls (BEL, CR) silently.
        super().print(*map(_printable, objects), markup=bool(markup), **kwargs)

    def log(self, *objects: Any, markup: bool | None = None, **kwargs: Any) -> None:
        super().log(*map(_printable, objects), markup=bool(markup), _stack_offset=2, **kwargs)

    def render(self, renderable: RenderableType, options: ConsoleOptions | None = None) -> Iterable[Segment]:
        for segment in super().render(renderable, options):
            # Control segments are rich's own (cursor movement of a live display); text segments are ours.
            yield segment if segment.control else Segment(printable(segment.text), segment.style)


# stdout carries results (and --json documents); progress and diagnostics go to stderr so that
# `ggml-vendor ... --json | jq` always sees clean JSON.
out = _Console(highlight=False, soft_wrap=True)
err = _Console(stderr=True, highlight=False, soft_wrap=True)


def labelled(label: str, style: str, message: str) -> Text:
    """`label` in `style`, a space, then `message` exactly as given (never parsed as markup)."""
    return Text.assemble((label, style), " ", printable(message))


def error(message: str) -> None:
    err.print(labelled("error:", "red", message))


def warn(label: str, message: str) -> None:
    err.print(labelled(label, "yellow", message))


def note(label: str, message: str, *, style: str = "green", console: Console | None = None) -> None:
    (console or out).print(labelled(label, style, message))


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
            err.print(labelled("…", "dim", text))


@contextlib.contextmanager
def task(label: str, *, verbose: bool = False, quiet: bool = False, spinner: bool = True) -> Iterator[Task]:
    """Run a step under a spinner (on a terminal, unless `quiet`: --json, or `spinner=False`: a step that
    draws its own progress bars); pass `task.log` as the stage's progress callback. On success a ✓ line
    (terminal only); on an unexpected failure the captured log is replayed on stderr before the error
    propagates."""
    t = Task(label, verbose=verbose and not quiet)
    spinner = spinner and not quiet and not t.verbose and err.is_terminal
    try:
        if spinner:
            with err.status(Text(label)):
                yield t
        else:
            yield t
    except Exception as exc:
        # A VendorError is bad input or a refusal: its one line says what is wrong and what to do (rule of
        # the CLI), so the log is replayed only for failures nobody anticipated.
        from toolkit.core.errors import VendorError

        if t.lines and not t.verbose and not isinstance(exc, VendorError):
            err.print(labelled("✗", "red", f"{label} failed; its log:"))
            for line in t.lines:
                err.print(f"  {line}")
        raise
    if spinner:
        err.print(labelled("✓", "green", label))


_collected: list[list[Any]] = []


@contextlib.contextmanager
def collect_json() -> Iterator[list[Any]]:
    """Hold the documents emit_json is given in a list instead of writing them (one command run per package,
    printed as one document)."""
    docs: list[Any] = []
    _collected.append(docs)
    try:
        yield docs
    finally:
        _collected.remove(docs)


def emit_json(doc: Any) -> None:
    """Write one JSON document to stdout (sorted keys, so output is diffable), or hand it to the innermost
    collect_json."""
    if _collected:
        _collected[-1].append(doc)
        return
    sys.stdout.write(json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()
