"""The op facts of the first package (gated delta net, decode flash attention): kernel names, function
constants, head dims, kargs layouts and our CUDA units, plus the upstream regions and functions they
depend on (fingerprinted by `sync`). Loaded by toolkit.core.package_facts; templates see these and
toolkit.core.ggml_facts (what holds for every ggml-derived package) as one `facts` namespace.

Every fact is read from ggml at d99724f2 (docs/upstream.md); keep each next to its source reference.
"""

from toolkit.core.ggml_facts import CPU_OPS_SOURCE, METAL_MONOLITH, METAL_SPLIT_DIR, Behaviour, Fingerprint

# The ops these templates implement: config naming another op for this package is refused.
OPS = ("gated_delta_net", "flash_attn", "ssm_conv")
# The conformance cases `verify` runs on a built variant (relative to this directory; its float64 references are
# reference.py next to it).
CONFORMANCE = "conformance.py"

# Head dims instantiated upstream.
GDN_CUDA_HEAD_DIMS = (16, 32, 64, 128)
GDN_METAL_HEAD_DIMS = (32, 64, 128)
FA_VEC_CUDA_HEAD_DIMS = (64, 128, 256)
FATTN_KQ_STRIDE = 256  # ggml only runs the vector kernel on KV padded to this (§3.1)

# --- CUDA bindings (render; docs/upstream.md §1.1-1.6, §3.1, §8.1-8.2) ------------------------------
# Our translation units: each #includes one upstream entry exactly once (its ggml_cuda_op_* wrappers are
# non-static, so a second inclusion would be an ODR violation) and exposes extern "C" launchers.
CUDA_TU_FOR_OP = {"gated_delta_net": "gdn_kernels", "flash_attn": "fa_vec_kernels", "ssm_conv": "ssm_conv_kernels"}
CUDA_SHIM_TU = "ggml_shim"
# The extern "C" launcher declarations the per-op units (and the preparation unit) share.
CUDA_LAUNCHERS_HEADER = "csrc/cuda/ggml_launchers.h"
# Our own kernel (no upstream source): the transformers layers' input preparation before gated_delta_net.
CUDA_PREP_TU = "gdn_prep"
# Our own CUDA units, beside the per-op ones: (context key, unit name, build.toml kernel, links the
# launchers header, what it is).
CUDA_OWN_UNITS = (
    (
        "shim",
        CUDA_SHIM_TU,
        "ggml_shim_cuda",
        False,
        "the ggml runtime symbols the vendored sources reference (docs/upstream.md §1.6)",
    ),
    (
        "prep",
        CUDA_PREP_TU,
        "gdn_prep_cuda",
        True,
        "our own: the transformers layers' input preparation for gated_delta_net (one launch)",
    ),
)
# Upstream host helpers our launchers call (static, reachable because we include the file).
GDN_CUDA_LAUNCHER = "launch_gated_delta_net"  # template <bool KDA, bool keep_rs_t>
GDN_CUDA_KERNEL = "gated_delta_net_cuda"  # template <int S_v, bool KDA, bool keep_rs_t>
FA_VEC_CUDA_KERNEL = "flash_attn_ext_vec"  # template <int D, int ncols, type_K, type_V, bool softcap>
FA_VEC_CUDA_COMBINE = "flash_attn_combine_results"  # template <int D>
FA_VEC_CUDA_NTHREADS_HOST = "ggml_cuda_fattn_vec_get_nthreads_host"
# ssm_conv (src/ggml-cuda/ssm-conv.cu): the static host launcher, template <bool apply_silu>; its kernel-size switch
# (`switch (nc)`), its channel block (`threads = 128`, GGML_ASSERT(nr % threads == 0)) and the token count up to
# which it runs the short kernel (`n_t <= 32`; above, the long kernel in blocks of 32 tokens).
SSM_CONV_CUDA_LAUNCHER = "ssm_conv_f32_cuda"
SSM_CONV_CUDA_KERNEL_SIZES = (3, 4, 5, 9, 15)
SSM_CONV_CUDA_CHANNEL_BLOCK = 128
SSM_CONV_CUDA_SHORT_MAX_TOKENS = 32
# Query columns per block: ggml uses 1 for a single query and 2 otherwise (fattn-vec.cuh).
FA_VEC_CUDA_NCOLS = (1, 2)
# GQA-grouped instances (vendor/patches/0004-fa-vec-gqa.patch: ncols2 Q heads of one K/V head per block, one
# query), per head dim: the group sizes compiled and the n_kv from which the op takes them. Dispatch by measurement
# (H200, bf16 K/V, benchmarks/bench_fa.py's grouped and one-head-per-block rows side by side, docs/benchmarks.md
# "Decode attention"): groups of 4 against one block per Q head were 1.37 / 0.91 / 0.98 / 0.93x at D=128 and
# n_kv 512 / 4K / 16K / 32K, 1.53 / 1.26 / 0.90 / 0.78x at D=256. Only what was measured faster is dispatched:
# groups of 4 (a GQA ratio divisible by 4 runs ratio/4 groups per K/V head), D=128 from 4K, D=256 from 16K; other
# head dims, ratios and lengths run ggml's one-head-per-block kernel.
FA_VEC_CUDA_GQA_NCOLS2 = {128: (4,), 256: (4,)}
FA_VEC_CUDA_GQA_MIN_KV = {128: 4096, 256: 16384}
# K/V element types we instantiate (torch dtype name -> ggml_type); K and V must share one.
FA_VEC_CUDA_KV_TYPES = (("float16", "GGML_TYPE_F16"), ("bfloat16", "GGML_TYPE_BF16"))
# The vector kernel is ggml's decode path; ggml-metal takes it for ne01 < 20 queries (ggml-metal-ops.cpp
# ggml_metal_op_flash_attn_ext_use_vec). Both backends answer supports_flash_attn with the same bound.
FA_VEC_MAX_QUERIES = 19

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
# Our Metal translation unit (it #includes the vendored entries), host headers and host sources
# (templates/csrc/metal): the runtime and one dispatcher per op. The build.toml Metal section lists them.
METAL_TU = "csrc/metal/ggml_metal_kernels.metal"
METAL_HOST_HEADERS = ("csrc/metal/ggml_metal_dispatch.h", "csrc/metal/ggml_metal_runtime.h")
METAL_HOST_SOURCES = (
    "csrc/metal/ggml_metal_runtime.mm",
    "csrc/metal/gated_delta_net_metal.mm",
    "csrc/metal/flash_attn_metal.mm",
)
# Every Metal function the binding may look up, per op: what a Metal variant's metallib must contain (verify
# checks it). GDN: one instance per nsg = head_dim/32; FA-vec: per KV type and (DK, DV), plus reduce and pad.
METAL_KERNELS = {
    "gated_delta_net": tuple(GDN_METAL_KERNEL.format(nsg=d // METAL_GDN_LANES) for d in GDN_METAL_HEAD_DIMS),
    "flash_attn": tuple(
        FA_VEC_METAL_KERNEL.format(t=t, dk=dk, dv=dv) for t in METAL_FA_VEC_KV_TYPES for dk, dv in METAL_FA_VEC_HEAD_DIMS
    )
    + (FA_VEC_REDUCE_METAL_KERNEL, FA_PAD_METAL_KERNEL),
}


# --- Fingerprinted regions of these ops (docs/upstream.md §8) -----------------------------------------
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
        "ssm-conv-cuda launcher signature",
        "src/ggml-cuda/ssm-conv.cu",
        r"static void ssm_conv_f32_cuda\(",
        r"\)\s*\{\s*$",
    ),
    Fingerprint("ssm-conv-cuda kernel-size switch", "src/ggml-cuda/ssm-conv.cu", r"switch \(nc\)", r"GGML_ABORT"),
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


# --- Behaviour fingerprints: the functions these ops' semantics live in (docs/upstream.md §4.1, §8.5) -----
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
    Behaviour("ssm_conv", "cuda", "cuda launcher", ("src/ggml-cuda/ssm-conv.cu",), SSM_CONV_CUDA_LAUNCHER),
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
