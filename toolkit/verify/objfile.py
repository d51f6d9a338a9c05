"""Just enough of ELF and Mach-O to find sections and exported symbols of a kernel binary, without binutils."""

from __future__ import annotations

import struct
from dataclasses import dataclass

ELF_MAGIC = b"\x7fELF"
# Mach-O 64-bit little endian (arm64/x86_64), 32-bit, and the universal (fat) container.
MACHO_MAGICS = (b"\xcf\xfa\xed\xfe", b"\xce\xfa\xed\xfe", b"\xca\xfe\xba\xbe")
PE_MAGIC = b"MZ"

SHT_DYNSYM = 11
SHN_UNDEF = 0


def binary_format(data: bytes) -> str | None:
    """'elf', 'macho', 'pe' or None, from the first bytes."""
    if data.startswith(ELF_MAGIC):
        return "elf"
    if data[:4] in MACHO_MAGICS:
        return "macho"
    if data.startswith(PE_MAGIC):
        return "pe"
    return None


@dataclass(frozen=True)
class Section:
    name: str
    offset: int
    size: int
    type: int
    link: int
    entsize: int


class ElfError(ValueError):
    pass


class Elf:
    """A parsed ELF file (32/64-bit, either endianness): section table and dynamic symbols."""

    def __init__(self, data: bytes) -> None:
        if not data.startswith(ELF_MAGIC) or len(data) < 0x40:
            raise ElfError("not an ELF file")
        self.data = data
        self.is64 = data[4] == 2
        self.endian = "<" if data[5] == 1 else ">"
        self.sections = self._read_sections()

    def _read_sections(self) -> list[Section]:
        e = self.endian
        d = self.data
        if self.is64:
            shoff = struct.unpack_from(e + "Q", d, 0x28)[0]
            shentsize, shnum, shstrndx = struct.unpack_from(e + "HHH", d, 0x3A)
            fmt = e + "IIQQQQIIQQ"
        else:
            shoff = struct.unpack_from(e + "I", d, 0x20)[0]
            shentsize, shnum, shstrndx = struct.unpack_from(e + "HHH", d, 0x2E)
            fmt = e + "IIIIIIIIII"
        if shoff == 0 or shnum == 0:
            return []
        if shoff + shnum * shentsize > len(d):
            raise ElfError("section table lies past the end of the file (truncated?)")
        raw = [struct.unpack_from(fmt, d, shoff + i * shentsize) for i in range(shnum)]
        if shstrndx >= len(raw):
            raise ElfError("bad section-name table index")
        names_off = raw[shstrndx][4]
        out = []
        for name, typ, _flags, _addr, off, size, link, _info, _align, entsize in raw:
            out.append(Section(self._cstr(names_off + name), off, size, typ, link, entsize))
        return out

    def _cstr(self, off: int) -> str:
        end = self.data.find(b"\0", off)
        return self.data[off : end if end >= 0 else len(self.data)].decode("utf-8", "replace")

    def section(self, name: str) -> Section | None:
        return next((s for s in self.sections if s.name == name), None)

    def section_bytes(self, name: str) -> bytes | None:
        s = self.section(name)
        if s is None or s.type == 8:  # SHT_NOBITS has no bytes in the file
            return None
        return self.data[s.offset : s.offset + s.size]

    def dynamic_symbols(self) -> tuple[set[str], set[str]]:
        """(defined, undefined) names in .dynsym."""
        defined: set[str] = set()
        undefined: set[str] = set()
        for sec in self.sections:
            if sec.type != SHT_DYNSYM or sec.link >= len(self.sections):
                continue
            strtab = self.sections[sec.link]
            size = 24 if self.is64 else 16
            for i in range(1, sec.size // size):
                off = sec.offset + i * size
                if self.is64:
                    name, _info, _other, shndx = struct.unpack_from(self.endian + "IBBH", self.data, off)
                else:
                    name, _v, _s, _info, _other, shndx = struct.unpack_from(self.endian + "IIIBBH", self.data, off)
                sym = self._cstr(strtab.offset + name)
                (undefined if shndx == SHN_UNDEF else defined).add(sym)
        return defined, undefined


def exports_symbol(data: bytes, symbol: str) -> bool | None:
    """Whether the binary defines `symbol` (ELF: .dynsym; Mach-O: the leading-underscore name appears in the
    string table). None when the format cannot be read."""
    fmt = binary_format(data)
    if fmt == "elf":
        try:
            defined, _ = Elf(data).dynamic_symbols()
        except (ElfError, struct.error):
            return None
        return symbol in defined
    if fmt == "macho":
        return (b"\0_" + symbol.encode() + b"\0") in data
    return None


LC_BUILD_VERSION = 0x32
LC_VERSION_MIN_MACOSX = 0x24


def macho_minos(data: bytes) -> str | None:
    """The minimum macOS version of a thin 64-bit Mach-O (LC_BUILD_VERSION / LC_VERSION_MIN_MACOSX), 'X.Y'."""
    if data[:4] != MACHO_MAGICS[0] or len(data) < 32:
        return None
    ncmds = struct.unpack_from("<I", data, 16)[0]
    pos = 32
    for _ in range(ncmds):
        if pos + 8 > len(data):
            return None
        cmd, size = struct.unpack_from("<II", data, pos)
        if cmd == LC_BUILD_VERSION:
            v = struct.unpack_from("<I", data, pos + 12)[0]
            return f"{v >> 16}.{(v >> 8) & 0xFF}"
        if cmd == LC_VERSION_MIN_MACOSX:
            v = struct.unpack_from("<I", data, pos + 8)[0]
            return f"{v >> 16}.{(v >> 8) & 0xFF}"
        pos += max(size, 8)
    return None
