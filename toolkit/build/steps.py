"""The build plan: for each variant, which compile and link steps run, from which files, with which flags, and
where the result goes — a printable value computed from the rendered build.toml and the host facts.

Shape (issue 4, "Speed"): translation units of a `[kernel.*]` section that does not depend on torch are one
step per (toolkit, arch set, flags) and are shared by every torch variant; only the binding (`[torch] src`)
is compiled per torch environment, then one link per variant. Steps are deduplicated by their identity
(toolchain + command line), so cu130 and cu132 variants built with the same nvcc share objects too.

Nothing here runs a compiler. Command lines use project-relative paths (executors run them with the project
root as cwd) and the placeholders {out}, {dep} and {inputs}, filled by the executor.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from toolkit.build import rocm
from toolkit.build.binding_link import plan_binding, plan_glibc_compat, plan_libstdcxx_compat, plan_link
from toolkit.build.capabilities import gencode_flags, sort_archs, supported_capabilities
from toolkit.build.host_status import Status
from toolkit.build.inputs import HEADER_SUFFIXES, KernelSection, ProjectInputs
from toolkit.build.matrix import Variant
from toolkit.build.stepcontext import (
    Step,
    VariantCtx,
    macos_target,
    nvcc_host,
    obj_name,
    object_flags,
    step_id,
    tools_for,
)
from toolkit.core import ggml_facts as facts
from toolkit.core.records import fields_json

__all__ = ["BuildPlan", "KernelSection", "ProjectInputs", "VariantPlan", "make_plan", "plan_variant"]


@dataclass(frozen=True)
class VariantPlan:
    variant: Variant
    status: Status
    ops_id: str
    out_dir: str  # project-relative, build/<variant>
    steps: tuple[str, ...] = ()  # every step this variant needs (shared ones included)
    link: str | None = None  # step id of the final .so
    archs: tuple[str, ...] = ()  # metadata backend.archs: exactly what the steps compile
    notes: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.variant.name

    @property
    def so_name(self) -> str:
        return f"{self.ops_id}.abi3.so"


@dataclass(frozen=True)
class BuildPlan:
    project: ProjectInputs
    variants: tuple[VariantPlan, ...]
    steps: dict[str, Step] = field(default_factory=dict)
    toolchain: dict[str, Any] = field(default_factory=dict)  # the host C++ toolchain's exact identity (provenance)
    toolchains: dict[str, dict[str, Any]] = field(
        default_factory=dict
    )  # variant name -> its toolchain identity (cross builds differ)

    def buildable(self) -> tuple[VariantPlan, ...]:
        return tuple(v for v in self.variants if v.status.buildable and v.status.executor == "local")

    def steps_for(self, variants: tuple[VariantPlan, ...]) -> list[Step]:
        seen: dict[str, Step] = {}
        for v in variants:
            for sid in v.steps:
                seen.setdefault(sid, self.steps[sid])
        return list(seen.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "project": str(self.project.root),
            "id_uid": self.project.uid,
            "source_id": self.project.source_id,
            "toolchain": self.toolchain,
            "variants": [
                {
                    "name": v.name,
                    "status": v.status.label,
                    "reason": v.status.reason,
                    "executor": v.status.executor,
                    "id": v.ops_id,
                    "out_dir": v.out_dir,
                    "archs": list(v.archs),
                    "steps": list(v.steps),
                    "notes": list(v.notes),
                    "torch": v.status.env.version if v.status.env else None,
                    "toolkit": v.status.toolkit.full_version or v.status.toolkit.version if v.status.toolkit else None,
                }
                for v in self.variants
            ],
            "steps": {
                s.id: fields_json(s, "tool kind label argv runnable after", argv=list, after=list)
                for s in self.steps.values()
            },
        }


# --- planning ---------------------------------------------------------------------------------------------


def plan_variant(
    project: ProjectInputs,
    variant: Variant,
    status: Status,
    *,
    cxx: str | None = None,
    cxx_id: str = "",
    gen_include: str = "<gen>",
    ccbin: str | None = None,
) -> tuple[VariantPlan, list[Step]]:
    """The steps of one variant. Off-host variants get the same shape with symbolic tool paths and
    runnable=False, so --dry-run shows the whole matrix."""
    ops_id = project.ops_id(variant.backend)
    out_dir = f"{project.out_base}/{variant.name}"
    sections = project.sections(variant.backend)
    if not sections:
        reason = status.reason or f'build.toml has no [kernel.*] section with backend = "{variant.backend}"'
        return VariantPlan(variant, Status(False, reason), ops_id, out_dir), []
    ctx = VariantCtx(project, variant, status, tools_for(variant, status, cxx, cxx_id, gen_include), gen_include, ccbin)
    for sec in sections:
        failure = _plan_section(ctx, sec)
        if failure is not None:
            return VariantPlan(variant, failure, ops_id, out_dir), []
    bind_objs = plan_binding(ctx)
    plan_glibc_compat(ctx)
    plan_libstdcxx_compat(ctx)
    link_id = plan_link(ctx, tuple(ctx.objects + bind_objs))
    archs = ctx.archs
    arch_list = sort_archs(archs - {"metal"}) if variant.backend != "rocm" else tuple(sorted(archs))
    steps = tuple(s.id for s in ctx.steps)
    return VariantPlan(variant, status, ops_id, out_dir, steps, link_id, arch_list, tuple(ctx.notes)), ctx.steps


def _section_archs(ctx: VariantCtx, sec: KernelSection) -> tuple[tuple[str, ...], tuple[str, ...]] | Status:
    """(the section's targets, their compiler flags), or why the variant cannot be built."""
    tools, backend = ctx.tools, ctx.variant.backend
    if backend == "cuda":
        caps = supported_capabilities(sec.cuda_capabilities, tools.toolkit_archs)
        dropped = set(sec.cuda_capabilities) - set(caps)
        if dropped:
            ctx.notes.append(f"{sec.name}: {tools.toolkit_id} cannot target {', '.join(sort_archs(dropped))}")
        if not caps:
            return Status(
                False,
                f"[kernel.{sec.name}] cuda-capabilities {list(sec.cuda_capabilities)} has none that "
                f"{tools.toolkit_id} supports",
            )
        ctx.archs.update(caps)
        return caps, gencode_flags(caps)
    if backend == "rocm":
        caps = rocm.validate_archs(sec.rocm_archs)
        rocm.hip_flags(sec.hip_flags)  # refuses flags that change the wavefront size or the math
        ctx.notes += [
            f"{a} compiles wave{rocm.warp_size(a)}: the shim's warp_size must read it"
            for a in caps
            if a not in ctx.archs
        ]
        ctx.archs.update(caps)
        return caps, tuple(f"--offload-arch={a}" for a in caps)
    return (), ()


def _plan_section(ctx: VariantCtx, sec: KernelSection) -> Status | None:
    """The object steps of one [kernel.*] section (and its shader library on Metal); a Status when the
    variant cannot be built."""
    got = _section_archs(ctx, sec)
    if isinstance(got, Status):
        return got
    caps, arch_flags = got
    for src in sec.src:
        if src.endswith(HEADER_SUFFIXES) or (ctx.variant.backend == "metal" and src.endswith(".metal")):
            continue  # headers are read through includes; .metal files make the shader library below
        argv, tool, tc, label = _object_command(ctx, sec, src, caps, arch_flags)
        sid = step_id("obj", tc, argv)
        ctx.objects.append(ctx.add(sid, "compile", tool, label, argv, obj_name(src), tc, inputs=(src,)))
    if ctx.variant.backend == "metal":
        _plan_metallib(ctx, sec)
    return None


def _object_command(
    ctx: VariantCtx, sec: KernelSection, src: str, caps: tuple[str, ...], arch_flags: tuple[str, ...]
) -> tuple[tuple[str, ...], str, str, str]:
    """(argv, tool, toolchain identity, label) of one kernel source's object."""
    tools, backend = ctx.tools, ctx.variant.backend
    # A section that does not depend on torch compiles without torch: the same object serves every torch
    # version (the point of the split). One that does is compiled per torch environment.
    per_torch = sec.torch_dependent
    abi = (f"-D_GLIBCXX_USE_CXX11_ABI={int(tools.cxx11_abi)}",) if ctx.variant.os == "linux" else ()
    extra = (ctx.torch_side + abi) if per_torch else ()
    maps = ctx.maps
    sec_maps = maps.common + (maps.torch if per_torch else ())
    torch_tc = f" | {tools.torch_id}" if per_torch else ""
    incs = tuple(f"-I{d}" for d in sec.include)
    if src.endswith(".cu") and backend in ("cuda", "rocm"):
        tc = tools.toolkit_id + (f" | {tools.cxx_id}" if ctx.host_cc else "") + torch_tc + f" | {ctx.tool_tag}"
        if backend == "cuda":
            gpu_incs = tuple(f"-I{d}" for d in tools.extra_gpu_includes)
            head = (tools.compiler, *ctx.host_cc, "-c", src, *object_flags("-Xcompiler", "-fPIC"))
            argv = (*head, "-DCUDA_KERNEL", "-DUSE_CUDA=1", *incs, *gpu_incs, *extra, *sec.cuda_flags, *arch_flags)
            return (
                (*argv, *nvcc_host(sec_maps + maps.toolkit)),
                "nvcc",
                tc,
                f"nvcc {src} [{', '.join(sort_archs(caps))}]",
            )
        head = (tools.compiler, "-c", "-x", "hip", src, *object_flags(), *facts.HIP_DEFINES, "-DROCM_KERNEL")
        argv = (*head, "-DUSE_ROCM=1", *incs, *extra, *sec.hip_flags, *arch_flags, *sec_maps, *maps.toolkit)
        # An explicit -cuid: clang's default hashes the command line, which names the project's directory.
        return (*argv, rocm.cuid_flag(argv)), "hipcc", tc, f"hipcc {src} [{', '.join(caps)}]"
    objc = src.endswith((".mm", ".m"))
    lang = ("-x", "objective-c++", "-fobjc-arc") if objc else ()
    head = (tools.cxx, "-c", *lang, src, *object_flags(), f"-std={tools.cxx_standard}", *macos_target(backend))
    argv = (*head, *incs, *extra, *sec.cxx_flags, *sec_maps)
    tc = tools.cxx_id + torch_tc + f" | {ctx.tool_tag}"
    if backend == "metal" and objc:
        # The Metal host code embeds this build's shader library (named after the op id), so it is compiled
        # per id; docs/hub-contract.md §4.7.
        ops_id = ctx.ops_id
        argv += (
            f"-I{ctx.gen_include}/{ops_id}",
            f'-DEMBEDDED_METALLIB_HEADER="{ops_id}_metallib.h"',
            f"-DEMBEDDED_METALLIB_NAMESPACE={ops_id}_metal",
            *(() if per_torch else ctx.torch_side),
            "-DMETAL_KERNEL",
        )
        tc += f" | {tools.torch_id}"
    return argv, "c++", tc, f"c++ {src}"


def _plan_metallib(ctx: VariantCtx, sec: KernelSection) -> None:
    """.metal -> .air (one compile each) -> <id>.metallib -> <id>_metallib.h, which the host objects wait for."""
    airs = []
    for src in (s for s in sec.src if s.endswith(".metal")):
        argv = (
            *("xcrun", "-sdk", "macosx", "metal", f"-std={facts.METAL_STD}", "-O2"),
            f"-mmacosx-version-min={facts.METAL_MIN_MACOS}",
            *(f"-I{d}" for d in sec.include),
            *("-c", src, "-o", "{out}", "-MD", "-MF", "{dep}"),
        )
        sid = step_id("air", "<xcrun metal>", argv)
        airs.append(
            ctx.add(
                sid,
                "compile",
                "metal",
                f"metal {src}",
                argv,
                obj_name(src)[:-2] + ".air",
                "<xcrun metal>",
                inputs=(src,),
            )
        )
    if not airs:
        return
    ops_id = ctx.ops_id
    argv = ("xcrun", "-sdk", "macosx", "metallib", "{inputs}", "-o", "{out}")
    lib = step_id("metallib", "<xcrun metallib>", argv + tuple(airs))
    ctx.add(
        lib,
        "link",
        "metallib",
        f"metallib {ops_id}.metallib",
        argv,
        f"{ops_id}.metallib",
        "<xcrun metallib>",
        after=tuple(airs),
    )
    emb_argv = ("python", "-m", "toolkit.build.metal", "embed", "{inputs}", "{out}", f"{ops_id}_metal")
    emb = step_id("embed", ctx.tool_tag, emb_argv + (lib,))
    label = f"embed {ops_id}.metallib as bytes"
    ctx.add(emb, "embed", "python", label, emb_argv, f"{ops_id}_metallib.h", ctx.tool_tag, after=(lib,))
    ctx.notes.append(f"metallib compiled with -std={facts.METAL_STD}: loads on macOS >= {facts.METAL_MIN_MACOS} only")
    # host objects include the header: make them wait for it
    ctx.steps = [
        replace(s, after=s.after + (emb,)) if s.id in ctx.objects and s.tool == "c++" else s for s in ctx.steps
    ]
    ctx.archs.add("metal")


def make_plan(
    project: ProjectInputs,
    judged: list[tuple[Variant, Status]],
    *,
    cxx: str | None = None,
    cxx_id: str = "",
    gen_include: str = "<gen>",
    ccbin: str | None = None,
    toolchain: dict[str, Any] | None = None,
    cross: dict[str, tuple[str, str, str, dict[str, str]]] | None = None,
) -> BuildPlan:
    """The whole plan: one VariantPlan per variant (skipped ones keep their reason), steps deduplicated.
    `cxx`/`cxx_id` are the host C++ compiler and its identity; `ccbin` is nvcc's host compiler (None: nvcc's
    default); `toolchain` is recorded in each variant's provenance."""
    steps: dict[str, Step] = {}
    plans: list[VariantPlan] = []
    provenance: dict[str, dict[str, Any]] = {}
    for variant, status in judged:
        v_cxx, v_id, v_ccbin, v_info = cxx, cxx_id, ccbin, dict(toolchain or {})
        if cross and variant.cpu in cross:  # a cross build: the zig toolchain of the variant's CPU
            v_cxx, v_id, v_ccbin, v_info = cross[variant.cpu]
        vp, vsteps = plan_variant(
            project, variant, status, cxx=v_cxx, cxx_id=v_id, gen_include=gen_include, ccbin=v_ccbin
        )
        for s in vsteps:
            steps.setdefault(s.id, s)
        plans.append(vp)
        provenance[variant.name] = v_info
    return BuildPlan(project, tuple(plans), steps, dict(toolchain or {}), provenance)
