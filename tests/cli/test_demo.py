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
GGUF_STAGES = [f"{n} gguf-kernels" for n in ("render", "build", "verify", "publish", "get_kernel")]


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
    # The project's second package (gguf-kernels) runs on the miniature's closure-only stand-ins: synced, rendered
    # and its build planned; compiling, verifying, publishing and loading it are skipped, naming the stand-ins.
    assert [s["stage"] for s in doc["stages"]] == [
        "setup",
        "sync",
        "render",
        "build",
        "verify",
        "publish",
        "get_kernel",
        *GGUF_STAGES,
    ]
    assert (
        stages["build gguf-kernels"]["status"] == "ok"
        and "planned, not compiled" in stages["build gguf-kernels"]["detail"]
    )
    for name in ("verify gguf-kernels", "publish gguf-kernels", "get_kernel gguf-kernels"):
        assert stages[name]["status"] == "skipped" and "mmvq.cu" in stages[name]["detail"], stages[name]
    pub = stages["publish"]["data"]
    assert pub["status"] == "published" and pub["verified"]["ok"]
    loaded = stages["get_kernel"]["data"]
    assert loaded["module"].startswith("_ggml_attn_kernels_cuda_")
    assert loaded["ops"], "no op registered under the build's namespace"


def test_the_second_package_is_synced_rendered_and_planned_on_the_miniature(tmp_path: Path, monkeypatch) -> None:
    # The first package's compile/verify/publish/load are stubbed (the slow end-to-end test runs them): what is
    # checked is that the miniature's gguf stand-ins carry gguf-kernels' closure through sync, render and the
    # build plan, and that what the stand-ins cannot do is skipped, saying why.
    from toolkit import demo

    stub = lambda ctx: ("stubbed", {})  # noqa: E731
    monkeypatch.setattr(demo, "PACKAGE_TASKS", (("render", demo._render),) + tuple((n, stub) for n in demo.STAGES[3:]))
    report = run_demo(REPO_ROOT, workspace=tmp_path / "ws")
    status = {s.name: (s.status, s.detail) for s in report.stages}
    assert [s.name for s in report.stages][-5:] == GGUF_STAGES
    assert report.ok, status
    assert status["sync"][0] == "ok" and "mmvq.cu" in " ".join(report.stages[1].data["files"])
    assert status["render gguf-kernels"][0] == "ok"
    assert (tmp_path / "ws" / "packages" / "gguf-kernels" / "build.toml").is_file()
    build_status, build_detail = status["build gguf-kernels"]
    assert build_status == "ok" and build_detail.startswith("planned, not compiled: ")
    for name in GGUF_STAGES[2:]:
        assert status[name][0] == "skipped" and "closure-only stand-ins" in status[name][1], status[name]
    assert "src/ggml-cuda/mmvq.cu" in status["verify gguf-kernels"][1]
