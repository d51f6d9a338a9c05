"""Provisioning toolchains and torch builds on demand (toolkit/build/provision.py): what the matrix's
[sources] make provisionable, pip's configured constraints honoured, atomic installs (a failed or wrong
install leaves nothing), and a bad version as one line naming package, version and index — without the
network (pip runs with --no-index semantics through its environment)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.helpers import built_variants, copy_build_kernel
from toolkit.build import provision as pv
from toolkit.build.envs import HostFacts, Toolkit
from toolkit.build.host_status import Status, status
from toolkit.build.matrix import Source, parse_name
from toolkit.build.torchenvs import TorchEnv
from toolkit.core.errors import BuildError

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "build_kernel"
NVCC130 = Toolkit("cuda", "13.0", "/cuda-13.0", "/cuda-13.0/bin/nvcc", "13.0.88", ("sm_80", "sm_90"))
TORCH214 = TorchEnv("/py", "2.14.1+cu130", "/site/torch", cuda="13.0")
HOST = HostFacts(os="linux", cpu="x86_64", toolkits=(NVCC130,), envs=(TORCH214,), cxx="/usr/bin/g++")


def _st(
    name: str,
    host: HostFacts = HOST,
    torch_src: Source | None = None,
    toolkit_src: Source | None = None,
    blocked: Callable[[Source], str] | None = None,
) -> Status:
    return status(
        parse_name(name),
        host,
        enabled_backends=("cuda",),
        index="PyPI",
        torch_source=torch_src,
        toolkit_source=toolkit_src,
        blocked=blocked,
    )


def test_a_missing_torch_with_a_source_is_provisionable_not_buildable() -> None:
    st = _st("torch213-cxx11-cu130-x86_64-linux", torch_src=Source("torch", "2.13.0"))
    assert not st.buildable and st.provision == (("torch", Source("torch", "2.13.0")),)
    assert "torch 2.13.0 (cu130) from PyPI" in st.reason and st.label == "provisionable (local)"


def test_a_missing_toolkit_and_torch_are_both_provisioned() -> None:
    host = HostFacts(os="linux", cpu="x86_64", toolkits=(), envs=(TORCH214,))
    tk = Source("cuda-toolkit[nvcc,cccl,cudart]", "13.2.2")
    st = _st("torch215-cxx11-cu132-x86_64-linux", host, Source("torch", "2.15.0"), tk)
    assert [k for k, _ in st.provision] == ["toolkit", "torch"]


def test_a_constraint_that_excludes_the_version_is_the_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cons = tmp_path / "c.txt"
    cons.write_text("torch<=2.14.1  # capped here\n")
    monkeypatch.setenv("PIP_CONSTRAINT", str(cons))
    why = pv.constraint_excludes("torch", "2.15.0")
    assert "torch<=2.14.1" in why and "2.15.0" in why
    assert pv.constraint_excludes("torch", "2.14.1") == ""
    st = _st(
        "torch215-cxx11-cu132-x86_64-linux",
        torch_src=Source("torch", "2.15.0"),
        blocked=lambda s: pv.constraint_excludes(s.name, s.version),
    )
    assert not st.buildable and not st.provision and "excludes torch 2.15.0" in st.reason


def test_failed_install_leaves_nothing_and_names_package_version_index(tmp_path: Path) -> None:
    item = pv.toolkit_install("cuda", "cuda-toolkit[nvcc,cccl,cudart]", "13.0.99", "pypi", tmp_path)

    def runner(cmd: list[str]) -> tuple[int, str]:
        assert "cuda-toolkit[nvcc,cccl,cudart]==13.0.99" in cmd and "--index-url" not in cmd
        target = Path(cmd[cmd.index("--target") + 1])
        (target / "nvidia").mkdir(parents=True)  # a half-made tree, as an interrupted pip leaves it
        return 1, "ERROR: No matching distribution found for cuda-toolkit==13.0.99\n"

    with pytest.raises(pv.ProvisionError) as exc:
        pv.provision(item, runner=runner)
    line = exc.value.one_line()
    assert "cuda-toolkit 13.0.99" in line and "pip's default index (PyPI)" in line and "No matching" in line
    assert "\n" not in line
    assert list(tmp_path.iterdir()) == []  # nothing half-installed


def test_wrong_torch_flavour_is_refused_and_removed(tmp_path: Path) -> None:
    item = pv.torch_install("2.13", "cu130", "2.13.0", "pypi", tmp_path)
    assert item.requirement == "torch==2.13.0,!=2.13.0+cpu" and item.no_deps

    def runner(cmd: list[str]) -> tuple[int, str]:
        if "venv" in cmd:
            Path(cmd[-1], "bin").mkdir(parents=True)
            return 0, ""
        stage = Path(cmd[cmd.index("--python") + 1]).parents[1]
        tdir = stage / "lib" / "python3.11" / "site-packages" / "torch"
        tdir.mkdir(parents=True)
        (tdir / "version.py").write_text("__version__ = '2.13.0+cpu'\ncuda = None\nhip = None\n")
        return 0, "Successfully installed torch-2.13.0+cpu"

    with pytest.raises(pv.ProvisionError, match=r"torch 2\.13\.0\+cpu \(built for cpu\), not torch 2\.13\.0 for cu130"):
        pv.provision(item, runner=runner)
    assert list(tmp_path.iterdir()) == []


def test_a_completed_install_is_reused_and_a_killed_one_is_cleaned(tmp_path: Path) -> None:
    item = pv.toolkit_install("cuda", "cuda-toolkit[nvcc,cccl,cudart]", "13.0.3", "pypi", tmp_path)
    calls: list[list[str]] = []

    def runner(cmd: list[str]) -> tuple[int, str]:
        calls.append(cmd)
        root = Path(cmd[cmd.index("--target") + 1]) / "nvidia" / "cu13"
        (root / "bin").mkdir(parents=True)
        (root / "include").mkdir()
        (root / "bin" / "nvcc").write_text("")
        (root / "include" / "cuda_runtime.h").write_text("")
        return 0, ""

    dead = tmp_path / "cuda-13.0.3.partial-999999999"  # a pid that cannot be alive
    dead.mkdir()
    assert pv.provision(item, runner=runner) == item.path and item.ready
    assert not dead.exists()
    pv.provision(item, runner=runner)
    assert len(calls) == 1  # reused
    assert pv.provisioned_cuda_roots(tmp_path) == [item.path / "nvidia" / "cu13"]


def test_build_all_with_an_unprovisionable_version_is_one_line_and_installs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Real pip, no network: --no-index and no find-links through pip's own environment variables.
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    monkeypatch.setenv("GGML_VENDOR_ENVS", str(tmp_path / "envs"))
    monkeypatch.setenv("GGML_VENDOR_TOOLCHAINS", str(tmp_path / "toolchains"))
    monkeypatch.setenv("GGML_VENDOR_BUILD_CACHE", str(tmp_path / "cache"))
    proj = tmp_path / "proj"
    copy_build_kernel(proj)
    with open(proj / "variants" / "matrix.toml", "a") as fh:
        fh.write('\n[sources.torch]\n"2.13-cu130" = { version = "2.13.99" }\n')
        fh.write('\n[sources.toolkit]\n"cuda-13.0" = { version = "13.0.99" }\n')
    from toolkit.cli import app

    res = CliRunner().invoke(app, ["build", "-C", str(proj), "--all", "--variant", "torch213-cxx11-cu130-x86_64-linux"])
    assert res.exit_code == 7, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    err = [ln for ln in lines if "cannot install" in ln]
    assert len(err) == 1, res.output
    assert ("torch 2.13.99" in err[0] or "cuda-toolkit 13.0.99" in err[0]) and "PyPI" in err[0]
    for d in ("envs", "toolchains"):
        left = [p.name for p in (tmp_path / d).iterdir()] if (tmp_path / d).exists() else []
        assert not [n for n in left if n.startswith(("torch213", "cuda-13.0"))], left
    assert built_variants(proj) == []


def test_dry_run_lists_provisionable_rows_without_installing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GGML_VENDOR_ENVS", str(tmp_path / "envs"))
    monkeypatch.setenv("GGML_VENDOR_BUILD_CACHE", str(tmp_path / "cache"))
    proj = tmp_path / "proj"
    copy_build_kernel(proj)
    with open(proj / "variants" / "matrix.toml", "a") as fh:
        fh.write('\n[sources.torch]\n"2.13-cu130" = { version = "2.13.0" }\n')
    from toolkit.build.envs import detect_cuda_toolkits

    if not detect_cuda_toolkits():
        pytest.skip("no CUDA toolkit here: the row would first need one")
    from toolkit.cli import app

    res = CliRunner().invoke(app, ["build", "-C", str(proj), "--all", "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    rows = {v["name"]: v for v in json.loads(res.stdout)["variants"]}
    row = rows["torch213-cxx11-cu130-x86_64-linux"]
    if row["status"].startswith("buildable"):
        pytest.skip("a torch 2.13 cu130 environment already exists in this interpreter")
    assert row["status"] == "provisionable (local)" and "torch 2.13.0 (cu130) from PyPI" in row["reason"]
    assert not (tmp_path / "envs").exists()


def _fake_env_commands(path: Path, version: str, cuda: str | None) -> tuple[tuple[str, ...], ...]:
    """What `python -m venv` + `pip install torch==2.13.*` leave, when pip found `version` somewhere."""
    tdir = path / "lib" / "python3.11" / "site-packages" / "torch"
    content = f"__version__ = {version!r}\ncuda = {cuda!r}\nhip = None\n"
    make = (
        f"import os; os.makedirs(r'{path}/bin'); open(r'{path}/bin/python', 'w').close(); "
        f"os.makedirs(r'{tdir}'); open(r'{tdir}/version.py', 'w').write({content!r})"
    )
    return ((sys.executable, "-c", make),)


def test_create_envs_refuses_and_removes_a_cpu_build_found_through_pip_config(tmp_path: Path) -> None:
    """Issue 20 item 3: the PyTorch index unreachable, pip's find-links supplied 2.13.0+cpu."""
    from toolkit.build.torchenvs import EnvPlan, create_env, plan_env

    want = plan_env("2.13", "cu126", "https://download.pytorch.org/whl/cu126", tmp_path)
    bad = EnvPlan(want.path, _fake_env_commands(want.path, "2.13.0+cpu", None), "2.13", "cu126")
    with pytest.raises(BuildError) as exc:
        create_env(bad)
    line = exc.value.one_line()
    assert "refused and removed" in line and "2.13.0+cpu" in line and "cu126" in line, line
    assert "--create-envs" not in line  # the flag just passed is not the advice
    assert list(tmp_path.iterdir()) == []  # nothing kept


def test_create_envs_checks_the_local_tag_and_replaces_a_wrong_existing_env(tmp_path: Path) -> None:
    from toolkit.build.torchenvs import EnvPlan, create_env
    from toolkit.build.torchtree import torch_build_problem

    path = tmp_path / "torch213-cu126"
    # a right CUDA version under another local tag is refused too
    wrong = EnvPlan(path, _fake_env_commands(path, "2.13.0+cu128", "12.6"), "2.13", "cu126")
    with pytest.raises(BuildError, match="2.13.0\\+cu128"):
        create_env(wrong)
    # an environment an older run left holding +cpu is made again (and checked)
    create_env(EnvPlan(path, _fake_env_commands(path, "2.13.0+cpu", None)))  # unchecked, as before
    assert torch_build_problem(path, "2.13", "cu126")
    create_env(EnvPlan(path, _fake_env_commands(path, "2.13.1+cu126", "12.6"), "2.13", "cu126"))
    assert torch_build_problem(path, "2.13", "cu126") == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["torch213-cu126"]
