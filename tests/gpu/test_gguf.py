"""gguf-kernels on a real GPU: every op and type against ggml-org's `gguf` package (numpy), and bad input.

Loads the CUDA variant for this torch that `ggml-vendor build -p gguf-kernels` wrote under build/gguf-kernels/,
through kernels.get_local_kernel; where there is none, the fixture builds it first through the tool (the one
build system), and a build that fails fails the tests. Skipped, saying why, where there is no CUDA device or no
`gguf` package.

    python3 -m pytest -q -m gpu tests/gpu/test_gguf.py

Blocks are random (tests/helpers/gguf_reference.py): quantized from Gaussian data where `gguf` can, otherwise random
bytes with finite fp16 scales. Outputs are allocated from memory poisoned with NaN, so an element a kernel
never writes fails the comparison.

Tolerances. dequantize / get_rows compute `scale * code` in float32 exactly as gguf's numpy does, so they
match to a few float32 ulps (and to one rounding of the output dtype). mul_mat_vec / mul_mat_id are ggml's
mmvq gemv, which first rounds the activations to q8_1 (per 32 values, d = amax/127, q = round(x/d), d kept in
fp16): the bound per output is gguf_reference.gemv_reference's `tol` (what that rounding can move each
output, plus the fp16 block sum and float32 accumulation), and in norm the kernel's error must stay within
3x the error that q8_1 rounding alone makes (||y - ref|| <= 3 ||ref_q8 - ref|| + 1e-4 ||ref||): an error in a
block's scale, sub-block or min shows up far above both.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from tests.helpers import gguf_reference as R

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]
ALL_TYPES = tuple(R.TYPES)
# x dtypes transformers' GgufLinear passes (the model's dtype).
X_DTYPES = ("float32", "float16", "bfloat16")


@pytest.fixture(scope="module")
def torch(cuda_torch: ModuleType) -> ModuleType:
    return cuda_torch


@pytest.fixture(scope="module")
def gk(torch: ModuleType) -> ModuleType:
    """The gguf_kernels module under test."""
    pytest.importorskip("gguf", reason="needs ggml-org's gguf package (pip install gguf) for the references")
    module, why = R.load_build(REPO, build_missing=True)
    if module is None:
        pytest.skip(why)
    return module


def poison(torch: ModuleType, nbytes: int) -> None:
    """Fill caching-allocator blocks with NaN so the op's next outputs come from them."""
    blocks = [torch.full((nbytes // 4 + 1024,), float("nan"), device="cuda") for _ in range(3)]
    del blocks


def to_cuda(torch: ModuleType, a: np.ndarray) -> Any:
    return torch.from_numpy(np.ascontiguousarray(a)).cuda()


def rng_for(*key: object) -> np.random.Generator:
    """A generator seeded from the test's key (the same inputs on every run of that test)."""
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def check_gemv(
    torch: ModuleType,
    y: Any,
    w: np.ndarray,
    x: np.ndarray,
    what: str,
    name: str | None = None,
    blocks: np.ndarray | None = None,
) -> None:
    ref, ref_q8, tol = R.gemv_reference(w, x, name, blocks)
    got = y.double().cpu().numpy()
    assert got.shape == ref.shape, (what, got.shape, ref.shape)
    assert np.isfinite(got).all(), f"{what}: non-finite outputs (unwritten?)"
    excess = np.abs(got - ref) / tol
    assert excess.max() <= 1.0, f"{what}: |y - ref| exceeds the q8_1 bound by {excess.max():.2f}x"
    err, q8_err, scale = (np.linalg.norm(a) for a in (got - ref, ref_q8 - ref, ref))
    assert err <= 3 * q8_err + 1e-4 * scale, f"{what}: error {err:.3g} vs q8_1 rounding alone {q8_err:.3g}"
    # And against ggml's arithmetic itself (q8_1 x, fp16 block sums), which ref_q8 reproduces for every type but
    # IQ1_S (its delta term also meets the fp16 block sum): what is left is float32 rounding and the odd q8_1
    # code rounded the other way under fast math, well below the q8_1 error.
    if name != "IQ1_S":
        emu = np.linalg.norm(got - ref_q8)
        assert emu <= 0.5 * q8_err + 1e-5 * scale, f"{what}: {emu:.3g} off ggml's arithmetic (q8_1 error {q8_err:.3g})"


# ---- the API transformers reads ----------------------------------------------------------------------------


def test_api_surface(gk: ModuleType) -> None:
    for name in ("mul_mat_vec", "dequantize", "get_rows", "mul_mat_id"):
        assert callable(getattr(gk, name)), name
    assert gk.MAX_GEMV_ROWS == 8  # ggml's MMVQ_MAX_BATCH_SIZE, what transformers assumes
    missing = [n for n in R.REQUIRED if R.TYPES[n] not in gk.GEMV_TYPES]
    assert not missing, f"GEMV_TYPES lacks {missing}"
    for name in ALL_TYPES:
        assert gk.block_geometry(R.TYPES[name]) == R.geometry(name), name


# ---- dequantize / get_rows --------------------------------------------------------------------------------


def _tol(torch: ModuleType, dtype: Any) -> float:
    tol: float = {torch.float32: 2e-6, torch.float16: 2**-10, torch.bfloat16: 2**-7}[dtype]
    return tol


@pytest.mark.parametrize("dtype", X_DTYPES)
@pytest.mark.parametrize("name", ALL_TYPES)
def test_dequantize(torch: ModuleType, gk: ModuleType, name: str, dtype: str) -> None:
    rng = rng_for("deq", name, dtype)
    rows, cols = 7, 3 * 256
    blocks = R.make_blocks(name, rows, cols, rng)
    ref = R.dequantize(name, blocks, cols)
    dt = getattr(torch, dtype)
    poison(torch, rows * cols * 4)
    out = gk.dequantize(to_cuda(torch, blocks), R.TYPES[name], rows, cols, dt)
    assert out.shape == (rows, cols) and out.dtype == dt and out.is_cuda
    want = torch.from_numpy(ref).to(dt).float()
    scale = float(np.abs(ref).max())
    torch.testing.assert_close(out.float().cpu(), want, rtol=_tol(torch, dt), atol=_tol(torch, dt) * scale)


@pytest.mark.parametrize("dtype", ("float32", "bfloat16"))
@pytest.mark.parametrize("name", ALL_TYPES)
def test_get_rows(torch: ModuleType, gk: ModuleType, name: str, dtype: str) -> None:
    rng = rng_for("rows", name, dtype)
    rows, cols = 37, 512
    blocks = R.make_blocks(name, rows, cols, rng)
    ref = R.dequantize(name, blocks, cols)
    ids = np.concatenate([rng.integers(0, rows, size=20), [0, rows - 1, 5, 5]])  # repeats and both ends
    dt = getattr(torch, dtype)
    poison(torch, len(ids) * cols * 4)
    out = gk.get_rows(to_cuda(torch, blocks), torch.from_numpy(ids).cuda(), R.TYPES[name], cols, dt)
    assert out.shape == (len(ids), cols) and out.dtype == dt
    want = torch.from_numpy(ref[ids]).to(dt).float()
    scale = float(np.abs(ref).max())
    torch.testing.assert_close(out.float().cpu(), want, rtol=_tol(torch, dt), atol=_tol(torch, dt) * scale)


def test_get_rows_empty_and_int32_ids(torch: ModuleType, gk: ModuleType) -> None:
    rng = rng_for("rows-empty")
    blocks = to_cuda(torch, R.make_blocks("Q4_K", 5, 256, rng))
    empty = gk.get_rows(blocks, torch.empty(0, dtype=torch.long, device="cuda"), 12, 256, torch.float32)
    assert empty.shape == (0, 256)
    ids = torch.tensor([4, 0], dtype=torch.int32, device="cuda")
    a = gk.get_rows(blocks, ids, 12, 256, torch.float32)
    b = gk.dequantize(blocks, 12, 5, 256, torch.float32)[[4, 0]]
    assert torch.equal(a, b)


# ---- mul_mat_vec ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("m", range(1, 9))
@pytest.mark.parametrize("name", ALL_TYPES)
def test_mul_mat_vec(torch: ModuleType, gk: ModuleType, name: str, m: int) -> None:
    # N = 131: odd, so not a multiple of the 2 rows per CUDA block mmvq uses for M >= 2; K = 1024 spans
    # several loop trips of the kernel's block stride.
    rng = rng_for("mmv", name, m)
    n, k = 131, 1024
    blocks = R.make_blocks(name, n, k, rng)
    w = R.dequantize(name, blocks, k)
    x = rng.standard_normal((m, k)).astype(np.float32)
    poison(torch, m * n * 4)
    y = gk.mul_mat_vec(to_cuda(torch, blocks), to_cuda(torch, x), R.TYPES[name], n)
    assert y.dtype == torch.float32 and y.shape == (m, n)
    check_gemv(torch, y, w, x, f"{name} M={m}", name, blocks)


@pytest.mark.parametrize(("n", "k"), ((37, 256 * 23), (16, 256), (300, 14336)))
def test_mul_mat_vec_q4_k_one_row(torch: ModuleType, gk: ModuleType, n: int, k: int) -> None:
    # M = 1 Q4_K takes a kernel of its own on Hopper (vendor/patches/0006): 4 super-blocks per warp and loop
    # trip, 16 rows per CUDA block, the weight loads software pipelined. 23 super-blocks: 6 trips, the last
    # one partial; 37 rows: the last block partial, a warp's second row past the end; 256: one super-block.
    rng = rng_for("mmv-q4k-m1", n, k)
    blocks = R.make_blocks("Q4_K", n, k, rng)
    w = R.dequantize("Q4_K", blocks, k)
    x = rng.standard_normal((1, k)).astype(np.float32)
    poison(torch, n * 4)
    y = gk.mul_mat_vec(to_cuda(torch, blocks), to_cuda(torch, x), R.TYPES["Q4_K"], n)
    check_gemv(torch, y, w, x, f"Q4_K {n}x{k} M=1", "Q4_K", blocks)


@pytest.mark.parametrize("dtype", ("float16", "bfloat16"))
@pytest.mark.parametrize("name", ("Q4_0", "Q8_0", "Q4_K", "Q6_K"))
def test_mul_mat_vec_half_inputs(torch: ModuleType, gk: ModuleType, name: str, dtype: str) -> None:
    rng = rng_for("mmv-half", name, dtype)
    n, k, m = 257, 4096, 3
    blocks = R.make_blocks(name, n, k, rng)
    w = R.dequantize(name, blocks, k)
    xt = torch.from_numpy(rng.standard_normal((m, k)).astype(np.float32)).to(getattr(torch, dtype)).cuda()
    y = gk.mul_mat_vec(to_cuda(torch, blocks), xt, R.TYPES[name], n)
    assert y.dtype == torch.float32
    check_gemv(torch, y, w, xt.float().cpu().numpy(), f"{name} x {dtype}", name, blocks)


def test_mul_mat_vec_strided_x_and_row_slice(torch: ModuleType, gk: ModuleType) -> None:
    """A column slice of a wider activation, and a row chunk of the weight (what transformers' loops pass)."""
    rng = rng_for("mmv-views")
    n, k = 300, 512
    blocks = R.make_blocks("Q5_K", n, k, rng)
    w = R.dequantize("Q5_K", blocks, k)
    wide = rng.standard_normal((4, 2 * k)).astype(np.float32)
    x = to_cuda(torch, wide)[:, k:]
    chunk = to_cuda(torch, blocks)[100:233]
    y = gk.mul_mat_vec(chunk, x, R.TYPES["Q5_K"], 133)
    check_gemv(torch, y, w[100:233], wide[:, k:], "Q5_K views")


def test_byte_offset_blocks(torch: ModuleType, gk: ModuleType) -> None:
    """Blocks viewed at an odd byte offset: ggml's kernels read them with 4-byte loads, so the raw op refuses them
    naming the alignment, and the module's functions copy them and give the aligned result bit for bit."""
    rng = rng_for("offset")
    n, k = 9, 512
    blocks = to_cuda(torch, R.make_blocks("Q4_K", n, k, rng))
    buf = torch.zeros(blocks.numel() + 1, dtype=torch.uint8, device="cuda")
    buf[1:] = blocks.view(-1)
    shifted = buf[1:].view(n, -1)
    assert shifted.data_ptr() % 4 and torch.equal(shifted, blocks)
    x = torch.randn(2, k, device="cuda")
    want_y, want_d = gk.mul_mat_vec(blocks, x, 12, n), gk.dequantize(blocks, 12, n, k, torch.bfloat16)
    assert torch.equal(gk.mul_mat_vec(shifted, x, 12, n), want_y)
    assert torch.equal(gk.dequantize(shifted, 12, n, k, torch.bfloat16), want_d)
    with pytest.raises(ValueError, match="aligned"):
        gk.ops.dequantize(shifted, 12, n, k, torch.bfloat16)


# ---- mul_mat_id -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("tokens", "n"), ((1, 67), (1, 64), (3, 67), (8, 67), (9, 67), (11, 67)))
@pytest.mark.parametrize("per_slot_x", (False, True))
@pytest.mark.parametrize("name", ("Q4_0", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q6_K", "IQ4_XS"))
def test_mul_mat_id(torch: ModuleType, gk: ModuleType, name: str, tokens: int, n: int, per_slot_x: bool) -> None:
    # 9 and 11 tokens: more than one launch of ggml's MoE gemv (8 tokens at most per launch, fewer for some
    # types on pre-Ada GPUs). One token with N = 67 (and 9 = 8 + 1) is the case the binding pads to two tokens
    # (gguf_launchers.h: ggml's one-token launch bounds its rows by N * n_used); N = 64 takes ggml's
    # one-token kernel itself. K = 512 is small enough that ggml uses several rows per block there.
    rng = rng_for("mmid", name, tokens, n, per_slot_x)
    n_experts, k, used = 5, 512, 3
    blocks = np.stack([R.make_blocks(name, n, k, rng) for _ in range(n_experts)])
    w = np.stack([R.dequantize(name, b, k) for b in blocks])
    ids = np.stack([rng.choice(n_experts, size=used, replace=False) for _ in range(tokens)])
    x = rng.standard_normal((tokens, used if per_slot_x else 1, k)).astype(np.float32)
    xt = to_cuda(torch, x) if per_slot_x else to_cuda(torch, x[:, 0])
    poison(torch, tokens * used * n * 4)
    y = gk.mul_mat_id(to_cuda(torch, blocks), xt, torch.from_numpy(ids).cuda(), R.TYPES[name], n)
    assert y.shape == (tokens, used, n) and y.dtype == torch.float32
    for t in range(tokens):
        for u in range(used):
            xs = x[t, u if per_slot_x else 0][None]
            e = ids[t, u]
            check_gemv(torch, y[t, u][None], w[e], xs, f"{name} token {t} slot {u}", name, blocks[e])


def test_mul_mat_id_transformers_calls(torch: ModuleType, gk: ModuleType) -> None:
    """The two calls of transformers' GgufExperts.forward: (T, K) x with (T, top_k) ids, then (T*top_k, I) x
    with (T*top_k, 1) ids."""
    rng = rng_for("mmid-hf")
    e, hidden, inter, t, top_k = 4, 256, 512, 5, 2
    gate_up = np.stack([R.make_blocks("Q4_K", 2 * inter, hidden, rng) for _ in range(e)])
    down = np.stack([R.make_blocks("Q6_K", hidden, inter, rng) for _ in range(e)])
    ids = np.stack([rng.choice(e, size=top_k, replace=False) for _ in range(t)]).astype(np.int32)
    h = rng.standard_normal((t, hidden)).astype(np.float32)
    gu = gk.mul_mat_id(to_cuda(torch, gate_up), to_cuda(torch, h), torch.from_numpy(ids).cuda(), 12, 2 * inter)
    assert gu.shape == (t, top_k, 2 * inter)
    act = rng.standard_normal((t * top_k, inter)).astype(np.float32)
    dn = gk.mul_mat_id(
        to_cuda(torch, down), to_cuda(torch, act), torch.from_numpy(ids.reshape(-1, 1)).cuda(), 14, hidden
    )
    assert dn.shape == (t * top_k, 1, hidden)
    w_gu = [R.dequantize("Q4_K", b, hidden) for b in gate_up]
    w_dn = [R.dequantize("Q6_K", b, inter) for b in down]
    for i in range(t):
        for j in range(top_k):
            check_gemv(torch, gu[i, j][None], w_gu[ids[i, j]], h[i][None], f"gate_up {i},{j}")
            r = i * top_k + j
            check_gemv(torch, dn[r, 0][None], w_dn[ids[i, j]], act[r][None], f"down {r}")


# ---- bad input: one Python error naming the argument, never a crash -----------------------------------------


def bad_calls(torch: ModuleType, gk: ModuleType) -> list[tuple[str, Callable[[], object], type[Exception], list[str]]]:
    rng = rng_for("bad")
    q4k = to_cuda(torch, R.make_blocks("Q4_K", 16, 256, rng))
    x = torch.randn(2, 256, device="cuda")
    ids = torch.tensor([0, 3], device="cuda")
    experts = q4k.reshape(2, 8, 144)
    eids = torch.tensor([[0, 1], [1, 0]], device="cuda")
    f32 = torch.float32
    return [
        # (what, call, exception, words the message must contain)
        ("wrong bytes per row", lambda: gk.mul_mat_vec(q4k[:, :100], x, 12, 16), ValueError, ["blocks", "bytes"]),
        ("row length vs type", lambda: gk.mul_mat_vec(q4k, x[:, :128], 12, 16), ValueError, ["K", "block"]),
        ("out_features mismatch", lambda: gk.mul_mat_vec(q4k, x, 12, 17), ValueError, ["blocks", "shape"]),
        ("unknown type", lambda: gk.mul_mat_vec(q4k, x, 99, 16), ValueError, ["ggml_type", "99"]),
        ("type without a gemv", lambda: gk.mul_mat_vec(q4k, x, 1, 16), ValueError, ["ggml_type", "GEMV_TYPES"]),
        ("type not an int", lambda: gk.mul_mat_vec(q4k, x, "Q4_K", 16), TypeError, ["ggml_type"]),
        ("M > 8", lambda: gk.mul_mat_vec(q4k, torch.randn(9, 256, device="cuda"), 12, 16), ValueError, ["x", "9", "MAX_GEMV_ROWS"]),
        ("M = 0", lambda: gk.mul_mat_vec(q4k, x[:0], 12, 16), ValueError, ["x", "rows"]),
        ("x 1-D", lambda: gk.mul_mat_vec(q4k, x[0], 12, 16), ValueError, ["x", "shape"]),
        ("CPU blocks", lambda: gk.mul_mat_vec(q4k.cpu(), x, 12, 16), ValueError, ["blocks", "cpu"]),
        ("CPU x", lambda: gk.mul_mat_vec(q4k, x.cpu(), 12, 16), ValueError, ["x", "cpu"]),
        ("x int", lambda: gk.mul_mat_vec(q4k, x.int(), 12, 16), TypeError, ["x", "int32"]),
        ("x float64", lambda: gk.mul_mat_vec(q4k, x.double(), 12, 16), TypeError, ["x", "float64"]),
        ("blocks not uint8", lambda: gk.mul_mat_vec(q4k.float(), x, 12, 16), TypeError, ["blocks", "uint8"]),
        ("blocks not a tensor", lambda: gk.mul_mat_vec(q4k.cpu().numpy(), x, 12, 16), TypeError, ["blocks"]),
        ("dequantize rows", lambda: gk.dequantize(q4k, 12, 15, 256, f32), ValueError, ["blocks", "shape"]),
        ("dequantize dtype", lambda: gk.dequantize(q4k, 12, 16, 256, torch.float64), TypeError, ["dtype"]),
        ("dequantize CPU", lambda: gk.dequantize(q4k.cpu(), 12, 16, 256, f32), ValueError, ["blocks", "cpu"]),
        ("dequantize unknown type", lambda: gk.dequantize(q4k, 77, 16, 256, f32), ValueError, ["ggml_type", "77"]),
        ("dequantize bytes per row", lambda: gk.dequantize(q4k, 8, 16, 256, f32), ValueError, ["blocks", "bytes"]),
        ("get_rows id too large", lambda: gk.get_rows(q4k, torch.tensor([0, 16], device="cuda"), 12, 256, f32), ValueError, ["ids", "16"]),
        ("get_rows negative id", lambda: gk.get_rows(q4k, torch.tensor([-1], device="cuda"), 12, 256, f32), ValueError, ["ids", "-1"]),
        ("get_rows float ids", lambda: gk.get_rows(q4k, ids.float(), 12, 256, f32), TypeError, ["ids"]),
        ("get_rows CPU ids", lambda: gk.get_rows(q4k, ids.cpu(), 12, 256, f32), ValueError, ["ids", "cpu"]),
        ("get_rows 2-D ids", lambda: gk.get_rows(q4k, ids[None], 12, 256, f32), ValueError, ["ids"]),
        ("get_rows dtype", lambda: gk.get_rows(q4k, ids, 12, 256, torch.int8), TypeError, ["dtype"]),
        ("mul_mat_id expert id", lambda: gk.mul_mat_id(experts, x, eids + 1, 12, 8), ValueError, ["ids", "2"]),
        ("mul_mat_id ids rows", lambda: gk.mul_mat_id(experts, x, eids[:1], 12, 8), ValueError, ["ids", "tokens"]),
        ("mul_mat_id 2-D blocks", lambda: gk.mul_mat_id(q4k, x, eids, 12, 16), ValueError, ["blocks", "shape"]),
        ("mul_mat_id x slots", lambda: gk.mul_mat_id(experts, torch.randn(2, 3, 256, device="cuda"), eids, 12, 8), ValueError, ["x"]),
        ("mul_mat_id CPU ids", lambda: gk.mul_mat_id(experts, x, eids.cpu(), 12, 8), ValueError, ["ids", "cpu"]),
    ]  # fmt: skip


def test_bad_input_raises_naming_the_argument(torch: ModuleType, gk: ModuleType) -> None:
    failures = []
    for what, call, exc, words in bad_calls(torch, gk):
        try:
            call()
        except exc as e:
            missing = [w for w in words if w.lower() not in str(e).lower()]
            if missing:
                failures.append(f"{what}: message lacks {missing}: {e}")
            continue
        except Exception as e:  # noqa: BLE001
            failures.append(f"{what}: raised {type(e).__name__} instead of {exc.__name__}: {e}")
            continue
        failures.append(f"{what}: no error")
    assert not failures, "\n".join(failures)
    # The device is still usable after all of them (nothing was launched on bad input).
    torch.cuda.synchronize()
    rng = rng_for("after-bad")
    blocks = R.make_blocks("Q8_0", 4, 64, rng)
    x = rng.standard_normal((1, 64)).astype(np.float32)
    y = gk.mul_mat_vec(to_cuda(torch, blocks), to_cuda(torch, x), 8, 4)
    check_gemv(torch, y, R.dequantize("Q8_0", blocks, 64), x, "after bad input", "Q8_0", blocks)
