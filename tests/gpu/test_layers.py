"""The transformers hooks on a real GPU: each Hub layer against transformers' own torch functions (5.22.2) on
random inputs (GQA, l2norm, T = 1, 4, 64, state carried over several calls, float32 and bfloat16),
flash_attn_forward against transformers' sdpa_attention_forward, and a tiny random-initialised Qwen3.5 model
loaded through `from_pretrained(kernel_config=...)` with the kernel fetched from the local test Hub
(toolkit.testing.localhub): greedy tokens identical to the torch fallback in float32 over 128 tokens.

Runs the variant under GGML_VENDOR_KERNEL_ROOT/build/ggml-attn-kernels/ (default: this repository), as tests/gpu/test_ops.py.

    ggml-vendor build && python3 -m pytest -q -m gpu tests/gpu/test_layers.py
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.helpers.machine import ATTN_BUILD
from toolkit.verify.conformance import load_cases

Refs = dict[str, Callable[..., Any]]  # transformers' torch functions by role (chunk, recurrent, ...)

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]
# The first package's float64 references (templates/reference.py), the one copy the op tests use too.
gdn_reference = load_cases(REPO / "templates" / "ggml-attn-kernels" / "reference.py").gdn_reference


@pytest.fixture(scope="module")
def torch(cuda_torch: ModuleType) -> ModuleType:
    return cuda_torch


@pytest.fixture(scope="module")
def kernel(cuda_kernel: ModuleType) -> ModuleType:
    return cuda_kernel


def _reference(obj: Any) -> Callable[..., Any]:
    """transformers' torch function behind its Hub hook (a kernels Func module, or a plain wrapper)."""
    if hasattr(type(obj), "forward") and getattr(type(obj).forward, "__closure__", None):
        obj = type(obj).forward.__closure__[0].cell_contents
    fn: Callable[..., Any] = inspect.unwrap(obj)
    return fn


@pytest.fixture(scope="module")
def refs(torch: ModuleType) -> Refs:
    try:
        from transformers.models.kimi_linear import modeling_kimi_linear as kimi
        from transformers.models.qwen3_5 import modeling_qwen3_5 as qwen
    except ImportError as exc:
        pytest.skip(f"transformers is not importable: {exc}")
    return {
        "chunk": _reference(qwen.torch_chunk_gated_delta_rule),
        "recurrent": _reference(qwen.torch_recurrent_gated_delta_rule),
        "chunk_kda": _reference(kimi.chunk_kimi_delta_attention),
        "recurrent_kda": _reference(kimi.recurrent_kimi_delta_attention),
    }


def rel_err(x: Any, ref: Any) -> float:
    x, ref = x.double(), ref.double()
    err: float = ((x - ref).norm() / ref.norm().clamp_min(1e-30)).item()
    return err


def inputs(
    torch: ModuleType, B: int, T: int, Hk: int, H: int, D: int, dtype: Any, kda: bool = False, seed: int = 0
) -> tuple[Any, Any, Any, Any, Any, Any]:
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def rnd(*s: int) -> Any:
        return torch.randn(*s, device="cuda", generator=gen)

    F = torch.nn.functional
    q, k, v = rnd(B, T, Hk, D).to(dtype), rnd(B, T, Hk, D).to(dtype), rnd(B, T, H, D).to(dtype)
    g = F.logsigmoid(rnd(B, T, H, D) + 3.0) if kda else F.logsigmoid(rnd(B, T, H) + 3.0)  # float32, as the models
    beta = torch.sigmoid(rnd(B, T, H)).to(dtype)
    state = 0.5 * rnd(B, H, D, D)  # transformers' [key][value]
    return q, k, v, g, beta, state


# output tolerance: float32 ~1e-6 measured for ggml vs float64; bfloat16 outputs carry bf16 rounding
TOL = {"float32": 1e-4, "bfloat16": 2e-2}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("T", [1, 4, 64])
@pytest.mark.parametrize("grouped", [False, True])
def test_gdn_layers_match_transformers(
    torch: ModuleType, kernel: ModuleType, refs: Refs, dtype: str, T: int, grouped: bool
) -> None:
    B, Hk, H, D = 2, 2, 4, 128
    dt = getattr(torch, dtype)
    q, k, v, g, beta, s0 = inputs(torch, B, T, Hk, H, D, dt, seed=T * 7 + grouped)
    rq, rk = q.repeat_interleave(H // Hk, dim=2), k.repeat_interleave(H // Hk, dim=2)  # what the models pass
    mq, mk_ = (q, k) if grouped else (rq, rk)
    for ours, ref in (
        (kernel.layers.chunk_gated_delta_rule(), refs["chunk"]),
        (kernel.layers.fused_recurrent_gated_delta_rule(), refs["recurrent"]),
    ):
        o_ref, s_ref = ref(
            rq, rk, v, g=g, beta=beta, initial_state=s0.clone(), output_final_state=True, use_qk_l2norm_in_kernel=True
        )
        o, s = ours(
            mq,
            mk_,
            v,
            g=g,
            beta=beta,
            initial_state=s0.clone(),
            output_final_state=True,
            use_qk_l2norm_in_kernel=True,
            cu_seqlens=None,
        )
        assert o.dtype == dt and o.shape == (B, T, H, D)
        assert s.shape == (B, H, D, D) and s.dtype == torch.float32
        assert rel_err(o, o_ref) < TOL[dtype], (type(ours).__name__, rel_err(o, o_ref))
        assert rel_err(s, s_ref) < 1e-4, (type(ours).__name__, rel_err(s, s_ref))


def test_gdn_without_l2norm_and_without_final_state(torch: ModuleType, kernel: ModuleType, refs: Refs) -> None:
    F = torch.nn.functional
    q, k, v, g, beta, s0 = inputs(torch, 3, 4, 4, 4, 64, torch.float32, seed=5)
    q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    o_ref, _ = refs["recurrent"](q, k, v, g, beta, initial_state=s0.clone(), output_final_state=False)
    kept = s0.clone()
    o, s = kernel.layers.fused_recurrent_gated_delta_rule()(q, k, v, g, beta, initial_state=kept)
    assert s is None and rel_err(o, o_ref) < 1e-4
    assert torch.equal(kept, s0)  # not asked for the final state: the initial state is left alone


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gdn_state_carried_over_calls_like_a_generate_loop(
    torch: ModuleType, kernel: ModuleType, refs: Refs, dtype: str
) -> None:
    """prefill (chunk, T=64, no state) -> 3 decode steps (recurrent) -> a T=4 verify (chunk), through
    transformers' own cache layer, equals one torch recurrence over all 71 tokens."""
    from transformers.cache_utils import LinearAttentionLayer

    B, H, D = 2, 4, 128
    dt = getattr(torch, dtype)
    q, k, v, g, beta, _ = inputs(torch, B, 71, H, H, D, dt, seed=3)
    o_ref, s_ref = refs["recurrent"](q, k, v, g, beta, output_final_state=True, use_qk_l2norm_in_kernel=True)
    cache = LinearAttentionLayer()
    chunk, rec = kernel.layers.chunk_gated_delta_rule(), kernel.layers.fused_recurrent_gated_delta_rule()
    outs, state, bounds = [], None, [(0, 64), (64, 65), (65, 66), (66, 67), (67, 71)]
    for a, b in bounds:
        fn = rec if state is not None and b - a == 1 else chunk
        o, new = fn(
            q[:, a:b],
            k[:, a:b],
            v[:, a:b],
            g=g[:, a:b],
            beta=beta[:, a:b],
            initial_state=state,
            output_final_state=True,
            use_qk_l2norm_in_kernel=True,
        )
        state = cache.update_recurrent_state(new)
        if a >= 64:  # the cache's buffer kept ggml's layout: each step reads it as is, writes a state of its own
            assert new is not state and state.transpose(-1, -2).is_contiguous()
            assert new.transpose(-1, -2).is_contiguous()
        outs.append(o)
    assert rel_err(torch.cat(outs, 1), o_ref) < TOL[dtype]
    assert rel_err(state, s_ref) < 1e-4


# A bf16 (or f16) call's chunked prefill runs single tf32 products (vendor/patches/0007): its output is rounded to
# bf16 anyway, so it may carry tf32's error (~3e-4 of the output's norm) under bf16's own rounding (~1e-3); the
# float32 state it hands on keeps that error too. A float32 call keeps float32 accuracy (tests/gpu/test_ops.py).
TF32_STATE_TOL = 2e-3


def _l2norm64(x: Any) -> Any:
    x = x.double()
    return x / (x * x).sum(-1, keepdim=True).add(1e-6).sqrt()


def layer_reference64(torch: ModuleType, q: Any, k: Any, v: Any, g: Any, beta: Any) -> tuple[Any, Any]:
    """transformers' chunk_gated_delta_rule call (l2 norm in the kernel, grouped q/k heads, no initial state) in
    float64 on the call's own inputs: (out [B, T, H, D], final state [B, H, key, value])."""
    B, _, H, D = v.shape
    rep = H // q.shape[2]
    q64 = _l2norm64(q).repeat_interleave(rep, dim=2)
    k64 = _l2norm64(k).repeat_interleave(rep, dim=2)
    zero = torch.zeros(B, H, D, D, dtype=torch.float64, device=v.device)
    out, state_vk = gdn_reference(torch, q64, k64, v, g, beta, zero)
    return out, state_vk.transpose(-1, -2)


@pytest.mark.parametrize("B,T,H", [(1, 2048, 32), (8, 1000, 32), (1, 32768, 4)])
def test_gdn_bf16_chunked_prefill_is_as_close_to_float64_as_bf16_rounding_allows(
    torch: ModuleType, kernel: ModuleType, B: int, T: int, H: int
) -> None:
    """The model's prefill call in bf16 (strong decay on some heads), one sequence and eight (256 sequence-heads,
    which the single-tf32 form takes too) and a 32K-token call: the bf16 output is within 1.5x of the float64
    result's own bf16 rounding error, and the float32 final state within TF32_STATE_TOL."""
    Hk, D = H // 2, 128
    q, k, v, g, beta, _ = inputs(torch, B, T, Hk, H, D, torch.bfloat16, seed=B * 7 + T)
    g = g * torch.tensor([1.0, 8.0, 30.0, 0.05] * (H // 4), device="cuda")
    ref_out, ref_state = layer_reference64(torch, q, k, v, g, beta)
    o, s = kernel.layers.chunk_gated_delta_rule()(
        q, k, v, g=g, beta=beta, output_final_state=True, use_qk_l2norm_in_kernel=True
    )
    rounding = rel_err(ref_out.to(torch.bfloat16), ref_out)
    err_o, err_s = rel_err(o, ref_out), rel_err(s, ref_state)
    print(f"B={B} T={T} H={H}: output {err_o:.3e} (bf16 rounding {rounding:.3e}, x{err_o / rounding:.3f}), "
          f"state {err_s:.3e}")  # fmt: skip
    assert o.dtype == torch.bfloat16 and not o.isnan().any() and not s.isnan().any()
    assert err_o < 1.5 * rounding, (err_o, rounding)
    assert err_s < TF32_STATE_TOL, err_s


def test_gdn_bf16_chunked_prefill_without_the_layers_norm_keeps_float32_products(
    torch: ModuleType, kernel: ModuleType
) -> None:
    """Without use_qk_l2norm_in_kernel the keys' norms are the caller's, which the single-tf32 form's f16 W and Kd
    (vendor/patches/0008) cannot vouch for, so the binding keeps the float32-accurate products: the float32 final
    state of a chunked bf16 call lands near float32's error of float64, well under the single-tf32 form's ~4e-4."""
    F = torch.nn.functional
    B, T, H, D = 1, 2048, 32, 128
    q, k, v, g, beta, _ = inputs(torch, B, T, H, H, D, torch.bfloat16, seed=17)
    q = F.normalize(q.float(), dim=-1).bfloat16()
    k = F.normalize(k.float(), dim=-1).bfloat16()
    g = g * torch.tensor([1.0, 8.0, 30.0, 0.05] * (H // 4), device="cuda")
    zero = torch.zeros(B, H, D, D, dtype=torch.float64, device="cuda")
    ref_out, ref_vk = gdn_reference(torch, q.double(), k.double(), v, g, beta, zero)
    o, s = kernel.layers.chunk_gated_delta_rule()(
        q, k, v, g=g, beta=beta, output_final_state=True, use_qk_l2norm_in_kernel=False
    )
    rounding = rel_err(ref_out.to(torch.bfloat16), ref_out)
    assert o.dtype == torch.bfloat16 and not s.isnan().any()
    assert rel_err(o, ref_out) < 1.5 * rounding
    assert rel_err(s, ref_vk.transpose(-1, -2)) < 1e-4


@pytest.mark.parametrize("v_scale", [2.0**17, 2.0**-20])
def test_gdn_bf16_chunked_prefill_is_as_accurate_at_any_scale_of_v(
    torch: ModuleType, kernel: ModuleType, v_scale: float
) -> None:
    """The single-tf32 form keeps some operands in f16 (W and Kd: patch 0008), which only the keys, gates and
    beta shape, so v's magnitude must not matter: v times 2^17 (D = U - W h has v's magnitude, mostly past f16's
    largest value, 65504) or times 2^-20 (below f16's smallest normal value, 2^-14) comes out as accurately as at
    unit scale. The errors are relative, so the bounds of the unit-scale test hold unchanged; a 16-bit operand
    that v reaches without a scale (D, U or the chunk-start states in f16) fails one of the two."""
    B, T, H, D = 1, 1024, 8, 128
    q, k, v, g, beta, _ = inputs(torch, B, T, H // 2, H, D, torch.bfloat16, seed=23)
    v = v * v_scale  # a power of two: exact in bf16
    assert v.float().abs().median() > 65504 if v_scale > 1 else v.float().abs().max() < 2.0**-14
    ref_out, ref_state = layer_reference64(torch, q, k, v, g, beta)
    o, s = kernel.layers.chunk_gated_delta_rule()(
        q, k, v, g=g, beta=beta, output_final_state=True, use_qk_l2norm_in_kernel=True
    )
    rounding = rel_err(ref_out.to(torch.bfloat16), ref_out)
    err_o, err_s = rel_err(o, ref_out), rel_err(s, ref_state)
    print(f"v x {v_scale:g}: output {err_o:.3e} (bf16 rounding {rounding:.3e}), state {err_s:.3e}")
    assert o.isfinite().all() and s.isfinite().all()
    assert err_o < 1.5 * rounding, (err_o, rounding)
    assert err_s < TF32_STATE_TOL, err_s


@pytest.mark.parametrize("B,T", [(1, 2048), (2, 1000)])
def test_gdn_long_bf16_prefill_then_decode_like_the_models(
    torch: ModuleType, kernel: ModuleType, refs: Refs, B: int, T: int
) -> None:
    """The prefill call Qwen3.5 makes (bf16 q/k/v/beta, float32 g, l2 norm in the kernel, 16 q/k heads repeated to
    32 value heads, no initial state, final state out) is long enough for the op's chunked path; four decode steps
    carry its state on. Against transformers' torch recurrence on the same inputs."""
    Hk, H, D, steps = 16, 32, 128, 4
    q, k, v, g, beta, _ = inputs(torch, B, T + steps, Hk, H, D, torch.bfloat16, seed=T)
    g = g * torch.tensor([1.0, 8.0, 30.0, 0.05] * (H // 4), device="cuda")  # mild to very strong decay per head
    q, k = q.repeat_interleave(H // Hk, dim=2), k.repeat_interleave(H // Hk, dim=2)
    o_ref, s_ref = refs["recurrent"](q, k, v, g, beta, output_final_state=True, use_qk_l2norm_in_kernel=True)
    chunk, rec = kernel.layers.chunk_gated_delta_rule(), kernel.layers.fused_recurrent_gated_delta_rule()
    kw = dict(output_final_state=True, use_qk_l2norm_in_kernel=True)
    o, state = chunk(q[:, :T], k[:, :T], v[:, :T], g=g[:, :T], beta=beta[:, :T], **kw)
    outs = [o]
    for t in range(T, T + steps):
        sl = slice(t, t + 1)
        o, state = rec(q[:, sl], k[:, sl], v[:, sl], g=g[:, sl], beta=beta[:, sl], initial_state=state, **kw)
        outs.append(o)
    out = torch.cat(outs, 1)
    assert out.dtype == torch.bfloat16 and not out.isnan().any()
    assert rel_err(out, o_ref) < TOL["bfloat16"]
    assert rel_err(out[:, T:], o_ref[:, T:]) < TOL["bfloat16"]
    assert rel_err(state, s_ref) < TF32_STATE_TOL  # the prefill ran single tf32 products (a bf16 call)


@pytest.mark.parametrize("T", [1, 45, 300])
@pytest.mark.parametrize("qk", ["views", "repeated"])
def test_gdn_layer_reads_token_major_views_like_the_models_conv_output(
    torch: ModuleType, kernel: ModuleType, refs: Refs, T: int, qk: str
) -> None:
    """Qwen3.5's layer hands q/k/v over as views of its causal conv's [batch, channels, tokens] output transposed
    to [batch, tokens, channels] (token stride 1, elements `tokens` apart; the preparation's tiled kernel), q and
    k as such views too or, when the model repeats their heads, as contiguous copies: the same values as
    contiguous tensors give the same result, and both match transformers' torch recurrence."""
    B, Hk, H, D = 2, 4, 8, 128
    q, k, v, g, beta, _ = inputs(torch, B, T, Hk, H, D, torch.bfloat16, seed=T + 5)
    conv = torch.cat([q.flatten(2), k.flatten(2), v.flatten(2)], -1).transpose(1, 2).contiguous()  # [B, C, T]
    qt, kt, vt = torch.split(conv.transpose(1, 2), [Hk * D, Hk * D, H * D], dim=-1)
    qt, kt, vt = qt.reshape(B, T, Hk, D), kt.reshape(B, T, Hk, D), vt.reshape(B, T, H, D)
    assert torch.equal(qt, q) and torch.equal(vt, v) and (T == 1 or (vt.stride(1) == 1 and vt.stride(3) == T))
    if qk == "repeated":  # what the model itself does before the call when H > Hk
        q, k = q.repeat_interleave(H // Hk, dim=2), k.repeat_interleave(H // Hk, dim=2)
        qt, kt = q.clone(), k.clone()
    kw = dict(output_final_state=True, use_qk_l2norm_in_kernel=True)
    layer = kernel.layers.chunk_gated_delta_rule()
    o_t, s_t = layer(qt, kt, vt, g=g, beta=beta, **kw)
    o_c, s_c = layer(q, k, v.contiguous(), g=g, beta=beta, **kw)
    rep = H // q.shape[2]
    q_ref, k_ref = q.repeat_interleave(rep, dim=2), k.repeat_interleave(rep, dim=2)
    o_ref, s_ref = refs["recurrent"](q_ref, k_ref, v, g, beta, **kw)
    # The two preparation kernels sum the l2 norms in different orders (1-ulp differences that tf32 may round
    # apart); a layout mistake would be off by O(1).
    assert rel_err(o_t, o_c) < 1e-3 and rel_err(s_t, s_c) < 1e-4, (rel_err(o_t, o_c), rel_err(s_t, s_c))
    assert rel_err(o_t, o_ref) < TOL["bfloat16"] and rel_err(s_t, s_ref) < TF32_STATE_TOL


def test_gdn_state_from_a_key_value_buffer_is_converted(torch: ModuleType, kernel: ModuleType, refs: Refs) -> None:
    q, k, v, g, beta, s0 = inputs(torch, 2, 1, 4, 4, 128, torch.float32, seed=9)
    o_ref, s_ref = refs["recurrent"](q, k, v, g, beta, initial_state=s0, output_final_state=True)
    kept = s0.clone()
    o, s = kernel.layers.fused_recurrent_gated_delta_rule()(
        q, k, v, g, beta, initial_state=kept, output_final_state=True
    )
    assert torch.equal(kept, s0) and s is not kept
    assert rel_err(o, o_ref) < 1e-4 and rel_err(s, s_ref) < 1e-4


@pytest.mark.parametrize("T", [1, 4, 64])
def test_kda_layers_match_transformers(torch: ModuleType, kernel: ModuleType, refs: Refs, T: int) -> None:
    B, H, D = 2, 4, 128
    q, k, v, g, beta, s0 = inputs(torch, B, T, H, H, D, torch.bfloat16, kda=True, seed=T)
    o_ref, s_ref = refs["recurrent_kda"](q, k, v, g, beta, s0.clone(), True, use_qk_l2norm_in_kernel=True)
    o, s = kernel.layers.fused_recurrent_kda()(q, k, v, g, beta, s0.clone(), True, use_qk_l2norm_in_kernel=True)
    assert rel_err(o, o_ref) < 2e-2 and rel_err(s, s_ref) < 1e-4
    o_ref, s_ref = refs["chunk_kda"](
        q, k, v, g, beta, initial_state=s0.clone(), output_final_state=True, use_qk_l2norm_in_kernel=True
    )
    o, s = kernel.layers.chunk_kda()(
        q, k, v, g, beta, initial_state=s0.clone(), output_final_state=True, use_qk_l2norm_in_kernel=True
    )
    assert rel_err(o, o_ref) < 2e-2 and rel_err(s, s_ref) < 1e-3


# ---- flash_attn_forward ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "H,Hkv,D,n_q,n_kv,masked,dtype",
    [
        (16, 4, 256, 1, 37, False, "bfloat16"),  # Qwen3.5 decode
        (16, 2, 256, 1, 300, True, "bfloat16"),  # Qwen3-Next, a padded batch
        (16, 4, 256, 3, 40, True, "float16"),  # speculative verify
        (8, 8, 128, 4, 4, False, "float16"),  # a 4-token prompt: None means causal
        (8, 2, 128, 32, 32, False, "bfloat16"),  # prefill: SDPA
        (8, 2, 128, 1, 50, False, "float32"),  # float32 K/V: SDPA
    ],
)
def test_flash_attn_forward_matches_transformers_sdpa(
    torch: ModuleType, kernel: ModuleType, H: int, Hkv: int, D: int, n_q: int, n_kv: int, masked: bool, dtype: str
) -> None:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    dt = getattr(torch, dtype)
    gen = torch.Generator(device="cuda").manual_seed(n_kv)
    q, k, v = (
        torch.randn(2, h, n, D, device="cuda", generator=gen).to(dt) for h, n in ((H, n_q), (Hkv, n_kv), (Hkv, n_kv))
    )
    mask = None
    if masked:  # transformers' sdpa mask: bool, True = attend; the second sequence is left-padded by 7
        mask = torch.ones(2, 1, n_q, n_kv, dtype=torch.bool, device="cuda")
        mask[1, :, :, :7] = False
        mask &= torch.arange(n_kv, device="cuda") <= torch.arange(n_kv - n_q, n_kv, device="cuda")[:, None]

    # a stand-in for transformers' attention module (what the forward reads off it)
    Attn = type("Attn", (torch.nn.Module,), {"is_causal": True, "num_key_value_groups": H // Hkv})

    out, w = kernel.flash_attn_forward(Attn(), q, k, v, mask, dropout=0.0, scaling=D**-0.5)
    ref, _ = sdpa_attention_forward(Attn(), q.float(), k.float(), v.float(), mask, dropout=0.0, scaling=D**-0.5)
    assert w is None and out.shape == (2, n_q, H, D) and out.dtype == dt
    assert rel_err(out, ref) < (1e-5 if dtype == "float32" else 1e-2), rel_err(out, ref)


# ---- a model through from_pretrained, the kernel from the local test Hub ------------------------------------

GENERATE = textwrap.dedent(r"""
    import importlib.abc, json, sys, torch
    mode, model_dir = sys.argv[1], sys.argv[2]
    if mode == "torch":  # transformers' fallback: make fla unimportable so its torch functions run
        class _NoFla(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name == "fla" or name.startswith("fla."):
                    raise ImportError("fla is hidden for the torch baseline")
        sys.meta_path.insert(0, _NoFla())
    from transformers import KernelConfig, Qwen3_5ForCausalLM
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    repo = "test-org/ggml-attn-kernels"
    kw, dtype = {}, torch.float32
    if mode != "torch":  # the one-line switch of the README
        meta = {"version": 1, "trust_remote_code": True}
        kw["kernel_config"] = KernelConfig({
            "chunk_gated_delta_rule": (f"{repo}:chunk_gated_delta_rule", meta),
            "fused_recurrent_gated_delta_rule": (f"{repo}:fused_recurrent_gated_delta_rule", meta),
        }, inherit_mapping=False)  # only ours: transformers' default mapping names Hub repos this test Hub lacks
    if mode == "ours+fa":
        kw.update(attn_implementation=repo, allow_all_kernels=True)
        dtype = torch.bfloat16
    if mode != "torch":
        kw["use_kernels"] = True
    model = Qwen3_5ForCausalLM.from_pretrained(model_dir, dtype=dtype, device_map="cuda", **kw)
    from transformers.models.qwen3_5 import modeling_qwen3_5 as qm
    used = {n: getattr(qm, n).forward.__func__.__qualname__
            for n in ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule")}
    impl = model.config._attn_implementation
    used["attention"] = [impl, getattr(ALL_ATTENTION_FUNCTIONS.get(impl), "__qualname__", None)]
    ids = torch.randint(0, model.config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0)).cuda()
    out = model.generate(ids, max_new_tokens=128, min_new_tokens=128, do_sample=False, eos_token_id=None,
                         pad_token_id=0)
    print("RESULT " + json.dumps({"tokens": out[:, 16:].tolist(), "used": used}))
""")


def _tiny_qwen35(torch: ModuleType, path: Path) -> None:
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    cfg = Qwen3_5TextConfig(
        vocab_size=512,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,  # 3 linear-attention layers, then full attention
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        linear_key_head_dim=64,
        linear_value_head_dim=64,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
    )
    torch.manual_seed(1234)
    Qwen3_5ForCausalLM(cfg).save_pretrained(path)


def test_tiny_qwen35_from_the_local_hub_generates_the_torch_tokens(
    torch: ModuleType, kernel: ModuleType, tmp_path: Path
) -> None:
    import transformers
    from packaging.version import Version

    if Version(transformers.__version__) >= Version("5.25.0"):
        pytest.skip(
            "transformers 5.25 (kernels 0.19) dispatches hooked functions through the model, not the instance's "
            "forward this test reads; tests/gpu/test_layers_525.py checks the 5.25 switch (conv included) by the ops run"
        )
    from huggingface_hub import HfApi

    from tests.helpers.hubserver import HubServer, HubState
    from toolkit.publish.hub import lfs_only

    variant = next(p for p in sorted(ATTN_BUILD.glob("torch*-cu*")) if p.is_dir())
    _tiny_qwen35(torch, tmp_path / "model")
    with HubServer(HubState(tokens=("tok",))) as hub, lfs_only(True):
        api = HfApi(endpoint=hub.url, token="tok")
        api.create_repo("test-org/ggml-attn-kernels", repo_type="kernel")
        api.upload_folder(
            folder_path=variant,
            path_in_repo=f"build/{variant.name}",
            repo_id="test-org/ggml-attn-kernels",
            repo_type="kernel",
            ignore_patterns=["__pycache__/*", "*.pyc"],
        )
        api.create_branch("test-org/ggml-attn-kernels", branch="v1", repo_type="kernel")  # kernels' version=1
        env = {
            **os.environ,
            "HF_ENDPOINT": hub.url,
            "HF_HUB_DISABLE_XET": "1",
            "HF_HUB_OFFLINE": "0",
            "HF_HUB_CACHE": str(tmp_path / "hf"),
            "KERNELS_CACHE": str(tmp_path / "hf"),
        }
        env.pop("HF_HUB_DISABLE_TELEMETRY", None)
        env.pop("LOCAL_KERNELS", None)
        results = {}
        for mode in ("torch", "ours", "ours+fa"):
            res = subprocess.run(
                [sys.executable, "-c", GENERATE, mode, str(tmp_path / "model")],
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
            line = next(x for x in res.stdout.splitlines() if x.startswith("RESULT "))
            results[mode] = json.loads(line[len("RESULT ") :])
    switched = {
        "torch_chunk_gated_delta_rule": "chunk_gated_delta_rule.forward",
        "torch_recurrent_gated_delta_rule": "fused_recurrent_gated_delta_rule.forward",
    }
    assert results["ours"]["used"] == {**switched, "attention": ["sdpa", "sdpa_attention_forward"]}
    assert results["torch"]["used"]["torch_chunk_gated_delta_rule"] != switched["torch_chunk_gated_delta_rule"]
    # bf16 with the attention switched too: it runs on ggml's decode kernel (tokens may differ from torch's in
    # bf16, where random weights give near-tied logits; docs/perf-reference.md §4.5)
    assert results["ours+fa"]["used"] == {**switched, "attention": ["test-org/ggml-attn-kernels", "flash_attn_forward"]}
    assert len(results["ours+fa"]["tokens"][0]) == 128
    ours, ref = results["ours"]["tokens"], results["torch"]["tokens"]
    assert len(ours[0]) == 128
    first_diff = [next((i for i, (a, b) in enumerate(zip(x, y)) if a != b), None) for x, y in zip(ours, ref)]
    assert ours == ref, f"greedy tokens differ from the torch fallback at positions {first_diff}"


@pytest.mark.parametrize("Hk,kda", [(2, False), (4, False), (4, True)])
def test_gdn_one_call_path_equals_the_traced_path(
    torch: ModuleType, kernel: ModuleType, monkeypatch: pytest.MonkeyPatch, Hk: int, kda: bool
) -> None:
    """Eager CUDA calls take the one-call op (gated_delta_rule_); torch.compile traces the Python adaptation.
    Both must give the same answer: grouped GQA, l2 norm, bf16 inputs, the caller's state left as it was."""
    layers = kernel.layers
    q, k, v, g, beta, s0 = inputs(torch, 3, 2, Hk, 4, 128, torch.bfloat16, kda=kda, seed=11)
    s0 = s0.transpose(-1, -2).contiguous().transpose(-1, -2)  # ggml's layout, as the layers return it
    layer = layers.fused_recurrent_kda() if kda else layers.chunk_gated_delta_rule()
    runs = []
    for compiling in (False, True):
        monkeypatch.setattr(layers, "_is_compiling", lambda c=compiling: c)
        state = s0.clone()
        o, s = layer(q, k, v, g, beta, initial_state=state, output_final_state=True, use_qk_l2norm_in_kernel=True)
        assert s is not state and torch.equal(state, s0)  # a new final state on both paths; the given one kept
        runs.append((o, s))
    (o1, s1), (o2, s2) = runs
    assert o1.dtype == o2.dtype == torch.bfloat16
    assert rel_err(o1.float(), o2.float()) < 1e-2 and rel_err(s1, s2) < 1e-5


@pytest.mark.parametrize("l2norm", [False, True])
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_gdn_one_call_prepares_strided_mixed_dtype_inputs(
    torch: ModuleType, kernel: ModuleType, monkeypatch: pytest.MonkeyPatch, l2norm: bool, dtype: str
) -> None:
    """The one-call op's preparation kernel (csrc/cuda/gdn_prep.cu) reads q, k and v at any strides and dtype:
    here views of one fused projection (as transformers' split of mixed_qkv gives them), g in bfloat16 and a
    strided beta. Its answer must be the traced (ATen) path's; float32 without the norm takes no preparation."""
    layers = kernel.layers
    B, T, Hk, H, D = 2, 3, 2, 4, 64
    dt = getattr(torch, dtype)
    gen = torch.Generator(device="cuda").manual_seed(21)
    mixed = torch.randn(B, T, (2 * Hk + H) * D, device="cuda", generator=gen).to(dt)
    q, k, v = torch.split(mixed, [Hk * D, Hk * D, H * D], dim=-1)
    q, k, v = q.reshape(B, T, Hk, D), k.reshape(B, T, Hk, D), v.reshape(B, T, H, D)
    assert not v.is_contiguous()
    g = torch.nn.functional.logsigmoid(torch.randn(B, H, T, device="cuda", generator=gen) + 3).bfloat16()
    g = g.transpose(1, 2)  # [B, T, H], strided
    beta = torch.sigmoid(torch.randn(B, T, 2 * H, device="cuda", generator=gen))[..., ::2]  # strided float32
    if not l2norm:
        q, k = (
            torch.nn.functional.normalize(q.float(), dim=-1).to(dt),
            torch.nn.functional.normalize(k.float(), dim=-1).to(dt),
        )
    s0 = (0.5 * torch.randn(B, H, D, D, device="cuda", generator=gen)).transpose(-1, -2).contiguous().transpose(-1, -2)
    layer = layers.fused_recurrent_gated_delta_rule()
    runs = []
    for compiling in (False, True):
        monkeypatch.setattr(layers, "_is_compiling", lambda c=compiling: c)
        state = s0.clone()
        o, s = layer(q, k, v, g, beta, initial_state=state, output_final_state=True, use_qk_l2norm_in_kernel=l2norm)
        assert s is not state and torch.equal(state, s0) and o.dtype == dt and o.shape == (B, T, H, D)
        runs.append((o, s))
    (o1, s1), (o2, s2) = runs
    assert rel_err(o1.float(), o2.float()) < (1e-5 if dtype == "float32" else 2e-3)
    assert rel_err(s1, s2) < 1e-5


def test_gdn_one_call_refuses_bad_input_before_any_launch(torch: ModuleType, kernel: ModuleType) -> None:
    """What the preparation kernel would read out of bounds or misread is refused first, with a message."""
    op = kernel.ops.gated_delta_rule_
    B, T, H, D = 1, 1, 4, 128
    q = torch.randn(B, T, H, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(B, T, H, D, device="cuda", dtype=torch.bfloat16)
    g = torch.zeros(B, T, H, device="cuda")
    beta = torch.zeros(B, T, H, device="cuda")
    state = torch.zeros(B, H, D, D, device="cuda")
    before = state.clone()
    state_in = torch.randn(B, H, D, D, device="cuda")  # read only; `state` is what the op would write
    with pytest.raises(ValueError, match="g must have shape"):
        op(q, q, v, g[:, :, :2], beta, state_in, state, True, torch.bfloat16)
    with pytest.raises(ValueError, match="beta must have shape"):
        op(q, q, v, g, beta[..., None], state_in, state, True, torch.bfloat16)
    with pytest.raises(ValueError, match="v has shape"):
        op(q, q, v[..., :64], g, beta, state_in, state, True, torch.bfloat16)
    with pytest.raises(TypeError, match="v must be float32, float16 or bfloat16"):
        op(q, q, v.double(), g, beta, state_in, state, True, torch.bfloat16)
    with pytest.raises(ValueError, match="head_dim 96 has no compiled kernel"):
        op(
            q[..., :96],
            q[..., :96],
            v[..., :96],
            g,
            beta,
            state_in[..., :96, :96].contiguous(),  # states of the right shape and layout: only head_dim is wrong
            torch.zeros(B, H, 96, 96, device="cuda"),
            True,
            torch.bfloat16,
        )
    assert torch.equal(state, before)
