"""Typed, user-actionable failures: one line saying what is wrong and what to do, one exit code per class."""

from __future__ import annotations


class VendorError(Exception):
    """Base class. `message` says what is wrong, `remedy` what to do; the CLI prints both on one line."""

    exit_code = 1

    def __init__(self, message: str, remedy: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.remedy = remedy

    def one_line(self) -> str:
        return f"{self.message} — {self.remedy}" if self.remedy else self.message

    def __str__(self) -> str:
        return self.one_line()


class ConfigError(VendorError):
    """pyproject.toml [tool.ggml-vendor] or a variants file is missing or wrong."""

    exit_code = 2


class UpstreamError(VendorError):
    """The upstream repository, revision or a file in it is unusable."""

    exit_code = 3


class VendorStateError(VendorError):
    """vendor/ is dirty, unlocked or disagrees with vendor/UPSTREAM."""

    exit_code = 4


class PatchError(VendorError):
    """A patch in vendor/patches does not apply."""

    exit_code = 5


class RenderError(VendorError):
    """A template failed to render, or rendered output is stale or hand-edited (`render --check`)."""

    exit_code = 6


class BuildError(VendorError):
    """A variant failed to build or cannot be built here."""

    exit_code = 7


class VerifyError(VendorError):
    """A built variant failed verification."""

    exit_code = 8


class PublishError(VendorError):
    """Publishing was refused or failed; nothing (or nothing further) was pushed."""

    exit_code = 9


class Interrupted(VendorError):
    """Ctrl-C: the previous state was kept."""

    exit_code = 130
