"""End-to-end `generate()` with transformers: the torch fallback, fla, and this package's Hub layers / attention,
side by side in one process on random-initialised Qwen3.5-4B- and Qwen3-Next-shaped models.

Modes (interleaved round by round, the order rotated each round so that host drift spreads evenly):

    torch     transformers' torch functions for the gated delta rule (what runs without fla), SDPA attention
    fla       fla's Triton kernels through transformers' own hook (needs fla-core importable)
    ours-gdn  this package's layers.chunk_gated_delta_rule / fused_recurrent_gated_delta_rule, SDPA attention
    ours-fa   torch's gated delta rule, this package's flash_attn_forward (ggml's decode kernel)
    ours      both of ours

The switch is the one transformers itself makes: the hooked module-level functions' `forward` is set to the torch
reference, the fla path or our layer's forward (what kernelize does with `kernel_config`), and the attention
implementation is set with `model.set_attn_implementation` to transformers' "sdpa" or to our flash_attn_forward
registered under a name. tests/gpu/test_layers.py checks the real `from_pretrained(kernel_config=...,
attn_implementation=...)` switch.

Reported per (shape, dtype, batch): tok/s (batch x 128 new tokens / wall time of generate, medians of the rounds),
speedup over torch and over fla, the decode step's wall time (a logits processor stamps every step; generate
synchronises each step), and from a forward-only decode loop: host enqueue time per step, device (kernel) time per
step from torch.profiler, kernel launches per step. Greedy tokens of each mode are compared with torch's.

`--compile` adds static cache + torch.compile rows (transformers' auto-compile of the decode step; prefill stays
eager) for --compile-modes; `--compile-backend default` is transformers' own CompileConfig() (inductor,
mode="reduce-overhead": what a user gets unasked), `cudagraphs` dynamo's CUDA-graphs backend. Each compiled mode
also reports its compile counters (graphs, graph breaks, recompiles during the timed rounds, CUDA-graph skips) and,
with `--compile-profile`, the device time and kernels of one steady decode step. `--ttft MODE` times the first generate() of a fresh process (run it once per mode, each
in a new process; fla compiles its Triton kernels there unless TRITON_CACHE_DIR is warm).

    python3 benchmarks/bench_generate.py --out benchmarks/out [--kernel <repo root with build/>] [--rounds 5]
    python3 benchmarks/bench_generate.py --ttft ours   (and --ttft fla)

Prints markdown tables; writes bench_generate.json/.md into --out. Nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import statistics
import sys
import time
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NEW_TOKENS = 128
PROMPT = 32
ATTN_NAME = "ggml_attn_kernels"  # the name our flash_attn_forward is registered under
MODES = ("torch", "fla", "ours-gdn", "ours-fa", "ours")
MODE_PARTS = {  # mode -> (gated delta rule path, attention)
    "torch": ("torch", "sdpa"),
    "fla": ("fla", "sdpa"),
    "ours-gdn": ("ours", "sdpa"),
    "ours-fa": ("torch", ATTN_NAME),
    "ours": ("ours", ATTN_NAME),
}

# Random-initialised shapes. qwen3.5-4b: the baseline model (Qwen3.5-4B's heads and widths, 8 layers).
# qwen3-next: Qwen3-Next's heads (16 q over 2 kv heads of 256, partial rotary; linear 16/32 heads of 128) with
# dense MLPs, 4 layers (3 linear + 1 full attention).
SHAPES = {
    "qwen3.5-4b": dict(
        family="qwen3_5",
        vocab_size=32000,
        hidden_size=2560,
        intermediate_size=9216,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=4,
        head_dim=256,
        linear_num_key_heads=16,
        linear_num_value_heads=32,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
    ),
    "qwen3-next": dict(
        family="qwen3_next",
        vocab_size=32000,
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=4,
        num_attention_heads=16,
        num_key_value_heads=2,
        head_dim=256,
        linear_num_key_heads=16,
        linear_num_value_heads=32,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        mlp_only_layers=[0, 1, 2, 3],
        partial_rotary_factor=0.25,
    ),
}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def build_model(shape: str, dtype):
    import torch
    import transformers

    spec = dict(SHAPES[shape])
    family = spec.pop("family")
    if family == "qwen3_5":
        cfg, cls = transformers.Qwen3_5TextConfig(**spec), transformers.Qwen3_5ForCausalLM
    else:
        rope = {
            "rope_type": "default",
            "rope_theta": 10000.0,
            "partial_rotary_factor": spec.pop("partial_rotary_factor"),
        }
        cfg, cls = transformers.Qwen3NextConfig(**spec, rope_parameters=rope), transformers.Qwen3NextForCausalLM
    torch.manual_seed(1234)
    with torch.device("cuda"):
        model = cls(cfg)
    model = model.to(dtype).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model, family


def load_kernel(root: Path):
    import kernels

    return kernels.get_local_kernel(root)


def hooked_reference(inst):
    """(kernels' fallback wrapper, transformers' torch function) behind a hooked module-level function (kernels'
    Func module holds it as its forward's closure variable `func`, in 0.17 and 0.19 alike)."""
    fwd = type(inst).forward
    cells = dict(zip(fwd.__code__.co_freevars, (c.cell_contents for c in fwd.__closure__ or ())))
    wrapped = cells["func"]
    return wrapped, inspect.unwrap(wrapped)


def cache_kw(model) -> str:
    """The forward's cache keyword: `cache` from transformers 5.24 (`past_key_values` is deprecated there)."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def cache_of(out):
    """The cache a forward returned (`cache` from transformers 5.24, `past_key_values` before)."""
    return out["cache"] if "cache" in out else out["past_key_values"]


class GdnSwitch:
    """Sets transformers' hooked gated-delta-rule functions (and, from transformers 5.25, its causal conv hook) to
    the torch reference, fla (for the conv: transformers' default, the causal-conv1d package where installed, else
    torch) or our layers. transformers 5.25 passes q/k un-repeated (Hk < Hv) to the gated-delta-rule hooks; 5.22
    repeats them first: both run the same layers."""

    LAYER = {
        "chunk": "chunk_gated_delta_rule",
        "recurrent": "fused_recurrent_gated_delta_rule",
        "conv": "causal_conv1d_forward",
    }

    def __init__(self, family: str, kernel) -> None:
        mod = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
        self.insts = {"chunk": mod.torch_chunk_gated_delta_rule, "recurrent": mod.torch_recurrent_gated_delta_rule}
        if hasattr(mod, "causal_conv1d_forward") and hasattr(kernel.layers, "causal_conv1d_forward"):
            self.insts["conv"] = mod.causal_conv1d_forward
        self.forward: dict = {}
        self.fla_active = True
        for key, inst in self.insts.items():
            wrapped, ref = hooked_reference(inst)
            free = dict(zip(wrapped.__code__.co_freevars, (c.cell_contents for c in wrapped.__closure__ or ())))
            if key != "conv":
                self.fla_active &= getattr(free.get("implementation"), "__module__", "").startswith("fla.")
            names = frozenset(inspect.signature(ref).parameters)

            def torch_forward(_self, *args, _ref=ref, _names=names, **kwargs):
                return _ref(*args, **{k: v for k, v in kwargs.items() if k in _names})

            self.forward[("torch", key)] = torch_forward
            self.forward[("fla", key)] = type(inst).forward  # the hook itself: fla when it was importable
            self.forward[("ours", key)] = getattr(kernel.layers, self.LAYER[key]).forward

    def set(self, path: str) -> None:
        for key, inst in self.insts.items():
            inst.forward = types.MethodType(self.forward[(path, key)], inst)


def register_attention(kernel) -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTN_NAME, kernel.flash_attn_forward)
    AttentionMaskInterface.register(ATTN_NAME, sdpa_mask)


def set_mode(model, switch: GdnSwitch, mode: str) -> None:
    gdn, attn = MODE_PARTS[mode]
    switch.set(gdn)
    if model.config._attn_implementation != attn:
        model.set_attn_implementation(attn)


def prompt(model, batch: int, length: int = PROMPT):
    import torch

    gen = torch.Generator().manual_seed(7)
    return torch.randint(0, model.config.vocab_size, (batch, length), generator=gen).cuda()


def timed_generate(model, ids, new_tokens: int, **kw) -> dict:
    import torch
    from transformers import LogitsProcessor, LogitsProcessorList

    stamps: list[float] = []

    class Stamp(LogitsProcessor):
        def __call__(self, input_ids, scores):
            # The first call comes as soon as the host has *enqueued* the prefill: wait for the device, or the time
            # to first token would be the host's enqueue time of the prompt's forward. Later steps need no
            # wait: generate() already syncs on every step's stopping check, so their intervals are device steps.
            if not stamps:
                torch.cuda.synchronize()
            stamps.append(time.perf_counter())
            return scores

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        logits_processor=LogitsProcessorList([Stamp()]),
        **kw,
    )
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    steps = [b - a for a, b in zip(stamps, stamps[1:])]
    return {
        "wall": wall,
        "tok_s": ids.shape[0] * new_tokens / wall,
        "step_ms": 1e3 * statistics.median(steps) if steps else float("nan"),
        "ttft_ms": 1e3 * (stamps[0] - t0) if stamps else float("nan"),
        "tokens": out[:, ids.shape[1] :].tolist(),
    }


def profile_decode(model, ids, steps: int = 8) -> dict:
    """Forward-only decode steps: host enqueue time, device kernel time and launches per step."""
    import torch
    from torch.autograd import DeviceType

    with torch.no_grad():
        out = model(ids, use_cache=True)
        cache, nxt, kw = cache_of(out), out.logits[:, -1:].argmax(-1), cache_kw(model)
        for _ in range(2):
            out = model(nxt, **{kw: cache}, use_cache=True)
            nxt = out.logits[:, -1:].argmax(-1)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            out = model(nxt, **{kw: cache}, use_cache=True)
            nxt = out.logits[:, -1:].argmax(-1)
        host = (time.perf_counter() - t0) / steps
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) / steps
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(steps):
                out = model(nxt, **{kw: cache}, use_cache=True)
                nxt = out.logits[:, -1:].argmax(-1)
            torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
    return {
        "host_us": 1e6 * host,
        "wall_us": 1e6 * wall,
        "device_us": sum(e.time_range.end - e.time_range.start for e in kernels) / steps,
        "launches": len(kernels) / steps,
    }


def compile_counters() -> dict:
    """dynamo/inductor's own counters: frames compiled, graphs, graph breaks, CUDA-graph skips."""
    import torch

    c = torch._dynamo.utils.counters
    return {
        "frames": c["frames"].get("total", 0),
        "graphs": c["stats"].get("unique_graphs", 0),
        "graph_breaks": sum(c["graph_break"].values()),
        "break_reasons": sorted(str(k)[:200] for k in c["graph_break"]),
        "cudagraph_skips": c["inductor"].get("cudagraph_skips", 0),
    }


def counter_delta(a: dict, b: dict) -> dict:
    out = {k: b[k] - a[k] for k in ("frames", "graphs", "graph_breaks", "cudagraph_skips")}
    out["break_reasons"] = sorted(set(b["break_reasons"]) - set(a["break_reasons"]))
    return out


def _kernel_times(model, ids, new_tokens: int, gen_kw: dict) -> dict:
    """Device µs and count per kernel name over one generate() (CUDA-graph replays included)."""
    import torch
    from torch.autograd import DeviceType

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        timed_generate(model, ids, new_tokens, **gen_kw)
    per: dict = {}
    for e in prof.events():
        if e.device_type == DeviceType.CUDA:
            us, n = per.get(e.name, (0.0, 0))
            per[e.name] = (us + e.time_range.end - e.time_range.start, n + 1)
    return per


def per_step(short: dict, long: dict, steps: int) -> dict:
    """Kernels of one steady step from two profiles ({name: (device µs, count)}) `steps` decode steps apart."""
    diff = {}
    for name, (us, n) in long.items():
        us0, n0 = short.get(name, (0.0, 0))
        diff[name] = ((us - us0) / steps, (n - n0) / steps)
    top = sorted(diff.items(), key=lambda kv: -kv[1][0])[:8]
    return {
        "device_us": sum(us for us, _ in diff.values()),
        "launches": sum(n for _, n in diff.values()),
        "top": [[k[:90], round(us, 2), round(n, 2)] for k, (us, n) in top],
    }


def profile_compiled_step(model, ids, gen_kw: dict, short: int = 16, long: int = 48) -> dict:
    """One steady compiled decode step: the difference of two profiled generate() calls (short and long), over
    the extra steps, so that the prefill, the first steps and CUDA-graph recording cancel out."""
    long = min(long, NEW_TOKENS)  # within the static cache's length so far: no new cache size, no recompile
    a, b = _kernel_times(model, ids, short, gen_kw), _kernel_times(model, ids, long, gen_kw)
    return per_step(a, b, long - short)


def compile_table(title: str, res: dict, modes) -> str:
    """Per compiled mode: what dynamo/inductor did, and (with --compile-profile) one steady step's kernels."""
    lines = [
        f"#### {title}: compile diagnostics",
        "",
        f"recompiles during the timed rounds: {res.get('recompiles_in_rounds', 'n/a')}",
        "",
        "| mode | warm-up s | frames compiled | graphs | graph breaks | CUDA-graph skips | time to first token ms | "
        "device µs/step | kernels/step | top kernels (µs/step, per step) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    nan = float("nan")
    for m in modes:
        r = res.get(m, {})
        c, p = r.get("compile", {}), r.get("profile", {})
        ttft = statistics.median(x["ttft_ms"] for x in r["rounds"]) if r.get("rounds") else nan
        top = "; ".join(f"{n} {us:.1f}/{k:.0f}" for n, us, k in p.get("top", [])[:5])
        lines.append(
            f"| {m} | {r.get('warmup_s', nan):.1f} | {c.get('frames', '')} | {c.get('graphs', '')} | "
            f"{c.get('graph_breaks', '')} {c.get('break_reasons', '') or ''} | {c.get('cudagraph_skips', '')} | "
            f"{ttft:.1f} | {p.get('device_us', nan):.0f} | {p.get('launches', nan):.0f} | {top} |"
        )
    return "\n".join(lines) + "\n"


def first_diff(a: list, b: list):
    for row, (x, y) in enumerate(zip(a, b)):
        for i, (p, q) in enumerate(zip(x, y)):
            if p != q:
                return (row, i)
    return None


def run_case(model, switch, modes, batch: int, rounds: int, profile: bool, deadline: float, gen_kw=None) -> dict:
    import torch

    gen_kw = gen_kw or {}
    ids = prompt(model, batch)
    res: dict = {m: {"rounds": []} for m in modes}
    for m in modes:  # warm-up: JIT (fla), kernel loading, cuBLAS handles, compiled graphs
        set_mode(model, switch, m)
        before = compile_counters()
        t = time.perf_counter()
        timed_generate(model, ids, 4 if not gen_kw else NEW_TOKENS, **gen_kw)
        res[m]["warmup_s"] = time.perf_counter() - t
        if gen_kw:
            res[m]["compile"] = counter_delta(before, compile_counters())
    frames_before = compile_counters()["frames"]
    for r in range(rounds):
        if r and time.time() > deadline:  # one round always: the warm-up (a compile) is paid for by then
            log(f"  deadline reached after {r} rounds")
            break
        order = list(modes[r % len(modes) :]) + list(modes[: r % len(modes)])
        for m in order:
            set_mode(model, switch, m)
            res[m]["rounds"].append(timed_generate(model, ids, NEW_TOKENS, **gen_kw))
    if gen_kw:  # frames compiled during the timed rounds: recompiles (0 when every mode's graph was reused)
        res["recompiles_in_rounds"] = compile_counters()["frames"] - frames_before
    if profile and time.time() < deadline:
        for m in modes:
            set_mode(model, switch, m)
            res[m]["profile"] = profile_compiled_step(model, ids, gen_kw) if gen_kw else profile_decode(model, ids)
    ref = res[modes[0]]["rounds"][-1]["tokens"] if res[modes[0]]["rounds"] else None
    for m in modes:
        rs = res[m]["rounds"]
        if not rs:
            continue
        res[m]["tok_s"] = statistics.median(x["tok_s"] for x in rs)
        res[m]["tok_s_all"] = [round(x["tok_s"], 1) for x in rs]
        res[m]["step_ms"] = statistics.median(x["step_ms"] for x in rs)
        res[m]["ttft_ms"] = statistics.median(x["ttft_ms"] for x in rs)
        res[m]["first_diff_vs_" + modes[0]] = first_diff(rs[-1]["tokens"], ref)
        for x in rs:
            x.pop("tokens")
    torch.cuda.empty_cache()
    return res


def _ratio(x: float | None, base: float | None) -> str:
    return f"{x / base:.3f}" if x and base else ""


def table(title: str, res: dict, modes) -> str:
    base = res.get("torch", {}).get("tok_s")
    fla = res.get("fla", {}).get("tok_s")
    # Speedups by the median decode step as well: a slow round (the host drifts) moves tok/s medians more.
    base_step = res.get("torch", {}).get("step_ms")
    fla_step = res.get("fla", {}).get("step_ms")
    nan = float("nan")
    lines = [
        f"#### {title}",
        "",
        "| mode | tok/s (median) | rounds | ÷ torch | ÷ fla | decode step ms | step ÷ torch | step ÷ fla | "
        "host µs/step | device µs/step | launches/step | tokens = torch |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for m in modes:
        r = res.get(m, {})
        if "tok_s" not in r:
            lines.append(f"| {m} | not run | | | | | | | | | | |")
            continue
        p = r.get("profile", {})
        d = r.get("first_diff_vs_torch", "n/a")
        same = "yes" if d is None else ("" if d == "n/a" else f"no, from (row, token) {tuple(d)}")
        rounds = ", ".join(f"{x:.0f}" for x in r["tok_s_all"])
        lines.append(
            f"| {m} | {r['tok_s']:.1f} | {rounds} | {_ratio(r['tok_s'], base)} | {_ratio(r['tok_s'], fla)} | "
            f"{r['step_ms']:.2f} | {_ratio(base_step, r['step_ms'])} | {_ratio(fla_step, r['step_ms'])} | "
            f"{p.get('host_us', nan):.0f} | {p.get('device_us', nan):.0f} | "
            f"{p.get('launches', nan):.0f} | {same} |"
        )
    return "\n".join(lines) + "\n"


def run_sweep(model, switch, modes, prompts, new_tokens: int, rounds: int, deadline: float, done=None) -> dict:
    """Batch 1, eager: per prompt length, the time to first token (the prefill: every GDN layer's
    chunk_gated_delta_rule call over the whole prompt, plus attention and the rest of the model) and the decode
    rate after it (tok/s from the median step), for each mode; modes interleaved, order rotated per round."""
    import torch

    res: dict = {}
    for n in prompts:
        if time.time() > deadline:
            log(f"  deadline reached: prompts from {n} on not run")
            break
        ids = prompt(model, 1, n)
        cell: dict = {m: [] for m in modes}
        for m in modes:  # warm-up at this length (fla's Triton kernels autotune per shape)
            set_mode(model, switch, m)
            timed_generate(model, ids, 2)
        for r in range(rounds):
            if r and time.time() > deadline:  # one round always: this length's warm-up is paid for by then
                log(f"  deadline reached: prompt {n} after {r} rounds")
                break
            for m in list(modes[r % len(modes) :]) + list(modes[: r % len(modes)]):
                set_mode(model, switch, m)
                x = timed_generate(model, ids, new_tokens)
                x.pop("tokens")
                cell[m].append(x)
        res[n] = {
            m: {
                "ttft_ms": statistics.median(x["ttft_ms"] for x in xs),
                "decode_tok_s": 1e3 / statistics.median(x["step_ms"] for x in xs),
                "rounds": len(xs),
            }
            for m, xs in cell.items()
            if xs
        }
        if done is not None:  # each prompt length is saved when it is done: a run cut short keeps what it measured
            done(res)
        torch.cuda.empty_cache()
    return res


def sweep_table(title: str, res: dict, modes) -> str:
    lines = [
        f"#### {title}",
        "",
        "| prompt | mode | time to first token ms | ÷ torch | ÷ fla | decode tok/s (median step) | ÷ torch | ÷ fla | rounds |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for n, cell in res.items():
        t0, f0 = cell.get("torch", {}), cell.get("fla", {})
        for m in modes:
            r = cell.get(m)
            if not r:
                lines.append(f"| {n} | {m} | not run | | | | | | |")
                continue
            lines.append(
                f"| {n} | {m} | {r['ttft_ms']:.1f} | {_ratio(r['ttft_ms'], t0.get('ttft_ms'))} | "
                f"{_ratio(r['ttft_ms'], f0.get('ttft_ms'))} | {r['decode_tok_s']:.1f} | "
                f"{_ratio(r['decode_tok_s'], t0.get('decode_tok_s'))} | {_ratio(r['decode_tok_s'], f0.get('decode_tok_s'))} | "
                f"{r['rounds']} |"
            )
    return "\n".join(lines) + "\n"


def compile_label(backend: str) -> str:
    """How a compiled row names its configuration: 'default' is transformers' own CompileConfig()."""
    if backend == "default":
        from transformers import CompileConfig

        cc = CompileConfig()
        return f"default CompileConfig: backend={cc.backend}, mode={cc.mode}"
    return f"backend={backend}" + (", mode=reduce-overhead" if backend == "inductor" else "")


def ttft_child(mode: str, shape: str, kernel_root: Path) -> None:
    """One fresh process: the first generate() (1 new token, batch 1, bf16) on a given path."""
    t0 = time.perf_counter()
    import torch
    import transformers  # noqa: F401

    if mode == "fla":
        import fla  # noqa: F401
    t_import = time.perf_counter() - t0
    model, family = build_model(shape, torch.bfloat16)
    t = time.perf_counter()
    kernel = load_kernel(kernel_root) if mode != "fla" else None
    t_kernel = time.perf_counter() - t
    switch = GdnSwitch(family, kernel) if kernel is not None else None
    if kernel is not None:
        register_attention(kernel)
        set_mode(model, switch, "ours")
    ids = prompt(model, 1)
    first = timed_generate(model, ids, 1)
    second = timed_generate(model, ids, 1)
    print(
        "TTFT "
        + json.dumps(
            {
                "mode": mode,
                "imports_s": t_import,
                "kernel_load_s": t_kernel,
                "first_generate_s": first["wall"],
                "second_generate_s": second["wall"],
            }
        ),
        flush=True,
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "out")
    ap.add_argument(
        "--kernel",
        type=Path,
        default=REPO / "build" / "ggml-attn-kernels",
        help="folder of variants (default: build/ggml-attn-kernels, where `ggml-vendor build` writes them)",
    )
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--shapes", default="qwen3.5-4b,qwen3-next")
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--f32", action="store_true", help="also float32 at batch 1 (GDN modes; FA needs f16/bf16 K/V)")
    ap.add_argument("--f32-only", action="store_true", help="only the float32 batch-1 rows")
    ap.add_argument("--modes", default=",".join(MODES), help="modes to run (comma-separated)")
    ap.add_argument("--profile", action="store_true", help="forward-only decode profile per mode")
    ap.add_argument("--compile", action="store_true", help="static cache + torch.compile rows (qwen3.5-4b)")
    ap.add_argument(
        "--compile-backend",
        default="default",
        help="torch.compile backend for --compile: 'default' (the default) = transformers' own CompileConfig() "
        "(inductor, mode reduce-overhead), what a user gets unasked; 'inductor' the same spelled out; "
        "'cudagraphs' dynamo's CUDA-graphs backend (no inductor fusion)",
    )
    ap.add_argument("--compile-rounds", type=int, default=3)
    ap.add_argument("--compile-only", action="store_true", help="only the --compile rows (no eager rows)")
    ap.add_argument(
        "--compile-profile",
        action="store_true",
        help="per compiled mode: device µs, kernels and the top kernels of one steady decode step (torch.profiler)",
    )
    ap.add_argument(
        "--compile-modes", default="torch,fla,ours", help="modes of the --compile rows (independent of --modes)"
    )
    ap.add_argument("--budget-s", type=float, default=1e9, help="stop starting new rounds after this many seconds")
    ap.add_argument("--ttft", choices=["ours", "fla"], help="time the first generate() of this fresh process")
    ap.add_argument(
        "--prompts",
        default=None,
        help="prompt-length sweep at batch 1 (e.g. 32,512,4096,16384): time to first token and decode tok/s per "
        "mode (--sweep-modes), eager, before the other rows",
    )
    ap.add_argument("--sweep-modes", default="torch,fla,ours", help="modes of the --prompts sweep")
    ap.add_argument("--sweep-new-tokens", type=int, default=32, help="new tokens per generate() in the sweep")
    ap.add_argument("--sweep-only", action="store_true", help="only the --prompts sweep")
    ap.add_argument("--ttft-shape", default="qwen3.5-4b")
    args = ap.parse_args()
    for flag, names in (
        ("--modes", args.modes),
        ("--compile-modes", args.compile_modes),
        ("--sweep-modes", args.sweep_modes),
    ):
        unknown = sorted(set(names.split(",")) - set(MODES))
        if unknown:
            ap.error(f"{flag}: unknown mode(s) {', '.join(unknown)}; choose from {', '.join(MODES)}")

    if args.ttft:
        ttft_child(args.ttft, args.ttft_shape, args.kernel)
        return 0

    import torch
    import transformers

    deadline = time.time() + args.budget_s
    args.out.mkdir(parents=True, exist_ok=True)
    kernel = load_kernel(args.kernel)
    register_attention(kernel)
    env = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "kernel": kernel.__name__,
        "compile": ("eager rows: no torch.compile; compiled rows: " + compile_label(args.compile_backend))
        if args.compile or args.compile_only
        else "eager (no torch.compile)",
    }
    try:
        import fla

        env["fla"] = getattr(fla, "__version__", "?")
    except ImportError:
        env["fla"] = None
    log(json.dumps(env))
    report = {"env": env, "cases": {}}
    md = [f"Environment: {json.dumps(env)}\n"]
    batches = [int(b) for b in args.batches.split(",")]

    def save() -> None:
        (args.out / "bench_generate.json").write_text(json.dumps(report, indent=1, default=str))
        (args.out / "bench_generate.md").write_text("\n".join(md))

    shapes = args.shapes.split(",")
    if args.prompts:
        prompts = [int(n) for n in args.prompts.split(",")]
        model, family = build_model(shapes[0], torch.bfloat16)
        switch = GdnSwitch(family, kernel)
        modes = [m for m in MODES if m in args.sweep_modes.split(",") and (m != "fla" or switch.fla_active)]
        key = f"{shapes[0]} bf16 eager b1 prompt sweep ({args.sweep_new_tokens} new tokens)"
        log(f"== {key}")

        def done(partial: dict) -> None:
            report["cases"][key] = partial
            save()

        res = run_sweep(model, switch, modes, prompts, args.sweep_new_tokens, args.rounds, deadline, done)
        report["cases"][key] = res
        md.append(sweep_table(key, res, modes))
        print(md[-1], flush=True)
        save()
        del model, switch
        torch.cuda.empty_cache()
        if args.sweep_only:
            return 0
    # in order of importance (the budget cuts from the end): Qwen3.5 eager, its compiled rows, the other
    # shapes, float32
    plan = [] if args.f32_only or args.compile_only else [(shapes[0], "bf16", "eager")]
    if (args.compile or args.compile_only) and not args.f32_only:
        plan.append(("qwen3.5-4b", "bf16", "compile"))
    plan += [] if args.f32_only or args.compile_only else [(shape, "bf16", "eager") for shape in shapes[1:]]
    if (args.f32 or args.f32_only) and not args.compile_only:
        plan.append(("qwen3.5-4b", "f32", "eager"))
    for shape, dname, kind in plan:
        if time.time() > deadline:
            log(f"budget spent: {shape} {dname} {kind} not run")
            md.append(f"#### {shape} {dname} {kind}\n\nnot run: the --budget-s budget was spent\n")
            continue
        model, family = build_model(shape, torch.bfloat16 if dname == "bf16" else torch.float32)
        switch = GdnSwitch(family, kernel)
        wanted = args.compile_modes if kind == "compile" else args.modes
        modes = [m for m in MODES if m in wanted.split(",") and (m != "fla" or switch.fla_active)]
        if dname == "f32":  # ggml's attention kernel reads f16/bf16 K/V: ours-fa == torch, ours == ours-gdn
            modes = [m for m in modes if m in ("torch", "fla", "ours-gdn")]
        if not modes:
            log(f"{shape} {dname} {kind}: none of the requested modes can run here (fla not importable?)")
            md.append(f"#### {shape} {dname} {kind}\n\nnot run: none of the requested modes can run here\n")
            continue
        gen_kw, profile, rounds = {}, args.profile, args.rounds
        if kind == "compile":
            from transformers import CompileConfig

            inductor = args.compile_backend == "inductor"
            if args.compile_backend == "default":  # transformers' own defaults, what generate() uses unasked
                cc = CompileConfig()
            else:
                cc = CompileConfig(backend=args.compile_backend, mode="reduce-overhead" if inductor else None)
            gen_kw = {"cache_implementation": "static", "compile_config": cc}
            profile, rounds = args.compile_profile, args.compile_rounds
        for batch in batches if dname == "bf16" else [1]:
            key = (
                f"{shape} {dname} "
                + (f"static+compile({compile_label(args.compile_backend)})" if gen_kw else "eager (no compile)")
                + f" b{batch}"
            )
            if time.time() > deadline:
                log(f"budget spent: {key} not run")
                md.append(f"#### {key}\n\nnot run: the --budget-s budget was spent\n")
                continue
            log(f"== {key}")
            torch._dynamo.utils.counters.clear()
            try:
                res = run_case(model, switch, modes, batch, rounds, profile, deadline, gen_kw=gen_kw)
            except Exception as exc:  # noqa: BLE001 - reported in the tables
                log(f"  failed: {type(exc).__name__}: {exc}")
                report["cases"][key] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
                md.append(f"#### {key}\n\nfailed: {type(exc).__name__}: {str(exc)[:500]}\n")
                save()
                continue
            text = table(key, res, modes)
            if gen_kw:
                breaks = dict(torch._dynamo.utils.counters.get("graph_break", {}))
                res["graph_breaks"] = {str(k): v for k, v in breaks.items()}
                text += f"\ngraph breaks: {sum(breaks.values())} {list(breaks)[:5]}\n\n" + compile_table(
                    key, res, modes
                )
            report["cases"][key] = res
            md.append(text)
            print(text, flush=True)
            save()
        del model, switch
        torch.cuda.empty_cache()
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
