"""Every fact about ggml's source tree that our code depends on, written once (ggml-upstream.md §1-§8).

Templates and stages read these; nothing else hard-codes upstream paths, names, indices or flags. Facts
that can drift between pins are also listed in FINGERPRINTS so that `sync` notices when they move.
Sections are owned by the stage that needs them; keep each fact next to its source reference.
"""

from __future__ import annotations

from dataclasses import dataclass

# --- Layouts (ggml-upstream.md §0.1) ----------------------------------------------------------------
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

# --- Include closure (ggml-upstream.md §0.2, §1.5, §2.2) -------------------------------------------
# ggml's CMake include path; quoted includes are resolved relative to the including file first.
INCLUDE_ROOTS = ("include", "src", "src/ggml-cuda", "src/ggml-metal")
FOLLOWED_SUFFIXES = (".c", ".cpp", ".h", ".hpp", ".cu", ".cuh", ".m", ".mm", ".metal")
# Files that always travel, whatever the ops (MIT requires the notice to travel with the code, §6).
ALWAYS_SHIP = ("LICENSE",)
OPTIONAL_SHIP = ("AUTHORS", "scripts/sync-llama.last")

# --- CUDA build (ggml-upstream.md §1.7, §8.1-8.2) --------------------------------------------------
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

# --- Metal (ggml-upstream.md §2, §3.2, §8.3-8.4) ---------------------------------------------------
FC_GATED_DELTA_NET = 1600
FC_FLASH_ATTN_EXT_VEC = 400
FC_FLASH_ATTN_EXT_VEC_REDUCE = 500
FC_FLASH_ATTN_EXT_PAD = 100
GDN_METAL_KERNEL = "kernel_gated_delta_net_f32_{nsg}"
FA_VEC_METAL_KERNEL = "kernel_flash_attn_ext_vec_{t}_dk{dk}_dv{dv}"
FA_VEC_REDUCE_METAL_KERNEL = "kernel_flash_attn_ext_vec_reduce"
FA_PAD_METAL_KERNEL = "kernel_flash_attn_ext_pad"


# --- Fingerprinted regions (ggml-upstream.md §8) ---------------------------------------------------
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
    Fingerprint("gdn-cuda kernel signature", "src/ggml-cuda/gated_delta_net.cu",
                r"__global__.*gated_delta_net_cuda|gated_delta_net_cuda\(", r"\)\s*\{\s*$"),
    Fingerprint("gdn-cuda launcher signature", "src/ggml-cuda/gated_delta_net.cu",
                r"static void launch_gated_delta_net", r"\)\s*\{\s*$"),
    Fingerprint("fa-vec-cuda fattn_kernel_t", "src/ggml-cuda/fattn-common.cuh",
                r"typedef void \(\* ?fattn_kernel_t\)", r"\);\s*$"),
    Fingerprint("fa-vec-cuda kernel signature", "src/ggml-cuda/fattn-vec.cuh",
                r"static __global__ void flash_attn_ext_vec\(", r"\)\s*\{\s*$"),
    Fingerprint("fa-vec-cuda combine signature", "src/ggml-cuda/fattn-common.cuh",
                r"static __global__ void flash_attn_combine_results\(", r"\)\s*\{\s*$"),
    Fingerprint("cuda device info struct", "src/ggml-cuda/common.cuh",
                r"struct ggml_cuda_device_info \{", r"^\};"),
    Fingerprint("metal gdn kargs", "src/ggml-metal/ggml-metal-impl.h",
                r"typedef struct \{", r"\} ggml_metal_kargs_gated_delta_net;"),
    Fingerprint("metal fa-vec kargs", "src/ggml-metal/ggml-metal-impl.h",
                r"typedef struct \{", r"\} ggml_metal_kargs_flash_attn_ext_vec;"),
    Fingerprint("metal function-constant bases", "src/ggml-metal/ggml-metal-impl.h",
                r"#define FC_FLASH_ATTN_EXT_PAD", r"#define FC_GATED_DELTA_NET"),
)
