"""The benchmark scripts' own logic (no GPU needed): the eager baseline computes the GDN function, the FA launch
parameters match ggml's choice, the report renders a missing op as "not built", and the raw harness compiles."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the benchmark helpers need torch")
import torch.nn.functional as F  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_fa  # noqa: E402
import bench_gdn  # noqa: E402
from _timing import Stat, rel_err  # noqa: E402


def ggml_style_recurrence(q, k, v, g, beta, state_vk):
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
def test_eager_baseline_is_the_gated_delta_rule(verbatim):
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
def test_parallel_blocks_matches_ggml_choice(head_dim, heads, occupancy, expected):
    got = tuple(
        bench_fa.parallel_blocks(occupancy, 132, n, head_dim=head_dim, n_heads=heads) for n in (512, 4096, 32768)
    )
    assert got == expected


def test_parallel_blocks_never_exceeds_kv_tiles():
    assert bench_fa.parallel_blocks(2, 132, 256) == 1
    assert bench_fa.parallel_blocks(8, 132, 1000) == 4


def _row(impl, median, **extra):
    return {
        "impl": impl,
        "note": "",
        "hidden": Stat(median, median, median),
        "graph": Stat(median / 2),
        "loop": Stat(10.0),
        "host_enqueue": Stat(5.0),
        **extra,
    }


def test_gdn_report_says_not_built_and_prints_no_target_verdict():
    results = [dict(_row("ggml raw", 6.0), B=1, T=1, err_out=1e-7, err_state=1e-7)]
    md = bench_gdn.render(results, {"op": "not built: no variant"}, {"host_yardstick_us": 5.0}, [(1, 1)], None)
    assert "| 1 | 1 | op | not built: no variant |" in md
    assert "op **not measured**" in md
    assert "MET" not in md and "MISSED" not in md


def test_gdn_report_judges_the_targets_from_the_numbers():
    results = [
        dict(_row("ggml raw", 6.0), B=1, T=1, err_out=1e-7, err_state=1e-7),
        dict(_row("op", 7.0), B=1, T=1, err_out=1e-7, err_state=1e-7),
    ]
    md = bench_gdn.render(results, {}, {"host_yardstick_us": 5.0}, [(1, 1)], None)
    assert "op **10.0 µs** → MET" in md  # 10 µs per call <= 15
    assert "= 1.17× → MISSED" in md  # 7.0 / 6.0 > 1.10


def test_fa_report_states_the_gap_to_sdpa_honestly():
    results = [dict(_row("ggml raw", 74.0), n_kv=n, err=1e-7) for n in bench_fa.N_KV]
    results += [dict(_row("SDPA cuDNN", 63.0), n_kv=n, err=1e-4) for n in bench_fa.N_KV]
    md = bench_fa.render(results, {"op": "not built: x"}, {})
    assert "ggml's kernel is SLOWER" in md
    assert "op within 10% of ggml raw: not measured" in md


@pytest.mark.slow
def test_raw_harness_compiles_against_the_vendored_sources(tmp_path):
    vendor = ROOT / "vendor" / "ggml"
    if not (vendor / "src" / "ggml-cuda" / "gated_delta_net.cu").exists():
        pytest.skip("vendor/ggml is not populated (run `ggml-vendor sync`); the raw harness needs upstream sources")
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    from raw_ggml import loader

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


def test_generate_report_ratios_rounds_and_token_agreement():
    import bench_generate

    def mode(tok_s, diff):
        return {
            "tok_s": tok_s,
            "tok_s_all": [tok_s - 1, tok_s, tok_s + 1],
            "step_ms": 10.0,
            "first_diff_vs_torch": diff,
        }

    res = {"torch": mode(80.0, None), "fla": mode(100.0, (0, 53)), "ours": mode(120.0, None), "ours-fa": {"rounds": []}}
    md = bench_generate.table("t", res, ["torch", "fla", "ours", "ours-fa"])
    rows = {line.split("|")[1].strip(): line for line in md.splitlines() if line.startswith("| ")}
    assert "| 1.500 | 1.200 |" in rows["ours"]  # ÷ torch, ÷ fla from the medians
    assert "| 1.250 | 1.000 |" in rows["fla"] and "no, from (row, token) (0, 53)" in rows["fla"]
    assert rows["ours"].rstrip().endswith("| yes |") and "119, 120, 121" in rows["ours"]
    assert "not run" in rows["ours-fa"]
    assert bench_generate.first_diff([[1, 2, 3], [4, 5, 6]], [[1, 2, 3], [4, 9, 6]]) == (1, 1)
    assert bench_generate.first_diff([[1, 2]], [[1, 2]]) is None
