"""Typed, user-actionable failures: one line saying what is wrong and what to do, one exit code per class.

`EXIT_CODES` is the one exit-code table: the CLI exits with these codes, and the help text, docs/commands.md
and the README are generated from (or tested against) it.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass


class VendorError(Exception):
    """A failure no class below names (e.g. a demo stage that failed)."""

    # The base class of every failure: `message` says what is wrong, `remedy` what to do, and the CLI prints
    # both on one line; `kind` is the class's word in the exit-code table, its docstring the table's meaning.

    exit_code = 1
    kind = "failure"

    def __init__(self, message: str, remedy: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.remedy = remedy

    def one_line(self) -> str:
        return f"{self.message} — {self.remedy}" if self.remedy else self.message

    def __str__(self) -> str:
        return self.one_line()


class ConfigError(VendorError):
    """pyproject.toml [tool.ggml-vendor] or a variants file is missing or wrong (also a bad command line)."""

    exit_code = 2
    kind = "config"


class UpstreamError(VendorError):
    """The upstream repository, revision or a file in it is unusable."""

    exit_code = 3
    kind = "upstream"


class VendorStateError(VendorError):
    """vendor/ is dirty, unlocked or disagrees with vendor/UPSTREAM (or the project is busy, with --no-wait)."""

    exit_code = 4
    kind = "vendor state"


class PatchError(VendorError):
    """A patch in vendor/patches does not apply."""

    exit_code = 5
    kind = "patch"


class RenderError(VendorError):
    """A template failed to render, or rendered output is stale or hand-edited (`render --check`, `ci --check`)."""

    exit_code = 6
    kind = "render"


class BuildError(VendorError):
    """A variant failed to build or cannot be built here."""

    exit_code = 7
    kind = "build"


class VerifyError(VendorError):
    """A built variant failed verification."""

    exit_code = 8
    kind = "verify"


class PublishError(VendorError):
    """Publishing was refused or failed; nothing (or nothing further) was pushed."""

    exit_code = 9
    kind = "publish"


class NothingToBuildError(BuildError):
    """None of the selected variants can be built on this host."""

    exit_code = 10
    kind = "nothing buildable here"


class CollectError(VendorError):
    """`collect` refused an artifact, or collecting cannot start; build/ is unchanged."""

    exit_code = 11
    kind = "collect refused an artifact"


class Outdated(VendorError):
    """`outdated` found something that moved: upstream commits past the pin, a patch that no longer applies or
    that upstream carries, torch builds the matrix lacks, or kernels/transformers releases past the tested ranges."""

    exit_code = 12
    kind = "something moved"


class PackageIndexError(VendorError):
    """The package index cannot be reached, or serves a page or metadata that cannot be read."""

    exit_code = 13
    kind = "package index"


class Interrupted(VendorError):
    """Ctrl-C: one line says what vendor/, build/ or the Hub holds now, read back (before a command starts: nothing was done)."""

    exit_code = 130
    kind = "interrupted"


@dataclass(frozen=True)
class ExitCode:
    """One row of the exit-code table."""

    code: int
    error: type[VendorError]
    meaning: str  # the class's docstring: what this exit means


ERROR_CLASSES: tuple[type[VendorError], ...] = (
    VendorError,
    ConfigError,
    UpstreamError,
    VendorStateError,
    PatchError,
    RenderError,
    BuildError,
    VerifyError,
    PublishError,
    NothingToBuildError,
    CollectError,
    Outdated,
    PackageIndexError,
    Interrupted,
)

# code -> ExitCode(code, class, meaning), in code order. 0 is success and is in no row.
EXIT_CODES: dict[int, ExitCode] = {
    cls.exit_code: ExitCode(cls.exit_code, cls, " ".join((cls.__doc__ or "").split()))
    for cls in sorted(ERROR_CLASSES, key=lambda c: c.exit_code)
}


def exit_code_summary() -> str:
    """The table as one sentence ("2 config, 3 upstream, …, 130 interrupted"), for help text and the README;
    1 (an unexpected failure) is left out, as every tool's is."""
    return ", ".join(f"{row.code} {row.error.kind}" for row in EXIT_CODES.values() if row.code != 1)


def exit_code_markdown() -> str:
    """The table as Markdown (docs/commands.md)."""
    rows = ["| exit code | error class | meaning |", "|---|---|---|", "| 0 | — | success |"]
    rows += [f"| {r.code} | `{r.error.__name__}` | {r.meaning} |" for r in EXIT_CODES.values()]
    return "\n".join(rows)


def did_you_mean(word: str, choices: tuple[str, ...] | list[str]) -> str:
    """ " (did you mean 'x'?)" naming the choice nearest to a misspelt `word`, or "": the tail of an error
    line about an unknown key, name or backend."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.5)
    return f" (did you mean {close[0]!r}?)" if close else ""
