"""The transformers hooks of the kernel package, on a CPU: the Hub layers (`layers.chunk_gated_delta_rule`,
`fused_recurrent_gated_delta_rule`, `chunk_kda`, `fused_recurrent_kda`) and `flash_attn_forward`.

The package is the one `ggml-vendor build` makes (the built_binding fixture: the rendered sources compiled
against the miniature upstream), loaded through kernels.get_local_kernel in a fresh process. Checked there:
every layer passes kernels' own layer validation against the module transformers (5.22.2) builds from its torch
function, with the same parameter names, kinds and defaults; the layers run on meta tensors through the ops'
fake implementations (shapes, output dtype, the final state as a transposed view of ggml's [value][key]
state, the in-place update of such a state, the refusals); flash_attn_forward has transformers' attention
signature and, where ggml's kernel does not apply (here: CPU tensors), gives exactly what transformers' own
sdpa_attention_forward gives. The numbers of the kernels themselves are tests/gpu/test_layers.py's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests.helpers.machine import binding_build_unavailable

pytestmark = pytest.mark.slow


def _why_not() -> str | None:
    why = binding_build_unavailable()
    if why:
        return why
    try:
        import transformers
    except ImportError:
        return "transformers is not installed (pip install -e '.[transformers]')"
    if transformers.__version__ != "5.22.2":
        return f"transformers {transformers.__version__} is installed; these checks pin 5.22.2"
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

CHECKS = textwrap.dedent(r"""
    import importlib, inspect, json, sys
    from pathlib import Path
    import torch, kernels
    from kernels.layer.layer import _validate_layer
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    m = kernels.get_local_kernel(Path(sys.argv[1]))
    pairs = json.loads(sys.argv[2])
    r = {"pairs": {}}

    def params(fn):
        return [[p.name, p.kind.name, None if p.default is inspect.Parameter.empty else repr(p.default)]
                for p in inspect.signature(fn).parameters.values()]

    for ours, module, name in pairs:
        wrapped = getattr(importlib.import_module(f"transformers.models.{module}.modeling_{module}"), name)
        check_cls = type(wrapped)  # the nn.Module kernels made of transformers' torch function
        layer = getattr(m.layers, ours)
        try:
            _validate_layer(check_cls=check_cls, cls=layer, repo=f"local:{ours}")
            verdict = "ok"
        except Exception as e:  # noqa: BLE001
            verdict = f"{type(e).__name__}: {e}"
        r["pairs"][f"{module}.{name}"] = {
            "layer": ours, "validate": verdict, "hub_name": check_cls.kernel_layer_name,
            "ours": params(layer.forward)[1:], "theirs": params(inspect.unwrap(check_cls.forward.__closure__[0].cell_contents)),
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
def checks(built_binding) -> dict:
    root, _ = built_binding
    res = subprocess.run(
        [sys.executable, "-c", CHECKS, str(root), json.dumps(PAIRS)], capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0, res.stdout + res.stderr
    line = next(x for x in res.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


@pytest.mark.parametrize("ours,module,name", PAIRS)
def test_layer_passes_kernels_validation_with_transformers_signature(checks, ours, module, name) -> None:
    got = checks["pairs"][f"{module}.{name}"]
    assert got["validate"] == "ok"
    # the name transformers asks the Hub for is the class name here (kernel_config maps it to "<repo>:<name>")
    assert got["hub_name"] == ours
    # stricter than kernels' check (count and kinds): names and defaults too
    assert got["ours"] == got["theirs"]
    assert got["members"] == ["can_torch_compile", "has_backward"]


def test_flash_attn_forward_has_transformers_attention_signature(checks) -> None:
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


def test_layers_on_meta_tensors_shapes_dtypes_and_state_layout(checks) -> None:
    meta = checks["meta"]
    assert meta["out"] == [[2, 5, 4, 128], "torch.bfloat16"]  # query's dtype
    assert meta["state"] == [[2, 4, 128, 128], "torch.float32"]  # transformers' [B, Hv, Dk, Dv]
    # ... as a transposed view of ggml's contiguous [value][key] state
    assert meta["state_vk_contiguous"] is True and meta["state_contiguous"] is False
    assert meta["recurrent_returns_the_same_state"] is True  # updated in place: a cache's copy_ onto itself
    assert meta["recurrent_out"] == [2, 1, 4, 128]
    assert meta["kv_buffer"] == [False, [2, 4, 128, 128], True]
    assert meta["no_final_state"] is True
    assert meta["kda"] == [[2, 1, 4, 128], [2, 4, 128, 128]]


def test_layers_refuse_what_ggml_cannot_do_with_a_clear_error(checks) -> None:
    e = checks["errors"]
    assert e["cu_seqlens"].startswith("ValueError: chunk_gated_delta_rule: cu_seqlens (packed")
    assert e["dk_ne_dv"].startswith("ValueError: chunk_gated_delta_rule: key head dim 64 != value head dim 128")
    assert e["heads"].startswith("ValueError: chunk_gated_delta_rule: value has 4 heads, which is not a multiple")
    assert e["head_dim"].startswith("ValueError: gated_delta_net") and "head_dim 96" in e["head_dim"]


def test_a_decode_step_through_both_hooks_compiles_with_fullgraph(checks) -> None:
    assert checks["compiled"] == [
        [[2, 1, 4, 128], "torch.bfloat16"],
        [[2, 4, 128, 128], "torch.float32"],
        [[2, 1, 16, 256], "torch.bfloat16"],
    ]


def test_flash_attn_forward_sdpa_path_equals_transformers_sdpa(checks) -> None:
    cases = checks["fa_cpu"]
    assert set(cases) == {"prefill_causal_none", "decode_none", "bool_padding_mask", "static_cache_causal_none"}
    for label, (shape, weights_none, diff) in cases.items():
        assert shape[0] == 2 and shape[2] == 8 and shape[3] == 64, label  # [B, q, H, D]
        assert weights_none, label
        assert diff < 1e-6, (label, diff)
    assert checks["fa_softcap"].startswith("ValueError: flash_attn_forward: softcap is not supported")
