"""gguf-kernels on one GPU, side by side in one process: ggml's quantized gemv against the dense matmuls a
CUDA user has today, the dequantize kernels' bandwidth, and transformers' generate() packed vs dequantized.

Per type and N x K (4096x4096, 14336x4096, 4096x14336) and M (1, 4, 8 activation rows):

    gemv        our mul_mat_vec (q8_1 quantize + mul_mat_vec_q): µs, GB/s over the bytes it must read (the packed
                weight, x and y), and that as a fraction of the nominal HBM bandwidth (4.8 TB/s) and of the
                device-to-device copy bandwidth measured here
    bf16 / f32  cuBLAS on the dense weight (F.linear) in bfloat16 and float32 (the dequantized model's matmul)
    unpack      transformers' GgufLinear path without a gemv: our dequantize to float32 + the float32 matmul
    dequantize  GB/s of dequantize (packed bytes read + output written), to bfloat16 and to float32

Each number is the median per call inside one CUDA graph over enough weight copies that the working set
exceeds L2 (benchmarks/timing.py). --generate adds transformers' generate() on a random Qwen3.5-shaped GGUF
(benchmarks/gguf_model.py): packed (GgufLinear, our kernel) vs the dequantized model, decode tok/s, time to
first token and weight memory; where `ggml-vendor build` has built the first package (ggml-attn-kernels) for
this torch, both again with its GDN functions and attention function switched on (KernelConfig, served by the
local test Hub to a child process: benchmarks/gguf_gdn.py).

    ggml-vendor build -p gguf-kernels && python3 benchmarks/bench_gguf.py --out benchmarks/out [--generate]

Prints markdown tables (ratios beside the issue's targets); writes bench_gguf.json/.md into --out. Nothing here
asserts on time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from timing import Timer  # noqa: E402

from tests.helpers import gguf_reference as R  # noqa: E402

HBM_GBPS = 4800.0  # H200 datasheet
SHAPES = ((4096, 4096), (14336, 4096), (4096, 14336))
MS = (1, 4, 8)
WORKING_SET = 512 << 20  # bytes of weight copies per timed graph (several times the 60 MB L2)
# Byte offsets of the fp16 (or E8M0) scale fields of the types tests/helpers/gguf_reference.py quantizes with gguf.
EXTRA_HALF_FIELDS = {"Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,)}


def load_module():  # type: ignore[no-untyped-def]
    module, why = R.load_build(HERE.parent)
    if module is None:
        raise SystemExit(f"error: {why}")
    return module


def rand_blocks(name: str, rows: int, cols: int, gen: torch.Generator) -> torch.Tensor:
    """Random codes with finite fp16 scales (in 1e-3..2e-2), made on the GPU: timing does not depend on values."""
    elems, nbytes = R.geometry(name)
    nblk = rows * cols // elems
    raw = torch.randint(0, 256, (nblk, nbytes), dtype=torch.uint8, device="cuda", generator=gen)
    if name == "MXFP4":
        raw[:, 0] = torch.randint(118, 127, (nblk,), dtype=torch.uint8, device="cuda", generator=gen)
    elif name == "IQ1_M":
        pass  # its scale nibbles give finite values for most bytes; speed does not depend on them
    else:
        for off in {**R.HALF_FIELDS, **EXTRA_HALF_FIELDS}[name]:
            d = torch.empty(nblk, device="cuda").uniform_(1e-3, 2e-2, generator=gen).half()
            raw[:, off : off + 2] = d.view(torch.uint8).view(nblk, 2)
    return raw.view(rows, cols // elems * nbytes)


def copies(make, nbytes: int) -> list:  # type: ignore[no-untyped-def]
    return [make() for _ in range(max(2, min(32, -(-WORKING_SET // max(nbytes, 1)))))]


def copy_bandwidth(timer: Timer) -> float:
    """GB/s of a 1 GiB device-to-device copy (bytes read + written)."""
    a = torch.empty(1 << 28, device="cuda")
    b = torch.empty_like(a)
    a.uniform_()
    st = timer.events_us(lambda: b.copy_(a), samples=5)
    return 2 * a.numel() * 4 / (st.median * 1e-6) / 1e9


def bench_gemv(gk, timer: Timer, types: list[str], shapes, ms, copy_gbps: float) -> list[dict]:  # type: ignore[no-untyped-def]
    rows = []
    gen = torch.Generator(device="cuda").manual_seed(0)
    for n, k in shapes:
        dense = {}
        for dt in (torch.bfloat16, torch.float32):
            ws = copies(lambda dt=dt: torch.randn(n, k, device="cuda", dtype=dt, generator=gen), n * k * dt.itemsize)
            for m in ms:
                x = torch.randn(m, k, device="cuda", dtype=dt, generator=gen)
                st = timer.graph_us([lambda w=w, x=x: torch.nn.functional.linear(x, w) for w in ws])
                dense[(dt, m)] = st.median
            del ws
        for name in types:
            t = R.TYPES[name]
            elems, nbytes = R.geometry(name)
            wbytes = n * k // elems * nbytes
            ws = copies(lambda name=name: rand_blocks(name, n, k, gen), wbytes)
            deq = {}
            for dt in (torch.bfloat16, torch.float32):
                st = timer.graph_us([lambda w=w, dt=dt: gk.dequantize(w, t, n, k, dt) for w in ws[:4]])
                deq[dt] = (st.median, (wbytes + n * k * dt.itemsize) / (st.median * 1e-6) / 1e9)
            for m in ms:
                x = torch.randn(m, k, device="cuda", generator=gen)
                st = timer.graph_us([lambda w=w, x=x: gk.mul_mat_vec(w, x, t, n) for w in ws])
                unpack = timer.graph_us(
                    [lambda w=w, x=x: x @ gk.dequantize(w, t, n, k, torch.float32).T for w in ws[:4]]
                )
                moved = wbytes + m * k * 4 + m * n * 4
                gbps = moved / (st.median * 1e-6) / 1e9
                rows.append(
                    {
                        "type": name, "n": n, "k": k, "m": m, "us": st.median, "gbps": gbps,
                        "hbm_frac": gbps / HBM_GBPS, "copy_frac": gbps / copy_gbps,
                        "bf16_us": dense[(torch.bfloat16, m)], "f32_us": dense[(torch.float32, m)],
                        "unpack_us": unpack.median,
                        "vs_bf16": dense[(torch.bfloat16, m)] / st.median,
                        "vs_f32": dense[(torch.float32, m)] / st.median, "vs_unpack": unpack.median / st.median,
                        "deq_bf16_us": deq[torch.bfloat16][0], "deq_bf16_gbps": deq[torch.bfloat16][1],
                        "deq_f32_us": deq[torch.float32][0], "deq_f32_gbps": deq[torch.float32][1],
                    }
                )  # fmt: skip
                print(
                    f"  {name:7s} {n:5d}x{k:<5d} M={m}: {st.median:7.1f} µs {gbps:6.0f} GB/s "
                    f"({100 * gbps / HBM_GBPS:4.1f}% HBM) x{rows[-1]['vs_bf16']:.2f} vs bf16",
                    flush=True,
                )
            del ws
    return rows


def gemv_table(rows: list[dict]) -> str:
    out = [
        "| type | N×K | M | gemv µs | GB/s | % HBM | % copy | bf16 µs | f32 µs | unpack µs | ×bf16 | ×f32 | ×unpack |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['type']} | {r['n']}×{r['k']} | {r['m']} | {r['us']:.1f} | {r['gbps']:.0f} | "
            f"{100 * r['hbm_frac']:.0f} | {100 * r['copy_frac']:.0f} | {r['bf16_us']:.1f} | {r['f32_us']:.1f} | "
            f"{r['unpack_us']:.1f} | {r['vs_bf16']:.2f} | {r['vs_f32']:.2f} | {r['vs_unpack']:.1f} |"
        )
    return "\n".join(out)


def deq_table(rows: list[dict]) -> str:
    out = ["| type | N×K | → bf16 µs | GB/s | % HBM | → f32 µs | GB/s | % HBM |", "|---|---|---|---|---|---|---|---|"]
    seen = set()
    for r in rows:
        key = (r["type"], r["n"], r["k"])
        if key in seen:
            continue
        seen.add(key)
        out.append(
            f"| {r['type']} | {r['n']}×{r['k']} | {r['deq_bf16_us']:.1f} | {r['deq_bf16_gbps']:.0f} | "
            f"{100 * r['deq_bf16_gbps'] / HBM_GBPS:.0f} | {r['deq_f32_us']:.1f} | {r['deq_f32_gbps']:.0f} | "
            f"{100 * r['deq_f32_gbps'] / HBM_GBPS:.0f} |"
        )
    return "\n".join(out)


def bench_host(gk, timer: Timer) -> dict:  # type: ignore[no-untyped-def]
    """Host µs to enqueue one call (GPU idle before it), 4096x4096 M = 1: what a decode step pays per linear."""
    gen = torch.Generator(device="cuda").manual_seed(2)
    w = rand_blocks("Q4_K", 4096, 4096, gen)
    x = torch.randn(1, 4096, device="cuda", generator=gen)
    dense = torch.randn(4096, 4096, device="cuda", generator=gen)
    calls = {
        "mul_mat_vec (Q4_K)": lambda: gk.mul_mat_vec(w, x, 12, 4096),
        "torch.ops mul_mat_vec (no Python checks)": lambda: gk.ops.mul_mat_vec(w, x, 12, 4096),
        "F.linear f32 (cuBLAS)": lambda: torch.nn.functional.linear(x, dense),
    }
    for f in calls.values():
        f()
    return {name: timer.host_us(f, n=50).median for name, f in calls.items()}


# ---- generate() -------------------------------------------------------------------------------------------


def _load(path: Path, gk, packed: bool, **kw):  # type: ignore[no-untyped-def]
    """gguf_gdn.load (packed or dequantized), with the weights' bytes and the memory the load allocated."""
    import gguf_gdn

    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    model = gguf_gdn.load(path, gk, packed, **kw)
    torch.cuda.synchronize()
    weight_bytes = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
    return model, weight_bytes, torch.cuda.memory_allocated() - before


def _generate_s(model, prompt, new_tokens: int) -> tuple[float, torch.Tensor]:  # type: ignore[no-untyped-def]
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = model.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
    torch.cuda.synchronize()
    return time.perf_counter() - t0, out


def _prompt(vocab: int, prompt_len: int) -> torch.Tensor:
    return torch.randint(2, vocab, (1, prompt_len), generator=torch.Generator().manual_seed(1)).cuda()


def measure_modes(path: Path, gk, modes: list[str], rounds: int, new_tokens: int, prompts: list) -> dict:  # type: ignore[no-untyped-def]
    """generate() per mode ("dequantized", "packed", and with "+gdn" the first package's layers switched on):
    weight memory, load time, and per prompt length the time to first token, decode tok/s and the greedy tokens,
    with the functions the model ran. Each model is loaded once for all prompts."""
    import gguf_gdn

    res: dict = {}
    for mode in modes:
        kw = gguf_gdn.kernel_kwargs() if mode.endswith("+gdn") else {}
        t0 = time.perf_counter()
        model, wbytes, alloc = _load(path, gk, packed=mode.startswith("packed"), **kw)
        load_s = time.perf_counter() - t0
        n_packed = sum(type(m).__name__ in ("GgufLinear", "GgufEmbedding") for m in model.modules())
        row: dict = {
            "weight_mb": wbytes / 1e6, "allocated_mb": alloc / 1e6, "packed_modules": n_packed, "load_s": load_s,
            "used": None, "prompts": {},
        }  # fmt: skip
        for prompt in prompts:
            _generate_s(model, prompt, 4)  # warm-up (this prompt length's shapes)
            ttft, decode = [], []
            for _ in range(rounds):
                t1, _ = _generate_s(model, prompt, 1)
                tn, out = _generate_s(model, prompt, new_tokens)
                ttft.append(t1)
                decode.append((new_tokens - 1) / max(tn - t1, 1e-9))
            row["prompts"][str(prompt.shape[1])] = {
                "ttft_ms": 1e3 * statistics.median(ttft), "decode_tok_s": statistics.median(decode),
                "tokens": out[0, prompt.shape[1] :].tolist(),
            }  # fmt: skip
        row["used"] = gguf_gdn.used(model)
        res[mode] = row
        brief = {k: v for k, v in row.items() if k not in ("prompts", "used")}
        brief.update(
            {f"p{n}": {k: round(v, 2) for k, v in r.items() if k != "tokens"} for n, r in row["prompts"].items()}
        )
        print(f"  {mode}: {brief}", flush=True)
        del model
        torch.cuda.empty_cache()
    return res


def _gdn_rows(path: Path, rounds: int, new_tokens: int, vocab: int, prompt_lens: list[int]) -> dict:
    """The "+gdn" rows in a child process that loads ggml-attn-kernels from the local test Hub (gguf_gdn.py)."""
    import subprocess

    import gguf_gdn

    variant = gguf_gdn.first_package_variant()
    if variant is None:
        print("  no ggml-attn-kernels variant under build/ (ggml-vendor build): no +gdn rows", flush=True)
        return {}
    with gguf_gdn.served(variant, path.parent / "hf") as env:
        run = subprocess.run(
            [sys.executable, str(Path(__file__)), "--gdn-child", str(path), "--rounds", str(rounds),
             "--new-tokens", str(new_tokens), "--vocab", str(vocab),
             "--prompt-lens", ",".join(map(str, prompt_lens))],
            env={**env, "PYTHONPATH": os.pathsep.join([str(HERE.parent), env.get("PYTHONPATH", "")])},
            capture_output=True, text=True, timeout=1800,
        )  # fmt: skip
    line = next((x for x in run.stdout.splitlines() if x.startswith("RESULT ")), None)
    if run.returncode or line is None:
        print(f"  +gdn rows failed (exit {run.returncode}):\n{run.stdout[-1500:]}{run.stderr[-2500:]}", flush=True)
        return {}
    print("\n".join(x for x in run.stdout.splitlines() if x.startswith("  ")), flush=True)
    return json.loads(line[len("RESULT ") :])


def bench_generate(gk, shape, rounds: int, new_tokens: int, prompt_lens: list[int], gdn: bool = True) -> dict:  # type: ignore[no-untyped-def]
    import gguf_model

    tmp = Path(tempfile.mkdtemp(prefix="gguf-bench-"))
    path = tmp / "model.gguf"
    t0 = time.perf_counter()
    gguf_model.write(path, shape)
    write_s = time.perf_counter() - t0
    file_mb = path.stat().st_size / 1e6
    print(f"  wrote {file_mb:.0f} MB GGUF in {write_s:.0f} s", flush=True)
    res = {"file_mb": file_mb, "write_s": write_s, "prompts": prompt_lens, "new_tokens": new_tokens,
           "rounds": rounds, "shape": {k: v for k, v in vars(shape).items() if k != "types"}}  # fmt: skip
    prompts = [_prompt(shape.vocab, n) for n in prompt_lens]
    rows = measure_modes(path, gk, ["dequantized", "packed"], rounds, new_tokens, prompts)
    if gdn:
        rows.update(_gdn_rows(path, rounds, new_tokens, shape.vocab, prompt_lens))
    res["rows"] = rows
    ref = {"packed": "dequantized", "packed+gdn": "dequantized+gdn", "dequantized+gdn": "dequantized"}
    res["first_token_mismatch"] = {
        f"{m} vs {r} (prompt {n})": next(
            (
                i
                for i, (a, b) in enumerate(zip(rows[r]["prompts"][n]["tokens"], rows[m]["prompts"][n]["tokens"]))
                if a != b
            ),
            None,
        )
        for m, r in ref.items()
        if m in rows and r in rows
        for n in rows[m]["prompts"]
    }
    return res


def generate_table(g: dict) -> str:
    rows = g["rows"]
    d = rows["dequantized"]
    sh = g["shape"]
    out = [
        f"GGUF file {g['file_mb']:.0f} MB (written in {g['write_s']:.0f} s): hidden {sh['hidden']}, intermediate "
        f"{sh['intermediate']}, {sh['layers']} layers, vocab {sh['vocab']}; {g['new_tokens']} new tokens, "
        f"float32, medians of {g['rounds']} rounds",
        "",
        "| model | GDN functions | attention | packed modules | weight MB | × dequantized weight | load s | prompt "
        "| TTFT ms | × dequantized TTFT | decode tok/s | × dequantized tok/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for mode, r in rows.items():
        gdn = r["used"]["torch_chunk_gated_delta_rule"].split(".")[0]
        for n, p in r["prompts"].items():
            dp = d["prompts"][n]
            out.append(
                f"| {mode} | {gdn} | {r['used']['attention'][0]} | {r['packed_modules']} | {r['weight_mb']:.0f} | "
                f"{r['weight_mb'] / d['weight_mb']:.3f} | {r['load_s']:.1f} | {n} | {p['ttft_ms']:.1f} | "
                f"{p['ttft_ms'] / dp['ttft_ms']:.2f} | {p['decode_tok_s']:.1f} | "
                f"{p['decode_tok_s'] / dp['decode_tok_s']:.2f} |"
            )
    out += ["", "greedy tokens: " + "; ".join(
        f"{k}: " + ("identical" if v is None else f"first differ at new token {v}")
        for k, v in g["first_token_mismatch"].items()
    )]  # fmt: skip
    return "\n".join(out)


def gdn_child(path: Path, rounds: int, new_tokens: int, vocab: int, prompt_lens: list[int]) -> int:
    """--gdn-child: the "+gdn" rows, printed as one RESULT line (run by _gdn_rows)."""
    gk = load_module()
    prompts = [_prompt(vocab, n) for n in prompt_lens]
    rows = measure_modes(path, gk, ["dequantized+gdn", "packed+gdn"], rounds, new_tokens, prompts)
    print("RESULT " + json.dumps(rows))
    return 0


def generate_shape(name: str):  # type: ignore[no-untyped-def]
    """The generate() model: "small" (hidden 1024, 8 layers: launch-bound at that width) or "qwen3.5-4b"
    (Qwen3.5-4B's widths from its config: hidden 2560, intermediate 9216, 16 query / 4 KV heads of 256, linear
    attention 16 key / 32 value heads of 128; 4 layers — 3 GDN + 1 full attention — instead of 32, and a 32000
    vocabulary instead of 248320, to keep the file's writing and the loads short)."""
    import gguf_model

    if name == "small":
        return gguf_model.Shape(
            vocab=16384, hidden=1024, intermediate=3072, layers=8, heads=8, kv_heads=2, head_dim=128,
            lin_k_heads=8, lin_v_heads=16, lin_k_dim=128, lin_v_dim=128,
        )  # fmt: skip
    if name == "qwen3.5-4b":
        return gguf_model.Shape(
            vocab=32000, hidden=2560, intermediate=9216, layers=4, heads=16, kv_heads=4, head_dim=256,
            lin_k_heads=16, lin_v_heads=32, lin_k_dim=128, lin_v_dim=128, fast=True,
        )  # fmt: skip
    raise SystemExit(f"error: unknown --shape {name!r}: use small or qwen3.5-4b")


def hide_fla() -> None:
    """transformers takes fla's Triton GDN functions when fla imports: the rows compare the packed and dequantized
    loads on one GDN implementation (transformers' torch functions, or with "+gdn" ours), and fla's first call
    would autotune and compile its kernels inside the timed warm-up (minutes at these widths)."""
    import gguf_gdn

    sys.meta_path.insert(0, gguf_gdn._NoFla())


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=HERE / "out")
    ap.add_argument("--types", default=",".join(R.REQUIRED), help="comma-separated ggml type names")
    ap.add_argument("--quick", action="store_true", help="one shape (4096x14336), M = 1")
    ap.add_argument("--generate", action="store_true", help="also transformers' generate(), packed vs dequantized")
    ap.add_argument("--no-gemv", action="store_true")
    ap.add_argument("--gdn-child", type=Path, help=argparse.SUPPRESS)  # internal: the +gdn rows' process
    ap.add_argument("--vocab", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--shape", default="qwen3.5-4b", help="generate() model: qwen3.5-4b (default) or small")
    ap.add_argument("--prompt-lens", default="32,512", help="comma-separated prompt lengths for generate()")
    ap.add_argument("--no-gdn", action="store_true", help="generate(): skip the +gdn rows (first package)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=64)
    args = ap.parse_args(argv)
    if args.generate or args.gdn_child:
        hide_fla()
    if args.gdn_child:
        return gdn_child(args.gdn_child, args.rounds, args.new_tokens, args.vocab, _ints(args.prompt_lens))
    gk = load_module()
    timer = Timer()
    props = torch.cuda.get_device_properties(0)
    result: dict = {"device": props.name, "torch": torch.__version__, "cuda": torch.version.cuda}
    copy_gbps = copy_bandwidth(timer)
    result["copy_gbps"] = copy_gbps
    print(f"{props.name}, torch {torch.__version__}, copy {copy_gbps:.0f} GB/s (read + write)", flush=True)
    md = [
        f"device {props.name}, torch {torch.__version__} (CUDA {torch.version.cuda}), copy bandwidth {copy_gbps:.0f} GB/s"
    ]
    host = bench_host(gk, timer)
    result["host_us"] = host
    md += ["", "| host µs per call (enqueue, 4096×4096 M=1) | µs |", "|---|---|"]
    md += [f"| {name} | {us:.1f} |" for name, us in host.items()]
    if not args.no_gemv:
        shapes = ((4096, 14336),) if args.quick else SHAPES
        ms = (1,) if args.quick else MS
        rows = bench_gemv(gk, timer, args.types.split(","), shapes, ms, copy_gbps)
        result["gemv"] = rows
        md += ["", gemv_table(rows), "", deq_table(rows)]
        goal = [r for r in rows if r["type"] == "Q4_K" and (r["n"], r["k"], r["m"]) == (4096, 14336, 1)]
        for r in goal:
            md.append(
                f"\nGoal Q4_K 4096×14336 M=1: {100 * r['hbm_frac']:.0f}% of HBM (target ≥ 70%), "
                f"{r['vs_bf16']:.2f}× the bf16 gemv (target ≥ 3×)"
            )
    if args.generate:
        g = bench_generate(
            gk, generate_shape(args.shape), args.rounds, args.new_tokens, _ints(args.prompt_lens), not args.no_gdn
        )
        result["generate"] = g
        md += ["", generate_table(g)]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench_gguf.json").write_text(json.dumps(result, indent=1))
    (args.out / "bench_gguf.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
