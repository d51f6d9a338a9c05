"""What this host can build with: compiler toolkits (nvcc, hipcc, Metal), nix, and one torch environment per
torch version (the current interpreter's own torch, plus isolated venvs created once and reused).

Detection avoids importing torch (seconds) on the hot path: torch's version comes from torch/version.py read
as text, and the facts that need a real import (include dirs, C++ ABI) are probed once per environment in a
subprocess and cached, keyed by the torch install's version file, so a no-op `build --all` stays fast.
"""

from __future__ import annotations

import glob
import hashlib
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from toolkit.build.provision import PARTIAL, default_toolchains_dir, provisioned_cuda_roots
from toolkit.build.torchtree import default_envs_dir, env_dir_name, read_torch_version, torch_build_problem
from toolkit.core import fs
from toolkit.core.errors import BuildError


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
class TorchEnv:
    """A Python environment with one torch build in it."""

    python: str  # interpreter path
    version: str  # "2.14.1+cu130"
    torch_dir: str  # site-packages/torch
    cuda: str | None = None  # torch.version.cuda
    hip: str | None = None
    managed: bool = False  # created by us under the envs dir
    cpu: str = ""  # the torch build's architecture when it is not the host's (a cross-build tree, no python)
    # Probed (one torch import per environment, cached): compile/link facts.
    include_dirs: tuple[str, ...] = ()
    lib_dir: str = ""
    python_include: str = ""
    cxx11_abi: bool = True

    @property
    def torch_minor(self) -> str:
        major, minor = self.version.split("+")[0].split(".")[:2]
        return f"{major}.{minor}"

    @property
    def compute(self) -> str:
        if self.cuda:
            return "cu" + "".join(self.cuda.split(".")[:2])
        if self.hip:
            return "rocm" + "".join(self.hip.split(".")[:2])
        return "metal" if sys.platform == "darwin" else "cpu"

    @property
    def cxx_standard(self) -> str:
        # kernel-builder: C++17 for torch < 2.12, C++20 from 2.12 on (docs/hub-contract.md §4.6).
        major, minor = (int(x) for x in self.torch_minor.split("."))
        return "c++20" if (major, minor) >= (2, 12) else "c++17"


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


# --- torch environments --------------------------------------------------------------------------------


def _current_torch_dir() -> Path | None:
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


_PROBE = r"""
import json, os, sys, sysconfig
try:
    import torch, torch.utils.cpp_extension as ce
    dev = "cuda" if torch.version.cuda else ("cuda" if torch.version.hip else "cpu")
    try:
        incs = ce.include_paths(device_type=dev)
    except TypeError:  # older torch: include_paths(cuda: bool)
        incs = ce.include_paths(dev == "cuda")
    tdir = os.path.dirname(torch.__file__)
    facts = {"include_dirs": [p for p in incs if p.startswith(tdir)], "cxx11_abi": bool(torch.compiled_with_cxx11_abi())}
except Exception:
    # A build-only environment (torch installed without its runtime wheels) cannot import torch: the same
    # facts from the installed tree. PyPI's Linux torch builds use the C++11 ABI since 2.7.
    tdir = sys.argv[1]
    facts = {"include_dirs": [os.path.join(tdir, "include"), os.path.join(tdir, "include", "torch", "csrc", "api", "include")],
             "cxx11_abi": True, "imported": False}
facts.update(lib_dir=os.path.join(tdir, "lib"), python_include=sysconfig.get_paths()["include"])
print(json.dumps(facts))
"""


def probe_env(python: str, torch_dir: Path, cache_file: Path, *, store: bool = True) -> dict:
    """Compile/link facts of one torch environment: from the cache when torch/version.py is unchanged, else
    from one subprocess that imports torch (remembered in the cache unless `store` is False)."""
    key = _probe_key(python, torch_dir)
    try:
        cached = json.loads(cache_file.read_text())
    except (OSError, ValueError):
        cached = {}
    if key in cached:
        return cached[key]
    env = dict(os.environ, TORCH_CPP_LOG_LEVEL="ERROR")
    proc = subprocess.run([python, "-c", _PROBE, str(torch_dir)], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise BuildError(
            f"cannot probe torch in {python}: {proc.stderr.strip().splitlines()[-1:]}",
            "repair or delete that environment",
        )
    facts = json.loads(proc.stdout.strip().splitlines()[-1])
    if store:
        _store_probe(cache_file, key, facts)
    return facts


def _probe_key(python: str, torch_dir: Path) -> str:
    stat = (torch_dir / "version.py").stat()
    return hashlib.sha256(
        f"{os.path.realpath(python)}\0{torch_dir}\0{stat.st_mtime_ns}\0{stat.st_size}".encode()
    ).hexdigest()


def _store_probe(cache_file: Path, key: str, facts: dict) -> None:
    try:
        cached = json.loads(cache_file.read_text())
    except (OSError, ValueError):
        cached = {}
    if cached.get(key) == facts:
        return
    cached[key] = facts
    fs.atomic_write(cache_file, json.dumps(cached, indent=1, sort_keys=True).encode())


def remember_probe(env: TorchEnv, cache_file: Path) -> None:
    """Cache a probed environment's facts (the build's execute step: plans probe with store=False)."""
    if not env.python or not env.include_dirs:
        return
    facts = {
        "include_dirs": list(env.include_dirs),
        "cxx11_abi": env.cxx11_abi,
        "lib_dir": env.lib_dir,
        "python_include": env.python_include,
    }
    _store_probe(cache_file, _probe_key(env.python, Path(env.torch_dir)), facts)


def _env_at(python: str, torch_dir: Path, managed: bool) -> TorchEnv | None:
    found = read_torch_version(torch_dir)
    if not found:
        return None
    version, cuda, hip = found
    return TorchEnv(python=python, version=version, torch_dir=str(torch_dir), cuda=cuda, hip=hip, managed=managed)


def discover_envs(envs_dir: Path | None = None) -> tuple[TorchEnv, ...]:
    """The current interpreter's torch first, then each managed venv under envs_dir (one per torch
    version and compute tag). Nothing is imported; call `with_probe` before compiling against one."""
    found: list[TorchEnv] = []
    here = _current_torch_dir()
    if here is not None:
        env = _env_at(sys.executable, here, managed=False)
        if env:
            found.append(env)
    envs_dir = envs_dir or default_envs_dir()
    for version_py in sorted(
        glob.glob(str(envs_dir / "*" / "lib" / "python3*" / "site-packages" / "torch" / "version.py"))
    ):
        torch_dir = Path(version_py).parent
        venv = torch_dir.parents[3]
        if ".partial" in venv.name:  # being provisioned (or left by a killed run): not an environment
            continue
        python = venv / "bin" / "python"
        env = _env_at(str(python), torch_dir, managed=True) if python.exists() else None
        if env and all((e.torch_minor, e.compute) != (env.torch_minor, env.compute) for e in found):
            found.append(env)
    # Cross-build trees (pip --target --platform): torch for another CPU, headers and libraries only.
    for version_py in sorted(glob.glob(str(envs_dir / "*-*-*" / "torch" / "version.py"))):
        tree = Path(version_py).parents[1]
        cpu = tree.name.rsplit("-", 1)[1]
        if ".partial" in tree.name or not (tree / ".complete").is_file():
            continue
        env = _env_at("", Path(version_py).parent, managed=True)
        if env:
            found.append(replace(env, cpu=cpu))
    return tuple(found)


def with_probe(env: TorchEnv, cache_file: Path, *, store: bool = True) -> TorchEnv:
    if not env.python:  # a cross-build tree: nothing to run; the facts follow from the installed tree
        import sysconfig

        t = env.torch_dir
        return replace(
            env,
            include_dirs=(f"{t}/include", f"{t}/include/torch/csrc/api/include"),
            lib_dir=f"{t}/lib",
            python_include=sysconfig.get_paths()["include"],  # abi3: the limited API is the same on every CPU
            cxx11_abi=True,
        )
    facts = probe_env(env.python, Path(env.torch_dir), cache_file, store=store)
    return replace(
        env,
        include_dirs=tuple(facts["include_dirs"]),
        lib_dir=facts["lib_dir"],
        python_include=facts["python_include"],
        cxx11_abi=facts["cxx11_abi"],
    )


@dataclass(frozen=True)
class EnvPlan:
    """How an isolated torch environment for a variant would be created, and the torch build it must hold."""

    path: Path
    commands: tuple[tuple[str, ...], ...]
    torch_minor: str = ""  # "2.13": the environment must hold torch 2.13.x ...
    compute: str = ""  # ... built for this compute tag (cu126, rocm72, cpu), local tag included


def plan_env(torch_minor: str, compute: str, index: str | None, envs_dir: Path | None = None) -> EnvPlan:
    """`index` None: pip's default index (as configured on this machine)."""
    path = (envs_dir or default_envs_dir()) / env_dir_name(torch_minor, compute)
    python = str(path / "bin" / "python")
    return EnvPlan(
        path,
        (
            (sys.executable, "-m", "venv", str(path)),
            (
                python,
                "-m",
                "pip",
                "install",
                "--quiet",
                f"torch=={torch_minor}.*",
                *(("--index-url", index) if index else ()),
            ),
        ),
        torch_minor,
        compute,
    )


def create_env(plan: EnvPlan) -> None:
    """Create the venv beside its final place and swap it in (toolkit.core.fs.staged), so a failed or
    killed install leaves nothing. The torch it ends up with must be the row's build
    (`torch_build_problem`), else nothing is kept; an existing environment holding another build is
    replaced."""
    if (plan.path / "bin" / "python").exists():
        if not plan.compute or not torch_build_problem(plan.path, plan.torch_minor, plan.compute):
            return
        # a wrong build left by an older tool: made again, checked this time; the swap replaces it
    with fs.staged(plan.path, f"{plan.path.name}{PARTIAL}") as staging:
        staging.rmdir()  # `python -m venv` makes it
        for cmd in plan.commands:
            _run_env_command(plan, tuple(c.replace(str(plan.path), str(staging)) for c in cmd))
        problem = torch_build_problem(staging, plan.torch_minor, plan.compute) if plan.compute else ""
        if problem:
            index = next((c[c.index("--index-url") + 1] for c in plan.commands if "--index-url" in c), None)
            raise BuildError(
                f"torch environment {plan.path.name} refused and removed: {problem}",
                f"make {index or 'the torch index'} reachable from this machine (pip fell back to another "
                "source, e.g. its configured find-links), or point [torch-index] at a mirror; then rerun",
            )
    # venv scripts embed their own path: a renamed venv still runs `bin/python` fine, which is all we use.


def _run_env_command(plan: EnvPlan, cmd: tuple[str, ...]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise BuildError(
            f"creating torch environment {plan.path.name} failed: {tail[0]}",
            "check that the torch index is reachable, or set [torch-index] in the matrix",
        )


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

    def ask(*args: str) -> subprocess.CompletedProcess | None:
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
