"""A metallib writer for the tests: well-formed Metal libraries with the functions a test names, so the parser
and the checks (toolkit/build/metallib.py, toolkit/verify/metal.py) are exercised without Xcode. Written by us
from the format's published description; nothing of Apple's is copied."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from toolkit.build.metallib import END_TAG, FUNCTION_TYPES, HEADER_SIZE, MAGIC, PLATFORM_MACOS, TARGET_OS

TARGET_OS_CODE = {name: code for code, name in TARGET_OS.items() if name}
FUNCTION_TYPE_CODE = {name: code for code, name in FUNCTION_TYPES.items()}
# What `xcrun metal -std=metal4.0` for macOS 26 writes (Metal.jl's support table): the defaults here.
DEFAULT_FILE_VERSION = (2, 9)
DEFAULT_AIR_VERSION = (2, 8)
DEFAULT_LANGUAGE_VERSION = (4, 0)
DEFAULT_TARGET_OS_VERSION = (26, 0)

_BITCODE_WRAPPER_MAGIC = b"\xde\xc0\x17\x0b"


@dataclass(frozen=True)
class FixtureFunction:
    """One function of a constructed metallib; None fields take the library's defaults."""

    name: str
    type: str = "kernel"
    language_version: tuple[int, int] | None = None
    air_version: tuple[int, int] | None = None
    bitcode: bytes | None = None


def _tag(name: str, content: bytes) -> bytes:
    return name.encode("ascii") + struct.pack("<H", len(content)) + content


def build_fixture(
    functions: Sequence[str | FixtureFunction] = ("kernel_fixture",),
    *,
    language_version: tuple[int, int] = DEFAULT_LANGUAGE_VERSION,
    air_version: tuple[int, int] = DEFAULT_AIR_VERSION,
    file_version: tuple[int, int] = DEFAULT_FILE_VERSION,
    platform: int = PLATFORM_MACOS,
    library_type: int = 0,
    target_os: str | None = "macOS",
    target_os_version: tuple[int, int] = DEFAULT_TARGET_OS_VERSION,
    uuid: bytes | None = b"ggml-vendor-fixt",
) -> bytes:
    """Bytes of a well-formed metallib with the given functions, laid out as `xcrun metallib` lays them
    out (header, function list, header extension, public and private metadata, bitcode). The bitcode
    is a placeholder (an LLVM wrapper magic plus the name), so Metal itself could not run it, but
    every structural field, size, offset and hash is real: `parse` sees exactly what it would see."""
    specs = [f if isinstance(f, FixtureFunction) else FixtureFunction(f) for f in functions]
    bitcodes = [s.bitcode if s.bitcode is not None else _BITCODE_WRAPPER_MAGIC + s.name.encode() + b"\0" for s in specs]
    groups, public, private, bitcode = b"", b"", b"", b""
    for spec, code in zip(specs, bitcodes):
        lang = spec.language_version or language_version
        air = spec.air_version or air_version
        tags = (
            _tag("NAME", spec.name.encode() + b"\0")
            + _tag("TYPE", bytes([FUNCTION_TYPE_CODE[spec.type]]))
            + _tag("HASH", hashlib.sha256(code).digest())
            + _tag("MDSZ", struct.pack("<Q", len(code)))
            + _tag("OFFT", struct.pack("<3Q", len(public), len(private), len(bitcode)))
            + _tag("VERS", struct.pack("<4H", air[0], air[1], lang[0], lang[1]))
            + END_TAG
        )
        groups += struct.pack("<I", 4 + len(tags)) + tags
        public += struct.pack("<I", 4) + END_TAG
        private += struct.pack("<I", 4) + END_TAG
        bitcode += code
    extension = (_tag("UUID", uuid) if uuid else b"") + END_TAG
    fl_off = HEADER_SIZE
    fl_size = len(groups)
    pub_off = fl_off + 4 + fl_size + len(extension)
    priv_off = pub_off + len(public)
    bc_off = priv_off + len(private)
    total = bc_off + len(bitcode)
    os_code = TARGET_OS_CODE[target_os] if target_os else 0
    header = (
        MAGIC
        + struct.pack(
            "<HHHBBHH",
            platform,
            file_version[0],
            file_version[1],
            library_type,
            os_code,
            target_os_version[0] if target_os else 0,
            target_os_version[1] if target_os else 0,
        )
        + struct.pack("<Q", total)
        + struct.pack("<8Q", fl_off, fl_size, pub_off, len(public), priv_off, len(private), bc_off, len(bitcode))
    )
    assert len(header) == HEADER_SIZE
    return header + struct.pack("<I", len(specs)) + groups + extension + public + private + bitcode
