"""The ROCm/HIP side of the build plan: HIP flags and the warp size each AMD arch compiles to.

ggml builds its CUDA sources as HIP (docs/upstream.md §5): GGML_USE_HIP switches vendors/hip.h on, and the
code asks `ggml_cuda_get_physical_warp_size()` at compile time — 64 under __GFX9__/__GFX8__ (GCN, CDNA),
32 otherwise (RDNA compiles wave32 by default). The host side sizes blocks from the shim's
`ggml_cuda_info().devices[d].warp_size`, filled from hipDeviceProp.warpSize; the two agree only while no
flag changes the wavefront size, so such flags are refused here, and `warp_size(arch)` states what each
arch compiles to (the plan prints it per arch).

toolkit/build/steps.py plans a ROCm section's hipcc steps through `validate_archs` (its rocm-archs) and
`hip_flags` (its hip-flags), notes `warp_size` per arch, and names each compilation unit with `cuid_flag`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence

from toolkit.core import ggml_facts as facts
from toolkit.core.errors import ConfigError

_ARCH = re.compile(r"^gfx[0-9a-f]{3,4}$")


def normalize_arch(arch: str) -> str:
    """'gfx90a:sramecc+:xnack-' -> 'gfx90a' (the device's gcnArchName carries feature flags)."""
    return arch.strip().split(":")[0].lower()


def warp_size(arch: str) -> int:
    """The wavefront size ggml's HIP code is compiled with for `arch` (ggml_cuda_get_physical_warp_size)."""
    name = normalize_arch(arch)
    if not _ARCH.match(name):
        raise ConfigError(f"{arch!r} is not an AMD GPU arch name", "use names like gfx942 or gfx1100")
    for prefix, size in facts.HIP_WARP_SIZE_BY_PREFIX:
        if name.startswith(prefix) and (len(name) - len(prefix)) in (1, 2):
            return size
    raise ConfigError(
        f"no known wavefront size for {arch}",
        f"use one of the arch families {', '.join(p for p, _ in facts.HIP_WARP_SIZE_BY_PREFIX)}",
    )


def validate_archs(archs: Iterable[str]) -> tuple[str, ...]:
    """Normalised, de-duplicated archs, each with a known wavefront size; kernel-builder intersects
    rocm-archs with its own list, so an arch outside facts.ROCM_ARCHS is reported, not silently dropped."""
    out: list[str] = []
    for arch in archs:
        name = normalize_arch(arch)
        warp_size(name)
        if name not in facts.ROCM_ARCHS:
            raise ConfigError(
                f"rocm arch {name} is not in kernel-builder's HIP list ({', '.join(facts.ROCM_ARCHS)})",
                "pick archs from that list; kernel-builder would drop the others",
            )
        if name not in out:
            out.append(name)
    if not out:
        raise ConfigError("no ROCm archs", 'list at least one, e.g. rocm-archs = ["gfx942"]')
    return tuple(out)


def hip_flags(extra: Sequence[str] = ()) -> tuple[str, ...]:
    """facts.HIP_FLAGS plus `extra`, refusing flags that would break the warp-size agreement or the
    IEEE-conformant math upstream builds HIP with."""
    flags = tuple(facts.HIP_FLAGS) + tuple(extra)
    bad = [f for f in flags if f in facts.HIP_FORBIDDEN_FLAGS]
    if bad:
        raise ConfigError(
            f"HIP flag {bad[0]} is not allowed",
            "it changes the compiled wavefront size or math away from upstream's HIP build",
        )
    return flags


def cuid_flag(argv: Sequence[str]) -> str:
    """clang's `-cuid=` for one HIP compile (`argv`: the compiler, then its arguments).

    clang names every HIP compilation unit (the `__hip_cuid_*` symbol, the externalized static device variables)
    after its -cuid, by default a hash of the source's real path and the whole command line, which names the
    project's directory (its prefix maps, the build cache): the same tree built in two directories would give
    two different .so files. This id hashes only what does not depend on where the project, the toolchain or
    torch lie (the compiler's path, absolute include dirs and prefix maps left out): the project-relative
    source, the flags, the archs. Two units of one .so (another source, or one source with other flags) get
    two ids. clang accepts letters, digits and `_` only: hex it is."""
    kept = [
        a
        for a in argv[1:]
        if not a.startswith("-ffile-prefix-map=") and not (a.startswith("-I") and a[2:].startswith(("/", "<")))
    ]
    return "-cuid=" + hashlib.sha256("\0".join(kept).encode()).hexdigest()[:16]
