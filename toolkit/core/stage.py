"""The stage protocol every stage package (sync, render, build, verify, publish, ci, collect, patch, status,
variants) follows, so the CLI and the demo drive all of them the same way.

    plan(config, request, log) -> Plan      reads and decides: installs nothing, writes nothing, pushes nothing
    execute(plan, log) -> Report             does exactly what the plan lists, and only that

`--dry-run` is "plan and print" everywhere. A Report answers `ok`, `exit_code`, its printable `lines()` and
`to_json()`; the CLI maps every Report to output and an exit code with `exit_code_of` alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

# A stage's progress hook: one human-readable line per call (ui.Task.log in the CLI, a list's append in
# tests). Stages never print; they tell `log`.
Log = Callable[[str], None]


def quiet(_line: str) -> None:
    """The Log that drops every line (library callers and tests that do not care)."""


@runtime_checkable
class Plan(Protocol):
    """What a stage will do, as data: printable for --dry-run, serialisable for --json."""

    def lines(self) -> list[str]: ...

    def to_json(self) -> dict[str, Any]: ...


@runtime_checkable
class Report(Protocol):
    """What a stage did. `exit_code` is 0 when `ok`, else the exit code of the failure class
    (toolkit.core.errors.EXIT_CODES)."""

    @property
    def ok(self) -> bool: ...

    @property
    def exit_code(self) -> int: ...

    def lines(self) -> list[str]: ...

    def to_json(self) -> dict[str, Any]: ...


def exit_code_of(report: Report) -> int:
    """The process exit code for a finished stage: 0 on success, the report's own code otherwise (never 0 for
    a report that is not ok, so a stage that forgets to set one still fails the command)."""
    if report.ok:
        return 0
    return report.exit_code or 1
