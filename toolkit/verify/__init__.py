"""The verify stage: prove each build/<variant>/ is what kernels.get_kernel will load, before it ships.

The stage protocol (the same in every stage package):
    plan(config, request) -> Plan     the variant directories to check (unknown names are refused here)
    execute(plan) -> Report           every check per variant (runner.py), and the verdict stamp publish reads
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit.verify.findings import FAIL, PASS, SKIP, WARN, Finding, VariantReport, VerifyReport
from toolkit.verify.runner import (
    STAMP_NAME,
    VerifyOptions,
    discover,
    stamp_verdict,
    tree_sha256,
    verify_build,
    verify_variant,
)

Report = VerifyReport

__all__ = [
    "Request",
    "Plan",
    "Report",
    "plan",
    "execute",
    "Finding",
    "VariantReport",
    "VerifyReport",
    "VerifyOptions",
    "verify_build",
    "verify_variant",
    "discover",
    "stamp_verdict",
    "tree_sha256",
    "STAMP_NAME",
    "PASS",
    "FAIL",
    "WARN",
    "SKIP",
]


@dataclass(frozen=True)
class Request:
    variants: tuple[str, ...] = ()  # names under build/ (empty: all)
    options: VerifyOptions = field(default_factory=VerifyOptions)


@dataclass(frozen=True)
class Plan:
    config: Any
    request: Request
    paths: tuple[Path, ...]  # the variant directories, in the order they are checked

    def lines(self) -> list[str]:
        return [f"would verify {p}" for p in self.paths] or [f"no variants under {self.config.build_dir}"]


def plan(config: Any, request: Request) -> Plan:
    return Plan(config, request, tuple(discover(config.build_dir, list(request.variants) or None)))


def execute(plan: Plan, *, progress: Callable[[str], None] | None = None) -> VerifyReport:
    names = [p.name for p in plan.paths] if plan.request.variants else None
    return verify_build(plan.config, names, options=plan.request.options, progress=progress)
