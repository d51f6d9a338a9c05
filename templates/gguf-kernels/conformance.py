"""The conformance cases of gguf-kernels (its facts' CONFORMANCE): every op of a built variant against ggml-org's
`gguf` package, the numpy reference of ggml's block formats (reference.py next to this file), on fixed random
blocks of a few types. The criteria are those of the GPU tests (tests/gpu/test_gguf.py), which run every type. `ggml-vendor verify` runs `run_all` in a child process with the variant loaded
(toolkit.verify.conformance).

Each case names the part of the contract it pins down: `dequantize` and `get_rows` reproduce gguf's numpy
dequantization of the same bytes (to float32 rounding, or rounded to the requested dtype), `mul_mat_vec` and
`mul_mat_id` the float64 product of the dequantized weight within the bound ggml's q8_1 rounding of the
activations implies (reference.gemv_reference: the error is measured in units of that elementwise bound, so the
tolerance is 1), for M = 1 up to MAX_GEMV_ROWS rows of float32, float16 and bfloat16 x and N that are no
multiple of the kernel's rows per block. The outputs' shapes and dtypes are part of the contract too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from toolkit.verify.conformance import device_of, document, guarded, judged, sibling

R = sibling(__file__, "reference")
DEQUANT_TOL = 1e-6  # float32 out: gguf's numpy dequantization does the same float32 arithmetic
# float16 / bfloat16 out, against the reference rounded to that dtype: only values whose float32 result sits
# on a rounding boundary may land one step away (one step is 2^-11 / 2^-8 relative).
HALF_TOL = 1e-3
GEMV_TOL = 1.0  # the error is measured in units of the q8_1 bound (reference.gemv_reference)
NO_GGUF = "needs ggml-org's gguf package (pip install gguf): its numpy dequantization is the reference"


@dataclass(frozen=True)
class UnpackCase:
    name: str
    covers: str
    type: str  # ggml type name (reference.TYPES)
    rows: int
    cols: int
    dtype: str = "float32"
    ids: tuple[int, ...] = ()  # get_rows: these rows; () = dequantize every row


@dataclass(frozen=True)
class GemvCase:
    name: str
    covers: str
    type: str
    M: int  # rows of x (0: the build's MAX_GEMV_ROWS)
    N: int
    K: int
    experts: int = 0  # > 0: mul_mat_id over this many experts, two per token
    x_dtype: str = "float32"


UNPACK_CASES: tuple[UnpackCase, ...] = (
    UnpackCase("dequantize-q4_0", "Q4_0 blocks (d, 4-bit q - 8) to float32", "Q4_0", 6, 512),
    UnpackCase("dequantize-q5_1", "Q5_1 blocks (d, m, 5-bit q) to float32", "Q5_1", 3, 256),
    UnpackCase("dequantize-q8_0", "Q8_0 blocks to float16", "Q8_0", 4, 512, dtype="float16"),
    UnpackCase("dequantize-q4_k", "Q4_K super-blocks (6-bit scales and mins) to float32", "Q4_K", 5, 512),
    UnpackCase("dequantize-q6_k", "Q6_K super-blocks to bfloat16", "Q6_K", 3, 768, dtype="bfloat16"),
    UnpackCase("dequantize-iq4_nl", "IQ4_NL's non-linear 4-bit codebook to float32", "IQ4_NL", 4, 256),
    UnpackCase("get-rows-q8_0", "rows by id, repeated and out of order", "Q8_0", 7, 256, ids=(6, 0, 3, 3, 1)),
    UnpackCase("get-rows-q4_k", "K-quant rows by id", "Q4_K", 5, 512, ids=(4, 2, 0)),
)

GEMV_CASES: tuple[GemvCase, ...] = (
    GemvCase("gemv-q4_0-m1", "Q4_0 gemv, one row (decode); N not a multiple of the rows per block", "Q4_0", 1, 75, 512),
    GemvCase("gemv-q8_0-max-rows", "Q8_0 gemv, MAX_GEMV_ROWS rows of f16 x", "Q8_0", 0, 33, 256, x_dtype="float16"),
    GemvCase("gemv-q4_k-m3", "Q4_K gemv, 3 rows of bf16 x", "Q4_K", 3, 40, 512, x_dtype="bfloat16"),
    GemvCase("gemv-q6_k-max-rows", "Q6_K gemv (the Q4_K_M pair), MAX_GEMV_ROWS rows", "Q6_K", 0, 19, 768),
    GemvCase("gemv-iq4_nl-m2", "IQ4_NL gemv, 2 rows", "IQ4_NL", 2, 24, 256),
    # out_features a multiple of 8: ggml's expert-routed launch of a lone token needs it (the binding says so)
    GemvCase("mul-mat-id-q4_k", "expert-routed gemv: row [t, u] = blocks[ids[t, u]] @ x[t]", "Q4_K", 3, 24, 512, 4),
)


def _rng(seed: int) -> Any:
    import numpy as np

    return np.random.default_rng(seed)


def run_unpack_case(torch: Any, mod: Any, c: UnpackCase, device: str, seed: int) -> dict[str, Any]:
    t = R.TYPES[c.type]
    blocks = R.make_blocks(c.type, c.rows, c.cols, _rng(seed))
    ref = torch.from_numpy(R.dequantize(c.type, blocks, c.cols)).double()
    dev = torch.from_numpy(blocks).to(device)
    dtype = getattr(torch, c.dtype)
    if c.ids:
        ids = torch.tensor(c.ids, dtype=torch.int64)
        out, ref, op = mod.get_rows(dev, ids.to(device), t, c.cols, dtype), ref[ids], "get_rows"
    else:
        out, op = mod.dequantize(dev, t, c.rows, c.cols, dtype), "dequantize"
    out = out.cpu()
    if tuple(out.shape) != tuple(ref.shape) or out.dtype != dtype:
        return {"case": c.name, "op": op, "ok": False, "error": f"returned {out.dtype} {tuple(out.shape)}"}
    want = ref if c.dtype == "float32" else ref.float().to(dtype).double()
    err = _rel_err(torch, out, want)
    return judged(c.name, op, c.covers, err, DEQUANT_TOL if c.dtype == "float32" else HALF_TOL, {})


def _rel_err(torch: Any, x: Any, ref: Any) -> float:
    x = x.double()
    if not bool(torch.isfinite(x).all()):
        return float("inf")
    return ((x - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def _bound_err(torch: Any, y: Any, ref: Any, tol: Any) -> float:
    """max |y - ref| / bound: how far the kernel is from the float64 product, in units of the q8_1 bound."""
    y = y.double()
    if not bool(torch.isfinite(y).all()):
        return float("inf")
    return ((y - torch.from_numpy(ref)).abs() / torch.from_numpy(tol)).max().item()


def _gemv_inputs(torch: Any, c: GemvCase, m: int, seed: int) -> tuple[Any, Any, Any]:
    """(blocks (E, N, bpr) or (N, bpr), x (m, K) rounded to the case's dtype, dequantized weights (E, N, K))."""
    rng = _rng(seed)
    experts = max(c.experts, 1)
    blocks = R.make_blocks(c.type, experts * c.N, c.K, rng)
    w = R.dequantize(c.type, blocks, c.K).reshape(experts, c.N, c.K)
    x = torch.from_numpy(rng.standard_normal((m, c.K)).astype("float32")).to(getattr(torch, c.x_dtype))
    shaped = blocks.reshape(experts, c.N, -1) if c.experts else blocks
    return shaped, x, w


def run_gemv_case(torch: Any, mod: Any, c: GemvCase, device: str, seed: int) -> dict[str, Any]:
    import numpy as np

    m = c.M or int(mod.MAX_GEMV_ROWS)
    t = R.TYPES[c.type]
    blocks, x, w = _gemv_inputs(torch, c, m, seed)
    xf = x.float().numpy()
    dev = torch.from_numpy(blocks).to(device)
    if c.experts:
        ids = _rng(seed + 1).integers(0, c.experts, size=(m, 2))
        y = mod.mul_mat_id(dev, x.to(device), torch.from_numpy(ids).to(device), t, c.N).cpu()  # (T, U, N)
        per_row = [[R.gemv_reference(w[ids[i, u]], xf[i : i + 1]) for u in range(2)] for i in range(m)]
        ref = np.array([[r[0][0] for r in row] for row in per_row])
        tol = np.array([[r[2][0] for r in row] for row in per_row])
        op = "mul_mat_id"
    else:
        y = mod.mul_mat_vec(dev, x.to(device), t, c.N).cpu()  # (M, N)
        ref, _, tol = R.gemv_reference(w[0], xf, c.type, blocks)
        op = "mul_mat_vec"
    if tuple(y.shape) != tuple(ref.shape) or y.dtype != torch.float32:
        return {"case": c.name, "op": op, "ok": False, "error": f"returned {y.dtype} {tuple(y.shape)}"}
    return judged(c.name, op, c.covers, _bound_err(torch, y, ref, tol), GEMV_TOL, {})


def run_case(torch: Any, mod: Any, c: UnpackCase | GemvCase, device: str) -> dict[str, Any]:
    """One case with its fixed seed; an op that raises fails its case (the others still run)."""
    if isinstance(c, UnpackCase):
        seed = 3000 + UNPACK_CASES.index(c)
        return guarded(
            c.name, "get_rows" if c.ids else "dequantize", lambda: run_unpack_case(torch, mod, c, device, seed)
        )
    seed = 4000 + GEMV_CASES.index(c)
    op = "mul_mat_id" if c.experts else "mul_mat_vec"
    return guarded(c.name, op, lambda: run_gemv_case(torch, mod, c, device, seed))


def run_all(mod: Any) -> dict[str, Any]:
    """Every case: {"device", "torch", "cases"} or {"skip": reason}."""
    import torch

    try:
        import gguf  # noqa: F401
    except ImportError:
        return {"skip": NO_GGUF}
    device = device_of(torch)
    if device is None:
        return {"skip": "no GPU on this host (torch sees no CUDA/ROCm or MPS device)"}
    every: tuple[UnpackCase | GemvCase, ...] = (*UNPACK_CASES, *GEMV_CASES)
    return document(torch, device, (run_case(torch, mod, c, device) for c in every))
