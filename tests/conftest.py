"""Shared pytest fixtures, the visible-skip helpers for GPU / toolchain / real-upstream tests, and the seal that
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
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

# Nothing listens on the discard port of loopback: a Hub call is refused immediately instead of hanging.
SEALED_HF_ENDPOINT = "http://127.0.0.1:9"
REMOVED_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "LOCAL_KERNELS", "GGML_VENDOR_MIRROR")

# Throwaway git repositories made by tests must not depend on the machine's git identity or config.
os.environ.setdefault("GIT_AUTHOR_NAME", "ggml-vendor tests")
os.environ.setdefault("GIT_AUTHOR_EMAIL", "tests@ggml-vendor.invalid")
os.environ.setdefault("GIT_COMMITTER_NAME", "ggml-vendor tests")
os.environ.setdefault("GIT_COMMITTER_EMAIL", "tests@ggml-vendor.invalid")
os.environ.setdefault("GIT_CONFIG_NOSYSTEM", "1")

_sealed: dict[str, object] = {}


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


def _guarded(method):  # type: ignore[no-untyped-def]
    def connect(self, address):  # type: ignore[no-untyped-def]
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _is_loopback(address):
            raise RuntimeError(f"tests are sealed from the network: a connection to {address!r} was attempted")
        return method(self, address)

    return connect


def pytest_configure(config: pytest.Config) -> None:
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
    socket.socket.connect, socket.socket.connect_ex = _sealed["socket"]  # type: ignore[method-assign, misc]
    for key, value in _sealed["saved"].items():  # type: ignore[union-attr]
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    shutil.rmtree(_sealed.pop("base"), ignore_errors=True)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def sealed_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test gets its own empty HOME and Hugging Face home (the run-wide caches stay shared)."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("HF_HOME", str(home / ".cache" / "huggingface"))
    monkeypatch.setenv("HF_HUB_CACHE", str(home / ".cache" / "huggingface" / "hub"))
    return home


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


def torch_available() -> tuple[bool, str]:
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return False, "needs torch, which is not installed (pip install -e '.[cuda]')"
    return True, ""


# For tests that import torch (here or in a process they start): skipped, saying why, where it is absent.
requires_torch = pytest.mark.skipif(not torch_available()[0], reason=torch_available()[1])


REAL_UPSTREAM_ENV = "GGML_VENDOR_REAL_UPSTREAM"


def real_upstream_git() -> tuple[Path, str]:
    """The git repository (a clone or a bare mirror, ggml or llama.cpp) named by $GGML_VENDOR_REAL_UPSTREAM and
    the prefix of its standalone-ggml root ("" or "ggml/" in llama.cpp); skips the test, saying why, when
    there is none."""
    import subprocess

    env = os.environ.get(REAL_UPSTREAM_ENV)
    if not env:
        pytest.skip(f"{REAL_UPSTREAM_ENV} is not set (point it at a ggml or llama.cpp clone to run this)")
    repo = Path(env)
    ok = subprocess.run(["git", "-C", str(repo), "rev-parse", "--git-dir"], capture_output=True).returncode == 0
    if not ok:
        pytest.skip(f"{REAL_UPSTREAM_ENV}={env} is not a git repository")
    llama = subprocess.run(["git", "-C", str(repo), "cat-file", "-e", "HEAD:ggml/src"], capture_output=True)
    return repo, "ggml/" if llama.returncode == 0 else ""


def real_upstream_text(path: str) -> str:
    """`path` (standalone-ggml layout) at HEAD of the real upstream; skips when there is none."""
    import subprocess

    repo, prefix = real_upstream_git()
    return subprocess.run(
        ["git", "-C", str(repo), "show", f"HEAD:{prefix}{path}"], capture_output=True, text=True, check=True
    ).stdout


def real_upstream_export(dest: Path, *paths: str) -> Path:
    """`paths` (directories, standalone-ggml layout) at HEAD of the real upstream, written under `dest`."""
    import subprocess

    repo, prefix = real_upstream_git()
    tree = f"HEAD:{prefix.rstrip('/')}" if prefix else "HEAD"
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(repo), "archive", tree, *paths], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


@pytest.fixture
def isolated_upstream_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh upstream cache for one test (sync tests that count fetches or break the cache), and no mirror."""
    monkeypatch.setenv("GGML_VENDOR_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("GGML_VENDOR_MIRROR", raising=False)
    return tmp_path / "cache"


# Where the GPU tests load the built op from: build/ of this repository, or $GGML_VENDOR_KERNEL_ROOT.
KERNEL_ROOT = Path(os.environ.get("GGML_VENDOR_KERNEL_ROOT", REPO_ROOT))


@pytest.fixture(scope="module")
def cuda_torch():  # type: ignore[no-untyped-def]
    """torch, on a machine with a CUDA device (skips, saying why, elsewhere)."""
    ok, why = cuda_device_available()
    if not ok:
        pytest.skip(why)
    import torch

    return torch


@pytest.fixture(scope="module")
def cuda_kernel(cuda_torch):  # type: ignore[no-untyped-def]
    """The built CUDA variant under KERNEL_ROOT/build, loaded with kernels.get_local_kernel."""
    try:
        import kernels
    except ImportError as exc:
        pytest.skip(f"the kernels package is not importable: {exc}")
    if not any((KERNEL_ROOT / "build").glob("torch*-cu*")):
        pytest.skip(f"no CUDA variant under {KERNEL_ROOT / 'build'}; run `ggml-vendor build` first")
    return kernels.get_local_kernel(KERNEL_ROOT)


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


def local_cuda_build_unavailable() -> str | None:
    """Why `ggml-vendor build` cannot build a CUDA variant with this interpreter's torch (nvcc and a CUDA build of
    torch, found as the build stage finds them), or None."""
    from toolkit.build.envs import detect_cuda_toolkits, discover_envs

    if not detect_cuda_toolkits():
        return "nvcc (a CUDA toolkit) is not installed"
    env = next((e for e in discover_envs() if not e.managed), None)
    if env is None:
        return "torch is not installed"
    if not env.cuda:
        return f"torch {env.version} is not a CUDA build"
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


def set_backends(root: Path, backends: list[str]) -> None:
    """Set the project's shared backends and narrow every declared package's own list to them (a package may only
    narrow the shared list: gguf-kernels declares cuda + metal)."""
    import tomlkit

    path = root / "pyproject.toml"
    doc = tomlkit.parse(path.read_text())
    table = doc["tool"]["ggml-vendor"]  # type: ignore[index]
    table["backends"] = backends  # type: ignore[index]
    for package in table.get("packages", {}).values():  # type: ignore[union-attr]
        if "backends" in package:
            package["backends"] = [b for b in package["backends"] if b in backends]
    path.write_text(tomlkit.dumps(doc))


def first_package_pyproject(text: str) -> str:
    """pyproject.toml text with the family's later packages ([tool.ggml-vendor.packages.*]) left out: for tests
    that build a one-package project (or add their own later packages) from this repository's configuration."""
    import tomlkit

    doc = tomlkit.parse(text)
    doc["tool"]["ggml-vendor"].pop("packages", None)  # type: ignore[union-attr]
    return tomlkit.dumps(doc)
