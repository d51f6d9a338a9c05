"""The build stage on the stage protocol (issue 18): plan is pure — provisioning, environment creation, the
zig wrapper and the caches are planned data that execute runs — and the Report answers ok, exit_code,
lines() and to_json(). GPU-free: the host's facts are constructed, installs are recorded, not run."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

import pytest

from tests.helpers import copy_build_kernel
from toolkit.build import stage
from toolkit.build.envs import HostFacts, Toolkit
from toolkit.build.inputs import ProjectInputs
from toolkit.build.steps import BuildPlan
from toolkit.build.torchenvs import discover_envs
from toolkit.core.config import load
from toolkit.core.stage import Plan, Report

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "build_kernel"
NVCC = Toolkit("cuda", "13.0", "/cuda-13.0", "/cuda-13.0/bin/nvcc", "13.0.88", ("sm_80",))
NVCC126 = Toolkit("cuda", "12.6", "/cuda-12.6", "/cuda-12.6/bin/nvcc", "12.6.85", ("sm_80",))
# this interpreter's torch (probed for real: the probe's cache is one of the writes plan must not make)
HOST = HostFacts(
    "linux",
    "x86_64",
    (NVCC, NVCC126),
    tuple(e for e in discover_envs(Path("/nonexistent")) if not e.managed),
    cxx="/usr/bin/g++",
    cxx_version="g++ 12",
)
ROW = "torch213-cxx11-cu130-x86_64-linux"


def _snapshot(*dirs: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for d in dirs:
        for p in d.rglob("*") if d.exists() else ():
            st = p.lstat()
            out[str(p)] = (st.st_mtime_ns, st.st_size)
    return out


@pytest.fixture()
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "proj"
    copy_build_kernel(root)
    with open(root / "variants" / "matrix.toml", "a") as fh:
        fh.write('\n[sources.torch]\n"2.13-cu130" = { version = "2.13.0" }\n')
    for var, sub in (
        ("GGML_VENDOR_ENVS", "envs"),
        ("GGML_VENDOR_TOOLCHAINS", "tc"),
        ("GGML_VENDOR_BUILD_CACHE", "cache"),
    ):
        monkeypatch.setenv(var, str(tmp_path / sub))
    return root


def test_plan_with_all_provisioning_and_create_envs_writes_and_installs_nothing(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*a: object, **k: object) -> NoReturn:
        raise AssertionError("plan ran an install")

    monkeypatch.setattr(stage, "provision", refuse)
    monkeypatch.setattr(stage, "create_env", refuse)
    before = _snapshot(tmp_path)
    os.chmod(project, 0o555)  # a write into the project fails loudly, not silently
    try:
        planned = stage.plan(load(project), stage.Request(all_variants=True, create_envs=True, host=HOST))
    finally:
        os.chmod(project, 0o755)
    assert _snapshot(tmp_path) == before  # no cache, memo, probe, wrapper, env or toolkit written
    assert isinstance(planned, Plan)
    assert [i.requirement for i in planned.installs if i.package == "torch"] == ["torch==2.13.0,!=2.13.0+cpu"]
    assert {e.path.name for e in planned.envs} == {"torch213-cu126", "torch214-cu126"}  # [torch-index] rows
    text = "\n".join(planned.lines())
    assert "provisioning, first" in text and "torch==2.13.0" in text and "torch213-cu126:" in text
    doc = planned.to_json()
    assert doc["provisioning"] and doc["create_envs"]


def test_all_implies_provisioning_in_the_stage_and_no_provision_opts_out(project: Path) -> None:
    cfg = load(project)
    assert stage.plan(cfg, stage.Request(all_variants=True, host=HOST)).installs
    assert not stage.plan(cfg, stage.Request(all_variants=True, provision=False, host=HOST)).installs
    assert not stage.plan(cfg, stage.Request(patterns=(ROW,), host=HOST)).installs  # a row asked for by name


def test_execute_runs_the_planned_installs_then_plans_again(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ran = []
    monkeypatch.setattr(stage, "provision", lambda item, say=None: ran.append(item))
    planned = stage.plan(load(project), stage.Request(patterns=(ROW,), provision=True, host=HOST))
    assert [i.what for i in planned.installs] == ["torch 2.13.0 (cu130)"]
    with pytest.raises(stage.NothingToBuildError, match="nothing to build"):
        stage.execute(planned)  # the recorded install made nothing: the row stays unbuildable
    assert ran == list(planned.installs)


def test_nothing_to_build_is_the_stages_refusal_exit_10(project: Path) -> None:
    planned = stage.plan(load(project), stage.Request(patterns=("*-aarch64-*",), toolchain="system", host=HOST))
    with pytest.raises(stage.NothingToBuildError) as exc:
        stage.execute(planned)
    assert exc.value.exit_code == 10


def test_report_follows_the_protocol() -> None:
    from toolkit.build.report import BuildReport
    from toolkit.build.results import VariantResult

    ok = BuildReport([VariantResult("a", "built", out_dir="build/a", id="_x")])
    bad = BuildReport([VariantResult("b", "failed", reason="nvcc a.cu: nvcc exited with status 1")], log_dir="/logs")
    assert isinstance(ok, Report) and ok.ok and ok.exit_code == 0 and ok.to_json()["ok"]
    assert not bad.ok and bad.exit_code == 7 and "1 variant(s) failed: b" in bad.error().one_line()
    assert any("nvcc exited with status 1" in ln for ln in bad.lines())


# --- what plans and reports print (issue 20 item 6) ---------------------------------------------------------


def _symbolic(names: list[str], project: ProjectInputs | None = None) -> BuildPlan:
    from tests.helpers.fixture_repos import tiny_project_inputs
    from toolkit.build.host_status import Status
    from toolkit.build.matrix import parse_name
    from toolkit.build.steps import make_plan

    judged = [(parse_name(n), Status(False, "needs a host with its toolkit")) for n in names]
    return make_plan(project or tiny_project_inputs(), judged, cxx="c++", cxx_id="g++ 12")


def test_an_aarch64_row_shares_no_step_with_the_x86_64_row() -> None:
    plan = _symbolic(["torch214-cxx11-cu130-x86_64-linux", "torch214-cxx11-cu130-aarch64-linux"])
    x86, arm = plan.variants
    assert x86.steps and arm.steps and not set(x86.steps) & set(arm.steps)
    # ... while two torch versions of one system still share the torch-independent object
    two = _symbolic(["torch213-cxx11-cu130-x86_64-linux", "torch214-cxx11-cu130-x86_64-linux"])
    assert set(two.variants[0].steps) & set(two.variants[1].steps)


def test_rocm_plan_lines_are_literal_and_reasons_wrap_whole(project: Path) -> None:
    from dataclasses import replace

    from tests.helpers.fixture_repos import tiny_project_inputs
    from toolkit.build.inputs import KernelSection

    proj = tiny_project_inputs()
    proj = replace(
        proj, backends=("rocm",), kernels=(KernelSection("r", "rocm", (), ("a.cu",), rocm_archs=("gfx942",)),)
    )
    plan = _symbolic(["torch214-cxx11-rocm72-x86_64-linux"], proj)
    planned = stage.BuildPlanned(load(project), stage.Request(), None, HOST, plan, ("rocm",), Path("/c"))
    lines = planned.lines()
    assert any(ln.strip().endswith("hipcc a.cu [gfx942]") for ln in lines), lines
    assert not any("\\[" in ln for ln in lines)  # no markup escapes printed as text


def test_report_prints_every_reason_whole_below_a_table_that_fits_80_columns() -> None:
    from toolkit.build.report import BuildReport
    from toolkit.build.results import VariantResult

    reason = "needs torch 2.13 for CUDA 12.6 from https://download.pytorch.org/whl/cu126 " + "and more words " * 12
    rep = BuildReport(
        [
            VariantResult("torch214-cxx11-cu130-x86_64-linux", "built", out_dir="build/x", id="_k", compiles=4),
            VariantResult(
                "torch213-cxx11-cu126-aarch64-linux", "skipped", reason, engine="github-actions ubuntu-24.04-arm"
            ),
        ]
    )
    lines = rep.lines()
    assert max(len(ln) for ln in lines) <= 80, lines
    text = " ".join(ln.strip() for ln in lines)
    assert " ".join(reason.split()) in text and "built by github-actions ubuntu-24.04-arm" in text


def test_a_shared_step_is_counted_for_its_first_variant_only() -> None:
    from toolkit.build.local import LocalExecutor
    from toolkit.build.results import StepResult
    from toolkit.build.stepcontext import Step

    plan = _symbolic(["torch213-cxx11-cu130-x86_64-linux", "torch214-cxx11-cu130-x86_64-linux"])
    ex = LocalExecutor.__new__(LocalExecutor)
    ex._results = {sid: StepResult(plan.steps[sid]) for sid in plan.steps}  # every step compiled, no hit
    ex._owner = {}
    for v in plan.variants:
        for sid in v.steps:
            ex._owner.setdefault(sid, v.name)
    counts = [ex._counts(v)[0] for v in plan.variants]
    assert sum(counts) == sum(1 for s in plan.steps.values() if isinstance(s, Step) and s.compiles)
    assert counts[1] < len(plan.variants[1].steps)  # the shared object is not counted again


def test_the_build_stage_imports_nothing_from_ci() -> None:
    """Issue 18: build imported ci (inside a function, for the engine labels) and ci imports build; the labels
    now live in build/engines.py. Every import statement of build/, deferred ones included, is read."""
    import ast

    import toolkit.build as b

    found = []
    for path in sorted(Path(b.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            found += [f"{path.name}: {n}" for n in names if n.startswith("toolkit.ci")]
    assert found == []


def test_no_function_in_the_build_stage_is_over_60_lines() -> None:
    import ast

    import toolkit.build as b

    long = []
    for path in sorted(Path(b.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (node.end_lineno or 0) - node.lineno >= 60:
                long.append(f"{path.name}:{node.lineno} {node.name} ({(node.end_lineno or 0) - node.lineno + 1} lines)")
    assert long == []
