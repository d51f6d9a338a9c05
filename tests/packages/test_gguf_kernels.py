"""gguf-kernels on the CPU: the package is declared and pinned with the first one (one vendor/, its closures in
the lock), renders what it should (render --check clean), exposes exactly the API transformers' GgufKernel
reads, and its test helpers (the q8_1 reference, the GGUF model writer) do what the GPU tests rely on."""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import pytest

from toolkit.core import config as config_mod
from toolkit.core.config import Config
from toolkit.core.lock import read_lock
from toolkit.render import stage as render_stage
from toolkit.render.stage import RenderPlan

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
PACKAGE = "gguf-kernels"
ENTRIES = {
    "mul_mat_vec": "src/ggml-cuda/mmvq.cu",
    "quantize": "src/ggml-cuda/quantize.cu",
    "dequantize": "src/ggml-cuda/convert.cu",
    "get_rows": "src/ggml-cuda/getrows.cu",
}


@pytest.fixture(scope="module")
def cfg() -> Config:
    return config_mod.load(REPO).for_package(PACKAGE)


def test_declared_beside_the_first_package(cfg: Config) -> None:
    assert cfg.module == "gguf_kernels"
    assert cfg.hub_repo.endswith("/gguf-kernels")
    assert cfg.backends == ("cuda", "metal")  # Metal: tests/packages/test_gguf_metal.py
    assert {op.name for op in cfg.ops} == set(ENTRIES)
    first = config_mod.load(REPO)
    assert first.name == "ggml-attn-kernels" and first.module == "ggml_attn_kernels"  # the first is unchanged


def test_one_pin_holds_both_closures() -> None:
    lock = read_lock(REPO / "vendor")
    assert lock is not None, "vendor/UPSTREAM is missing"
    closures = lock.closures
    for op, entry in ENTRIES.items():
        files = closures[f"{PACKAGE}:{op}"]["cuda"]
        assert files[0] == entry, (op, files[:2])
    mmvq = closures[f"{PACKAGE}:mul_mat_vec"]["cuda"]
    assert "src/ggml-cuda/vecdotq.cuh" in mmvq and "src/ggml-cuda/quantize.cuh" in mmvq
    # common.cuh is needed by both packages and recorded once, with both as users.
    users = next(f.needed_by for f in lock.file_info if f.path == "src/ggml-cuda/common.cuh")
    assert "ggml-attn-kernels:gated_delta_net/cuda" in users and f"{PACKAGE}:mul_mat_vec/cuda" in users


def rendered(plan: RenderPlan) -> dict[str, str]:
    """Rendered files by path relative to the package's source tree (build/gguf-kernels/src/)."""
    prefix = "packages/gguf-kernels/"
    return {f.path.removeprefix(prefix): f.content for f in plan.files}


def test_renders_clean_cuda_and_metal(cfg: Config) -> None:
    plan = render_stage.plan(cfg)
    files = rendered(plan)
    paths = set(files)
    expected = {
        "build.toml",
        "csrc/cuda/gguf_launchers.h",
        "csrc/cuda/gguf_mmvq.cu",
        "csrc/cuda/gguf_quantize.cu",
        "csrc/cuda/gguf_convert.cu",
        "csrc/cuda/gguf_getrows.cu",
        "csrc/cuda/ggml_shim.cu",
        "csrc/metal/gguf_metal_kernels.metal",
        "csrc/metal/gguf_metal_runtime.h",
        "csrc/metal/gguf_metal_runtime.mm",
        "csrc/metal/gguf_metal.mm",
        "torch-ext/torch_binding.cpp",
        "torch-ext/torch_binding_stable.cpp",
        "torch-ext/torch_binding.h",
        "torch-ext/registration.h",
        "torch-ext/gguf_kernels/__init__.py",
        "torch-ext/gguf_kernels/_ops.py",
    }
    assert paths == expected
    assert render_stage.unreproducible(cfg, plan) == [], "two renders of gguf-kernels differ"
    assert plan.root == cfg.root / "build" / "gguf-kernels" / "src"
    mmvq = files["csrc/cuda/gguf_mmvq.cu"]
    assert '#include "ggml-cuda/mmvq.cu"' in mmvq and "mul_mat_vec_q_switch_type(" in mmvq


def test_python_api_is_what_transformers_reads(cfg: Config) -> None:
    """GgufKernel reads mul_mat_vec, dequantize, get_rows, mul_mat_id, GEMV_TYPES; transformers assumes
    MAX_GEMV_ROWS = 8."""
    plan = render_stage.plan(cfg)
    src = rendered(plan)["torch-ext/gguf_kernels/__init__.py"]
    tree = ast.parse(src)
    funcs = {n.name: [a.arg for a in n.args.args] for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert funcs["mul_mat_vec"] == ["blocks", "x", "ggml_type", "out_features"]
    assert funcs["mul_mat_id"] == ["blocks", "x", "ids", "ggml_type", "out_features"]
    assert funcs["dequantize"] == ["blocks", "ggml_type", "rows", "cols", "dtype"]
    assert funcs["get_rows"] == ["blocks", "ids", "ggml_type", "cols", "dtype"]
    names = {
        t.id
        for n in tree.body
        if isinstance(n, (ast.Assign, ast.AnnAssign))
        for t in ast.walk(n)
        if isinstance(t, ast.Name)
    }
    assert {"GEMV_TYPES", "MAX_GEMV_ROWS"} <= names
    transformers = pytest.importorskip("transformers.integrations.gguf.kernels", reason="needs transformers 5.22.2")
    read = {
        line.split("module.")[1].strip()
        for line in Path(transformers.__file__).read_text().splitlines()
        if "= module." in line
    }
    assert read <= set(funcs) | names, f"transformers reads {read - set(funcs) - names} that the module lacks"


def test_q8_1_reference_bound() -> None:
    np = pytest.importorskip("numpy")
    from tests.helpers import gguf_reference as R

    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 256)).astype(np.float32)
    xq = R.q8_1_roundtrip(x)
    amax = np.abs(x.reshape(3, -1, 32)).max(-1, keepdims=True)
    err = np.abs(xq - x).reshape(3, -1, 32)
    assert (err <= amax * (1 / 254 + 2**-10)).all()  # half a q8 step, plus the fp16 scale's rounding
    assert err.max() > 0  # and it does round


def test_offset_types_reference_differs_from_plain_rounding() -> None:
    """For Q4_0 the gemv's offset meets q8_1's fp16 block sum of x, not the sum of rounded x: the reference
    must model that (tests/helpers/gguf_reference.py), or the GPU test's tight check would be against the wrong thing."""
    np = pytest.importorskip("numpy")
    pytest.importorskip("gguf", reason="needs ggml-org's gguf package")
    from tests.helpers import gguf_reference as R

    rng = np.random.default_rng(1)
    blocks = R.make_blocks("Q4_0", 16, 256, rng)
    w = R.dequantize("Q4_0", blocks, 256)
    x = rng.standard_normal((2, 256)).astype(np.float32)
    ref, plain, _ = R.gemv_reference(w, x)
    _, modelled, _ = R.gemv_reference(w, x, "Q4_0", blocks)
    assert np.linalg.norm(modelled - ref) > 1.5 * np.linalg.norm(plain - ref)


def test_gguf_model_writer_makes_a_qwen35_file(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf", reason="needs ggml-org's gguf package")
    gguf_model = importlib.import_module("gguf_model")  # benchmarks/gguf_model.py: benchmarks/ is a folder of scripts

    path = tmp_path / "m.gguf"
    written = gguf_model.write(path, gguf_model.Shape(vocab=512, hidden=256, intermediate=512, layers=4))
    reader = gguf.GGUFReader(str(path))
    assert reader.fields["general.architecture"].contents() == "qwen35"
    types = {t.name: t.tensor_type.name for t in reader.tensors}
    assert types == written
    assert {"Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q6_K"} <= set(types.values())
    names = {t.name.rsplit(".weight", 1)[0] for t in reader.tensors}
    assert {"blk.3.attn_q", "blk.0.attn_qkv", "blk.0.ssm_out", "token_embd", "output"} <= names


@pytest.mark.parametrize("fast", (False, True))
def test_gguf_model_kquant_blocks_reach_their_target(tmp_path: Path, fast: bool) -> None:
    """Every K-quant block's largest |w| is 4 x the intended std (fast: scaled without drawing the weights)."""
    np = pytest.importorskip("numpy")
    gguf = pytest.importorskip("gguf", reason="needs ggml-org's gguf package")
    gguf_model = importlib.import_module("gguf_model")  # benchmarks/gguf_model.py: benchmarks/ is a folder of scripts

    path = tmp_path / "m.gguf"
    gguf_model.write(path, gguf_model.Shape(vocab=512, hidden=256, intermediate=512, layers=4, fast=fast))
    reader = gguf.GGUFReader(str(path))
    tensor = next(t for t in reader.tensors if t.name == "blk.0.ffn_up.weight")
    assert tensor.tensor_type.name == "Q4_K"
    w = np.asarray(gguf.quants.dequantize(np.asarray(tensor.data), tensor.tensor_type), dtype=np.float32)
    amax = np.abs(w.reshape(-1, 256)).max(axis=1)
    # 4 sigma of std 0.02 (the drawn weights' std is within 1% of it), through fp16 super-scales
    np.testing.assert_allclose(amax, 0.08, rtol=0.02)
