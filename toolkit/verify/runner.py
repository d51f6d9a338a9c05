"""Runs every check over build/<variant>/ directories and records the verdict (build/.verified.json) that
publish requires: a variant is publishable only while its files still hash to what verify passed."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit import __version__
from toolkit.core.errors import VerifyError
from toolkit.verify import conformance
from toolkit.verify.abi import check_abi
from toolkit.verify.archs import check_archs
from toolkit.verify.binaries import check_variant_binaries
from toolkit.verify.findings import FAIL, PASS, SKIP, Finding, VariantReport, VerifyReport
from toolkit.verify.layout import check_layout, so_files, variant_backend
from toolkit.verify.metadata import check_metadata, load_metadata
from toolkit.verify.metal import check_metal
from toolkit.verify.metal import required_kernels as metal_kernels
from toolkit.verify.provenance import check_provenance, check_vendor_clean
from toolkit.verify.smoke import smoke_test
from toolkit.verify.symvers import check_symbols

STAMP_NAME = ".verified.json"


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


def _skip_file(rel: str) -> bool:
    parts = rel.split("/")
    return "__pycache__" in parts or rel.endswith(".pyc")


def tree_sha256(path: Path) -> str:
    """One hash over every file's relative path and sha256 (bytecode ignored): what a verdict applies to."""
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        rel = f.relative_to(path).as_posix()
        if _skip_file(rel):
            continue
        h.update(rel.encode() + b"\0" + hashlib.sha256(f.read_bytes()).hexdigest().encode() + b"\n")
    return h.hexdigest()


def verify_variant(cfg: Any, path: Path, *, lock: Any | None, options: VerifyOptions) -> VariantReport:
    variant = path.name
    raw, err = load_metadata(path)
    findings: list[Finding] = []
    findings += check_layout(variant, path, raw, module=cfg.module)
    findings += check_metadata(variant, path, raw, err, name=cfg.name, version=cfg.version, license=cfg.license)
    findings += check_variant_binaries(variant, path)
    backend = str(((raw or {}).get("backend") or {}).get("type", "")).lower()
    _, os_name, is_arch = variant_backend(variant)
    sos = so_files(path) if path.is_dir() else []
    if is_arch and raw is not None:
        findings += check_archs(variant, backend, ((raw.get("backend") or {}).get("archs")), sos)
        findings += check_abi(
            variant, sos, os_name=str(os_name), backend=backend, host_toolchain_ok=options.host_toolchain_ok
        )
        if os_name == "linux":
            findings += check_symbols(variant, sos, host_toolchain_ok=options.host_toolchain_ok)
        required = options.metal_required if options.metal_required is not None else metal_kernels(cfg)
        findings += check_metal(variant, path, backend, sos, required)
    findings += check_provenance(variant, raw, lock)
    if options.smoke:
        blocking = [f for f in findings if f.failed and f.check in ("layout", "metadata", "binaries")]
        if blocking:
            findings.append(Finding(variant, "smoke", SKIP, "not attempted: layout/metadata/binaries failed", ""))
        elif raw is not None:
            findings += smoke_test(variant, path, str(raw.get("id", "")))
    else:
        findings.append(Finding(variant, "smoke", SKIP, "disabled (--no-smoke)", ""))
    findings += conformance.check_after(
        variant, path, findings, enabled=options.conformance, cases_file=conformance.cases_file_of(cfg)
    )
    return VariantReport(variant, str(path), tuple(findings), tree_sha256(path))


def verify_build(
    cfg: Any,
    names: list[str] | None = None,
    *,
    options: VerifyOptions | None = None,
    build_dir: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> VerifyReport:
    """Verify the named (default: all) variants under build/ and write the verdict stamp."""
    options = options or VerifyOptions()
    build_dir = build_dir or cfg.build_dir
    paths = discover(build_dir, names)
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
        if progress:
            progress(p.name)
        reports.append(verify_variant(cfg, p, lock=lock, options=options))
    versions = {}
    for p in paths:
        raw, _ = load_metadata(p)
        if raw is not None:
            versions.setdefault(raw.get("version"), []).append(p.name)
    if len(versions) > 1:
        global_findings.append(
            Finding(
                "*",
                "versions",
                FAIL,
                "variants disagree on the major version: "
                + "; ".join(f"v{v}: {', '.join(n)}" for v, n in sorted(versions.items(), key=str)),
                "rebuild all variants for one version (they share branch v<N>)",
            )
        )
    report = VerifyReport(tuple(reports), tuple(global_findings))
    write_stamp(build_dir, report)
    return report


def _hub_compliant(v: VariantReport) -> bool:
    """False when an ABI ceiling was waived (host toolchain): fine for local hubs, not for huggingface.co."""
    return not any(
        f.check in ("abi", "symbols") and f.status == "warn" and "manylinux" in f.message for f in v.findings
    )


# --- the verdict stamp --------------------------------------------------------------------------------


def write_stamp(build_dir: Path, report: VerifyReport) -> None:
    """Record each verified variant's content hash and verdict; replaces entries for these variants only."""
    if not build_dir.is_dir():
        return
    path = build_dir / STAMP_NAME
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        doc = {}
    variants = doc.get("variants", {}) if isinstance(doc, dict) else {}
    global_ok = not any(f.failed for f in report.global_findings)
    for v in report.variants:
        prev = variants.get(v.variant) if isinstance(variants.get(v.variant), dict) else {}
        variants[v.variant] = {
            "tree_sha256": v.tree_sha256,
            "ok": v.ok and global_ok,
            "tool_version": __version__,
            "hub_compliant": _hub_compliant(v),
            "failures": [f.line() for f in v.findings if f.failed],
            "conformance": conformance.status_of(v.findings),
        }
        # Where `ggml-vendor collect` brought the variant from stays on record while the bytes are the same.
        if prev.get("collected") and prev.get("tree_sha256") == v.tree_sha256:
            variants[v.variant]["collected"] = prev["collected"]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"variants": variants}, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def stamp_verdict(build_dir: Path, variant_path: Path, *, official_hub: bool = False) -> tuple[bool, str]:
    """(publishable, why not) for one variant from the stamp; the files must hash to what verify passed.
    `official_hub`: also require a Hub-compliant ABI (no waived manylinux ceiling)."""
    try:
        doc = json.loads((build_dir / STAMP_NAME).read_text())
    except (OSError, ValueError):
        return False, "never verified"
    entry = (doc.get("variants") or {}).get(variant_path.name)
    if not entry:
        return False, "never verified"
    if not entry.get("ok"):
        return False, "verify failed: " + "; ".join(entry.get("failures", [])[:2])
    if entry.get("tree_sha256") != tree_sha256(variant_path):
        return False, "files changed since it was verified"
    if official_hub and entry.get("hub_compliant") is False:
        return False, "built with the host toolchain: not manylinux_2_28, so not for huggingface.co"
    return True, ""


def summary_rows(report: VerifyReport) -> list[tuple[str, str, str, str]]:
    """(variant, check, status, message) for the table, the worst status per (variant, check) first."""
    rows = [
        (f.variant, f.check, f.status, f.message + (f" — {f.remedy}" if f.remedy and f.status == FAIL else ""))
        for f in report.global_findings
    ]
    for v in report.variants:
        rows += [
            (f.variant, f.check, f.status, f.message + (f" — {f.remedy}" if f.remedy and f.status == FAIL else ""))
            for f in v.findings
        ]
    return rows


__all__ = [
    "VerifyOptions",
    "verify_build",
    "verify_variant",
    "discover",
    "tree_sha256",
    "stamp_verdict",
    "STAMP_NAME",
    "summary_rows",
    "PASS",
    "FAIL",
]
