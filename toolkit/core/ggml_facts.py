"""Every fact about ggml's source tree that our code depends on, written once (docs/upstream.md §1-§8).

Templates and stages read these; nothing else hard-codes upstream paths, names, indices or flags. Facts
that can drift between pins are also listed in FINGERPRINTS so that `sync` notices when they move.
Sections are owned by the stage that needs them; keep each fact next to its source reference.
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
# Head dims instantiated upstream.
GDN_CUDA_HEAD_DIMS = (16, 32, 64, 128)
GDN_METAL_HEAD_DIMS = (32, 64, 128)
FA_VEC_CUDA_HEAD_DIMS = (64, 128, 256)
FATTN_KQ_STRIDE = 256  # ggml only runs the vector kernel on KV padded to this (§3.1)

# --- CUDA bindings (render; docs/upstream.md §1.1-1.6, §3.1, §8.1-8.2) ------------------------------
# Our translation units: each #includes one upstream entry exactly once (its ggml_cuda_op_* wrappers are
# non-static, so a second inclusion would be an ODR violation) and exposes extern "C" launchers.
CUDA_TU_FOR_OP = {"gated_delta_net": "gdn_kernels", "flash_attn": "fa_vec_kernels"}
CUDA_SHIM_TU = "ggml_shim"
# Our own kernel (no upstream source): the transformers layers' input preparation before gated_delta_net.
CUDA_PREP_TU = "gdn_prep"
# Upstream host helpers our launchers call (static, reachable because we include the file).
GDN_CUDA_LAUNCHER = "launch_gated_delta_net"  # template <bool KDA, bool keep_rs_t>
GDN_CUDA_KERNEL = "gated_delta_net_cuda"  # template <int S_v, bool KDA, bool keep_rs_t>
FA_VEC_CUDA_KERNEL = "flash_attn_ext_vec"  # template <int D, int ncols, type_K, type_V, bool softcap>
FA_VEC_CUDA_COMBINE = "flash_attn_combine_results"  # template <int D>
FA_VEC_CUDA_NTHREADS_HOST = "ggml_cuda_fattn_vec_get_nthreads_host"
# Query columns per block: ggml uses 1 for a single query and 2 otherwise (fattn-vec.cuh).
FA_VEC_CUDA_NCOLS = (1, 2)
# K/V element types we instantiate (torch dtype name -> ggml_type); K and V must share one.
FA_VEC_CUDA_KV_TYPES = (("float16", "GGML_TYPE_F16"), ("bfloat16", "GGML_TYPE_BF16"))
# The vector kernel is ggml's decode path; ggml-metal takes it for ne01 < 20 queries (ggml-metal-ops.cpp
# ggml_metal_op_flash_attn_ext_use_vec). Both backends answer supports_flash_attn with the same bound.
FA_VEC_MAX_QUERIES = 19
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

# --- Metal (docs/upstream.md §2, §3.2, §8.3-8.4) ---------------------------------------------------
FC_GATED_DELTA_NET = 1600
FC_FLASH_ATTN_EXT_VEC = 400
FC_FLASH_ATTN_EXT_VEC_REDUCE = 500
FC_FLASH_ATTN_EXT_PAD = 100
GDN_METAL_KERNEL = "kernel_gated_delta_net_f32_{nsg}"
FA_VEC_METAL_KERNEL = "kernel_flash_attn_ext_vec_{t}_dk{dk}_dv{dv}"
FA_VEC_REDUCE_METAL_KERNEL = "kernel_flash_attn_ext_vec_reduce"
FA_PAD_METAL_KERNEL = "kernel_flash_attn_ext_pad"

# --- Metal host port and metallib build (docs/upstream.md §2.1-2.2, §3.2, §4.2, §4.4, §8.3-8.4) ------
# Read from ggml-metal-device.cpp / -ops.cpp / -device.m at d99724f2. The rendered csrc/metal code uses
# the vendored ggml-metal-impl.h macros (FC_*, OP_FLASH_ATTN_EXT_VEC_*) and structs directly; these
# copies exist so that tests and `sync` can check that the vendored header still says the same thing.
# Function constants: name -> (offset from the op's FC base, MTLDataType the host sets).
METAL_FC_GDN = {"ne20": (0, "short"), "ne30": (1, "short"), "K": (2, "short")}
METAL_FC_FA_VEC = {
    "has_mask": (0, "bool"),
    "has_sinks": (1, "bool"),
    "has_bias": (2, "bool"),
    "has_scap": (3, "bool"),
    "has_kvpad": (4, "bool"),
    "ns10": (20, "int"),
    "ns20": (21, "int"),
    "nsg": (22, "int"),
    "nwg": (23, "int"),
}
METAL_FC_FA_VEC_REDUCE = {"DV": (0, "int"), "NWG": (1, "int")}
METAL_FC_FA_PAD = {"has_mask": (0, "bool"), "ncpsg": (25, "int")}
# Pipeline cache keys, exactly as ggml names its pipelines (snprintf formats in ggml-metal-device.cpp).
METAL_KEY_GDN = "{base}_ne20={ne20}_ne30={ne30}_K={K}"
METAL_KEY_FA_VEC = (
    "{base}_mask={has_mask}_sink={has_sinks}_bias={has_bias}_scap={has_scap}_kvpad={has_kvpad}"
    "_ns10={ns10}_ns20={ns20}_nsg={nsg}_nwg={nwg}"
)
METAL_KEY_FA_VEC_REDUCE = "{base}_dv={dv}_nwg={nwg}"
METAL_KEY_FA_PAD = "{base}_mask={has_mask}_ncpsg={ncpsg}"
# kargs structs as (field, C type), in declaration order (ggml-metal-impl.h at d99724f2). The post-split
# gated_delta_net kargs gain `nb_out` (§4.2); the rendered code sets fields by name and detects nb_out
# at compile time, so both layouts build from one source.
METAL_KARGS = {
    "ggml_metal_kargs_gated_delta_net": tuple(
        [(f"ne0{i}", "int32_t") for i in range(4)]
        + [(f"nb0{i}", "uint64_t") for i in range(4)]
        + [(f"ne1{i}", "int32_t") for i in range(4)]
        + [(f"nb1{i}", "uint64_t") for i in range(4)]
        + [(f"ne2{i}", "int32_t") for i in range(4)]
        + [(f"nb2{i}", "uint64_t") for i in range(4)]
        + [("ns02", "int32_t"), ("ns12", "int32_t"), ("ns22", "int32_t")]
        + [(f"ne{i}", "int32_t") for i in range(4)]
        + [(f"nb{i}", "uint64_t") for i in range(4)]
    ),
    "ggml_metal_kargs_flash_attn_ext_vec": (
        ("ne01", "int32_t"),
        ("ne02", "int32_t"),
        ("ne03", "int32_t"),
        ("nb01", "uint64_t"),
        ("nb02", "uint64_t"),
        ("nb03", "uint64_t"),
        ("ne11", "int32_t"),
        ("ne_12_2", "int32_t"),
        ("ne_12_3", "int32_t"),
        ("ns10", "int32_t"),
        ("nb11", "uint64_t"),
        ("nb12", "uint64_t"),
        ("nb13", "uint64_t"),
        ("ns20", "int32_t"),
        ("nb21", "uint64_t"),
        ("nb22", "uint64_t"),
        ("nb23", "uint64_t"),
        ("ne31", "int32_t"),
        ("ne32", "int32_t"),
        ("ne33", "int32_t"),
        ("nb31", "uint64_t"),
        ("nb32", "uint64_t"),
        ("nb33", "uint64_t"),
        ("ne1", "int32_t"),
        ("ne2", "int32_t"),
        ("ne3", "int32_t"),
        ("scale", "float"),
        ("max_bias", "float"),
        ("m0", "float"),
        ("m1", "float"),
        ("n_head_log2", "int32_t"),
        ("logit_softcap", "float"),
    ),
    "ggml_metal_kargs_flash_attn_ext_vec_reduce": (("nrows", "int32_t"),),
    "ggml_metal_kargs_flash_attn_ext_pad": (
        ("ne11", "int32_t"),
        ("ne_12_2", "int32_t"),
        ("ne_12_3", "int32_t"),
        ("nb11", "uint64_t"),
        ("nb12", "uint64_t"),
        ("nb13", "uint64_t"),
        ("nb21", "uint64_t"),
        ("nb22", "uint64_t"),
        ("nb23", "uint64_t"),
        ("ne31", "int32_t"),
        ("ne32", "int32_t"),
        ("ne33", "int32_t"),
        ("nb31", "uint64_t"),
        ("nb32", "uint64_t"),
        ("nb33", "uint64_t"),
    ),
}
# Dispatch rules (ggml-metal-ops.cpp): GDN runs (S_v/nsg, H, B) threadgroups of (32, nsg, 1), nsg = S_v/32;
# FA-vec is taken for n_q < 20 and DK % 32 == 0, nwg fixed at 32, nsg doubles from 1 while
# 2*nwg*nsg*NCPSG < n_kv and nsg < 4; the pad kernel runs first when n_kv % NCPSG != 0.
METAL_GDN_LANES = 32
METAL_FA_VEC_MAX_NQ = 20  # exclusive
METAL_FA_VEC_NWG = 32
METAL_FA_VEC_MAX_NSG = 4
METAL_FA_VEC_NCPSG = 32  # OP_FLASH_ATTN_EXT_VEC_NCPSG
# (DK, DV) pairs with a kernel_flash_attn_ext_vec_<t>_dk<DK>_dv<DV> instance, and the KV types we bind.
# bf16 instances exist only under GGML_METAL_HAS_BF16, which kernel-builder cannot pass to the Metal
# compiler, so our one Metal translation unit (csrc/metal/ggml_metal_kernels.metal) defines it before
# #including the vendored entries (METAL_DEFINES).
METAL_FA_VEC_HEAD_DIMS = (
    (32, 32),
    (64, 64),
    (96, 96),
    (128, 128),
    (192, 128),
    (192, 192),
    (256, 256),
    (320, 256),
    (512, 512),
    (576, 512),
)
METAL_FA_VEC_KV_TYPES = ("f16", "f32", "bf16")
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


FINGERPRINTS: tuple[Fingerprint, ...] = (
    Fingerprint(
        "gdn-cuda kernel signature",
        "src/ggml-cuda/gated_delta_net.cu",
        r"^template\s*<int S_v, bool KDA",
        r"\)\s*\{\s*$",
    ),
    Fingerprint(
        "gdn-cuda launcher signature",
        "src/ggml-cuda/gated_delta_net.cu",
        r"static void launch_gated_delta_net",
        r"\)\s*\{\s*$",
    ),
    Fingerprint("gdn-cuda head-dim switch", "src/ggml-cuda/gated_delta_net.cu", r"switch \(S_v\)", r"GGML_ABORT"),
    Fingerprint(
        "fa-vec-cuda nthreads",
        "src/ggml-cuda/fattn-vec.cuh",
        r"static int ggml_cuda_fattn_vec_get_nthreads_host",
        r"^\}",
    ),
    Fingerprint(
        "fa-vec-cuda fattn_kernel_t",
        "src/ggml-cuda/fattn-common.cuh",
        r"typedef void \(\* ?fattn_kernel_t\)",
        r"\);\s*$",
    ),
    Fingerprint(
        "fa-vec-cuda kernel signature",
        "src/ggml-cuda/fattn-vec.cuh",
        r"^template\s*<int D, int ncols, ggml_type type_K",
        r"\)\s*\{\s*$",
    ),
    Fingerprint(
        "fa-vec-cuda combine signature",
        "src/ggml-cuda/fattn-common.cuh",
        r"static __global__ void flash_attn_combine_results\(",
        r"\)\s*\{\s*$",
    ),
    Fingerprint("cuda device info struct", "src/ggml-cuda/common.cuh", r"struct ggml_cuda_device_info \{", r"^\};"),
    Fingerprint(
        "metal gdn kargs",
        "src/ggml-metal/ggml-metal-impl.h",
        r"typedef struct \{",
        r"\} ggml_metal_kargs_gated_delta_net;",
    ),
    Fingerprint(
        "metal fa-vec kargs",
        "src/ggml-metal/ggml-metal-impl.h",
        r"typedef struct \{",
        r"\} ggml_metal_kargs_flash_attn_ext_vec;",
    ),
    Fingerprint(
        "metal function-constant bases",
        "src/ggml-metal/ggml-metal-impl.h",
        r"#define FC_FLASH_ATTN_EXT_PAD",
        r"#define FC_GATED_DELTA_NET",
    ),
    # Added with sync (issue 2), from the §8 fingerprint lists; checked against d99724f2.
    Fingerprint(
        "cuda init_fastdiv_values", "src/ggml-cuda/common.cuh", r"static const uint3 init_fastdiv_values\(", r"^\}\s*$"
    ),
    Fingerprint(
        "fa-vec-cuda FATTN_KQ_STRIDE",
        "src/ggml-cuda/fattn-common.cuh",
        r"#define FATTN_KQ_STRIDE\b",
        r"#define FATTN_KQ_STRIDE\b",
    ),
    Fingerprint(
        "ggml_gated_delta_net declaration",
        "include/ggml.h",
        r"GGML_API struct ggml_tensor \* ggml_gated_delta_net\(",
        r"\);\s*$",
    ),
    Fingerprint(
        "metal gdn function constants",
        "src/ggml-metal/ggml-metal.metal",
        r"constant short FC_gated_delta_net_ne20\b",
        r"FC_gated_delta_net_K\b",
    ),
    Fingerprint(
        "metal fa-vec function constants",
        "src/ggml-metal/ggml-metal.metal",
        r"constant bool FC_flash_attn_ext_vec_has_mask\b",
        r"FC_flash_attn_ext_vec_nwg\b",
    ),
    Fingerprint(
        "metal gdn host names",
        "src/ggml-metal/ggml-metal.metal",
        r"host_name\(\"kernel_gated_delta_net_f32_1\"\)",
        r"host_name\(\"kernel_gated_delta_net_f32_4\"\)",
    ),
    Fingerprint(
        "metal fa-vec tuning constants",
        "src/ggml-metal/ggml-metal-impl.h",
        r"#define OP_FLASH_ATTN_EXT_VEC_NQPSG",
        r"#define OP_FLASH_ATTN_EXT_VEC_NCPSG",
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


BEHAVIOUR: tuple[Behaviour, ...] = (
    Behaviour("gated_delta_net", "cuda", "cuda kernel", ("src/ggml-cuda/gated_delta_net.cu",), GDN_CUDA_KERNEL),
    Behaviour("gated_delta_net", "cuda", "cuda launcher", ("src/ggml-cuda/gated_delta_net.cu",), GDN_CUDA_LAUNCHER),
    Behaviour(
        "gated_delta_net",
        "metal",
        "metal kernel",
        (METAL_SPLIT_DIR + "gated_delta_net.metal", METAL_MONOLITH),
        "kernel_gated_delta_net_impl",
    ),
    Behaviour(
        "gated_delta_net", "cpu", "cpu reference", (CPU_OPS_SOURCE,), "ggml_compute_forward_gated_delta_net_one_chunk"
    ),
    Behaviour("flash_attn", "cuda", "cuda kernel", ("src/ggml-cuda/fattn-vec.cuh",), FA_VEC_CUDA_KERNEL),
    Behaviour("flash_attn", "cuda", "cuda combine kernel", ("src/ggml-cuda/fattn-common.cuh",), FA_VEC_CUDA_COMBINE),
    Behaviour(
        "flash_attn",
        "metal",
        "metal kernel",
        (METAL_SPLIT_DIR + "fa.metal", METAL_MONOLITH),
        "kernel_flash_attn_ext_vec",
    ),
    Behaviour(
        "flash_attn", "cpu", "cpu reference", (CPU_OPS_SOURCE,), "ggml_compute_forward_flash_attn_ext_f16_one_chunk"
    ),
)


# --- kernel-builder's conventions that the rendered package shares with the build --------------------------
# The token in torch-ext/<module>/_ops.py (kernel-builder's _ops.py.in) that the build replaces with the
# variant's op namespace `_<module>_<backend>_<uid>` (CMake configure_file style).
OPS_NAME_PLACEHOLDER = "@OPS_NAME@"
