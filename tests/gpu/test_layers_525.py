"""transformers 5.25's conventions on a real GPU (tests/gpu/test_layers.py holds the rest of the layers' checks):

* q/k un-repeated ([B, T, Hk, Dk], Hk < Hv): value head h reads key head h // (Hv / Hk). ggml tiles heads (h % Hk),
  so the layers expand q/k in the preparation launch; a wrong mapping gives plausible numbers, so every case is
  compared with a float64 reference of the grouped mapping AND shown to differ from the tiled one. Hk = 2 / Hv = 8
  and Hk = 4 / Hv = 16, through ggml's chunked prefill, its token-sequential kernel, and one-token decode, eager
  (one op call) and traced (torch.compile's path), bf16 and float32 inputs.
* rollback: a speculative step through transformers' own cache (`activate_past_recording`, the model's
  intermediate-state loop, `crop`) leaves the cache equal to the torch reference's, conv states included; and the
  layers never write the state they were handed.
* causal_conv1d_forward (ggml's ssm_conv) against transformers' torch conv in float64: prefill without a cache,
  prefill into a cache, decode updates, a prompt shorter than the kernel, a second prefill onto a cache, long
  prompts (ggml's long-sequence kernel), bias and no activation.

Needs transformers 5.25 (the un-repeated call, the cache API and the conv hook are new there):

    ggml-vendor build && python3 -m pytest -q -m gpu tests/gpu/test_layers_525.py
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

from toolkit.verify.conformance import load_cases

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]
_refs = load_cases(REPO / "templates" / "ggml-attn-kernels" / "reference.py")
gdn_reference = _refs.gdn_reference


def _transformers_525() -> ModuleType:
    try:
        import transformers
    except ImportError as exc:
        pytest.skip(f"transformers is not importable: {exc}")
    from packaging.version import Version

    if Version(transformers.__version__) < Version("5.25.0"):
        pytest.skip(f"transformers {transformers.__version__}: un-repeated q/k, rollback and the conv hook are 5.25's")
    return transformers


@pytest.fixture(scope="module")
def torch(cuda_torch: ModuleType) -> ModuleType:
    return cuda_torch


@pytest.fixture(scope="module")
def kernel(cuda_kernel: ModuleType) -> ModuleType:
    return cuda_kernel


def _torch_function(hooked: Any) -> Callable[..., Any]:
    """transformers' torch function behind a Hub hook (kernels' Func module holds it as the closure's `func`)."""
    fwd = type(hooked).forward
    cells = dict(zip(fwd.__code__.co_freevars, (c.cell_contents for c in fwd.__closure__ or ())))
    fn: Callable[..., Any] = inspect.unwrap(cells.get("func", hooked))
    return fn


@pytest.fixture(scope="module")
def qwen(torch: ModuleType) -> ModuleType:
    _transformers_525()
    from transformers.models.qwen3_5 import modeling_qwen3_5

    return modeling_qwen3_5


def _l2norm64(x: Any) -> Any:
    x = x.double()
    return x / (x * x).sum(-1, keepdim=True).add(1e-6).sqrt()


def rel_err(x: Any, ref: Any) -> float:
    x, ref = x.double(), ref.double()
    err: float = ((x - ref).norm() / ref.norm().clamp_min(1e-30)).item()
    return err


def gdn_inputs(
    torch: ModuleType, B: int, T: int, Hk: int, H: int, D: int, dtype: Any, seed: int, kda: bool = False
) -> tuple[Any, Any, Any, Any, Any, Any]:
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def rnd(*s: int) -> Any:
        return torch.randn(*s, device="cuda", generator=gen)

    F = torch.nn.functional
    q, k, v = rnd(B, T, Hk, D).to(dtype), rnd(B, T, Hk, D).to(dtype), rnd(B, T, H, D).to(dtype)
    g = F.logsigmoid(rnd(B, T, H, D) + 3.0) if kda else F.logsigmoid(rnd(B, T, H) + 3.0)
    beta = torch.sigmoid(rnd(B, T, H)).to(dtype)
    state = 0.5 * rnd(B, H, D, D)  # transformers' [key][value]
    return q, k, v, g, beta, state


def ref64(
    torch: ModuleType, q: Any, k: Any, v: Any, g: Any, beta: Any, state_kv: Any, gqa: str = "grouped"
) -> tuple[Any, Any]:
    """transformers' call (l2 norm in the kernel) in float64: (out, final state [B, H, key, value])."""
    out, s = gdn_reference(torch, _l2norm64(q), _l2norm64(k), v, g, beta, state_kv.transpose(-1, -2), gqa=gqa)
    return out, s.transpose(-1, -2)


# (T, head dim, what ggml runs): its chunked prefill takes D = 128 calls from 128 tokens with at most 64
# sequence-heads (vendor/patches/0003); D = 64 and short calls run the token-sequential kernel.
PATHS = {"chunked": (256, 128), "sequential": (48, 64), "sequential-128": (16, 128)}
# float32 calls keep float32 accuracy on every path (1e-6 measured); bf16 inputs: the result is rounded to bf16
TOL = {"float32": 1e-4, "bfloat16": 2e-2}


@pytest.mark.parametrize("Hk,H", [(2, 8), (4, 16)])
@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("traced", [False, True])
def test_unrepeated_qk_prefill_reads_key_head_h_div_rep(
    torch: ModuleType,
    kernel: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    Hk: int,
    H: int,
    path: str,
    dtype: str,
    traced: bool,
) -> None:
    T, D = PATHS[path]
    dt = getattr(torch, dtype)
    q, k, v, g, beta, s0 = gdn_inputs(torch, 1, T, Hk, H, D, dt, seed=T + H)
    if traced:  # the torch path torch.compile traces (the same adaptation in torch ops around ggml's op)
        monkeypatch.setattr(kernel.layers, "_is_compiling", lambda: True)
    out, st = kernel.layers.chunk_gated_delta_rule()(
        q, k, v, g=g, beta=beta, initial_state=s0, output_final_state=True, use_qk_l2norm_in_kernel=True
    )
    ref_out, ref_st = ref64(torch, q, k, v, g, beta, s0)
    tiled_out, _ = ref64(torch, q, k, v, g, beta, s0, gqa="tiled")
    assert out.dtype == dt and out.shape == (1, T, H, D) and st.shape == (1, H, D, D)
    assert rel_err(out, ref_out) < TOL[dtype], rel_err(out, ref_out)
    assert rel_err(st, ref_st) < TOL[dtype], rel_err(st, ref_st)
    # the check can fail: ggml's own (tiled) head order is far from the answer
    assert rel_err(tiled_out, ref_out) > 0.1


@pytest.mark.parametrize("Hk,H", [(2, 8), (4, 16)])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_unrepeated_qk_decode_steps_carry_the_state(
    torch: ModuleType, kernel: ModuleType, Hk: int, H: int, dtype: str
) -> None:
    """A prefill then 4 one-token decode calls, each fed the state the previous call returned (as the cache does)."""
    dt, D, T, steps = getattr(torch, dtype), 128, 40, 4
    q, k, v, g, beta, _ = gdn_inputs(torch, 2, T + steps, Hk, H, D, dt, seed=H)
    chunk, rec = kernel.layers.chunk_gated_delta_rule(), kernel.layers.fused_recurrent_gated_delta_rule()
    kw = dict(output_final_state=True, use_qk_l2norm_in_kernel=True)
    outs, st = [], None
    o, st = chunk(q[:, :T], k[:, :T], v[:, :T], g=g[:, :T], beta=beta[:, :T], initial_state=None, **kw)
    outs.append(o)
    for t in range(T, T + steps):
        s = slice(t, t + 1)
        o, st = rec(q[:, s], k[:, s], v[:, s], g=g[:, s], beta=beta[:, s], initial_state=st, **kw)
        outs.append(o)
    zero = torch.zeros(2, H, D, D, device="cuda")
    ref_out, ref_st = ref64(torch, q, k, v, g, beta, zero)
    assert rel_err(torch.cat(outs, 1)[:, T:], ref_out[:, T:]) < TOL[dtype]
    assert rel_err(st, ref_st) < TOL[dtype]
    tiled_out, _ = ref64(torch, q, k, v, g, beta, zero, gqa="tiled")
    assert rel_err(tiled_out[:, T:], ref_out[:, T:]) > 0.1


@pytest.mark.parametrize("Hk,H", [(2, 8), (4, 16)])
def test_unrepeated_qk_kda(torch: ModuleType, kernel: ModuleType, Hk: int, H: int) -> None:
    """Kimi's per-key-channel gates with grouped q/k heads, chunk then decode."""
    D, T = 128, 24
    q, k, v, g, beta, s0 = gdn_inputs(torch, 1, T + 1, Hk, H, D, torch.float32, seed=3, kda=True)
    kw = dict(output_final_state=True, use_qk_l2norm_in_kernel=True)
    o1, st = kernel.layers.chunk_kda()(q[:, :T], k[:, :T], v[:, :T], g[:, :T], beta[:, :T], initial_state=s0, **kw)
    o2, st = kernel.layers.fused_recurrent_kda()(q[:, T:], k[:, T:], v[:, T:], g[:, T:], beta[:, T:], st, True, True)
    ref_out, ref_st = ref64(torch, q, k, v, g, beta, s0)
    assert rel_err(torch.cat((o1, o2), 1), ref_out) < 1e-4
    assert rel_err(st, ref_st) < 1e-4


def test_the_layers_never_write_the_state_they_are_handed(torch: ModuleType, kernel: ModuleType) -> None:
    """transformers 5.25 keeps the states it hands over (the cache snapshots its buffer after the call; a speculative
    step keeps every token's state in a list), so each call's final state is a tensor of its own."""
    q, k, v, g, beta, _ = gdn_inputs(torch, 2, 3, 2, 8, 128, torch.bfloat16, seed=5)
    rec = kernel.layers.fused_recurrent_gated_delta_rule()
    kw = dict(output_final_state=True, use_qk_l2norm_in_kernel=True)
    _, s1 = kernel.layers.chunk_gated_delta_rule()(q, k, v, g=g, beta=beta, initial_state=None, **kw)
    assert s1.transpose(-1, -2).is_contiguous()  # ggml's layout: the fast path below takes it as is
    kept = s1.clone()
    states = [s1]
    for t in range(3):  # the model's intermediate-state loop: each call fed the previous call's state
        s = slice(t, t + 1)
        _, nxt = rec(q[:, s], k[:, s], v[:, s], g=g[:, s], beta=beta[:, s], initial_state=states[-1], **kw)
        states.append(nxt)
    assert torch.equal(s1, kept)
    assert len({st.data_ptr() for st in states}) == len(states)
    assert all(not torch.equal(a, b) for a, b in zip(states, states[1:]))


def test_a_chunk_call_with_no_tokens_returns_the_initial_state(torch: ModuleType, kernel: ModuleType) -> None:
    """5.25 calls the chunk hook with no tokens when every token's state is kept (verify length == tokens to keep)."""
    q, k, v, g, beta, s0 = gdn_inputs(torch, 2, 0, 2, 8, 128, torch.bfloat16, seed=1)
    out, st = kernel.layers.chunk_gated_delta_rule()(
        q, k, v, g=g, beta=beta, initial_state=s0, output_final_state=True, use_qk_l2norm_in_kernel=True
    )
    assert out.shape == (2, 0, 8, 128) and out.dtype == torch.bfloat16
    assert torch.equal(st, s0)


# ---- rollback through transformers' own cache and model ------------------------------------------------------


def _tiny_model(torch: ModuleType, transformers: ModuleType, dtype: Any) -> tuple[Any, Any]:
    cfg = transformers.Qwen3_5TextConfig(
        vocab_size=256,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,  # 3 linear-attention layers, then full attention
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        linear_num_key_heads=2,
        linear_num_value_heads=8,  # Hk < Hv: q/k reach the hooks un-repeated
        linear_conv_kernel_dim=4,
    )
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = transformers.Qwen3_5ForCausalLM(cfg)
    return model.to(dtype).eval(), cfg


class Switch:
    """Points transformers' hooked functions (chunk/recurrent gated delta rule, causal conv) at our layers or back
    at the torch functions: the instance's forward, as kernelize's layer replacement does."""

    NAMES = {
        "torch_chunk_gated_delta_rule": "chunk_gated_delta_rule",
        "torch_recurrent_gated_delta_rule": "fused_recurrent_gated_delta_rule",
        "causal_conv1d_forward": "causal_conv1d_forward",
    }

    def __init__(self, qwen: ModuleType, kernel: ModuleType) -> None:
        import types

        self.qwen, self.kernel, self.types = qwen, kernel, types
        self.refs = {n: _torch_function(getattr(qwen, n)) for n in self.NAMES}

    def set(self, ours: bool) -> None:
        for name, layer in self.NAMES.items():
            inst = getattr(self.qwen, name)
            if ours:
                fwd = getattr(self.kernel.layers, layer).forward
            else:
                ref = self.refs[name]

                def fwd(_self: object, *args: Any, _ref: Callable[..., Any] = ref, **kwargs: Any) -> Any:
                    return _ref(*args, **kwargs)

            inst.forward = self.types.MethodType(fwd, inst)

    def reset(self) -> None:
        for name in self.NAMES:
            vars(getattr(self.qwen, name)).pop("forward", None)


def _speculative_round(torch: ModuleType, model: Any, cache: Any, prompt: Any, draft: Any, accept: int) -> Any:
    """Prefill, then one verify forward of len(draft) tokens with past recording on, then `crop` of the rejected."""
    with torch.no_grad():
        model(prompt, cache=cache, use_cache=True)
        cache.activate_past_recording(recurrent_states_to_keep=draft.shape[1])
        logits = model(draft, cache=cache, use_cache=True).logits
        cache.crop(-(draft.shape[1] - accept))
    return logits


def _cache_states(cache: Any, layers: list[int]) -> list[tuple[Any, Any]]:
    return [
        (cache.layers[i].conv_states[0].float().clone(), cache.layers[i].recurrent_states[0].clone()) for i in layers
    ]


@pytest.mark.parametrize("accept", [0, 1, 3])
def test_a_speculative_step_that_rejects_tokens_leaves_the_torch_references_cache(
    torch: ModuleType, kernel: ModuleType, qwen: ModuleType, accept: int
) -> None:
    transformers = _transformers_525()
    from transformers import DynamicCache

    model, cfg = _tiny_model(torch, transformers, torch.float32)
    switch = Switch(qwen, kernel)
    gen = torch.Generator().manual_seed(11)
    prompt = torch.randint(0, cfg.vocab_size, (2, 40), generator=gen).cuda()
    draft = torch.randint(0, cfg.vocab_size, (2, 4), generator=gen).cuda()
    linear = [i for i, t in enumerate(cfg.layer_types) if t == "linear_attention"]
    results = {}
    try:
        for ours in (False, True):
            switch.set(ours)
            cache = DynamicCache(config=cfg)
            logits = _speculative_round(torch, model, cache, prompt, draft, accept)
            # after the crop, one more token from the rolled-back state
            with torch.no_grad():
                nxt = model(draft[:, accept : accept + 1], cache=cache, use_cache=True).logits
            results[ours] = (logits, nxt, _cache_states(cache, linear), cache.get_seq_length())
    finally:
        switch.reset()
    (l_ref, n_ref, s_ref, len_ref), (l_ours, n_ours, s_ours, len_ours) = results[False], results[True]
    assert int(len_ours) == int(len_ref)
    assert rel_err(l_ours, l_ref) < 1e-4 and rel_err(n_ours, n_ref) < 1e-4
    for (conv, rec), (conv_ref, rec_ref) in zip(s_ours, s_ref):
        assert conv.shape == conv_ref.shape and rel_err(conv, conv_ref) < 1e-5
        assert rec.shape == rec_ref.shape and rel_err(rec, rec_ref) < 1e-4


# ---- causal_conv1d_forward: ggml's ssm_conv against transformers' torch conv in float64 -----------------------


def _conv(torch: ModuleType, C: int, K: int, bias: bool, seed: int) -> tuple[Any, Any]:
    torch.manual_seed(seed)
    conv = torch.nn.Conv1d(C, C, K, groups=C, padding=K - 1, bias=bias, device="cuda")
    conv64 = torch.nn.Conv1d(C, C, K, groups=C, padding=K - 1, bias=bias, device="cuda", dtype=torch.float64)
    conv64.load_state_dict({n: p.double() for n, p in conv.state_dict().items()})
    return conv, conv64


def _linear_cache(transformers: ModuleType, C: int, K: int) -> Any:  # a DynamicCache: its layers are read untyped
    """transformers' own cache of one linear-attention layer (what a Qwen3.5 model makes)."""
    from transformers import DynamicCache

    cfg = transformers.Qwen3_5TextConfig(
        num_hidden_layers=1, layer_types=["linear_attention"], linear_conv_kernel_dim=K, hidden_size=64
    )
    return DynamicCache(config=cfg)


@pytest.mark.parametrize("C,K", [(256, 4), (384, 3)])
@pytest.mark.parametrize("prompt", [2, 37, 300])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_causal_conv1d_forward_matches_transformers_in_float64(
    torch: ModuleType, kernel: ModuleType, qwen: ModuleType, C: int, K: int, prompt: int, dtype: str
) -> None:
    transformers = _transformers_525()
    ref_fn = _torch_function(qwen.causal_conv1d_forward)
    ours = kernel.layers.causal_conv1d_forward()
    assert kernel.supports_ssm_conv(K, C)
    dt = getattr(torch, dtype)
    conv, conv64 = _conv(torch, C, K, bias=False, seed=C + K)
    conv = conv.to(dt)
    conv64.load_state_dict({n: p.double() for n, p in conv.state_dict().items()})  # the bf16-rounded weights
    gen = torch.Generator(device="cuda").manual_seed(prompt)
    xs = [torch.randn(2, C, n, device="cuda", generator=gen).to(dt) for n in (prompt, 1, 1, 1, 5)]
    tol = 1e-5 if dtype == "float32" else 1e-2
    # no cache: one call
    got = ours(conv, xs[0], None, 0, activation="silu")
    want = ref_fn(conv64, xs[0].double(), None, 0, activation="silu")
    assert got.shape == want.shape and got.dtype == dt and rel_err(got, want) < tol
    # with a cache: prefill, three decode steps, then a 5-token call onto the cache
    c_ours, c_ref = _linear_cache(transformers, C, K), _linear_cache(transformers, C, K)
    for i, x in enumerate(xs):
        got = ours(conv, x, c_ours, 0, activation="silu")
        want = ref_fn(conv64, x.double(), c_ref, 0, activation="silu")
        assert got.shape == want.shape, i
        assert rel_err(got, want) < tol, (i, rel_err(got, want))
        s_ours, s_ref = c_ours.layers[0].conv_states[0], c_ref.layers[0].conv_states[0]
        assert s_ours.shape == s_ref.shape and rel_err(s_ours, s_ref) < tol, i
    assert int(c_ours.get_seq_length()) == int(c_ref.get_seq_length())


@pytest.mark.parametrize("activation", [None, "silu"])
def test_causal_conv1d_forward_with_bias(
    torch: ModuleType, kernel: ModuleType, qwen: ModuleType, activation: str | None
) -> None:
    _transformers_525()
    ref_fn = _torch_function(qwen.causal_conv1d_forward)
    conv, conv64 = _conv(torch, 128, 4, bias=True, seed=1)
    x = torch.randn(3, 128, 70, device="cuda")
    got = kernel.layers.causal_conv1d_forward()(conv, x, None, 0, activation=activation)
    want = ref_fn(conv64, x.double(), None, 0, activation=activation)
    assert rel_err(got, want) < 1e-5


def test_causal_conv1d_forward_falls_back_where_ggml_has_no_kernel(
    torch: ModuleType, kernel: ModuleType, qwen: ModuleType
) -> None:
    """A channel count that is not a multiple of ggml's block, and a kernel size it lacks: transformers' torch steps."""
    _transformers_525()
    ref_fn = _torch_function(qwen.causal_conv1d_forward)
    for C, K in ((100, 4), (128, 6)):
        assert not kernel.supports_ssm_conv(K, C)
        conv, conv64 = _conv(torch, C, K, bias=False, seed=2)
        x = torch.randn(2, C, 9, device="cuda")
        got = kernel.layers.causal_conv1d_forward()(conv, x, None, 0, activation="silu")
        assert rel_err(got, ref_fn(conv64, x.double(), None, 0, activation="silu")) < 1e-5


def test_ssm_conv_refuses_an_x_without_room_for_its_long_kernel(torch: ModuleType, kernel: ModuleType) -> None:
    """ggml's long-sequence kernel reads past x's last row; the op refuses an x whose buffer ends there."""
    x = torch.randn(1, 128, 3 + 40, device="cuda")  # 40 tokens: the long kernel, 24 columns past the end
    w = torch.randn(128, 4, device="cuda")
    with pytest.raises(ValueError, match="past the last row of x"):
        kernel.ssm_conv(x, w, silu=True)
    x_ok = kernel.ssm_conv_input(1, 128, 43, "cuda")
    x_ok.copy_(x)
    y = kernel.ssm_conv(x_ok, w, silu=True)
    want = torch.nn.functional.silu(torch.nn.functional.conv1d(x.double(), w.double().unsqueeze(1), groups=128))
    assert rel_err(y.transpose(1, 2), want) < 1e-5


# ---- the documented switch: from_pretrained(kernel_config=..., attn_implementation=...) from the local test Hub ---

GENERATE = textwrap.dedent(r"""
    import importlib.abc, json, sys, torch
    mode, model_dir = sys.argv[1], sys.argv[2]
    if mode == "torch":  # transformers' fallback: make fla unimportable so its torch functions run
        class _NoFla(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name == "fla" or name.startswith("fla."):
                    raise ImportError("fla is hidden for the torch baseline")
        sys.meta_path.insert(0, _NoFla())
    from transformers import AutoModelForCausalLM, KernelConfig
    repo = "test-org/ggml-attn-kernels"
    # transformers 5.25 turns Hub kernels on by default (use_kernels=None means True) and would fetch its own
    # mapping's repos (kernels-community/fla for RMSNormGated) for the baseline: the fallback is asked for by name.
    kw = {"use_kernels": False}
    if mode == "ours":  # README's switch for transformers 5.25, word for word
        meta = {"version": 1, "trust_remote_code": True}
        names = ("chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule", "causal_conv1d_forward")
        kw = dict(
            use_kernels=True,
            kernel_config=KernelConfig({n: (f"{repo}:{n}", meta) for n in names}, inherit_mapping=False),
            attn_implementation=repo,
            allow_all_kernels=True,
        )
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, device_map="cuda", **kw)
    ids = torch.randint(0, model.config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0)).cuda()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        out = model.generate(ids, max_new_tokens=128, min_new_tokens=128, do_sample=False, eos_token_id=None,
                             pad_token_id=0)
    ops = {}
    for e in prof.events():
        name = e.name.split("::")[-1]
        if e.name.startswith("_ggml_attn_kernels") and name in ("gated_delta_rule_", "ssm_conv", "flash_attn"):
            tokens = e.input_shapes[0][1] if name == "gated_delta_rule_" and e.input_shapes else None
            key = f"{name}[T={tokens}]" if name == "gated_delta_rule_" else name
            ops[key] = ops.get(key, 0) + 1
    print("RESULT " + json.dumps({"tokens": out[:, 16:].tolist(), "ops": ops,
                                   "attn": model.config._attn_implementation}))
""")


def _tiny_qwen35_hk_lt_hv(torch: ModuleType, transformers: ModuleType, path: Path) -> None:
    cfg = transformers.Qwen3_5TextConfig(
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
        linear_num_value_heads=8,  # Hk < Hv: 5.25 passes q/k un-repeated; conv channels 2*2*64 + 8*64 = 768
    )
    torch.manual_seed(1234)
    transformers.Qwen3_5ForCausalLM(cfg).save_pretrained(path)


def test_tiny_qwen35_switched_the_documented_way_generates_the_torch_tokens(
    torch: ModuleType, kernel: ModuleType, tmp_path: Path
) -> None:
    """transformers 5.25 + the local test Hub: `from_pretrained(kernel_config=KernelConfig({...conv included}),
    attn_implementation=repo)` on a Qwen3.5 with Hk < Hv gives the torch fallback's 128 greedy tokens in float32, and
    our ops did run (profiled by name: the prefill's and the decode's gated delta rule, ggml's ssm_conv)."""
    transformers = _transformers_525()
    from huggingface_hub import HfApi

    from tests.helpers.hubserver import HubServer, HubState
    from tests.helpers.machine import ATTN_BUILD
    from toolkit.publish.hub import lfs_only

    variant = next(p for p in sorted(ATTN_BUILD.glob("torch*-cu*")) if p.is_dir())
    _tiny_qwen35_hk_lt_hv(torch, transformers, tmp_path / "model")
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
        for mode in ("torch", "ours"):
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
    ops = results["ours"]["ops"]
    assert results["torch"]["ops"] == {}
    assert results["ours"]["attn"] == "test-org/ggml-attn-kernels"
    assert ops.get("gated_delta_rule_[T=16]", 0) >= 3 and ops.get("gated_delta_rule_[T=1]", 0) >= 3 * 127, ops
    assert ops.get("ssm_conv", 0) >= 3 * 128, ops  # every linear-attention layer, prefill and each decode step
    ours, ref = results["ours"]["tokens"], results["torch"]["tokens"]
    assert len(ours[0]) == 128
    first_diff = [next((i for i, (a, b) in enumerate(zip(x, y)) if a != b), None) for x, y in zip(ours, ref)]
    assert ours == ref, f"greedy tokens differ from the torch fallback at positions {first_diff}"
