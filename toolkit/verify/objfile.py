"""Just enough of ELF and Mach-O to find sections and exported symbols of a kernel binary, without binutils."""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ELF_MAGIC = b"\x7fELF"
# Mach-O 64-bit little endian (arm64/x86_64), 32-bit, and the universal (fat) container.
MACHO_MAGICS = (b"\xcf\xfa\xed\xfe", b"\xce\xfa\xed\xfe", b"\xca\xfe\xba\xbe")
PE_MAGIC = b"MZ"

SHT_SYMTAB = 2
SHT_NOBITS = 8
SHT_DYNAMIC = 6
SHT_DYNSYM = 11
SHT_GNU_VERDEF = 0x6FFFFFFD  # .gnu.version_d: versions this object defines
SHT_GNU_VERNEED = 0x6FFFFFFE  # .gnu.version_r: versions this object needs, per library file
SHT_GNU_VERSYM = 0x6FFFFFFF  # .gnu.version: one version index per .dynsym entry
SHN_UNDEF = 0
DT_NEEDED = 1
VERSYM_HIDDEN = 0x8000
EM_NAMES = {3: "i386", 62: "x86_64", 183: "aarch64", 40: "arm", 21: "ppc64", 243: "riscv64"}


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
class Symbol:
    """One entry of .dynsym (or .symtab). `version` is the GNU symbol version (`GLIBC_2.17`) or "" when
    unversioned; `library` is the file .gnu.version_r names for an imported version (`libc.so.6`)."""

    name: str
    defined: bool
    binding: int  # STB_LOCAL 0, STB_GLOBAL 1, STB_WEAK 2
    type: int  # STT_NOTYPE 0, STT_OBJECT 1, STT_FUNC 2, ...
    version: str = ""
    library: str = ""
    hidden: bool = False  # a non-default version (name@VER rather than name@@VER)

    @property
    def weak(self) -> bool:
        return self.binding == 2

    def spelled(self) -> str:
        if not self.version:
            return self.name
        return f"{self.name}@{self.version}" if self.hidden or not self.defined else f"{self.name}@@{self.version}"


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
        if data[:4] != ELF_MAGIC or len(data) < 0x40:  # bytes or an mmap
            raise ElfError("not an ELF file")
        self.data = data
        self.is64 = data[4] == 2
        self.endian = "<" if data[5] == 1 else ">"
        self.machine = struct.unpack_from(self.endian + "H", data, 0x12)[0]
        self.sections = self._read_sections()

    @classmethod
    @contextmanager
    def open(cls, path: Path) -> Iterator[Elf]:
        """Parse a file through mmap: CUDA extensions are hundreds of MB of fatbin we never need to read."""
        with path.open("rb") as fh:
            if path.stat().st_size == 0:
                raise ElfError("empty file")
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                yield cls(mm)  # type: ignore[arg-type]

    @property
    def machine_name(self) -> str:
        return EM_NAMES.get(self.machine, f"EM_{self.machine}")

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
        if s is None or s.type == SHT_NOBITS:  # no bytes in the file
            return None
        return self.data[s.offset : s.offset + s.size]

    def _section_of_type(self, typ: int) -> Section | None:
        return next((s for s in self.sections if s.type == typ), None)

    def _raw_symbols(self, sec: Section) -> list[tuple[str, bool, int, int]]:
        """(name, defined, binding, type) per entry of a symbol table, entry 0 (the null symbol) included."""
        if sec.link >= len(self.sections) or sec.offset + sec.size > len(self.data):
            raise ElfError(f"symbol table {sec.name} is malformed or truncated")
        strtab = self.sections[sec.link]
        size = 24 if self.is64 else 16
        out = []
        for i in range(sec.size // size):
            off = sec.offset + i * size
            if self.is64:
                name, info, _other, shndx = struct.unpack_from(self.endian + "IBBH", self.data, off)
            else:
                name, _v, _s, info, _other, shndx = struct.unpack_from(self.endian + "IIIBBH", self.data, off)
            out.append((self._cstr(strtab.offset + name), shndx != SHN_UNDEF, info >> 4, info & 0xF))
        return out

    def version_needs(self) -> dict[int, tuple[str, str]]:
        """Version index -> (version name, library file) from .gnu.version_r (Elf_Verneed / Elf_Vernaux)."""
        sec = self._section_of_type(SHT_GNU_VERNEED)
        if sec is None:
            return {}
        e, d = self.endian, self.data
        strtab = self.sections[sec.link].offset
        out: dict[int, tuple[str, str]] = {}
        pos, end = sec.offset, sec.offset + sec.size
        for _ in range(4096):  # bounded: a malformed chain must not loop forever
            if pos + 16 > end:
                break
            _ver, cnt, file_off, aux, nxt = struct.unpack_from(e + "HHIII", d, pos)
            library = self._cstr(strtab + file_off)
            apos = pos + aux
            for _ in range(cnt):
                if apos + 16 > end:
                    break
                _hash, _flags, other, name_off, anext = struct.unpack_from(e + "IHHII", d, apos)
                out[other & 0x7FFF] = (self._cstr(strtab + name_off), library)
                if not anext:
                    break
                apos += anext
            if not nxt:
                break
            pos += nxt
        return out

    def _verdef(self) -> dict[int, str]:
        """Version index -> version name this object defines, from .gnu.version_d (Elf_Verdef / Elf_Verdaux)."""
        sec = self._section_of_type(SHT_GNU_VERDEF)
        if sec is None:
            return {}
        e, d = self.endian, self.data
        strtab = self.sections[sec.link].offset
        out: dict[int, str] = {}
        pos, end = sec.offset, sec.offset + sec.size
        for _ in range(4096):
            if pos + 20 > end:
                break
            _ver, _flags, ndx, _cnt, _hash, aux, nxt = struct.unpack_from(e + "HHHHIII", d, pos)
            if pos + aux + 8 <= end:
                out[ndx & 0x7FFF] = self._cstr(strtab + struct.unpack_from(e + "I", d, pos + aux)[0])
            if not nxt:
                break
            pos += nxt
        return out

    def symbols(self, table: str = ".dynsym") -> list[Symbol]:
        """Every symbol of .dynsym (with its GNU version and, for imports, the library that provides that
        version) or of .symtab (no versions; empty when the file is stripped)."""
        sec = self._section_of_type(SHT_DYNSYM if table == ".dynsym" else SHT_SYMTAB)
        if sec is None:
            return []
        raw = self._raw_symbols(sec)
        versym: tuple[int, ...] = ()
        need: dict[int, tuple[str, str]] = {}
        define: dict[int, str] = {}
        if table == ".dynsym":
            vs = self._section_of_type(SHT_GNU_VERSYM)
            if vs is not None and vs.size // 2 == len(raw) and vs.offset + vs.size <= len(self.data):
                versym = struct.unpack_from(f"{self.endian}{len(raw)}H", self.data, vs.offset)
                need, define = self.version_needs(), self._verdef()
        out = []
        for i, (name, defined, binding, typ) in enumerate(raw[1:], start=1):
            v = versym[i] if versym else 1
            idx = v & 0x7FFF
            version = library = ""
            if idx >= 2:  # 0: local, 1: global (unversioned)
                if idx in need:
                    version, library = need[idx]
                else:
                    version = define.get(idx, "")
            out.append(Symbol(name, defined, binding, typ, version, library, bool(v & VERSYM_HIDDEN)))
        return out

    def needed(self) -> list[str]:
        """DT_NEEDED library names from the dynamic section."""
        dyn = self._section_of_type(SHT_DYNAMIC)
        if dyn is None or dyn.link >= len(self.sections):
            return []
        strtab = self.sections[dyn.link].offset
        fmt, size = (self.endian + "qQ", 16) if self.is64 else (self.endian + "iI", 8)
        out = []
        for off in range(dyn.offset, min(dyn.offset + dyn.size, len(self.data) - size + 1), size):
            tag, val = struct.unpack_from(fmt, self.data, off)
            if tag == 0:
                break
            if tag == DT_NEEDED:
                out.append(self._cstr(strtab + val))
        return out

    def dynamic_symbols(self) -> tuple[set[str], set[str]]:
        """(defined, undefined) names in .dynsym."""
        defined: set[str] = set()
        undefined: set[str] = set()
        for sym in self.symbols(".dynsym"):
            (defined if sym.defined else undefined).add(sym.name)
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
