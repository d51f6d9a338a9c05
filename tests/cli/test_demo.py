"""demo: the whole pipeline on the embedded miniature in a throwaway workspace, and its failure reporting."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.machine import requires_torch
from toolkit.core import config
from toolkit.demo import DEMO_REPO, make_workspace, run_demo

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_workspace_points_at_the_embedded_upstream_and_leaves_the_project_alone(tmp_path: Path) -> None:
    ws = make_workspace(REPO_ROOT, tmp_path / "ws")
    cfg = config.load(ws)
    assert cfg.upstream == "embedded" and cfg.hub_repo == DEMO_REPO
    assert cfg.name == config.load(REPO_ROOT).name
    assert (ws / "templates").is_dir() and (ws / "vendor" / "patches").is_dir()
    assert not (ws / "build").exists() and not (ws / "vendor" / "UPSTREAM").exists()
    # comments in the copied pyproject survive the edit (tomlkit)
    assert "# kernel name on the Hub" in (ws / "pyproject.toml").read_text()


def test_a_failing_stage_stops_the_run_and_is_reported(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy2(REPO_ROOT / "pyproject.toml", src / "pyproject.toml")  # no templates/: render must fail
    report = run_demo(src, workspace=tmp_path / "ws")
    status = {s.name: s.status for s in report.stages}
    assert status["setup"] == "ok" and status["sync"] == "ok"
    assert status["render"] == "failed"
    assert all(status[s] == "skipped" for s in ("build", "verify", "publish", "get_kernel"))
    assert not report.ok
    render = next(s for s in report.stages if s.name == "render")
    assert "templates" in render.detail


@pytest.mark.slow
@requires_torch
def test_demo_end_to_end(tmp_path: Path) -> None:
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH: this machine can build no variant for the demo")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "toolkit.cli",
            "demo",
            "-C",
            str(REPO_ROOT),
            "--json",
            "--workspace",
            str(tmp_path / "ws"),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    doc = json.loads(proc.stdout)
    stages = {s["stage"]: s for s in doc["stages"]}
    assert proc.returncode == 0 and doc["ok"], json.dumps(
        {k: (v["status"], v["detail"]) for k, v in stages.items()}, indent=1
    )
    # The project's second package (gguf-kernels) needs files the embedded miniature does not have: one
    # visible skipped stage, and the first package runs end to end.
    assert stages["gguf-kernels"]["status"] == "skipped" and "mmvq.cu" in stages["gguf-kernels"]["detail"]
    assert [s["stage"] for s in doc["stages"]] == [
        "setup",
        "gguf-kernels",
        "sync",
        "render",
        "build",
        "verify",
        "publish",
        "get_kernel",
    ]
    pub = stages["publish"]["data"]
    assert pub["status"] == "published" and pub["verified"]["ok"]
    loaded = stages["get_kernel"]["data"]
    assert loaded["module"].startswith("_ggml_attn_kernels_cuda_")
    assert loaded["ops"], "no op registered under the build's namespace"
