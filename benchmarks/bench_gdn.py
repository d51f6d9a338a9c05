"""Gated delta net at decode, side by side in one process: ggml's kernel unpatched vs with our patches
(vendor/patches) vs this op vs fla, over B in {1, 8, 32, 64} x T in {1, 2, 4, 8}; with --prefill, the prefill
grid instead (B in {1, 8} x T in {512, 2048, 8192, 32768}): transformers' `chunk_gated_delta_rule` call through our
layer vs fla's chunked kernel vs transformers' torch chunk, as the model makes it (bf16 q/k/v/beta, f32 g, l2 norm
in the kernel, final state out), plus upstream's token-sequential kernel on the same values in f32.

32 value heads, head_dim 128, f32 throughout, q and k already L2-normalised with one head per value head (the op's
contract), state [value][key] for ggml and the op and [key][value] for fla (plus fla's `state_v_first` on ggml's
layout). "ggml unpatched" is upstream's kernel built from vendor/ggml with every vendor/patches/*.patch undone;
"ggml patched" the same harness on vendor/ggml as synced. Every implementation runs on the same random inputs and
is checked against a float64 recurrence before it is timed (device time with the host hidden, and per call inside
a CUDA graph). Prints ratios and the issue's targets beside them; asserts nothing.

    python3 benchmarks/bench_gdn.py [--out benchmarks/out] [--kernel build/ggml-attn-kernels/<variant>] [--quick] [--eager]
    python3 benchmarks/bench_gdn.py --prefill [--prefill-cases 1x512,8x2048]
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from timing import (  # noqa: E402
    Timer,
    bench_parser,
    environment,
    host_yardstick,
    load_op,
    markdown_table,
    ratio,
    rel_err,
    report_tail,
    write_outputs,
)

H, D = 32, 128
CASES = [(b, t) for b in (1, 8, 32, 64) for t in (1, 2, 4, 8)]
QUICK = [(1, 1), (8, 4), (32, 1), (32, 4)]
BASE = "ggml unpatched"
# Issue 10's targets on an H200 (device µs, host hidden): (B, T) -> ceiling. Printed beside the numbers.
TARGETS_US = {(32, 1): 33.0, (32, 4): 50.0, (1, 1): 5.5}
NOT_SLOWER = 1.03  # "no shape slower than unpatched": ratios above this (beyond run-to-run noise) are flagged
ANCHOR_NOTE = (
    "issue 10 (H200, device µs): ggml 46.9 / 85.1 / 5.3 at B=32 T=1 / B=32 T=4 / B=1 T=1; fla v-first 36.8 / 57.3 / 5.8"
)


def eager_recurrence(q, k, v, g, beta, state_kv, dtype=torch.float32, verbatim=False):
    """transformers' torch_recurrent_gated_delta_rule (Qwen3-Next, 5.x), written out: HF layout in
    ([B,T,H,D], state [B,H,K,V]), inputs already L2-normalised (use_qk_l2norm_in_kernel=False), scale on q.

    verbatim=True keeps transformers' `torch.zeros(...).to(value)` for the output: a CPU tensor copied to the GPU
    with non_blocking=False, i.e. a stream synchronisation on every call (and no CUDA-graph capture). The
    default allocates those zeros on the device instead, the one change, so that the recurrence's own device
    cost can be measured; the arithmetic is identical."""
    initial_dtype = q.dtype
    q, k, v, beta, g = [x.transpose(1, 2).contiguous().to(dtype) for x in (q, k, v, beta, g)]
    batch, heads, seq_len, _ = k.shape
    v_dim = v.shape[-1]
    q = q * (1 / (q.shape[-1] ** 0.5))
    if verbatim:
        out = torch.zeros(batch, heads, seq_len, v_dim).to(v)
    else:
        out = torch.zeros(batch, heads, seq_len, v_dim, device=v.device, dtype=v.dtype)
    s = state_kv.to(v)
    for i in range(seq_len):
        q_t, k_t, v_t = q[:, :, i], k[:, :, i], v[:, :, i]
        g_t = g[:, :, i].exp().unsqueeze(-1).unsqueeze(-1)
        beta_t = beta[:, :, i].unsqueeze(-1)
        s = s * g_t
        kv_mem = (s * k_t.unsqueeze(-1)).sum(dim=-2)
        delta = (v_t - kv_mem) * beta_t
        s = s + k_t.unsqueeze(-1) * delta.unsqueeze(-2)
        out[:, :, i] = (s * q_t.unsqueeze(-1)).sum(dim=-2)
    return out.transpose(1, 2).contiguous().to(initial_dtype), s


def make_inputs(B: int, T: int, seed: int) -> dict:
    """docs/perf-reference.md's inputs: unit q/k, randn v, g = logsigmoid(randn+3) (exp(g) ~ 0.95), beta = sigmoid(randn)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    dev = "cuda"

    def randn(*shape):
        return torch.randn(*shape, device=dev, generator=gen)

    x = {
        "q": F.normalize(randn(B, T, H, D), dim=-1),
        "k": F.normalize(randn(B, T, H, D), dim=-1),
        "v": randn(B, T, H, D),
        "g": F.logsigmoid(randn(B, T, H) + 3.0),
        "beta": torch.sigmoid(randn(B, T, H)),
        "state_vk": 0.5 * randn(B, H, D, D),  # the op's and ggml's layout: [value][key]
    }
    x["state_kv"] = x["state_vk"].transpose(-1, -2).contiguous()  # fla's default layout
    # ggml raw writes into buffers we own (the op allocates its own; that cost is part of the op).
    x["raw_out"] = torch.empty(B, T, H, D, device=dev)
    x["raw_state"] = torch.empty(B, H, D, D, device=dev)
    return x


class Impl:
    """One implementation: `call(x)` runs it on input set x; `result(x)` returns (out, state as [K,V])."""

    def __init__(self, name, call, result, note=""):
        self.name, self.call, self.result, self.note = name, call, result, note


def raw_impl(name: str, raw, note: str) -> Impl:
    """ggml's kernel through upstream's own launch_gated_delta_net, called via ctypes (benchmarks/raw_ggml)."""
    launch, check = raw.lib.raw_gdn_launch, raw.check
    current_stream = torch._C._cuda_getCurrentRawStream  # the capture stream too, inside a graph
    q_dev = torch.cuda.current_device()

    def raw_args(x):
        # Precomputed once per input set: the harness is the floor for what a Python-called launch costs.
        q, v, b = x["q"], x["v"], x["beta"]
        B, T = q.shape[0], q.shape[1]
        return (
            q.data_ptr(), x["k"].data_ptr(), v.data_ptr(), x["g"].data_ptr(), b.data_ptr(), x["state_vk"].data_ptr(),
            x["raw_out"].data_ptr(), x["raw_state"].data_ptr(), D, H, T, B,
            q.stride(2), q.stride(1), q.stride(0), v.stride(2), v.stride(1), v.stride(0),
            b.stride(2), b.stride(1), b.stride(0), H, 1, 0,
        )  # fmt: skip

    def call(x):
        key = ("_raw_args", name)
        args = x.get(key) or x.setdefault(key, raw_args(x))
        rc = launch(*args, current_stream(q_dev))
        if rc:
            check(rc)

    def result(x):
        x["raw_out"].fill_(float("nan"))  # poisoned: an element the kernel leaves unwritten shows as NaN
        x["raw_state"].fill_(float("nan"))
        call(x)
        return x["raw_out"].clone(), x["raw_state"].transpose(-1, -2).clone()

    return Impl(name, call, result, note)


def build_impls(op, raws: dict, fla_fn, eager: bool = False) -> tuple[list[Impl], dict[str, str]]:
    impls, missing = [], {}
    for name, (raw, note) in raws.items():
        impls.append(raw_impl(name, raw, note))

    if op is not None and hasattr(op, "gated_delta_net"):
        gdn = op.gated_delta_net

        def op_call(x):
            return gdn(x["q"], x["k"], x["v"], x["g"], x["beta"], x["state_vk"])

        def op_result(x):
            y = dict(x, state_vk=x["state_vk"].clone())
            out, st = op_call(y)
            return out, st.transpose(-1, -2)

        impls.append(Impl("op", op_call, op_result, "this package (vendor/ggml with the patches), via kernels"))
    elif op is not None:
        missing["op"] = "the loaded package has no gated_delta_net"

    if fla_fn is not None:

        def fla_call(x):
            return fla_fn(
                x["q"], x["k"], x["v"], g=x["g"], beta=x["beta"], initial_state=x["state_kv"], output_final_state=True
            )

        def fla_vfirst_call(x):
            return fla_fn(
                x["q"],
                x["k"],
                x["v"],
                g=x["g"],
                beta=x["beta"],
                initial_state=x["state_vk"],
                output_final_state=True,
                state_v_first=True,
            )

        impls.append(Impl("fla", fla_call, lambda x: fla_call(x), "fused_recurrent, state [K,V]"))
        impls.append(
            Impl(
                "fla v-first",
                fla_vfirst_call,
                lambda x: (lambda o, s: (o, s.transpose(-1, -2)))(*fla_vfirst_call(x)),
                "fused_recurrent, state_v_first=True ([V,K], ggml's layout)",
            )
        )

    if eager:

        def eager_call(x):
            return eager_recurrence(x["q"], x["k"], x["v"], x["g"], x["beta"], x["state_kv"])

        impls.append(Impl("eager torch", eager_call, eager_call, "transformers' recurrence written out"))
    return impls, missing


def graph_sets(B: int, T: int, l2_bytes: int) -> int:
    """Input sets per graph so that one replay's working set is about 3x L2 (as a decode step over layers)."""
    per_set = 2 * B * H * D * D * 4 + 4 * B * T * H * D * 4
    return max(2, min(16, math.ceil(3 * l2_bytes / per_set)))


def load_raws(args) -> tuple[dict, dict[str, str]]:
    """{name: (RawGgml, note)} for upstream's kernel unpatched and, when vendor/patches holds patches, patched."""
    raws, status = {}, {}
    if getattr(args, "no_raw", False):
        return raws, {BASE: "not built (--no-raw)"}
    try:
        from raw_ggml import loader

        vendor, build = Path(args.vendor), Path(args.build_dir)
        pristine, undone = loader.pristine_tree(vendor, Path(args.patches), build)
        raws[BASE] = (loader.RawGgml(loader.build(pristine, build, quiet=False)), "upstream's kernel, patches undone")
        status[BASE] = f"built from {pristine}" + (f" ({', '.join(undone)} undone)" if undone else "")
        if undone:
            raws["ggml patched"] = (
                loader.RawGgml(loader.build(vendor, build, quiet=False)),
                f"with {', '.join(undone)}",
            )
            status["ggml patched"] = f"built from {vendor}"
    except Exception as exc:
        status[BASE] = f"unavailable: {exc}".splitlines()[0][:300]
    return raws, status


def load_fla():
    try:
        import fla
        from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule as fla_fn

        return fla_fn, f"fla-core {getattr(fla, '__version__', '?')}"
    except Exception as exc:
        return None, f"unavailable: {type(exc).__name__}: {exc}".splitlines()[0][:300]


def run(args) -> int:
    if not torch.cuda.is_available():
        print("bench_gdn: no CUDA device here; run it on the GPU machine", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    env = environment()
    timer = Timer()

    op, op_status = load_op(args.kernel, ROOT)
    raws, raw_status = load_raws(args)
    fla_fn, fla_status = load_fla()
    env.update(op=op_status, fla=fla_status, **{k.replace(" ", "_"): v for k, v in raw_status.items()})
    for k, v in (("op", op_status), *raw_status.items(), ("fla", fla_status)):
        print(f"[bench_gdn] {k}: {v}", flush=True)

    impls, missing = build_impls(op, raws, fla_fn, eager=args.eager)
    if op is None:
        missing["op"] = op_status
    if BASE not in raws:
        missing[BASE] = raw_status[BASE]
    if fla_fn is None:
        missing["fla"] = fla_status
    env["host_yardstick_us"] = host_yardstick(timer)
    l2 = env.get("l2_bytes") or (60 << 20)
    cases = QUICK if args.quick else CASES
    results = []
    for ci, (B, T) in enumerate(cases):
        n_sets = graph_sets(B, T, l2)
        sets = [make_inputs(B, T, seed=1000 * ci + s) for s in range(n_sets)]
        x0 = sets[0]
        ref_out, ref_state = eager_recurrence(
            *(x0[n].double() for n in ("q", "k", "v", "g", "beta", "state_kv")), dtype=torch.float64
        )
        for impl in impls:
            row = {"B": B, "T": T, "impl": impl.name, "note": impl.note}
            try:
                with torch.no_grad():
                    out, st = impl.result(x0)
                    row["err_out"] = rel_err(out, ref_out)
                    row["err_state"] = rel_err(st, ref_state)
                    call = (lambda f, x: lambda: f(x))(impl.call, x0)
                    for _ in range(3):
                        call()
                    torch.cuda.synchronize()
                    host = timer.host_us(call, n=10)
                    row["host_enqueue"] = host
                    row["hidden"] = timer.hidden_us(call, samples=args.samples, host=host)
                    row["graph"] = timer.graph_us([(lambda f, x: lambda: f(x))(impl.call, s) for s in sets])
                    if args.loop:
                        row["loop"] = timer.loop_us(call, n=200, budget_s=0.5)
            except Exception as exc:  # one implementation failing must not hide the others' numbers
                torch.cuda.synchronize()
                row["error"] = (
                    f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ''}"
                )
            results.append(row)
            print(
                f"[bench_gdn] B={B} T={T} {impl.name}: "
                + (
                    "error " + row["error"]
                    if "error" in row
                    else f"hidden {row['hidden'].fmt()} µs, graph {row['graph'].fmt()}, "
                    f"err {row['err_out']:.1e}/{row['err_state']:.1e}"
                ),
                flush=True,
            )
        del sets
        torch.cuda.empty_cache()

    markdown = render(results, missing, env, cases)
    md, js = write_outputs(
        Path(args.out), "bench_gdn", markdown, {"env": env, "missing": missing, "results": results, "argv": sys.argv}
    )
    print(markdown)
    print(f"\n[bench_gdn] wrote {md} and {js}")
    return 0


def _find(results, B, T, name):
    for r in results:
        if r["B"] == B and r["T"] == T and r["impl"] == name and "error" not in r:
            return r
    return None


def _median(r, key="hidden"):
    return r[key].median if r and key in r and r[key].median is not None else None


def patched_name(results) -> str | None:
    """The row that carries our patches: the op when it was measured, else ggml's harness on the patched tree."""
    for name in ("op", "ggml patched"):
        if any(r["impl"] == name and "error" not in r for r in results):
            return name
    return None


def render(results, missing, env, cases) -> str:
    header = [
        "B",
        "T",
        "impl",
        "**device µs** (host hidden; p10–p90)",
        f"÷ {BASE}",
        "in-graph µs/call",
        f"÷ {BASE}",
        "rel err out",
        "rel err state",
    ]
    rows = []
    for B, T in cases:
        base = _find(results, B, T, BASE)
        for r in (r for r in results if r["B"] == B and r["T"] == T):
            if "error" in r:
                rows.append([str(B), str(T), r["impl"], f"error: {r['error']}"] + [""] * (len(header) - 4))
                continue
            dev = r["hidden"]
            dev_txt = f"**{dev.fmt()}** ({dev.p10:.1f}–{dev.p90:.1f})" if dev.median is not None else f"– ({dev.note})"
            rows.append(
                [
                    str(B),
                    str(T),
                    r["impl"],
                    dev_txt,
                    ratio(dev, base and base["hidden"]),
                    r["graph"].fmt(),
                    ratio(r["graph"], base and base["graph"]),
                    f"{r['err_out']:.1e}",
                    f"{r['err_state']:.1e}",
                ]
            )
        for name, why in missing.items():
            rows.append([str(B), str(T), name, why] + [""] * (len(header) - 4))

    lines = [
        "## Gated delta net at decode: ggml unpatched vs patched vs the op vs fla",
        "",
        f"H={H} value heads (q/k one head per value head), head_dim={D}, f32, state 0.5·randn; inputs as "
        f"docs/perf-reference.md. Times in µs, medians. Ratios are ÷ `{BASE}` (upstream's kernel, launched by upstream's "
        "own `launch_gated_delta_net`), so below 1 is faster than upstream.",
        "",
        markdown_table(header, rows),
        "",
        "### Targets (printed, not asserted)",
        "",
    ]
    who = patched_name(results)
    if who is None:
        lines.append("* no patched row was measured (" + (missing.get("op") or "no patches in vendor/patches") + ")")
    else:
        for (B, T), limit in TARGETS_US.items():
            r, base = _find(results, B, T, who), _find(results, B, T, BASE)
            if _median(r) is None:
                lines.append(f"* B={B} T={T} ≤ {limit} µs: {who} not measured")
                continue
            got = _median(r)
            vs = f"; unpatched {_median(base):.1f} µs" if _median(base) else ""
            fla = [_median(_find(results, B, T, n)) for n in ("fla", "fla v-first")]
            best_fla = min((x for x in fla if x), default=None)
            vs += f"; best fla {best_fla:.1f} µs" if best_fla else ""
            lines.append(
                f"* B={B} T={T} ≤ {limit} µs: {who} **{got:.1f} µs** = {got / limit:.2f}× the target → "
                f"{'MET' if got <= limit else 'MISSED'}{vs}"
            )
        # The kernel change alone: ggml's own launcher on the patched tree against the same on upstream's.
        kern = "ggml patched" if any(r["impl"] == "ggml patched" for r in results) else who
        slower = []
        for B, T in cases:
            r, base = _median(_find(results, B, T, kern)), _median(_find(results, B, T, BASE))
            if r and base and r / base > NOT_SLOWER:
                slower.append(f"B={B} T={T} ({r / base:.2f}×)")
        measured = sum(
            1 for B, T in cases if _median(_find(results, B, T, kern)) and _median(_find(results, B, T, BASE))
        )
        lines.append(
            f"* no shape slower than unpatched ({kern} ÷ {BASE} ≤ {NOT_SLOWER}, the run-to-run spread): "
            + (f"MISSED at {', '.join(slower)}" if slower else f"MET on all {measured} shapes measured")
        )
    lines += report_tail(ANCHOR_NOTE, env)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__doc__, "bench_gdn", ROOT)
    p.add_argument("--patches", default=str(ROOT / "vendor" / "patches"), help="our patches (undone for the baseline)")
    p.add_argument("--quick", action="store_true", help=f"only {QUICK}")
    p.add_argument("--loop", action="store_true", help="also time back-to-back Python calls (host-bound)")
    p.add_argument("--eager", action="store_true", help="also time transformers' eager recurrence (slow)")
    p.add_argument("--prefill", action="store_true", help="the prefill grid (bench_gdn_prefill.py) instead of decode")
    p.add_argument("--no-raw", action="store_true", help="skip ggml's own launcher rows (no harness build)")
    p.add_argument("--prefill-cases", default=None, help="BxT list for --prefill, e.g. 1x512,8x2048 (default: all)")
    args = p.parse_args(argv)
    if args.prefill:
        from bench_gdn_prefill import run_prefill  # it imports this module's helpers: loaded on demand

        return run_prefill(args)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
