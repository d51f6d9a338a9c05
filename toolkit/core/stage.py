"""The stage protocol every stage package (sync, render, build, verify, publish, ci, collect, patch, status,
variants) follows, so the CLI and the demo drive all of them the same way.

    plan(config, request, log) -> Plan      reads and decides: installs nothing, writes nothing, pushes nothing
    execute(plan, log) -> Report             does exactly what the plan lists, and only that

`Stage` types a stage package (a module) the way cibuildwheel's `PlatformModule` types its platforms: mypy
checks every module of the registry (toolkit/stages.py) against it, and the runner (toolkit/app.py) takes
one. `--dry-run` is "plan and print" everywhere. A Report answers `ok`, `exit_code`, its printable `lines()` and
`to_json()`; the CLI maps every Report to output and an exit code with `exit_code_of` alone, and prints the
one line of `failure_of(report)` when it is not ok. `Verdict` gives a Report the first three from the one
failure it names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:  # annotations only: core.config reads pyproject (tomlkit), which this module does not need
    from toolkit.core.config import Config
    from toolkit.core.errors import VendorError

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


@runtime_checkable
class Shown(Protocol):
    """Anything the runner prints: a Plan, a Report, or a read-only listing (`to_json` for --json)."""

    def to_json(self) -> dict[str, Any]: ...


@runtime_checkable
class Outcome(Protocol):
    """What the runner maps to an exit code: a Report's `ok` and `exit_code` (`failure_of` reads the rest)."""

    @property
    def ok(self) -> bool: ...

    @property
    def exit_code(self) -> int: ...


RequestT = TypeVar("RequestT", contravariant=True)
PlanT = TypeVar("PlanT")
ReportT = TypeVar("ReportT", covariant=True)


class Stage(Protocol[RequestT, PlanT, ReportT]):
    """A stage package, as a module: `plan(config, request, log)` and `execute(plan, log)`. As PEP 544 allows,
    a module is checked against it (the `self` argument is ignored): toolkit/stages.py names every stage
    package with its Request, Plan and Report, and mypy holds each one to this shape."""

    def plan(self, config: Config, request: RequestT, log: Log = ..., /) -> PlanT: ...

    def execute(self, plan: PlanT, log: Log = ..., /) -> ReportT: ...


def exit_code_of(report: Outcome) -> int:
    """The process exit code for a finished stage: 0 on success, the report's own code otherwise (never 0 for
    a report that is not ok, so a stage that forgets to set one still fails the command)."""
    if report.ok:
        return 0
    return report.exit_code or 1


def failure_of(report: Outcome) -> VendorError | None:
    """The error a finished stage ends the command with, carrying `exit_code_of(report)`: its own (a Report
    may offer `error()`, the one line saying what failed and what to do), else a generic one; None when ok."""
    if report.ok:
        return None
    error: VendorError | None = report.error() if hasattr(report, "error") else None
    if error is None:
        from toolkit.core.errors import VendorError

        error = VendorError(f"{type(report).__name__}: failed", "run it again with --verbose")
    error.exit_code = exit_code_of(report)  # the report's code is the process's, whatever the error's class
    return error


class Verdict:
    """A Report mixin: `ok`, `exit_code` and `error()` follow from `failure()`, the one error the report
    stands for (None when it succeeded)."""

    def failure(self) -> VendorError | None:
        raise NotImplementedError

    @property
    def ok(self) -> bool:
        return self.failure() is None

    @property
    def exit_code(self) -> int:
        failure = self.failure()
        return 0 if failure is None else failure.exit_code

    def error(self) -> VendorError | None:
        return self.failure()
