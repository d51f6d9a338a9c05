"""The op facts of gguf-kernels: what its templates and the tool need to know about its ops, read from the pinned
upstream. Shared ggml facts are in toolkit/core/ggml_facts.py; templates see both as `facts`."""

from toolkit.core.ggml_facts import Fingerprint

# The ops these templates implement: config naming another op for this package is refused. mul_mat_vec's unit
# (ggml's mmvq.cu) also serves mul_mat_id (MUL_MAT_ID is the same kernel with expert ids); quantize is ggml's
# q8_1 activation quantizer that the gemv reads.
OPS = ("mul_mat_vec", "quantize", "dequantize", "get_rows")
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
