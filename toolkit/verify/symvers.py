"""Symbol versions read from the ELF itself (.dynsym + .gnu.version + .gnu.version_r), next to kernel-abi-check.

kernel-abi-check 0.14.1 misses imports of objects linked by lld, so this reads what the dynamic loader will
ask for and fails on anything a manylinux_2_28 system (glibc 2.28, gcc 8's libstdc++) lacks, naming the
symbol, its version and the library that must provide it. It also fails an extension that carries its own
unwinder (`_Unwind_*` defined inside it): libstdc++'s `throw` unwinds with libgcc_s, and the extension's
landing pads then resume with a private copy that does not know the exception, so every C++ exception (every
argument error of an op) crashes the process instead of reaching Python.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from toolkit.verify.findings import FAIL, PASS, WARN, Finding
from toolkit.verify.imports import Resolution, resolve_unversioned, summary
from toolkit.verify.objfile import Elf, ElfError, Symbol, binary_format
from toolkit.verify.policy import POLICY, Manylinux, manylinux, version_too_new

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


def too_new_imports(symbols: list[Symbol], policy: Manylinux) -> list[TooNew]:
    """Versioned imports (undefined .dynsym entries) beyond the policy's versions."""
    out: list[TooNew] = []
    for s in symbols:
        if not s.defined and s.version:
            why = policy.too_new(s.version)
            if why:
                out.append(TooNew(s.name, s.version, s.library, why))
    return sorted(set(out), key=lambda t: (t.version, t.symbol))


def needed_versions(elf: Elf) -> list[tuple[str, str]]:
    """(library, version) pairs the loader checks before anything runs; a missing one fails the load even if
    no symbol of that version is used (e.g. GLIBC_ABI_DT_RELR from a glibc >= 2.36 linker)."""
    return sorted(set(elf.version_needs().values()), key=lambda x: (x[1], x[0]))


def private_unwinder(elf: Elf, dyn: list[Symbol]) -> list[str]:
    """Why this object carries its own unwinder: `_Unwind_*` defined in .dynsym or .symtab; or, for a stripped
    object with C++ exception tables, `_Unwind_Resume` neither imported nor defined visibly (so a hidden
    static copy was linked in)."""
    static: list[Symbol] = []
    has_symtab = elf.has_section(".symtab")
    # Parse the (possibly huge) static table only when its string table names an _Unwind_ symbol at all.
    if has_symtab and b"_Unwind_" in (elf.section_bytes(".strtab") or b""):
        static = elf.symbols(".symtab")
    defined = sorted({s.name for s in (*dyn, *static) if s.defined and s.name.startswith("_Unwind_")})
    if defined:
        return defined
    if not has_symtab and elf.has_section(".gcc_except_table"):
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
    policy: str = ""  # the auditwheel policy it was held to ("manylinux_2_28_x86_64")
    unversioned: tuple[Resolution, ...] = ()  # every unversioned import and where it resolves


def _too_new(elf: Elf, syms: list[Symbol], policy: Manylinux) -> list[TooNew]:
    """Too-new symbol imports plus version requirements no imported symbol carries."""
    bad = too_new_imports(syms, policy)
    known = {(t.library, t.version) for t in bad}
    for library, version in needed_versions(elf):
        why = policy.too_new(version)
        if why and (library, version) not in known:
            bad.append(TooNew("(version requirement)", version, library, why))
    return bad


def inspect_object(path: Path, torch_lib_dirs: tuple[Path, ...] = ()) -> ObjectReport | None:
    """None for a file that is not ELF (Mach-O, PE: nothing to check here). `torch_lib_dirs`: where the
    variant's torch libraries are (its build environment), for resolving unversioned imports."""
    with path.open("rb") as fh:
        if binary_format(fh.read(8)) != "elf":
            return None
    try:
        with Elf.open(path) as elf:
            policy = manylinux(elf.machine_name)
            if policy is None:
                return ObjectReport(path, (), (), f"auditwheel has no {POLICY} policy for {elf.machine_name}")
            syms = elf.symbols(".dynsym")
            bad = _too_new(elf, syms, policy)
            unwinder = tuple(private_unwinder(elf, syms))
        resolved = resolve_unversioned(path, syms, torch_lib_dirs, policy)
    except (ElfError, OSError) as exc:
        return ObjectReport(path, (), (), f"cannot read its ELF symbol tables ({exc})")
    bad += [TooNew(r.symbol, "", r.library, r.problem) for r in resolved if r.problem]
    return ObjectReport(path, tuple(bad), unwinder, policy=policy.name, unversioned=tuple(resolved))


def _names(items: list[str]) -> str:
    shown = ", ".join(items[:_SHOWN])
    return shown + (f" (+{len(items) - _SHOWN} more)" if len(items) > _SHOWN else "")


def _object_findings(variant: str, so: Path, rep: ObjectReport, *, host_toolchain_ok: bool) -> list[Finding]:
    """The failures (or waived warnings) of one binary; empty when it is clean."""
    if rep.error:
        return [Finding(variant, "symbols", FAIL, f"{so.name}: {rep.error}", "rebuild the variant")]
    findings: list[Finding] = []
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
    return findings


def imports_finding(variant: str, so: Path, rep: ObjectReport) -> Finding | None:
    """The `imports` finding: every unversioned import and where it resolves (all of them in `details`)."""
    if not rep.unversioned:
        return None
    lines = tuple(r.line() for r in rep.unversioned)
    missing = [r for r in rep.unversioned if r.unresolved_here]
    if missing:
        return Finding(
            variant,
            "imports",
            WARN,
            f"{so.name}: {summary(list(rep.unversioned))}; {len(missing)} cannot be resolved on this host "
            "(some of its libraries are not here)",
            "verify where the variant's torch build environment is installed to resolve every import",
            details=lines,
        )
    return Finding(variant, "imports", PASS, f"{so.name}: {summary(list(rep.unversioned))}", details=lines)


def check_symbols(
    variant: str, so_files: list[Path], *, host_toolchain_ok: bool = False, torch_lib_dirs: tuple[Path, ...] = ()
) -> list[Finding]:
    """The `symbols` check of verify: manylinux_2_28 ceilings (auditwheel's policy) for versioned imports and
    for the unversioned ones a system library would have to supply, and no private unwinder; plus the
    `imports` report of where each unversioned import resolves. `host_toolchain_ok` turns the ceilings (never
    the unwinder) into a warning, as for kernel-abi-check."""
    findings: list[Finding] = []
    reports = [(so, rep) for so in so_files if (rep := inspect_object(so, torch_lib_dirs)) is not None]
    for so, rep in reports:
        findings += _object_findings(variant, so, rep, host_toolchain_ok=host_toolchain_ok)
    if not findings and reports:
        policy = manylinux(reports[0][1].policy.removeprefix(f"{POLICY}_")) or manylinux()
        findings.append(
            Finding(
                variant,
                "symbols",
                PASS,
                f"{len(reports)} ELF binaries: imports within {POLICY} ({policy.summary() if policy else ''}), "
                "libgcc_s unwinder",
            )
        )
    findings += [f for so, rep in reports if (f := imports_finding(variant, so, rep)) is not None]
    return findings


__all__ = ["check_symbols", "inspect_object", "version_too_new", "POLICY"]
