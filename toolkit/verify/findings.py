"""What verify reports: one finding per check and variant, pass/fail/warn/skip with a message and a remedy."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from toolkit.core.records import fields_json, json_list

PASS, FAIL, WARN, SKIP = "pass", "fail", "warn", "skip"


@dataclass(frozen=True)
class Finding:
    """One result of one check on one variant. `remedy` says what to do when it is not a pass."""

    variant: str
    check: str
    status: str
    message: str
    remedy: str = ""
    details: tuple[str, ...] = ()  # the full list behind a summarised message (--json carries it)

    @property
    def failed(self) -> bool:
        return self.status == FAIL

    def line(self) -> str:
        tail = f" — {self.remedy}" if self.remedy and self.status in (FAIL, WARN) else ""
        return f"[{self.status}] {self.variant}: {self.check}: {self.message}{tail}"

    def to_json(self) -> dict[str, Any]:
        out = fields_json(self, "variant check status message remedy")
        if self.details:
            out["details"] = list(self.details)
        return out


@dataclass(frozen=True)
class VariantReport:
    """All findings for one build/<variant>/ directory, plus the content hash the verdict applies to."""

    variant: str
    path: str
    findings: tuple[Finding, ...]
    tree_sha256: str = ""

    @property
    def ok(self) -> bool:
        return not any(f.failed for f in self.findings)

    def to_json(self) -> dict[str, Any]:
        return fields_json(self, "variant path ok tree_sha256 findings", findings=json_list)


@dataclass(frozen=True)
class VerifyReport:
    """The verdict over every verified variant plus findings that concern the whole build (versions, vendor/)."""

    variants: tuple[VariantReport, ...]
    global_findings: tuple[Finding, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return (
            bool(self.variants) and all(v.ok for v in self.variants) and not any(f.failed for f in self.global_findings)
        )

    @property
    def exit_code(self) -> int:
        """0 when every variant passed, else VerifyError's code (the README's exit-code table)."""
        from toolkit.core.errors import VerifyError

        return 0 if self.ok else VerifyError.exit_code

    def lines(self) -> list[str]:
        """One line per finding (whole-build findings first), then the verdict."""
        found = [f.line() for f in self.global_findings] + [f.line() for v in self.variants for f in v.findings]
        failed = self.failures()
        verdict = (
            f"verified {len(self.variants)} variant(s); publish may ship them"
            if self.ok
            else f"{len(failed)} check(s) failed" + (f"; first: {failed[0].line()}" if failed else "")
        )
        return [*found, verdict]

    def failures(self) -> list[Finding]:
        return [f for f in self.global_findings if f.failed] + [
            f for v in self.variants for f in v.findings if f.failed
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "variants": [v.to_json() for v in self.variants],
            "global": [f.to_json() for f in self.global_findings],
        }
