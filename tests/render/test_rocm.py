"""The rendered ROCm sections of build.toml: golden file, structure, and what kernels' parser accepts.

ROCm reuses the CUDA translation units (csrc/cuda) and builds them as HIP; nothing is compiled here (no
hipcc). Regenerate the golden file with GGML_VENDOR_UPDATE_GOLDEN=1 after an intended template change."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
import tomlkit

from tests.helpers.fixture_repos import RENDER_PYPROJECT
from toolkit.build import rocm
from toolkit.core import config as config_mod
from toolkit.core import ggml_facts
from toolkit.render import stage as render

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden" / "rocm" / "build.toml.rocm-sections"
UPDATE = os.environ.get("GGML_VENDOR_UPDATE_GOLDEN") == "1"

PYPROJECT = RENDER_PYPROJECT.replace("cuda-archs = [{archs}]\n", "{extra}\n")


def build_toml(tmp_path: Path, backends: str = '"cuda", "rocm"', extra: str = "") -> str:
    proj = tmp_path / "proj"
    proj.mkdir(exist_ok=True)
    (proj / "pyproject.toml").write_text(PYPROJECT.format(backends=backends, extra=extra))
    if not (proj / "templates").exists():
        shutil.copytree(REPO / "templates", proj / "templates")
    plan = render.plan(config_mod.load(proj), None, read_vendor_lock=False)  # kernels' parser runs here
    return plan.by_path()["build.toml"].content


def rocm_sections(text: str) -> str:
    """The text of every [kernel.*] table with backend = "rocm", with the comment line above it."""
    blocks = re.split(r"\n(?=# [^\n]*\n\[kernel\.)", text)
    return "\n".join(b.strip("\n") + "\n" for b in blocks if 'backend = "rocm"' in b)


def test_rocm_sections_match_golden(tmp_path: Path) -> None:
    text = rocm_sections(build_toml(tmp_path))
    if UPDATE:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(text)
        pytest.skip(f"golden file regenerated: {GOLDEN}; review the diff")
    assert GOLDEN.is_file(), "no golden file: run with GGML_VENDOR_UPDATE_GOLDEN=1 and review it"
    assert text == GOLDEN.read_text(), (
        "rendered ROCm sections differ from tests/golden/rocm (UPDATE_GOLDEN=1 to accept)"
    )


def test_rocm_builds_every_cuda_unit_as_hip(tmp_path: Path) -> None:
    doc = tomlkit.parse(build_toml(tmp_path)).unwrap()
    kernels = doc["kernel"]
    cuda = {k: v for k, v in kernels.items() if v["backend"] == "cuda"}
    hip = {k: v for k, v in kernels.items() if v["backend"] == "rocm"}
    assert sorted(hip) == sorted(k.replace("_cuda", "_rocm") for k in cuda)
    for name, sec in hip.items():
        twin = cuda[name.replace("_rocm", "_cuda")]
        assert sec["src"] == twin["src"] and sec["include"] == twin["include"]
        assert sec["depends"] == []  # torch-independent objects, shared by every torch variant
        assert tuple(sec["hip-flags"]) == rocm.hip_flags()
        assert "-DGGML_USE_HIP" in sec["hip-flags"]
        assert not set(sec["hip-flags"]) & set(ggml_facts.HIP_FORBIDDEN_FLAGS)
        assert not any(f.startswith("-use_fast_math") or f.startswith("-Xcompiler") for f in sec["hip-flags"])
        assert tuple(sec["rocm-archs"]) == ggml_facts.ROCM_ARCHS
        assert rocm.validate_archs(sec["rocm-archs"]) == ggml_facts.ROCM_ARCHS


def test_rocm_archs_from_config(tmp_path: Path) -> None:
    doc = tomlkit.parse(build_toml(tmp_path, extra='rocm-archs = ["gfx942", "gfx1100"]\n')).unwrap()
    archs = {tuple(v["rocm-archs"]) for v in doc["kernel"].values() if v["backend"] == "rocm"}
    assert archs == {("gfx942", "gfx1100")}


def test_rocm_alone_still_renders_the_cuda_units(tmp_path: Path) -> None:
    """backends = ["rocm"]: the HIP build needs csrc/cuda even when CUDA variants are not built."""
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "pyproject.toml").write_text(PYPROJECT.format(backends='"rocm"', extra=""))
    shutil.copytree(REPO / "templates", proj / "templates")
    plan = render.plan(config_mod.load(proj), None, read_vendor_lock=False)
    paths = {f.path for f in plan.files}
    assert {"csrc/cuda/gdn_kernels.cu", "csrc/cuda/fa_vec_kernels.cu", "csrc/cuda/ggml_shim.cu"} <= paths
    doc = tomlkit.parse(plan.by_path()["build.toml"].content).unwrap()
    assert {v["backend"] for v in doc["kernel"].values()} == {"rocm"}


def test_no_rocm_sections_without_the_backend(tmp_path: Path) -> None:
    assert 'backend = "rocm"' not in build_toml(tmp_path, backends='"cuda"')
