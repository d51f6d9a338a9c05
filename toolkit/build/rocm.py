"""The ROCm/HIP side of the build: HIP flags, the warp size each AMD arch compiles to, and a local build plan.

ggml builds its CUDA sources as HIP (ggml-upstream.md §5): GGML_USE_HIP switches vendors/hip.h on, and the
code asks `ggml_cuda_get_physical_warp_size()` at compile time — 64 under __GFX9__/__GFX8__ (GCN, CDNA),
32 otherwise (RDNA compiles wave32 by default). The host side sizes blocks from the shim's
`ggml_cuda_info().devices[d].warp_size`, filled from hipDeviceProp.warpSize; the two agree only while no
flag changes the wavefront size, so such flags are refused here, and `warp_size(arch)` states what each
arch compiles to (the plan prints it per arch).

API for the build executor (mirrors toolkit/build/metal.py):
    p = plan(root, sources, include_dirs, out_dir, rocm_version="7.2", archs=..., torch_hip=...)
    p.buildable / p.blockers / p.steps (argv) / p.env (PYTORCH_ROCM_ARCH) / p.warp_sizes
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from toolkit.build.command_step import Step
from toolkit.core import ggml_facts as facts
from toolkit.core.errors import BuildError, ConfigError

_ARCH = re.compile(r"^gfx[0-9a-f]{3,4}$")
_HIP_VERSION = re.compile(r"HIP version:\s*(\d+)\.(\d+)")


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


@dataclass(frozen=True)
class RocmHost:
    hipcc: str | None
    hip_version: str | None  # "7.2"
    torch_hip: str | None  # torch.version.hip of the torch environment the variant builds against

    def blockers(self, rocm_version: str) -> tuple[str, ...]:
        out = []
        if self.hipcc is None:
            out.append(f"needs ROCm {rocm_version} (hipcc on PATH, HIP >= {facts.HIP_MIN_VERSION}); none found")
        elif self.hip_version is not None and self.hip_version != rocm_version:
            out.append(f"needs ROCm {rocm_version}; hipcc here is HIP {self.hip_version}")
        if self.torch_hip is None:
            out.append(
                f"needs a ROCm build of torch (torch.version.hip = {rocm_version}); the environment's torch has none"
            )
        elif ".".join(self.torch_hip.split(".")[:2]) != rocm_version:
            out.append(
                f"needs torch built for ROCm {rocm_version}; the environment's torch is for ROCm {self.torch_hip}"
            )
        return tuple(out)


def probe_host(
    torch_hip: str | None = None, run: Callable[..., subprocess.CompletedProcess] = subprocess.run
) -> RocmHost:
    hipcc = shutil.which("hipcc")
    version = None
    if hipcc:
        try:
            res = run([hipcc, "--version"], capture_output=True, text=True, timeout=60)
            m = _HIP_VERSION.search(res.stdout + res.stderr)
            version = f"{m.group(1)}.{m.group(2)}" if m else None
        except (OSError, subprocess.TimeoutExpired):
            version = None
    return RocmHost(hipcc, version, torch_hip)


@dataclass(frozen=True)
class RocmPlan:
    rocm_version: str
    archs: tuple[str, ...]
    warp_sizes: dict[str, int]
    flags: tuple[str, ...]
    include_dirs: tuple[str, ...]
    sources: tuple[str, ...]
    steps: tuple[Step, ...]
    env: dict[str, str]
    requirements: tuple[str, ...]
    blockers: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def buildable(self) -> bool:
        return not self.blockers

    def to_dict(self) -> dict[str, object]:
        return {
            "rocm_version": self.rocm_version,
            "archs": list(self.archs),
            "warp_sizes": dict(self.warp_sizes),
            "flags": list(self.flags),
            "include_dirs": list(self.include_dirs),
            "sources": list(self.sources),
            "steps": [s.to_dict() for s in self.steps],
            "env": dict(self.env),
            "requirements": list(self.requirements),
            "buildable": self.buildable,
            "blockers": list(self.blockers),
            "notes": list(self.notes),
        }


def plan(
    root: Path,
    sources: Sequence[str],
    include_dirs: Sequence[str],
    out_dir: Path,
    *,
    rocm_version: str,
    archs: Iterable[str] | None = None,
    host: RocmHost | None = None,
    torch_hip: str | None = None,
    extra_flags: Sequence[str] = (),
) -> RocmPlan:
    """hipcc steps for the torch-independent HIP objects (one per .cu, every arch in one fat object), and
    everything a torch extension build needs around them. `sources`/`include_dirs` are project-relative
    (the rendered build.toml's rocm sections)."""
    if not re.match(r"^\d+\.\d+$", rocm_version):
        raise ConfigError(f"ROCm version {rocm_version!r} is not MAJOR.MINOR", "write it like 7.2")
    root = Path(root).resolve()
    out_dir = Path(out_dir).resolve()
    archs = validate_archs(archs if archs is not None else facts.ROCM_ARCHS)
    flags = hip_flags(extra_flags)
    host = host if host is not None else probe_host(torch_hip)
    hipcc = host.hipcc or "hipcc"
    incs = tuple(f"-I{root / d}" for d in include_dirs)
    steps = []
    for src in sources:
        if not src.endswith((".cu", ".hip", ".cpp")):
            continue
        obj = out_dir / (src.replace("/", "__") + ".o")
        argv = (
            hipcc,
            "-x",
            "hip",
            "-c",
            str(root / src),
            "-o",
            str(obj),
            "-fPIC",
            "-O3",
            *flags,
            *incs,
            *(f"--offload-arch={a}" for a in archs),
        )
        steps.append(Step(f"hipcc {src}", argv, (str(root / src),), (str(obj),)))
    blockers = list(host.blockers(rocm_version))
    missing = [s for s in sources if not (root / s).is_file()]
    if missing:
        blockers.append(f"{missing[0]} is not rendered: run `ggml-vendor render` (and `sync`)")
    sizes = {a: warp_size(a) for a in archs}
    notes = tuple(
        f"{a}: compiled wave{size}; the shim's warp_size (hipDeviceProp.warpSize) must read {size}"
        for a, size in sizes.items()
    )
    requirements = (
        f"ROCm {rocm_version} with hipcc (HIP >= {facts.HIP_MIN_VERSION}) and hipBLAS headers",
        f"torch built for ROCm {rocm_version} (torch.version.hip)",
        "x86_64 Linux",
    )
    return RocmPlan(
        rocm_version=rocm_version,
        archs=archs,
        warp_sizes=sizes,
        flags=flags,
        include_dirs=tuple(str(d) for d in include_dirs),
        sources=tuple(sources),
        steps=tuple(steps),
        env={"PYTORCH_ROCM_ARCH": ";".join(archs)},
        requirements=requirements,
        blockers=tuple(blockers),
        notes=notes,
    )


def execute(p: RocmPlan, *, run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> list[Path]:
    """Run the hipcc steps; the objects on success (BuildError with the failing step's tail otherwise)."""
    if p.blockers:
        raise BuildError(f"cannot build the ROCm objects here: {p.blockers[0]}", "build on a ROCm machine")
    outs = []
    for step in p.steps:
        Path(step.outputs[0]).parent.mkdir(parents=True, exist_ok=True)
        res = run(list(step.argv), capture_output=True, text=True)
        if res.returncode != 0:
            tail = "\n".join((res.stdout + res.stderr).strip().splitlines()[-20:])
            raise BuildError(f"{step.name} failed (exit {res.returncode}): {tail}", "fix the error above")
        outs.append(Path(step.outputs[0]))
    return outs
