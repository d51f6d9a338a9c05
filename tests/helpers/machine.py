"""What this machine has for the tests that need more than Python: a CUDA device, nvcc, torch, a real
upstream clone, a built variant. Each check returns why not, so the tests that use it skip saying so."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.helpers import REPO_ROOT
from toolkit.build.metal import MetalHost


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


# Where the GPU tests load the built op from: build/ of this repository, or $GGML_VENDOR_KERNEL_ROOT.
KERNEL_ROOT = Path(os.environ.get("GGML_VENDOR_KERNEL_ROOT", REPO_ROOT))
# The first package's variants under it: build/<package>/<variant>/ (Config.build_dir).
ATTN_BUILD = KERNEL_ROOT / "build" / "ggml-attn-kernels"


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
    from toolkit.build.envs import detect_cuda_toolkits
    from toolkit.build.torchenvs import discover_envs

    if not detect_cuda_toolkits():
        return "nvcc (a CUDA toolkit) is not installed"
    env = next((e for e in discover_envs() if not e.managed), None)
    if env is None:
        return "torch is not installed"
    if not env.cuda:
        return f"torch {env.version} is not a CUDA build"
    return None


def metal_blockers(host: MetalHost) -> tuple[str, ...]:
    """Why `host` (toolkit.build.metal.probe_host) cannot build Metal: empty on macOS on Apple silicon with
    Xcode 26 and the Metal Toolchain."""
    if host.system != "Darwin":
        return (
            f"needs macOS on Apple silicon with Xcode 26 and the Metal Toolchain (xcrun metal); this host "
            f"is {host.system} {host.machine}",
        )
    out = []
    if host.machine not in ("arm64", "aarch64"):
        out.append(f"needs Apple silicon (arm64); this Mac is {host.machine}")
    if host.xcrun is None:
        out.append("xcrun is not on PATH: install Xcode 26 and select it with xcode-select")
    elif host.metal is None or host.metallib is None:
        out.append("xcrun finds no `metal`/`metallib`: run `xcodebuild -downloadComponent MetalToolchain`")
    return tuple(out)
