"""One decode call of each transformers hook, side by side in one process: kernel launches per call and host time
per call (what an eager, host-bound decode step pays), for this package's layers, fla's and transformers' own
torch functions.

    python3 benchmarks/bench_layer_calls.py [--kernel <repo root with build/>]

Rows: the gated delta rule at one decode token (B = 1, 32 value heads of 128, bf16 q/k/v/beta, float32 g, the
state in the layout each path keeps between calls; ours writes a new final state, the cache's copy of it not
counted) and decode attention (16 query / 4 kv heads of 256, one query, n_kv = 160 from an exactly sized cache, as transformers' DynamicCache holds it). Launches are
counted with torch.profiler over 20 calls; host µs is the median of 5 × 100 back-to-back calls from Python with
no sync (the GPU work of these calls is far shorter than their host time). A yardstick row (one tiny
`torch.add(out=)`) says how fast the host was at that moment. Prints a markdown table; asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from bench_generate import hooked_reference  # the same unwrapping of transformers' hook (this folder is on sys.path)

REPO = Path(__file__).resolve().parents[1]


def measure(torch, fn, calls: int = 100, repeats: int = 5) -> tuple[float, float]:
    """(launches per call, host µs per call)."""
    from torch.autograd import DeviceType

    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
    launches = sum(1 for e in prof.events() if e.device_type == DeviceType.CUDA) / 20
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls * 1e6)
    torch.cuda.synchronize()
    return launches, statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--kernel",
        type=Path,
        default=REPO / "build" / "ggml-attn-kernels",
        help="folder of variants (default: build/ggml-attn-kernels, where `ggml-vendor build` writes them)",
    )
    args = ap.parse_args()

    import kernels
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.models.qwen3_5 import modeling_qwen3_5 as qwen

    kern = kernels.get_local_kernel(args.kernel)
    dev, bf = "cuda", torch.bfloat16
    gen = torch.Generator(device=dev).manual_seed(0)

    def rnd(*shape, dtype=torch.float32):
        return torch.randn(*shape, device=dev, generator=gen).to(dtype)

    # The gated delta rule at one decode token, as Qwen3.5 calls it (q/k already expanded to the value heads).
    B, H, D = 1, 32, 128
    mixed = rnd(B, 1, 3 * H * D, dtype=bf)  # the projection output q, k and v are views of
    q = mixed[..., : H * D].view(B, 1, H, D).clone()  # repeat_interleave hands over new tensors
    k = mixed[..., H * D : 2 * H * D].view(B, 1, H, D).clone()
    v = mixed[..., 2 * H * D :].view(B, 1, H, D)
    g = -torch.rand(B, 1, H, device=dev, generator=gen)
    beta = torch.rand(B, 1, H, device=dev, generator=gen).to(bf)
    state_kv = 0.1 * rnd(B, H, D, D)  # transformers' [key][value]
    state_ours = state_kv.transpose(-1, -2).contiguous().transpose(-1, -2)  # what our layer returns and gets back
    _, torch_ref = hooked_reference(qwen.torch_recurrent_gated_delta_rule)
    layer = kern.layers.fused_recurrent_gated_delta_rule()
    kw = {"output_final_state": True, "use_qk_l2norm_in_kernel": True}
    rows = {
        "ours `fused_recurrent_gated_delta_rule`": lambda: layer(q, k, v, g, beta, initial_state=state_ours, **kw),
        "transformers' `torch_recurrent_gated_delta_rule`": lambda: torch_ref(
            q, k, v, g, beta, initial_state=state_kv, **kw
        ),
    }
    try:
        from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule as fla_recurrent

        state_fla = state_kv.clone()
        rows["fla `fused_recurrent_gated_delta_rule`"] = lambda: fla_recurrent(
            q, k, v, g, beta, initial_state=state_fla, **kw
        )
    except ImportError as exc:
        print(f"fla is not importable ({exc}): its row is left out")

    # Decode attention, as Qwen3.5's full-attention layers call it.
    Hq, Hkv, Dh, n_kv = 16, 4, 256, 160
    qa, ka, va = rnd(1, Hq, 1, Dh, dtype=bf), rnd(1, Hkv, n_kv, Dh, dtype=bf), rnd(1, Hkv, n_kv, Dh, dtype=bf)
    module = torch.nn.Module()
    module.is_causal, module.num_key_value_groups = True, Hq // Hkv
    module.eval()
    rows["ours `flash_attn_forward`"] = lambda: kern.flash_attn_forward(module, qa, ka, va, None, scaling=Dh**-0.5)
    rows["transformers' `sdpa_attention_forward`"] = lambda: sdpa_attention_forward(
        module, qa, ka, va, None, scaling=Dh**-0.5
    )
    y = torch.zeros(8, device=dev)
    rows["yardstick `torch.add(out=)`"] = lambda: torch.add(y, 1.0, out=y)

    print(f"GPU {torch.cuda.get_device_name(0)}, torch {torch.__version__}\n")
    print("| call | launches | host µs |\n|---|---|---|")
    for name, fn in rows.items():
        launches, host = measure(torch, fn)
        print(f"| {name} | {launches:.0f} | {host:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
