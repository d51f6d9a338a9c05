"""Gated delta net, side by side in one process: this op vs ggml's raw kernel vs fla vs the eager torch recurrence.

Shapes are those of docs/perf-reference.md §2 (32 value heads, head_dim 128, B in {1, 32}, T in {1, 4, 512}),
f32 throughout, q and k already L2-normalised with one head per value head (the op's contract), state [value][key]
for the op and ggml and [key][value] for fla and HF. Every implementation runs on the same random inputs and is
checked against a float64 recurrence before it is timed. Prints ratios and the targets beside them; asserts nothing.

    python3 benchmarks/bench_gdn.py [--out benchmarks/out] [--kernel build/<variant>] [--quick]
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

from _timing import (  # noqa: E402
    Stat,
    Timer,
    bench_parser,
    environment,
    host_yardstick,
    load_op,
    load_raw_ggml,
    markdown_table,
    ratio,
    rel_err,
    report_tail,
    write_outputs,
)

H, D = 32, 128
CASES = [(1, 1), (1, 4), (1, 512), (32, 1), (32, 4), (32, 512)]
# docs/perf-reference.md §2, same shapes on the same kind of GPU (for reading the table, never compared in code).
ANCHOR_NOTE = (
    "docs/perf-reference.md §2, B=1 T=1: per call from Python ggml (ctypes) 11.5, fla 98.6, eager 156.1 µs; "
    "device (hidden) ggml 6.2, fla 6.7, eager 44.6 µs"
)
TARGET_LOOP_US = 15.0
TARGET_DEVICE_RATIO = 1.10


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
    """docs/perf-reference.md §2's inputs: unit q/k, randn v, g = logsigmoid(randn+3) (exp(g) ~ 0.95), beta = sigmoid(randn)."""
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
    x["state_kv"] = x["state_vk"].transpose(-1, -2).contiguous()  # HF's and fla's default layout
    x["state_scratch"] = x["state_vk"].clone()  # for the op's inplace=True
    # ggml raw writes into buffers we own (the op allocates its own; that cost is part of the op).
    x["raw_out"] = torch.empty(B, T, H, D, device=dev)
    x["raw_state"] = torch.empty(B, H, D, D, device=dev)
    return x


class Impl:
    """One implementation: `call(x)` runs it on input set x; `result(x)` returns (out, state as [K,V])."""

    def __init__(self, name, call, result, note=""):
        self.name, self.call, self.result, self.note = name, call, result, note


def build_impls(op, raw, fla_fn) -> tuple[list[Impl], dict[str, str]]:
    impls, missing = [], {}
    q_dev = torch.cuda.current_device()

    if op is not None and hasattr(op, "gated_delta_net"):
        gdn = op.gated_delta_net

        def op_call(x):
            return gdn(x["q"], x["k"], x["v"], x["g"], x["beta"], x["state_vk"])

        def op_result(x):
            # The op may update the state in place: give it a copy so the input set stays what the reference saw.
            y = dict(x, state_vk=x["state_vk"].clone())
            out, st = op_call(y)
            return out, st.transpose(-1, -2)

        impls.append(Impl("op", op_call, op_result, "returns a new final_state"))

        def op_inplace_call(x):
            return gdn(x["q"], x["k"], x["v"], x["g"], x["beta"], x["state_scratch"], inplace=True)

        def op_inplace_result(x):
            y = dict(x, state_scratch=x["state_vk"].clone())
            out, st = op_inplace_call(y)
            return out, st.transpose(-1, -2)

        # inplace=True writes the final state over the input (a decode cache): no state allocation per call.
        # It works on its own copy of the state (state_scratch), which repeated timing calls evolve; that stays
        # bounded (decay ~0.95, unit keys) and leaves the other implementations' inputs untouched.
        impls.append(Impl("op inplace", op_inplace_call, op_inplace_result, "inplace=True"))
    elif op is not None:
        missing["op"] = "the loaded package has no gated_delta_net"

    if raw is not None:
        launch, check = raw.lib.raw_gdn_launch, raw.check
        current_stream = torch._C._cuda_getCurrentRawStream  # the capture stream too, inside a graph

        def raw_args(x):
            # Precomputed once per input set: the harness is the floor for what a Python-called launch costs.
            q, v, b = x["q"], x["v"], x["beta"]
            B, T = q.shape[0], q.shape[1]
            return (
                q.data_ptr(),
                x["k"].data_ptr(),
                v.data_ptr(),
                x["g"].data_ptr(),
                b.data_ptr(),
                x["state_vk"].data_ptr(),
                x["raw_out"].data_ptr(),
                x["raw_state"].data_ptr(),
                D,
                H,
                T,
                B,
                q.stride(2),
                q.stride(1),
                q.stride(0),
                v.stride(2),
                v.stride(1),
                v.stride(0),
                b.stride(2),
                b.stride(1),
                b.stride(0),
                H,
                1,
                0,
            )

        def raw_call(x):
            args = x.get("_raw_args") or x.setdefault("_raw_args", raw_args(x))
            rc = launch(*args, current_stream(q_dev))
            if rc:
                check(rc)

        def raw_result(x):
            x["raw_out"].fill_(float("nan"))
            x["raw_state"].fill_(float("nan"))
            raw_call(x)
            return x["raw_out"].clone(), x["raw_state"].transpose(-1, -2).clone()

        impls.append(Impl("ggml raw", raw_call, raw_result, "upstream launch_gated_delta_net via ctypes"))

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

    def eager_call(x):
        return eager_recurrence(x["q"], x["k"], x["v"], x["g"], x["beta"], x["state_kv"])

    def eager_verbatim_call(x):
        return eager_recurrence(x["q"], x["k"], x["v"], x["g"], x["beta"], x["state_kv"], verbatim=True)

    impls.append(
        Impl(
            "eager torch",
            eager_call,
            eager_call,
            "transformers' recurrence written out, output zeros allocated on the GPU",
        )
    )
    impls.append(
        Impl(
            "eager HF verbatim",
            eager_verbatim_call,
            eager_verbatim_call,
            "as transformers: CPU zeros .to(GPU) = one stream sync per call",
        )
    )
    return impls, missing


def graph_sets(B: int, T: int, l2_bytes: int) -> int:
    """Input sets per graph so that one replay's working set is about 3x L2 (as a decode step over layers)."""
    per_set = 2 * B * H * D * D * 4 + 4 * B * T * H * D * 4
    return max(2, min(16, math.ceil(3 * l2_bytes / per_set)))


def run(args) -> int:
    if not torch.cuda.is_available():
        print("bench_gdn: no CUDA device here; run it on the GPU machine", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    env = environment()
    timer = Timer()

    op, op_status = load_op(args.kernel, ROOT)
    raw, raw_status = load_raw_ggml(Path(args.vendor), Path(args.build_dir))
    fla_fn, fla_status = None, ""
    try:
        import fla
        from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule as fla_fn

        fla_status = f"fla-core {getattr(fla, '__version__', '?')}"
    except Exception as exc:
        fla_status = f"unavailable: {type(exc).__name__}: {exc}".splitlines()[0][:300]
    env.update(op=op_status, ggml_raw=raw_status, fla=fla_status)
    print(f"[bench_gdn] op: {op_status}\n[bench_gdn] ggml raw: {raw_status}\n[bench_gdn] fla: {fla_status}", flush=True)

    impls, missing = build_impls(op, raw, fla_fn)
    if op is None:
        missing["op"] = op_status
    if raw is None:
        missing["ggml raw"] = raw_status
    if fla_fn is None:
        missing["fla"] = fla_status
    env["host_yardstick_us"] = host_yardstick(timer)
    l2 = env.get("l2_bytes") or (60 << 20)
    cases = CASES[:2] + CASES[3:5] if args.quick else CASES
    results = []
    for ci, (B, T) in enumerate(cases):
        n_sets = graph_sets(B, T, l2) if T <= 4 else 1
        sets = [make_inputs(B, T, seed=1000 * ci + s) for s in range(n_sets)]
        x0 = sets[0]
        ref_out, ref_state = eager_recurrence(
            x0["q"].double(),
            x0["k"].double(),
            x0["v"].double(),
            x0["g"].double(),
            x0["beta"].double(),
            x0["state_kv"].double(),
            dtype=torch.float64,
        )
        for impl in impls:
            if impl.name == "eager HF verbatim" and T > 4:
                continue  # at T=512 its one extra sync is noise beside 5634 launches; saves device time
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
                    hidden = timer.hidden_us(
                        call, samples=args.samples if T < 512 else max(5, args.samples // 3), host=host
                    )
                    if hidden.median is None:
                        row["events"] = timer.events_us(call, samples=3)
                    row["hidden"] = hidden
                    row["loop"] = timer.loop_us(call, n=200, budget_s=0.5 if T < 512 else 1.0)
                    if T <= 4:
                        row["graph"] = timer.graph_us([(lambda f, x: lambda: f(x))(impl.call, s) for s in sets])
                    else:
                        row["graph"] = Stat(None, note="not measured for T=512 (as docs/perf-reference.md §2)")
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
                    else f"hidden {row['hidden'].fmt()} µs, graph {row['graph'].fmt()}, loop {row['loop'].fmt()}, "
                    f"err {row['err_out']:.1e}/{row['err_state']:.1e}"
                ),
                flush=True,
            )
        del sets
        torch.cuda.empty_cache()

    markdown = render(results, missing, env, cases, args)
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


def render(results, missing, env, cases, args) -> str:
    header = [
        "B",
        "T",
        "impl",
        "**device µs** (host hidden; p10–p90)",
        "÷ ggml raw",
        "in-graph µs/call",
        "÷ ggml raw",
        "Python µs/call",
        "÷ ggml raw",
        "host enqueue µs",
        "rel err out",
        "rel err state",
    ]
    rows = []
    for B, T in cases:
        raw = _find(results, B, T, "ggml raw")
        for r in (r for r in results if r["B"] == B and r["T"] == T):
            if "error" in r:
                rows.append([str(B), str(T), r["impl"], f"error: {r['error']}"] + [""] * (len(header) - 4))
                continue
            dev = r["hidden"]
            dev_txt = (
                f"**{dev.fmt()}** ({dev.p10:.1f}–{dev.p90:.1f})"
                if dev.median is not None
                else f"– ({dev.note}; events {r['events'].fmt()})"
            )
            rows.append(
                [
                    str(B),
                    str(T),
                    r["impl"],
                    dev_txt,
                    ratio(dev, raw and raw["hidden"]),
                    r["graph"].fmt(),
                    ratio(r["graph"], raw and raw["graph"]),
                    r["loop"].fmt(),
                    ratio(r["loop"], raw and raw["loop"]),
                    r["host_enqueue"].fmt(),
                    f"{r['err_out']:.1e}",
                    f"{r['err_state']:.1e}",
                ]
            )
        for name, why in missing.items():
            rows.append([str(B), str(T), name, why, "", "", "", "", "", "", "", ""])

    lines = [
        "## Gated delta net: op vs ggml raw vs fla vs eager torch",
        "",
        f"H={H} value heads (q/k pre-expanded to {H}), head_dim={D}, f32, state 0.5·randn; inputs as docs/perf-reference.md §2. "
        "Times in µs, medians. Ratios are ÷ ggml's raw kernel (launched by upstream's own `launch_gated_delta_net`), "
        "so above 1 means slower than ggml. Python µs/call is host-bound at small sizes; this host dispatched one "
        f"tiny torch op in {env.get('host_yardstick_us') or float('nan'):.1f} µs per call during the run "
        "(the VM's host speed drifts, docs/perf-reference.md §4.4).",
        "",
        markdown_table(header, rows),
        "",
        "### Targets (printed, not asserted)",
        "",
    ]
    op11, raw11 = _find(results, 1, 1, "op"), _find(results, 1, 1, "ggml raw")
    fla11, eag11 = _find(results, 1, 1, "fla"), _find(results, 1, 1, "eager torch")
    hf11 = _find(results, 1, 1, "eager HF verbatim")

    def loop_of(r):
        return r["loop"].fmt() if r else "–"

    if op11:
        ok = op11["loop"].median <= TARGET_LOOP_US
        lines.append(
            f"* GDN B=1 T=1 per call from Python ≤ {TARGET_LOOP_US:.0f} µs: op **{op11['loop'].fmt()} µs** "
            f"→ {'MET' if ok else 'MISSED'} (this run: fla {loop_of(fla11)}, eager HF verbatim "
            f"{loop_of(hf11)}, eager with device zeros {loop_of(eag11)}, ggml raw via ctypes "
            f"{loop_of(raw11)} µs; one tiny torch op {env.get('host_yardstick_us') or float('nan'):.1f} µs)."
        )
    else:
        lines.append(
            f"* GDN B=1 T=1 per call from Python ≤ {TARGET_LOOP_US:.0f} µs: op **not measured** "
            f"({missing.get('op', 'op failed')})."
        )
    for B, T in cases:
        o, r = _find(results, B, T, "op"), _find(results, B, T, "ggml raw")
        if o and r and o["hidden"].median is not None and r["hidden"].median is not None:
            q = o["hidden"].median / r["hidden"].median
            lines.append(
                f"* device time within 10% of ggml raw, B={B} T={T}: op {o['hidden'].fmt()} vs raw "
                f"{r['hidden'].fmt()} µs = {q:.2f}× → {'MET' if q <= TARGET_DEVICE_RATIO else 'MISSED'}"
            )
        elif not o:
            lines.append(f"* device time within 10% of ggml raw, B={B} T={T}: op not measured")
    lines += report_tail(ANCHOR_NOTE, env)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__doc__, "bench_gdn", ROOT)
    p.add_argument("--quick", action="store_true", help="T in {1, 4} only")
    args = p.parse_args(argv)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
