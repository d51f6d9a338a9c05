"""Sections, symbols and symbol versions of a kernel binary, read through lief (ELF and Mach-O): the toolkit
parses no object-file format itself. (lief rather than pyelftools for the binary under check: a torch-linked
extension has tens of thousands of symbols, which pyelftools decodes a thousand times slower.)"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ELF_MAGIC = b"\x7fELF"
# Mach-O 64-bit little endian (arm64/x86_64), 32-bit, and the universal (fat) container.
MACHO_MAGICS = (b"\xcf\xfa\xed\xfe", b"\xce\xfa\xed\xfe", b"\xca\xfe\xba\xbe")
PE_MAGIC = b"MZ"
# lief's e_machine names -> the CPU names of variant names and manylinux tags.
MACHINES = {"X86_64": "x86_64", "AARCH64": "aarch64", "I386": "i686", "PPC64": "ppc64le", "RISCV": "riscv64"}


def _lief() -> Any:
    import lief

    lief.logging.disable()  # lief logs parse warnings to stderr; verify reports in findings instead
    return lief


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
    """The file is not ELF, or lief cannot read it."""


class Elf:
    """A parsed ELF file (relocations, notes and overlay skipped: verify needs sections and symbols)."""

    def __init__(self, binary: Any) -> None:
        self.binary = binary

    @classmethod
    def parse(cls, source: Path | bytes, *, symtab: bool = True) -> Elf:
        """`symtab=False` skips the static symbol table (the slowest part of a large unstripped library)."""
        lief = _lief()
        config = lief.ELF.ParserConfig()
        config.parse_relocations = False
        config.parse_overlay = False
        config.parse_notes = False
        config.parse_symtab_symbols = symtab
        empty = source.stat().st_size == 0 if isinstance(source, Path) else not source
        binary = None if empty else lief.ELF.parse(str(source) if isinstance(source, Path) else source, config)
        if binary is None:
            raise ElfError("not a readable ELF file")
        return cls(binary)

    @classmethod
    @contextmanager
    def open(cls, path: Path, *, symtab: bool = True) -> Iterator[Elf]:
        yield cls.parse(path, symtab=symtab)

    @property
    def machine_name(self) -> str:
        machine = str(self.binary.header.machine_type).rsplit(".", 1)[-1]
        return MACHINES.get(machine, machine)

    def has_section(self, name: str) -> bool:
        return self.binary.get_section(name) is not None

    def section_bytes(self, name: str) -> bytes | None:
        """A section's contents; None when it is absent or occupies no bytes in the file (SHT_NOBITS)."""
        sec = self.binary.get_section(name)
        if sec is None or str(sec.type).endswith("NOBITS"):
            return None
        data = bytes(sec.content)
        if len(data) != sec.size:
            raise ElfError(f"section {name} is truncated ({len(data)} of {sec.size} bytes in the file)")
        return data

    def version_needs(self) -> dict[int, tuple[str, str]]:
        """Version index -> (version name, library file) from .gnu.version_r."""
        return {
            aux.other & 0x7FFF: (aux.name, req.name)
            for req in self.binary.symbols_version_requirement
            for aux in req.get_auxiliary_symbols()
        }

    def version_defs(self) -> dict[int, str]:
        """Version index -> version name this object defines, from .gnu.version_d."""
        return {
            d.ndx & 0x7FFF: d.auxiliary_symbols[0].name
            for d in self.binary.symbols_version_definition
            if d.auxiliary_symbols
        }

    def symbols(self, table: str = ".dynsym") -> list[Symbol]:
        """Every symbol of .dynsym (with its GNU version and, for imports, the library that provides that
        version) or of .symtab (no versions; empty when the file is stripped)."""
        if table != ".dynsym":
            return [_symbol(s, 1, {}, {}) for s in self.binary.symtab_symbols if s.name]
        need, define = self.version_needs(), self.version_defs()
        out = []
        for s in self.binary.dynamic_symbols:
            if not s.name:  # the null symbol
                continue
            raw = s.symbol_version.value if s.has_version else 1
            out.append(_symbol(s, raw, need, define))
        return out

    def needed(self) -> list[str]:
        """DT_NEEDED library names from the dynamic section."""
        return list(self.binary.libraries)

    def dynamic_symbols(self) -> tuple[set[str], set[str]]:
        """(defined, undefined) names in .dynsym."""
        defined: set[str] = set()
        undefined: set[str] = set()
        for sym in self.symbols(".dynsym"):
            (defined if sym.defined else undefined).add(sym.name)
        return defined, undefined


def _symbol(s: Any, raw: int, need: dict[int, tuple[str, str]], define: dict[int, str]) -> Symbol:
    """Our Symbol from lief's; `raw` is its .gnu.version entry (0 local, 1 global, else an index | hidden bit)."""
    idx = raw & 0x7FFF
    version, library = "", ""
    if idx >= 2:  # an import's version names its library; a definition's does not
        version, library = need.get(idx) or (define.get(idx, ""), "")
    binding = "STB_" + str(s.binding).rsplit(".", 1)[-1]
    kind = "STT_" + str(s.type).rsplit(".", 1)[-1]
    return Symbol(s.name, s.shndx != 0, binding, kind, version, library, bool(raw & 0x8000))


# --- Mach-O through lief ----------------------------------------------------------------------------------


def _macho(data: bytes) -> Any:
    """The first slice of a (possibly universal) Mach-O, or None when lief cannot parse it."""
    fat = _lief().MachO.parse(data)
    return fat.at(0) if fat is not None and fat.size > 0 else None


def exports_symbol(data: bytes, symbol: str) -> bool | None:
    """Whether the binary exports `symbol` (ELF: defined in .dynsym; Mach-O: the leading-underscore name in its
    exports). None when the format cannot be read."""
    fmt = binary_format(data)
    if fmt == "elf":
        try:
            defined, _ = Elf.parse(data).dynamic_symbols()
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
