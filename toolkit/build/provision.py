"""Toolchains as data, provisioned on demand into the user cache: the pinned zig (hermetic host compiler), one
CUDA toolkit per version (`cuda-toolkit[nvcc,cccl,cudart]==X` from PyPI: a complete toolkit root under
`nvidia/cu13/`), and one torch environment per torch version and compute tag.

Every install is staged next to its final place (`<name>.partial-<pid>-<hex>`) and swapped in only when it
is complete and checked (toolkit.core.fs.staged), so an interrupted or failed install leaves nothing; a later run reuses what exists.
pip is used as it is set up on the machine (its config, constraints and indexes); "pypi" in the matrix
means pip's default index, so no URL is written anywhere. A package that cannot be installed is one line
naming the package, its version and the index.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from toolkit.build.torchtree import default_envs_dir, env_dir_name, torch_build_problem
from toolkit.core import fs
from toolkit.core.errors import BuildError

if TYPE_CHECKING:
    from toolkit.build.matrix import Source, Variant

# How provision runs one pip command: (its exit status, its output). Tests pass a fake pip here.
PipRunner = Callable[[list[str]], tuple[int, str]]

PYPI = "pypi"  # pip's default index (no URL)
PARTIAL = ".partial-"  # in the name of an install being made (readers of the cache skip such names)


class ProvisionError(BuildError):
    """A toolchain or torch build could not be installed."""


def default_toolchains_dir() -> Path:
    if os.environ.get("GGML_VENDOR_TOOLCHAINS"):
        return Path(os.environ["GGML_VENDOR_TOOLCHAINS"])
    from toolkit.core.paths import user_cache_dir

    return user_cache_dir() / "toolchains"


def index_words(index: str) -> str:
    return "pip's default index (PyPI)" if index == PYPI else index


def pip_index_args(index: str) -> tuple[str, ...]:
    return () if index == PYPI else ("--index-url", index)


@dataclass(frozen=True)
class Install:
    """One provisioning action: `requirement` installed by pip into `path` (a --target dir or a venv)."""

    what: str  # human name: "zig 0.14.1", "CUDA toolkit 13.0.3", "torch 2.13.0 (cu130)"
    package: str  # the distribution name, for the error line
    version: str
    requirement: str  # e.g. "cuda-toolkit[nvcc,cccl,cudart]==13.0.3"
    path: Path
    index: str = PYPI
    venv: bool = False  # True: a venv (torch); False: pip --target (self-contained tool trees)
    no_deps: bool = False
    check: Callable[[Path], str] | None = None  # returns "" when the staged install is right, else why not
    platform: tuple[str, ...] = ()  # another CPU's wheels (pip --platform tags, --target only)

    @property
    def words(self) -> str:
        """What the plan and `variants` print for this install (the exact requirement pip gets)."""
        plat = f" for {self.platform[0].split('_', 3)[-1]}" if self.platform else ""
        return f"{self.what}: {self.requirement}{plat} from {index_words(self.index)}"

    @property
    def ready(self) -> bool:
        return (self.path / ".complete").is_file()

    def commands(self, where: Path) -> list[list[str]]:
        pip_opts = ["--disable-pip-version-check", "--no-input", "--progress-bar", "on"]
        deps = ["--no-deps"] if self.no_deps else []
        idx = list(pip_index_args(self.index))
        if self.venv:
            py = str(where / "bin" / "python")
            return [
                [sys.executable, "-m", "venv", "--without-pip", str(where)],
                [sys.executable, "-m", "pip", "--python", py, "install", *pip_opts, *deps, *idx, self.requirement],
            ]
        plat = [a for tag in self.platform for a in ("--platform", tag)]
        plat += ["--only-binary=:all:"] if plat else []
        target = ["--target", str(where)]
        return [[sys.executable, "-m", "pip", "install", *pip_opts, *deps, *idx, *plat, *target, self.requirement]]


def _last_error(text: str) -> str:
    """pip's telling error line (not the trailing 'ResolutionImpossible: for help visit ...')."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    errs = [ln for ln in lines if ln.startswith("ERROR") and "ResolutionImpossible" not in ln]
    errs = errs or [ln for ln in lines if "error" in ln.lower()]
    best = [ln for ln in errs if "No matching distribution" in ln] or errs or lines or ["(no output)"]
    return best[-1].removeprefix("ERROR: ")[:300]


def provision(item: Install, *, say: Callable[[str], None] | None = None, runner: PipRunner | None = None) -> Path:
    """Install `item` unless it is already there; returns its path. Atomic: staged beside it and swapped in
    (toolkit.core.fs.staged), so a failed, interrupted or killed install leaves the old state."""
    # Even when ready: a run killed just after its swap left the old tree (and, swapping without
    # renameat2, its journal) beside the new one.
    fs.recover(item.path, f"{item.path.name}{PARTIAL}")
    clean_partials(item.path.parent)
    if item.ready:
        return item.path
    say = say or (lambda _m: None)
    runner = runner or _run_pip
    t0 = time.monotonic()
    say(f"provisioning {item.what} ({item.requirement} from {index_words(item.index)}) into {item.path} …")
    # A half-made leftover without .complete (from an older tool) at item.path is replaced by the swap.
    with fs.staged(item.path, f"{item.path.name}{PARTIAL}") as stage:
        _install_into(item, stage, runner)
    say(f"provisioned {item.what} in {time.monotonic() - t0:.0f}s")
    return item.path


def _install_into(item: Install, stage: Path, runner: PipRunner) -> None:
    """Run `item`'s pip commands into the empty staging dir `stage` and check the result."""
    for cmd in item.commands(stage):
        rc, out = runner(cmd)
        if rc != 0:
            raise ProvisionError(
                f"cannot install {item.package} {item.version} from {index_words(item.index)}: {_last_error(out)}",
                "check the version and that the index is reachable (nothing was installed)",
            )
    problem = item.check(stage) if item.check else ""
    if problem:
        raise ProvisionError(
            f"{item.package} {item.version} from {index_words(item.index)} is not what this variant needs: {problem}",
            "nothing was installed; fix the matrix's [sources] entry or pip's configuration",
        )
    (stage / ".complete").write_text(f"{item.requirement}\n{index_words(item.index)}\n")


def _run_pip(cmd: list[str]) -> tuple[int, str]:
    """pip with its own progress bars on the terminal when there is one; output kept for the error line."""
    if sys.stderr.isatty():
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
        lines: list[str] = []
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if re.search(r"Downloading|Collecting|Installing|━", line):
                sys.stderr.write("  " + line if not line.startswith(" ") else line)
        return proc.wait(), "".join(lines)
    done = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
    return done.returncode, done.stdout + done.stderr


def clean_partials(base: Path) -> None:
    """Staging dirs left by a killed provisioning run (SIGKILL skips our cleanup), whatever they install."""
    fs.stale_entries(base, f"*{PARTIAL}*")


# --- pip's own configuration: constraints that exclude a wanted version -------------------------------------


def _pip_config_files() -> list[Path]:
    """pip's config files in its precedence order (global, user, site), plus PIP_CONFIG_FILE."""
    xdg = os.environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(os.pathsep)
    home = Path.home()
    files = [Path(d) / "pip" / "pip.conf" for d in xdg] + [Path("/etc/pip.conf")]
    files += [
        home / ".pip" / "pip.conf",
        Path(os.environ.get("XDG_CONFIG_HOME", home / ".config")) / "pip" / "pip.conf",
    ]
    files += [Path(sys.prefix) / "pip.conf"]
    if os.environ.get("PIP_CONFIG_FILE"):
        files.append(Path(os.environ["PIP_CONFIG_FILE"]))
    return files


def pip_constraints() -> list[str]:
    """The constraint lines pip applies to every install here (its config files and PIP_CONSTRAINT)."""
    import configparser

    paths: list[str] = []
    for f in _pip_config_files():
        cp = configparser.ConfigParser()
        try:
            cp.read(f)
        except (OSError, configparser.Error):
            continue
        for section in ("global", "install"):
            if cp.has_option(section, "constraint"):
                paths += cp.get(section, "constraint").split()
    if os.environ.get("PIP_CONSTRAINT"):
        paths += os.environ["PIP_CONSTRAINT"].split()
    lines: list[str] = []
    for p in paths:
        try:
            text = Path(p).read_text()
        except OSError:
            continue
        lines += [ln.split("#")[0].strip() for ln in text.splitlines() if ln.split("#")[0].strip()]
    return lines


def constraint_excludes(package: str, version: str) -> str:
    """The pip constraint (as set up on this machine) that forbids `package==version`, or ""."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    want = canonicalize_name(package.split("[")[0])
    for line in pip_constraints():
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) == want and not req.specifier.contains(version, prereleases=True):
            return f"pip's configured constraint `{line}` excludes {package.split('[')[0]} {version}"
    return ""


def source_blocked(src: Source) -> str:
    """Why pip as set up here may not install the matrix source `src` (its configured constraints), or ""."""
    return constraint_excludes(src.name, src.version)


# --- what the matrix's [sources] provision -------------------------------------------------------------------


def toolkit_dir(backend: str, version: str, base: Path | None = None) -> Path:
    return (base or default_toolchains_dir()) / f"{backend}-{version}"


def toolkit_install(backend: str, package: str, version: str, index: str, base: Path | None = None) -> Install:
    """A CUDA toolkit from PyPI's `cuda-toolkit[nvcc,cccl,cudart]==X`: a complete toolkit root under
    <dir>/nvidia/cu<major>/ (nvcc, ptxas, cicc, crt + cccl headers, libcudart)."""
    major = version.split(".")[0]

    def check(stage: Path) -> str:
        root = stage / "nvidia" / f"cu{major}"
        missing = [rel for rel in ("bin/nvcc", "include/cuda_runtime.h") if not (root / rel).is_file()]
        return f"no {', '.join(missing)} under nvidia/cu{major}/ (no nvcc in this toolkit's wheels)" if missing else ""

    return Install(
        what=f"CUDA toolkit {version}",
        package=package.split("[")[0],
        version=version,
        requirement=f"{package}=={version}",
        path=toolkit_dir(backend, version, base),
        index=index,
        check=check,
    )


def provisioned_cuda_roots(base: Path | None = None) -> list[Path]:
    base = base or default_toolchains_dir()
    roots = []
    for nvcc in sorted(base.glob("cuda-*/nvidia/cu*/bin/nvcc")):
        top = nvcc.parents[3]
        if (top / ".complete").is_file():
            roots.append(nvcc.parent.parent)
    return roots


def cross_platform(cpu: str) -> tuple[str, ...]:
    """pip --platform tags for another CPU's wheels up to manylinux_2_28 (pip does not widen one tag to the
    older manylinux tags it implies, so each is listed)."""
    return tuple(
        f"{t}_{cpu}"
        for t in (
            "manylinux_2_28",
            "manylinux_2_27",
            "manylinux_2_26",
            "manylinux_2_24",
            "manylinux_2_17",
            "manylinux2014",
        )
    )


def cudart_install(version: str, cpu: str, index: str, base: Path | None = None) -> Install:
    """Another CPU's libcudart (cross builds link it): `cuda-toolkit[cudart]==X` for that platform."""
    major = version.split(".")[0]

    def check(stage: Path) -> str:
        lib = stage / "nvidia" / f"cu{major}" / "lib"
        return "" if list(lib.glob("libcudart.so*")) else f"no libcudart under nvidia/cu{major}/lib"

    return Install(
        what=f"libcudart {version} ({cpu})",
        package="cuda-toolkit",
        version=version,
        requirement=f"cuda-toolkit[cudart]=={version}",
        path=(base or default_toolchains_dir()) / f"cudart-{version}-{cpu}",
        index=index,
        check=check,
        platform=cross_platform(cpu),
    )


def torch_install(
    torch_minor: str, compute: str, version: str, index: str, envs_dir: Path, cpu: str | None = None
) -> Install:
    """A venv with exactly torch==version for `compute`. Only torch itself is installed (--no-deps): the
    build needs its headers and libraries, not the GBs of runtime wheels it imports at run time. A local CPU
    build of the same version (e.g. `2.13.0+cpu` in a find-links folder) is excluded in the requirement, and
    the installed build's torch/version.py must name the row's build (version, local tag, CUDA)."""
    requirement = f"torch=={version}"
    if compute.startswith("cu"):
        requirement += f",!={version}+cpu"

    def check(stage: Path) -> str:
        return torch_build_problem(stage, torch_minor, compute, version)

    if cpu:  # a cross-build tree for another CPU: no interpreter, just torch's headers and libraries
        return Install(
            what=f"torch {version} ({compute}, {cpu})",
            package="torch",
            version=version,
            requirement=requirement,
            path=envs_dir / f"{env_dir_name(torch_minor, compute)}-{cpu}",
            index=index,
            no_deps=True,
            check=check,
            platform=cross_platform(cpu),
        )
    return Install(
        what=f"torch {version} ({compute})",
        package="torch",
        version=version,
        requirement=requirement,
        path=envs_dir / env_dir_name(torch_minor, compute),
        index=index,
        venv=True,
        no_deps=True,
        check=check,
    )


def installs_for(
    variant: Variant,
    provision: tuple[tuple[str, Source], ...],
    host_cpu: str,
    envs_dir: Path | None = None,
    toolchains_dir: Path | None = None,
) -> tuple[Install, ...]:
    """The installs a variant's Status.provision stands for: a toolkit (host binaries, any CPU's headers),
    another CPU's libcudart, a torch build (a venv here, a headers-and-libraries tree for another CPU)."""
    cpu = variant.cpu if variant.cpu != host_cpu else None
    out = []
    for kind, src in provision:
        if kind == "toolkit":
            out.append(toolkit_install(variant.backend, src.package, src.version, src.index, toolchains_dir))
        elif kind == "cudart":
            out.append(cudart_install(src.version, variant.cpu, src.index, toolchains_dir))
        else:
            envs = envs_dir or default_envs_dir()
            out.append(torch_install(variant.torch, variant.compute, src.version, src.index, envs, cpu=cpu))
    return tuple(out)
