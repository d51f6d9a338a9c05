"""The per-torch end of a variant's plan: the binding compile (with its op id and, for a stable-ABI variant, its
stable twin), the glibc-compat object that keeps manylinux_2_28 symbol versions, and the final link of the .so
with the libraries kernel-builder links.

Split from toolkit/build/steps.py, which plans the torch-independent kernel objects and calls these last.
Nothing here runs a compiler.
"""

from __future__ import annotations

import glob
import os

from toolkit.build.geninclude import GLIBC_COMPAT_C, LIBSTDCXX_COMPAT_CPP
from toolkit.build.inputs import HEADER_SUFFIXES
from toolkit.build.stepcontext import VariantCtx, macos_target, obj_name, object_flags, step_id
from toolkit.build.torchenvs import cxx_standard
from toolkit.core import ggml_facts as facts

PY_LIMITED_API = "0x03090000"  # abi3 for CPython >= 3.9 (docs/hub-contract.md §5)


def _binding_defines(backend: str, ops_id: str, abi: bool) -> tuple[str, ...]:
    per_backend = {
        "cuda": ("-DCUDA_KERNEL", "-DUSE_CUDA=1"),
        "rocm": ("-DROCM_KERNEL", "-DUSE_ROCM=1", "-D__HIP_PLATFORM_AMD__=1"),
        "metal": ("-DMETAL_KERNEL",),
        "cpu": ("-DCPU_KERNEL",),
    }[backend]
    abi_flag = () if backend == "metal" else (f"-D_GLIBCXX_USE_CXX11_ABI={int(abi)}",)
    return (f"-DTORCH_EXTENSION_NAME={ops_id}", f"-DPy_LIMITED_API={PY_LIMITED_API}", *per_backend, *abi_flag)


STABLE_SUFFIX = "_stable"


def stable_source(src: str) -> str:
    stem, dot, ext = src.rpartition(".")
    return f"{stem}{STABLE_SUFFIX}.{ext}" if dot else src + STABLE_SUFFIX


def torch_target_version(torch: str) -> str:
    """TORCH_TARGET_VERSION for torch "2.10": torch/headeronly/version.h's encoding (major << 56 | minor << 48)."""
    major, minor = (int(x) for x in torch.split("."))
    return f"0x{(major << 56) | (minor << 48):016X}ULL"


def plan_binding(ctx: VariantCtx) -> list[str]:
    """The binding: per torch environment, with the op id baked in."""
    tools, variant, project = ctx.tools, ctx.variant, ctx.project
    toolkit_inc = (f"-I{tools.toolkit_root}/include",) if variant.backend in ("cuda", "rocm") else ()
    maps = ctx.maps
    tc = f"{tools.cxx_id} | {tools.torch_id} | {tools.toolkit_id} | {ctx.tool_tag}"
    out: list[str] = []
    # A stable binding compiles as for its floor torch (C++17 below 2.12), whatever torch lends the headers: in
    # C++20 mode torch's header-only error messages would call libstdc++'s rvalue str() (GLIBCXX_3.4.29), which
    # no manylinux_2_28 system has and no torch is bound to export.
    std = cxx_standard(variant.torch) if variant.stable else tools.cxx_standard
    for src in (
        stable_source(s) if variant.stable else s for s in project.torch_src if not s.endswith(HEADER_SUFFIXES)
    ):
        argv = (
            *(tools.cxx, "-c", src, *object_flags(), f"-std={std}", "-fvisibility=hidden"),
            *macos_target(variant.backend),
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
        out.append(ctx.add(step_id("bind", tc, argv), "compile", "c++", label, argv, obj_name(src), tc, inputs=(src,)))
    return out


def plan_glibc_compat(ctx: VariantCtx) -> None:
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
    ctx.objects.append(ctx.add(step_id("obj", tc, argv), "compile", "c++", label, argv, "glibc_compat.o", tc))


def plan_libstdcxx_compat(ctx: VariantCtx) -> None:
    """A stable-ABI variant's own copies of the libstdc++ members newer than manylinux_2_28's that torch's
    header-only stable API instantiates (geninclude.LIBSTDCXX_COMPAT says which and why)."""
    if not ctx.variant.stable or ctx.variant.os != "linux" or ctx.variant.backend not in ("cuda", "rocm", "cpu"):
        return
    tools = ctx.tools
    argv: tuple[str, ...] = (
        *(tools.cxx, "-c", f"{ctx.gen_include}/{LIBSTDCXX_COMPAT_CPP}", "-o", "{out}", "-fPIC", "-O2"),
        *(f"-std={cxx_standard(ctx.variant.torch)}", f"-D_GLIBCXX_USE_CXX11_ABI={int(tools.cxx11_abi)}"),
        *ctx.maps.common,
    )
    tc = f"{tools.cxx_id} | {ctx.tool_tag}"
    label = "c++ libstdcxx_compat.cpp (manylinux_2_28 libstdc++ for the stable ABI)"
    ctx.objects.append(ctx.add(step_id("obj", tc, argv), "compile", "c++", label, argv, "libstdcxx_compat.o", tc))


def _link_libs(ctx: VariantCtx) -> tuple[str, ...]:
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


def plan_link(ctx: VariantCtx, after: tuple[str, ...]) -> str:
    tools = ctx.tools
    # -s: what ships carries no debug info nor static symbol table (the builder's paths, nvcc's tmpxft
    # names); the cached objects keep their debug info. macOS's ld strips with -S/-x, done the same way.
    strip = ("-s",) if ctx.variant.os == "linux" else ("-Wl,-S", "-Wl,-x")
    argv = (tools.cxx, "-shared", "-o", "{out}", "{inputs}", f"-L{tools.torch_lib}", *_link_libs(ctx), *strip)
    tc = f"{tools.cxx_id} | {tools.torch_id} | {tools.toolkit_id} | {ctx.tool_tag}"
    so = f"{ctx.ops_id}.abi3.so"
    return ctx.add(step_id("link", tc, argv + after), "link", "c++", f"link {so}", argv, so, tc, after=after)


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
