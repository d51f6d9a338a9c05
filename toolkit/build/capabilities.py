"""CUDA capabilities as build.toml spells them ("9.0a", "12.0+PTX"): parsed, intersected with what a toolkit
can target (kernel-builder's rule), turned into nvcc -gencode flags, and sorted."""

from __future__ import annotations

import re

from toolkit.core.errors import BuildError

_CAP_RE = re.compile(r"^(\d+)\.(\d+)([af]?)(\+PTX)?$")


def parse_capability(cap: str) -> tuple[str, bool]:
    """ "9.0a" -> ("90a", False); "12.0+PTX" -> ("120", True)."""
    m = _CAP_RE.match(cap)
    if not m:
        raise BuildError(
            f"CUDA capability {cap!r} in build.toml is not X.Y[a|f][+PTX]",
            'fix cuda-capabilities (e.g. "8.0", "9.0a", "12.0+PTX")',
        )
    return f"{m[1]}{m[2]}{m[3]}", bool(m[4])


def supported_capabilities(caps: tuple[str, ...], toolkit_archs: tuple[str, ...]) -> tuple[str, ...]:
    """kernel-builder's loose intersection: keep what the toolkit can target (all when it is unknown)."""
    if not toolkit_archs:
        return caps
    known = {a.removeprefix("sm_").removeprefix("compute_") for a in toolkit_archs}
    return tuple(c for c in caps if re.sub(r"[af]$", "", parse_capability(c)[0]) in known)


def gencode_flags(caps: tuple[str, ...]) -> tuple[str, ...]:
    flags: list[str] = []
    for cap in caps:
        num, ptx = parse_capability(cap)
        flags.append(f"-gencode=arch=compute_{num},code=sm_{num}")
        if ptx:
            flags.append(f"-gencode=arch=compute_{num},code=compute_{num}")
    return tuple(flags)


def sort_archs(archs: set[str] | tuple[str, ...]) -> tuple[str, ...]:
    def key(a: str) -> tuple[int, int, int, str, bool]:
        m = _CAP_RE.match(a)
        return (0, int(m[1]), int(m[2]), m[3], bool(m[4])) if m else (1, 0, 0, a, False)

    return tuple(sorted(set(archs), key=key))
