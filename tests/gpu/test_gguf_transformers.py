"""transformers end to end on CUDA: a GGUF file of a small random Qwen3.5-shaped model (arch `qwen35`, written by
benchmarks/gguf_model.py with `gguf`'s writer: Q8_0/Q4_0/Q4_1 from gguf.quants.quantize, Q4_K/Q6_K blocks),
loaded with `from_pretrained(..., gguf_file=..., dtype=torch.float32)` twice: packed, with transformers' kernel
lookup served by our build, and dequantized (what every CUDA machine gets today).

How the lookup is served: transformers resolves the kernel once per process into
`transformers.integrations.gguf.kernels._gguf_kernel` (`get_kernel("ggml-org/ggml-quantization", version=1)`,
wrapped in `GgufKernel`). The test sets that cache to `GgufKernel(gguf_kernels)` before the packed load and to
`False` (no kernel) before the dequantized one; publishing the package under that repo id does the same for users.

Checks: the weights stay packed (every quantized linear is a GgufLinear, the embedding a GgufEmbedding, and the
weights take far less memory). Along the same tokens (teacher forced, one token per step, so every step runs the
gemv; the 12-token prompt runs the dequantize path and the embedding get_rows): with the gemv swapped for an
exact dequantize + matmul the packed model's logits are the dequantized model's to float32 rounding; every gemv
call of ours returns ggml's own arithmetic for its input (benchmarks/gguf_logit_gap.py's emulation); and the
logit gap that arithmetic leaves is bounded by its mechanism (ggml's Q4_0/Q4_1 gemv, docs/benchmarks.md), with
greedy tokens parting only where the dequantized model's top-2 margin is within twice that step's logit
difference.

    python3 -m pytest -q -m gpu tests/gpu/test_gguf_transformers.py    # builds gguf-kernels through the tool if needed
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
# benchmarks/ is a folder of scripts, not a package: its modules are imported by name, as ModuleType.
gguf_logit_gap = importlib.import_module("gguf_logit_gap")  # the reference gemvs and the per-call audit

PROMPT = 12  # > MAX_GEMV_ROWS: the prefill takes transformers' dequantize + matmul path
NEW = 24
LOGIT_REL_TOL = 0.05  # q8_1 rounding of x alone, through 4 layers and the head: measured 1.25% (docs/benchmarks.md)
# ggml's Q4_0/Q4_1 arithmetic on top of it: measured 14.5%. Twice that: from the attention layer on, this model
# carries a 1e-6 per-call difference to ~5 points of the worst step (docs/benchmarks.md), so the value is loose.
LOGIT_GGML_TOL = 0.3

# The module fixture `setup`: torch, our gguf_kernels build, transformers' GGUF kernel module, the GGUF file, and
# the written tensors' ggml types by name.
Setup = tuple[ModuleType, ModuleType, Any, Path, dict[str, str]]  # transformers' module: the test sets its cache


@pytest.fixture(scope="module")
def setup(cuda_torch: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Setup:
    torch = cuda_torch
    pytest.importorskip("gguf", reason="needs ggml-org's gguf package (pip install gguf) to write the file")
    pytest.importorskip("accelerate", reason="transformers loads GGUF files only with accelerate installed")
    try:
        from transformers.integrations.gguf import kernels as hf_kernels
        from transformers.integrations.gguf.utils import GgufLinear  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"this transformers has no packed GGUF path (5.22.2 has it): {exc}")
    from tests.helpers import gguf_reference

    gk, why = gguf_reference.load_build(REPO, build_missing=True)
    if gk is None:
        pytest.skip(why)
    gguf_model = importlib.import_module("gguf_model")

    file = tmp_path_factory.mktemp("gguf") / "tiny-qwen35.gguf"
    written = gguf_model.write(file)
    return torch, gk, hf_kernels, file, written


def load(setup: Setup, packed: bool) -> Any:
    """The model packed or dequantized, as the benchmark loads it (benchmarks/gguf_gdn.py: sdpa attention). The
    packed model's layers read transformers' module-level kernel cache on every forward, so it keeps our kernel
    after the packed load; the dequantized model never consults it."""
    _, gk, _, file, _ = setup
    gguf_gdn = importlib.import_module("gguf_gdn")

    return gguf_gdn.load(file, gk, packed)


@pytest.fixture(scope="module")
def models(setup: Setup) -> tuple[Any, Any]:
    deq = load(setup, packed=False)
    return deq, load(setup, packed=True)  # packed last: the kernel stays in transformers' cache


def weight_bytes(model: Any) -> int:
    return sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])


def test_weights_stay_packed(setup: Setup, models: tuple[Any, Any]) -> None:
    from transformers.integrations.gguf.utils import GgufEmbedding, GgufLinear

    _, _, _, _, written = setup
    deq, packed = models
    n_quantized = sum(t != "F32" for t in written.values())
    linears = [m for m in packed.modules() if isinstance(m, GgufLinear)]
    embeds = [m for m in packed.modules() if isinstance(m, GgufEmbedding)]
    assert len(linears) + len(embeds) == n_quantized, (len(linears), len(embeds), n_quantized)
    assert {m.ggml_type for m in linears} == {2, 3, 8, 12, 14}  # Q4_0, Q4_1, Q8_0, Q4_K, Q6_K
    assert all(m.weight.dtype.itemsize == 1 and m.weight.is_cuda for m in linears)
    assert not any(isinstance(m, GgufLinear) for m in deq.modules())
    ratio = weight_bytes(packed) / weight_bytes(deq)
    assert ratio < 0.35, f"packed weights are {ratio:.2f} of the dequantized model's"


def teacher_forced_logits(model: Any, prompt: Any, tokens: Any) -> Any:
    """Logits after the prompt, then after each of `tokens`, one token per forward (the decode path): the
    benchmark's own (benchmarks/gguf_gdn.py), kept on the prompt's device."""
    gguf_gdn = importlib.import_module("gguf_gdn")

    return gguf_gdn.teacher_forced(model, prompt, tokens).to(prompt.device)


def run_with(setup: Setup, packed: Any, ops: tuple[Callable[..., Any], ...], prompt: Any, tokens: Any) -> Any:
    """The packed model's teacher-forced logits with its kernel's ops swapped for `ops`, then our build again."""
    _, gk, hf_kernels, _, _ = setup
    try:
        gguf_logit_gap.set_kernel(hf_kernels, ops, tuple(gk.GEMV_TYPES))
        return teacher_forced_logits(packed, prompt, tokens)
    finally:
        hf_kernels._gguf_kernel = hf_kernels.GgufKernel(gk)


def rel_worst(lp: Any, ld: Any) -> float:
    finite = ld.isfinite()
    d0, p0 = ld.where(finite, 0.0), lp.where(finite, 0.0)
    worst: float = ((p0 - d0).norm(dim=-1) / d0.norm(dim=-1)).max().item()
    return worst


@pytest.fixture(scope="module")
def forced(setup: Setup, models: tuple[Any, Any]) -> tuple[Any, Any, Any, Any, Any]:
    """The test's prompt, the dequantized model's greedy tokens and both models' teacher-forced logits."""
    torch = setup[0]
    deq, packed = models
    gen = torch.Generator().manual_seed(3)
    prompt = torch.randint(2, deq.config.vocab_size, (1, PROMPT), generator=gen).cuda()
    with torch.no_grad():
        ref = deq.generate(prompt, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False)[0, PROMPT:]
        got = packed.generate(prompt, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False)[0, PROMPT:]
    ld = teacher_forced_logits(deq, prompt, ref)
    lp = teacher_forced_logits(packed, prompt, ref)
    # generate() with min_new_tokens never picks the end-of-sequence token: leave it out of the comparison.
    eos = deq.generation_config.eos_token_id
    for e in [eos] if isinstance(eos, int) else list(eos or []):
        ld[:, e] = lp[:, e] = float("-inf")
    return prompt, ref, got, ld, lp


def test_packed_path_is_exact_with_an_exact_gemv(
    setup: Setup, models: tuple[Any, Any], forced: tuple[Any, Any, Any, Any, Any]
) -> None:
    """Everything but the gemv is exact: with mul_mat_vec swapped for gguf's numpy dequantization + a float64
    matmul (our dequantize for the 12-token prefill and get_rows for the embedding kept), the packed model's
    logits are the dequantized model's up to float32 rounding (measured 5.6e-7 on an H200). Any layout,
    permutation, stride, dequantize or get_rows fault of the packed path would show here."""
    torch, gk = setup[0], setup[1]
    _, packed = models
    prompt, ref_tokens, _, ld, _ = forced
    ref = gguf_logit_gap.Reference(torch)
    lp = run_with(setup, packed, (ref.exact, gk.dequantize, gk.get_rows), prompt, ref_tokens)
    lp[:, ~ld.isfinite().all(0)] = float("-inf")
    assert rel_worst(lp, ld) <= 1e-5


def test_every_gemv_call_is_ggml_arithmetic(
    setup: Setup, models: tuple[Any, Any], forced: tuple[Any, Any, Any, Any, Any]
) -> None:
    """Each mul_mat_vec call the packed model makes (every layer, every decode step) returns what ggml's gemv
    arithmetic gives for that x: gguf_logit_gap.Reference.arith, float64, q8_1-rounded x and for Q4_0/Q4_1 the
    offset or min meeting q8_1's fp16 sum of the unrounded x (vecdotq.cuh). Measured on an H200: within 3.2e-6
    of it (relative to the product's norm) for Q8_0, Q4_0, Q4_K and Q6_K; Q4_1 within 2.9e-3 of its
    float32-product form (vecdotq.cuh rounds d*d8 and m*s8 to fp16 there, __hmul2). So the logit gap of the
    next test is ggml's arithmetic, not a binding fault."""
    torch, gk = setup[0], setup[1]
    _, packed = models
    prompt, ref_tokens, _, _, _ = forced
    ref = gguf_logit_gap.Reference(torch)
    audit = gguf_logit_gap.Audit(gk, ref, gguf_logit_gap.module_names(packed), half_products=False)
    run_with(setup, packed, (audit.mul_mat_vec, audit.dequantize, audit.get_rows), prompt, ref_tokens)
    assert len(audit.gemv) == sum(1 for _ in gguf_logit_gap.module_names(packed)) - 1  # all but the embedding
    for layer, row in audit.gemv.items():
        bound = 1e-2 if row["type"] in ("Q4_1", "Q5_1") else 2e-5
        assert row["ours_vs_arith"] <= bound, (layer, row)
    assert all(err == 0.0 for err in audit.unpack.values()), audit.unpack  # ggml's dequantizers are exact


def test_greedy_tokens_and_logits_follow_dequantized(
    setup: Setup, models: tuple[Any, Any], forced: tuple[Any, Any, Any, Any, Any]
) -> None:
    """The logit gap, bounded by its mechanism (docs/benchmarks.md, "the logit gap"): ggml's Q4_0/Q4_1 gemv lets
    the q8_1 rounding of x meet the weight codes while the block's offset or min meets the sum of the unrounded
    x, so the rounding no longer cancels against the offset: 1.6-6.7% per call on this model against 0.6-1.1%
    for the rounding alone, and the random 4-layer model amplifies it to 14.5% of the logits at the worst step.
    With only the Q4_0/Q4_1 gemvs exact the packed logits are within LOGIT_REL_TOL (measured 1.25%: q8_1 on the
    other types); with all of ours they are within LOGIT_GGML_TOL; greedy tokens may then part only where the
    dequantized model's top-2 margin is within twice that step's logit difference."""
    torch, gk = setup[0], setup[1]
    _, packed = models
    prompt, ref, got, ld, lp = forced
    assert torch.isfinite(lp[:, ld.isfinite().all(0)]).all()
    # The dequantized model's own greedy choice along its tokens (sanity of the teacher forcing).
    assert torch.equal(ld.argmax(-1).cpu(), ref.cpu())
    exact = gguf_logit_gap.Reference(torch)

    def offsets_exact(blocks: Any, x: Any, t: int, n: int) -> Any:
        return (exact.exact if t in gguf_logit_gap.OFFSET_TYPES else gk.mul_mat_vec)(blocks, x, t, n)

    lq = run_with(setup, packed, (offsets_exact, gk.dequantize, gk.get_rows), prompt, ref)
    lq[:, ~ld.isfinite().all(0)] = float("-inf")
    rel_q, rel = rel_worst(lq, ld), rel_worst(lp, ld)
    assert rel_q <= LOGIT_REL_TOL, f"with exact Q4_0/Q4_1 gemvs the logits differ by {rel_q:.3g} (worst step)"
    assert rel <= LOGIT_GGML_TOL, f"packed logits differ from dequantized by {rel:.3g} (relative, worst step)"
    finite = ld.isfinite()
    d0, p0 = ld.where(finite, 0.0), lp.where(finite, 0.0)
    diff = (p0 - d0).abs().max(dim=-1).values
    top2 = ld.topk(2, dim=-1).values
    margin = top2[:, 0] - top2[:, 1]
    mismatch = (ref != got).nonzero()
    if len(mismatch):
        i = int(mismatch[0])
        assert margin[i] <= 2 * diff[i], (
            f"greedy tokens first differ at new token {i} although the dequantized model's margin there "
            f"({margin[i]:.3g}) exceeds twice the logit difference ({diff[i]:.3g})"
        )
    same = NEW if not len(mismatch) else int(mismatch[0])
    print(f"\nlogit rel diff (worst step) {rel:.3g}, {rel_q:.3g} with exact Q4_0/Q4_1; greedy identical {same}/{NEW}")


# ---- the same model with the first package's layers switched on ---------------------------------------------


@pytest.fixture(scope="module")
def with_gdn(setup: Setup, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """benchmarks/gguf_gdn.py's child run on the test's GGUF file, ggml-attn-kernels served by the local test Hub:
    the dequantized model with transformers' torch functions, then the dequantized and the packed model with
    ggml-attn-kernels' GDN functions and attention function (KernelConfig, as the README switches them on)."""
    import os
    import subprocess

    gguf_gdn = importlib.import_module("gguf_gdn")

    torch, _, _, file, _ = setup
    variant = gguf_gdn.first_package_variant(REPO)
    if variant is None:
        pytest.skip(f"no ggml-attn-kernels variant for torch {torch.__version__} under build/: run `ggml-vendor build`")
    tmp = tmp_path_factory.mktemp("gdn")
    with gguf_gdn.served(variant, tmp / "hf") as env:
        run = subprocess.run(
            [sys.executable, str(REPO / "benchmarks" / "gguf_gdn.py"), str(file), str(tmp / "out.pt")],
            env={**env, "PYTHONPATH": os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])},
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-4000:]
    res: dict[str, Any] = torch.load(tmp / "out.pt", weights_only=False)
    eos = res["eos"]
    for row in ("torch", "dequantized+gdn", "packed+gdn"):
        for key in [k for k in res[row] if k.startswith("logits")]:
            for e in [eos] if isinstance(eos, int) else list(eos or []):
                res[row][key][:, e] = float("-inf")  # generate() with min_new_tokens never picks it
    return res


def test_gdn_layers_are_the_ones_running(with_gdn: dict[str, Any]) -> None:
    gguf_gdn = importlib.import_module("gguf_gdn")

    switched = {**gguf_gdn.SWITCHED, "attention": [gguf_gdn.REPO_ID, "flash_attn_forward"]}
    assert with_gdn["dequantized+gdn"]["used"] == switched
    assert with_gdn["packed+gdn"]["used"] == switched
    assert with_gdn["torch"]["used"]["torch_chunk_gated_delta_rule"] != switched["torch_chunk_gated_delta_rule"]
    assert with_gdn["packed+gdn"]["gemv_linears"] > 0  # still packed with our gemv beside the GDN layers


def test_gdn_layers_follow_the_torch_functions(with_gdn: dict[str, Any]) -> None:
    """The dequantized model with ggml's GDN kernels switched on, along the torch baseline's greedy tokens: its
    logits are the baseline's to float32 rounding (the GDN ops are float32 against transformers' float32 torch
    recurrence: 1e-6 per call, tests/test_layers_cuda.py), so 1e-4 of the worst step."""
    base = with_gdn["torch"]["logits"]
    ours = with_gdn["dequantized+gdn"]["logits_on_torch_tokens"]
    rel = rel_worst(ours, base)
    print(f"\ndequantized: ggml GDN vs torch GDN logits (worst step) {rel:.3g}")
    assert rel <= 1e-4


def test_packed_with_gdn_follows_dequantized_with_gdn(with_gdn: dict[str, Any]) -> None:
    """Packed + GDN against dequantized + GDN, along the latter's greedy tokens. With the gemv exact (gguf's numpy
    dequantization, float64 matmul) the two are the same model to float32 rounding and greedy decoding must
    give the same tokens; with ggml's gemv the logit gap is the one measured without the GDN layers (ggml's
    Q4_0/Q4_1 arithmetic, LOGIT_GGML_TOL) and greedy tokens may part only where the dequantized model's top-2
    margin is within twice that step's logit difference."""
    import torch

    ref, ld = with_gdn["dequantized+gdn"]["tokens"], with_gdn["dequantized+gdn"]["logits"]
    row = with_gdn["packed+gdn"]
    assert torch.equal(ld.argmax(-1), ref)  # the teacher forcing reproduces greedy decoding
    lx = row["logits_exact_gemv"]
    rel_x = rel_worst(lx, ld)
    assert rel_x <= 1e-5, f"with an exact gemv packed + GDN differs from dequantized + GDN by {rel_x:.3g}"
    assert torch.equal(lx.argmax(-1), ref)  # an exact gemv: the dequantized model's greedy tokens
    lp, got = row["logits"], row["tokens"]
    rel = rel_worst(lp, ld)
    assert rel <= LOGIT_GGML_TOL, f"packed + GDN logits differ from dequantized + GDN by {rel:.3g}"
    finite = ld.isfinite()
    diff = (lp.where(finite, 0.0) - ld.where(finite, 0.0)).abs().max(dim=-1).values
    top2 = ld.topk(2, dim=-1).values
    mismatch = (ref != got).nonzero()
    if len(mismatch):
        i = int(mismatch[0])
        margin = top2[i, 0] - top2[i, 1]
        assert margin <= 2 * diff[i], (
            f"greedy tokens first differ at new token {i} although the margin there ({margin:.3g}) exceeds "
            f"twice the logit difference ({diff[i]:.3g})"
        )
    same = len(ref) if not len(mismatch) else int(mismatch[0])
    print(
        f"\npacked+GDN vs dequantized+GDN: exact gemv {rel_x:.3g}, ggml gemv {rel:.3g}; greedy identical {same}/{len(ref)}"
    )
