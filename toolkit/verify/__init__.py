"""The verify stage: prove each build/<variant>/ is what kernels.get_kernel will load, before it ships.

The stage protocol (toolkit/core/stage.py):
    plan(config, request, log) -> Plan     the variant directories to check and the torch build environment each
                                           one's imports resolve against (unknown names are refused here)
    execute(plan, log) -> Report           every check on exactly the plan's paths (runner.py), and the verdicts
                                           recorded in build/.verified.json (record.py) for publish
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from toolkit.core.config import Config
from toolkit.core.errors import Interrupted
from toolkit.core.stage import Log, quiet
from toolkit.verify.binaries import (
    BINARY_SUFFIXES,
    LFS_POINTER_PREFIX,
    check_file,
    check_gitattributes,
    gitattributes_text,
)
from toolkit.verify.conformance import runnable_here
from toolkit.verify.entries import non_regular
from toolkit.verify.findings import FAIL, PASS, SKIP, WARN, Finding, VariantReport, VerifyReport
from toolkit.verify.imports import torch_lib_dirs
from toolkit.verify.layout import variant_backend
from toolkit.verify.provenance import check_vendor_clean
from toolkit.verify.record import conformance_status, snapshot, tree_sha256
from toolkit.verify.record import verdict as stamp_verdict
from toolkit.verify.runner import STAMP_NAME, VerifyOptions, discover, verify_build, verify_paths, verify_variant

Report = VerifyReport

__all__ = [
    "Request",
    "Plan",
    "Report",
    "plan",
    "execute",
    "interrupted",
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
    # what publish re-checks before a byte is pushed (its one door into verify)
    "check_file",
    "non_regular",
    "check_vendor_clean",
    "conformance_status",
    "runnable_here",
    "check_gitattributes",
    "gitattributes_text",
    "BINARY_SUFFIXES",
    "LFS_POINTER_PREFIX",
]


@dataclass(frozen=True)
class Request:
    variants: tuple[str, ...] = ()  # names under build/ (empty: all)
    options: VerifyOptions = field(default_factory=VerifyOptions)


@dataclass(frozen=True)
class Plan:
    config: Config
    request: Request
    paths: tuple[Path, ...]  # the variant directories, in the order they are checked
    # variant -> the lib/ of the torch build environment its unversioned imports resolve against (Linux only)
    torch_libs: tuple[tuple[str, tuple[Path, ...]], ...] = ()
    record_before: bytes | None = None  # build/.verified.json as planned: what a Ctrl-C's read-back compares

    @property
    def build_dir(self) -> Path:
        return Path(self.config.build_dir)

    def lines(self) -> list[str]:
        libs = dict(self.torch_libs)
        return [
            f"would verify {p}"
            + (f" (imports resolved against {', '.join(map(str, libs[p.name]))})" if libs.get(p.name) else "")
            for p in self.paths
        ] or [f"no variants under {self.build_dir}"]

    def to_json(self) -> dict[str, Any]:
        libs = dict(self.torch_libs)
        return {
            "variants": [str(p) for p in self.paths],
            "torch_libs": {name: [str(d) for d in dirs] for name, dirs in libs.items()},
            "options": asdict(self.request.options),
        }


def _torch_libs(paths: list[Path]) -> tuple[tuple[str, tuple[Path, ...]], ...]:
    """For each Linux arch variant, where its torch build environment's libraries are (read-only discovery)."""
    out = []
    for p in paths:
        backend, os_name, is_arch = variant_backend(p.name)
        if backend is not None and is_arch and os_name == "linux":
            out.append((p.name, torch_lib_dirs(p.name)))
    return tuple(out)


def plan(config: Config, request: Request, log: Log = quiet) -> Plan:
    """Which variants to check and what against; reads build/ and the torch environments, writes nothing."""
    paths = discover(config.build_dir, list(request.variants) or None)
    return Plan(config, request, tuple(paths), _torch_libs(paths), snapshot(config.build_dir))


def execute(plan: Plan, log: Log = quiet) -> VerifyReport:
    """Every check on the plan's paths (and only those), verdicts recorded for publish."""
    return verify_paths(
        plan.config,
        plan.build_dir,
        list(plan.paths),
        options=plan.request.options,
        log=log,
        torch_libs=dict(plan.torch_libs),
    )


def interrupted(plan: Plan) -> Interrupted:
    """The one line for a Ctrl-C once `plan` was made (the report's printing included): whether
    build/.verified.json now holds this verify's verdicts, read back from disk (they are written at once)."""
    if snapshot(plan.build_dir) == plan.record_before:
        return Interrupted(
            "build/.verified.json is as it was: no verdict was recorded (read back from disk)",
            "run ggml-vendor verify again",
        )
    told = [f"{p.name} {'passed' if stamp_verdict(plan.build_dir, p)[0] else 'failed'}" for p in plan.paths]
    return Interrupted(
        f"build/.verified.json holds this verify's verdicts: {', '.join(told)} (read back from disk)",
        "nothing to undo; run ggml-vendor verify again for the full report",
    )
