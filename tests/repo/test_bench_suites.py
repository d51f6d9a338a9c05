"""The benchmark framework itself, on synthetic timings (no GPU, nothing timed): the regression rule (more than
10% slower than the record is flagged, 9% is not), the one table and JSON schema every suite writes, the suites'
adapters from their scripts' JSON, the entry point's time budget and bad input, and docs/benchmarks.md equal to
what the committed results generate."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

# benchmarks/ is a folder of scripts, not a package: its modules are imported by name (untyped modules).
record = importlib.import_module("record")
report = importlib.import_module("report")
suites = importlib.import_module("suites")
Row, Run = record.Row, record.Run


def _row(device: float | None, per_call: float | None, n_kv: int = 32768) -> Any:
    return Row({"op": "flash_attn", "impl": "op", "kv dtype": "float16", "n_kv": n_kv}, device, per_call)


@pytest.mark.parametrize(
    ("device", "per_call", "flags"),
    [
        (111.0, 100.0, ["device 1.11×"]),  # 11% slower by device time
        (109.0, 100.0, []),  # 9%: within the spread
        (110.0, 110.0, []),  # exactly 10% is not more than 10%
        (100.0, 125.0, ["per call 1.25×"]),  # the host side regressed, the kernel did not
        (150.0, 150.0, ["device 1.50×", "per call 1.50×"]),
    ],
)
def test_a_row_more_than_ten_percent_slower_than_its_record_is_a_regression(
    device: float, per_call: float, flags: list[str]
) -> None:
    judged = record.judge(_row(device, per_call), _row(100.0, 100.0))
    assert judged.regression == flags


def test_no_record_or_a_missing_time_flags_nothing() -> None:
    assert record.judge(_row(500.0, 500.0), None).regression == []
    assert record.judge(_row(500.0, None), _row(100.0, 100.0)).regression == ["device 5.00×"]
    assert record.judge(_row(None, 500.0), _row(100.0, None)).regression == []


def test_the_record_is_the_newest_run_of_the_same_suite_on_the_same_gpu() -> None:
    old = Run("attention", {"gpu": "GPU A"}, [_row(90.0, 90.0)])
    new = Run("attention", {"gpu": "GPU A"}, [_row(100.0, 100.0)])
    other_card = Run("attention", {"gpu": "GPU B"}, [_row(10.0, 10.0)])
    other_suite = Run("decode", {"gpu": "GPU A"}, [_row(10.0, 10.0)])
    rows = record.record_rows([old, new, other_card, other_suite], "attention", "GPU A")
    assert [(r.device_us, r.per_call_us) for r in rows.values()] == [(100.0, 100.0)]
    assert record.record_rows([new], "attention", "GPU C") == {}  # another card's times are never judged
    now = Run("attention", {"gpu": "GPU A"}, [_row(112.0, 100.0), _row(50.0, 50.0, n_kv=512)])
    judged = record.judge_run(now, [old, new])
    assert [j.regression for j in judged] == [["device 1.12×"], []]  # 512 has no record


def test_every_suite_prints_the_same_columns_with_the_peer_and_the_flag() -> None:
    row = _row(121.0, 130.0)
    row.peer, row.peer_device_us, row.peer_per_call_us = "SDPA cuDNN", 110.0, 100.0
    lines = record.table_lines([record.judge(row, _row(100.0, 100.0))])
    assert lines[0] == "| " + " | ".join(record.COLUMNS) + " |"
    assert lines[2] == (
        "| op=flash_attn, impl=op, kv dtype=float16, n_kv=32768 | 121.0 µs | 130.0 µs | SDPA cuDNN (110.0 µs / "
        "100.0 µs) | 1.10 | 1.30 | 100.0 µs / 100.0 µs | **REGRESSION** device 1.21×, per call 1.30× |"
    )
    assert record.fmt_us(2500.0) == "2.50 ms" and record.fmt_us(3.2e6) == "3.20 s" and record.fmt_us(None) == "–"


def test_a_run_round_trips_through_its_json_and_a_foreign_schema_is_refused(tmp_path: Path) -> None:
    run = Run("decode", {"gpu": "GPU A", "torch": "2.14"}, [_row(1.0, 2.0)], [record.Table("t", ["a"], [["1"]])])
    path = tmp_path / "decode.json"
    path.write_text(record.dump_runs([run]))
    assert record.load_runs(path) == [run]
    doc = json.loads(path.read_text())
    doc["runs"][0]["schema"] = 99
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="result schema 99 is not 1"):
        record.load_runs(path)


def _stat(us: float) -> dict[str, Any]:
    return {"median": us, "p10": us, "p90": us, "n": 3, "note": ""}


def test_attention_rows_put_the_fastest_sdpa_backend_beside_each_row_per_dtype() -> None:
    def fa(impl: str, dtype: str, dev: float, call: float) -> dict[str, Any]:
        return {"impl": impl, "D": 256, "heads": "16/4", "n_kv": 4096, "dtype": dtype, "hidden": _stat(dev)} | {
            "per_call": _stat(call)
        }

    doc = {
        "env": {"device": "GPU A", "torch": "2.14", "date_utc": "2026-12-05 10:00 UTC"},
        "results": [
            fa("op", "float16", 20.0, 30.0),
            fa("SDPA flash", "float16", 25.0, 28.0),
            fa("SDPA cuDNN", "float16", 22.0, 40.0),
            fa("op", "bfloat16", 21.0, 31.0),
            fa("SDPA math", "bfloat16", 90.0, 95.0),
        ],
    }
    env, rows = suites.attention_rows(doc)
    assert env["gpu"] == "GPU A" and env["torch"] == "2.14" and env["compile_backend"] == "eager (no torch.compile)"
    assert [(r.config["kv dtype"], r.peer, r.peer_device_us, r.peer_per_call_us) for r in rows] == [
        ("float16", "SDPA cuDNN", 22.0, 28.0),  # best by device and by per call may be different backends
        ("bfloat16", "SDPA math", 90.0, 95.0),
    ]


def test_decode_and_gguf_rows_name_their_peers() -> None:
    gdn = {"B": 1, "T": 1, "hidden": _stat(6.0), "loop": _stat(12.0)}
    _env, rows = suites.decode_rows({"results": [gdn | {"impl": "op"}, gdn | {"impl": "fla v-first", "loop": None}]})
    assert [(r.config["impl"], r.peer, r.peer_device_us, r.peer_per_call_us) for r in rows] == [
        ("op", "fla v-first", 6.0, None)
    ]
    gemv = {"type": "Q4_K", "n": 4096, "k": 14336, "m": 1, "us": 15.0, "hbm_frac": 0.46, "bf16_us": 31.2}
    _env, rows = suites.gguf_rows({"device": "GPU A", "host_us": {"mul_mat_vec": 33.8}, "gemv": [gemv]})
    assert (rows[0].device_us, rows[0].per_call_us, rows[0].peer, rows[0].note) == (
        15.0,
        33.8,
        "bf16 cuBLAS",
        "46% of HBM",
    )


def _main(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "benchmarks", *args], capture_output=True, text=True, cwd=cwd, env=env)


def test_run_reports_suites_that_do_not_fit_the_budget_as_skipped_for_time(tmp_path: Path) -> None:
    proc = _main("run", "attention", "build", "--budget-s", "5", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "attention: skipped for time" in proc.stdout and "build: skipped for time" in proc.stdout
    assert json.loads((tmp_path / "summary.json").read_text()) == {
        "skipped_for_time": ["attention", "build"],
        "exit_code": 0,
    }


def test_run_refuses_an_unknown_suite_in_one_line(tmp_path: Path) -> None:
    proc = _main("run", "decodee", "--out", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: unknown suite 'decodee'; choose from decode, prefill, attention, gguf, e2e, build"
    ]
    assert not (tmp_path / "summary.json").exists()


def test_a_suite_prints_the_table_and_writes_the_schema_from_its_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The whole path of one suite with a stand-in script that writes synthetic bench_fa JSON."""
    import importlib

    main = importlib.import_module("benchmarks.__main__")
    results = tmp_path / "results"
    results.mkdir()
    old = _row(100.0, 100.0)
    old.config = {"op": "flash_attn", "impl": "op", "kv dtype": "float16", "D": 256, "heads": "16/4"} | {
        "n_kv": 32768,
        "batch": 1,
    }
    (results / "attention.json").write_text(record.dump_runs([Run("attention", {"gpu": "GPU T"}, [old])]))
    monkeypatch.setattr(main, "RESULTS", results)
    payload = {
        "env": {"device": "GPU T"},
        "results": [
            {"impl": "op", "D": 256, "heads": "16/4", "n_kv": 32768, "dtype": "float16"}
            | {"hidden": _stat(120.0), "per_call": _stat(105.0)},
        ],
    }
    script = tmp_path / "fake_bench.py"
    script.write_text(
        "import json, sys, pathlib\n"
        f"out = pathlib.Path(sys.argv[sys.argv.index('--out') + 1]); out.mkdir(parents=True, exist_ok=True)\n"
        f"(out / 'bench_fa.json').write_text(json.dumps({payload!r}))\n"
    )
    suite = suites.Suite("attention", str(script), (), "bench_fa.json", 1, suites.attention_rows, "stand-in")
    assert main.run_suite(suite, tmp_path / "out", sys.executable, 60, keep=True) == 0
    out = capsys.readouterr().out
    assert "| **REGRESSION** device 1.20× |" in out
    assert "REGRESSION op=flash_attn, impl=op, kv dtype=float16, D=256, heads=16/4, n_kv=32768, batch=1" in out
    written = record.Run.from_json(json.loads((tmp_path / "out" / "attention.json").read_text()))
    assert written.rows[0].device_us == 120.0 and written.env["gpu"] == "GPU T"
    assert len(record.load_runs(results / "attention.json")) == 2  # --record appended the run


def test_a_generated_page_judges_each_run_against_the_runs_before_it(tmp_path: Path) -> None:
    runs = [
        Run("decode", {"gpu": "GPU A", "title": "first"}, [_row(100.0, 100.0)]),
        Run("decode", {"gpu": "GPU A", "title": "second", "date": "2026-12-05"}, [_row(120.0, 100.0)]),
    ]
    (tmp_path / "decode.json").write_text(record.dump_runs(runs))
    page = report.render(tmp_path)
    assert page.index("### second") < page.index("### first")  # newest first
    assert "gpu: GPU A; date: 2026-12-05" in page
    section = page.split("\n## decode\n")[1]
    assert section.count("**REGRESSION**") == 1 and "**REGRESSION** device 1.20×" in section
    assert report.render(tmp_path) == page  # reproducible to the byte


def test_docs_benchmarks_md_is_what_the_committed_results_generate() -> None:
    page = ROOT / "docs" / "benchmarks.md"
    assert page.read_text(encoding="utf-8") == report.render(ROOT / "benchmarks" / "results"), (
        "docs/benchmarks.md differs from benchmarks/results/: run `python -m benchmarks report`"
    )
    proc = _main("report", "--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
