"""Runs every check over build/<variant>/ directories and records the verdict (toolkit.verify.record) that
publish requires: a variant is publishable only while its files still hash to what verify passed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit import __version__
from toolkit.core.errors import VerifyError
from toolkit.core.stage import Log, quiet
from toolkit.verify import conformance, record
from toolkit.verify.abi import check_abi
from toolkit.verify.archs import check_archs
from toolkit.verify.binaries import check_variant_binaries
from toolkit.verify.entries import check_entries
from toolkit.verify.findings import FAIL, PASS, SKIP, Finding, VariantReport, VerifyReport
from toolkit.verify.imports import torch_lib_dirs
from toolkit.verify.layout import check_layout, so_files, variant_backend
from toolkit.verify.metadata import check_metadata, load_metadata
from toolkit.verify.metal import check_metal
from toolkit.verify.metal import required_kernels as metal_kernels
from toolkit.verify.provenance import check_provenance, check_vendor_clean
from toolkit.verify.smoke import smoke_test
from toolkit.verify.stable_abi import check_stable_abi
from toolkit.verify.symvers import check_symbols

# The record's owner is toolkit.verify.record; these names stay for the callers that import them from here.
STAMP_NAME = record.NAME
tree_sha256 = record.tree_sha256
stamp_verdict = record.verdict


@dataclass(frozen=True)
class VerifyOptions:
    smoke: bool = True
    check_vendor: bool = True
    metal_required: tuple[str, ...] | None = None  # None: the package facts' METAL_KERNELS of its ops
    # Accept binaries above the manylinux_2_28 ceilings (host-toolchain builds: the demo, local use). The
    # stamp records it and publish refuses such variants for huggingface.co.
    host_toolchain_ok: bool = False
    conformance: bool = True  # run the ops against the float64 contract where the variant loads on a GPU


def is_variant_dir(p: Path) -> bool:
    if not p.is_dir() or p.name.startswith("."):
        return False
    if (p / "metadata.json").exists():
        return True
    backend, _, _ = variant_backend(p.name)
    return backend is not None


def discover(build_dir: Path, names: list[str] | None = None) -> list[Path]:
    """Variant directories under build/ (those that parse as a variant name or hold metadata.json)."""
    if names:
        out = []
        for n in names:
            p = build_dir / n
            if not p.is_dir():
                known = ", ".join(d.name for d in discover(build_dir)) or "none"
                raise VerifyError(f"no variant {n!r} in {build_dir}", f"known variants: {known}")
            out.append(p)
        return out
    if not build_dir.is_dir():
        return []
    return sorted(p for p in build_dir.iterdir() if is_variant_dir(p))


def _binary_checks(
    cfg: Any,
    variant: str,
    path: Path,
    raw: dict[str, Any],
    options: VerifyOptions,
    torch_libs: tuple[Path, ...] | None,
) -> list[Finding]:
    """archs, abi, symbols/imports (Linux) and metallib: what the variant's shared objects contain."""
    backend = str((raw.get("backend") or {}).get("type", "")).lower()
    _, os_name, _ = variant_backend(variant)
    sos = so_files(path) if path.is_dir() else []
    findings = check_archs(variant, backend, (raw.get("backend") or {}).get("archs"), sos)
    findings += check_abi(
        variant, sos, os_name=str(os_name), backend=backend, host_toolchain_ok=options.host_toolchain_ok
    )
    if os_name == "linux":
        findings += check_stable_abi(variant, sos)
        libs = torch_lib_dirs(variant) if torch_libs is None else torch_libs
        findings += check_symbols(variant, sos, host_toolchain_ok=options.host_toolchain_ok, torch_lib_dirs=libs)
    if backend == "metal":
        required = options.metal_required if options.metal_required is not None else metal_kernels(cfg)
        findings += check_metal(variant, path, backend, sos, required)
    return findings


def verify_variant(
    cfg: Any, path: Path, *, lock: Any | None, options: VerifyOptions, torch_libs: tuple[Path, ...] | None = None
) -> VariantReport:
    """Every check on one variant. `torch_libs`: its torch build environment's lib/ (None: look it up)."""
    variant = path.name
    entries = check_entries(variant, path)
    if any(f.failed for f in entries):  # no other check opens a file of it: a named pipe would hang it
        skipped = Finding(variant, "checks", SKIP, "not attempted: the variant holds entries that are not files")
        return VariantReport(variant, str(path), (*entries, skipped), tree_sha256(path))
    raw, err = load_metadata(path)
    findings: list[Finding] = [*entries]
    findings += check_layout(variant, path, raw, module=cfg.module)
    findings += check_metadata(variant, path, raw, err, name=cfg.name, version=cfg.version, license=cfg.license)
    findings += check_variant_binaries(variant, path)
    if variant_backend(variant)[2] and raw is not None:
        findings += _binary_checks(cfg, variant, path, raw, options, torch_libs)
    findings += check_provenance(variant, raw, lock)
    findings += _smoke_findings(variant, path, raw, findings, options.smoke)
    findings += conformance.check_after(
        variant, path, findings, enabled=options.conformance, cases_file=conformance.cases_file_of(cfg)
    )
    return VariantReport(variant, str(path), tuple(findings), tree_sha256(path))


def _smoke_findings(
    variant: str, path: Path, raw: dict[str, Any] | None, findings: list[Finding], enabled: bool
) -> list[Finding]:
    if not enabled:
        return [Finding(variant, "smoke", SKIP, "disabled (--no-smoke)", "")]
    if any(f.failed and f.check in ("layout", "metadata", "binaries") for f in findings):
        return [Finding(variant, "smoke", SKIP, "not attempted: layout/metadata/binaries failed", "")]
    return smoke_test(variant, path, str((raw or {}).get("id", ""))) if raw is not None else []


def _versions_finding(paths: list[Path]) -> list[Finding]:
    """Variants of one build share branch v<N>: they must agree on the major version."""
    versions: dict[Any, list[str]] = {}
    for p in paths:
        raw, _ = load_metadata(p)
        if raw is not None:
            versions.setdefault(raw.get("version"), []).append(p.name)
    if len(versions) <= 1:
        return []
    return [
        Finding(
            "*",
            "versions",
            FAIL,
            "variants disagree on the major version: "
            + "; ".join(f"v{v}: {', '.join(n)}" for v, n in sorted(versions.items(), key=str)),
            "rebuild all variants for one version (they share branch v<N>)",
        )
    ]


def verify_paths(
    cfg: Any,
    build_dir: Path,
    paths: list[Path],
    *,
    options: VerifyOptions,
    log: Log = quiet,
    torch_libs: Mapping[str, tuple[Path, ...]] | None = None,
) -> VerifyReport:
    """Verify exactly `paths` (variant directories under `build_dir`) and record the verdicts.
    `torch_libs`: variant -> its torch build environment's lib/ (a variant missing from it is looked up)."""
    global_findings: list[Finding] = []
    lock = None
    if options.check_vendor:
        vf, lock = check_vendor_clean(cfg)
        global_findings += vf
    if not paths:
        global_findings.append(
            Finding("*", "variants", FAIL, f"no variants under {build_dir}", "run ggml-vendor build first")
        )
    reports = []
    for p in paths:
        log(p.name)
        libs = (torch_libs or {}).get(p.name)
        reports.append(verify_variant(cfg, p, lock=lock, options=options, torch_libs=libs))
    readable = [
        p for p, r in zip(paths, reports, strict=True) if not any(f.check == "entries" for f in r.findings if f.failed)
    ]
    global_findings += _versions_finding(readable)  # (a variant with a named pipe is never opened)
    report = VerifyReport(tuple(reports), tuple(global_findings))
    write_stamp(build_dir, report)
    return report


def verify_build(
    cfg: Any,
    names: list[str] | None = None,
    *,
    options: VerifyOptions | None = None,
    build_dir: Path | None = None,
    progress: Log | None = None,
) -> VerifyReport:
    """Verify the named (default: all) variants under build/ and write the verdict stamp (the library entry;
    the stage's plan/execute in toolkit.verify is the same in two steps)."""
    build_dir = build_dir or cfg.build_dir
    paths = discover(build_dir, names)
    return verify_paths(cfg, build_dir, paths, options=options or VerifyOptions(), log=progress or quiet)


def _hub_compliant(v: VariantReport) -> bool:
    """False when an ABI ceiling was waived (host toolchain): fine for local hubs, not for huggingface.co."""
    return not any(
        f.check in ("abi", "symbols") and f.status == "warn" and "manylinux" in f.message for f in v.findings
    )


def write_stamp(build_dir: Path, report: VerifyReport) -> None:
    """Record each verified variant's content hash and verdict (toolkit.verify.record owns the file)."""
    global_ok = not any(f.failed for f in report.global_findings)
    record.record_verdicts(
        build_dir,
        (
            record.Verdict(
                v.variant,
                v.tree_sha256,
                v.ok and global_ok,
                __version__,
                _hub_compliant(v),
                tuple(f.line() for f in v.findings if f.failed),
                conformance.status_of(v.findings),
            )
            for v in report.variants
        ),
    )


def summary_rows(report: VerifyReport) -> list[tuple[str, str, str, str]]:
    """(variant, check, status, message) for the table, in check order."""
    findings = [*report.global_findings, *(f for v in report.variants for f in v.findings)]
    return [
        (f.variant, f.check, f.status, f.message + (f" — {f.remedy}" if f.remedy and f.status == FAIL else ""))
        for f in findings
    ]


__all__ = [
    "VerifyOptions",
    "verify_build",
    "verify_paths",
    "verify_variant",
    "discover",
    "tree_sha256",
    "stamp_verdict",
    "STAMP_NAME",
    "summary_rows",
    "PASS",
    "FAIL",
]
