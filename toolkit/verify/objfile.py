"""Sections, symbols and symbol versions of a kernel binary, read through pyelftools (ELF, what auditwheel reads
with) and lief (Mach-O): the toolkit parses no object-file format itself."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from elftools.common.exceptions import ELFError
from elftools.construct import ConstructError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerDefSection, GNUVerNeedSection, GNUVerSymSection
from elftools.elf.hash import ELFHashSection, GNUHashSection
from elftools.elf.sections import SymbolTableSection

ELF_MAGIC = b"\x7fELF"
# Mach-O 64-bit little endian (arm64/x86_64), 32-bit, and the universal (fat) container.
MACHO_MAGICS = (b"\xcf\xfa\xed\xfe", b"\xce\xfa\xed\xfe", b"\xca\xfe\xba\xbe")
PE_MAGIC = b"MZ"
# e_machine as pyelftools names it -> the CPU name of variant names and manylinux tags.
MACHINES = {"EM_X86_64": "x86_64", "EM_AARCH64": "aarch64", "EM_386": "i686", "EM_PPC64": "ppc64le"}
# What pyelftools raises for a malformed or truncated file (construct's errors for short reads).
READ_ERRORS = (ELFError, ConstructError, ValueError, OSError, KeyError, AttributeError, TypeError)


def binary_format(data: bytes) -> str | None:
    """'elf', 'macho', 'pe' or None, from the first bytes (enough to route a file to its reader)."""
    if data.startswith(ELF_MAGIC):
        return "elf"
    if data[:4] in MACHO_MAGICS:
        return "macho"
    if data.startswith(PE_MAGIC):
        return "pe"
    return None


@dataclass(frozen=True)
class Symbol:
    """One entry of .dynsym (or .symtab). `version` is the GNU symbol version (`GLIBC_2.17`) or "" when
    unversioned; `library` is the file .gnu.version_r names for an imported version (`libc.so.6`)."""

    name: str
    defined: bool
    binding: str  # STB_LOCAL, STB_GLOBAL, STB_WEAK, ...
    type: str  # STT_NOTYPE, STT_OBJECT, STT_FUNC, ...
    version: str = ""
    library: str = ""
    hidden: bool = False  # a non-default version (name@VER rather than name@@VER)

    @property
    def weak(self) -> bool:
        return self.binding == "STB_WEAK"

    def spelled(self) -> str:
        if not self.version:
            return self.name
        return f"{self.name}@{self.version}" if self.hidden or not self.defined else f"{self.name}@@{self.version}"


class ElfError(ValueError):
    """The file is not ELF, or pyelftools cannot read the part asked for."""


class Elf:
    """A parsed ELF file: pyelftools reads it lazily from the open file, so the hundreds of MB of fatbin in a
    CUDA extension are never read unless a section's bytes are asked for."""

    def __init__(self, stream: BinaryIO) -> None:
        try:
            self.elf = ELFFile(stream)
        except READ_ERRORS as exc:
            raise ElfError(f"not a readable ELF file ({exc})") from None

    @classmethod
    @contextmanager
    def open(cls, path: Path) -> Iterator[Elf]:
        with path.open("rb") as fh:
            yield cls(fh)

    @property
    def machine_name(self) -> str:
        machine = str(self.elf["e_machine"])
        return MACHINES.get(machine, machine)

    def _of_type(self, kind: type) -> Any:
        return next((s for s in self.elf.iter_sections() if isinstance(s, kind)), None)

    def has_section(self, name: str) -> bool:
        return self.elf.get_section_by_name(name) is not None

    def section_bytes(self, name: str) -> bytes | None:
        """A section's contents; None when it is absent or occupies no bytes in the file (SHT_NOBITS)."""
        sec = self.elf.get_section_by_name(name)
        if sec is None or sec["sh_type"] == "SHT_NOBITS":
            return None
        try:
            return sec.data()
        except READ_ERRORS as exc:
            raise ElfError(f"section {name} is truncated ({exc})") from None

    def version_needs(self) -> dict[int, tuple[str, str]]:
        """Version index -> (version name, library file) from .gnu.version_r."""
        sec = self._of_type(GNUVerNeedSection)
        out: dict[int, tuple[str, str]] = {}
        if sec is not None:
            for verneed, auxes in sec.iter_versions():
                for aux in auxes:
                    out[aux["vna_other"] & 0x7FFF] = (aux.name, verneed.name)
        return out

    def version_defs(self) -> dict[int, str]:
        """Version index -> version name this object defines, from .gnu.version_d."""
        sec = self._of_type(GNUVerDefSection)
        out: dict[int, str] = {}
        if sec is not None:
            for verdef, auxes in sec.iter_versions():
                first = next(iter(auxes), None)
                if first is not None:
                    out[verdef["vd_ndx"] & 0x7FFF] = first.name
        return out

    def _table(self, table: str) -> SymbolTableSection | None:
        kind = "SHT_DYNSYM" if table == ".dynsym" else "SHT_SYMTAB"
        return next((s for s in self.elf.iter_sections() if s["sh_type"] == kind), None)

    def symbols(self, table: str = ".dynsym") -> list[Symbol]:
        """Every symbol of .dynsym (with its GNU version and, for imports, the library that provides that
        version) or of .symtab (no versions; empty when the file is stripped)."""
        sec = self._table(table)
        if sec is None:
            return []
        try:
            return self._symbols(sec, versioned=table == ".dynsym")
        except READ_ERRORS as exc:
            raise ElfError(f"symbol table {sec.name} is malformed or truncated ({exc})") from None

    def _symbols(self, sec: SymbolTableSection, *, versioned: bool) -> list[Symbol]:
        versym = self._of_type(GNUVerSymSection) if versioned else None
        need, define = (self.version_needs(), self.version_defs()) if versym is not None else ({}, {})
        out = []
        for i, sym in enumerate(sec.iter_symbols()):
            if i == 0:  # the null symbol
                continue
            raw = versym.get_symbol(i)["ndx"] if versym is not None else 1
            idx = raw & 0x7FFF if isinstance(raw, int) else 1  # VER_NDX_LOCAL / VER_NDX_GLOBAL: unversioned
            version, library = "", ""
            if idx >= 2:  # an import's version names its library; a definition's does not
                version, library = need.get(idx) or (define.get(idx, ""), "")
            info = sym["st_info"]
            defined = sym["st_shndx"] != "SHN_UNDEF"
            hidden = isinstance(raw, int) and bool(raw & 0x8000)
            out.append(Symbol(sym.name, defined, info["bind"], info["type"], version, library, hidden))
        return out

    def needed(self) -> list[str]:
        """DT_NEEDED library names from the dynamic section."""
        dyn = self._of_type(DynamicSection)
        return [] if dyn is None else [t.needed for t in dyn.iter_tags() if t.entry.d_tag == "DT_NEEDED"]

    def lookup(self, name: str) -> bool | None:
        """Whether .dynsym defines `name`, through the symbol hash table (no walk over a 100k-symbol torch
        library); None when the object has no hash table to ask."""
        for sec in self.elf.iter_sections():
            if isinstance(sec, GNUHashSection | ELFHashSection):
                sym = sec.get_symbol(name)
                return sym is not None and sym["st_shndx"] != "SHN_UNDEF"
        return None

    def dynamic_symbols(self) -> tuple[set[str], set[str]]:
        """(defined, undefined) names in .dynsym."""
        defined: set[str] = set()
        undefined: set[str] = set()
        for sym in self.symbols(".dynsym"):
            (defined if sym.defined else undefined).add(sym.name)
        return defined, undefined


# --- Mach-O through lief ----------------------------------------------------------------------------------


def _macho(data: bytes) -> Any:
    """The first slice of a (possibly universal) Mach-O, or None when lief cannot parse it."""
    import lief

    lief.logging.disable()  # lief logs parse warnings to stderr; verify reports in findings instead
    fat = lief.MachO.parse(data)
    return fat.at(0) if fat is not None and fat.size > 0 else None


def exports_symbol(data: bytes, symbol: str) -> bool | None:
    """Whether the binary exports `symbol` (ELF: defined in .dynsym; Mach-O: the leading-underscore name in its
    exports). None when the format cannot be read."""
    fmt = binary_format(data)
    if fmt == "elf":
        import io

        try:
            defined, _ = Elf(io.BytesIO(data)).dynamic_symbols()
        except ElfError:
            return None
        return symbol in defined
    if fmt == "macho":
        binary = _macho(bytes(data))
        if binary is None:
            return None
        return any(s.name == f"_{symbol}" for s in binary.exported_symbols)
    return None


def macho_minos(data: bytes) -> str | None:
    """The minimum macOS version of a Mach-O (LC_BUILD_VERSION, else LC_VERSION_MIN_MACOSX), 'X.Y'."""
    if binary_format(data) != "macho":
        return None
    binary = _macho(bytes(data))
    if binary is None:
        return None
    if binary.has_build_version:
        major, minor = binary.build_version.minos[:2]
    elif binary.has_version_min:
        major, minor = binary.version_min.version[:2]
    else:
        return None
    return f"{major}.{minor}"
