"""Shared pytest fixtures and the visible-skip helpers for GPU / toolchain / real-upstream tests."""

from __future__ import annotations

import os
import shutil
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
