"""What a metallib is, as toolkit/build/metallib.py reads it: the container's constants (magic, header size, the
platform, library-type, target-OS and function-type codes), the parsed values (`MetalLibrary`, `MetalFunction`),
and which macOS each Metal language version needs. The layout itself is described in metallib.py.

Split from toolkit/build/metallib.py, which keeps the parsing and the checks: the values are shared by the
parser, the checks, verify's report and the tests' fixture writer.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from toolkit.core.errors import VerifyError
from toolkit.core.records import fields_json

MAGIC = b"MTLB"
HEADER_SIZE = 88
END_TAG = b"ENDT"

PLATFORM_MACOS = 0x8001
PLATFORM_IOS = 0x0001

LIBRARY_TYPES = {0: "executable", 1: "coreimage", 2: "dynamic", 3: "symbol-companion"}
TARGET_OS = {
    0x00: None,
    0x81: "macOS",
    0x82: "iOS",
    0x83: "tvOS",
    0x84: "watchOS",
    0x85: "bridgeOS",
    0x86: "macCatalyst",
    0x87: "iOS-simulator",
    0x88: "tvOS-simulator",
    0x89: "watchOS-simulator",
}
FUNCTION_TYPES = {
    0: "vertex",
    1: "fragment",
    2: "kernel",
    3: "unqualified",
    4: "visible",
    5: "extern",
    6: "intersection",
}

# Metal Shading Language version -> first macOS that can load a library using it.
LANGUAGE_MIN_MACOS: dict[tuple[int, int], tuple[int, int]] = {
    (1, 1): (10, 11),
    (1, 2): (10, 12),
    (2, 0): (10, 13),
    (2, 1): (10, 14),
    (2, 2): (10, 15),
    (2, 3): (11, 0),
    (2, 4): (12, 0),
    (3, 0): (13, 0),
    (3, 1): (14, 0),
    (3, 2): (15, 0),
    (4, 0): (26, 0),
}


class MetallibError(VerifyError):
    """Bytes that should be a metallib are not one (or not a usable one)."""


def version_text(v: tuple[int, ...] | None) -> str | None:
    return None if v is None else f"{v[0]}.{v[1]}"


# The versions a function and a whole library both report, written "M.m" in JSON (fields_json's converters).
_AS_VERSION = dict.fromkeys(("air_version", "language_version"), version_text)


def parse_version(text: str) -> tuple[int, int]:
    """'26.0' / '26' / '4.0' -> (26, 0); raises MetallibError on anything else."""
    parts = text.strip().split(".")
    try:
        nums = [int(p) for p in parts]
    except ValueError:
        nums = []
    if not 1 <= len(nums) <= 3:
        raise MetallibError(f"not a version: {text!r}", "write it as MAJOR.MINOR, e.g. 26.0")
    return (nums[0], nums[1] if len(nums) > 1 else 0)


@dataclass(frozen=True)
class MetalFunction:
    """One function of a metallib's function list."""

    name: str
    type: str  # FUNCTION_TYPES value, or "unknown(N)"
    air_version: tuple[int, int]
    language_version: tuple[int, int]
    bitcode_offset: int  # absolute, within the container
    bitcode_size: int
    hash_ok: bool  # SHA-256 of the bitcode equals the HASH tag
    tags: tuple[str, ...]

    def to_dict(self) -> dict[str, object]:
        return fields_json(self, "name type air_version language_version bitcode_size hash_ok", **_AS_VERSION)


@dataclass(frozen=True)
class MetalLibrary:
    """A parsed metallib. `offset` is where it starts inside the blob it was found in (0 for a file)."""

    offset: int
    size: int
    platform: str  # "macOS", "iOS" or "unknown(0xNNNN)"
    platform_raw: int
    file_version: tuple[int, int]
    library_type: str
    target_os: str | None
    target_os_version: tuple[int, int] | None
    functions: tuple[MetalFunction, ...]
    header_extension: tuple[str, ...] = ()
    uuid: str | None = None
    sha256: str = ""
    sections: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def function_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.functions)

    @property
    def language_version(self) -> tuple[int, int] | None:
        """The newest Metal language version any function uses (what the OS must support)."""
        return max((f.language_version for f in self.functions), default=None)

    @property
    def air_version(self) -> tuple[int, int] | None:
        return max((f.air_version for f in self.functions), default=None)

    @property
    def min_os(self) -> tuple[int, int] | None:
        """The deployment target recorded in the header (None when the header records no OS)."""
        return self.target_os_version

    @property
    def required_macos(self) -> tuple[int, int] | None:
        """The oldest macOS that can load this library: the newer of the header's deployment target and
        what its language version needs."""
        needs = [
            v
            for v in (self.min_os if self.target_os == "macOS" else None, language_min_macos(self.language_version))
            if v is not None
        ]
        return max(needs, default=None)

    def missing(self, names: Iterable[str]) -> list[str]:
        have = set(self.function_names)
        return sorted({n for n in names if n not in have})

    def to_dict(self) -> dict[str, object]:
        return fields_json(
            self,
            "offset size sha256 platform file_version library_type target_os min_os language_version air_version"
            " required_macos uuid functions",
            **_AS_VERSION,
            file_version=version_text,
            min_os=version_text,
            required_macos=version_text,
            functions=lambda functions: [f.to_dict() for f in functions],
        )


def language_min_macos(version: tuple[int, int] | None) -> tuple[int, int] | None:
    """First macOS that loads a library of this Metal language version (None if unknown/None)."""
    if version is None:
        return None
    if version in LANGUAGE_MIN_MACOS:
        return LANGUAGE_MIN_MACOS[version]
    # A language version newer than the table: at least what the newest known one needs.
    newest = max(LANGUAGE_MIN_MACOS)
    return LANGUAGE_MIN_MACOS[newest] if version > newest else None
