"""Symbol versions read from the ELF itself (.dynsym + .gnu.version + .gnu.version_r), next to kernel-abi-check.

kernel-abi-check 0.14.1 misses imports of objects linked by lld, so this reads what the dynamic loader will
ask for and fails on anything a manylinux_2_28 system (glibc 2.28, gcc 8's libstdc++) lacks, naming the
symbol, its version and the library that must provide it. It also fails an extension that carries its own
unwinder (`_Unwind_*` defined inside it): libstdc++'s `throw` unwinds with libgcc_s, and the extension's
landing pads then resume with a private copy that does not know the exception, so every C++ exception (every
argument error of an op) crashes the process instead of reaching Python.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from toolkit.verify.findings import FAIL, PASS, WARN, Finding
from toolkit.verify.glibc_symbols import added_after_2_28
from toolkit.verify.objfile import Elf, ElfError, Symbol, binary_format

POLICY = "manylinux_2_28"
# Highest symbol version per family that a manylinux_2_28 system provides (glibc 2.28; gcc 8: libstdc++
# GLIBCXX_3.4.25 / CXXABI_1.3.11, libgcc_s GCC_7.0.0).
CEILINGS: dict[str, tuple[int, ...]] = {"GLIBC": (2, 28), "GLIBCXX": (3, 4, 25), "CXXABI": (1, 3, 11), "GCC": (7, 0, 0)}
# Non-numeric versions of those families that every such system has.
_ALWAYS_THERE = {"CXXABI_TM_1", "GLIBCXX_LDBL_3.4", "GCC_LDBL_3.0"}
_SHOWN = 5


@dataclass(frozen=True)
class TooNew:
    """One import a manylinux_2_28 system cannot satisfy."""

    symbol: str
    version: str  # "GLIBC_2.38", or "" for an unversioned import
    library: str  # the file .gnu.version_r names ("libc.so.6"), or "" when unversioned
    why: str  # "GLIBC_2.38 > 2.28", "added in glibc 2.38", ...

    def line(self) -> str:
        if self.version:
            return f"{self.symbol}@{self.version} (from {self.library or '?'})"
        return f"{self.symbol} (unversioned; {self.why})"


def _numeric(text: str) -> tuple[int, ...] | None:
    try:
        return tuple(int(x) for x in text.split("."))
    except ValueError:
        return None


def version_too_new(version: str) -> str | None:
    """Why a symbol version is beyond manylinux_2_28, or None when it is within (or not a system library's)."""
    family, _, number = version.partition("_")
    if family not in CEILINGS or version in _ALWAYS_THERE:
        return None
    if version == "GLIBC_PRIVATE":
        return "glibc-internal, changes with every glibc release"
    if version == "GLIBC_ABI_DT_RELR":
        return "packed relative relocations: glibc >= 2.36 (linked with -z pack-relative-relocs)"
    ceiling = CEILINGS[family]
    got = _numeric(number)
    if got is None:
        return f"not a {family} version of {POLICY}"
    if got > ceiling:
        return f"{version} > {family}_{'.'.join(map(str, ceiling))}"
    return None


def too_new_imports(symbols: list[Symbol]) -> list[TooNew]:
    """Imports (undefined .dynsym entries) a glibc 2.28 / gcc 8 system lacks."""
    out: list[TooNew] = []
    for s in symbols:
        if s.defined:
            continue
        if s.version:
            why = version_too_new(s.version)
            if why:
                out.append(TooNew(s.name, s.version, s.library, why))
        elif not s.weak:  # a weak unversioned reference may stay unresolved (null) without failing the load
            release = added_after_2_28(s.name)
            if release:
                out.append(TooNew(s.name, "", "", f"added in glibc {release}"))
    return sorted(set(out), key=lambda t: (t.version, t.symbol))


def needed_versions(elf: Elf) -> list[tuple[str, str]]:
    """(library, version) pairs the loader checks before anything runs; a missing one fails the load even if
    no symbol of that version is used (e.g. GLIBC_ABI_DT_RELR from a glibc >= 2.36 linker)."""
    return sorted(set(elf.version_needs().values()), key=lambda x: (x[1], x[0]))


def private_unwinder(elf: Elf) -> list[str]:
    """Why this object carries its own unwinder: `_Unwind_*` defined in .dynsym or .symtab; or, for a stripped
    object with C++ exception tables, `_Unwind_Resume` neither imported nor defined visibly (so a hidden
    static copy was linked in)."""
    dyn = elf.symbols(".dynsym")
    symtab = elf.section(".symtab")
    static: list[Symbol] = []
    if symtab is not None and symtab.link < len(elf.sections):
        names = elf.sections[symtab.link]
        # Parse the (possibly huge) static table only when its string table names an _Unwind_ symbol at all.
        if elf.data.find(b"_Unwind_", names.offset, names.offset + names.size) >= 0:
            static = elf.symbols(".symtab")
    defined = sorted({s.name for s in (*dyn, *static) if s.defined and s.name.startswith("_Unwind_")})
    if defined:
        return defined
    if symtab is None and elf.section(".gcc_except_table") is not None:
        if not any(s.name == "_Unwind_Resume" and not s.defined for s in dyn):
            return ["_Unwind_Resume (stripped: C++ exception tables but no _Unwind_Resume import from libgcc_s)"]
    return []


@dataclass(frozen=True)
class ObjectReport:
    """What one binary imports beyond manylinux_2_28 and which `_Unwind_*` it defines."""

    path: Path
    too_new: tuple[TooNew, ...]
    unwinder: tuple[str, ...]
    error: str = ""


def inspect_object(path: Path) -> ObjectReport | None:
    """None for a file that is not ELF (Mach-O, PE: nothing to check here)."""
    with path.open("rb") as fh:
        if binary_format(fh.read(8)) != "elf":
            return None
    try:
        with Elf.open(path) as elf:
            syms = elf.symbols(".dynsym")
            bad = too_new_imports(syms)
            known = {(t.library, t.version) for t in bad}
            for library, version in needed_versions(elf):
                why = version_too_new(version)
                if why and (library, version) not in known:
                    bad.append(TooNew("(version requirement)", version, library, why))
            return ObjectReport(path, tuple(bad), tuple(private_unwinder(elf)))
    except (ElfError, struct.error, ValueError, OSError) as exc:
        return ObjectReport(path, (), (), f"cannot read its ELF symbol tables ({exc})")


def _names(items: list[str]) -> str:
    shown = ", ".join(items[:_SHOWN])
    return shown + (f" (+{len(items) - _SHOWN} more)" if len(items) > _SHOWN else "")


def check_symbols(variant: str, so_files: list[Path], *, host_toolchain_ok: bool = False) -> list[Finding]:
    """The `symbols` check of verify: manylinux_2_28 ceilings from .gnu.version_r and no private unwinder.
    `host_toolchain_ok` turns the ceilings (never the unwinder) into a warning, as for kernel-abi-check."""
    findings: list[Finding] = []
    checked = 0
    for so in so_files:
        rep = inspect_object(so)
        if rep is None:
            continue
        checked += 1
        if rep.error:
            findings.append(Finding(variant, "symbols", FAIL, f"{so.name}: {rep.error}", "rebuild the variant"))
            continue
        if rep.too_new:
            findings.append(
                Finding(
                    variant,
                    "symbols",
                    WARN if host_toolchain_ok else FAIL,
                    f"{so.name} needs newer system libraries than {POLICY}: " + _names([t.line() for t in rep.too_new]),
                    "build with the hermetic glibc-2.28 toolchain (not this host's compiler); "
                    "link cudart shared (-cudart shared), not static",
                )
            )
        if rep.unwinder:
            findings.append(
                Finding(
                    variant,
                    "symbols",
                    FAIL,
                    f"{so.name} defines its own unwinder ({_names(list(rep.unwinder))}): every C++ exception "
                    "thrown through it (every argument error of an op) crashes the process",
                    "link libgcc_s by path (the .so.1 file), never -lgcc_s with zig, and without -static-libgcc",
                )
            )
    if not findings and checked:
        findings.append(
            Finding(
                variant,
                "symbols",
                PASS,
                f"{checked} ELF binaries: imports within {POLICY} (GLIBC 2.28, GLIBCXX 3.4.25, CXXABI 1.3.11), "
                "libgcc_s unwinder",
            )
        )
    return findings
