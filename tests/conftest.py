"""Shared pytest fixtures and the visible-skip helpers for GPU / toolchain / real-upstream tests."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

# Throwaway git repositories made by tests must not depend on the machine's git identity or config.
os.environ.setdefault("GIT_AUTHOR_NAME", "ggml-vendor tests")
os.environ.setdefault("GIT_AUTHOR_EMAIL", "tests@ggml-vendor.invalid")
os.environ.setdefault("GIT_COMMITTER_NAME", "ggml-vendor tests")
os.environ.setdefault("GIT_COMMITTER_EMAIL", "tests@ggml-vendor.invalid")
os.environ.setdefault("GIT_CONFIG_NOSYSTEM", "1")


def cuda_device_available() -> tuple[bool, str]:
    try:
        import torch
    except ImportError:
        return False, "torch is not installed"
    if not torch.cuda.is_available():
        return False, "no CUDA device on this machine"
    return True, ""


def nvcc_available() -> tuple[bool, str]:
    return (shutil.which("nvcc") is not None, "nvcc is not on PATH")


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT


def binding_build_unavailable() -> str | None:
    """Why the miniature-upstream CUDA build (built_binding) cannot run here, or None."""
    ok, why = nvcc_available()
    if not ok:
        return why
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.version.cuda:
        return f"torch {torch.__version__} is not a CUDA build"
    return None


def _cli(root: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "toolkit.cli", *args, "-C", str(root)], capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="session")
def built_binding(tmp_path_factory) -> tuple[Path, dict]:
    """The rendered package built for real (one arch) against the miniature upstream: sync (embedded) -> render
    -> build. Shared by the binding and layer tests (one compile per session)."""
    why = binding_build_unavailable()
    if why:
        pytest.skip(why)
    root = tmp_path_factory.mktemp("binding") / "proj"
    root.mkdir()
    for name in ("pyproject.toml", "templates", "variants"):
        src = REPO_ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, root / name)
    (root / "vendor" / "patches").mkdir(parents=True)
    from toolkit.core import config as config_mod

    config_mod.set_value(root, "backends", ["cuda"])
    config_mod.set_value(root, "cuda-archs", ["8.0"])  # one arch keeps CI's compile short
    for step in (("sync", "--rev", "master", "--upstream", "embedded"), ("render",)):
        res = _cli(root, *step)
        assert res.returncode == 0, f"{step}: {res.stdout}{res.stderr}"
    res = _cli(root, "build", "--json", "-j", "2")
    assert res.returncode == 0, res.stdout + res.stderr
    return root, json.loads(res.stdout)
