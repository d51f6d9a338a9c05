"""The references of gguf-kernels: GGUF blocks made by ggml-org's `gguf` package (numpy), their numpy
dequantization, ggml's q8_1 activation rounding, and the gemv tolerance that rounding implies. One copy serves the
package's conformance cases (conformance.py next to this file, run by `verify`), the GPU tests and the benchmarks
(tests/gguf_reference.py re-exports it); load it with toolkit.verify.conformance.load_cases.

Weights: `gguf.quants.quantize` where it can (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4); for the K- and IQ-quants,
which it cannot quantize, random bytes whose fp16 scale fields are overwritten with finite positive values (every
other bit pattern of those blocks is a valid code). The reference of every op is `gguf.quants.dequantize` of the
same bytes.
"""

from __future__ import annotations

import numpy as np

# ggml type ids (include/ggml.h enum ggml_type).
TYPES = {
    "Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q8_0": 8, "Q2_K": 10, "Q3_K": 11, "Q4_K": 12, "Q5_K": 13,
    "Q6_K": 14, "IQ2_XXS": 16, "IQ2_XS": 17, "IQ3_XXS": 18, "IQ1_S": 19, "IQ4_NL": 20, "IQ3_S": 21, "IQ2_S": 22,
    "IQ4_XS": 23, "IQ1_M": 29, "MXFP4": 39,
}  # fmt: skip
# The types the issue requires (a Q4_K_M checkpoint is Q4_K + Q6_K).
REQUIRED = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS")
QUANTIZABLE = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "MXFP4")
# Byte offsets of the fp16 scale fields in one block (ggml-common.h's block structs), for random blocks.
HALF_FIELDS = {
    "Q2_K": (80, 82), "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,), "IQ2_XXS": (0,),
    "IQ2_XS": (0,), "IQ2_S": (0,), "IQ3_XXS": (0,), "IQ3_S": (0,), "IQ1_S": (0,), "IQ4_NL": (0,), "IQ4_XS": (0,),
}  # fmt: skip


def geometry(name: str) -> tuple[int, int]:
    """(values per block, bytes per block), from gguf's table."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    return GGML_QUANT_SIZES[GGMLQuantizationType[name]]


def _finite_halves(rng: np.random.Generator, n: int, lo: float, hi: float) -> np.ndarray:
    return rng.uniform(lo, hi, size=n).astype(np.float16).view(np.uint8).reshape(n, 2)


def make_blocks(name: str, rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """(rows, bytes_per_row) uint8 GGUF blocks of `name` for rows of `cols` values."""
    import gguf

    qtype = gguf.GGMLQuantizationType[name]
    elems, nbytes = geometry(name)
    assert cols % elems == 0, (name, cols)
    if name in QUANTIZABLE:
        return gguf.quants.quantize(rng.standard_normal((rows, cols)).astype(np.float32), qtype)
    nblocks = rows * cols // elems
    raw = rng.integers(0, 256, size=(nblocks, nbytes), dtype=np.uint8)
    if name == "IQ1_M":
        # The block scale is an fp16 spread over the top nibbles of the four uint16 scales (dequantize_row_iq1_m).
        bits = rng.uniform(1e-3, 2e-2, size=nblocks).astype(np.float16).view(np.uint16)
        sc = raw[:, 48:56].copy().view(np.uint16)  # scales[8] bytes -> 4 uint16
        for i in range(4):
            sc[:, i] = (sc[:, i] & 0x0FFF) | (((bits >> (4 * i)) & 0xF) << 12).astype(np.uint16)
        raw[:, 48:56] = sc.view(np.uint8)
    else:
        for off in HALF_FIELDS[name]:
            raw[:, off : off + 2] = _finite_halves(rng, nblocks, 1e-3, 2e-2)
    return raw.reshape(rows, cols // elems * nbytes)


def dequantize(name: str, blocks: np.ndarray, cols: int) -> np.ndarray:
    """gguf's numpy dequantization: (rows, bytes_per_row) -> (rows, cols) float32."""
    import gguf

    out = gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType[name])
    return np.asarray(out, dtype=np.float32).reshape(blocks.shape[0], cols)


def q8_1_roundtrip(x: np.ndarray) -> np.ndarray:
    """ggml's quantize_q8_1 (ggml-cuda/quantize.cu) on rows of x, dequantized: per 32 values d = amax/127, the
    kernel's q = round(x / d) (in float32), and the stored scale is d rounded to fp16. float64 result."""
    x = np.asarray(x, dtype=np.float32)
    blocks = x.reshape(*x.shape[:-1], -1, 32)
    amax = np.abs(blocks).max(axis=-1, keepdims=True)
    d = amax / np.float32(127.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(amax == 0, 0, np.trunc(blocks / d + np.copysign(np.float32(0.5), blocks)))  # roundf
    return (q.astype(np.float64) * d.astype(np.float16).astype(np.float64)).reshape(x.shape)


# The legacy types whose gemv subtracts an offset or adds a min through q8_1's fp16 block sum of x (vecdotq.cuh:
# vec_dot_q4_0_q8_1 is d4 * (sumi * d8 - 8 * s8), q4_1 d4 d8 sumi + m4 s8, likewise q5_0 with 16 and q5_1):
# name -> (bytes per block, offset multiple of d or None for a stored min at byte 2).
_SUM_TERM = {"Q4_0": (18, 8.0), "Q5_0": (22, 16.0), "Q4_1": (20, None), "Q5_1": (24, None)}


def _offsets(name: str, blocks: np.ndarray, n: int) -> np.ndarray:
    """(N, K/32) float64 constant c of each weight block, where w = d*q + c (c = -8d, -16d or the min m)."""
    nbytes, mult = _SUM_TERM[name]
    raw = np.ascontiguousarray(blocks).reshape(n, -1, nbytes)
    d = raw[:, :, 0:2].copy().view(np.float16)[..., 0].astype(np.float64)
    if mult is not None:
        return -mult * d
    return raw[:, :, 2:4].copy().view(np.float16)[..., 0].astype(np.float64)


def gemv_reference(
    w: np.ndarray, x: np.ndarray, name: str | None = None, blocks: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ref, ref_q8, tol) for y = x @ w.T with w (N, K) dequantized weights and x (M, K) activations:

    ref     the float64 product of the dequantized weight and x;
    ref_q8  what ggml's gemv computes in exact arithmetic: x replaced by its q8_1 rounding xq, and for Q4_0,
            Q4_1, Q5_0, Q5_1 (given `name` and their `blocks`) each weight block's offset or min multiplied by
            q8_1's fp16 sum of the block's unrounded x, as vecdotq.cuh does, instead of by the sum of xq;
    tol     an elementwise bound on |y - ref| for ggml's gemv. Its first term is what the q8_1 rounding of x can
            move each output, sum_k |w_nk| |x_mk - xq_mk| (about amax/254 per value), doubled because for the
            types above the offset part of each weight (up to 16 d) meets that rounding too; the second,
            2^-9 sum_k |w_nk x_mk|, covers the fp16 storage of the block sums (2^-11 relative) and float32
            accumulation.
    """
    w64 = w.astype(np.float64)
    x64 = np.asarray(x, dtype=np.float64)
    xq = q8_1_roundtrip(x)
    ref = x64 @ w64.T
    if name in _SUM_TERM and blocks is not None:
        n, k = w.shape
        c = _offsets(name, blocks, n)  # (N, B)
        s = np.asarray(x, dtype=np.float32).reshape(x.shape[0], -1, 32).sum(axis=-1)
        s = s.astype(np.float16).astype(np.float64)  # (M, B): the fp16 block sums q8_1 stores
        xq_sum = xq.reshape(x.shape[0], -1, 32).sum(axis=-1)
        ref_q8 = xq @ w64.T + (s - xq_sum) @ c.T  # the offset meets s instead of sum(xq)
    else:
        ref_q8 = xq @ w64.T
    aw = np.abs(w64)
    tol = 2.0 * (np.abs(x64 - xq) @ aw.T) + 2.0**-9 * (np.abs(x64) @ aw.T) + 1e-6
    return ref, ref_q8, tol
