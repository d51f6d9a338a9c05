"""The rendered Metal sources: golden files, structure, the kargs layout they hand to the kernels, and an
Objective-C++ syntax check.

Nothing here builds the Metal binary (no macOS, no Xcode): that is said by the skipped test at the end.
What runs:
* golden files for every rendered Metal source and the metal [kernel.*] section, for the pre-split
  (ggml-metal.metal) and post-split (ggml-metal/kernels/*.metal) layouts. Regenerate with
  GGML_VENDOR_UPDATE_GOLDEN=1 after an intended template change, and review the diff;
* the dispatch header compiled with g++ against ggml-metal-impl.h headers of both generations (the
  post-split one adds `nb_out`), checking every kargs field offset against the package facts;
* clang++ -fsyntax-only over the three .mm files in Objective-C++ mode (with and without ARC) against the
  real torch headers and minimal stand-ins for Foundation/Metal/dispatch that declare exactly the Apple
  API the files use.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

from tests.helpers import metallib_fixture
from tests.helpers.fixture_repos import RENDER_PYPROJECT
from tests.helpers.machine import metal_blockers, real_upstream_export
from toolkit.build import metal
from toolkit.core import config as config_mod
from toolkit.core import package_facts
from toolkit.core.lock import Lock
from toolkit.render import stage as render

# The first package's op facts over ggml's shared ones (templates/facts.py), as render sees them.
FACTS = package_facts.load(Path(__file__).resolve().parents[2] / "templates" / "ggml-attn-kernels", "ggml-attn-kernels")

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden" / "metal"
UPDATE = os.environ.get("GGML_VENDOR_UPDATE_GOLDEN") == "1"

PYPROJECT = RENDER_PYPROJECT.replace("{archs}", '"8.0", "9.0"')

PKG = "ggml-attn-kernels"  # the lock keys are "<package>:<op>"
MONO = "src/ggml-metal/ggml-metal.metal"
IMPL = "src/ggml-metal/ggml-metal-impl.h"


def _lock(kind: str) -> Lock:
    if kind == "pre-split":
        entries = {
            f"{PKG}:{op}": {"cuda": (c,), "metal": (MONO,)}
            for op, c in (
                ("gated_delta_net", "src/ggml-cuda/gated_delta_net.cu"),
                ("flash_attn", "src/ggml-cuda/fattn-vec.cuh"),
                ("ssm_conv", "src/ggml-cuda/ssm-conv.cu"),
            )
        }
        closures = {op: {"metal": (MONO, IMPL, "src/ggml-common.h")} for op in entries}
        return Lock(
            upstream="https://github.com/ggml-org/ggml",
            layout="ggml",
            commit="d99724f2b141fed9e1a9f402213506c081433465",
            rev="master",
            date="2026-08-21T15:39:22+03:00",
            subject="readme : update following llama.cpp style (#1599)",
            tool_version="0.1.0",
            files={},
            entries=entries,
            closures=closures,
        )
    gdn, fa = "src/ggml-metal/kernels/gated_delta_net.metal", "src/ggml-metal/kernels/fa.metal"
    common = "src/ggml-metal/kernels/common.h"
    conv = "src/ggml-metal/kernels/ssm_conv.metal"
    return Lock(
        upstream="https://github.com/ggml-org/llama.cpp",
        layout="llama.cpp",
        commit="1" * 40,
        rev="master",
        date="2026-09-20T00:00:00+00:00",
        subject="post-split fixture",
        tool_version="0.1.0",
        files={},
        entries={
            f"{PKG}:gated_delta_net": {"cuda": ("src/ggml-cuda/gated_delta_net.cu",), "metal": (gdn,)},
            f"{PKG}:flash_attn": {"cuda": ("src/ggml-cuda/fattn-vec.cuh",), "metal": (fa,)},
            f"{PKG}:ssm_conv": {"cuda": ("src/ggml-cuda/ssm-conv.cu",), "metal": (conv,)},
        },
        closures={
            f"{PKG}:gated_delta_net": {"metal": (gdn, common, IMPL)},
            f"{PKG}:flash_attn": {
                "metal": (fa, common, "src/ggml-metal/kernels/dequantize.h", IMPL, "src/ggml-common.h")
            },
            f"{PKG}:ssm_conv": {"metal": (conv, common, IMPL)},
        },
    )


def rendered(tmp_path: Path, kind: str, backends: str = '"cuda", "metal", "rocm"') -> dict[str, str]:
    proj = tmp_path / f"proj-{kind}"
    proj.mkdir(exist_ok=True)
    (proj / "pyproject.toml").write_text(PYPROJECT.format(backends=backends))
    if not (proj / "templates").exists():
        shutil.copytree(REPO / "templates", proj / "templates")
    cfg = config_mod.load(proj)
    plan = render.plan(cfg, _lock(kind), read_vendor_lock=False)  # also validates build.toml with kernels
    return {f.path: f.content for f in plan.files}


def metal_section(build_toml: str) -> str:
    start = build_toml.index("# Metal:")
    end = build_toml.find("\n\n", start)
    return build_toml[start:] if end < 0 else build_toml[start : end + 1]


# Only these outputs depend on the upstream Metal layout and have golden files per layout; every other
# rendered Metal file must equal, for both layouts, what this repository's own render of it is.
LAYOUT_DEPENDENT = ("csrc/metal/ggml_metal_kernels.metal", "build.toml.metal-section")


def _golden_rel(kind: str, path: str) -> str:
    return f"{kind}/{path}"


def _repository_render() -> dict[str, str]:
    """This repository's first package as `ggml-vendor render` writes it (its lock's layout, its backends)."""
    return {f.path: f.content for f in render.plan(config_mod.load(REPO)).files}


def _golden(kind: str, path_in_project: str, text: str) -> None:
    if path_in_project not in LAYOUT_DEPENDENT:
        expected, rel = _repository_render()[path_in_project], f"the repository's render of {path_in_project}"
    else:
        path = GOLDEN / _golden_rel(kind, path_in_project)
        if UPDATE:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            return
        assert path.is_file(), f"no golden file {path}: run with GGML_VENDOR_UPDATE_GOLDEN=1 and review it"
        expected, rel = path.read_text(), path.relative_to(REPO).as_posix()
    if text != expected:
        import difflib

        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True), rel, "rendered", n=2))
        pytest.fail(
            f"rendered {path_in_project} ({kind}) differs from {rel} (GGML_VENDOR_UPDATE_GOLDEN=1 to accept a golden "
            f"file, `ggml-vendor render` for a committed source):\n{diff[:6000]}"
        )


@pytest.mark.parametrize("kind", ["pre-split", "post-split"])
def test_rendered_metal_sources_match_golden(tmp_path: Path, kind: str) -> None:
    files = rendered(tmp_path, kind)
    ours = {p: t for p, t in files.items() if p.startswith("csrc/metal/")}
    templates = sorted(
        p.relative_to(REPO / "templates" / "ggml-attn-kernels").as_posix()[:-3]
        for p in (REPO / "templates" / "ggml-attn-kernels" / "csrc" / "metal").glob("*.j2")
    )
    assert sorted(ours) == templates  # every Metal template renders, and nothing else lands in csrc/metal
    for path, text in ours.items():
        _golden(kind, path, text)
    _golden(kind, "build.toml.metal-section", metal_section(files["build.toml"]))
    if UPDATE:
        pytest.skip(f"golden files for {kind} regenerated under {GOLDEN}; review the diff")


def test_golden_directory_has_no_stale_files() -> None:
    expected = {_golden_rel(kind, path) for kind in ("pre-split", "post-split") for path in LAYOUT_DEPENDENT}
    present = {p.relative_to(GOLDEN).as_posix() for p in GOLDEN.rglob("*") if p.is_file()}
    assert present == expected


def test_translation_unit_includes_the_layouts_entries(tmp_path: Path) -> None:
    pre = rendered(tmp_path, "pre-split")["csrc/metal/ggml_metal_kernels.metal"]
    post = rendered(tmp_path, "post-split")["csrc/metal/ggml_metal_kernels.metal"]
    inc = re.compile(r'^#include "([^"]+)"', re.M)
    assert inc.findall(pre) == ["ggml-metal.metal"]  # one include although both ops use it
    assert inc.findall(post) == ["kernels/gated_delta_net.metal", "kernels/fa.metal", "kernels/ssm_conv.metal"]
    for text in (pre, post):
        defines = re.findall(r"^#define (\w+)", text, re.M)
        assert defines == list(FACTS.METAL_DEFINES)
        assert not set(defines) & set(FACTS.METAL_UNDEFINED_MACROS)


def test_metal_section_compiles_one_unit_and_tracks_vendored_headers(tmp_path: Path) -> None:
    import tomlkit

    for kind in ("pre-split", "post-split"):
        doc = tomlkit.parse(rendered(tmp_path, kind)["build.toml"]).unwrap()
        sec = doc["kernel"]["ggml_metal"]
        assert sec["backend"] == "metal" and sec["depends"] == ["torch"]
        assert [s for s in sec["src"] if s.endswith(".metal")] == ["csrc/metal/ggml_metal_kernels.metal"]
        assert {s for s in sec["src"] if s.endswith(".mm")} == set(FACTS.METAL_HOST_SOURCES)
        vendor = "../../../vendor/ggml/"  # from build/<name>/src
        assert sec["include"] == [f"{vendor}src", f"{vendor}src/ggml-metal", "csrc/metal"]
        vendored = [s for s in sec["src"] if s.startswith(vendor)]
        assert vendored == [vendor + h for h in metal.metal_sources(_lock(kind)).headers]


def test_no_metal_sources_without_the_metal_backend(tmp_path: Path) -> None:
    files = rendered(tmp_path, "pre-split", backends='"cuda"')
    assert not any(p.startswith("csrc/metal/") for p in files)
    assert 'backend = "metal"' not in files["build.toml"]


def test_every_metal_entry_point_in_torch_binding_h_is_defined_once(tmp_path: Path) -> None:
    """The binding declares the kMPS implementations; our .mm files must define each with that signature."""
    files = rendered(tmp_path, "pre-split")
    header = files["torch-ext/torch_binding.h"]
    block = header[header.index("\n#if defined(METAL_KERNEL)\n") + 1 :]
    block = block[: block.index("#endif")]

    def norm(s: str) -> str:
        return re.sub(r"\s+", " ", s).replace("( ", "(").replace(" )", ")").strip()

    decls = [norm(d) for d in re.findall(r"^([^#/\n][^;]*?\([^;]*?\));", block, re.M | re.S)]
    assert len(decls) == 5
    mm = "\n".join(t for p, t in files.items() if p.endswith(".mm"))
    for decl in decls:
        found = re.search(r"(\w+)\(", decl)
        assert found, decl
        name = found.group(1)
        defs = [norm(m) for m in re.findall(rf"^[^\n/]*\b{name}\([^{{;]*\)\s*\{{", mm, re.M | re.S)]
        assert len(defs) == 1, f"{name}: defined {len(defs)} times in csrc/metal/*.mm"
        assert norm(defs[0][:-1]) == decl, f"{name}: definition does not match torch_binding.h"


# --- the kargs and dispatch header under g++ -----------------------------------------------------------

_SIZES = {"int32_t": 4, "float": 4, "uint64_t": 8}


def facts_offsets(fields: Iterable[tuple[str, str]]) -> list[tuple[str, int]]:
    """C layout of a struct of these scalar fields (natural alignment), which Metal's constant address
    space uses for these types too."""
    off, out = 0, []
    for name, ctype in fields:
        size = _SIZES[ctype]
        off = (off + size - 1) // size * size
        out.append((name, off))
        off += size
    return out


def impl_header(post_split: bool) -> str:
    """A ggml-metal-impl.h carrying exactly the facts (and `nb_out` for the post-split generation)."""
    lines = [
        "#pragma once",
        "#include <cstdint>",
        f"#define FC_FLASH_ATTN_EXT_PAD {FACTS.FC_FLASH_ATTN_EXT_PAD}",
        f"#define FC_FLASH_ATTN_EXT_VEC {FACTS.FC_FLASH_ATTN_EXT_VEC}",
        f"#define FC_FLASH_ATTN_EXT_VEC_REDUCE {FACTS.FC_FLASH_ATTN_EXT_VEC_REDUCE}",
        f"#define FC_GATED_DELTA_NET {FACTS.FC_GATED_DELTA_NET}",
        "#define OP_FLASH_ATTN_EXT_VEC_NQPSG 1",
        f"#define OP_FLASH_ATTN_EXT_VEC_NCPSG {FACTS.METAL_FA_VEC_NCPSG}",
    ]
    for struct, fields in FACTS.METAL_KARGS.items():
        body = [f"    {t} {n};" for n, t in fields]
        if post_split and struct == "ggml_metal_kargs_gated_delta_net":
            body.insert(27, "    uint64_t nb_out;")  # after ns22: position does not matter, names do
        lines += ["typedef struct {", *body, f"}} {struct};"]
    return "\n".join(lines) + "\n"


DRIVER = r"""
#include "ggml_metal_dispatch.h"
#include <cstddef>
#include <cstdio>
using namespace ggml_vendor_metal;
#define OFF(s, f) std::printf("%s.%s %zu\n", #s, #f, offsetof(s, f));
int main() {
@OFFSETS@
    std::printf("has_nb_out %d\n", (int) gdn_has_state_out);
    std::printf("sizeof_gdn %zu\n", sizeof(ggml_metal_kargs_gated_delta_net));
    Tensor q{{128, 8, 3, 2}, {4, 512, 4096, 12288}};
    Tensor g{{1, 8, 3, 2}, {4, 4, 32, 96}};
    Dispatch d = gated_delta_net(q, q, q, g, gdn_dst(128, 8, 3, 2, 1), 1);
    std::printf("gdn_nbuf %zu\ngdn_last %d\ngdn_args %zu\n", d.buffers.size(), d.buffers.back().index, d.args.size());
    std::printf("supported %d,%d,%d,%d\n", (int) gdn_supported(128), (int) gdn_supported(96),
                (int) fa_vec_supported(1, 576, 512), (int) fa_vec_supported(20, 128, 128));
    return 0;
}
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not on PATH")
@pytest.mark.parametrize("post_split", [False, True], ids=["pre-split kargs", "post-split kargs (nb_out)"])
def test_dispatch_header_kargs_layout(tmp_path: Path, post_split: bool) -> None:
    files = rendered(tmp_path, "pre-split")
    gen = tmp_path / "gen"
    gen.mkdir()
    (gen / "ggml_metal_dispatch.h").write_text(files["csrc/metal/ggml_metal_dispatch.h"])
    (gen / "ggml-metal-impl.h").write_text(impl_header(post_split))
    offsets = "\n".join(f"    OFF({s}, {n})" for s, fields in FACTS.METAL_KARGS.items() for n, _ in fields)
    (gen / "drv.cpp").write_text(DRIVER.replace("@OFFSETS@", offsets))
    exe = tmp_path / "drv"
    cc = subprocess.run(
        [
            "g++",
            "-std=c++17",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-Wno-unused-parameter",
            f"-I{gen}",
            str(gen / "drv.cpp"),
            "-o",
            str(exe),
        ],
        capture_output=True,
        text=True,
    )
    assert cc.returncode == 0, cc.stderr[-3000:]
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    got = dict(line.rsplit(" ", 1) for line in out)
    for struct, fields in FACTS.METAL_KARGS.items():
        if post_split and struct == "ggml_metal_kargs_gated_delta_net":
            continue  # nb_out shifts the tail; the names are what we set
        for name, off in facts_offsets(fields):
            assert int(got[f"{struct}.{name}"]) == off, f"{struct}.{name}"
    assert got["has_nb_out"] == ("1" if post_split else "0")
    assert (got["gdn_nbuf"], got["gdn_last"]) == (("8", "8") if post_split else ("7", "7"))  # state_out at 8
    assert int(got["gdn_args"]) == int(got["sizeof_gdn"])
    assert got["supported"] == "1,0,1,0"


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not on PATH")
def test_dispatch_header_compiles_against_the_bundled_mini_upstream(tmp_path: Path) -> None:
    """The demo's miniature upstream (toolkit/data/mini-upstream) carries enough of ggml-metal-impl.h."""
    impl = REPO / "toolkit" / "data" / "mini-upstream" / "src" / "ggml-metal" / "ggml-metal-impl.h"
    if not impl.is_file():
        pytest.skip("no bundled mini-upstream Metal header")
    files = rendered(tmp_path, "pre-split")
    (tmp_path / "ggml_metal_dispatch.h").write_text(files["csrc/metal/ggml_metal_dispatch.h"])
    src = tmp_path / "t.cpp"
    src.write_text('#include <cstdint>\n#include "ggml_metal_dispatch.h"\nint main() { return 0; }\n')
    cc = subprocess.run(
        ["g++", "-std=c++17", "-fsyntax-only", f"-I{tmp_path}", f"-I{impl.parent}", str(src)],
        capture_output=True,
        text=True,
    )
    assert cc.returncode == 0, cc.stderr[-3000:]


# --- Objective-C++ syntax ----------------------------------------------------------------------------------

# Declarations of the Apple API the .mm files call, spelled as Apple's SDK headers spell them; anything the
# files use that is not here (or is misspelled there) fails the check.
STUB_FOUNDATION = r"""
#pragma once
#include <dispatch/dispatch.h>
typedef unsigned long NSUInteger;
typedef long NSInteger;
typedef signed char BOOL;
#define nil nullptr
@interface NSObject
+ (instancetype)alloc;
+ (instancetype)new;
- (instancetype)init;
- (instancetype)retain;
- (oneway void)release;
@end
@interface NSString : NSObject
+ (instancetype)stringWithUTF8String:(const char *)s;
- (const char *)UTF8String;
@end
@interface NSError : NSObject
@property (readonly, copy) NSString * localizedDescription;
@end
@interface NSURL : NSObject
+ (NSURL *)fileURLWithPath:(NSString *)path;
@end
"""

STUB_DISPATCH = r"""
#pragma once
#include <cstddef>
@protocol OS_dispatch_queue @end
@protocol OS_dispatch_data @end
typedef id<OS_dispatch_queue> dispatch_queue_t;
typedef id<OS_dispatch_data> dispatch_data_t;
typedef void (^dispatch_block_t)(void);
extern "C" void dispatch_sync(dispatch_queue_t queue, dispatch_block_t block);
extern "C" dispatch_data_t dispatch_data_create(const void * buffer, size_t size, dispatch_queue_t queue,
                                               dispatch_block_t destructor);
#define DISPATCH_DATA_DESTRUCTOR_DEFAULT NULL
#if !__has_feature(objc_arc)
extern "C" void dispatch_release(id object);
#endif
"""

STUB_METAL = r"""
#pragma once
#import <Foundation/Foundation.h>
typedef enum MTLDataType : NSUInteger { MTLDataTypeInt = 29, MTLDataTypeShort = 37, MTLDataTypeBool = 53 } MTLDataType;
typedef struct { NSUInteger width, height, depth; } MTLSize;
static inline MTLSize MTLSizeMake(NSUInteger w, NSUInteger h, NSUInteger d) { MTLSize s = {w, h, d}; return s; }
@protocol MTLDevice;
@protocol MTLFunction @end
@interface MTLFunctionConstantValues : NSObject
- (void)setConstantValue:(const void *)value type:(MTLDataType)type atIndex:(NSUInteger)index;
@end
@protocol MTLComputePipelineState
@property (readonly) NSUInteger maxTotalThreadsPerThreadgroup;
@property (readonly) NSUInteger threadExecutionWidth;
@end
@protocol MTLLibrary
- (id<MTLFunction>)newFunctionWithName:(NSString *)functionName;
- (id<MTLFunction>)newFunctionWithName:(NSString *)name constantValues:(MTLFunctionConstantValues *)constantValues
                                 error:(__autoreleasing NSError **)error;
@end
@protocol MTLBuffer
@property (readonly) id<MTLDevice> device;
@end
@protocol MTLComputeCommandEncoder
- (void)setComputePipelineState:(id<MTLComputePipelineState>)state;
- (void)setBytes:(const void *)bytes length:(NSUInteger)length atIndex:(NSUInteger)index;
- (void)setBuffer:(id<MTLBuffer>)buffer offset:(NSUInteger)offset atIndex:(NSUInteger)index;
- (void)setThreadgroupMemoryLength:(NSUInteger)length atIndex:(NSUInteger)index;
- (void)dispatchThreadgroups:(MTLSize)threadgroupsPerGrid threadsPerThreadgroup:(MTLSize)threadsPerThreadgroup;
- (void)endEncoding;
@end
@protocol MTLCommandBuffer
- (id<MTLComputeCommandEncoder>)computeCommandEncoder;
@end
@protocol MTLDevice
@property (readonly) NSUInteger maxThreadgroupMemoryLength;
- (id<MTLLibrary>)newLibraryWithURL:(NSURL *)url error:(__autoreleasing NSError **)error;
- (id<MTLLibrary>)newLibraryWithData:(dispatch_data_t)data error:(__autoreleasing NSError **)error;
- (id<MTLComputePipelineState>)newComputePipelineStateWithFunction:(id<MTLFunction>)computeFunction
                                                            error:(__autoreleasing NSError **)error;
@end
"""


def _torch_includes() -> list[str] | None:
    try:
        import torch.utils.cpp_extension as ext
    except ImportError:
        return None
    return ext.include_paths()


@pytest.mark.skipif(shutil.which("clang++") is None, reason="clang++ is not on PATH: Objective-C++ syntax not checked")
@pytest.mark.parametrize("arc", [True, False], ids=["arc", "no-arc"])
def test_objective_cxx_sources_parse(tmp_path: Path, arc: bool) -> None:
    torch_inc = _torch_includes()
    if torch_inc is None:
        pytest.skip("torch is not installed: its headers are needed to parse the .mm files")
    files = rendered(tmp_path, "pre-split")
    root = tmp_path / "tree"
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    stubs = tmp_path / "sdk"
    for rel, text in (
        ("Foundation/Foundation.h", STUB_FOUNDATION),
        ("Metal/Metal.h", STUB_METAL),
        ("dispatch/dispatch.h", STUB_DISPATCH),
    ):
        (stubs / rel).parent.mkdir(parents=True, exist_ok=True)
        (stubs / rel).write_text(text)
    impl = stubs / "ggml-metal-impl.h"
    impl.write_text(impl_header(post_split=False))
    gen = tmp_path / "gen"
    metal_lib = metallib_fixture.build_fixture(["kernel_probe"])
    gen.mkdir()
    (gen / "t_metallib.h").write_text(metal.header_source(metal_lib, "t_metal"))
    common = [
        "clang++",
        "-fsyntax-only",
        "-x",
        "objective-c++",
        "-std=c++20",
        "-fblocks",
        "-fobjc-runtime=macosx-13.0",
        "-fobjc-arc" if arc else "-fno-objc-arc",
        "-Wno-nullability-completeness",
        "-DMETAL_KERNEL",
        '-DEMBEDDED_METALLIB_HEADER="t_metallib.h"',
        "-DEMBEDDED_METALLIB_NAMESPACE=t_metal",
        f"-I{stubs}",
        f"-I{gen}",
        f"-I{root / 'csrc/metal'}",
        *(f"-I{d}" for d in torch_inc),
    ]
    # Without ARC only the runtime differs (its release calls); parsing ATen is slow, so check that one.
    sources = FACTS.METAL_HOST_SOURCES if arc else ("csrc/metal/ggml_metal_runtime.mm",)
    procs = {mm: subprocess.Popen([*common, str(root / mm)], stderr=subprocess.PIPE, text=True) for mm in sources}
    for mm, proc in procs.items():
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"{mm} ({'ARC' if arc else 'no ARC'}):\n{err[-6000:]}"


@pytest.mark.skipif(
    sys.platform != "darwin",
    reason="the Metal binary is built only on macOS with Xcode 26: not "
    "built on this host (the sources above are checked by golden files, g++ and clang -fsyntax-only)",
)
def test_metal_binary_built_on_macos() -> None:  # pragma: no cover - needs a Mac
    host = metal.probe_host()
    assert not metal_blockers(host), metal_blockers(host)


@pytest.mark.real_upstream
@pytest.mark.skipif(shutil.which("clang") is None and shutil.which("cpp") is None, reason="no C preprocessor on PATH")
def test_translation_unit_preprocesses_against_the_real_monolith(tmp_path: Path) -> None:
    """Our Metal translation unit, preprocessed with the include roots the build passes and the real vendored
    snapshot: every #include resolves, ggml-common.h is read directly (GGML_METAL_EMBED_LIBRARY undefined),
    <metal_tensor> stays out (GGML_METAL_HAS_TENSOR undefined), and the bf16 kernels are instantiated."""
    tree = real_upstream_export(tmp_path / "ggml", "src")
    if not (tree / MONO).is_file():
        pytest.skip(f"{tree} is not a pre-split tree (no {MONO})")
    unit = tmp_path / "ggml_metal_kernels.metal"
    unit.write_text(rendered(tmp_path, "pre-split")["csrc/metal/ggml_metal_kernels.metal"])
    sysinc = tmp_path / "metal-sdk"  # the Metal standard library is not here: empty stand-ins
    sysinc.mkdir()
    for name in ("metal_stdlib", "metal_tensor"):
        (sysinc / name).write_text(f"// stand-in for <{name}>\n")
    cpp = ["clang", "-E", "-P", "-x", "c++"] if shutil.which("clang") else ["cpp", "-P", "-x", "c++"]
    res = subprocess.run(
        [
            *cpp,
            "-D__METAL_VERSION__=400",
            f"-I{tree / 'src'}",
            f"-I{tree / 'src/ggml-metal'}",
            "-isystem",
            str(sysinc),
            "-H",
            str(unit),
        ],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    included = [line.lstrip(". ").strip() for line in res.stderr.splitlines() if line.startswith(".")]
    assert any(p.endswith("ggml-metal/ggml-metal.metal") for p in included)
    assert any(p.endswith("src/ggml-common.h") for p in included)
    assert not any(p.endswith("metal_tensor") for p in included)
    assert "__embed_ggml-common.h__" not in res.stdout
    names = set(re.findall(r'host_name\("([A-Za-z0-9_]+)"\)', res.stdout))
    needed = set(metal.required_kernels(["gated_delta_net", "flash_attn"], FACTS)) - {
        "kernel_flash_attn_ext_vec_reduce",
        "kernel_flash_attn_ext_pad",
    }
    assert needed <= names, sorted(needed - names)[:5]
    assert re.search(r"kernel void kernel_flash_attn_ext_vec_reduce\(", res.stdout)
