"""What every planner of a variant's steps shares: the `Step` value, the variant's tools (concrete or symbolic),
the reproducibility prefix maps and `VariantCtx`, the planning state one variant's steps are collected into.

Split from toolkit/build/steps.py (which plans the kernel objects and assembles the plan) so that the binding,
glibc-compat and link steps (toolkit/build/binding_link.py) plan against the same context without a cycle.
Nothing here runs a compiler.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field

from toolkit.build.geninclude import cublas_dir
from toolkit.build.host_status import Status
from toolkit.build.inputs import ProjectInputs
from toolkit.build.matrix import Variant
from toolkit.build.torchenvs import cxx_standard
from toolkit.core import ggml_facts as facts


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


def step_id(prefix: str, toolchain: str, argv: tuple[str, ...]) -> str:
    blob = "\0".join((toolchain, *argv)).encode()
    return f"{prefix}-{hashlib.sha256(blob).hexdigest()[:16]}"


def obj_name(src: str) -> str:
    return src.replace("/", "__") + ".o"


@dataclass(frozen=True)
class Tools:
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


def tools_for(variant: Variant, status: Status, cxx: str | None, cxx_id: str, gen_include: str) -> Tools:
    env, tk = status.env, status.toolkit
    runnable = status.buildable and status.executor == "local"
    std = cxx_standard(variant.torch)
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
    return Tools(
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


def object_flags(*pic: str) -> tuple[str, ...]:
    """What every object compile passes: the output, its depfile (the cache records what it read), `pic`."""
    return ("-o", "{out}", "-MD", "-MF", "{dep}", *(pic or ("-fPIC",)), "-O3")


# Reproducible, path-free objects: every absolute prefix a compile reads from is mapped to a fixed name, so
# __FILE__ strings and debug info name no builder's paths (two clean builds of one tree at different paths
# are byte-identical). {tmp} is the step's scratch dir (its output and nvcc's tmpxft files), filled by the
# executor. Debug info stays in the cached objects; the shipped .so is stripped at the link.
def prefix_maps(*pairs: tuple[str, str]) -> tuple[str, ...]:
    usable = {old: new for old, new in pairs if old and not old.startswith("<") and old != "/"}
    return tuple(f"-ffile-prefix-map={old}={new}" for old, new in usable.items())


@dataclass(frozen=True)
class Maps:
    """The prefix maps per kind of step: a torch-independent object maps no torch path (so it stays shared
    by every torch variant), a C++ one no toolkit path (shared by every toolkit)."""

    common: tuple[str, ...]
    toolkit: tuple[str, ...]
    torch: tuple[str, ...]


def maps_for(root: str, tools: Tools, gen_include: str) -> Maps:
    toolchain_dir = os.path.dirname(tools.cxx) if os.path.isabs(tools.cxx) else ""
    return Maps(
        prefix_maps(("{tmp}", "/out"), (gen_include, "/gen"), (toolchain_dir, "/toolchain"), (root, ".")),
        prefix_maps((tools.toolkit_root, "/toolkit")),
        prefix_maps((tools.torch_dir, "/torch"), (os.path.dirname(tools.python_include), "/python-include")),
    )


def nvcc_host(flags: tuple[str, ...]) -> tuple[str, ...]:
    """Host-compiler flags through nvcc, one -Xcompiler each (nvcc splits its argument at commas)."""
    return tuple(a for f in flags for a in ("-Xcompiler", f))


def macos_target(backend: str) -> tuple[str, ...]:
    return (f"-mmacosx-version-min={facts.METAL_MIN_MACOS}", "-arch", "arm64") if backend == "metal" else ()


@dataclass
class VariantCtx:
    """One variant's planning state while its steps are collected (plan_variant's helpers share it)."""

    project: ProjectInputs
    variant: Variant
    status: Status
    tools: Tools
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
    def maps(self) -> Maps:
        return maps_for(str(self.project.root), self.tools, self.gen_include)

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
