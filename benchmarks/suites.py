"""The named suites: which measurement script each runs, with which options, and how that script's own JSON
becomes the common rows (benchmarks/record.py). The scripts measure; this module only reads what they wrote.

Each adapter takes the script's JSON and returns (env, rows): the peer beside a row is the fastest competitor
of the same configuration (torch SDPA backends for attention, fla for the gated delta rule, dense cuBLAS for the
GGUF gemv, fla's generate() for end to end, a build from scratch for the shared build).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from record import Row

Adapter = Callable[[dict], tuple[dict, list[Row]]]


@dataclass(frozen=True)
class Suite:
    name: str
    script: str  # under benchmarks/
    args: tuple[str, ...]
    output: str  # the JSON the script writes into the output folder
    estimate_s: int  # what a run takes on one H100/H200, to decide what fits the time budget
    adapter: Adapter
    what: str
    out_flag: str = "--out"  # how the script is told where to write (a folder, or for --json the file)


def _median(stat: object) -> float | None:
    """A benchmarks/timing.py Stat as the scripts write it ({"median": ...}), or a bare number."""
    if isinstance(stat, dict):
        return stat.get("median")
    if hasattr(stat, "median"):  # the Stat itself, before it is written
        return stat.median
    return stat if isinstance(stat, (int, float)) else None


def _env(env: dict, **extra: object) -> dict:
    keep = {
        "gpu": env.get("device") or env.get("gpu"),
        "date": env.get("date_utc") or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "torch": env.get("torch"),
        "cuda": env.get("cuda_runtime") or env.get("cuda"),
        "transformers": env.get("transformers"),
        "fla": env.get("fla"),
        "commit": env.get("commit"),
        "compile_backend": env.get("compile") or "eager (no torch.compile)",
    }
    return {**keep, **extra}


def _best(rows: list[dict], names: Callable[[str], bool], key: str) -> tuple[str, float] | None:
    found = [(r["impl"], _median(r.get(key))) for r in rows if names(r["impl"]) and "error" not in r]
    timed = [(n, t) for n, t in found if t]
    return min(timed, key=lambda x: x[1]) if timed else None


def _with_peer(row: Row, dev: tuple[str, float] | None, call: tuple[str, float] | None) -> Row:
    if dev or call:
        row.peer = (dev or call)[0]  # type: ignore[index]
        row.peer_device_us = dev[1] if dev else None
        row.peer_per_call_us = call[1] if call else None
    return row


def attention_rows(doc: dict) -> tuple[dict, list[Row]]:
    """bench_fa.py: every non-SDPA row per K/V dtype, head shape and n_kv, the best SDPA backend beside it."""
    results, rows = doc.get("results", []), []
    sdpa = lambda name: name.startswith("SDPA")  # noqa: E731
    for r in results:
        if sdpa(r["impl"]):
            continue
        same = [x for x in results if (x["D"], x["n_kv"], x.get("dtype")) == (r["D"], r["n_kv"], r.get("dtype"))]
        config = {"op": "flash_attn", "impl": r["impl"], "kv dtype": r.get("dtype", "?"), "D": r["D"]}
        config |= {"heads": r["heads"], "n_kv": r["n_kv"], "batch": 1}
        row = Row(config, _median(r.get("hidden")), _median(r.get("per_call")), note=r.get("error", ""))
        rows.append(_with_peer(row, _best(same, sdpa, "hidden"), _best(same, sdpa, "per_call")))
    return _env(doc.get("env", {})), rows


def decode_rows(doc: dict) -> tuple[dict, list[Row]]:
    """bench_gdn.py (decode grid): ggml's rows and the op's, the fastest fla variant beside each."""
    results, rows = doc.get("results", []), []
    fla = lambda name: name.startswith("fla")  # noqa: E731
    for r in results:
        if fla(r["impl"]):
            continue
        same = [x for x in results if (x["B"], x["T"]) == (r["B"], r["T"])]
        config = {"op": "gated_delta_rule", "impl": r["impl"], "dtype": "float32", "B": r["B"], "T": r["T"]}
        config |= {"heads": 32, "head_dim": 128}
        row = Row(config, _median(r.get("hidden")), _median(r.get("loop")), note=r.get("error", ""))
        rows.append(_with_peer(row, _best(same, fla, "hidden"), _best(same, fla, "loop")))
    return _env(doc.get("env", {})), rows


def prefill_rows(doc: dict) -> tuple[dict, list[Row]]:
    """bench_gdn_prefill.py: a prefill call is long enough that events around it are its per-call time (host
    included); fla's chunked kernel beside each row."""
    results, rows = doc.get("results", []), []
    for r in results:
        if r["impl"] == "fla chunk":
            continue
        same = [x for x in results if (x["B"], x["T"]) == (r["B"], r["T"])]
        config = {"op": "chunk_gated_delta_rule", "impl": r["impl"], "dtype": "bfloat16 (g float32)"}
        config |= {"B": r["B"], "T": r["T"], "heads": 32, "head_dim": 128}
        row = Row(config, None, _median(r.get("t")), note=r.get("error", ""))
        rows.append(_with_peer(row, None, _best(same, lambda n: n == "fla chunk", "t")))
    return _env(doc.get("env", {})), rows


def gguf_rows(doc: dict) -> tuple[dict, list[Row]]:
    """bench_gguf.py: mul_mat_vec per type, N×K and M (device µs per call inside a CUDA graph), dense bf16
    cuBLAS beside it; the host µs of one call; generate() packed against dequantized."""
    rows = []
    host = doc.get("host_us", {})
    for g in doc.get("gemv", []):
        config = {"op": "mul_mat_vec", "type": g["type"], "N×K": f"{g['n']}×{g['k']}", "M": g["m"]}
        config |= {"x dtype": "float32"}
        row = Row(config, g["us"], host.get("mul_mat_vec"), note=f"{100 * g['hbm_frac']:.0f}% of HBM")
        rows.append(_with_peer(row, ("bf16 cuBLAS", g["bf16_us"]), None))
        for dt in ("bf16", "f32"):
            if g.get(f"deq_{dt}_us") and g["m"] == 1:
                deq = {"op": f"dequantize to {dt}", "type": g["type"], "N×K": f"{g['n']}×{g['k']}"}
                rows.append(Row(deq, g[f"deq_{dt}_us"], note=f"{g[f'deq_{dt}_gbps']:.0f} GB/s"))
    gen = doc.get("generate", {}).get("rows", {})
    base = gen.get("dequantized", {}).get("prompts", {})
    for mode, r in gen.items():
        if mode == "dequantized":
            continue
        for n, p in r.get("prompts", {}).items():
            config = {"op": "generate() decode", "model": mode, "prompt": n, "dtype": "float32", "batch": 1}
            row = Row(config, None, 1e6 / p["decode_tok_s"], note=f"weights {r['weight_mb']:.0f} MB")
            peer = base.get(n, {}).get("decode_tok_s")
            rows.append(_with_peer(row, None, ("dequantized", 1e6 / peer) if peer else None))
    env = {"device": doc.get("device"), "torch": doc.get("torch"), "cuda": doc.get("cuda")}
    return _env(env), rows


def e2e_rows(doc: dict) -> tuple[dict, list[Row]]:
    """bench_generate.py: per case and mode, µs per generated token with the host (1 / tok/s) and the device µs
    of one decode step where profiled; fla's generate() beside each."""
    rows = []
    for case, res in doc.get("cases", {}).items():
        if not isinstance(res, dict) or "error" in res:
            continue
        fla = res.get("fla", {})
        for mode, r in res.items():
            if mode == "fla" or not isinstance(r, dict) or not r.get("tok_s"):
                continue
            row = Row({"case": case, "mode": mode}, r.get("profile", {}).get("device_us"), 1e6 / r["tok_s"])
            peer = ("fla", fla.get("profile", {}).get("device_us"), 1e6 / fla["tok_s"]) if fla.get("tok_s") else None
            if peer:
                row.peer, row.peer_device_us, row.peer_per_call_us = peer
            rows.append(row)
    return _env(doc.get("env", {})), rows


def build_rows(doc: dict) -> tuple[dict, list[Row]]:
    """bench_build.py: wall time of the shared-object build against each variant from scratch, and the no-op
    `build --all` (no GPU needed)."""
    shared, scratch, noop = doc.get("shared", {}), doc.get("scratch", {}), doc.get("noop_cli", {})
    n = len(doc.get("variants", []))
    rows = []
    if shared.get("seconds"):
        row = Row({"build": f"{n} variants, shared objects, cold", "project": doc.get("project", "?")})
        row.per_call_us = shared["seconds"] * 1e6
        row.note = f"{shared.get('invocations')} compiler invocations"
        if scratch.get("seconds"):
            row.peer, row.peer_per_call_us = "each variant from scratch", scratch["seconds"] * 1e6
        rows.append(row)
    if noop.get("seconds_best_of_5") is not None:
        row = Row({"build": "no-op `build --all` (CLI, best of 5)", "project": doc.get("project", "?")})
        row.per_call_us = noop["seconds_best_of_5"] * 1e6
        row.note = f"{noop.get('invocations')} compiler invocations"
        rows.append(row)
    return _env({"device": "none (CPU build)"}), rows


SUITES: dict[str, Suite] = {
    s.name: s
    for s in (
        Suite(
            "decode",
            "bench_gdn.py",
            ("--loop",),
            "bench_gdn.json",
            420,
            decode_rows,
            "the gated delta rule at decode (B × T), ggml unpatched / patched / the op / fla",
        ),
        Suite(
            "prefill",
            "bench_gdn.py",
            ("--prefill",),
            "bench_gdn_prefill.json",
            480,
            prefill_rows,
            "the chunked gated delta rule at prefill (B × T), ours / fla / transformers' torch chunk",
        ),
        Suite(
            "attention",
            "bench_fa.py",
            ("--dtypes", "float16,bfloat16"),
            "bench_fa.json",
            420,
            attention_rows,
            "decode flash attention, f16 and bf16 K/V, n_kv 512–32K, the op / ggml / every SDPA backend",
        ),
        Suite(
            "gguf",
            "bench_gguf.py",
            ("--generate",),
            "bench_gguf.json",
            540,
            gguf_rows,
            "gguf-kernels: mul_mat_vec and dequantize per type, generate() packed against dequantized",
        ),
        Suite(
            "e2e",
            "bench_generate.py",
            ("--rounds", "5", "--compile"),
            "bench_generate.json",
            600,
            e2e_rows,
            "transformers' generate() with our layers / fla / torch, eager and compiled",
        ),
        Suite(
            "build",
            "bench_build.py",
            (),
            "bench_build.json",
            300,
            build_rows,
            "the build: shared objects against each variant from scratch, the no-op `build --all`",
            out_flag="--json",
        ),
    )
}


def command(suite: Suite, python: str, here: Path, out: Path) -> list[str]:
    """The script's command line, writing into `out` (a folder, or the JSON file for --json)."""
    target = out / suite.output if suite.out_flag == "--json" else out
    return [python, str(here / suite.script), *suite.args, suite.out_flag, str(target)]
