"""The gated delta net prefill grid (bench_gdn.py --prefill): transformers' `chunk_gated_delta_rule` call as
Qwen3.5 makes it, through our layer, fla's chunked kernel and transformers' own torch chunk, side by side in one
process, plus upstream's kernel unpatched and patched on the same values in f32 (what the op runs after its
preparation launch).

Shapes: B in {1, 8} x T in {512, 2048, 8192, 32768}, 32 value heads (q/k already repeat_interleaved to 32, as
the model does before the call), head_dim 128. Inputs as the model hands them over: q, k, v, beta bf16, g f32
(`-exp(A_log) * softplus(a + dt_bias)`, here with A_log spread so that some heads decay strongly), no initial
state, `use_qk_l2norm_in_kernel=True`, `output_final_state=True`. Eager (no torch.compile).

Timing: CUDA events around one synchronised call after an L2 flush (host time included, which a prefill call of
this size hides except for the torch chunk's Python loop), median of a few samples. Correctness: each output and
final state against transformers' torch chunk run in float64 on the same (bf16-rounded) values, where that fits
(B*T <= 32768); beyond it, against fla's output. Prints ratios and the issue's goal (ours <= fla); asserts nothing.
"""

from __future__ import annotations

import functools
import inspect
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from bench_gdn import BASE, load_raws, raw_impl  # noqa: E402
from timing import Timer, environment, load_op, markdown_table, rel_err, report_tail, write_outputs  # noqa: E402

H, D = 32, 128
PREFILL_CASES = [(b, t) for b in (1, 8) for t in (512, 2048, 8192, 32768)]
REF_MAX_TOKENS = 32768  # B*T up to this gets the float64 reference; beyond, rows are compared with fla
ANCHOR = (
    "issue 19: ours <= fla's chunked kernel at every (B, T); docs/perf-anchors: fla chunk bf16 B=32 T=512 1.20 ms, "
    "ggml token-sequential f32 9.74 ms"
)


def l2norm(x: torch.Tensor) -> torch.Tensor:
    """transformers' l2norm (fla's formula): x * rsqrt(sum(x^2) + 1e-6), in float32."""
    x = x.float()
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def prefill_inputs(B: int, T: int, seed: int) -> dict:
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, device="cuda", generator=gen)

    a_log = torch.linspace(-2.0, 2.5, H, device="cuda")  # decay rates from mild to strong (exp(g) down to ~1e-5)
    x = {
        "q": randn(B, T, H, D).bfloat16(),
        "k": randn(B, T, H, D).bfloat16(),
        "v": randn(B, T, H, D).bfloat16(),
        "g": -a_log.exp() * F.softplus(randn(B, T, H) - 1.0),
        "beta": torch.sigmoid(randn(B, T, H)).bfloat16(),
    }
    return x


def raw_inputs(x: dict) -> dict:
    """The f32 values the op's preparation launch hands to ggml's kernel (l2 norm applied, zero state)."""
    B, T = x["q"].shape[:2]
    return {
        "q": l2norm(x["q"]),
        "k": l2norm(x["k"]),
        "v": x["v"].float(),
        "g": x["g"].float().contiguous(),
        "beta": x["beta"].float(),
        "state_vk": torch.zeros(B, H, D, D, device="cuda"),
        "raw_out": torch.empty(B, T, H, D, device="cuda"),
        "raw_state": torch.empty(B, H, D, D, device="cuda"),
    }


def torch_chunk():
    """transformers' torch_chunk_gated_delta_rule itself (unwrapped from kernels' hub hook)."""
    from transformers.models.qwen3_5 import modeling_qwen3_5 as mod

    inst = mod.torch_chunk_gated_delta_rule
    if hasattr(type(inst), "forward") and type(inst).forward.__closure__:
        return inspect.unwrap(type(inst).forward.__closure__[0].cell_contents)
    return inspect.unwrap(inst)


def hf_call(fn, x: dict):
    return fn(
        x["q"], x["k"], x["v"], g=x["g"], beta=x["beta"], initial_state=None, output_final_state=True,
        use_qk_l2norm_in_kernel=True,
    )  # fmt: skip


class ChunkedOnly:
    """The patched harness with its launch entry pointed at the chunked kernel (raw_gdn_launch_cols, cols=-1)."""

    def __init__(self, raw) -> None:
        self.check = raw.check
        launch_cols = raw.lib.raw_gdn_launch_cols
        # raw_gdn_launch's arguments end (..., neqk1, rq3, kda, stream): kda becomes cols = -1
        self.lib = type("Lib", (), {"raw_gdn_launch": staticmethod(lambda *a: launch_cols(*a[:-2], -1, a[-1]))})


def layer_and_fla(script: str, root: Path, want_fla: bool):
    """(our chunk_gated_delta_rule layer, fla's chunk_gated_delta_rule or None) for the lean prefill scripts, or
    an exit code after saying why not (no CUDA device, no build)."""
    if not torch.cuda.is_available():
        print(f"{script}: no CUDA device here; run it on a GPU machine", file=sys.stderr)
        return 2
    op, status = load_op(None, root)
    print(f"op: {status}", flush=True)
    if op is None:
        return 1
    fla = None
    if want_fla:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fla
    return op.layers.chunk_gated_delta_rule(), fla


def impls(op, fla_chunk, raws) -> list[tuple[str, object, str]]:
    """(name, call(x) -> (out, state [B,H,K,V]), note) for everything that loaded."""
    out = []
    if op is not None and hasattr(op, "layers"):
        layer = op.layers.chunk_gated_delta_rule()
        out.append(("ours", lambda x: hf_call(layer.forward, x), "layers.chunk_gated_delta_rule (the op)"))
    if fla_chunk is not None:
        out.append(("fla chunk", lambda x: hf_call(fla_chunk, x), "fla.ops.gated_delta_rule.chunk_gated_delta_rule"))
    try:
        ref = torch_chunk()
        out.append(("transformers torch chunk", lambda x: hf_call(ref, x), "torch_chunk_gated_delta_rule, eager"))
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        print(f"[bench_gdn prefill] transformers' torch chunk unavailable: {exc}", flush=True)
    pairs = list(raws.items())
    if "ggml patched" in raws:  # the chunked kernel itself, whatever the launcher's threshold picks
        pairs.append(
            ("ggml chunked kernel", (ChunkedOnly(raws["ggml patched"][0]), "vendor/patches/0003's kernel, forced"))
        )
    for name, (raw, note) in pairs:
        impl = raw_impl(name, raw, note)

        def raw_call(x, _impl=impl):
            y = x.setdefault("_raw", raw_inputs(x))
            o, s_kv = _impl.result(y)
            return o, s_kv

        def raw_time(x, _impl=impl):
            return _impl.call(x.setdefault("_raw", raw_inputs(x)))

        out.append((name, (raw_call, raw_time), note + "; f32 inputs prepared outside the timed call"))
    return out


def reference(x: dict):
    ref = torch_chunk()
    y = {n: x[n].double() for n in ("q", "k", "v", "g", "beta")}
    o, s = hf_call(ref, y)
    return o, s


def time_call(timer: Timer, fn) -> object:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    one = time.perf_counter() - t0
    return timer.events_us(fn, samples=1 if one > 3.0 else 3 if one > 0.3 else 7)


def parse_cases(text: str | None) -> list[tuple[int, int]]:
    if not text:
        return PREFILL_CASES
    return [tuple(int(v) for v in c.split("x")) for c in text.split(",")]  # type: ignore[misc]


def run_prefill(args) -> int:
    if not torch.cuda.is_available():
        print("bench_gdn --prefill: no CUDA device here; run it on the GPU machine", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    env = environment()
    timer = Timer()
    op, op_status = load_op(args.kernel, ROOT)
    raws, raw_status = load_raws(args)
    try:
        import fla
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fla_chunk

        fla_status = f"fla-core {getattr(fla, '__version__', '?')}"
    except Exception as exc:  # noqa: BLE001
        fla_chunk, fla_status = None, f"unavailable: {type(exc).__name__}: {exc}".splitlines()[0][:200]
    env.update(
        op=op_status,
        fla=fla_status,
        compile="eager (no torch.compile)",
        **{k.replace(" ", "_"): v for k, v in raw_status.items()},
    )
    for k, v in (("op", op_status), *raw_status.items(), ("fla", fla_status)):
        print(f"[bench_gdn prefill] {k}: {v}", flush=True)
    cases = parse_cases(args.prefill_cases)
    todo = impls(op, fla_chunk, raws)
    results = []
    for ci, (B, T) in enumerate(cases):
        x = prefill_inputs(B, T, seed=7000 + ci)
        with torch.no_grad():
            ref = reference(x) if B * T <= REF_MAX_TOKENS else None
            ref_name = "float64" if ref is not None else None
            for name, call, note in todo:
                result, timed = call if isinstance(call, tuple) else (call, call)
                row = {"B": B, "T": T, "impl": name, "note": note}
                try:
                    o, s = result(x)
                    if ref is None and name == "fla chunk":
                        ref, ref_name = (o.double(), s.double()), "fla chunk"
                    if ref is not None:
                        row["err_out"], row["err_state"] = rel_err(o, ref[0]), rel_err(s, ref[1])
                        row["ref"] = ref_name
                    del o, s
                    row["t"] = time_call(timer, functools.partial(timed, x))
                except Exception as exc:  # noqa: BLE001 - one failure must not hide the other rows
                    torch.cuda.synchronize()
                    row["error"] = f"{type(exc).__name__}: {str(exc).strip()[:200]}"
                results.append(row)
                t = row.get("t")
                print(
                    f"[bench_gdn prefill] B={B} T={T} {name}: "
                    + (
                        row["error"]
                        if "error" in row
                        else f"{t.median / 1000:.3f} ms, err {row.get('err_out', float('nan')):.1e}"
                    ),
                    flush=True,
                )
        del x
        torch.cuda.empty_cache()
    markdown = render_prefill(results, env, cases)
    md, js = write_outputs(
        Path(args.out), "bench_gdn_prefill", markdown, {"env": env, "results": results, "argv": sys.argv}
    )
    print(markdown)
    print(f"\n[bench_gdn prefill] wrote {md} and {js}")
    return 0


def _ms(r) -> float | None:
    return r["t"].median / 1000 if r and "t" in r and r["t"].median is not None else None


def render_prefill(results, env, cases) -> str:
    header = ["B", "T", "impl", "**ms** (events; p10–p90)", "÷ fla chunk", f"÷ {BASE}", "Mtok/s", "rel err out",
              "rel err state", "vs"]  # fmt: skip
    rows, verdicts = [], []
    for B, T in cases:
        mine = [r for r in results if r["B"] == B and r["T"] == T]
        fla = next((_ms(r) for r in mine if r["impl"] == "fla chunk" and "error" not in r), None)
        base = next((_ms(r) for r in mine if r["impl"] == BASE and "error" not in r), None)
        for r in mine:
            if "error" in r:
                rows.append([str(B), str(T), r["impl"], f"error: {r['error']}"] + [""] * 6)
                continue
            ms, t = _ms(r), r["t"]
            rows.append([
                str(B), str(T), r["impl"], f"**{ms:.3f}** ({t.p10 / 1000:.3f}–{t.p90 / 1000:.3f})",
                f"{ms / fla:.2f}" if fla else "–", f"{ms / base:.2f}" if base else "–", f"{B * T / ms / 1000:.1f}",
                f"{r['err_out']:.1e}" if "err_out" in r else "–", f"{r['err_state']:.1e}" if "err_state" in r else "–",
                r.get("ref", "–"),
            ])  # fmt: skip
        ours = next((_ms(r) for r in mine if r["impl"] == "ours" and "error" not in r), None)
        if ours and fla:
            verdicts.append(f"* B={B} T={T}: ours {ours:.3f} ms ÷ fla {fla:.3f} ms = **{ours / fla:.2f}** → "
                            f"{'MET' if ours <= fla else 'MISSED'}")  # fmt: skip
        else:
            verdicts.append(f"* B={B} T={T}: not judged (ours or fla not measured)")
    lines = [
        "## Gated delta net prefill: transformers' chunk_gated_delta_rule call, ours vs fla vs torch",
        "",
        f"H={H} value heads (q/k repeat_interleaved to {H}), head_dim={D}; q, k, v, beta bf16, g f32; l2 norm in "
        "the kernel; no initial state; final state out. Eager (no torch.compile). ms per call, medians; CUDA events "
        "around one synchronised call after an L2 flush (host time included). `ggml unpatched` / `ggml patched`: "
        "upstream's launcher on the f32 values the op prepares (preparation outside the timed call).",
        "",
        markdown_table(header, rows),
        "",
        "### Goal (printed, not asserted): ours ≤ fla chunk",
        "",
        *verdicts,
    ]
    lines += report_tail(ANCHOR, env)
    return "\n".join(lines)
