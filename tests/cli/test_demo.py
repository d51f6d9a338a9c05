"""demo: the whole pipeline on the embedded miniature in a throwaway workspace, and its failure reporting."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.machine import requires_torch
from tests.helpers.project import demo_family_source, first_package_pyproject
from toolkit.core import config
from toolkit.demo import Request, run_demo
from toolkit.demo import plan as demo_plan
from toolkit.demo.workspace import DEMO_REPO, make_workspace, missing_in_miniature

REPO_ROOT = Path(__file__).resolve().parents[2]
GGUF_STAGES = [f"{n} gguf-kernels" for n in ("render", "build", "verify", "publish", "get_kernel")]
FIRST = "ggml-attn-kernels"  # every package's stages are named "<stage> <package>"


def test_workspace_points_at_the_embedded_upstream_and_leaves_the_project_alone(tmp_path: Path) -> None:
    ws = make_workspace(REPO_ROOT, tmp_path / "ws")
    cfg = config.load(ws)
    assert cfg.upstream == "embedded" and cfg.hub_repo == DEMO_REPO
    assert cfg.name == config.load(REPO_ROOT).name
    assert (ws / "templates").is_dir() and (ws / "vendor" / "patches").is_dir()
    assert not (ws / "build").exists() and not (ws / "vendor" / "UPSTREAM").exists()
    # comments in the copied pyproject survive the edit (tomlkit)
    assert "# major version -> Hub branch v1" in (ws / "pyproject.toml").read_text()


def test_a_failing_stage_stops_the_run_and_is_reported(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "pyproject.toml").write_text(first_package_pyproject((REPO_ROOT / "pyproject.toml").read_text()))
    templates = src / "templates" / FIRST  # its facts, and a build.toml template that cannot render
    templates.mkdir(parents=True)
    shutil.copy2(REPO_ROOT / "templates" / FIRST / "facts.py", templates / "facts.py")
    (templates / "build.toml.j2").write_text("# {{ notice }}\n{{ no_such_name }}\n")
    report = run_demo(src, workspace=tmp_path / "ws")
    status = {s.name: s.status for s in report.stages}
    assert status["setup"] == "ok" and status["sync"] == "ok"
    assert status[f"render {FIRST}"] == "failed"
    assert all(status[f"{s} {FIRST}"] == "skipped" for s in ("build", "verify", "publish", "get_kernel"))
    assert not report.ok
    render = next(s for s in report.stages if s.name == f"render {FIRST}")
    assert "build.toml.j2" in render.detail and "no_such_name" in render.detail


TASKS = ["render", "build", "verify", "publish", "get_kernel"]


def test_the_plan_lists_the_stages_of_every_package_and_the_run_follows_it(tmp_path: Path) -> None:
    src = demo_family_source(tmp_path, REPO_ROOT)
    plan = demo_plan(src, Request(workspace=tmp_path / "ws"))
    assert plan.packages == ("ggml-attn-kernels", "mini-quant")
    assert [(x.package, x.missing) for x in plan.left_out] == [
        ("absent-quant", ("src/ggml-cuda/not-in-the-miniature.cu",))
    ]
    assert list(plan.stages) == [
        "setup",
        "absent-quant",
        "sync",
        *(f"{t} {FIRST}" for t in TASKS),
        *(f"{t} mini-quant" for t in TASKS),
    ]
    lines = plan.lines()
    assert lines[0] == f"would run, in {tmp_path / 'ws'}, on the embedded miniature upstream:"
    assert "  ggml-attn-kernels: render -> build -> verify -> publish -> get_kernel" in lines
    assert "  mini-quant: render -> build -> verify -> publish -> get_kernel" in lines
    assert any(line.startswith("  absent-quant: skipped: its entry files src/ggml-cuda/not-in-") for line in lines)
    assert plan.to_json()["stages"] == list(plan.stages)
    assert not (tmp_path / "ws").exists(), "the plan made the workspace"
    # with a real upstream nothing is left out: every package gets its tasks
    assert demo_plan(src, Request(upstream=str(tmp_path / "clone"))).packages == (
        "ggml-attn-kernels",
        "mini-quant",
        "absent-quant",
    )
    # execute runs exactly the stages the plan listed (a template that cannot render: render fails, the rest say so)
    report = run_demo(src, workspace=tmp_path / "ws")
    assert [s.name for s in report.stages] == list(plan.stages)


def test_the_plan_of_this_project_lists_what_the_demo_runs(tmp_path: Path) -> None:
    """This repository's packages: each is either run (its tasks listed) or left out naming its missing files."""
    plan = demo_plan(REPO_ROOT)
    project = config.load(REPO_ROOT)
    assert plan.packages[0] == project.name
    names = list(project.package_names())
    assert sorted([*plan.packages, *(x.package for x in plan.left_out)], key=names.index) == names
    for x in plan.left_out:
        assert list(x.missing) == missing_in_miniature(project.for_package(x.package).package)
    for package in plan.packages:
        assert f"render {package}" in plan.stages
    assert config.load(make_workspace(REPO_ROOT, tmp_path / "ws")).package_names() == plan.packages


def test_a_host_with_nothing_to_build_fails_the_build_with_the_stage_s_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The build stage refuses a host that can build none of the selected variants (NothingToBuildError); the
    demo's build task fails with that one line, and the stages after it are skipped."""
    from dataclasses import replace

    from toolkit.build import stage as build_stage

    real = build_stage.host_variant
    # this machine's variant, on a backend it has no toolchain for
    monkeypatch.setattr(build_stage, "host_variant", lambda host: replace(real(host), backend="rocm", toolkit="7.2"))
    src = tmp_path / "src"
    src.mkdir()
    (src / "pyproject.toml").write_text(first_package_pyproject((REPO_ROOT / "pyproject.toml").read_text()))
    for name in ("templates", "variants"):
        shutil.copytree(REPO_ROOT / name, src / name)
    report = run_demo(src, workspace=tmp_path / "ws")
    stages = {s.name: s for s in report.stages}
    names = ("setup", "sync", f"render {FIRST}", f"build {FIRST}")
    assert [stages[n].status for n in names] == ["ok", "ok", "ok", "failed"]
    detail = stages[f"build {FIRST}"].detail
    assert detail.startswith("nothing to build on this host (torch") and "needs ROCm 7.2" in detail, detail
    assert "see `ggml-vendor variants`" in detail
    assert all(stages[f"{n} {FIRST}"].status == "skipped" for n in ("verify", "publish", "get_kernel"))
    assert not report.ok and report.exit_code == 1


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
        *(f"{t} {FIRST}" for t in TASKS),
        *GGUF_STAGES,
    ]
    assert (
        stages["build gguf-kernels"]["status"] == "ok"
        and "planned, not compiled" in stages["build gguf-kernels"]["detail"]
    )
    for name in ("verify gguf-kernels", "publish gguf-kernels", "get_kernel gguf-kernels"):
        assert stages[name]["status"] == "skipped" and "mmvq.cu" in stages[name]["detail"], stages[name]
    pub = stages[f"publish {FIRST}"]["data"]
    assert pub["status"] == "published" and pub["verified"]["ok"]
    loaded = stages[f"get_kernel {FIRST}"]["data"]
    assert loaded["module"].startswith("_ggml_attn_kernels_cuda_")
    assert loaded["ops"], "no op registered under the build's namespace"


def test_the_second_package_is_synced_rendered_and_planned_on_the_miniature(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first package's compile/verify/publish/load are stubbed (the slow end-to-end test runs them): what is
    # checked is that the miniature's gguf stand-ins carry gguf-kernels' closure through sync, render and the
    # build plan, and that what the stand-ins cannot do is skipped, saying why.
    from toolkit.demo import tasks

    def stub(ctx: object) -> tuple[str, dict[str, Any]]:
        return ("stubbed", {})

    monkeypatch.setattr(
        tasks, "PACKAGE_TASKS", (("render", tasks._render),) + tuple((n, stub) for n in tasks.STAGES[3:])
    )
    report = run_demo(REPO_ROOT, workspace=tmp_path / "ws")
    status = {s.name: (s.status, s.detail) for s in report.stages}
    assert [s.name for s in report.stages][-5:] == GGUF_STAGES
    assert report.ok, status
    assert status["sync"][0] == "ok" and "mmvq.cu" in " ".join(report.stages[1].data["files"])
    assert status["render gguf-kernels"][0] == "ok"
    assert (tmp_path / "ws" / "build" / "gguf-kernels" / "src" / "build.toml").is_file()
    build_status, build_detail = status["build gguf-kernels"]
    assert build_status == "ok" and build_detail.startswith("planned, not compiled: ")
    for name in GGUF_STAGES[2:]:
        assert status[name][0] == "skipped" and "closure-only stand-ins" in status[name][1], status[name]
    assert "src/ggml-cuda/mmvq.cu" in status["verify gguf-kernels"][1]


@pytest.mark.parametrize("lands", ["during a task", "during a task, --workspace", "while printing"])
def test_a_ctrl_c_of_the_demo_says_what_its_workspace_holds_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lands: str
) -> None:
    """Issue 33 item 3: a Ctrl-C once the demo's plan is made says, read back from disk, what its workspace
    holds or that the temporary one was removed (it is, on a Ctrl-C), never "previous state kept". The setup
    task is the real one; the tasks after it are stood in for by the Ctrl-C."""
    from typer.testing import CliRunner

    import toolkit.demo as demo_stage
    from toolkit.cli import app
    from toolkit.commands import demo as demo_command
    from toolkit.demo import tasks

    seen: dict[str, Path] = {}

    def setup_then(ctx: tasks.Context) -> list[tasks.Stage]:
        seen["ws"] = ctx.workspace
        stages = tasks.run_tasks(ctx, tasks.SETUP)
        assert stages[0].status == "ok", stages[0].detail
        if lands != "while printing":
            raise KeyboardInterrupt
        return stages

    monkeypatch.setattr(demo_stage, "run_all", setup_then)
    if lands == "while printing":
        monkeypatch.setattr(demo_command, "_show", lambda *_a: (_ for _ in ()).throw(KeyboardInterrupt()))
    args = ["demo", "-C", str(REPO_ROOT)]
    if lands.endswith("--workspace"):
        args += ["--workspace", str(tmp_path / "ws")]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 130 and "previous state kept" not in res.output, res.output
    last = res.output.splitlines()[-1]
    assert last.startswith("interrupted:"), res.output
    ws = seen["ws"]
    assert f"the project {REPO_ROOT} is not written by the demo" in last, res.output
    if lands.endswith("--workspace"):
        assert ws == tmp_path / "ws" and (ws / "pyproject.toml").is_file()
        expected = f"the demo's workspace {ws} is kept, holding the copied configuration (read back from disk)"
    else:  # the temporary workspace: removed on the Ctrl-C, or after the green run whose printing it cut
        assert not ws.exists()
        expected = f"the demo's temporary workspace {ws} is not on disk: it was removed (read back from disk)"
    assert expected in last, res.output
