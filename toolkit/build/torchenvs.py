"""The torch environments a build compiles against: the current interpreter's own torch and the isolated venvs
created once per (torch minor, compute tag) and reused; their compile/link facts, probed once per environment
in a subprocess and cached; and the plan and creation of a missing one.

Split from toolkit/build/envs.py, which detects the rest of the host (compiler toolkits, nix, cross CPUs) and
gathers everything into HostFacts: a torch environment is found, probed and created its own way.
"""

from __future__ import annotations

import glob
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from toolkit.build.provision import PARTIAL
from toolkit.build.torchtree import default_envs_dir, env_dir_name, read_torch_version, torch_build_problem
from toolkit.core import fs
from toolkit.core.errors import BuildError


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
        return cxx_standard(self.torch_minor)


def cxx_standard(torch_minor: str) -> str:
    """The C++ standard a binding for `torch_minor` compiles with. kernel-builder: C++17 for torch < 2.12, C++20
    from 2.12 on (docs/hub-contract.md §4.6)."""
    major, minor = (int(x) for x in torch_minor.split("."))
    return "c++20" if (major, minor) >= (2, 12) else "c++17"


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


def probe_env(python: str, torch_dir: Path, cache_file: Path, *, store: bool = True) -> dict[str, Any]:
    """Compile/link facts of one torch environment: from the cache when torch/version.py is unchanged, else
    from one subprocess that imports torch (remembered in the cache unless `store` is False)."""
    key = _probe_key(python, torch_dir)
    try:
        cached = json.loads(cache_file.read_text())
    except (OSError, ValueError):
        cached = {}
    if isinstance(cached, dict) and isinstance(cached.get(key), dict):
        hit: dict[str, Any] = cached[key]
        return hit
    env = dict(os.environ, TORCH_CPP_LOG_LEVEL="ERROR")
    proc = subprocess.run([python, "-c", _PROBE, str(torch_dir)], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise BuildError(
            f"cannot probe torch in {python}: {proc.stderr.strip().splitlines()[-1:]}",
            "repair or delete that environment",
        )
    facts: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])  # _PROBE prints one JSON object
    if store:
        _store_probe(cache_file, key, facts)
    return facts


def _probe_key(python: str, torch_dir: Path) -> str:
    stat = (torch_dir / "version.py").stat()
    return hashlib.sha256(
        f"{os.path.realpath(python)}\0{torch_dir}\0{stat.st_mtime_ns}\0{stat.st_size}".encode()
    ).hexdigest()


def _store_probe(cache_file: Path, key: str, facts: dict[str, Any]) -> None:
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
