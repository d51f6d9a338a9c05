"""The rendered CUDA binding compiled for real against the miniature upstream (toolkit/data/mini-upstream,
test doubles written by us with ggml's launcher names and signatures): sync (embedded) -> render -> build,
then, in a fresh process, what needs no GPU: the variant loads through kernels.get_local_kernel, every op is
registered under the build's namespace, supports_* answer from the compiled instances, the fake (meta)
implementations give the right shapes and reject bad arguments naming them, torch.compile(fullgraph=True)
traces both ops, and CPU tensors get a clear error. Also: the .so exports only its module init (hidden
visibility) and defines the ggml shim symbols itself.

Skipped, with the reason, where nvcc or a CUDA build of torch is missing (the GPU half is
tests/gpu/test_ops.py).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.machine import binding_build_unavailable
from tests.helpers.script import run_result_script

REPO = Path(__file__).resolve().parents[2]
pytestmark: pytest.MarkDecorator | list[pytest.MarkDecorator] = pytest.mark.slow

_SKIP = binding_build_unavailable()
if _SKIP:
    pytestmark = [pytest.mark.slow, pytest.mark.skip(reason=_SKIP)]


@pytest.fixture(scope="module")
def built(built_binding: tuple[Path, dict[str, Any]]) -> tuple[Path, dict[str, Any]]:
    return built_binding


CHECKS = textwrap.dedent(r"""
    import json, sys, torch, kernels
    from pathlib import Path
    m = kernels.get_local_kernel(Path(sys.argv[1]) / "build" / "ggml-attn-kernels")
    ns = getattr(torch.ops, m.__name__)
    r = {"name": m.__name__, "all": sorted(m.__all__)}
    r["registered"] = sorted(n for n in ("gated_delta_net", "gated_delta_net_", "flash_attn", "gated_delta_rule_",
                                         "supports_gated_delta_net", "supports_flash_attn", "ssm_conv",
                                         "supports_ssm_conv") if hasattr(ns, n))
    r["conv"] = {f"{k},{c}": m.supports_ssm_conv(k, c) for k, c in [(4, 128), (4, 8192), (3, 256), (5, 128),
                                                                   (9, 128), (15, 128), (2, 128), (6, 128),
                                                                   (4, 100), (4, 0)]}
    r["gdn_dims"] = [d for d in range(0, 300) if m.supports_gated_delta_net(d)]
    r["fa"] = {f"{n},{dk},{dv}": m.supports_flash_attn(n, dk, dv)
               for n, dk, dv in [(1, 64, 64), (1, 128, 128), (19, 256, 256), (20, 128, 128), (0, 128, 128),
                                 (1, 96, 96), (1, 128, 64), (2, 512, 512)]}
    mk = lambda *s, dt=torch.float32: torch.empty(*s, device="meta", dtype=dt)
    B, T, Hk, H, D = 2, 5, 4, 8, 128
    gdn = (mk(B, T, Hk, D), mk(B, T, Hk, D), mk(B, T, H, D), mk(B, T, H), mk(B, T, H), mk(B, H, D, D))
    out, st = m.gated_delta_net(*gdn)
    r["gdn_shapes"] = [list(out.shape), list(st.shape)]
    kda = list(gdn); kda[3] = mk(B, T, H, D)
    r["kda_shape"] = list(m.gated_delta_net(*kda)[0].shape)
    fa = (mk(2, 16, 3, 256), mk(2, 4, 1000, 256, dt=torch.float16), mk(2, 4, 1000, 256, dt=torch.float16))
    o = m.flash_attn(*fa, mk(2, 1, 3, 1000, dt=torch.float16))
    r["fa_shape"], r["fa_dtype"] = list(o.shape), str(o.dtype)
    r["conv_shape"] = list(m.ssm_conv(mk(2, 256, 3 + 7), mk(256, 4), None, silu=True).shape)

    def err(fn):
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            return f"{type(e).__name__}: {e}"
        return "no error"

    bad = dict(
        q_dtype=lambda: m.gated_delta_net(gdn[0].half(), *gdn[1:]),
        state_shape=lambda: m.gated_delta_net(*gdn[:5], mk(B, H, D, 64)),
        head_dim=lambda: m.gated_delta_net(mk(1, 1, 1, 96), mk(1, 1, 1, 96), mk(1, 1, 1, 96), mk(1, 1, 1),
                                           mk(1, 1, 1), mk(1, 1, 96, 96)),
        k_strides=lambda: m.gated_delta_net(gdn[0], mk(B, Hk, T, D).transpose(1, 2), *gdn[2:]),
        beta_shape=lambda: m.gated_delta_net(*gdn[:4], mk(B, T), gdn[5]),
        fa_n_q=lambda: m.flash_attn(mk(1, 4, 20, 128), mk(1, 4, 256, 128, dt=torch.float16),
                                    mk(1, 4, 256, 128, dt=torch.float16)),
        fa_k_dtype=lambda: m.flash_attn(mk(1, 4, 1, 128), mk(1, 4, 256, 128), mk(1, 4, 256, 128)),
        fa_mask_heads=lambda: m.flash_attn(*fa, mk(2, 16, 3, 1000)),
        fa_gqa=lambda: m.flash_attn(mk(1, 6, 1, 128), mk(1, 4, 256, 128, dt=torch.float16),
                                    mk(1, 4, 256, 128, dt=torch.float16)),
        cpu=lambda: m.gated_delta_net(*(torch.zeros(t.shape) for t in gdn)),
        cpu_fa=lambda: m.flash_attn(torch.zeros(1, 4, 1, 128), torch.zeros(1, 4, 256, 128).half(),
                                    torch.zeros(1, 4, 256, 128).half()),
        conv_dtype=lambda: m.ssm_conv(mk(1, 128, 10, dt=torch.bfloat16), mk(128, 4)),
        conv_short=lambda: m.ssm_conv(mk(1, 128, 3), mk(128, 4)),
        cpu_conv=lambda: m.ssm_conv(torch.zeros(1, 128, 10), torch.zeros(128, 4)),
    )
    r["errors"] = {k: err(f) for k, f in bad.items()}

    def step(q, k, v, g, beta, state, fq, fk, fv):
        o, s = m.gated_delta_net(q, k, v, g, beta, state)
        o2, _ = m.gated_delta_net(q, k, v, g, beta, s, inplace=True)
        a = m.flash_attn(fq, fk, fv) if m.supports_flash_attn(1, 256, 256) else fq
        return o + o2, s, a

    res = torch.compile(step, fullgraph=True, backend="aot_eager")(*gdn, mk(1, 16, 1, 256),
                                                                   mk(1, 4, 4096, 256, dt=torch.float16),
                                                                   mk(1, 4, 4096, 256, dt=torch.float16))
    r["compiled_shapes"] = [list(t.shape) for t in res]
    print("RESULT " + json.dumps(r))
""")


@pytest.fixture(scope="module")
def checks(built: tuple[Path, dict[str, Any]]) -> dict[str, Any]:
    root, _ = built
    return run_result_script(CHECKS, str(root), timeout=600)


def test_the_variant_is_built_with_the_binding(built: tuple[Path, dict[str, Any]]) -> None:
    root, report = built
    [variant] = report["variants"]
    assert variant["result"] == "built"
    out = root / variant["out_dir"]
    assert {p.name for p in out.iterdir()} >= {"metadata.json", "__init__.py", "_ops.py", f"{variant['id']}.abi3.so"}
    ops_py = (out / "_ops.py").read_text()
    assert "@OPS_NAME@" not in ops_py and f"torch.ops.{variant['id']}" in ops_py
    assert json.loads((out / "metadata.json").read_text())["backend"] == {"type": "cuda", "archs": ["8.0"]}


def test_the_extension_defines_the_shim_and_exports_only_its_init(built: tuple[Path, dict[str, Any]]) -> None:
    root, report = built
    [variant] = report["variants"]
    so = root / variant["out_dir"] / f"{variant['id']}.abi3.so"
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm is not installed")
    dynamic = subprocess.run([nm, "-D", "--defined-only", str(so)], capture_output=True, text=True).stdout
    assert f"PyInit_{variant['id']}" in dynamic
    assert "ggml_abort" not in dynamic and "ggml_vendor_gdn_launch" not in dynamic  # hidden
    # The shipped library is stripped (no static symbol table, no debug info: reproducible and free of the
    # builder's paths), so the shim is checked where a missing definition would show: a shared library links
    # with undefined symbols, and they would be left as undefined imports in its dynamic table.
    static = subprocess.run([nm, str(so)], capture_output=True, text=True)
    assert "no symbols" in static.stderr + static.stdout, "the shipped .so still carries its static symbol table"
    undefined = subprocess.run([nm, "-D", "-C", "-u", str(so)], capture_output=True, text=True).stdout
    assert "at::" in undefined or "c10::" in undefined  # the table is read: torch's symbols are imported
    for sym in ("ggml_abort", "ggml_cuda_info()", "ggml_cuda_get_device()", "ggml_cuda_error("):
        assert sym not in undefined, sym


def test_ops_are_registered_under_the_variant_namespace(checks: dict[str, Any]) -> None:
    assert checks["name"].startswith("_ggml_attn_kernels_cuda_")
    assert checks["registered"] == [
        "flash_attn",
        "gated_delta_net",
        "gated_delta_net_",
        "gated_delta_rule_",
        "ssm_conv",
        "supports_flash_attn",
        "supports_gated_delta_net",
        "supports_ssm_conv",
    ]
    assert checks["all"] == [
        "flash_attn",
        "flash_attn_forward",
        "gated_delta_net",
        "layers",
        "ssm_conv",
        "ssm_conv_input",
        "supports_flash_attn",
        "supports_gated_delta_net",
        "supports_ssm_conv",
    ]


def test_supports_answers_from_the_compiled_instances(checks: dict[str, Any]) -> None:
    from toolkit.core import package_facts

    facts = package_facts.load(
        Path(__file__).resolve().parents[2] / "templates" / "ggml-attn-kernels", "ggml-attn-kernels"
    )

    assert tuple(checks["gdn_dims"]) == facts.GDN_CUDA_HEAD_DIMS
    assert checks["fa"] == {
        "1,64,64": True,
        "1,128,128": True,
        "19,256,256": True,
        "20,128,128": False,
        "0,128,128": False,
        "1,96,96": False,
        "1,128,64": False,
        "2,512,512": False,
    }
    # ggml's ssm_conv: its kernel sizes, channels in blocks of its 128 threads
    assert {k for k, ok in checks["conv"].items() if ok} == {"4,128", "4,8192", "3,256", "5,128", "9,128", "15,128"}


def test_fake_implementations_give_shapes(checks: dict[str, Any]) -> None:
    assert checks["gdn_shapes"] == [[2, 5, 8, 128], [2, 8, 128, 128]]
    assert checks["kda_shape"] == [2, 5, 8, 128]
    assert checks["fa_shape"] == [2, 3, 16, 256] and checks["fa_dtype"] == "torch.float32"
    assert checks["conv_shape"] == [2, 7, 256]  # (n_seqs, n_tokens, channels): ggml's token-major rows


def test_bad_arguments_raise_naming_the_argument(checks: dict[str, Any]) -> None:
    e = checks["errors"]
    assert e["q_dtype"].startswith("TypeError: gated_delta_net: q must be float32")
    assert e["state_shape"].startswith("ValueError: gated_delta_net: state must have shape")
    assert e["head_dim"].startswith("ValueError: gated_delta_net: head_dim 96")
    assert e["k_strides"].startswith("ValueError: gated_delta_net: k must have the same strides as q")
    assert e["beta_shape"].startswith("ValueError: gated_delta_net: beta must have shape")
    assert e["fa_n_q"].startswith("ValueError: flash_attn: q has n_q = 20")
    assert e["fa_k_dtype"].startswith("TypeError: flash_attn: k must be float16 or bfloat16")
    assert e["fa_mask_heads"].startswith("ValueError: flash_attn: mask has 16 heads")
    assert e["fa_gqa"].startswith("ValueError: flash_attn: q has 6 heads")
    assert "gated_delta_net: q is a CPU tensor" in e["cpu"] and e["cpu"].startswith("ValueError")
    assert "flash_attn: q is a CPU tensor" in e["cpu_fa"]
    assert e["conv_dtype"].startswith("TypeError: ssm_conv: x and weight must be float32")
    assert e["conv_short"].startswith("ValueError: ssm_conv: x (1, 128, 3) and weight (128, 4) do not fit")
    assert e["cpu_conv"].startswith("ValueError: ssm_conv: x is a CPU tensor")


def test_torch_compile_fullgraph_traces_the_ops(checks: dict[str, Any]) -> None:
    assert checks["compiled_shapes"] == [[2, 5, 8, 128], [2, 8, 128, 128], [1, 1, 16, 256]]
