"""Shared pytest fixtures (the helpers tests import live in tests/helpers/) and the seal that
keeps every test away from the machine it runs on.

The seal (modelled on cibuildwheel's autouse protection fixture):
- caches (XDG_CACHE_HOME and with it the tool's platformdirs cache, pip's, torch extensions', Triton's) live
  in one directory made for the run and removed after it, so tests that compile real CUDA code still share a
  warm cache, but never the user's;
- HOME and the Hugging Face home (HF_HOME, HF_HUB_CACHE) live under each test's own tmp dir;
- HF_TOKEN / HUGGING_FACE_HUB_TOKEN are removed and HF_ENDPOINT points at a closed loopback port, so a real
  Hub call fails at once, in this process and in the ones it starts;
- in this process, opening a socket to anything but loopback fails the test with the address it tried.

The run-wide part is set in pytest_configure, before any test module imports huggingface_hub (which reads
its environment once, at import).
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import pytest

from tests.helpers import REPO_ROOT
from tests.helpers.fixture_repos import FixtureRepo
from tests.helpers.machine import ATTN_BUILD, binding_build_unavailable, cuda_device_available
from tests.helpers.project import first_package_pyproject, set_backends

# Nothing listens on the discard port of loopback: a Hub call is refused immediately instead of hanging.
SEALED_HF_ENDPOINT = "http://127.0.0.1:9"
_T = TypeVar("_T")
REMOVED_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "LOCAL_KERNELS", "GGML_VENDOR_MIRROR")

# Throwaway git repositories made by tests must not depend on the machine's git identity or config.
os.environ.setdefault("GIT_AUTHOR_NAME", "ggml-vendor tests")
os.environ.setdefault("GIT_AUTHOR_EMAIL", "tests@ggml-vendor.invalid")
os.environ.setdefault("GIT_COMMITTER_NAME", "ggml-vendor tests")
os.environ.setdefault("GIT_COMMITTER_EMAIL", "tests@ggml-vendor.invalid")
os.environ.setdefault("GIT_CONFIG_NOSYSTEM", "1")

# The run-wide state pytest_unconfigure restores: "base" (Path), "saved" (the environment before), "socket"
# (socket.socket's own connect and connect_ex).
_sealed: dict[str, Any] = {}


def _run_env(base: Path) -> dict[str, str]:
    cache = base / "cache"
    return {
        "HOME": str(base / "home"),
        "XDG_CACHE_HOME": str(cache),
        "XDG_CONFIG_HOME": str(base / "config"),
        "XDG_DATA_HOME": str(base / "data"),
        "PIP_CACHE_DIR": str(cache / "pip"),
        "TORCH_EXTENSIONS_DIR": str(cache / "torch_extensions"),
        "TRITON_CACHE_DIR": str(cache / "triton"),
        "HF_HOME": str(base / "hf"),
        "HF_HUB_CACHE": str(base / "hf" / "hub"),
        "HF_ENDPOINT": SEALED_HF_ENDPOINT,
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }


def _is_loopback(address: object) -> bool:
    if not isinstance(address, tuple) or not address:
        return True  # AF_UNIX paths and the like stay on this machine
    host = address[0]
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name other than localhost


def _guarded(method: Callable[[Any, Any], _T]) -> Callable[[Any, Any], _T]:
    def connect(self: socket.socket, address: object) -> _T:
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _is_loopback(address):
            raise RuntimeError(f"tests are sealed from the network: a connection to {address!r} was attempted")
        return method(self, address)

    return connect


def pytest_configure(config: pytest.Config) -> None:
    # A suite started in the background by a non-interactive shell (`bash .ci/run &`, nohup) inherits SIGINT
    # ignored, and so would every process it starts: the Ctrl-C tests would see their child shrug off the signal.
    # Ctrl-C is part of what the tool promises, so the suite runs with Python's own handler, as from a terminal.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    base = Path(tempfile.mkdtemp(prefix="ggml-vendor-tests-"))
    env = _run_env(base)
    for key in ("home", "cache", "config", "data", "hf"):
        (base / key).mkdir()
    _sealed["base"] = base
    _sealed["saved"] = {k: os.environ.get(k) for k in (*env, *REMOVED_ENV)}
    _sealed["socket"] = (socket.socket.connect, socket.socket.connect_ex)
    os.environ.update(env)
    for key in REMOVED_ENV:
        os.environ.pop(key, None)
    socket.socket.connect = _guarded(socket.socket.connect)  # type: ignore[method-assign]
    socket.socket.connect_ex = _guarded(socket.socket.connect_ex)  # type: ignore[method-assign]


def pytest_unconfigure(config: pytest.Config) -> None:
    if "base" not in _sealed:
        return
    socket.socket.connect, socket.socket.connect_ex = _sealed["socket"]  # type: ignore[method-assign]
    for key, value in _sealed["saved"].items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    shutil.rmtree(_sealed.pop("base"), ignore_errors=True)


@pytest.fixture(autouse=True)
def sealed_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test gets its own empty HOME and Hugging Face home (the run-wide caches stay shared)."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("HF_HOME", str(home / ".cache" / "huggingface"))
    monkeypatch.setenv("HF_HUB_CACHE", str(home / ".cache" / "huggingface" / "hub"))
    return home


@pytest.fixture
def isolated_upstream_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh upstream cache for one test (sync tests that count fetches or break the cache), and no mirror."""
    monkeypatch.setenv("GGML_VENDOR_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("GGML_VENDOR_MIRROR", raising=False)
    return tmp_path / "cache"


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> FixtureRepo:
    """The miniature ggml upstream (tests/helpers/fixture_repos.py), built once per test module."""
    from tests.helpers.fixture_repos import build_upstream

    return build_upstream(tmp_path_factory.mktemp("upstream") / "ggml", "ggml")


@pytest.fixture(scope="module")
def cuda_torch() -> ModuleType:
    """torch, on a machine with a CUDA device (skips, saying why, elsewhere)."""
    ok, why = cuda_device_available()
    if not ok:
        pytest.skip(why)
    import torch

    return torch


@pytest.fixture(scope="module")
def cuda_kernel(cuda_torch: ModuleType) -> ModuleType:
    """The built CUDA variant under ATTN_BUILD (KERNEL_ROOT/build/ggml-attn-kernels), loaded with kernels.get_local_kernel."""
    try:
        import kernels
    except ImportError as exc:
        pytest.skip(f"the kernels package is not importable: {exc}")
    built = ATTN_BUILD  # build/<package>/<variant>
    if not any(built.glob("torch*-cu*")):
        pytest.skip(f"no CUDA variant under {built}; run `ggml-vendor build` first")
    kernel: ModuleType = kernels.get_local_kernel(built)
    return kernel


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT


def _cli(root: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolkit.cli", *args, "-C", str(root)], capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="session")
def built_binding(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
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
    # The binding under test is the first package's; the embedded miniature has no sources of later packages.
    (root / "pyproject.toml").write_text(first_package_pyproject((root / "pyproject.toml").read_text()))
    (root / "vendor" / "patches").mkdir(parents=True)
    from toolkit.core import config as config_mod

    set_backends(root, ["cuda"])
    config_mod.set_value(root, "cuda-archs", ["8.0"])  # one arch keeps CI's compile short
    for step in (("sync", "--rev", "master", "--upstream", "embedded"), ("render",)):
        res = _cli(root, *step)
        assert res.returncode == 0, f"{step}: {res.stdout}{res.stderr}"
    res = _cli(root, "build", "--json", "-j", "2")
    assert res.returncode == 0, res.stdout + res.stderr
    return root, json.loads(res.stdout)
