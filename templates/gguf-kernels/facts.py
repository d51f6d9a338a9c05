"""The op facts of gguf-kernels: what its templates and the tool need to know about its ops, read from the pinned
upstream. Shared ggml facts are in toolkit/core/ggml_facts.py; templates see both as `facts`."""

from toolkit.core.ggml_facts import METAL_MONOLITH, METAL_SPLIT_DIR, Fingerprint

# The ops these templates implement: config naming another op for this package is refused. mul_mat_vec's unit
# (ggml's mmvq.cu) also serves mul_mat_id (MUL_MAT_ID is the same kernel with expert ids); quantize is ggml's
# q8_1 activation quantizer that the gemv reads.
OPS = ("mul_mat_vec", "quantize", "dequantize", "get_rows")
# The conformance cases `verify` runs on a built variant (relative to this directory): every op against gguf's
# numpy dequantization (reference.py next to it).
CONFORMANCE = "conformance.py"
# Our CUDA unit per op (csrc/cuda/<unit>.cu includes the op's upstream entry exactly once).
CUDA_TU_FOR_OP = {
    "mul_mat_vec": "gguf_mmvq",
    "quantize": "gguf_quantize",
    "dequantize": "gguf_convert",
    "get_rows": "gguf_getrows",
}
# The extern "C" interface between the torch binding and the units.
CUDA_LAUNCHERS_HEADER = "csrc/cuda/gguf_launchers.h"
# Our own CUDA units: the ggml runtime symbols the vendored sources reference.
CUDA_OWN_UNITS = (
    ("shim", "ggml_shim", "ggml_shim_cuda", True, "the ggml runtime symbols mmvq/quantize/convert/getrows reference"),
)
# Regions of upstream code the binding calls with its own arguments, fingerprinted by sync: a change here
# means re-reading the binding's argument derivation (gguf_mmvq.cu mirrors ggml_cuda_mul_mat_vec_q).
FINGERPRINTS = (
    Fingerprint(
        "gguf mmvq switch_type signature",
        "src/ggml-cuda/mmvq.cu",
        r"^static void mul_mat_vec_q_switch_type\(",
        r"cudaStream_t stream\) \{",
    ),
    Fingerprint(
        "gguf mmvq MMVQ_MAX_BATCH_SIZE", "src/ggml-cuda/mmvq.cuh", r"#define MMVQ_MAX_BATCH_SIZE", r"MMVQ_MAX_BATCH_SIZE"
    ),
    Fingerprint(
        "gguf quantize_row_q8_1_cuda declaration",
        "src/ggml-cuda/quantize.cuh",
        r"^void quantize_row_q8_1_cuda\(",
        r"cudaStream_t stream\);",
    ),
    Fingerprint("gguf get_rows_cuda declaration", "src/ggml-cuda/getrows.cuh", r"^void get_rows_cuda\(", r"stream\);"),
    Fingerprint(
        "gguf convert getters", "src/ggml-cuda/convert.cuh", r"^to_fp16_cuda_t ggml_get_to_fp16_cuda", r"ggml_get_to_fp32_cuda"
    ),
)
BEHAVIOUR: tuple = ()

# --- Metal (ggml-metal-device.cpp / -ops.cpp / ggml-metal.metal at d99724f2) -----------------------------------
# The quantized types the Metal build covers: ggml type id -> (ggml_type_name, values per block, bytes per block).
# Each has kernel_mul_mv_<name>_f32, kernel_mul_mv_id_<name>_f32 and kernel_get_rows_<name> upstream.
METAL_TYPES = {
    2: ("q4_0", 32, 18),
    3: ("q4_1", 32, 20),
    6: ("q5_0", 32, 22),
    7: ("q5_1", 32, 24),
    8: ("q8_0", 32, 34),
    10: ("q2_K", 256, 84),
    11: ("q3_K", 256, 110),
    12: ("q4_K", 256, 144),
    13: ("q5_K", 256, 176),
    14: ("q6_K", 256, 210),
    20: ("iq4_nl", 32, 18),
    23: ("iq4_xs", 256, 136),
}
# ggml_metal_library_get_pipeline_mul_mv / _mul_mv_id: the rows per simdgroup and simdgroups per threadgroup are
# ggml-metal-impl.h's N_R0_<T> / N_SG_<T> macros (the binding uses the vendored macros; these names are what it
# spells), threadgroup memory per type (bytes; 0 = none) and the types whose grid is ceil(N / nr0) instead of
# ceil(N / (nr0 * nsg)) (ggml_metal_op_mul_mat's F32/F16/BF16/Q8_0 branch).
METAL_MV_SMEM = {8: "32*sizeof(float)*N_R0_Q8_0", 20: "32*sizeof(float)", 23: "32*sizeof(float)"}
METAL_MV_GRID_BY_NR0 = (8,)
FC_MUL_MV = 600  # FC_mul_mv_nsg = +0, _nxpsg = +1, _ne12 = +2, _r2 = +3, _r3 = +4 (all short)
METAL_FC_MUL_MV = {"nsg": (0, "short"), "ne12": (2, "short"), "r2": (3, "short"), "r3": (4, "short")}
METAL_MV_KERNEL = "kernel_mul_mv_{t}_f32"
METAL_MV_ID_KERNEL = "kernel_mul_mv_id_{t}_f32"
METAL_GET_ROWS_KERNEL = "kernel_get_rows_{t}"
# Pipeline cache keys, as ggml names them (snprintf formats in ggml-metal-device.cpp).
METAL_KEY_MV = "{base}_nsg={nsg}_ne12={ne12}_r2={r2}_r3={r3}"
METAL_KEY_MV_ID = "{base}_nsg={nsg}"
METAL_KEY_GET_ROWS = "{base}"
# kernel_get_rows_q writes one float4x4 (16 values) per thread: ne00t = ne00 / 16 (ggml_metal_op_get_rows).
METAL_GET_ROWS_VALUES_PER_THREAD = 16
# transformers reads MAX_GEMV_ROWS; ggml-metal's gemv takes any ne11 (one threadgroup column per row of x), the
# API bound stays ggml's MMVQ_MAX_BATCH_SIZE so both builds answer alike.
METAL_MAX_GEMV_ROWS = 8
# Our Metal host sources (templates/gguf-kernels/csrc/metal): the runtime and the ops' dispatcher.
METAL_HOST_SOURCES = ("csrc/metal/gguf_metal_runtime.mm", "csrc/metal/gguf_metal.mm")
METAL_HOST_HEADERS = ("csrc/metal/gguf_metal_runtime.h",)
# The Metal translation unit that #includes the vendored entries (kernel-builder compiles every .metal it lists).
METAL_TU = "csrc/metal/gguf_metal_kernels.metal"
# Every Metal function the binding may look up, per op: what a Metal variant's metallib must contain.
# dequantize is get_rows over every row, so it needs the get_rows kernels.
METAL_KERNELS = {
    "mul_mat_vec": tuple(METAL_MV_KERNEL.format(t=n) for n, _, _ in METAL_TYPES.values())
    + tuple(METAL_MV_ID_KERNEL.format(t=n) for n, _, _ in METAL_TYPES.values()),
    "dequantize": tuple(METAL_GET_ROWS_KERNEL.format(t=n) for n, _, _ in METAL_TYPES.values()),
    "get_rows": tuple(METAL_GET_ROWS_KERNEL.format(t=n) for n, _, _ in METAL_TYPES.values()),
}
# The ops with a Metal build (quantize is CUDA's q8_1 activation quantizer; ggml-metal's gemv reads f32 x).
METAL_OPS = ("mul_mat_vec", "dequantize", "get_rows")
# Where each op's Metal kernels live in the two upstream layouts (first that exists), as pyproject names them.
METAL_ENTRY = {
    "mul_mat_vec": (METAL_SPLIT_DIR + "mul_mv.metal", METAL_MONOLITH),
    "dequantize": (METAL_SPLIT_DIR + "get_rows.metal", METAL_MONOLITH),
    "get_rows": (METAL_SPLIT_DIR + "get_rows.metal", METAL_MONOLITH),
}
# The kargs structs the Metal binding fills (in ggml-metal-impl.h in both layouts).
FINGERPRINTS += tuple(
    Fingerprint(f"gguf metal {name} kargs", "src/ggml-metal/ggml-metal-impl.h", r"typedef struct \{", rf"\}} {name};")
    for name in ("ggml_metal_kargs_mul_mv", "ggml_metal_kargs_mul_mv_id", "ggml_metal_kargs_get_rows")
)
