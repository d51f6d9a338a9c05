"""`backend.archs` must equal what the binary really contains: CUDA cubins/PTX read from the ELF `.nv_fatbin`
section (no cuobjdump needed), ROCm code objects from the clang offload bundle in `.hip_fatbin`. lief finds
the sections; the two device-code containers inside them are read here, since no library parses them.

Fatbin layout (as nvcc 12/13 write it; checked against nvcc 13.0 output in tests/verify/test_checks.py):
a section holds one container per translation unit, each `u32 magic 0xBA55ED50, u16 version, u16 header
size, u64 payload size`, followed by entries `u16 kind (1 PTX, 2 ELF cubin), u16, u32 header size, u64 size,
u32 compressed size, u32, u16 minor, u16 major, u32 arch (e.g. 90), u32 name offset, u32 name length,
u64 flags, ...`. Flag 0x100000 marks an arch-specific target (sm_90a), 0x200000 a family target (sm_100f).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path

from toolkit.verify.findings import FAIL, PASS, SKIP, WARN, Finding
from toolkit.verify.objfile import Elf, ElfError, binary_format

FATBIN_MAGIC = 0xBA55ED50
FATBIN_KIND_PTX = 1
FATBIN_KIND_ELF = 2
FLAG_ARCH_SPECIFIC = 0x100000  # sm_XXa
FLAG_FAMILY_SPECIFIC = 0x200000  # sm_XXXf
CONTAINER_HEADER = struct.Struct("<IHHQ")
ENTRY_HEADER = struct.Struct("<HHIQIIHHIIIQ")

CLANG_BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
CLANG_COMPRESSED_MAGIC = b"CCOB"

# kernel-builder capability syntax: 8.0, 9.0a, 10.0f, 12.0+PTX (docs/hub-contract.md §1.2, §2.6).
_CAP_RE = re.compile(r"^(\d+)\.(\d)([af]?)(\+PTX)?$")


@dataclass(frozen=True, order=True)
class CudaTarget:
    """One compiled CUDA target: sm (cubin) or compute (PTX) for arch `major*10+minor` with a suffix."""

    arch: int
    suffix: str  # "", "a" or "f"
    ptx: bool

    def cap(self) -> str:
        return f"{self.arch // 10}.{self.arch % 10}{self.suffix}"

    def nvcc_name(self) -> str:
        return f"{'compute' if self.ptx else 'sm'}_{self.arch}{self.suffix}"


@dataclass(frozen=True)
class FatbinContents:
    containers: tuple[frozenset[CudaTarget], ...]  # one per translation unit

    @property
    def targets(self) -> frozenset[CudaTarget]:
        return frozenset().union(*self.containers) if self.containers else frozenset()


def parse_fatbin_section(sec: bytes) -> FatbinContents:
    """Every container in a `.nv_fatbin` section; containers are 8-byte aligned and may be padded."""
    containers = []
    pos = 0
    while pos + CONTAINER_HEADER.size <= len(sec):
        magic, _version, hsize, size = CONTAINER_HEADER.unpack_from(sec, pos)
        if magic != FATBIN_MAGIC:
            pos += 8  # padding between containers
            continue
        start, end = pos + hsize, pos + hsize + size
        if end > len(sec) or hsize < CONTAINER_HEADER.size:
            raise ValueError(f"fatbin container at {pos:#x} runs past the section end")
        targets = set()
        q = start
        while q + ENTRY_HEADER.size <= end:
            kind, _u1, ehsize, esize, _csize, _u2, _minor, _major, arch, _noff, _nlen, flags = ENTRY_HEADER.unpack_from(
                sec, q
            )
            if ehsize < ENTRY_HEADER.size or kind not in (FATBIN_KIND_PTX, FATBIN_KIND_ELF):
                raise ValueError(f"unknown fatbin entry at {q:#x} (kind {kind})")
            suffix = "a" if flags & FLAG_ARCH_SPECIFIC else "f" if flags & FLAG_FAMILY_SPECIFIC else ""
            targets.add(CudaTarget(arch, suffix, kind == FATBIN_KIND_PTX))
            q += ehsize + esize
        containers.append(frozenset(targets))
        pos = (end + 7) & ~7
    return FatbinContents(tuple(containers))


def cuda_targets_of(data: bytes) -> FatbinContents | None:
    """The CUDA targets inside an ELF shared object; None when it has no `.nv_fatbin` section."""
    sec = Elf.parse(data, symtab=False).section_bytes(".nv_fatbin")
    return None if sec is None else parse_fatbin_section(sec)


def _device_section(so: Path, name: str) -> bytes | None:
    """One section of the extension, read from the file (lief, without the symbol tables)."""
    with Elf.open(so, symtab=False) as elf:
        return elf.section_bytes(name)


def parse_caps(archs: list[str]) -> tuple[set[CudaTarget], list[str]]:
    """metadata `backend.archs` -> expected targets (an X.Y+PTX entry means sm_XY and compute_XY)."""
    wanted: set[CudaTarget] = set()
    bad = []
    for cap in archs:
        m = _CAP_RE.match(cap)
        if not m:
            bad.append(cap)
            continue
        arch = int(m.group(1)) * 10 + int(m.group(2))
        wanted.add(CudaTarget(arch, m.group(3), False))
        if m.group(4):
            wanted.add(CudaTarget(arch, m.group(3), True))
    return wanted, bad


def caps_of(targets: frozenset[CudaTarget]) -> list[str]:
    """Targets in kernel-builder syntax, sorted by arch (what metadata should say)."""
    out = []
    sass = sorted(t for t in targets if not t.ptx)
    ptx = {(t.arch, t.suffix) for t in targets if t.ptx}
    for t in sass:
        out.append(t.cap() + ("+PTX" if (t.arch, t.suffix) in ptx else ""))
    for arch, suffix in sorted(ptx - {(t.arch, t.suffix) for t in sass}):
        out.append(f"{arch // 10}.{arch % 10}{suffix}+PTX (PTX only)")
    return out


# --- ROCm -------------------------------------------------------------------------------------------------


def parse_offload_bundle(blob: bytes) -> list[str]:
    """gfx targets in uncompressed clang offload bundles (`.hip_fatbin`), e.g. ['gfx942', 'gfx90a']."""
    archs = []
    pos = blob.find(CLANG_BUNDLE_MAGIC)
    while pos >= 0:
        n = struct.unpack_from("<Q", blob, pos + 24)[0]
        q = pos + 32
        for _ in range(n):
            _off, _size, tlen = struct.unpack_from("<QQQ", blob, q)
            triple = blob[q + 24 : q + 24 + tlen].decode("ascii", "replace")
            q += 24 + tlen
            if triple.startswith("hip") and "--" in triple:
                archs.append(triple.split("--", 1)[1].split(":", 1)[0])
        pos = blob.find(CLANG_BUNDLE_MAGIC, q)
    return sorted(set(archs))


# --- the check ------------------------------------------------------------------------------------------


def _rebuild(variant: str, message: str) -> list[Finding]:
    return [Finding(variant, "archs", FAIL, message, "rebuild the variant")]


def check_archs(variant: str, backend: str, archs: list[str] | None, so_files: list[Path]) -> list[Finding]:
    if backend not in ("cuda", "rocm"):
        return [Finding(variant, "archs", SKIP, f"{backend} variants carry no GPU arch list")]
    if not so_files:
        return _rebuild(variant, "no shared object to read archs from")
    if not archs:
        return [
            Finding(
                variant,
                "archs",
                FAIL,
                "metadata.json backend.archs is empty or missing",
                "write the compiled archs into metadata (kernels' ArchValidator relies on them)",
            )
        ]
    so = so_files[0]
    with so.open("rb") as fh:
        if binary_format(fh.read(8)) != "elf":
            return _rebuild(variant, f"{so.name} is not ELF; cannot read device code")
    if backend == "rocm":
        return _check_rocm(variant, archs, so)
    return _check_cuda(variant, archs, so)


def _check_rocm(variant: str, archs: list[str], so: Path) -> list[Finding]:
    try:
        sec = _device_section(so, ".hip_fatbin")
    except ElfError as exc:
        return _rebuild(variant, f"{so.name}: {exc}")
    if sec is None:
        return [
            Finding(
                variant,
                "archs",
                FAIL,
                "no .hip_fatbin section: the binary has no GPU code",
                "rebuild with hipcc --offload-arch=...",
            )
        ]
    if CLANG_COMPRESSED_MAGIC in sec and CLANG_BUNDLE_MAGIC not in sec:
        return [
            Finding(
                variant,
                "archs",
                SKIP,
                "offload bundle is compressed; cannot list gfx targets",
                "build with --no-offload-compress to make archs checkable",
            )
        ]
    found = parse_offload_bundle(sec)
    if sorted(archs) == found:
        return [Finding(variant, "archs", PASS, f"backend.archs {found} match the code objects")]
    return [
        Finding(
            variant,
            "archs",
            FAIL,
            f"backend.archs {sorted(archs)} != code objects in the binary {found}",
            f"write archs = {found} into metadata.json (or rebuild for the declared archs)",
        )
    ]


def _check_cuda(variant: str, archs: list[str], so: Path) -> list[Finding]:
    try:
        sec = _device_section(so, ".nv_fatbin")
        contents = None if sec is None else parse_fatbin_section(sec)
    except (ElfError, ValueError, struct.error) as exc:
        return _rebuild(variant, f"cannot read device code of {so.name}: {exc}")
    if contents is None or not contents.targets:
        return [
            Finding(
                variant,
                "archs",
                FAIL,
                f"{so.name} has no .nv_fatbin section: no GPU code",
                "rebuild with nvcc -gencode for the declared archs",
            )
        ]
    wanted, bad = parse_caps(archs)
    if bad:
        return [
            Finding(
                variant,
                "archs",
                FAIL,
                f"backend.archs entries not in X.Y[a|f][+PTX] form: {bad}",
                "use kernel-builder capability syntax, e.g. 9.0 or 12.0+PTX",
            )
        ]
    return [_cuda_match(variant, archs, wanted, contents.targets), *_uneven(variant, contents)]


def _cuda_match(variant: str, archs: list[str], wanted: set[CudaTarget], found: frozenset[CudaTarget]) -> Finding:
    if wanted == set(found):
        return Finding(
            variant, "archs", PASS, f"backend.archs {sorted(archs)} match the binary ({', '.join(caps_of(found))})"
        )
    missing = sorted(t.nvcc_name() for t in wanted - found)
    extra = sorted(t.nvcc_name() for t in found - wanted)
    parts = []
    if missing:
        parts.append(f"declared but not in the binary: {', '.join(missing)}")
    if extra:
        parts.append(f"in the binary but not declared: {', '.join(extra)}")
    return Finding(
        variant,
        "archs",
        FAIL,
        "backend.archs disagree with the binary — " + "; ".join(parts),
        f"write archs = {caps_of(found)} into metadata.json (or rebuild for the declared archs)",
    )


def _uneven(variant: str, contents: FatbinContents) -> list[Finding]:
    """A translation unit compiled for fewer targets than the rest fails at launch on the missing GPUs."""
    sass = {t for t in contents.targets if not t.ptx}
    uneven = [i for i, c in enumerate(contents.containers) if {t for t in c if not t.ptx} != sass]
    if not uneven or len(contents.containers) <= 1:
        return []
    return [
        Finding(
            variant,
            "archs",
            WARN,
            f"{len(uneven)} of {len(contents.containers)} translation units lack some of the cubins the others carry",
            "compile every .cu with the same -gencode list",
        )
    ]
