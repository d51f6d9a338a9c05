"""The CUDA ops on a real GPU against float64 references: gated_delta_net (shapes, head dims, GQA, KDA, state
carried across calls, in-place state) and flash_attn (n_kv 1..32768 in place and padded, masks, GQA grouped per
block and not, n_q > 1).

Runs the variant that `kernels.get_local_kernel` loads from GGML_VENDOR_KERNEL_ROOT (its build/ggml-attn-kernels/,
where `ggml-vendor build` writes build/<package>/<variant>/; default: this repository), i.e. the path a user's code takes. Every output is allocated
from memory poisoned with NaN first, so an element the kernel never writes shows up as NaN.

    ggml-vendor build && python3 -m pytest -q -m gpu tests/gpu/test_ops.py
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.helpers.machine import ATTN_BUILD
from toolkit.verify.conformance import load_cases

# The first package's float64 references (templates/reference.py): the one copy, its conformance cases use it too.
_R = load_cases(Path(__file__).resolve().parents[2] / "templates" / "ggml-attn-kernels" / "reference.py")
fa_reference, gdn_reference, rel_err = _R.fa_reference, _R.gdn_reference, _R.rel_err

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]
GDN_TOL = 2e-5  # f32 recurrence vs float64; measured ~1e-7 (docs/gpu-checks.md)
FA_TOL = 2e-3  # f16 K/V products accumulated as ggml does; measured ~1e-4 or better


@pytest.fixture(scope="module")
def torch(cuda_torch: ModuleType) -> ModuleType:
    return cuda_torch


@pytest.fixture(scope="module")
def op(cuda_kernel: ModuleType) -> ModuleType:
    return cuda_kernel


def poison(torch: ModuleType, *shapes: tuple[int, ...], dtype: Any = None) -> None:
    """Fill blocks of the caching allocator with NaN so that the op's next outputs are allocated from them."""
    dtype = dtype or torch.float32
    blocks = [torch.full(s, float("nan"), device="cuda", dtype=dtype) for s in shapes]
    del blocks


# ---- gated delta net ------------------------------------------------------------------------------------


def gdn_inputs(
    torch: ModuleType, B: int, T: int, Hk: int, H: int, D: int, kda: bool = False, seed: int = 0
) -> tuple[Any, Any, Any, Any, Any, Any]:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    F = torch.nn.functional

    def randn(*s: int) -> Any:
        return torch.randn(*s, device="cuda", generator=gen)

    q = F.normalize(randn(B, T, Hk, D), dim=-1)
    k = F.normalize(randn(B, T, Hk, D), dim=-1)
    v = randn(B, T, H, D)
    g = F.logsigmoid(randn(B, T, H, D) + 3.0) if kda else F.logsigmoid(randn(B, T, H) + 3.0)
    beta = torch.sigmoid(randn(B, T, H))
    state = 0.5 * randn(B, H, D, D)  # [value][key]
    return q, k, v, g, beta, state


GDN_CASES = [
    # B, T, H_k, H, D, kda
    (1, 1, 32, 32, 128, False),  # decode, Qwen3-Next-like
    (2, 5, 4, 8, 128, False),  # GQA (tiled)
    (2, 5, 4, 8, 128, True),  # KDA
    (3, 64, 2, 6, 64, False),
    (1, 17, 4, 4, 32, True),
    (4, 3, 2, 4, 16, False),
    (5, 33, 3, 3, 64, False),
    (2, 1, 1, 16, 32, False),
    # enough state columns for the vectorised decode path of vendor/patches/0001 (B*H*D >= 64 per SM)
    (8, 2, 16, 32, 128, False),  # tiled GQA
    (4, 3, 32, 32, 128, True),  # KDA
    (6, 9, 22, 22, 64, False),  # head dim 64
]


@pytest.mark.parametrize("B,T,Hk,H,D,kda", GDN_CASES)
def test_gdn_matches_float64_reference_with_every_output_written(
    torch: ModuleType, op: ModuleType, B: int, T: int, Hk: int, H: int, D: int, kda: bool
) -> None:
    q, k, v, g, beta, state = gdn_inputs(torch, B, T, Hk, H, D, kda, seed=B * 1000 + T * 10 + D)
    ref_out, ref_state = gdn_reference(torch, q, k, v, g, beta, state)
    state_before = state.clone()
    poison(torch, (B, T, H, D), (B, H, D, D))
    out, final = op.gated_delta_net(q, k, v, g, beta, state)
    torch.cuda.synchronize()
    assert out.shape == (B, T, H, D) and final.shape == (B, H, D, D)
    assert out.dtype == torch.float32 and final.dtype == torch.float32
    assert not out.isnan().any() and not final.isnan().any()
    assert rel_err(out, ref_out) < GDN_TOL
    assert rel_err(final, ref_state) < GDN_TOL
    assert torch.equal(state, state_before)  # the functional op leaves the input state alone


def test_gdn_gqa_is_tiled_not_grouped(torch: ModuleType, op: ModuleType) -> None:
    B, T, Hk, H, D = 2, 4, 2, 8, 64
    q, k, v, g, beta, state = gdn_inputs(torch, B, T, Hk, H, D, seed=7)
    out, _ = op.gated_delta_net(q, k, v, g, beta, state)
    tiled, _ = gdn_reference(torch, q, k, v, g, beta, state)
    grouped, _ = gdn_reference(
        torch, q.repeat_interleave(H // Hk, 2), k.repeat_interleave(H // Hk, 2), v, g, beta, state
    )
    assert rel_err(out, tiled) < GDN_TOL
    assert rel_err(out, grouped) > 1e-2


@pytest.mark.parametrize("kda", [False, True])
def test_gdn_state_carried_across_calls_equals_one_call(torch: ModuleType, op: ModuleType, kda: bool) -> None:
    B, T, H, D = 2, 24, 4, 128
    q, k, v, g, beta, state = gdn_inputs(torch, B, T, H, H, D, kda, seed=11)
    whole_out, whole_state = op.gated_delta_net(q, k, v, g, beta, state)
    st, outs = state, []
    for lo, hi in [(0, 1), (1, 4), (4, 5), (5, 24)]:
        o, st = op.gated_delta_net(q[:, lo:hi], k[:, lo:hi], v[:, lo:hi], g[:, lo:hi], beta[:, lo:hi], st)
        outs.append(o)
    assert rel_err(torch.cat(outs, 1), whole_out.double()) < 1e-6
    assert rel_err(st, whole_state.double()) < 1e-6


# ---- the chunked prefill path (vendor/patches/0003): S_v 128, scalar gates ----
# The op takes it by itself for long enough calls (its threshold by sequences x heads); GGML_CUDA_GDN_CHUNKED=1
# forces it for every call of more than one token, =0 turns it off. The op reads the switch once per process, so
# these tests run here (the default dispatch: the chunked path for the long calls) and again in a fresh process
# with the path forced on (the last test of this group).
CHUNK_FORCED = os.environ.get("GGML_CUDA_GDN_CHUNKED") == "1"


def strong_decay_gates(torch: ModuleType, g: Any, strengths: tuple[float, ...] = (1.0, 8.0, 40.0)) -> Any:
    """g scaled per head: mild (exp(g) ~ 0.95), strong and very strong decay (exp(g) down to ~1e-50 per token)."""
    H = g.shape[2]
    scale = torch.tensor([strengths[h % len(strengths)] for h in range(H)], device=g.device)
    return g * scale


CHUNK_CASES = [
    # B, T, H_k, H: whole chunks, a partial last chunk with tiled GQA, several sequences, a long call
    (1, 128, 2, 2),
    (2, 200, 2, 4),
    (3, 1000, 3, 3),
    (1, 4133, 1, 2),
    (8, 300, 16, 32),  # many sequences x heads (1024 state blocks), tiled GQA, a partial last chunk
    (4, 1100, 32, 32),
]


@pytest.mark.parametrize("B,T,Hk,H", CHUNK_CASES)
def test_gdn_chunked_prefill_matches_float64_with_strong_decay(
    torch: ModuleType, op: ModuleType, B: int, T: int, Hk: int, H: int
) -> None:
    q, k, v, g, beta, state = gdn_inputs(torch, B, T, Hk, H, 128, seed=B * 31 + T)
    g = strong_decay_gates(torch, g)
    ref_out, ref_state = gdn_reference(torch, q, k, v, g, beta, state)
    poison(torch, (B, T, H, 128), (B, H, 128, 128))
    out, final = op.gated_delta_net(q, k, v, g, beta, state)
    torch.cuda.synchronize()
    assert not out.isnan().any() and not final.isnan().any()
    assert rel_err(out, ref_out) < GDN_TOL
    assert rel_err(final, ref_state) < GDN_TOL


def test_gdn_chunked_prefill_at_32k_tokens_matches_float64(torch: ModuleType, op: ModuleType) -> None:
    B, T, H = 1, 32768, 2
    q, k, v, g, beta, state = gdn_inputs(torch, B, T, H, H, 128, seed=32768)
    g = strong_decay_gates(torch, g, strengths=(1.0, 0.05))  # one head keeps memory over thousands of tokens
    ref_out, ref_state = gdn_reference(torch, q, k, v, g, beta, state)
    out, final = op.gated_delta_net(q, k, v, g, beta, state)
    assert rel_err(out, ref_out) < GDN_TOL
    assert rel_err(final, ref_state) < GDN_TOL


def test_gdn_chunked_prefill_equals_the_token_sequential_path(torch: ModuleType, op: ModuleType) -> None:
    """One 640-token call (chunked where enabled) against the same tokens fed one per call (always the
    token-sequential kernels), and both against float64."""
    B, T, H = 2, 640, 4
    q, k, v, g, beta, state = gdn_inputs(torch, B, T, H, H, 128, seed=640)
    g = strong_decay_gates(torch, g)
    whole_out, whole_state = op.gated_delta_net(q, k, v, g, beta, state)
    st, outs = state, []
    for lo in range(T):
        sl = slice(lo, lo + 1)
        o, st = op.gated_delta_net(q[:, sl], k[:, sl], v[:, sl], g[:, sl], beta[:, sl], st)
        outs.append(o)
    ref_out, ref_state = gdn_reference(torch, q, k, v, g, beta, state)
    seq_out = torch.cat(outs, 1)
    assert rel_err(seq_out, ref_out) < GDN_TOL and rel_err(st, ref_state) < GDN_TOL
    assert rel_err(whole_out, ref_out) < GDN_TOL and rel_err(whole_state, ref_state) < GDN_TOL
    assert rel_err(whole_out, seq_out.double()) < GDN_TOL


def test_gdn_state_carried_from_chunked_prefill_into_decode(torch: ModuleType, op: ModuleType) -> None:
    B, T, H, steps = 2, 300, 16, 6  # few enough sequences x heads for the chunked path; the decode steps are not
    q, k, v, g, beta, state = gdn_inputs(torch, B, T + steps, 8, H, 128, seed=306)
    g = strong_decay_gates(torch, g)
    ref_out, ref_state = gdn_reference(torch, q, k, v, g, beta, state)
    outs = []
    o, st = op.gated_delta_net(q[:, :T], k[:, :T], v[:, :T], g[:, :T], beta[:, :T], state)  # chunked
    outs.append(o)
    for t in range(T, T + steps):  # decode: one token per call, the state updated in place
        o, st = op.gated_delta_net(q[:, t : t + 1], k[:, t : t + 1], v[:, t : t + 1], g[:, t : t + 1],
                                   beta[:, t : t + 1], st, inplace=True)  # fmt: skip
        outs.append(o)
    out = torch.cat(outs, 1)
    assert rel_err(out, ref_out) < GDN_TOL
    assert rel_err(out[:, T:], ref_out[:, T:]) < GDN_TOL
    assert rel_err(st, ref_state) < GDN_TOL


def _gdn_in_a_process(mode: str | None, cases: str) -> dict[tuple[int, int, int], list[Any]]:
    """gated_delta_net outputs of `cases` (B x T x H) computed in a fresh process with GGML_CUDA_GDN_CHUNKED=mode."""
    code = textwrap.dedent(f"""
        import sys, torch, kernels
        sys.path.insert(0, {str(REPO)!r})
        from tests.gpu.test_ops import gdn_inputs, strong_decay_gates
        op = kernels.get_local_kernel(__import__("pathlib").Path({str(ATTN_BUILD)!r}))
        res = {{}}
        for B, T, H in {cases}:
            q, k, v, g, beta, state = gdn_inputs(torch, B, T, H, H, 128, seed=T)
            res[(B, T, H)] = [x.cpu() for x in op.gated_delta_net(q, k, v, strong_decay_gates(torch, g), beta, state)]
        torch.save(res, sys.argv[1])
    """)
    env = dict(os.environ)
    env.pop("GGML_CUDA_GDN_CHUNKED", None)
    if mode is not None:
        env["GGML_CUDA_GDN_CHUNKED"] = mode
    out = Path(os.environ.get("TMPDIR", "/tmp")) / f"gdn-dispatch-{mode}-{os.getpid()}.pt"
    res = subprocess.run([sys.executable, "-c", code, str(out)], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    import torch as torch_mod

    data: dict[tuple[int, int, int], list[Any]] = torch_mod.load(out)
    out.unlink()
    return data


def test_gdn_default_dispatch_chunks_long_calls_and_leaves_short_ones(torch: ModuleType, op: ModuleType) -> None:
    """By default the op picks the chunked path for a long prefill of few sequence-heads and the token-sequential
    kernels for a short call or many sequence-heads (B=8 x H=32, where the vector kernel is faster): the default's
    outputs are bit-identical to the forced-on process at B=1 T=4096 and to the forced-off one at T = 8 and at
    B=8 T=2048, and the two paths' outputs differ there (so the comparison can tell them apart)."""
    cases = "[(1, 4096, 32), (1, 8, 32), (8, 2048, 32)]"
    default, on, off = (_gdn_in_a_process(m, cases) for m in (None, "1", "0"))
    for key in [(1, 4096, 32), (8, 2048, 32)]:
        assert not torch.equal(on[key][0], off[key][0]), key
        assert rel_err(on[key][0], off[key][0].double()) < GDN_TOL  # both correct: same results within tolerance
    assert all(torch.equal(a, b) for a, b in zip(default[(1, 4096, 32)], on[(1, 4096, 32)]))
    for key in [(1, 8, 32), (8, 2048, 32)]:
        assert all(torch.equal(a, b) for a, b in zip(default[key], off[key])), key


def test_gdn_chunked_path_enabled_in_a_fresh_process_passes_the_same_tests(torch: ModuleType, op: ModuleType) -> None:
    if CHUNK_FORCED:
        pytest.skip("this is the process with the chunked path enabled")
    argv = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", __file__, "-rs", "-k",
            "chunked_prefill or from_chunked_prefill"]  # fmt: skip
    env = dict(os.environ, GGML_CUDA_GDN_CHUNKED="1")
    res = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, cwd=REPO)
    tail = (res.stdout + res.stderr)[-3000:]
    assert res.returncode == 0, tail
    passed = [line for line in res.stdout.splitlines() if " passed" in line]
    assert passed and int(passed[-1].split(" passed")[0].split()[-1]) >= 7, tail  # none skipped away


def test_gdn_inplace_updates_the_state_and_matches_functional(torch: ModuleType, op: ModuleType) -> None:
    B, T, Hk, H, D = 2, 6, 4, 8, 128
    q, k, v, g, beta, state = gdn_inputs(torch, B, T, Hk, H, D, seed=5)
    f_out, f_state = op.gated_delta_net(q, k, v, g, beta, state.clone())
    ptr = state.data_ptr()
    poison(torch, (B, T, H, D))
    out, returned = op.gated_delta_net(q, k, v, g, beta, state, inplace=True)
    assert returned is state and state.data_ptr() == ptr
    assert not out.isnan().any()
    assert torch.equal(out, f_out) and torch.equal(state, f_state)


def test_gdn_reads_strided_views_of_a_fused_projection_in_place(torch: ModuleType, op: ModuleType) -> None:
    B, T, H, D = 2, 3, 4, 64
    _, _, _, g, beta, state = gdn_inputs(torch, B, T, H, H, D, seed=3)
    qkv = torch.nn.functional.normalize(torch.randn(B, T, 3, H, D, device="cuda"), dim=-1)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    assert not q.is_contiguous()
    ref_out, ref_state = gdn_reference(torch, q, k, v, g, beta, state)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out, final = op.gated_delta_net(q, k, v, g, beta, state)
    torch.cuda.synchronize()
    # no hidden copies: the peak grows by the two outputs only
    assert torch.cuda.max_memory_allocated() - base <= out.numel() * 4 + final.numel() * 4 + 2 * 512
    assert rel_err(out, ref_out) < GDN_TOL and rel_err(final, ref_state) < GDN_TOL


@pytest.mark.parametrize("B,H,D", [(2, 4, 64), (8, 32, 128)])  # the one-column kernel and the vectorised path
def test_gdn_strided_and_misaligned_views_match_the_reference(
    torch: ModuleType, op: ModuleType, B: int, H: int, D: int
) -> None:
    """q/k/v as views of a fused projection (row strides of 3 heads); then shifted by one float, so that no
    16-byte vector load is possible and the launcher must fall back to the one-column kernel."""
    T = 3
    _, _, _, g, beta, state = gdn_inputs(torch, B, T, H, H, D, seed=13)
    unit = torch.nn.functional.normalize(torch.randn(B, T, 3, H, D, device="cuda"), dim=-1)
    for shift in (0, 1):
        flat = torch.empty(unit.numel() + shift, device="cuda")[shift:]
        qkv = flat.view(B, T, 3, H, D)
        qkv.copy_(unit)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        assert (q.data_ptr() % 16 == 0) == (shift == 0)
        ref_out, ref_state = gdn_reference(torch, q, k, v, g, beta, state)
        out, final = op.gated_delta_net(q, k, v, g, beta, state)
        torch.cuda.synchronize()
        assert rel_err(out, ref_out) < GDN_TOL and rel_err(final, ref_state) < GDN_TOL, shift


def test_gdn_zero_tokens_returns_the_state(torch: ModuleType, op: ModuleType) -> None:
    q, k, v, g, beta, state = gdn_inputs(torch, 2, 0, 4, 4, 32, seed=1)
    out, final = op.gated_delta_net(q, k, v, g, beta, state)
    assert out.shape == (2, 0, 4, 32) and torch.equal(final, state)


def test_gdn_supports_is_exact(torch: ModuleType, op: ModuleType) -> None:
    for d in (16, 32, 64, 128):
        assert op.supports_gated_delta_net(d)
    for d in (0, 8, 48, 96, 256):
        assert not op.supports_gated_delta_net(d)
        q, k, v, g, beta, state = gdn_inputs(torch, 1, 1, 1, 1, max(d, 1), seed=0)
        with pytest.raises(ValueError, match="head_dim"):
            op.gated_delta_net(q, k, v, g, beta, state)


def test_gdn_bad_arguments_name_the_argument(torch: ModuleType, op: ModuleType) -> None:
    q, k, v, g, beta, state = gdn_inputs(torch, 2, 3, 4, 4, 64, seed=2)
    cases = [
        (TypeError, r"\bq must be float32", (q.half(), k, v, g, beta, state)),
        (TypeError, r"\bbeta must be float32", (q, k, v, g, beta.double(), state)),
        (ValueError, r"\bstate must have shape", (q, k, v, g, beta, state[:, :, :, :32])),
        (ValueError, r"\bstate must be contiguous", (q, k, v, g, beta, state.transpose(-1, -2))),
        (ValueError, r"\bg must have shape", (q, k, v, g[:, :2], beta, state)),
        (
            ValueError,
            r"\bg must have beta.s layout",
            (q, k, v, g.transpose(0, 1).contiguous().transpose(0, 1), beta, state),
        ),
        (
            ValueError,
            r"\bk must have the same strides as q",
            (q, k.transpose(1, 2).contiguous().transpose(1, 2), v, g, beta, state),
        ),
        (
            ValueError,
            r"\bq's last dimension must be contiguous",
            (q.transpose(-1, -2).contiguous().transpose(-1, -2), k, v, g, beta, state),
        ),
        (ValueError, r"q/k have 3 heads", (q[:, :, :3], k[:, :, :3], v, g, beta, state)),
        (ValueError, r"\bv must have shape", (q, k, v[0], g, beta, state)),
        (ValueError, r"\bstate must be a CUDA tensor", (q, k, v, g, beta, state.cpu())),
        (ValueError, r"\bq is a CPU tensor", (q.cpu(), k.cpu(), v.cpu(), g.cpu(), beta.cpu(), state.cpu())),
    ]
    for exc, pattern, args in cases:
        with pytest.raises(exc, match=pattern):
            op.gated_delta_net(*args)
    torch.cuda.synchronize()  # nothing was launched with bad arguments, nothing is pending


# ---- flash attention ------------------------------------------------------------------------------------


def fa_inputs(
    torch: ModuleType, B: int, H: int, Hkv: int, n_q: int, n_kv: int, D: int, dtype: Any = None, seed: int = 0
) -> tuple[Any, Any, Any]:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    dtype = dtype or torch.float16
    q = torch.randn(B, H, n_q, D, device="cuda", generator=gen)
    k = torch.randn(B, Hkv, n_kv, D, device="cuda", generator=gen).to(dtype)
    v = torch.randn(B, Hkv, n_kv, D, device="cuda", generator=gen).to(dtype)
    return q, k, v


def causal_like_mask(torch: ModuleType, B: int, n_q: int, n_kv: int, seed: int = 0) -> tuple[Any, Any]:
    """Additive mask: a random quarter of the positions masked (never all of a row)."""
    gen = torch.Generator(device="cuda").manual_seed(seed + 99)
    keep = torch.rand(B, 1, n_q, n_kv, device="cuda", generator=gen) > 0.25
    keep[..., 0] = True
    return torch.where(keep, 0.0, float("-inf")).to(torch.float16), keep


@pytest.mark.parametrize("n_kv", [1, 100, 256, 1000, 4096])
@pytest.mark.parametrize("masked", [False, True])
def test_fa_matches_float64_softmax_for_any_n_kv(torch: ModuleType, op: ModuleType, n_kv: int, masked: bool) -> None:
    B, H, Hkv, n_q, D = 2, 16, 4, 1, 128
    q, k, v = fa_inputs(torch, B, H, Hkv, n_q, n_kv, D, seed=n_kv)
    mask = causal_like_mask(torch, B, n_q, n_kv, seed=n_kv)[0] if masked else None
    scale = 1.0 / math.sqrt(D)
    ref = fa_reference(torch, q, k, v, mask, scale)
    poison(torch, (B, n_q, H, D))
    out = op.flash_attn(q, k, v, mask, scale)
    torch.cuda.synchronize()
    assert out.shape == (B, n_q, H, D) and out.dtype == torch.float32
    assert not out.isnan().any()
    assert rel_err(out, ref) < FA_TOL


FA_CASES = [
    # B, H, H_kv, n_q, n_kv, D, dtype
    (1, 16, 4, 1, 512, 256, "float16"),
    (1, 16, 2, 1, 4096, 256, "float16"),  # Qwen3-Next full attention
    (2, 32, 8, 1, 777, 128, "float16"),
    (1, 8, 8, 2, 300, 64, "float16"),  # ncols = 2
    (3, 8, 2, 3, 1024, 128, "float16"),  # odd n_q, several blocks of 2
    (1, 4, 1, 19, 129, 64, "float16"),  # the largest n_q the vector kernel takes
    (2, 16, 4, 1, 1000, 128, "bfloat16"),
    (1, 8, 4, 5, 2048, 256, "bfloat16"),
]


@pytest.mark.parametrize("B,H,Hkv,n_q,n_kv,D,dtype", FA_CASES)
def test_fa_shapes_gqa_and_kv_types(
    torch: ModuleType, op: ModuleType, B: int, H: int, Hkv: int, n_q: int, n_kv: int, D: int, dtype: str
) -> None:
    q, k, v = fa_inputs(torch, B, H, Hkv, n_q, n_kv, D, getattr(torch, dtype), seed=B + H + n_kv)
    mask, _ = causal_like_mask(torch, B, n_q, n_kv, seed=n_q)
    scale = 0.7 / math.sqrt(D)
    poison(torch, (B, n_q, H, D))
    out = op.flash_attn(q, k, v, mask, scale)
    assert not out.isnan().any()
    assert rel_err(out, fa_reference(torch, q, k, v, mask, scale)) < FA_TOL
    out_nomask = op.flash_attn(q, k, v, None, scale)
    assert rel_err(out_nomask, fa_reference(torch, q, k, v, None, scale)) < FA_TOL


FA_GQA_CASES = [
    # B, H, H_kv, n_kv, D, dtype: one query. The op takes the GQA-grouped kernel (vendor/patches/0004: one block per
    # 4 Q heads of a K/V head) at D=128 from n_kv 4096 and at D=256 from 16384 when 4 divides the GQA ratio
    # (templates/facts.py), and one block per Q head otherwise: both sides of every threshold are here.
    (1, 16, 4, 32768, 256, "bfloat16"),  # the benchmark's shapes, at full length
    (1, 32, 8, 16384, 128, "bfloat16"),
    (2, 16, 4, 16385, 256, "float16"),  # grouped, two sequences, a partial last chunk
    (1, 16, 4, 16383, 256, "bfloat16"),  # just below D=256's threshold
    (2, 64, 8, 4097, 128, "bfloat16"),  # ratio 8: two groups per K/V head
    (1, 32, 4, 20000, 256, "float16"),  # ratio 8 at D=256
    (2, 32, 8, 4096, 128, "float16"),  # at D=128's threshold
    (2, 32, 8, 4095, 128, "float16"),  # just below it
    (2, 16, 8, 5000, 128, "bfloat16"),  # ratio 2: no group, one block per Q head
    (3, 24, 4, 300, 64, "bfloat16"),  # head dim 64: one block per Q head
    (1, 8, 1, 1, 64, "float16"),  # one position
]


@pytest.mark.parametrize("B,H,Hkv,n_kv,D,dtype", FA_GQA_CASES)
def test_fa_single_query_gqa_groups_match_float64(
    torch: ModuleType, op: ModuleType, B: int, H: int, Hkv: int, n_kv: int, D: int, dtype: str
) -> None:
    q, k, v = fa_inputs(torch, B, H, Hkv, 1, n_kv, D, getattr(torch, dtype), seed=H * 7 + n_kv)
    mask, _ = causal_like_mask(torch, B, 1, n_kv, seed=n_kv)
    scale = 1.0 / math.sqrt(D)
    for m in (None, mask):
        ref = fa_reference(torch, q, k, v, m, scale)
        poison(torch, (B, 1, H, D))
        out = op.flash_attn(q, k, v, m, scale)
        torch.cuda.synchronize()
        assert not out.isnan().any()
        assert rel_err(out, ref) < FA_TOL
        # Each head against its own reference: a group writing a neighbour's head would pass the global norm less
        # clearly than this.
        per_head = (out.double() - ref).norm(dim=-1) / ref.norm(dim=-1)
        assert per_head.max().item() < FA_TOL
    # q rows D + 16 floats apart (a view of a padded buffer): the grouped kernel steps Q heads by q's head stride.
    q_pad = torch.zeros(B, H, 1, D + 16, device="cuda")
    q_pad[..., :D] = q
    q_view = q_pad[..., :D]
    assert q_view.stride(1) == D + 16
    assert rel_err(op.flash_attn(q_view, k, v, mask, scale), fa_reference(torch, q, k, v, mask, scale)) < FA_TOL


def test_fa_gqa_is_grouped(torch: ModuleType, op: ModuleType) -> None:
    q, k, v = fa_inputs(torch, 1, 16, 4, 1, 512, 128, seed=4)
    out = op.flash_attn(q, k, v)
    grouped = fa_reference(torch, q, k, v, None, 1 / math.sqrt(128))
    tiled = fa_reference(torch, q, k.repeat(1, 4, 1, 1), v.repeat(1, 4, 1, 1), None, 1 / math.sqrt(128))
    assert rel_err(out, grouped) < FA_TOL and rel_err(out, tiled) > 1e-1


def test_fa_reads_a_preallocated_cache_in_place_and_masks_the_tail(torch: ModuleType, op: ModuleType) -> None:
    """A cache allocated to a capacity that is a multiple of 256 and sliced to n_kv: no copy of K/V is made
    (peak memory grows by far less than one K), the positions past n_kv are masked."""
    B, H, Hkv, D, cap, n_kv = 1, 16, 4, 256, 4096, 1000
    k_cache = torch.zeros(B, Hkv, cap, D, device="cuda", dtype=torch.float16)
    v_cache = torch.zeros_like(k_cache)
    q, k, v = fa_inputs(torch, B, H, Hkv, 1, n_kv, D, seed=8)
    k_cache[:, :, :n_kv] = k
    v_cache[:, :, :n_kv] = v
    k_cache[:, :, n_kv:] = 30.0  # finite junk past n_kv: would dominate the softmax if it were read unmasked
    v_cache[:, :, n_kv:] = -30.0
    mask, _ = causal_like_mask(torch, B, 1, n_kv, seed=8)
    ref = fa_reference(torch, q, k, v, mask, 1 / math.sqrt(D))
    kv_bytes = k.numel() * 2
    out = op.flash_attn(q, k_cache[:, :, :n_kv], v_cache[:, :, :n_kv], mask)  # warm-up
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = op.flash_attn(q, k_cache[:, :, :n_kv], v_cache[:, :, :n_kv], mask)
    torch.cuda.synchronize()
    assert torch.cuda.max_memory_allocated() - base < kv_bytes // 4
    assert rel_err(out, ref) < FA_TOL
    # Exactly-sized K/V (what transformers' DynamicCache hands over): the kernel stops at n_kv
    # (vendor/patches/0002), so these are read in place too: no padded copy, same answer.
    k_tight, v_tight = k.contiguous(), v.contiguous()
    op.flash_attn(q, k_tight, v_tight, None)  # warm-up
    for m in (mask, None):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        out_tight = op.flash_attn(q, k_tight, v_tight, m)
        torch.cuda.synchronize()
        assert torch.cuda.max_memory_allocated() - base < kv_bytes // 4
        assert rel_err(out_tight, fa_reference(torch, q, k, v, m, 1 / math.sqrt(D))) < FA_TOL


@pytest.mark.parametrize("mask_dtype", ["float32", "bfloat16", "bool", "broadcast"])
def test_fa_mask_forms(torch: ModuleType, op: ModuleType, mask_dtype: str) -> None:
    B, H, Hkv, n_q, n_kv, D = 2, 8, 2, 2, 700, 128
    q, k, v = fa_inputs(torch, B, H, Hkv, n_q, n_kv, D, seed=21)
    additive, keep = causal_like_mask(torch, B, n_q, n_kv, seed=21)
    if mask_dtype == "bool":
        mask = keep
    elif mask_dtype == "broadcast":
        additive, mask = additive[:1], additive[:1].float()
    else:
        mask = additive.to(getattr(torch, mask_dtype))
    out = op.flash_attn(q, k, v, mask)
    assert rel_err(out, fa_reference(torch, q, k, v, additive, 1 / math.sqrt(D))) < FA_TOL


def test_fa_q_dtypes_and_strided_q(torch: ModuleType, op: ModuleType) -> None:
    q, k, v = fa_inputs(torch, 1, 16, 4, 1, 512, 128, seed=9)
    ref = fa_reference(torch, q, k, v, None, 1 / math.sqrt(128))
    assert (
        rel_err(op.flash_attn(q.half(), k, v), fa_reference(torch, q.half(), k, v, None, 1 / math.sqrt(128))) < FA_TOL
    )
    # q laid out as (B, n_q, H, D) in memory, viewed as (B, H, n_q, D): read in place
    q_t = q.transpose(1, 2).contiguous().transpose(1, 2)
    assert rel_err(op.flash_attn(q_t, k, v), ref) < FA_TOL


def test_fa_supports_is_exact(torch: ModuleType, op: ModuleType) -> None:
    assert op.supports_flash_attn(1, 128, 128) and op.supports_flash_attn(19, 256, 256)
    assert op.supports_flash_attn(1, 64, 64)
    for n_q, dk, dv in [(20, 128, 128), (0, 128, 128), (1, 96, 96), (1, 128, 64), (1, 512, 512), (1, 80, 80)]:
        assert not op.supports_flash_attn(n_q, dk, dv)
        if n_q >= 1:
            q, k, v = fa_inputs(torch, 1, 4, 4, n_q, 256, dk, seed=1)
            if dv != dk:
                v = v[..., :dv].contiguous()
            with pytest.raises(ValueError):
                op.flash_attn(q, k, v)


def test_fa_bad_arguments_name_the_argument(torch: ModuleType, op: ModuleType) -> None:
    q, k, v = fa_inputs(torch, 2, 8, 4, 1, 300, 128, seed=3)
    mask, _ = causal_like_mask(torch, 2, 1, 300)
    cases = [
        (TypeError, r"\bk must be float16 or bfloat16", (q, k.float(), v.float(), None, 1.0)),
        (TypeError, r"\bv must have k's dtype", (q, k, v.bfloat16(), None, 1.0)),
        (TypeError, r"\bq must be float32, float16 or bfloat16", (q.double(), k, v, None, 1.0)),
        (ValueError, r"\bmask must have shape", (q, k, v, mask[..., :299], 1.0)),
        (ValueError, r"\bmask has 8 heads", (q, k, v, mask.expand(2, 8, 1, 300), 1.0)),
        (ValueError, r"q has 8 heads, which is not a multiple of k/v's 3", (q, k[:, :3], v[:, :3], None, 1.0)),
        (ValueError, r"\bv has shape", (q, k, v[:, :, :200], None, 1.0)),
        (
            ValueError,
            r"\bk's last dimension must be contiguous",
            (q, k.transpose(-1, -2).contiguous().transpose(-1, -2), v, None, 1.0),
        ),
        (
            ValueError,
            r"\bk's data pointer and strides must be multiples of 16 bytes",
            (q, k.reshape(-1)[1 : 1 + 2 * 4 * 299 * 128].view(2, 4, 299, 128), v[:, :, :299], None, 1.0),
        ),
        (ValueError, r"n_kv = 0", (q, k[:, :, :0], v[:, :, :0], None, 1.0)),
        (ValueError, r"\bscale must be finite", (q, k, v, None, float("nan"))),
        (ValueError, r"\bmask must be a CUDA tensor", (q, k, v, mask.cpu(), 1.0)),
        (ValueError, r"\bq is a CPU tensor", (q.cpu(), k.cpu(), v.cpu(), None, 1.0)),
    ]
    for exc, pattern, args in cases:
        with pytest.raises(exc, match=pattern):
            op.flash_attn(*args)
    torch.cuda.synchronize()


# ---- torch.compile, CUDA graphs, a fresh process -----------------------------------------------------------


def test_torch_compile_fullgraph_traces_both_ops(torch: ModuleType, op: ModuleType) -> None:
    B, T, H, D = 1, 1, 8, 128
    q, k, v, g, beta, state = gdn_inputs(torch, B, T, H, H, D, seed=31)
    fq, fk, fv = fa_inputs(torch, 1, 16, 4, 1, 512, 128, seed=31)

    def step(q: Any, k: Any, v: Any, g: Any, beta: Any, state: Any, fq: Any, fk: Any, fv: Any) -> tuple[Any, Any, Any]:
        out, new_state = op.gated_delta_net(q, k, v, g, beta, state)
        attn = op.flash_attn(fq, fk, fv) if op.supports_flash_attn(1, 128, 128) else fq
        return out * 2, new_state, attn

    compiled = torch.compile(step, fullgraph=True)
    got = compiled(q, k, v, g, beta, state, fq, fk, fv)
    want = step(q, k, v, g, beta, state, fq, fk, fv)
    for a, b in zip(got, want):
        assert torch.equal(a, b)

    def inplace_step(q: Any, k: Any, v: Any, g: Any, beta: Any, state: Any) -> Any:
        out, _ = op.gated_delta_net(q, k, v, g, beta, state, inplace=True)
        return out

    s1, s2 = state.clone(), state.clone()
    out_c = torch.compile(inplace_step, fullgraph=True)(q, k, v, g, beta, s1)
    out_e = inplace_step(q, k, v, g, beta, s2)
    assert torch.equal(out_c, out_e) and torch.equal(s1, s2)


def test_cuda_graph_capture_and_replay(torch: ModuleType, op: ModuleType) -> None:
    q, k, v, g, beta, state = gdn_inputs(torch, 1, 1, 16, 16, 128, seed=41)
    fq, fk, fv = fa_inputs(torch, 1, 16, 4, 1, 4096, 128, seed=41)
    op.gated_delta_net(q, k, v, g, beta, state)  # warm-up outside capture (occupancy and PDL caches)
    op.flash_attn(fq, fk, fv)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph, stream=stream):
            out, new_state = op.gated_delta_net(q, k, v, g, beta, state)
            attn = op.flash_attn(fq, fk, fv)
    torch.cuda.current_stream().wait_stream(stream)
    v.normal_()
    fq.normal_()
    graph.replay()
    torch.cuda.synchronize()
    assert rel_err(out, gdn_reference(torch, q, k, v, g, beta, state)[0]) < GDN_TOL
    assert rel_err(attn, fa_reference(torch, fq, fk, fv, None, 1 / math.sqrt(128))) < FA_TOL


def test_a_fresh_process_loads_the_variant_through_kernels(torch: ModuleType, op: ModuleType) -> None:
    script = textwrap.dedent(f"""
        import math, torch, kernels
        from pathlib import Path
        m = kernels.get_local_kernel(Path({str(ATTN_BUILD)!r}))
        q = torch.nn.functional.normalize(torch.randn(1, 2, 4, 64, device="cuda"), dim=-1)
        k = torch.nn.functional.normalize(torch.randn(1, 2, 4, 64, device="cuda"), dim=-1)
        v = torch.randn(1, 2, 4, 64, device="cuda")
        g = torch.nn.functional.logsigmoid(torch.randn(1, 2, 4, device="cuda") + 3)
        b = torch.sigmoid(torch.randn(1, 2, 4, device="cuda"))
        s = torch.randn(1, 4, 64, 64, device="cuda")
        out, st = m.gated_delta_net(q, k, v, g, b, s)
        S = s.double().transpose(-1, -2)
        for t in range(2):
            S = S * g[0, t].double().exp()[:, None, None]
            kv = (S * k[0, t].double()[:, :, None]).sum(-2)
            d = (v[0, t].double() - kv) * b[0, t].double()[:, None]
            S = S + k[0, t].double()[:, :, None] * d[..., None, :]
            ref = (S * q[0, t].double()[:, :, None]).sum(-2) / 8
            assert ((out[0, t].double() - ref).norm() / ref.norm()).item() < 1e-5
        fq = torch.randn(1, 8, 1, 128, device="cuda")
        fk = torch.randn(1, 2, 1000, 128, device="cuda", dtype=torch.float16)
        fv = torch.randn(1, 2, 1000, 128, device="cuda", dtype=torch.float16)
        o = m.flash_attn(fq, fk, fv)
        kk, vv = fk.double().repeat_interleave(4, 1), fv.double().repeat_interleave(4, 1)
        r = (torch.softmax(fq.double() @ kk.transpose(-1, -2) / math.sqrt(128), -1) @ vv).transpose(1, 2)
        assert ((o.double() - r).norm() / r.norm()).item() < 2e-3
        print("FRESH-PROCESS-OK", m.__name__)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FRESH-PROCESS-OK _ggml_attn_kernels_cuda_" in proc.stdout
