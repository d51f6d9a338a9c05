"""Read, check and construct Apple `metallib` containers: the compiled Metal library a darwin variant embeds.

Apple does not document the format. The layout below is the one this module relies on; it was pieced
together from public reverse-engineering notes and readers/writers and cross-checked between them:
YuAo/MetalLibraryArchive (README "Binary Layout" and Archive.swift: header fields, tag groups, function
types, header extension), 3Shain/dxmt src/airconv/metallib_writer.cpp (a writer whose output Metal
loads: how the sizes are counted), gfx-rs/naga's wiki "Metallib file format", the floor/metallib-dis
dumper, and JuliaGPU/Metal.jl src/version.jl (which file/AIR versions each macOS accepts).
All integers are little-endian.

Header (88 bytes)
    0   4  magic "MTLB"
    4   2  target platform: 0x8001 macOS, 0x0001 iOS (bit 15 set = macOS)
    6   2  file format version, major            } 2.7 from Xcode 15 / macOS 14 targets,
    8   2  file format version, minor            } 2.8 macOS 15, 2.9 macOS 26 (Metal.jl)
    10  1  library type: 0 executable, 1 Core Image, 2 dynamic, 3 symbol companion
    11  1  target OS: 0 unknown, 0x81 macOS, 0x82 iOS, 0x83 tvOS, 0x84 watchOS, 0x85 bridgeOS,
           0x86 macCatalyst, 0x87 iOS sim, 0x88 tvOS sim, 0x89 watchOS sim
    12  2  target OS version, major              } the deployment target the library was built
    14  2  target OS version, minor              } for (-mmacosx-version-min): its minimum OS
    16  8  file size (must equal the container's length; Metal rejects the file otherwise)
    24  16 function list: offset, size
    40  16 public metadata section: offset, size
    56  16 private metadata section: offset, size
    72  16 bitcode section: offset, size

Function list (at its offset)
    u32 function count, then one tag group per function. The recorded size counts the tag groups but
    not the leading count, so `offset + size` lands on the last group's closing "ENDT" and the header
    extension (if any) starts at `offset + size + 4`.
Tag group
    u32 group size (including this u32), then tags, closed by the 4 bytes "ENDT" (no size field).
Tag
    4-byte name, u16 content size, content. Function tags:
      NAME  NUL-terminated function name          TYPE  u8 (0 vertex, 1 fragment, 2 kernel,
      MDSZ  u64 bitcode size                            3 unqualified, 4 visible, 5 extern, 6 intersection)
      HASH  32-byte SHA-256 of the bitcode        OFFT  3 x u64: offsets into the public metadata,
      VERS  4 x u16: AIR major, AIR minor,              private metadata and bitcode sections
            Metal language major, minor           LAYR, TESS, SOFF, RFLT: not needed here
Header extension (only if function-list end + 4 != public metadata offset)
    tags as above, closed by "ENDT": UUID (16 bytes), HDYN/VLST/ILST/HSRD/HSRC (u64 offset, u64 size).
Public / private metadata
    per function: u32 size (not counting itself), tags, "ENDT". Not interpreted here.
Bitcode section
    per function: AIR bitcode (LLVM bitcode wrapper, magic 0x0B17C0DE); Metal checks HASH against it.

What a Metal language version needs at runtime: MSL 4.0 libraries fail on macOS < 26 with "This library
is using language version 4.0 which is not supported on this OS" (docs/hub-contract.md §4.7); the table
LANGUAGE_MIN_MACOS maps each MSL version to the first macOS that runs it (Apple's MTLLanguageVersion
availability).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable

from toolkit.build.metallib_model import (
    END_TAG,
    FUNCTION_TYPES,
    HEADER_SIZE,
    LIBRARY_TYPES,
    MAGIC,
    PLATFORM_IOS,
    PLATFORM_MACOS,
    TARGET_OS,
    MetalFunction,
    MetallibError,
    MetalLibrary,
    language_min_macos,
    parse_version,
    version_text,
)

# The face verify, the Metal embed step and the tests use; the values live in metallib_model.py.
__all__ = [
    "END_TAG",
    "FUNCTION_TYPES",
    "HEADER_SIZE",
    "MAGIC",
    "PLATFORM_IOS",
    "PLATFORM_MACOS",
    "TARGET_OS",
    "MetalFunction",
    "MetalLibrary",
    "MetallibError",
    "check",
    "find_embedded",
    "parse",
    "parse_version",
]

# --- parsing ---------------------------------------------------------------------------------------


class _Reader:
    def __init__(self, data: bytes, where: str) -> None:
        self.data = data
        self.pos = 0
        self.where = where

    def fail(self, what: str) -> MetallibError:
        return MetallibError(
            f"{self.where}: {what}",
            "rebuild the metallib with `xcrun metallib`; the bytes are truncated or not a metallib",
        )

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise self.fail(f"truncated at byte {self.pos} (wanted {n} more of {len(self.data)})")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def u(self, fmt: str) -> int:
        return int(struct.unpack("<" + fmt, self.take(struct.calcsize(fmt)))[0])

    def seek(self, pos: int) -> None:
        if not 0 <= pos <= len(self.data):
            raise self.fail(f"offset {pos} outside the {len(self.data)}-byte container")
        self.pos = pos

    def tags(self) -> list[tuple[str, bytes]]:
        out: list[tuple[str, bytes]] = []
        while True:
            name = self.take(4)
            if name == END_TAG:
                return out
            if not all(32 <= b < 127 for b in name):
                raise self.fail(f"bad tag name {name!r} at byte {self.pos - 4}")
            size = self.u("H")
            out.append((name.decode("ascii"), self.take(size)))


def _sections(r: _Reader, data: bytes) -> dict[str, tuple[int, int]]:
    sections = {}
    for name in ("functions", "public_metadata", "private_metadata", "bitcode"):
        off, size = r.u("Q"), r.u("Q")
        if off + size > len(data):
            raise r.fail(f"{name} section [{off}, {off + size}) runs past the end ({len(data)})")
        sections[name] = (off, size)
    return sections


def _function_list(r: _Reader, data: bytes, sections: dict[str, tuple[int, int]]) -> list[MetalFunction]:
    fl_off, fl_size = sections["functions"]
    if fl_off < HEADER_SIZE:
        raise r.fail(f"function list offset {fl_off} lies inside the header")
    r.seek(fl_off)
    count = r.u("I")
    bc_off, bc_size = sections["bitcode"]
    functions = []
    for i in range(count):
        start = r.pos
        group_size = r.u("I")
        if group_size < 8:
            raise r.fail(f"function #{i}: tag group size {group_size} is too small")
        tags = r.tags()
        if r.pos - start != group_size:
            raise r.fail(f"function #{i}: tag group is {r.pos - start} bytes, its size field says {group_size}")
        functions.append(_function(tags, i, data, bc_off, bc_size, r))
    if r.pos > fl_off + 4 + fl_size:
        raise r.fail(f"function list runs to byte {r.pos}, past the {fl_size} bytes the header gives it")
    return functions


def _header_extension(r: _Reader, data: bytes, sections: dict[str, tuple[int, int]]) -> list[tuple[str, bytes]]:
    """The header extension is informational (UUID, dynamic-library tables); an unreadable one is not worth
    failing a verify over, since Metal only needs the function list and the bitcode."""
    fl_off, fl_size = sections["functions"]
    ext_at = fl_off + 4 + fl_size
    if ext_at == sections["public_metadata"][0] or ext_at + 4 > len(data):
        return []
    r.seek(ext_at)
    try:
        return r.tags()
    except MetallibError:
        return []


def parse(data: bytes, *, offset: int = 0, where: str = "metallib") -> MetalLibrary:
    """Parse one metallib container (exactly its bytes). Raises MetallibError with what is wrong."""
    data = bytes(data)
    r = _Reader(data, where)
    if len(data) < HEADER_SIZE:
        raise r.fail(f"{len(data)} bytes is shorter than the {HEADER_SIZE}-byte header")
    if r.take(4) != MAGIC:
        raise r.fail("no MTLB magic at byte 0")
    platform_raw = r.u("H")
    file_version = (r.u("H"), r.u("H"))
    lib_type = r.u("B")
    os_code = r.u("B")
    os_version = (r.u("H"), r.u("H"))
    file_size = r.u("Q")
    if file_size != len(data):
        raise r.fail(f"header says {file_size} bytes, container has {len(data)}")
    sections = _sections(r, data)
    functions, ext_tags = _function_list(r, data, sections), _header_extension(r, data, sections)
    uuid = next((c.hex() for n, c in ext_tags if n == "UUID" and len(c) == 16), None)

    platform = {PLATFORM_MACOS: "macOS", PLATFORM_IOS: "iOS"}.get(platform_raw, f"unknown(0x{platform_raw:04x})")
    return MetalLibrary(
        offset=offset,
        size=len(data),
        platform=platform,
        platform_raw=platform_raw,
        file_version=file_version,
        library_type=LIBRARY_TYPES.get(lib_type, f"unknown({lib_type})"),
        target_os=TARGET_OS.get(os_code, f"unknown(0x{os_code:02x})"),
        target_os_version=os_version if os_code else None,
        functions=tuple(functions),
        header_extension=tuple(n for n, _ in ext_tags),
        uuid=uuid,
        sha256=hashlib.sha256(data).hexdigest(),
        sections=sections,
    )


def _function(
    tags: list[tuple[str, bytes]], i: int, data: bytes, bc_off: int, bc_size: int, r: _Reader
) -> MetalFunction:
    t = dict(tags)
    for need in ("NAME", "MDSZ", "OFFT", "VERS"):
        if need not in t:
            raise r.fail(f"function #{i} has no {need} tag")
    raw_name = t["NAME"]
    if not raw_name.endswith(b"\0"):
        raise r.fail(f"function #{i}: NAME is not NUL-terminated")
    name = raw_name[:-1].decode("utf-8", "replace")
    if len(t["MDSZ"]) != 8 or len(t["OFFT"]) != 24 or len(t["VERS"]) != 8:
        raise r.fail(f"function {name!r}: MDSZ/OFFT/VERS have unexpected sizes")
    size = struct.unpack("<Q", t["MDSZ"])[0]
    rel = struct.unpack("<3Q", t["OFFT"])[2]
    air_major, air_minor, lang_major, lang_minor = struct.unpack("<4H", t["VERS"])
    if rel + size > bc_size:
        raise r.fail(f"function {name!r}: bitcode [{rel}, {rel + size}) lies outside the bitcode section")
    bitcode = data[bc_off + rel : bc_off + rel + size]
    digest = t.get("HASH")
    hash_ok = digest is not None and len(digest) == 32 and hashlib.sha256(bitcode).digest() == digest
    ftype = t.get("TYPE", b"")
    type_name = FUNCTION_TYPES.get(ftype[0], f"unknown({ftype[0]})") if len(ftype) == 1 else "unknown"
    return MetalFunction(
        name=name,
        type=type_name,
        air_version=(air_major, air_minor),
        language_version=(lang_major, lang_minor),
        bitcode_offset=bc_off + rel,
        bitcode_size=size,
        hash_ok=hash_ok,
        tags=tuple(n for n, _ in tags),
    )


def find_embedded(blob: bytes, *, where: str = "binary") -> list[MetalLibrary]:
    """Every well-formed metallib inside `blob` (a .so/.dylib or any file), in order of appearance.

    A candidate is any "MTLB" whose header's file-size field fits in the rest of the blob and whose
    contents parse; anything else (the four letters inside a string, say) is skipped silently."""
    blob = bytes(blob)
    found: list[MetalLibrary] = []
    pos = blob.find(MAGIC)
    while pos >= 0:
        size = struct.unpack_from("<Q", blob, pos + 16)[0] if pos + HEADER_SIZE <= len(blob) else 0
        if HEADER_SIZE <= size <= len(blob) - pos:
            try:
                lib = parse(blob[pos : pos + size], offset=pos, where=f"{where} @ byte {pos}")
            except MetallibError:
                lib = None
            if lib is not None:
                found.append(lib)
                pos = blob.find(MAGIC, pos + size)
                continue
        pos = blob.find(MAGIC, pos + 1)
    return found


def check(
    lib: MetalLibrary,
    *,
    required: Iterable[str] = (),
    min_macos: str | tuple[int, int] | None = None,
) -> list[str]:
    """Problems that would make the library fail for a user, one sentence each (empty = fine).

    `required`: function names the binding looks up; `min_macos`: the minimum macOS the variant declares
    (the library must load there)."""
    problems = []
    if lib.platform != "macOS":
        problems.append(f"metallib targets {lib.platform}, not macOS")
    if lib.target_os not in (None, "macOS"):
        problems.append(f"metallib was built for {lib.target_os}, not macOS")
    missing = lib.missing(required)
    if missing:
        problems.append(f"metallib lacks {len(missing)} kernel(s) the binding dispatches: {', '.join(missing)}")
    broken = [f.name for f in lib.functions if not f.hash_ok]
    if broken:
        problems.append(f"bitcode hash mismatch (Metal refuses these): {', '.join(broken)}")
    if min_macos is not None:
        declared = parse_version(min_macos) if isinstance(min_macos, str) else tuple(min_macos)
        lang = lib.language_version
        needs = language_min_macos(lang)
        if needs is not None and needs > declared:
            problems.append(
                f"Metal language {version_text(lang)} needs macOS {version_text(needs)}, but the variant "
                f"declares macOS {version_text(declared)} as its minimum"
            )
        if lib.target_os == "macOS" and lib.min_os is not None and lib.min_os > declared:
            problems.append(
                f"metallib was built for macOS {version_text(lib.min_os)} or newer, but the variant "
                f"declares macOS {version_text(declared)} as its minimum"
            )
    return problems
