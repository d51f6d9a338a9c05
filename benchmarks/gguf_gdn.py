"""The GGUF model with the first package's layers switched on: ggml-attn-kernels' gated-delta-rule functions
(`chunk_gated_delta_rule`, `fused_recurrent_gated_delta_rule`) and its attention function, loaded together with
gguf-kernels, exactly as the README's one-line switch does (`KernelConfig` + `attn_implementation=<repo>`).

transformers fetches those layers from a Hub, so the first package's built variant (`ggml-vendor build` writes
build/ggml-attn-kernels/torch*-cu*-linux/) is served by the local test Hub (toolkit.testing.localhub) as `test-org/ggml-attn-kernels`
version 1, and the loads run in a child process whose environment points huggingface_hub there (its endpoint is
read at import). gguf-kernels is served as in the other GGUF checks: transformers' `_gguf_kernel` cache set to
`GgufKernel(gguf_kernels)` before the packed load.

    python3 benchmarks/gguf_gdn.py MODEL.gguf OUT.pt     # the child of tests/gpu/test_gguf_transformers.py

In that mode it loads, in this order (the layer switch is process-wide once a model with the KernelConfig is
loaded, so the baseline comes first): the dequantized model with transformers' torch functions (fla hidden),
the dequantized model with our layers, the packed model with our layers; greedy tokens, teacher-forced logits
(one token per forward, so every step runs the gemv and the recurrent GDN kernel; the prompt runs the chunked
one) and the functions each model ended up using go to OUT.pt. bench_gguf.py --generate uses `served` and
`kernel_kwargs` for its GDN rows.
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
REPO_ID = "test-org/ggml-attn-kernels"
# transformers' module-level GDN functions and the Hub layers a KernelConfig puts behind them.
FUNCS = ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule")
SWITCHED = {
    "torch_chunk_gated_delta_rule": "chunk_gated_delta_rule.forward",
    "torch_recurrent_gated_delta_rule": "fused_recurrent_gated_delta_rule.forward",
}
PROMPT = 12  # > MAX_GEMV_ROWS: the prefill takes transformers' dequantize + matmul path and the chunked GDN
NEW = 24


def first_package_variant(root: Path = REPO) -> Path | None:
    """The first package's CUDA variant for this interpreter's torch under root/build/ggml-attn-kernels
    (`ggml-vendor build`)."""
    import torch

    tag = "torch" + "".join(torch.__version__.split("+")[0].split(".")[:2])
    found = sorted(
        p for p in (root / "build" / "ggml-attn-kernels").glob(f"{tag}-*-cu*-*-linux") if (p / "__init__.py").exists()
    )
    return found[0] if found else None


@contextmanager
def served(variant: Path, cache: Path) -> Iterator[dict[str, str]]:
    """A local test Hub holding `variant` as REPO_ID version 1; yields the environment of a client process."""
    from huggingface_hub import HfApi

    from toolkit.publish.hub import lfs_only
    from toolkit.testing.hub_state import HubState
    from toolkit.testing.localhub import HubServer, client_env

    with HubServer(HubState(tokens=("tok",))) as hub, lfs_only(True):
        api = HfApi(endpoint=hub.url, token="tok")
        api.create_repo(REPO_ID, repo_type="kernel")
        api.upload_folder(
            folder_path=variant,
            path_in_repo=f"build/{variant.name}",
            repo_id=REPO_ID,
            repo_type="kernel",
            ignore_patterns=["__pycache__/*", "*.pyc"],
        )
        api.create_branch(REPO_ID, branch="v1", repo_type="kernel")  # what kernels' version=1 resolves
        yield client_env(hub.url, cache)


def kernel_kwargs() -> dict:
    """from_pretrained's arguments that switch the first package's layers on (the README's switch)."""
    from transformers import KernelConfig

    meta = {"version": 1, "trust_remote_code": True}
    config = KernelConfig(
        {
            "chunk_gated_delta_rule": (f"{REPO_ID}:chunk_gated_delta_rule", meta),
            "fused_recurrent_gated_delta_rule": (f"{REPO_ID}:fused_recurrent_gated_delta_rule", meta),
        },
        inherit_mapping=False,  # only ours: transformers' default mapping names Hub repos a local Hub lacks
    )
    return {"use_kernels": True, "kernel_config": config, "attn_implementation": REPO_ID, "allow_all_kernels": True}


def used(model) -> dict:  # type: ignore[no-untyped-def]
    """Which functions the model's GDN layers and attention run: qualnames of transformers' hooks."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    from transformers.models.qwen3_5 import modeling_qwen3_5 as qm

    out = {n: getattr(qm, n).forward.__func__.__qualname__ for n in FUNCS}
    impl = model.config._attn_implementation
    out["attention"] = [impl, getattr(ALL_ATTENTION_FUNCTIONS.get(impl), "__qualname__", None)]
    return out


class _NoFla(importlib.abc.MetaPathFinder):
    """Hides fla, so that transformers' own torch functions are the baseline (not fla's Triton kernels)."""

    def find_spec(self, name, path=None, target=None):  # type: ignore[no-untyped-def]
        if name == "fla" or name.startswith("fla."):
            raise ImportError("fla is hidden for the torch baseline")


def load(file: Path, gk, packed: bool, **kw):  # type: ignore[no-untyped-def]
    import torch
    import transformers
    from transformers.integrations.gguf import kernels as hf_kernels

    hf_kernels._gguf_kernel = hf_kernels.GgufKernel(gk) if packed else False
    kw.setdefault("attn_implementation", "sdpa")
    # transformers 5.25 turns Hub kernels on by default (use_kernels=None means True) and would fetch its default
    # mapping's repos (kernels-community/fla for RMSNormGated): the baseline asks for its torch functions by name.
    kw.setdefault("use_kernels", False)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(file.parent), gguf_file=file.name, dtype=torch.float32, device_map="cuda", **kw
    )
    return model.eval()


def teacher_forced(model, prompt, tokens):  # type: ignore[no-untyped-def]
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
    return torch.stack(logits).cpu()


def greedy(model, prompt):  # type: ignore[no-untyped-def]
    import torch

    with torch.no_grad():
        out = model.generate(prompt, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False)
    return out[0, PROMPT:]


def child(file: Path, out: Path) -> int:
    """The test's loads (module docstring), saved to `out`."""
    sys.meta_path.insert(0, _NoFla())
    import torch

    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(REPO))
    import gguf_logit_gap
    from transformers.integrations.gguf import kernels as hf_kernels
    from transformers.integrations.gguf.utils import GgufLinear

    from tests.helpers import gguf_reference

    gk, why = gguf_reference.load_build(REPO)
    if gk is None:
        print(f"error: {why}", file=sys.stderr)
        return 2
    gen = torch.Generator().manual_seed(3)
    res: dict = {}
    deq = load(file, gk, packed=False)
    prompt = torch.randint(2, deq.config.vocab_size, (1, PROMPT), generator=gen).cuda()
    ref = greedy(deq, prompt)
    res["torch"] = {"used": used(deq), "tokens": ref.cpu(), "logits": teacher_forced(deq, prompt, ref)}
    del deq
    deq = load(file, gk, packed=False, **kernel_kwargs())
    ref_gdn = greedy(deq, prompt)
    res["dequantized+gdn"] = {
        "used": used(deq), "tokens": ref_gdn.cpu(), "logits": teacher_forced(deq, prompt, ref_gdn),
        "logits_on_torch_tokens": teacher_forced(deq, prompt, ref),
    }  # fmt: skip
    del deq
    packed = load(file, gk, packed=True, **kernel_kwargs())
    row = {"used": used(packed), "tokens": greedy(packed, prompt).cpu()}
    row["gemv_linears"] = sum(isinstance(m, GgufLinear) for m in packed.modules())
    row["logits"] = teacher_forced(packed, prompt, ref_gdn)
    exact = gguf_logit_gap.Reference(torch)
    gguf_logit_gap.set_kernel(hf_kernels, (exact.exact, gk.dequantize, gk.get_rows), tuple(gk.GEMV_TYPES))
    row["logits_exact_gemv"] = teacher_forced(packed, prompt, ref_gdn)
    hf_kernels._gguf_kernel = hf_kernels.GgufKernel(gk)
    res["packed+gdn"] = row
    res["eos"] = packed.generation_config.eos_token_id
    torch.save(res, out)
    print("RESULT", {k: v["used"] for k, v in res.items() if isinstance(v, dict)})
    return 0


if __name__ == "__main__":
    raise SystemExit(child(Path(sys.argv[1]), Path(sys.argv[2])))
