"""What is true of ggml's source tree for every package built from it, written once (docs/upstream.md §1-§8).

Layouts, include roots, always-shipped files, compiler flags, the CUDA runtime shim, the Metal build and
ROCm rules live here; what belongs to one package's ops (kernel names, function constants, head dims,
kargs layouts, their fingerprints) lives in that package's facts file beside its templates
(templates/<name>/facts.py), loaded with toolkit.core.package_facts. Templates see both as
one `facts` namespace. Facts that can drift between pins are listed in FINGERPRINTS (here the shared
ones, in a package's facts its own) so that `sync` notices when they move.
"""

from __future__ import annotations

from dataclasses import dataclass

# --- Layouts (docs/upstream.md §0.1) ----------------------------------------------------------------
# llama.cpp carries ggml under ggml/; the standalone ggml repository has it at the root. Paths in config,
# in vendor/ and in the lock are always in the standalone layout (relative to the ggml root).
LAYOUT_LLAMA_CPP = "llama.cpp"
LAYOUT_GGML = "ggml"
LAYOUT_PREFIX = {LAYOUT_LLAMA_CPP: "ggml/", LAYOUT_GGML: ""}
# A file whose presence identifies each layout (checked in this order).
LAYOUT_MARKERS = (
    (LAYOUT_LLAMA_CPP, "ggml/include/ggml.h"),
    (LAYOUT_GGML, "include/ggml.h"),
)
# Where vendored files land: vendor/<VENDOR_SUBDIR>/<standalone-layout path>.
VENDOR_SUBDIR = "ggml"

# --- Include closure (docs/upstream.md §0.2, §1.5, §2.2) -------------------------------------------
# ggml's CMake include path; quoted includes are resolved relative to the including file first.
INCLUDE_ROOTS = ("include", "src", "src/ggml-cuda", "src/ggml-metal")
FOLLOWED_SUFFIXES = (".c", ".cpp", ".h", ".hpp", ".cu", ".cuh", ".m", ".mm", ".metal")
# Files that always travel, whatever the ops (MIT requires the notice to travel with the code, §6);
# sync refuses a revision without them. OPTIONAL_SHIP travels when present (§8.5: AUTHORS is customary).
# LLAMA_CPP_SYNC_FILE names the llama.cpp commit a ggml pin was synced from (§0.1, §7); sync records its
# content in the lock (llama-cpp-commit) as provenance instead of vendoring the file.
ALWAYS_SHIP = ("LICENSE",)
OPTIONAL_SHIP = ("AUTHORS",)
LLAMA_CPP_SYNC_FILE = "scripts/sync-llama.last"
# Its twin in llama.cpp (at the repository root): the last ggml commit synced into llama.cpp.
GGML_SYNC_FILE = "scripts/sync-ggml.last"
# In the llama.cpp layout these live at the repository root, not under ggml/ (looked up there second).
ROOT_FALLBACK = ("LICENSE", "AUTHORS", GGML_SYNC_FILE)
# Quoted includes that may legitimately be absent from the tree (behind an #if that our builds never
# take); sync skips them instead of failing. None are needed at d99724f2: every quoted include of the
# four closures resolves (the vendors/{hip,musa}.h branches exist and travel, as §8.1 lists them).
OPTIONAL_QUOTED_INCLUDES: tuple[str, ...] = ()
# What the license inventory recognises, as (SPDX id, text that implies it).
LICENSE_TEXT_MARKERS = (
    ("MIT", "Permission is hereby granted, free of charge, to any person obtaining a copy"),
    ("MIT", "MIT licensed"),
)

# --- CUDA build (docs/upstream.md §1.7, §8.1-8.2) --------------------------------------------------
# torch.utils.cpp_extension adds -D__CUDA_NO_HALF*; ggml's common.cuh needs those operators back.
CUDA_FLAGS = (
    "-std=c++17",
    "-use_fast_math",
    "-U__CUDA_NO_HALF_OPERATORS__",
    "-U__CUDA_NO_HALF_CONVERSIONS__",
    "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-U__CUDA_NO_HALF2_OPERATORS__",
    "-Xcompiler=-fvisibility=hidden",
)
HIP_DEFINES = ("-DGGML_USE_HIP",)

# --- CUDA runtime shim (docs/upstream.md §1.6, §8.1) ------------------------------------------------
# ggml_cuda_device_info fields the shim fills, by name, from cudaDeviceProp (§1.6: the struct changed 4
# times in a year, so never positionally). HIP's cc is computed from gcnArchName in the shim itself.
CUDA_DEVICE_INFO_FIELDS = (
    ("cc", "100 * prop.major + 10 * prop.minor"),
    ("nsm", "prop.multiProcessorCount"),
    ("smpb", "prop.sharedMemPerBlock"),
    ("smpbo", "prop.sharedMemPerBlockOptin"),
    ("warp_size", "prop.warpSize"),
)
# Symbols upstream code references but does not define (whole-file strategy, §1.6 / §8.1).
SHIM_SYMBOLS_CXX = ("ggml_cuda_info", "ggml_cuda_get_device", "ggml_cuda_set_device", "ggml_cuda_error")
SHIM_SYMBOLS_C = ("ggml_abort", "ggml_is_contiguous", "ggml_is_contiguous_rows", "ggml_are_same_stride")

# --- Metal build (docs/upstream.md §4.4, §8.3-8.4, docs/hub-contract.md §4.7) ---------------------------
# bf16 Metal instances exist only under GGML_METAL_HAS_BF16, which kernel-builder cannot pass to the Metal
# compiler, so a package's Metal translation unit defines METAL_DEFINES before #including vendored entries.
METAL_DEFINES = ("GGML_METAL_HAS_BF16",)
# The two source layouts (§8.3): the monolith up to the snapshot, per-op files after llama.cpp #26561.
METAL_MONOLITH = "src/ggml-metal/ggml-metal.metal"
METAL_SPLIT_DIR = "src/ggml-metal/kernels/"
METAL_IMPL_HEADER = "src/ggml-metal/ggml-metal-impl.h"
# Offline compile (docs/hub-contract.md §4.7, kernel-builder's compile-metal.cmake): one .air per entry .metal,
# linked into one metallib embedded in the extension as bytes. Include roots are relative to vendor/ggml.
METAL_STD = "metal4.0"
METAL_OPT = "-O2"
METAL_MIN_MACOS = "26.0"  # Metal 4 libraries do not load on older macOS (kernels' _METAL_MIN_MACOS_VERSION)
CPU_MIN_MACOS = "15.0"  # what kernel-builder's CPU darwin builds target (the ABI check's default)
METAL_INCLUDE_ROOTS = ("src", "src/ggml-metal")
# Must stay undefined for an offline compile: EMBED_LIBRARY swaps the ggml-common.h include for a sed
# marker; HAS_TENSOR pulls in <metal_tensor> and MetalPerformancePrimitives.
METAL_UNDEFINED_MACROS = ("GGML_METAL_EMBED_LIBRARY", "GGML_METAL_HAS_TENSOR")

# --- ROCm / HIP (docs/upstream.md §5, docs/hub-contract.md §4.8) -----------------------------------------
# The CUDA sources build as HIP with GGML_USE_HIP (vendors/hip.h maps the cuda* names). torch's HIP
# extension flags add -D__HIP_NO_HALF_OPERATORS__/-CONVERSIONS__, which ggml's half arithmetic needs
# undone (the HIP twin of the -U__CUDA_NO_HALF* above). No fast-math: upstream HIP builds IEEE-conformant
# since 2026-08-12 (reassociation flipped argmax on RDNA3.5).
HIP_FLAGS = (
    "-std=c++17",
    *HIP_DEFINES,
    "-U__HIP_NO_HALF_OPERATORS__",
    "-U__HIP_NO_HALF_CONVERSIONS__",
    "-fvisibility=hidden",
)
# Flags that would change the compiled wavefront size away from the arch default; never passed, because
# the shim's warp_size has to equal ggml_cuda_get_physical_warp_size() of the compiled code.
HIP_FORBIDDEN_FLAGS = ("-mwavefrontsize64", "-mno-wavefrontsize64", "-ffast-math", "-funsafe-math-optimizations")
# kernel-builder's HIP arch list (docs/hub-contract.md §4.6); build.toml rocm-archs is intersected with it.
ROCM_ARCHS = ("gfx906", "gfx908", "gfx90a", "gfx942", "gfx950", "gfx1030", "gfx1100", "gfx1101", "gfx1200", "gfx1201")
# ggml_cuda_get_physical_warp_size() (common.cuh): 64 under __GFX9__/__GFX8__ (GCN, CDNA), else 32 (RDNA
# compiles wave32 by default). Keyed by arch-name prefix, checked in order.
HIP_WARP_SIZE_BY_PREFIX = (("gfx8", 64), ("gfx9", 64), ("gfx10", 32), ("gfx11", 32), ("gfx12", 32))
HIP_MIN_VERSION = "6.1"  # src/ggml-hip/CMakeLists.txt


# --- Fingerprinted regions (docs/upstream.md §8) ---------------------------------------------------
@dataclass(frozen=True)
class Fingerprint:
    """A region our bindings depend on, in `path` (standalone layout): it ends at the first line matching
    `end` and starts at the last line matching `start` before that (so a generic `start` such as
    `typedef struct {` picks the struct that `end` names). Both are regexes."""

    name: str
    path: str
    start: str
    end: str


# Shared regions (the CUDA runtime shim's); each package's facts file adds those of its ops.
FINGERPRINTS: tuple[Fingerprint, ...] = (
    Fingerprint("cuda device info struct", "src/ggml-cuda/common.cuh", r"struct ggml_cuda_device_info \{", r"^\};"),
    Fingerprint(
        "cuda init_fastdiv_values", "src/ggml-cuda/common.cuh", r"static const uint3 init_fastdiv_values\(", r"^\}\s*$"
    ),
)


# --- Behaviour fingerprints (docs/upstream.md §4.1, §8.5; issue 11) ---------------------------------
# The functions an op's semantics live in: the kernels we compile and ggml-cpu's reference implementation
# (ggml's own statement of the op, read from git objects at the pin and never vendored). sync hashes each
# one's declaration and body separately (toolkit.sync.behaviour); a body that moves with an unchanged
# declaration is the silent kind of change (state transpose 2026-03-13, snapshot order 2026-06-10).
CPU_OPS_SOURCE = "src/ggml-cpu/ops.cpp"


@dataclass(frozen=True)
class Behaviour:
    op: str
    backend: str  # "cuda", "metal" or "cpu" (the reference, always read)
    role: str  # what the function is, for reports
    paths: tuple[str, ...]  # standalone-layout files to look in, first hit wins (pre-/post-split Metal)
    function: str

    @property
    def key(self) -> str:
        return f"{self.op}: {self.role} {self.function}"


# --- kernel-builder's conventions that the rendered package shares with the build --------------------------
# The token in torch-ext/<module>/_ops.py (kernel-builder's _ops.py.in) that the build replaces with the
# variant's op namespace `_<module>_<backend>_<uid>` (CMake configure_file style).
OPS_NAME_PLACEHOLDER = "@OPS_NAME@"
