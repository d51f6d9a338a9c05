"""What this host can build with: compiler toolkits (nvcc, hipcc, Metal), nix, and one torch environment per
torch version (the current interpreter's own torch, plus isolated venvs created once and reused; found, probed
and created by toolkit/build/torchenvs.py).

Detection avoids importing torch (seconds) on the hot path: torch's version comes from torch/version.py read
as text, and the facts that need a real import (include dirs, C++ ABI) are probed once per environment in a
subprocess and cached, keyed by the torch install's version file, so a no-op `build --all` stays fast.
"""

from __future__ import annotations

import glob
import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from toolkit.build.provision import default_toolchains_dir, provisioned_cuda_roots
from toolkit.build.torchenvs import TorchEnv, discover_envs


@dataclass(frozen=True)
class Toolkit:
    """A GPU compiler toolkit: CUDA (nvcc) or ROCm (hipcc)."""

    backend: str  # cuda | rocm
    version: str  # "13.0"
    root: str  # toolkit root (include/, lib64/ under it)
    compiler: str  # path of nvcc / hipcc
    full_version: str = ""  # e.g. "13.0.88" (goes into cache keys and provenance)
    archs: tuple[str, ...] = ()  # what the compiler can target: sm_75 ... / gfx...
    # ggml's vendors/cuda.h includes cublas_v2.h (headers only; nothing is linked). A toolkit installed
    # without cuBLAS gets them from the nvidia-cublas wheel torch depends on: this is that wheel's include
    # dir, and the build copies only cublas*.h out of it (its other headers must not shadow the toolkit's).
    cublas_headers: str = ""
    # A cross build links the target architecture's libcudart: the lib dir of a provisioned cudart tree.
    cudart_dir: str = ""
    # The CPUs whose programs this toolkit's nvcc can compile: () = any. A system toolkit keeps its headers
    # per target (targets/x86_64-linux/include, read through nvcc.profile's $(_TARGET_DIR_)), so with an
    # aarch64 host compiler it looks for targets/sbsa-linux/ and finds no cuda_runtime.h; PyPI's toolkit is
    # flat (include/ at the root), which serves every CPU.
    cpus: tuple[str, ...] = ()

    def targets(self, cpu: str) -> bool:
        return not self.cpus or cpu in self.cpus

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])

    @property
    def minor(self) -> int:
        return int(self.version.split(".")[1])


@dataclass(frozen=True)
class HostFacts:
    os: str
    cpu: str
    toolkits: tuple[Toolkit, ...] = ()
    envs: tuple[TorchEnv, ...] = ()
    metal: bool = False
    nix: str | None = None
    cxx: str | None = None  # host C++ compiler for bindings and links
    cxx_version: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)
    # CPUs the hermetic zig toolchain can cross-build Linux variants for (zig + that CPU's libstdc++ present)
    cross_cpus: tuple[str, ...] = ()
    cudart: dict[str, str] = field(default_factory=dict)  # "<cpu>-<cuda MAJOR.MINOR>" -> provisioned lib dir

    @property
    def system(self) -> str:
        return f"{self.cpu}-{self.os}"


def host_platform() -> tuple[str, str]:
    cpu = {"arm64": "aarch64", "AMD64": "x86_64", "amd64": "x86_64"}.get(platform.machine(), platform.machine())
    return platform.system().lower(), cpu


# --- toolkits ------------------------------------------------------------------------------------------

_NVCC_RELEASE = re.compile(r"release (\d+)\.(\d+), V([\d.]+)")


def _run(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def _cuda_roots(toolchains_dir: Path | None = None) -> list[Path]:
    roots: list[Path] = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            roots.append(Path(os.environ[var]))
    # Then the toolkits provisioned from the matrix's pins (PyPI cuda-toolkit wheels): preferred over whatever
    # the system has, so a build uses the same toolkit on every host that provisioned it.
    roots += provisioned_cuda_roots(toolchains_dir)
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(Path(os.path.realpath(nvcc)).parent.parent)
    roots += [Path(p) for p in sorted(glob.glob("/usr/local/cuda-*"))] + [Path("/usr/local/cuda"), Path("/opt/cuda")]
    unique: list[Path] = []
    for r in roots:
        r = Path(os.path.realpath(r))
        if (r / "bin" / "nvcc").exists() and (r / "include" / "cuda_runtime.h").exists() and r not in unique:
            unique.append(r)
    return unique


def _cublas_wheel_headers(major: int) -> str:
    for base in sys.path:
        for rel in (f"nvidia/cu{major}/include", "nvidia/cublas/include"):
            if (Path(base) / rel / "cublas_v2.h").is_file():
                return str(Path(base) / rel)
    return ""


_TARGET_CPUS = {"x86_64-linux": "x86_64", "sbsa-linux": "aarch64"}  # nvcc's targets/<dir> per CPU


def toolkit_cpus(root: Path) -> tuple[str, ...]:
    """The CPUs a CUDA toolkit root can compile for (see Toolkit.cpus): () when its headers are not laid out
    per target (nvcc.profile without $(_TARGET_DIR_))."""
    try:
        profile = (root / "bin" / "nvcc.profile").read_text()
    except OSError:
        return ()
    if "$(_TARGET_DIR_)" not in profile:
        return ()
    return tuple(
        cpu for d, cpu in _TARGET_CPUS.items() if (root / "targets" / d / "include" / "cuda_runtime.h").is_file()
    )


def detect_cuda_toolkits(toolchains_dir: Path | None = None) -> tuple[Toolkit, ...]:
    found: dict[tuple[str, tuple[str, ...]], Toolkit] = {}
    for root in _cuda_roots(toolchains_dir):
        nvcc = str(root / "bin" / "nvcc")
        m = _NVCC_RELEASE.search(_run([nvcc, "--version"]))
        if not m:
            continue
        version = f"{m[1]}.{m[2]}"
        archs = tuple(_run([nvcc, "--list-gpu-code"]).split())
        cublas = "" if (root / "include" / "cublas_v2.h").is_file() else _cublas_wheel_headers(int(m[1]))
        cpus = toolkit_cpus(root)
        # one toolkit per version and reach: a system 13.0 does not hide a provisioned 13.0 that cross-builds
        found.setdefault((version, cpus), Toolkit("cuda", version, str(root), nvcc, m[3], archs, cublas, cpus=cpus))
    return tuple(found.values())


def detect_rocm_toolkits() -> tuple[Toolkit, ...]:
    hipcc = shutil.which("hipcc") or ("/opt/rocm/bin/hipcc" if Path("/opt/rocm/bin/hipcc").exists() else None)
    if not hipcc:
        return ()
    root = Path(os.path.realpath(hipcc)).parent.parent
    m = re.search(r"HIP version: (\d+)\.(\d+)", _run([hipcc, "--version"]))
    if not m:
        return ()
    return (Toolkit("rocm", f"{m[1]}.{m[2]}", str(root), hipcc, m.group(0).split(": ")[1]),)


# --- nix ----------------------------------------------------------------------------------------------

NIX_MIN_VERSION = (2, 18)  # flakes as kernel-builder uses them (`nix run .#build-and-copy`, nixConfig)
_NIX_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


@dataclass(frozen=True)
class NixInfo:
    """What a `nix` binary can do: kernel-builder needs a recent Nix with `nix-command` and `flakes` on."""

    path: str
    version: str = ""
    features: tuple[str, ...] = ()
    problem: str = ""  # empty when usable
    fix: str = ""  # what to do about `problem`, in words a user can follow

    @property
    def usable(self) -> bool:
        return not self.problem


NIX_FEATURES_LINE = "experimental-features = nix-command flakes"
_NIX_CONF = "~/.config/nix/nix.conf (or /etc/nix/nix.conf for every user)"


def probe_nix(nix: str, timeout: float = 10.0) -> NixInfo:
    """Ask `nix` for its version and enabled experimental features (each call bounded by `timeout`)."""

    def ask(*args: str) -> subprocess.CompletedProcess[str] | None:
        try:
            return subprocess.run([nix, *args], capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired):
            return None

    proc = ask("--version")
    m = _NIX_VERSION.search(proc.stdout) if proc is not None and proc.returncode == 0 else None
    if m is None:
        return NixInfo(
            nix, problem=f"`{nix} --version` gave no version", fix="repair that Nix install, or use --engine local"
        )
    version = m.group(0)
    if (int(m[1]), int(m[2])) < NIX_MIN_VERSION:
        need = ".".join(map(str, NIX_MIN_VERSION))
        return NixInfo(
            nix,
            version,
            problem=f"nix {version} at {nix} is too old (kernel-builder needs >= {need})",
            fix=f"install Nix >= {need} (its installer, or a newer distribution package), then turn on its "
            f"experimental features nix-command and flakes with `{NIX_FEATURES_LINE}` in {_NIX_CONF}; "
            "or use --engine local (the default)",
        )
    text = ""
    for cmd in (("config", "show"), ("show-config",)):  # `config show` from Nix 2.20, `show-config` before
        proc = ask(*cmd)
        if proc is not None and proc.returncode == 0:
            text = proc.stdout
            break
    line = next((ln for ln in text.splitlines() if ln.split("=")[0].strip() == "experimental-features"), "")
    features = tuple(sorted(set(line.partition("=")[2].split())))
    missing = [f for f in ("nix-command", "flakes") if f not in features]
    if missing:
        return NixInfo(
            nix,
            version,
            features,
            f"nix {version} at {nix} has {' and '.join(missing)} disabled",
            f"turn on Nix's experimental features nix-command and flakes: add `{NIX_FEATURES_LINE}` to "
            f"{_NIX_CONF}, or use --engine local (the default)",
        )
    return NixInfo(nix, version, features)


def detect_host(envs_dir: Path | None = None) -> HostFacts:
    os_, cpu = host_platform()
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    cxx_version = _run([cxx, "--version"]).splitlines()[0] if cxx else ""
    metal = os_ == "darwin" and bool(shutil.which("xcrun")) and bool(_run(["xcrun", "-f", "metal"]).strip())
    return HostFacts(
        os=os_,
        cpu=cpu,
        toolkits=detect_cuda_toolkits() + detect_rocm_toolkits(),
        envs=discover_envs(envs_dir),
        metal=metal,
        nix=shutil.which("nix"),
        cxx=cxx,
        cxx_version=cxx_version,
        cross_cpus=detect_cross_cpus(os_, cpu),
        cudart=provisioned_cudart(),
    )


CROSS_CPUS = {"x86_64": ("aarch64",)}  # cross builds this tool knows (zig target + Debian cross libstdc++)


def detect_cross_cpus(os_: str, cpu: str) -> tuple[str, ...]:
    if os_ != "linux":
        return ()
    from toolkit.build.zig import cross_libstdcxx, find_zig

    if find_zig() is None:
        return ()
    return tuple(c for c in CROSS_CPUS.get(cpu, ()) if cross_libstdcxx(c) is not None)


def provisioned_cudart(base: Path | None = None) -> dict[str, str]:
    out: dict[str, str] = {}
    for lib in sorted((base or default_toolchains_dir()).glob("cudart-*-*/nvidia/cu*/lib")):
        top = lib.parents[2]
        if not (top / ".complete").is_file():
            continue
        _, version, cpu = top.name.split("-", 2)
        out.setdefault(f"{cpu}-{'.'.join(version.split('.')[:2])}", str(lib))
    return out
