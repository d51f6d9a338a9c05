"""The one GPU script (benchmarks/gpu.sh) parses, refuses a missing output folder in one line, and its step
runner keeps its promises: a step's limit trimmed to the time budget, a step past it skipped (99), the command's
exit code returned (124 when its limit stops it), the log kept and its tail filtered."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "gpu.sh"
pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="no bash on this machine")


def test_script_parses_and_is_the_only_gpu_script() -> None:
    proc = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (REPO / "benchmarks").glob("*.sh")) == ["gpu.sh"]


def test_script_without_an_output_folder_says_how_to_call_it() -> None:
    proc = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "usage: bash benchmarks/gpu.sh OUT_DIR [SUITE...] (BUDGET_S, WHEELS, TESTS, MEMCHECK, RECORD in the environment)"
    ]


def _session(tmp_path: Path, body: str, **env: str) -> subprocess.CompletedProcess[str]:
    script = f'set -uo pipefail\ncd "{REPO}"\nRESULTS="{tmp_path}/res"\nsource benchmarks/gpu.sh\n{body}'
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", **env})


def test_step_runs_logs_and_returns_the_exit_code(tmp_path: Path) -> None:
    proc = _session(tmp_path, 'step ok 30 bash -c "echo one; echo two; exit 3"; echo "rc=$?"', BUDGET_S="600")
    assert "=== ok (limit 30s)" in proc.stdout
    assert "one\ntwo\nok exit code 3" in proc.stdout
    assert "rc=3" in proc.stdout
    assert (tmp_path / "res" / "ok.log").read_text() == "one\ntwo\n"
    assert "ok exit code 3" in (tmp_path / "res" / "session.log").read_text()


def test_step_limit_is_trimmed_to_the_deadline_and_skipped_past_it(tmp_path: Path) -> None:
    body = 'step trimmed 500 true; step stopped 1 sleep 5; echo "rc=$?"; SECONDS=100; step late 30 true; echo "rc=$?"'
    proc = _session(tmp_path, body, BUDGET_S="100")
    assert "=== trimmed (limit 100s)" in proc.stdout
    assert "stopped exit code 124" in proc.stdout and "rc=124" in proc.stdout.split("late")[0]
    assert "late: skipped (deadline)" in proc.stdout
    assert proc.stdout.rstrip().endswith("rc=99")
    assert not (tmp_path / "res" / "late.log").exists()


def test_step_show_filters_the_tail(tmp_path: Path) -> None:
    body = 'STEP_SHOW="^ROW" TAIL=1 step grid 30 bash -c "echo ROW 1; echo noise; echo ROW 2"'
    proc = _session(tmp_path, body, BUDGET_S="600")
    assert "ROW 2\ngrid exit code 0" in proc.stdout
    assert "ROW 1" not in proc.stdout and "noise" not in proc.stdout


def test_install_wheels_without_wheels_puts_the_checkout_on_the_path(tmp_path: Path) -> None:
    proc = _session(tmp_path, 'install_wheels; echo "path=$PYTHONPATH"')
    assert f"path={REPO}" in proc.stdout
    assert not (tmp_path / "res" / "pip.log").exists()
