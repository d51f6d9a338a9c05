"""The conformance cases of the first package (its facts' CONFORMANCE): every op of a built variant against the
float64 reference of the documented contract (reference.py next to this file) on a fixed set of small shapes.
`ggml-vendor verify` runs `run_all` in a child process with the variant loaded (toolkit.verify.conformance).

A signature fingerprint cannot see ggml transpose its state or reverse its snapshot order under the same
parameter list (docs/upstream.md §4.1); this can. Each case names the part of the contract it pins down, and
the cases that can be confused with a plausible wrong contract (grouped instead of tiled GQA, a [key][value]
state, an unscaled output, linear instead of log-domain gates) also require the result to be far from that
wrong contract's answer, so a silent change cannot pass by accident.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from toolkit.verify.conformance import device_of, document, guarded, judged, sibling

R = sibling(__file__, "reference")  # gdn_reference, fa_reference, ssm_conv_reference, rel_err
GDN_TOL = 2e-5  # f32 recurrence vs float64; ~1e-7 measured on an H200 (docs/gpu-checks.md)
FA_TOL = 2e-3  # f16 K/V products as ggml accumulates them; ~1e-4 measured
CONV_TOL = 1e-5  # float32 sums of d_conv products


@dataclass(frozen=True)
class GdnCase:
    name: str
    covers: str
    B: int
    T: int
    Hk: int
    H: int
    D: int
    kda: bool = False
    gate_scale: float = 1.0  # spread of the log-domain gates (larger: some gates near exp(-big))
    contrast: tuple[str, ...] = ()  # wrong contracts the result must be far from


@dataclass(frozen=True)
class FaCase:
    name: str
    covers: str
    B: int
    H: int
    Hkv: int
    n_q: int
    n_kv: int
    D: int
    dtype: str = "float16"
    mask: str = "none"  # "none" | "additive" | "bool" | "broadcast"
    scale: float | None = None  # None: the op's default 1/sqrt(D)
    contrast: tuple[str, ...] = ()


@dataclass(frozen=True)
class ConvCase:
    name: str
    covers: str
    B: int
    C: int
    T: int
    K: int
    silu: bool = True
    bias: bool = False
    contrast: tuple[str, ...] = ()


GDN_CASES: tuple[GdnCase, ...] = (
    GdnCase("gdn-decode", "one token, state [value][key] in and out", 2, 1, 4, 4, 128, contrast=("state-kv",)),
    GdnCase("gdn-tokens", "a run of tokens in one dispatch, state carried", 2, 9, 2, 2, 64, contrast=("state-kv",)),
    GdnCase("gdn-tiled-gqa", "value head h reads q/k head h % H_k (tiled)", 2, 3, 2, 8, 64, contrast=("grouped",)),
    GdnCase("gdn-kda", "per-key-channel gates (KDA), (B, T, H, D)", 2, 4, 4, 4, 64, kda=True, contrast=("state-kv",)),
    GdnCase(
        "gdn-log-gates",
        "g is log-domain: the kernel exponentiates it",
        1,
        6,
        2,
        2,
        32,
        gate_scale=3.0,
        contrast=("linear-gate",),
    ),
    GdnCase("gdn-scale", "the output carries 1/sqrt(head_dim)", 1, 2, 2, 2, 16, contrast=("unscaled",)),
)

FA_CASES: tuple[FaCase, ...] = (
    FaCase("fa-nkv-300", "n_kv not a multiple of 256 (ggml's KQ stride)", 1, 8, 2, 1, 300, 128),
    FaCase("fa-additive-mask", "additive mask, n_q = 2", 2, 8, 2, 2, 1000, 128, mask="additive"),
    FaCase("fa-bool-mask", "bool mask (True = attend), n_kv = 257", 1, 4, 4, 3, 257, 64, mask="bool"),
    FaCase("fa-broadcast-mask", "mask shared by the batch (1, 1, n_q, n_kv)", 2, 8, 2, 1, 700, 128, mask="broadcast"),
    FaCase("fa-grouped-gqa", "query head h reads kv head h // (H / H_kv)", 1, 16, 4, 1, 512, 128, contrast=("tiled",)),
    FaCase(
        "fa-scale-bf16",
        "an explicit scale; bf16 K/V; head_dim 256",
        1,
        8,
        4,
        5,
        513,
        256,
        dtype="bfloat16",
        mask="additive",
        scale=0.7 / math.sqrt(256),
        contrast=("default-scale",),
    ),
)


CONV_CASES: tuple[ConvCase, ...] = (
    ConvCase("conv-decode", "one token: the d_conv - 1 steps before it, then it", 2, 256, 1, 4, contrast=("flipped",)),
    ConvCase("conv-prefill", "a run of tokens, SiLU applied", 2, 384, 20, 4, contrast=("no-silu", "flipped")),
    ConvCase("conv-long", "more tokens than the short kernel takes (the long kernel), bias", 1, 128, 77, 4, bias=True),
    ConvCase("conv-k3-linear", "d_conv 3, no activation", 3, 256, 9, 3, silu=False, contrast=("flipped",)),
)


def run_conv_case(torch: Any, mod: Any, c: ConvCase, device: str, seed: int) -> dict[str, Any]:
    if not mod.supports_ssm_conv(c.K, c.C):
        return {"case": c.name, "op": "ssm_conv", "ok": False, "error": f"d_conv {c.K}, {c.C} channels not supported"}
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(c.B, c.C, c.K - 1 + c.T, generator=gen)
    w = torch.randn(c.C, c.K, generator=gen) / c.K
    b = torch.randn(c.C, generator=gen) if c.bias else None
    ref = R.ssm_conv_reference(torch, x, w, b, silu=c.silu)
    x_dev = mod.ssm_conv_input(c.B, c.C, c.K - 1 + c.T, device)  # the room its long kernel reads
    x_dev.copy_(x)
    out = mod.ssm_conv(x_dev, w.to(device), b.to(device) if b is not None else None, silu=c.silu)
    if device == "cuda":
        torch.cuda.synchronize()
    out = out.cpu()
    finite = bool(torch.isfinite(out).all())
    err = R.rel_err(out, ref) if finite else float("inf")
    contrasts = {}
    for wrong in c.contrast:
        if wrong == "flipped":
            w_out = R.ssm_conv_reference(torch, x, w, b, silu=c.silu, flip=True)
        elif wrong == "no-silu":
            w_out = R.ssm_conv_reference(torch, x, w, b, silu=False)
        else:
            raise ValueError(wrong)
        contrasts[wrong] = R.rel_err(out, w_out) if finite else float("inf")
    return judged(c.name, "ssm_conv", c.covers, err, CONV_TOL, contrasts)


def _gdn_inputs(torch: Any, c: GdnCase, seed: int):
    gen = torch.Generator().manual_seed(seed)
    F = torch.nn.functional

    def randn(*s):
        return torch.randn(*s, generator=gen, dtype=torch.float32)

    q = F.normalize(randn(c.B, c.T, c.Hk, c.D), dim=-1)
    k = F.normalize(randn(c.B, c.T, c.Hk, c.D), dim=-1)
    v = randn(c.B, c.T, c.H, c.D)
    gshape = (c.B, c.T, c.H, c.D) if c.kda else (c.B, c.T, c.H)
    g = F.logsigmoid(c.gate_scale * randn(*gshape) + 2.0)
    beta = torch.sigmoid(randn(c.B, c.T, c.H))
    state = 0.5 * randn(c.B, c.H, c.D, c.D)  # not symmetric: [value][key] and [key][value] differ
    return q, k, v, g, beta, state


def run_gdn_case(torch: Any, mod: Any, c: GdnCase, device: str, seed: int) -> dict[str, Any]:
    if not mod.supports_gated_delta_net(c.D):
        return {"case": c.name, "op": "gated_delta_net", "ok": False, "error": f"head_dim {c.D} not supported"}
    inputs = _gdn_inputs(torch, c, seed)
    q, k, v, g, beta, state = inputs
    ref_out, ref_state = R.gdn_reference(torch, *inputs)
    out, final = mod.gated_delta_net(*(x.to(device) for x in inputs))
    if device == "cuda":
        torch.cuda.synchronize()
    out, final = out.cpu(), final.cpu()
    finite = bool(torch.isfinite(out).all() and torch.isfinite(final).all())
    err = max(R.rel_err(out, ref_out), R.rel_err(final, ref_state)) if finite else float("inf")
    contrasts = {}
    for wrong in c.contrast:
        if wrong == "grouped":
            w_out, w_state = R.gdn_reference(torch, *inputs, gqa="grouped")
        elif wrong == "state-kv":  # the same maths with the state read and written [key][value]
            w_out, w_state = R.gdn_reference(torch, q, k, v, g, beta, state.transpose(-1, -2))
            w_state = w_state.transpose(-1, -2)
        elif wrong == "linear-gate":
            w_out, w_state = R.gdn_reference(torch, *inputs, gate="linear")
        elif wrong == "unscaled":
            w_out, w_state = ref_out * math.sqrt(c.D), ref_state
        else:
            raise ValueError(wrong)
        contrasts[wrong] = max(R.rel_err(out, w_out), R.rel_err(final, w_state)) if finite else float("inf")
    return judged(c.name, "gated_delta_net", c.covers, err, GDN_TOL, contrasts)


def _fa_inputs(torch: Any, c: FaCase, seed: int):
    gen = torch.Generator().manual_seed(seed)
    dtype = getattr(torch, c.dtype)
    q = torch.randn(c.B, c.H, c.n_q, c.D, generator=gen)
    k = torch.randn(c.B, c.Hkv, c.n_kv, c.D, generator=gen).to(dtype)
    v = torch.randn(c.B, c.Hkv, c.n_kv, c.D, generator=gen).to(dtype)
    mask = None
    if c.mask != "none":
        keep = torch.rand(c.B, 1, c.n_q, c.n_kv, generator=gen) > 0.25
        keep[..., 0] = True  # never a fully masked row
        if c.mask == "broadcast":
            keep = keep[:1]
        mask = keep if c.mask == "bool" else torch.where(keep, 0.0, float("-inf")).to(torch.float16)
    return q, k, v, mask


def run_fa_case(torch: Any, mod: Any, c: FaCase, device: str, seed: int) -> dict[str, Any]:
    if not mod.supports_flash_attn(c.n_q, c.D, c.D):
        return {"case": c.name, "op": "flash_attn", "ok": False, "error": f"n_q {c.n_q}, head_dim {c.D} not supported"}
    q, k, v, mask = _fa_inputs(torch, c, seed)
    scale = c.scale if c.scale is not None else 1.0 / math.sqrt(c.D)
    ref = R.fa_reference(torch, q, k, v, mask, scale)
    args = [x.to(device) if x is not None else None for x in (q, k, v, mask)]
    out = mod.flash_attn(*args, c.scale) if c.scale is not None else mod.flash_attn(*args)
    if device == "cuda":
        torch.cuda.synchronize()
    out = out.cpu()
    finite = bool(torch.isfinite(out).all())
    err = R.rel_err(out, ref) if finite else float("inf")
    contrasts = {}
    for wrong in c.contrast:
        if wrong == "tiled":
            w = R.fa_reference(torch, q, k, v, mask, scale, gqa="tiled")
        elif wrong == "default-scale":
            w = R.fa_reference(torch, q, k, v, mask, 1.0 / math.sqrt(c.D))
        else:
            raise ValueError(wrong)
        contrasts[wrong] = R.rel_err(out, w) if finite else float("inf")
    return judged(c.name, "flash_attn", c.covers, err, FA_TOL, contrasts)


def run_all(mod: Any) -> dict[str, Any]:
    """Every case of the ops `mod` exports: {"device", "torch", "cases"} or {"skip": reason}."""
    import torch

    device = device_of(torch)
    if device is None:
        return {"skip": "no GPU on this host (torch sees no CUDA/ROCm or MPS device)"}
    every: tuple[GdnCase | FaCase | ConvCase, ...] = (*GDN_CASES, *FA_CASES)
    # ssm_conv where this backend compiles it (CUDA/ROCm; the Metal build runs transformers' torch conv instead)
    if hasattr(mod, "supports_ssm_conv") and mod.supports_ssm_conv(4, 128):
        every = (*every, *CONV_CASES)
    return document(torch, device, (run_case(torch, mod, c, device) for c in every if hasattr(mod, op_of(c))))


def op_of(c: GdnCase | FaCase | ConvCase) -> str:
    if isinstance(c, ConvCase):
        return "ssm_conv"
    return "gated_delta_net" if isinstance(c, GdnCase) else "flash_attn"


def run_case(torch: Any, mod: Any, c: GdnCase | FaCase | ConvCase, device: str) -> dict[str, Any]:
    """One case with its fixed seed; an op that raises fails its case (the others still run)."""
    if isinstance(c, GdnCase):
        seed = 1000 + GDN_CASES.index(c)
        return guarded(c.name, op_of(c), lambda: run_gdn_case(torch, mod, c, device, seed))
    if isinstance(c, ConvCase):
        seed = 3000 + CONV_CASES.index(c)
        return guarded(c.name, op_of(c), lambda: run_conv_case(torch, mod, c, device, seed))
    seed = 2000 + FA_CASES.index(c)
    return guarded(c.name, op_of(c), lambda: run_fa_case(torch, mod, c, device, seed))
