"""ABI gates from kernel-abi-check: manylinux_2_28 symbol ceilings, abi3 >= 3.9, macOS minimum version."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from toolkit.core import ggml_facts as facts
from toolkit.verify.findings import FAIL, PASS, WARN, Finding

MANYLINUX = "manylinux_2_28"
PYTHON_ABI = "3.9"
MACOS_MIN = {"metal": facts.METAL_MIN_MACOS, "cpu": facts.CPU_MIN_MACOS}

T = TypeVar("T")  # what _names lists (a symbol, a versioned reference)
_SHOWN = 5  # symbols listed per finding; the rest are counted


def _names(items: Sequence[T], fmt: Callable[[T], str]) -> str:
    shown = ", ".join(fmt(x) for x in items[:_SHOWN])
    return shown + (f" (+{len(items) - _SHOWN} more)" if len(items) > _SHOWN else "")


def check_abi(
    variant: str,
    so_files: list[Path],
    *,
    os_name: str,
    backend: str,
    macos: str | None = None,
    host_toolchain_ok: bool = False,
) -> list[Finding]:
    """`host_toolchain_ok`: a build made with this machine's compiler (the demo, local use) may exceed the
    manylinux ceilings; that is reported as a warning and recorded, and publishing to huggingface.co still
    refuses it."""
    target = macos or MACOS_MIN.get(backend, "15.0")
    findings: list[Finding] = []
    for so in so_files:
        findings += _check_one(variant, so, os_name=os_name, macos=target, host_toolchain_ok=host_toolchain_ok)
    if not findings:
        what = f"abi3 >= {PYTHON_ABI}, " + (MANYLINUX if os_name == "linux" else f"macOS minos <= {target}")
        findings.append(Finding(variant, "abi", PASS, f"{len(so_files)} binaries: {what}"))
    return findings


def _check_one(variant: str, so: Path, *, os_name: str, macos: str, host_toolchain_ok: bool) -> list[Finding]:
    """kernel-abi-check on one binary: the stable Python ABI, then manylinux (Linux) or the macOS minimum."""
    import kernel_abi_check as kac  # imported here: a compiled wheel, only needed when verifying

    from toolkit.verify.objfile import binary_format

    with so.open("rb") as fh:
        if binary_format(fh.read(8)) is None:
            return [
                Finding(
                    variant,
                    "abi",
                    FAIL,
                    f"{so.name} is not an ELF/Mach-O binary; ABI unchecked",
                    "rebuild the variant (see the binaries finding)",
                )
            ]
    try:
        obj = kac.ObjectFile(str(so))
        py = obj.check_python_abi(PYTHON_ABI)
    except Exception as exc:  # the binding raises plain ValueErrors for unreadable files
        return [
            Finding(variant, "abi", FAIL, f"{so.name}: kernel-abi-check cannot read it ({exc})", "rebuild the variant")
        ]
    findings = []
    if py:
        findings.append(
            Finding(
                variant,
                "abi",
                FAIL,
                f"{so.name} uses symbols outside the abi3 {PYTHON_ABI} stable ABI: "
                + _names(
                    py, lambda v: f"{v.name}" + (f" (added {v.version_added})" if hasattr(v, "version_added") else "")
                ),
                "build with Py_LIMITED_API=0x03090000 and without pybind11",
            )
        )
    if os_name == "linux":
        findings += _manylinux(variant, so, obj.check_manylinux(MANYLINUX), host_toolchain_ok)
    elif os_name == "darwin":
        mac = obj.check_macos(macos)
        if mac:
            findings.append(
                Finding(
                    variant,
                    "abi",
                    FAIL,
                    f"{so.name}: " + "; ".join(type(v).__name__ for v in mac) + f" (must be at most macOS {macos})",
                    f"set MACOSX_DEPLOYMENT_TARGET={macos} (LC_BUILD_VERSION minos)",
                )
            )
    return findings


def _manylinux(variant: str, so: Path, violations: list[Any], host_toolchain_ok: bool) -> list[Finding]:
    if not violations:
        return []
    return [
        Finding(
            variant,
            "abi",
            WARN if host_toolchain_ok else FAIL,
            f"{so.name} needs newer system libraries than {MANYLINUX}: "
            + _names(violations, lambda v: f"{v.name}@{v.dep}_{v.version}"),
            "build in a manylinux_2_28 toolchain (AlmaLinux 8 gcc-toolset) and link cudart shared "
            "(-cudart shared), not static",
        )
    ]
