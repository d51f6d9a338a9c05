"""The first package's float64 references of its op contract (torch-ext/ggml_attn_kernels/__init__.py states it;
docs/upstream.md §1.3, §3.1), written from the documented semantics, not from ggml's code. One copy serves the
package's conformance cases (templates/conformance.py, run by `verify`), the GPU tests (tests/gpu/test_ops.py)
and the accuracy table (benchmarks/gpu_accuracy.py); load it with toolkit.verify.conformance.load_cases (the
templates directory is not a Python package).

Every function takes the torch module first, so importing this module never imports torch.
"""

from __future__ import annotations

import math
from typing import Any


def gdn_reference(torch: Any, q, k, v, g, beta, state_vk, *, gqa: str = "tiled", gate: str = "log"):
    """The gated delta rule in float64, torch order: (out, final_state).

    - q, k (B, T, H_k, D); v (B, T, H, D); value head h reads q/k head h % H_k (`gqa="tiled"`, ggml's order)
      or h // (H / H_k) (`gqa="grouped"`, HF's repeat_interleave order: the wrong contract, for contrast);
    - g is the log-domain gate, (B, T, H) per head or (B, T, H, D) per key channel (KDA), exponentiated here
      (`gate="linear"` uses g as the decay itself: the wrong contract, for contrast);
    - beta (B, T, H) in [0, 1];
    - state in and out (B, H, D, D) indexed [value][key];
    - the output carries 1/sqrt(D).
    """
    q, k, v, g, beta = (x.double() for x in (q, k, v, g, beta))
    B, T, H, D = v.shape
    Hk = q.shape[2]
    if gqa == "tiled":
        idx = torch.arange(H, device=v.device) % Hk
    elif gqa == "grouped":
        idx = torch.arange(H, device=v.device) // (H // Hk)
    else:
        raise ValueError(f"gqa must be 'tiled' or 'grouped', got {gqa!r}")
    q, k = q[:, :, idx], k[:, :, idx]
    S = state_vk.double().transpose(-1, -2).clone()  # [B, H, key, value]
    out = torch.empty(B, T, H, D, dtype=torch.float64, device=v.device)
    if gate not in ("log", "linear"):
        raise ValueError(f"gate must be 'log' or 'linear', got {gate!r}")
    for t in range(T):
        d = g[:, t].exp() if gate == "log" else g[:, t]
        decay = d[..., :, None] if g.dim() == 4 else d[..., None, None]
        S = S * decay
        kv = (S * k[:, t, :, :, None]).sum(-2)
        delta = (v[:, t] - kv) * beta[:, t, :, None]
        S = S + k[:, t, :, :, None] * delta[:, :, None, :]
        out[:, t] = (S * q[:, t, :, :, None]).sum(-2) / math.sqrt(D)
    return out, S.transpose(-1, -2)


def fa_reference(torch: Any, q, k, v, mask, scale, *, gqa: str = "grouped"):
    """Softmax attention in float64: q (B, H, n_q, D), k/v (B, H_kv, n_kv, D), additive mask (B|1, 1, n_q,
    n_kv) or a bool mask (True = attend) or None; query head h reads kv head h // (H / H_kv) (`grouped`,
    ggml's FA order) or h % H_kv (`tiled`, for contrast). Returns (B, n_q, H, D)."""
    q, k, v = q.double(), k.double(), v.double()
    rep = q.shape[1] // k.shape[1]
    if gqa == "grouped":
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    elif gqa == "tiled":
        k, v = k.repeat(1, rep, 1, 1), v.repeat(1, rep, 1, 1)
    else:
        raise ValueError(f"gqa must be 'grouped' or 'tiled', got {gqa!r}")
    s = (q @ k.transpose(-1, -2)) * scale
    if mask is not None:
        if mask.dtype == torch.bool:
            mask = torch.zeros(mask.shape, dtype=torch.float64, device=mask.device).masked_fill(~mask, float("-inf"))
        s = s + mask.double()
    return (torch.softmax(s, -1) @ v).transpose(1, 2)


def ssm_conv_reference(torch: Any, x, weight, bias=None, *, silu: bool = False, flip: bool = False):
    """The causal depthwise convolution in float64, torch order: x (B, C, d_conv - 1 + T), weight (C, d_conv),
    bias (C,) or None -> (B, T, C) with out[b, t, c] = sum_j x[b, c, t + j] * weight[c, j] + bias[c], then SiLU
    when `silu` (torch's F.conv1d on the zero- or state-padded input). `flip=True` reverses the taps (a true
    convolution instead of torch's correlation: the wrong contract, for contrast)."""
    x, w = x.double(), weight.double()
    if flip:
        w = w.flip(-1)
    K = w.shape[1]
    out = (x.unfold(2, K, 1) * w[None, :, None, :]).sum(-1)  # (B, C, T)
    if bias is not None:
        out = out + bias.double()[None, :, None]
    if silu:
        out = out * torch.sigmoid(out)
    return out.transpose(1, 2)


def rel_err(x, ref) -> float:
    """‖x − ref‖ / ‖ref‖ in float64 (ref on x's device or not)."""
    x = x.double().to(ref.device)
    return ((x - ref).norm() / ref.norm().clamp_min(1e-30)).item()
