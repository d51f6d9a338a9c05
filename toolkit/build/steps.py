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

import glob
import hashlib
import os
from dataclasses import dataclass, field, replace
from typing import Any

from toolkit.build import rocm
from toolkit.build.capabilities import gencode_flags, sort_archs, supported_capabilities
from toolkit.build.geninclude import GLIBC_COMPAT_C, cublas_dir
from toolkit.build.host_status import Status
from toolkit.build.inputs import HEADER_SUFFIXES, KernelSection, ProjectInputs
from toolkit.build.matrix import Variant
from toolkit.core import ggml_facts as facts
from toolkit.core.records import fields_json

PY_LIMITED_API = "0x03090000"  # abi3 for CPython >= 3.9 (docs/hub-contract.md §5)


@dataclass(frozen=True)
class Step:
    """One compiler invocation. `id` is its identity: same toolchain and command line = same step."""

    id: str
    kind: str  # compile | link | embed
    tool: str  # nvcc | c++ | hipcc | metal | metallib | python
    label: str
    argv: tuple[str, ...]
    output: str  # artefact file name
    toolchain: str  # identity hashed into the cache key (compiler version, torch build, tool version)
    inputs: tuple[str, ...] = ()  # project-relative files whose content is hashed into the key
    after: tuple[str, ...] = ()  # step ids whose outputs feed this one ({inputs})
    runnable: bool = True  # False: planned for a toolchain this host does not have

    @property
    def compiles(self) -> bool:
        return self.tool != "python"


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


def _step_id(prefix: str, toolchain: str, argv: tuple[str, ...]) -> str:
    blob = "\0".join((toolchain, *argv)).encode()
    return f"{prefix}-{hashlib.sha256(blob).hexdigest()[:16]}"


def _obj_name(src: str) -> str:
    return src.replace("/", "__") + ".o"


@dataclass(frozen=True)
class _Tools:
    """Concrete or symbolic (off-host) tool locations for one variant."""

    compiler: str  # nvcc / hipcc
    toolkit_root: str
    toolkit_id: str
    toolkit_archs: tuple[str, ...]
    extra_gpu_includes: tuple[str, ...]
    cxx: str
    cxx_id: str
    torch_includes: tuple[str, ...]
    torch_lib: str
    python_include: str
    torch_id: str
    cxx_standard: str
    cxx11_abi: bool
    runnable: bool
    torch_dir: str = ""


def _tools_for(variant: Variant, status: Status, cxx: str | None, cxx_id: str, gen_include: str) -> _Tools:
    env, tk = status.env, status.toolkit
    runnable = status.buildable and status.executor == "local"
    major, minor = (int(x) for x in variant.torch.split("."))
    std = "c++20" if (major, minor) >= (2, 12) else "c++17"
    if env is not None and env.include_dirs:
        torch_includes, torch_lib, py_inc = env.include_dirs, env.lib_dir, env.python_include
        torch_id, std, abi = f"torch {env.version} @ {env.torch_dir}", env.cxx_standard, env.cxx11_abi
        torch_dir = env.torch_dir
    else:  # symbolic: what would be used once the environment exists
        t = f"<torch {variant.torch} {variant.compute}>"
        torch_includes = (f"{t}/include", f"{t}/include/torch/csrc/api/include")
        torch_lib, py_inc, torch_id, abi = f"{t}/lib", "<python>/include", t, True
        torch_dir = t
    extra: tuple[str, ...] = ()
    if tk is not None:
        compiler, root, tk_id, archs = tk.compiler, tk.root, f"{tk.backend} {tk.full_version or tk.version}", tk.archs
        if tk.cublas_headers:
            extra = (cublas_dir(gen_include, tk.cublas_headers),)
            tk_id += f" + cublas headers {tk.cublas_headers}"
    else:
        kind = {"cuda": "nvcc", "rocm": "hipcc"}.get(variant.backend, "xcrun")
        root = f"<{variant.backend} {variant.toolkit or ''}>".replace(" >", ">")
        compiler, tk_id, archs = f"{root}/bin/{kind}", root, ()
    if variant.backend == "metal":
        cxx, cxx_id = "clang++", "<xcode clang++>"
    return _Tools(
        compiler,
        root,
        tk_id,
        archs,
        extra,
        cxx or "c++",
        cxx_id,
        torch_includes,
        torch_lib,
        py_inc,
        torch_id,
        std,
        abi,
        runnable,
        torch_dir,
    )


def _binding_defines(backend: str, ops_id: str, abi: bool) -> tuple[str, ...]:
    per_backend = {
        "cuda": ("-DCUDA_KERNEL", "-DUSE_CUDA=1"),
        "rocm": ("-DROCM_KERNEL", "-DUSE_ROCM=1", "-D__HIP_PLATFORM_AMD__=1"),
        "metal": ("-DMETAL_KERNEL",),
        "cpu": ("-DCPU_KERNEL",),
    }[backend]
    abi_flag = () if backend == "metal" else (f"-D_GLIBCXX_USE_CXX11_ABI={int(abi)}",)
    return (f"-DTORCH_EXTENSION_NAME={ops_id}", f"-DPy_LIMITED_API={PY_LIMITED_API}", *per_backend, *abi_flag)


def _object_flags(*pic: str) -> tuple[str, ...]:
    """What every object compile passes: the output, its depfile (the cache records what it read), `pic`."""
    return ("-o", "{out}", "-MD", "-MF", "{dep}", *(pic or ("-fPIC",)), "-O3")


# Reproducible, path-free objects: every absolute prefix a compile reads from is mapped to a fixed name, so
# __FILE__ strings and debug info name no builder's paths (two clean builds of one tree at different paths
# are byte-identical). {tmp} is the step's scratch dir (its output and nvcc's tmpxft files), filled by the
# executor. Debug info stays in the cached objects; the shipped .so is stripped at the link.
def _prefix_maps(*pairs: tuple[str, str]) -> tuple[str, ...]:
    usable = {old: new for old, new in pairs if old and not old.startswith("<") and old != "/"}
    return tuple(f"-ffile-prefix-map={old}={new}" for old, new in usable.items())


@dataclass(frozen=True)
class _Maps:
    """The prefix maps per kind of step: a torch-independent object maps no torch path (so it stays shared
    by every torch variant), a C++ one no toolkit path (shared by every toolkit)."""

    common: tuple[str, ...]
    toolkit: tuple[str, ...]
    torch: tuple[str, ...]


def _maps_for(root: str, tools: _Tools, gen_include: str) -> _Maps:
    toolchain_dir = os.path.dirname(tools.cxx) if os.path.isabs(tools.cxx) else ""
    return _Maps(
        _prefix_maps(("{tmp}", "/out"), (gen_include, "/gen"), (toolchain_dir, "/toolchain"), (root, ".")),
        _prefix_maps((tools.toolkit_root, "/toolkit")),
        _prefix_maps((tools.torch_dir, "/torch"), (os.path.dirname(tools.python_include), "/python-include")),
    )


def _nvcc_host(flags: tuple[str, ...]) -> tuple[str, ...]:
    """Host-compiler flags through nvcc, one -Xcompiler each (nvcc splits its argument at commas)."""
    return tuple(a for f in flags for a in ("-Xcompiler", f))


def _macos_target(backend: str) -> tuple[str, ...]:
    return (f"-mmacosx-version-min={facts.METAL_MIN_MACOS}", "-arch", "arm64") if backend == "metal" else ()


@dataclass
class _Variant:
    """One variant's planning state while its steps are collected (plan_variant's helpers share it)."""

    project: ProjectInputs
    variant: Variant
    status: Status
    tools: _Tools
    gen_include: str
    ccbin: str | None
    steps: list[Step] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    archs: set[str] = field(default_factory=set)
    objects: list[str] = field(default_factory=list)

    @property
    def ops_id(self) -> str:
        return self.project.ops_id(self.variant.backend)

    @property
    def tool_tag(self) -> str:
        # The target system joins every step's identity: an aarch64 row never shares an x86_64 row's steps,
        # even where both are planned with the same placeholder tools (off-host rows).
        return f"ggml-vendor {self.project.tool_version} | {self.variant.system}"

    @property
    def host_cc(self) -> tuple[str, ...]:
        # nvcc's host compiler: the hermetic toolchain's wrapper when there is one (its identity joins the key).
        v = self.variant
        return ("-ccbin", self.ccbin) if self.ccbin and v.backend == "cuda" and v.os == "linux" else ()

    @property
    def torch_side(self) -> tuple[str, ...]:
        return tuple(f"-I{d}" for d in self.tools.torch_includes) + (f"-I{self.tools.python_include}",)

    @property
    def maps(self) -> _Maps:
        return _maps_for(str(self.project.root), self.tools, self.gen_include)

    def add(
        self,
        sid: str,
        kind: str,
        tool: str,
        label: str,
        argv: tuple[str, ...],
        output: str,
        tc: str,
        **kw: tuple[str, ...],
    ) -> str:
        self.steps.append(Step(sid, kind, tool, label, argv, output, tc, runnable=self.tools.runnable, **kw))
        return sid


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
    ctx = _Variant(project, variant, status, _tools_for(variant, status, cxx, cxx_id, gen_include), gen_include, ccbin)
    for sec in sections:
        failure = _plan_section(ctx, sec)
        if failure is not None:
            return VariantPlan(variant, failure, ops_id, out_dir), []
    bind_objs = _plan_binding(ctx)
    _plan_glibc_compat(ctx)
    link_id = _plan_link(ctx, tuple(ctx.objects + bind_objs))
    archs = ctx.archs
    arch_list = sort_archs(archs - {"metal"}) if variant.backend != "rocm" else tuple(sorted(archs))
    steps = tuple(s.id for s in ctx.steps)
    return VariantPlan(variant, status, ops_id, out_dir, steps, link_id, arch_list, tuple(ctx.notes)), ctx.steps


def _section_archs(ctx: _Variant, sec: KernelSection) -> tuple[tuple[str, ...], tuple[str, ...]] | Status:
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


def _plan_section(ctx: _Variant, sec: KernelSection) -> Status | None:
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
        sid = _step_id("obj", tc, argv)
        ctx.objects.append(ctx.add(sid, "compile", tool, label, argv, _obj_name(src), tc, inputs=(src,)))
    if ctx.variant.backend == "metal":
        _plan_metallib(ctx, sec)
    return None


def _object_command(
    ctx: _Variant, sec: KernelSection, src: str, caps: tuple[str, ...], arch_flags: tuple[str, ...]
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
            head = (tools.compiler, *ctx.host_cc, "-c", src, *_object_flags("-Xcompiler", "-fPIC"))
            argv = (*head, "-DCUDA_KERNEL", "-DUSE_CUDA=1", *incs, *gpu_incs, *extra, *sec.cuda_flags, *arch_flags)
            return (
                (*argv, *_nvcc_host(sec_maps + maps.toolkit)),
                "nvcc",
                tc,
                f"nvcc {src} [{', '.join(sort_archs(caps))}]",
            )
        head = (tools.compiler, "-c", "-x", "hip", src, *_object_flags(), *facts.HIP_DEFINES, "-DROCM_KERNEL")
        argv = (*head, "-DUSE_ROCM=1", *incs, *extra, *sec.hip_flags, *arch_flags, *sec_maps, *maps.toolkit)
        return argv, "hipcc", tc, f"hipcc {src} [{', '.join(caps)}]"
    objc = src.endswith((".mm", ".m"))
    lang = ("-x", "objective-c++", "-fobjc-arc") if objc else ()
    head = (tools.cxx, "-c", *lang, src, *_object_flags(), f"-std={tools.cxx_standard}", *_macos_target(backend))
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


def _plan_metallib(ctx: _Variant, sec: KernelSection) -> None:
    """.metal -> .air (one compile each) -> <id>.metallib -> <id>_metallib.h, which the host objects wait for."""
    airs = []
    for src in (s for s in sec.src if s.endswith(".metal")):
        argv = (
            *("xcrun", "-sdk", "macosx", "metal", f"-std={facts.METAL_STD}", "-O2"),
            f"-mmacosx-version-min={facts.METAL_MIN_MACOS}",
            *(f"-I{d}" for d in sec.include),
            *("-c", src, "-o", "{out}", "-MD", "-MF", "{dep}"),
        )
        sid = _step_id("air", "<xcrun metal>", argv)
        airs.append(
            ctx.add(
                sid,
                "compile",
                "metal",
                f"metal {src}",
                argv,
                _obj_name(src)[:-2] + ".air",
                "<xcrun metal>",
                inputs=(src,),
            )
        )
    if not airs:
        return
    ops_id = ctx.ops_id
    argv = ("xcrun", "-sdk", "macosx", "metallib", "{inputs}", "-o", "{out}")
    lib = _step_id("metallib", "<xcrun metallib>", argv + tuple(airs))
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
    emb = _step_id("embed", ctx.tool_tag, emb_argv + (lib,))
    label = f"embed {ops_id}.metallib as bytes"
    ctx.add(emb, "embed", "python", label, emb_argv, f"{ops_id}_metallib.h", ctx.tool_tag, after=(lib,))
    ctx.notes.append(f"metallib compiled with -std={facts.METAL_STD}: loads on macOS >= {facts.METAL_MIN_MACOS} only")
    # host objects include the header: make them wait for it
    ctx.steps = [
        replace(s, after=s.after + (emb,)) if s.id in ctx.objects and s.tool == "c++" else s for s in ctx.steps
    ]
    ctx.archs.add("metal")


# A stable-ABI variant compiles the binding's stable twin, rendered beside it (torch_binding.cpp ->
# torch_binding_stable.cpp), instead of the binding itself (docs/stable-abi.md).
STABLE_SUFFIX = "_stable"


def stable_source(src: str) -> str:
    stem, dot, ext = src.rpartition(".")
    return f"{stem}{STABLE_SUFFIX}.{ext}" if dot else src + STABLE_SUFFIX


def torch_target_version(torch: str) -> str:
    """TORCH_TARGET_VERSION for torch "2.10": torch/headeronly/version.h's encoding (major << 56 | minor << 48)."""
    major, minor = (int(x) for x in torch.split("."))
    return f"0x{(major << 56) | (minor << 48):016X}ULL"


def _plan_binding(ctx: _Variant) -> list[str]:
    """The binding: per torch environment, with the op id baked in."""
    tools, variant, project = ctx.tools, ctx.variant, ctx.project
    toolkit_inc = (f"-I{tools.toolkit_root}/include",) if variant.backend in ("cuda", "rocm") else ()
    maps = ctx.maps
    tc = f"{tools.cxx_id} | {tools.torch_id} | {tools.toolkit_id} | {ctx.tool_tag}"
    out: list[str] = []
    for src in (
        stable_source(s) if variant.stable else s for s in project.torch_src if not s.endswith(HEADER_SUFFIXES)
    ):
        argv = (
            *(tools.cxx, "-c", src, *_object_flags(), f"-std={tools.cxx_standard}", "-fvisibility=hidden"),
            *_macos_target(variant.backend),
            *(("-fno-gnu-unique",) if variant.os == "linux" else ()),
            *_binding_defines(variant.backend, ctx.ops_id, tools.cxx11_abi),
            *((f"-DTORCH_TARGET_VERSION={torch_target_version(variant.torch)}",) if variant.stable else ()),
            *(f"-I{d}" for d in project.torch_include),
            *ctx.torch_side,
            *toolkit_inc,
            *project.torch_cxx_flags,
            *maps.common,
            *maps.torch,
            *maps.toolkit,
        )
        label = f"c++ {src} (torch {'>= ' if variant.stable else ''}{variant.torch})"
        out.append(
            ctx.add(_step_id("bind", tc, argv), "compile", "c++", label, argv, _obj_name(src), tc, inputs=(src,))
        )
    return out


def _plan_glibc_compat(ctx: _Variant) -> None:
    """manylinux_2_28 allows glibc <= 2.28, but libstdc++ >= 11 headers reference __libc_single_threaded
    (glibc 2.32) when the host glibc has it. A hidden local definition (glibc_compat.c, fixed at 0 = "maybe
    multi-threaded": atomics always used, which is always correct) keeps that symbol out of the .so's
    imports. Torch-independent: compiled once per host compiler."""
    if ctx.variant.os != "linux" or ctx.variant.backend not in ("cuda", "rocm", "cpu"):
        return
    tools = ctx.tools
    argv: tuple[str, ...] = (
        tools.cxx,
        "-x",
        "c",
        "-c",
        f"{ctx.gen_include}/{GLIBC_COMPAT_C}",
        "-o",
        "{out}",
        "-fPIC",
        "-O2",
    )
    argv += ctx.maps.common
    tc = f"{tools.cxx_id} | {ctx.tool_tag}"
    label = "c glibc_compat.c (manylinux_2_28 symbol versions)"
    ctx.objects.append(ctx.add(_step_id("obj", tc, argv), "compile", "c++", label, argv, "glibc_compat.o", tc))


def _link_libs(ctx: _Variant) -> tuple[str, ...]:
    """Only the libraries kernel-builder links (not all of TORCH_LIBRARIES), no RPATH, so the extension
    reuses the copies torch already loaded (docs/hub-contract.md §4.6)."""
    tools, status, backend = ctx.tools, ctx.status, ctx.variant.backend
    if backend == "cuda":
        tk = status.toolkit
        cudart = cudart_link(tk.cudart_dir if tk and tk.cudart_dir else tools.toolkit_root)
        return ("-ltorch", "-ltorch_cpu", "-ltorch_cuda", "-lc10", "-lc10_cuda", *cudart)
    if backend == "rocm":
        return (
            "-ltorch",
            "-ltorch_cpu",
            "-ltorch_hip",
            "-lc10",
            "-lc10_hip",
            f"-L{tools.toolkit_root}/lib",
            "-lamdhip64",
        )
    if backend == "metal":
        frameworks = ("-framework", "Metal", "-framework", "Foundation", "-undefined", "dynamic_lookup")
        return (
            "-ltorch",
            "-ltorch_cpu",
            "-lc10",
            *frameworks,
            f"-mmacosx-version-min={facts.METAL_MIN_MACOS}",
            "-arch",
            "arm64",
        )
    return ("-ltorch", "-ltorch_cpu", "-lc10")


def _plan_link(ctx: _Variant, after: tuple[str, ...]) -> str:
    tools = ctx.tools
    # -s: what ships carries no debug info nor static symbol table (the builder's paths, nvcc's tmpxft
    # names); the cached objects keep their debug info. macOS's ld strips with -S/-x, done the same way.
    strip = ("-s",) if ctx.variant.os == "linux" else ("-Wl,-S", "-Wl,-x")
    argv = (tools.cxx, "-shared", "-o", "{out}", "{inputs}", f"-L{tools.torch_lib}", *_link_libs(ctx), *strip)
    tc = f"{tools.cxx_id} | {tools.torch_id} | {tools.toolkit_id} | {ctx.tool_tag}"
    so = f"{ctx.ops_id}.abi3.so"
    return ctx.add(_step_id("link", tc, argv + after), "link", "c++", f"link {so}", argv, so, tc, after=after)


def cudart_link(root: str) -> tuple[str, ...]:
    """How to link libcudart: `-L<lib> -lcudart` where the unversioned link exists (system toolkits, lib64/),
    else the versioned library by path (PyPI's cuda-toolkit ships only lib/libcudart.so.<major>). `root` is a
    toolkit root or (cross builds) a lib dir holding the target CPU's libcudart."""
    if not root.startswith("<"):
        for sub in ("lib64", "lib", "."):
            if os.path.exists(f"{root}/{sub}/libcudart.so"):
                return (f"-L{os.path.normpath(f'{root}/{sub}')}", "-lcudart")
        for sub in ("lib64", "lib", "."):
            found = sorted(glob.glob(f"{root}/{sub}/libcudart.so.[0-9]*"), key=len)
            if found:
                return (os.path.normpath(found[0]),)
    return (f"-L{root}/lib64", "-lcudart")


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
