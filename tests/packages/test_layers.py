"""The transformers hooks of the kernel package, on a CPU: the Hub layers (`layers.chunk_gated_delta_rule`,
`fused_recurrent_gated_delta_rule`, `chunk_kda`, `fused_recurrent_kda`) and `flash_attn_forward`.

The package is the one `ggml-vendor build` makes (the built_binding fixture: the rendered sources compiled
against the miniature upstream), loaded through kernels.get_local_kernel in a fresh process. Checked there:
every layer passes kernels' own layer validation against the module transformers (5.22.2 or 5.25.0) builds from
its torch function (5.25 adds the causal_conv1d_forward hook), with the same parameter names, kinds and defaults; the layers run on meta tensors through the ops'
fake implementations (shapes, output dtype, the final state as a transposed view of ggml's [value][key]
state, a new final state rather than the caller's written in place, the refusals); flash_attn_forward has transformers' attention
signature and, where ggml's kernel does not apply (here: CPU tensors), gives exactly what transformers' own
sdpa_attention_forward gives. The numbers of the kernels themselves are tests/gpu/test_layers.py's.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.machine import binding_build_unavailable
from tests.helpers.script import run_result_script

pytestmark: pytest.MarkDecorator | list[pytest.MarkDecorator] = pytest.mark.slow


def _why_not() -> str | None:
    why = binding_build_unavailable()
    if why:
        return why
    try:
        import transformers
    except ImportError:
        return "transformers is not installed (pip install -e '.[transformers]')"
    if transformers.__version__ not in ("5.22.2", "5.25.0"):
        return f"transformers {transformers.__version__} is installed; these checks pin 5.22.2 and 5.25.0"
    return None


_SKIP = _why_not()
if _SKIP:
    pytestmark = [pytest.mark.slow, pytest.mark.skip(reason=_SKIP)]

# (our layer, transformers module, the module-level name transformers wraps with its Hub hook)
PAIRS = [
    ("chunk_gated_delta_rule", "qwen3_5", "torch_chunk_gated_delta_rule"),
    ("fused_recurrent_gated_delta_rule", "qwen3_5", "torch_recurrent_gated_delta_rule"),
    ("chunk_gated_delta_rule", "qwen3_next", "torch_chunk_gated_delta_rule"),
    ("fused_recurrent_gated_delta_rule", "qwen3_next", "torch_recurrent_gated_delta_rule"),
    ("chunk_kda", "kimi_linear", "chunk_kimi_delta_attention"),
    ("fused_recurrent_kda", "kimi_linear", "recurrent_kimi_delta_attention"),
]
# transformers 5.25's new hook: the causal depthwise convolution of the linear-attention layers
PAIRS_525 = [
    ("causal_conv1d_forward", "qwen3_5", "causal_conv1d_forward"),
    ("causal_conv1d_forward", "qwen3_next", "causal_conv1d_forward"),
    ("causal_conv1d_forward", "olmo_hybrid", "causal_conv1d_forward"),
    ("causal_conv1d_forward", "kimi_linear", "causal_conv1d_forward"),
]
if not _SKIP:
    import transformers

    if transformers.__version__ == "5.25.0":
        PAIRS = PAIRS + PAIRS_525

CHECKS = textwrap.dedent(r"""
    import importlib, inspect, json, sys
    from pathlib import Path
    import torch, kernels
    from toolkit.core.kernels_client import validate_layer as _validate_layer
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    m = kernels.get_local_kernel(Path(sys.argv[1]) / "build" / "ggml-attn-kernels")
    pairs = json.loads(sys.argv[2])
    r = {"pairs": {}}

    def params(fn):
        return [[p.name, p.kind.name, None if p.default is inspect.Parameter.empty else repr(p.default)]
                for p in inspect.signature(fn).parameters.values()]

    for ours, module, name in pairs:
        wrapped = getattr(importlib.import_module(f"transformers.models.{module}.modeling_{module}"), name)
        check_cls = type(wrapped)  # the nn.Module kernels made of transformers' torch function
        fwd = check_cls.forward
        cells = dict(zip(fwd.__code__.co_freevars, (c.cell_contents for c in fwd.__closure__ or ())))
        layer = getattr(m.layers, ours)
        try:
            _validate_layer(check_cls=check_cls, cls=layer, repo=f"local:{ours}")
            verdict = "ok"
        except Exception as e:  # noqa: BLE001
            verdict = f"{type(e).__name__}: {e}"
        r["pairs"][f"{module}.{name}"] = {
            "layer": ours, "validate": verdict, "hub_name": check_cls.kernel_layer_name,
            "ours": params(layer.forward)[1:], "theirs": params(inspect.unwrap(cells["func"])),
            "members": sorted(set(dir(layer)) - set(dir(torch.nn.Module))),
        }

    r["fa_params"] = params(m.flash_attn_forward)[:8]
    r["sdpa_params"] = params(sdpa_attention_forward)[:8]

    # ---- meta tensors: the ops' fake implementations carry the shapes through the layers --------------------
    mk = lambda *s, dt=torch.float32: torch.empty(*s, device="meta", dtype=dt)
    B, T, Hk, H, D = 2, 5, 2, 4, 128
    q, k, v = mk(B, T, Hk, D, dt=torch.bfloat16), mk(B, T, Hk, D, dt=torch.bfloat16), mk(B, T, H, D, dt=torch.bfloat16)
    g, beta = mk(B, T, H), mk(B, T, H, dt=torch.bfloat16)
    chunk, rec = m.layers.chunk_gated_delta_rule(), m.layers.fused_recurrent_gated_delta_rule()
    out, st = chunk(q, k, v, g=g, beta=beta, initial_state=None, output_final_state=True,
                    use_qk_l2norm_in_kernel=True, cu_seqlens=None)
    r["meta"] = {"out": [list(out.shape), str(out.dtype)], "state": [list(st.shape), str(st.dtype)],
                 "state_vk_contiguous": st.transpose(-1, -2).is_contiguous(), "state_contiguous": st.is_contiguous()}
    one = lambda t: t[:, :1]
    out1, st1 = rec(one(q), one(k), one(v), g=one(g), beta=one(beta), initial_state=st, output_final_state=True,
                    use_qk_l2norm_in_kernel=True)
    r["meta"]["recurrent_returns_the_same_state"] = st1 is st
    r["meta"]["recurrent_out"] = list(out1.shape)
    kv_state = mk(B, H, D, D)  # a cache's own [key][value] buffer: converted, not mutated
    _, st2 = rec(one(q), one(k), one(v), g=one(g), beta=one(beta), initial_state=kv_state, output_final_state=True)
    r["meta"]["kv_buffer"] = [st2 is kv_state, list(st2.shape), st2.transpose(-1, -2).is_contiguous()]
    _, none_state = rec(one(q), one(k), one(v), g=one(g), beta=one(beta), initial_state=st, output_final_state=False)
    r["meta"]["no_final_state"] = none_state is None
    qh = mk(B, 1, H, D, dt=torch.bfloat16)
    kda_out, kda_st = m.layers.fused_recurrent_kda()(qh, qh, one(v), mk(B, 1, H, D), one(beta), None, True,
                                                      use_qk_l2norm_in_kernel=True)
    r["meta"]["kda"] = [list(kda_out.shape), list(kda_st.shape)]

    def err(fn):
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            return f"{type(e).__name__}: {e}"
        return "no error"

    r["errors"] = {
        "cu_seqlens": err(lambda: chunk(q, k, v, g, beta, cu_seqlens=torch.tensor([0, 3, 5]))),
        "dk_ne_dv": err(lambda: chunk(mk(1, 1, 1, 64), mk(1, 1, 1, 64), mk(1, 1, 1, 128), mk(1, 1, 1), mk(1, 1, 1))),
        "heads": err(lambda: chunk(mk(1, 1, 3, 64), mk(1, 1, 3, 64), mk(1, 1, 4, 64), mk(1, 1, 4), mk(1, 1, 4))),
        "head_dim": err(lambda: chunk(mk(1, 1, 1, 96), mk(1, 1, 1, 96), mk(1, 1, 1, 96), mk(1, 1, 1), mk(1, 1, 1))),
    }

    # ---- flash_attn_forward: the SDPA path (CPU tensors) against transformers' own sdpa_attention_forward -------
    class Attn(torch.nn.Module):
        is_causal = True
        num_key_value_groups = 4

    mod, gen = Attn(), torch.Generator().manual_seed(0)
    rnd = lambda *s: torch.randn(*s, generator=gen)
    cases = {}
    for label, n_q, n_kv, mask in (
        ("prefill_causal_none", 6, 6, None),
        ("decode_none", 1, 9, None),
        ("bool_padding_mask", 3, 9, torch.rand(2, 1, 3, 9, generator=gen) > 0.3),
        ("static_cache_causal_none", 4, 16, None),
    ):
        qq, kk, vv = rnd(2, 8, n_q, 64), rnd(2, 2, n_kv, 64), rnd(2, 2, n_kv, 64)
        if mask is not None:
            mask[..., 0] = True
        ours, w = m.flash_attn_forward(mod, qq, kk, vv, mask, dropout=0.0, scaling=0.125)
        ref, _ = sdpa_attention_forward(mod, qq, kk, vv, mask, dropout=0.0, scaling=0.125)
        cases[label] = [list(ours.shape), w is None, float((ours - ref).abs().max())]
    r["fa_cpu"] = cases
    r["fa_softcap"] = err(lambda: m.flash_attn_forward(mod, rnd(1, 8, 1, 64), rnd(1, 2, 4, 64), rnd(1, 2, 4, 64),
                                                       None, softcap=30.0))

    # ---- torch.compile(fullgraph=True) traces a decode step through both hooks: no graph break ----------------
    def step(q1, k1, v1, g1, b1, state, fq, fk, fv):
        o, s = rec(q1, k1, v1, g=g1, beta=b1, initial_state=state, output_final_state=True,
                   use_qk_l2norm_in_kernel=True)
        a, _ = m.flash_attn_forward(mod, fq, fk, fv, None, dropout=0.0, scaling=0.0625)
        return o, s, a

    fa_in = (mk(2, 16, 1, 256, dt=torch.bfloat16), mk(2, 4, 300, 256, dt=torch.bfloat16),
             mk(2, 4, 300, 256, dt=torch.bfloat16))
    got = torch.compile(step, fullgraph=True, backend="aot_eager")(one(q), one(k), one(v), one(g), one(beta),
                                                                   mk(B, H, D, D).transpose(-1, -2), *fa_in)
    r["compiled"] = [[list(t.shape), str(t.dtype)] for t in got]
    print("RESULT " + json.dumps(r))
""")


@pytest.fixture(scope="module")
def checks(built_binding: tuple[Path, dict[str, Any]]) -> dict[str, Any]:
    root, _ = built_binding
    return run_result_script(CHECKS, str(root), json.dumps(PAIRS), timeout=600)


@pytest.mark.parametrize("ours,module,name", PAIRS)
def test_layer_passes_kernels_validation_with_transformers_signature(
    checks: dict[str, Any], ours: str, module: str, name: str
) -> None:
    got = checks["pairs"][f"{module}.{name}"]
    assert got["validate"] == "ok"
    # the name transformers asks the Hub for is the class name here (kernel_config maps it to "<repo>:<name>")
    assert got["hub_name"] == ours
    # stricter than kernels' check (count and kinds): names and defaults too
    assert got["ours"] == got["theirs"]
    assert got["members"] == ["can_torch_compile", "has_backward"]


def test_flash_attn_forward_has_transformers_attention_signature(checks: dict[str, Any]) -> None:
    assert checks["fa_params"] == checks["sdpa_params"]
    assert [p[0] for p in checks["fa_params"]] == [
        "module",
        "query",
        "key",
        "value",
        "attention_mask",
        "dropout",
        "scaling",
        "is_causal",
    ]


def test_layers_on_meta_tensors_shapes_dtypes_and_state_layout(checks: dict[str, Any]) -> None:
    meta = checks["meta"]
    assert meta["out"] == [[2, 5, 4, 128], "torch.bfloat16"]  # query's dtype
    assert meta["state"] == [[2, 4, 128, 128], "torch.float32"]  # transformers' [B, Hv, Dk, Dv]
    # ... as a transposed view of ggml's contiguous [value][key] state
    assert meta["state_vk_contiguous"] is True and meta["state_contiguous"] is False
    # a new state, never the caller's tensor written in place: transformers 5.25 keeps the states it hands over
    assert meta["recurrent_returns_the_same_state"] is False
    assert meta["recurrent_out"] == [2, 1, 4, 128]
    assert meta["kv_buffer"] == [False, [2, 4, 128, 128], True]
    assert meta["no_final_state"] is True
    assert meta["kda"] == [[2, 1, 4, 128], [2, 4, 128, 128]]


def test_layers_refuse_what_ggml_cannot_do_with_a_clear_error(checks: dict[str, Any]) -> None:
    e = checks["errors"]
    assert e["cu_seqlens"].startswith("ValueError: chunk_gated_delta_rule: cu_seqlens (packed")
    assert e["dk_ne_dv"].startswith("ValueError: chunk_gated_delta_rule: key head dim 64 != value head dim 128")
    assert e["heads"].startswith("ValueError: chunk_gated_delta_rule: value has 4 heads, which is not a multiple")
    assert e["head_dim"].startswith("ValueError: gated_delta_net") and "head_dim 96" in e["head_dim"]


def test_a_decode_step_through_both_hooks_compiles_with_fullgraph(checks: dict[str, Any]) -> None:
    assert checks["compiled"] == [
        [[2, 1, 4, 128], "torch.bfloat16"],
        [[2, 4, 128, 128], "torch.float32"],
        [[2, 1, 16, 256], "torch.bfloat16"],
    ]


def test_flash_attn_forward_sdpa_path_equals_transformers_sdpa(checks: dict[str, Any]) -> None:
    cases = checks["fa_cpu"]
    assert set(cases) == {"prefill_causal_none", "decode_none", "bool_padding_mask", "static_cache_causal_none"}
    for label, (shape, weights_none, diff) in cases.items():
        assert shape[0] == 2 and shape[2] == 8 and shape[3] == 64, label  # [B, q, H, D]
        assert weights_none, label
        assert diff < 1e-6, (label, diff)
    assert checks["fa_softcap"].startswith("ValueError: flash_attn_forward: softcap is not supported")


# ---- under inductor (what transformers' default CompileConfig runs), on a CPU -------------------------------------
# The decode step as transformers' static cache runs it: our layer with the cache's recurrent buffer as
# initial_state (laid out the way the cache makes it from our prefill: zeros_like of the [value][key] state's
# transposed view), then the cache's `copy_` of the returned state onto that buffer. The built CPU kernels refuse
# CPU tensors, so the child registers a torch test double for gated_delta_net (the recurrence in plain torch,
# out of place, as the op's schema declares); what is checked is what inductor makes of the layers' glue around
# the opaque op: the op reads the cache's own buffer (no clone, no state-sized buffer of inductor's), the cache's
# copy_ is the only state write, the numbers equal the uncompiled step's, and
# flash_attn_forward (traced on meta tensors, where the op's fake runs) hands the op a float32 q and a float16 mask
# converted in the graph.
INDUCTOR = textwrap.dedent(r"""
    import json, re, sys
    from pathlib import Path
    import torch, kernels
    from torch._inductor.utils import run_and_get_code

    m = kernels.get_local_kernel(Path(sys.argv[1]) / "build" / "ggml-attn-kernels")
    lib = torch.library.Library(m.__name__, "IMPL")

    def gdn_(q, k, v, g, beta, state):
        B, T, H, D = v.shape
        out = torch.empty_like(v)
        for t in range(T):
            state.mul_(g[:, t].exp()[:, :, None, None])
            kv = (state * k[:, t, :, None, :]).sum(-1)
            state.add_(((v[:, t] - kv) * beta[:, t, :, None])[..., None] * k[:, t, :, None, :])
            out[:, t] = (state * q[:, t, :, None, :]).sum(-1) * D ** -0.5
        return out

    def gdn(q, k, v, g, beta, state):
        new = state.clone()
        return gdn_(q, k, v, g, beta, new), new

    seen = []
    lib.impl("gated_delta_net", gdn, "CPU", allow_override=True)
    rec = m.layers.fused_recurrent_gated_delta_rule()
    B, H, D = 1, 4, 128

    def step(q, k, v, g, beta, cache):
        o, s = rec(q, k, v, g=g, beta=beta, initial_state=cache, output_final_state=True, use_qk_l2norm_in_kernel=True)
        cache.copy_(s)  # transformers' update_recurrent_state
        return o

    torch.manual_seed(0)
    bf = dict(dtype=torch.bfloat16)
    args = [torch.randn(B, 1, H, D, **bf) for _ in range(3)] + [-torch.rand(B, 1, H), torch.rand(B, 1, H, **bf)]
    cache0 = torch.zeros_like(torch.empty(B, H, D, D).transpose(-1, -2)).normal_()
    eager_cache, compiled_cache = cache0.clone(), cache0.clone()
    eager_out = step(*args, eager_cache)
    out, code = run_and_get_code(torch.compile(step, fullgraph=True, backend="inductor"), *args, compiled_cache)
    text = "\n".join(code)
    state_shape = re.escape(str(tuple(cache0.shape)))
    # the graph input that is the cache buffer (the wrapper's benchmark harness names each input with its shape)
    cache_in = re.search(r"(\w+) = rand_strided\(" + state_shape + r", " + re.escape(str(cache0.stride())), text)
    call = re.search(r"gated_delta_net\.default\((.*)\)", text)
    r = {
        "out_diff": float((out.float() - eager_out.float()).abs().max()),
        "cache_diff": float((compiled_cache - eager_cache).abs().max()),
        "cache_moved": float((compiled_cache - cache0).abs().max()),
        "cache_strides": list(compiled_cache.stride()),
        "state_buffers": len(re.findall(r"empty_strided\w*\(" + state_shape, text)),
        "op_called": call is not None,
        # the op's state argument is the cache's own buffer (a clone would hand it a buffer of inductor's)
        "op_on_cache": bool(cache_in and call and re.search(r"\b" + cache_in.group(1) + r"\b", call.group(1))),
    }

    # flash_attn_forward on the op's path (meta tensors: the op's fake runs), traced as inductor receives it
    def record(gm, example_inputs):
        for node in gm.graph.nodes:
            if node.op == "call_function" and "flash_attn" in str(node.target):
                q_arg, mask_arg = node.args[0], node.args[3]
                seen.append([str(q_arg.meta["example_value"].dtype), str(mask_arg.meta["example_value"].dtype)])
        return gm.forward

    def fwd(q, k, v, mask):
        return m.flash_attn_forward(torch.nn.Module(), q, k, v, mask, dropout=0.0, scaling=0.0625)[0]

    meta = dict(device="meta", dtype=torch.bfloat16)
    fa_in = (torch.empty(2, 16, 1, 256, **meta), torch.empty(2, 4, 40, 256, **meta), torch.empty(2, 4, 40, 256, **meta))
    seen.clear()
    got = torch.compile(fwd, fullgraph=True, backend=record)(*fa_in, torch.empty(2, 1, 1, 40, device="meta", dtype=torch.bool))
    r["fa_traced_inputs"] = seen
    r["fa_out"] = [list(got.shape), str(got.dtype)]
    print("RESULT " + json.dumps(r))
""")


@pytest.fixture(scope="module")
def inductor_checks(built_binding: tuple[Path, dict[str, Any]]) -> dict[str, Any]:
    root, _ = built_binding
    return run_result_script(INDUCTOR, str(root), timeout=900)


def test_inductor_hands_the_cache_buffer_to_the_op_without_a_clone(inductor_checks: dict[str, Any]) -> None:
    r = inductor_checks
    assert r["op_called"], "the compiled step no longer calls gated_delta_net"
    assert r["op_on_cache"], "gated_delta_net no longer reads the cache's buffer itself (a copy of the state)"
    assert r["state_buffers"] == 0, "inductor allocates a state-sized buffer: the state is cloned or copied"
    assert r["cache_moved"] > 0.1  # the decode step did update the cache's buffer ...
    assert r["cache_diff"] < 1e-5 and r["out_diff"] < 1e-2  # ... exactly as the uncompiled step does
    assert r["cache_strides"] == [65536, 16384, 1, 128]  # still the [value][key] buffer transformers holds


def test_flash_attn_forward_converts_q_and_mask_in_the_traced_graph(inductor_checks: dict[str, Any]) -> None:
    # bf16 q and transformers' bool mask reach the op as float32 and float16, converted where inductor fuses them
    assert inductor_checks["fa_traced_inputs"] == [["torch.float32", "torch.float16"]]
    assert inductor_checks["fa_out"] == [[2, 1, 16, 256], "torch.bfloat16"]
