"""The benchmark scripts' own logic (no GPU needed): the eager baseline computes the GDN function, the FA launch
parameters match ggml's choice, the report renders a missing op as "not built", and the raw harness compiles."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="the benchmark helpers need torch")
import torch.nn.functional as F  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

# benchmarks/ is a folder of scripts, not a package: its modules are imported by name (untyped modules).
bench_fa = importlib.import_module("bench_fa")
bench_gdn = importlib.import_module("bench_gdn")
records = importlib.import_module("record")
suites = importlib.import_module("suites")
timing = importlib.import_module("timing")
Stat, rel_err = timing.Stat, timing.rel_err


def ggml_style_recurrence(q: Any, k: Any, v: Any, g: Any, beta: Any, state_vk: Any) -> tuple[Any, Any]:
    """The recurrence as ggml's kernel states it ([value][key] state, output scaled), written independently."""
    B, T, H, D = q.shape
    s = state_vk.clone()
    out = torch.empty(B, T, H, D, dtype=s.dtype)
    for t in range(T):
        qt, kt, vt = q[:, t], k[:, t], v[:, t]
        gt = g[:, t].exp()[..., None]
        kv = (s * kt[:, :, None, :]).sum(-1)
        delta = (vt - gt * kv) * beta[:, t][..., None]
        s = gt[..., None] * s + delta[..., None] * kt[:, :, None, :]
        out[:, t] = (s * qt[:, :, None, :]).sum(-1) / D**0.5
    return out, s


@pytest.mark.parametrize("verbatim", [False, True])
def test_eager_baseline_is_the_gated_delta_rule(verbatim: bool) -> None:
    gen = torch.Generator().manual_seed(7)
    B, T, H, D = 2, 6, 3, 16
    q = F.normalize(torch.randn(B, T, H, D, generator=gen), dim=-1).double()
    k = F.normalize(torch.randn(B, T, H, D, generator=gen), dim=-1).double()
    v = torch.randn(B, T, H, D, generator=gen).double()
    g = F.logsigmoid(torch.randn(B, T, H, generator=gen) + 3).double()
    beta = torch.sigmoid(torch.randn(B, T, H, generator=gen)).double()
    s_vk = 0.5 * torch.randn(B, H, D, D, generator=gen).double()
    ref_out, ref_s = ggml_style_recurrence(q, k, v, g, beta, s_vk)
    out, s_kv = bench_gdn.eager_recurrence(
        q, k, v, g, beta, s_vk.transpose(-1, -2), dtype=torch.float64, verbatim=verbatim
    )
    assert rel_err(out, ref_out) < 1e-12
    assert rel_err(s_kv.transpose(-1, -2), ref_s) < 1e-12
    # Reading the state in the wrong layout must be caught by the same check.
    assert rel_err(s_kv, ref_s) > 1e-2


@pytest.mark.parametrize(
    ("head_dim", "heads", "occupancy", "expected"),
    # docs/perf-reference.md §3: ggml's own parallel_blocks on the H200 (132 SMs) at n_kv 512 / 4096 / 32768.
    [(256, 16, 2, (2, 16, 16)), (128, 32, 3, (4, 12, 12))],
)
def test_parallel_blocks_matches_ggml_choice(
    head_dim: int, heads: int, occupancy: int, expected: tuple[int, ...]
) -> None:
    got = tuple(
        bench_fa.parallel_blocks(occupancy, 132, n, head_dim=head_dim, n_heads=heads) for n in (512, 4096, 32768)
    )
    assert got == expected


def test_parallel_blocks_never_exceeds_kv_tiles() -> None:
    assert bench_fa.parallel_blocks(2, 132, 256) == 1
    assert bench_fa.parallel_blocks(8, 132, 1000) == 4


def _row(impl: str, median: float, **extra: object) -> dict[str, Any]:
    return {
        "impl": impl,
        "note": "",
        "hidden": Stat(median, median, median),
        "graph": Stat(median / 2),
        "loop": Stat(10.0),
        "host_enqueue": Stat(5.0),
        **extra,
    }


def _gdn(impl: str, median: float, B: int, T: int) -> dict[str, Any]:
    return dict(_row(impl, median), B=B, T=T, err_out=1e-7, err_state=1e-7)


def test_gdn_report_says_not_built_and_prints_no_target_verdict() -> None:
    results = [_gdn("ggml unpatched", 6.0, 1, 1)]
    md = bench_gdn.render(results, {"op": "not built: no variant"}, {}, [(1, 1)])
    assert "| 1 | 1 | op | not built: no variant |" in md
    assert "no patched row was measured (not built: no variant)" in md
    assert "MET" not in md and "MISSED" not in md


def test_gdn_report_judges_the_targets_from_the_numbers() -> None:
    cases = [(1, 1), (32, 1), (32, 4)]
    results = [
        _gdn("ggml unpatched", 5.0, 1, 1),
        _gdn("ggml patched", 6.0, 1, 1),  # 1.2x slower than unpatched
        _gdn("ggml unpatched", 46.0, 32, 1),
        _gdn("ggml patched", 32.0, 32, 1),  # <= 33
        _gdn("ggml unpatched", 85.0, 32, 4),
        _gdn("ggml patched", 55.0, 32, 4),  # > 50
        _gdn("fla v-first", 57.0, 32, 4),
    ]
    md = bench_gdn.render(results, {}, {}, cases)
    assert "B=32 T=1 ≤ 33.0 µs: ggml patched **32.0 µs** = 0.97× the target → MET; unpatched 46.0 µs" in md
    assert "B=32 T=4 ≤ 50.0 µs: ggml patched **55.0 µs** = 1.10× the target → MISSED" in md
    assert "best fla 57.0 µs" in md
    assert "B=1 T=1 ≤ 5.5 µs: ggml patched **6.0 µs**" in md and "→ MISSED" in md
    assert "no shape slower than unpatched (ggml patched ÷ ggml unpatched ≤ 1.03, the run-to-run spread): " in md
    assert "MISSED at B=1 T=1 (1.20×)" in md
    # the op, when measured, is the row judged
    results.append(_gdn("op", 30.0, 32, 1))
    assert "B=32 T=1 ≤ 33.0 µs: op **30.0 µs**" in bench_gdn.render(results, {}, {}, cases)


def _fa(impl: str, median: float, d: int, n_kv: int) -> dict[str, Any]:
    return dict(_row(impl, median), D=d, heads="x", n_kv=n_kv, err=1e-7)


def test_fa_report_states_the_gap_to_sdpa_honestly() -> None:
    results: list[dict[str, Any]] = []
    for d in (256, 128):
        for n in bench_fa.N_KV:
            results += [_fa("ggml unpatched", 74.0, d, n), _fa("SDPA cuDNN", 63.0, d, n)]
    results.append(_fa("ggml patched", 60.0, 256, 32768))  # the op is not built: the patched row is judged
    results.append(_fa("ggml patched", 80.0, 256, 512))
    md = bench_fa.render(results, {"op": "not built: x"}, {})
    assert "D=256 16/4 n_kv=32768: ggml patched **60.0 µs**; best SDPA SDPA cuDNN 63.0 µs: 0.95× → ≤ 0.9× " in md
    assert "the best SDPA: MISSED" in md
    assert "D=128 32/8 n_kv=32768: ggml patched not measured" in md
    assert "| 256, 16/4 | 512 | op | not built: x |" in md


def test_fa_report_judges_the_op_against_sdpa_and_the_kernel_before_grouping() -> None:
    results = [
        _fa("ggml patched", 14.0, 256, 512),
        _fa(bench_fa.GROUPED, 12.0, 256, 512),
        _fa("op", 14.7, 256, 512),  # 1.05x the one-head-per-block kernel: slower than before
        _fa("SDPA flash", 13.0, 256, 512),
        _fa("ggml patched", 73.0, 256, 32768),
        _fa(bench_fa.GROUPED, 50.0, 256, 32768),
        _fa("op", 50.0, 256, 32768),
        _fa("SDPA cuDNN", 61.0, 256, 32768),  # 50 / 61 = 0.82 <= 0.9
        _fa("SDPA flash", 62.0, 256, 32768),
    ]
    md = bench_fa.render(results, {}, {}, (512, 32768))
    assert "D=256 16/4 n_kv=512: op **14.7 µs**; grouped ÷ one-head-per-block 0.86 (12.0 / 14.0); op ÷ ggml " in md
    assert "patched 1.05 → no slower: MISSED; best SDPA SDPA flash 13.0 µs: 1.13×" in md
    assert "D=256 16/4 n_kv=32768: op **50.0 µs**; grouped ÷ one-head-per-block 0.68 (50.0 / 73.0); best SDPA " in md
    assert "SDPA cuDNN 61.0 µs: 0.82× → ≤ 0.9× the best SDPA: MET" in md


@pytest.mark.parametrize(
    ("n_kv", "groups", "expected"),
    # H200: 132 SMs, 2 resident blocks of the grouped kernel. 16/4 heads at D=256 -> 4 groups; 32/8 -> 8.
    [(32768, 4, 64), (32768, 8, 32), (16384, 4, 64), (4096, 4, 32), (4096, 8, 32), (512, 4, 4), (100, 4, 1)],
)
def test_grouped_parallel_blocks_fill_one_wave_with_equal_shares(n_kv: int, groups: int, expected: int) -> None:
    pb = bench_fa.parallel_blocks_grouped(2, 132, n_kv, groups)
    assert pb == expected
    chunks = -(-n_kv // 128)
    assert pb * groups <= 264 or pb == 1  # one wave
    assert pb <= chunks and -(-chunks // pb) * (pb - 1) < chunks  # every block gets work


@pytest.mark.slow
def test_raw_harness_compiles_against_the_vendored_sources(tmp_path: Path) -> None:
    vendor = ROOT / "vendor" / "ggml"
    if not (vendor / "src" / "ggml-cuda" / "gated_delta_net.cu").exists():
        pytest.skip("vendor/ggml is not populated (run `ggml-vendor sync`); the raw harness needs upstream sources")
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    loader = importlib.import_module("raw_ggml.loader")

    try:
        lib = loader.build(vendor, tmp_path, quiet=True)
    except loader.RawUnavailable as exc:
        if "cublas_v2.h not found" in str(exc):
            pytest.skip(str(exc).splitlines()[0])
        raise
    nm = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True).stdout
    exported = {line.split()[-1] for line in nm.splitlines() if line.strip()}
    assert {"raw_gdn_launch", "raw_fa_launch", "raw_fa_occupancy", "raw_last_error"} <= exported
    # No ggml symbol may be left for the loader to find elsewhere (the shim defines them all).
    undefined = subprocess.run(["nm", "-uD", str(lib)], capture_output=True, text=True, check=True).stdout
    assert "ggml_" not in undefined


def test_generate_report_ratios_rounds_and_token_agreement() -> None:
    bench_generate = importlib.import_module("bench_generate")

    def mode(tok_s: float, diff: tuple[int, int] | None, step_ms: float) -> dict[str, Any]:
        return {
            "tok_s": tok_s,
            "tok_s_all": [tok_s - 1, tok_s, tok_s + 1],
            "step_ms": step_ms,
            "first_diff_vs_torch": diff,
        }

    res = {
        "torch": mode(80.0, None, 12.0),
        "fla": mode(100.0, (0, 53), 10.0),
        "ours": mode(120.0, None, 8.0),
        "ours-fa": {"rounds": []},
    }
    md = bench_generate.table("t", res, ["torch", "fla", "ours", "ours-fa"])
    rows = {line.split("|")[1].strip(): line for line in md.splitlines() if line.startswith("| ")}
    assert "| 1.500 | 1.200 |" in rows["ours"]  # ÷ torch, ÷ fla from the medians
    assert "| 8.00 | 1.500 | 1.250 |" in rows["ours"]  # step ms, then speedups by the median decode step
    assert "| 1.250 | 1.000 |" in rows["fla"] and "no, from (row, token) (0, 53)" in rows["fla"]
    assert rows["ours"].rstrip().endswith("| yes |") and "119, 120, 121" in rows["ours"]
    assert "not run" in rows["ours-fa"]
    assert bench_generate.first_diff([[1, 2, 3], [4, 5, 6]], [[1, 2, 3], [4, 9, 6]]) == (1, 1)
    assert bench_generate.first_diff([[1, 2]], [[1, 2]]) is None


def test_generate_prompt_sweep_reports_first_token_and_decode_apart() -> None:
    bench_generate = importlib.import_module("bench_generate")

    res = {
        4096: {
            "torch": {"ttft_ms": 400.0, "decode_tok_s": 20.0, "rounds": 2},
            "fla": {"ttft_ms": 100.0, "decode_tok_s": 25.0, "rounds": 2},
            "ours": {"ttft_ms": 200.0, "decode_tok_s": 30.0, "rounds": 1},
        }
    }
    md = bench_generate.sweep_table("t", res, ["torch", "fla", "ours", "ours-fa"])
    rows = {line.split("|")[2].strip(): line for line in md.splitlines() if line.startswith("| 4096")}
    assert "| 200.0 | 0.500 | 2.000 | 30.0 | 1.500 | 1.200 | 1 |" in rows["ours"]  # ttft ÷ torch/fla, tok/s ÷
    assert "not run" in rows["ours-fa"]


def test_compiled_rows_report_compile_counters_and_one_steady_step() -> None:
    bench_generate = importlib.import_module("bench_generate")

    before = {"frames": 1, "graphs": 1, "graph_breaks": 0, "break_reasons": [], "cudagraph_skips": 0}
    after = {"frames": 2, "graphs": 2, "graph_breaks": 1, "break_reasons": ["x.item()"], "cudagraph_skips": 0}
    delta = bench_generate.counter_delta(before, after)
    assert delta == {"frames": 1, "graphs": 1, "graph_breaks": 1, "cudagraph_skips": 0, "break_reasons": ["x.item()"]}
    # two profiles 32 steps apart: the prefill kernel (in both) cancels, the step's kernels are per step
    short = {"prefill": (500.0, 1), "gdn": (160.0, 16), "mm": (3200.0, 64)}
    long = {"prefill": (500.0, 1), "gdn": (480.0, 48), "mm": (9600.0, 192)}
    step = bench_generate.per_step(short, long, 32)
    assert step["device_us"] == 210.0 and step["launches"] == 5.0
    assert step["top"][0] == ["mm", 200.0, 4.0] and step["top"][1] == ["gdn", 10.0, 1.0]
    res = {
        "recompiles_in_rounds": 0,
        "ours": {"warmup_s": 18.2, "compile": delta, "profile": step, "rounds": [{"ttft_ms": 30.0}, {"ttft_ms": 50.0}]},
        "fla": {"warmup_s": 74.3},
    }
    md = bench_generate.compile_table("t", res, ["fla", "ours"])
    rows = {line.split("|")[1].strip(): line for line in md.splitlines() if line.startswith("| ")}
    assert "recompiles during the timed rounds: 0" in md
    assert "| 18.2 | 1 | 1 | 1 ['x.item()'] | 0 | 40.0 | 210 | 5 | mm 200.0/4; gdn 10.0/1" in rows["ours"]
    assert "| 74.3 |" in rows["fla"] and "| nan |" in rows["fla"]  # compiled, never timed: said, not invented


def test_prefill_report_judges_ours_against_fla_chunk() -> None:
    pre = importlib.import_module("bench_gdn_prefill")

    def row(impl: str, ms: float, B: int = 1, T: int = 512) -> dict[str, Any]:
        return {"B": B, "T": T, "impl": impl, "t": Stat(ms * 1000, ms * 900, ms * 1100), "err_out": 1e-3,
                "err_state": 1e-6, "ref": "float64"}  # fmt: skip

    results = [row("ours", 0.5), row("fla chunk", 0.4), row("ggml unpatched", 2.0), row("ours", 0.3, T=2048),
               row("fla chunk", 0.6, T=2048), {"B": 8, "T": 512, "impl": "ours", "error": "boom"}]  # fmt: skip
    md = pre.render_prefill(results, {}, [(1, 512), (1, 2048), (8, 512)])
    assert "B=1 T=512: ours 0.500 ms ÷ fla 0.400 ms = **1.25** → MISSED" in md
    assert "B=1 T=2048: ours 0.300 ms ÷ fla 0.600 ms = **0.50** → MET" in md
    assert "B=8 T=512: not judged" in md and "error: boom" in md
    assert "| 1 | 512 | ours | **0.500** (0.450–0.550) | 1.25 | 0.25 | 1.0 |" in md
    assert pre.parse_cases("1x512,8x2048") == [(1, 512), (8, 2048)]


@pytest.mark.parametrize("flag", ["--modes", "--compile-modes", "--sweep-modes"])
def test_generate_refuses_unknown_modes_in_one_line(flag: str) -> None:
    bench = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_generate.py"
    r = subprocess.run([sys.executable, str(bench), flag, "torch,flaa"], capture_output=True, text=True)
    assert r.returncode == 2
    assert f"{flag}: unknown mode(s) flaa; choose from torch, fla, ours-gdn, ours-fa, ours" in r.stderr


def test_fa_prints_a_row_more_than_ten_percent_slower_than_its_record_as_a_regression(tmp_path: Path) -> None:
    def row(impl: str, dtype: str, device: float, per_call: float) -> dict[str, Any]:
        return dict(
            _fa(impl, device, 256, 32768), dtype=dtype, heads="16/4", per_call=Stat(per_call, per_call, per_call, 3)
        )

    results = [
        row("op", "float16", 101.0, 90.0),  # the f16 loss: 1.38x the record
        row("op", "bfloat16", 65.0, 60.0),  # 1.09x: within the 10%
        row("op, q bf16", "bfloat16", 70.0, 99.0),  # device fine, per call 1.24x
    ]
    record = tmp_path / "attention.json"
    _env, recorded = suites.attention_rows({"results": [row("op", "float16", 73.2, 60.0)]})
    record.write_text(records.dump_runs([records.Run("attention", {"gpu": "GPU A"}, recorded)]))
    rows = bench_fa.load_record(record, "GPU A")
    rows[bench_fa.record_key("bfloat16", 256, "16/4", 32768, "op")] = {"device_us": 60.0, "per_call_us": None}
    rows[bench_fa.record_key("bfloat16", 256, "16/4", 32768, "op, q bf16")] = {"device_us": 70.0, "per_call_us": 80.0}
    lines = bench_fa.regressions(results, rows)
    assert lines == [
        "* **REGRESSION** float16 D=256 16/4 n_kv=32768 op: device 101.0 µs against the record's 73.2 (1.38×)",
        "* **REGRESSION** float16 D=256 16/4 n_kv=32768 op: per call 90.0 µs against the record's 60.0 (1.50×)",
        "* **REGRESSION** bfloat16 D=256 16/4 n_kv=32768 op, q bf16: per call 99.0 µs against the record's 80.0 (1.24×)",
    ]
    assert bench_fa.load_record(record, "GPU B") == {}  # another card's times are never judged against it
    md = bench_fa.render(results, {}, {}, (32768,), "float16", rows)
    assert "73.2 (1.38×, REGRESSION)" in md and "**REGRESSION** float16 D=256" in md
