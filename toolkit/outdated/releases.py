"""What the package index offers that the project does not use yet: torch releases (and their builds) past the
matrix, and kernels / transformers releases past the ranges the project tests.

The facts come from the index (toolkit.outdated.index); what we compare them with comes from the project: the
matrix files (toolkit.build.matrix) and pyproject.toml's requirements, read with packaging's Requirement (the
one place the supported client ranges are written).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from toolkit.build.matrix import Matrix
from toolkit.core.config import parse_toml
from toolkit.outdated.index import IndexFile

CLIENTS = ("kernels", "transformers")
# The CUDA runtime a Linux torch wheel depends on, as its core metadata names it (PyPI's wheels carry no local
# version label): cuda-toolkit[...]==13.2.2 since torch 2.12, nvidia-cuda-runtime-cuXX==X.Y.Z before.
_CUDA_DEPS = ("cuda-toolkit", "nvidia-cuda-runtime", "nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu13")
_LOCAL_RE = re.compile(r"^(cu\d+|rocm\d+(?:\.\d+)?|cpu)$")


def system_of(platform_tag: str) -> str | None:
    """The matrix's system of a wheel platform tag (None for systems the matrix never lists)."""
    if "linux" in platform_tag:
        for cpu in ("x86_64", "aarch64"):
            if platform_tag.endswith(cpu):
                return f"{cpu}-linux"
    if platform_tag.startswith("macosx") and platform_tag.endswith("arm64"):
        return "aarch64-darwin"
    return None


@dataclass(frozen=True, order=True)
class TorchBuild:
    """One build of a torch release: its compute tag (cu132, rocm7.2, metal, cpu) on one system."""

    compute: str
    system: str
    toolkit: str = ""  # the CUDA toolkit version its metadata pins (13.2.2), "" when not known

    @property
    def backend(self) -> str:
        if self.compute.startswith("cu"):
            return "cuda"
        return "rocm" if self.compute.startswith("rocm") else self.compute

    @property
    def toolkit_minor(self) -> str:
        """13.2 for cu132, 7.2 for rocm7.2 (the matrix's toolkits spelling)."""
        if self.backend == "cuda":
            digits = self.compute[2:]
            return f"{digits[:-1]}.{digits[-1]}"
        if self.backend == "rocm":
            return self.compute[4:] if "." in self.compute else f"{self.compute[4:-1]}.{self.compute[-1]}"
        return ""


def _cuda_of_metadata(requires: Iterable[str]) -> tuple[str, str] | None:
    """(cuXY, X.Y.Z) from a Linux wheel's Requires-Dist, None when it depends on no CUDA runtime."""
    for line in requires:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) not in _CUDA_DEPS:
            continue
        if req.marker is not None and not req.marker.evaluate({"platform_system": "Linux", "sys_platform": "linux"}):
            continue
        pins = [s.version for s in req.specifier if s.operator in ("==", "===")]
        if pins:
            major, minor = pins[0].split(".")[:2]
            return f"cu{major}{minor}", pins[0]
    return None


Metadata = Callable[[IndexFile], Mapping[str, list[str]]]


def builds_of(files: Iterable[IndexFile], metadata: Metadata) -> tuple[TorchBuild, ...]:
    """The builds one torch release offers: per wheel, its system and compute (the local label, else for a Linux
    wheel the CUDA runtime its core metadata pins, else cpu; macOS arm64 wheels are the Metal (MPS) builds)."""
    found: set[TorchBuild] = set()
    meta_cache: dict[str, tuple[str, str] | None] = {}
    for f in files:
        for tag in f.tags:
            system = system_of(tag)
            if system is None:
                continue
            if system.endswith("darwin"):
                found.add(TorchBuild("metal", system))
            elif _LOCAL_RE.match(f.local):
                found.add(TorchBuild(f.local, system))
            elif f.filename.endswith(".whl"):
                key = str(f.version)
                if key not in meta_cache:
                    meta_cache[key] = _cuda_of_metadata(metadata(f).get("Requires-Dist", []))
                cuda = meta_cache[key]
                found.add(TorchBuild(cuda[0], system, cuda[1]) if cuda else TorchBuild("cpu", system))
            else:
                found.add(TorchBuild("unknown", system))
    return tuple(sorted(found))


@dataclass(frozen=True)
class TorchRelease:
    """A torch release the matrix does not cover fully: a newer minor, or the newest minor's missing builds."""

    version: str  # 2.16.0
    minor: str  # 2.16
    builds: tuple[TorchBuild, ...]  # every build it offers on the systems the matrix knows
    missing: tuple[TorchBuild, ...]  # the builds the matrix has no variant for (of enabled backends)
    newer: bool  # its minor is newer than the matrix's newest

    def line(self) -> str:
        offered = _group(self.builds)
        head = f"torch {self.version}" + (" (newer than the matrix)" if self.newer else "")
        miss = f"; the matrix lacks {_group(self.missing)}" if self.missing and not self.newer else ""
        return f"{head}: {offered}{miss}"

    def to_json(self) -> dict[str, object]:
        def one(b: TorchBuild) -> dict[str, str]:
            return {"compute": b.compute, "system": b.system, "toolkit": b.toolkit}

        return {
            "version": self.version,
            "minor": self.minor,
            "newer": self.newer,
            "builds": [one(b) for b in self.builds],
            "missing": [one(b) for b in self.missing],
        }


def _group(builds: Iterable[TorchBuild]) -> str:
    per: dict[str, list[str]] = {}
    for b in builds:
        per.setdefault(b.compute + (f" (CUDA {b.toolkit})" if b.toolkit else ""), []).append(b.system)
    return "; ".join(f"{c} on {', '.join(s)}" for c, s in per.items()) or "no build for the matrix's systems"


def _minor(v: Version) -> str:
    return f"{v.major}.{v.minor}"


def _minor_key(minor: str) -> tuple[int, int]:
    major, mi = minor.split(".")
    return int(major), int(mi)


def torch_news(
    matrix: Matrix,
    backends: Iterable[str],
    available: Mapping[Version, tuple[IndexFile, ...]],
    metadata: Metadata,
) -> tuple[str, tuple[TorchRelease, ...]]:
    """(the matrix's newest torch minor, the releases past it plus the newest minor's builds the matrix lacks).
    Only the newest patch release of each minor counts; only backends the package enables are "missing"."""
    newest = max((v.torch for v in matrix.variants), key=_minor_key)
    have = {(v.torch, v.compute, v.system) for v in matrix.variants}
    enabled = set(backends)
    latest_patch: dict[str, Version] = {}
    for v in available:
        if _minor_key(_minor(v)) >= _minor_key(newest) and v > latest_patch.get(_minor(v), Version("0")):
            latest_patch[_minor(v)] = v
    out = []
    for minor in sorted(latest_patch, key=_minor_key):
        version = latest_patch[minor]
        builds = builds_of(available[version], metadata)
        missing = tuple(
            b
            for b in builds
            if b.backend in enabled and b.compute != "unknown" and (minor, b.compute, b.system) not in have
        )
        newer = _minor_key(minor) > _minor_key(newest)
        if newer or missing:
            out.append(TorchRelease(str(version), minor, builds, missing, newer))
    return newest, tuple(out)


# --- kernels and transformers --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClientRange:
    """What the project declares for one client library, and the releases past it."""

    name: str
    specifier: str  # every requirement on it, intersected ("" when the project declares none)
    declared_in: tuple[str, ...]  # "dependencies", "optional-dependencies.test", ...
    newest_tested: str  # the newest release the range admits ("" when none is on the index)
    newer: tuple[str, ...]  # releases past the range, newest first

    def line(self) -> str:
        if not self.declared_in:
            return f"{self.name}: not declared in pyproject.toml (nothing to compare)"
        rng = f"{self.name}{self.specifier}" if self.specifier else f"{self.name} (any version)"
        newest = f"newest tested {self.newest_tested}" if self.newest_tested else "no release on the index admitted"
        if not self.newer:
            return f"{rng}: current ({newest})"
        return f"{rng}: {', '.join(self.newer)} released past the range ({newest})"

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "specifier": self.specifier,
            "declared_in": list(self.declared_in),
            "newest_tested": self.newest_tested or None,
            "newer": list(self.newer),
        }


def declared_ranges(pyproject: Path, names: Iterable[str] = CLIENTS) -> dict[str, tuple[SpecifierSet, tuple[str, ...]]]:
    """name -> (the intersection of every requirement on it in [project] dependencies and optional-dependencies,
    where they are); names the project does not declare are left out."""
    doc = parse_toml(pyproject).unwrap()
    project = doc.get("project", {}) if isinstance(doc, dict) else {}
    lists: list[tuple[str, list[str]]] = [("dependencies", list(project.get("dependencies", [])))]
    lists += [(f"optional-dependencies.{k}", list(v)) for k, v in project.get("optional-dependencies", {}).items()]
    wanted = {canonicalize_name(n): n for n in names}
    out: dict[str, tuple[SpecifierSet, tuple[str, ...]]] = {}
    for where, reqs in lists:
        for line in reqs:
            try:
                req = Requirement(line)
            except InvalidRequirement:
                continue
            name = wanted.get(canonicalize_name(req.name))
            if name is None:
                continue
            spec, places = out.get(name, (SpecifierSet(), ()))
            out[name] = (spec & req.specifier, (*places, where))
    return out


def client_news(
    name: str, declared: tuple[SpecifierSet, tuple[str, ...]] | None, available: Iterable[Version]
) -> ClientRange:
    """The releases of `name` newer than every release its declared range admits."""
    if declared is None:
        return ClientRange(name, "", (), "", ())
    spec, where = declared
    versions = sorted(set(available), reverse=True)
    admitted = [v for v in versions if spec.contains(v)]
    floor = admitted[0] if admitted else max((Version(s.version.rstrip(".*")) for s in spec), default=Version("0"))
    newer = tuple(str(v) for v in versions if v > floor and not spec.contains(v))
    return ClientRange(name, str(spec), where, str(admitted[0]) if admitted else "", newer)


__all__ = [
    "CLIENTS",
    "ClientRange",
    "TorchBuild",
    "TorchRelease",
    "builds_of",
    "client_news",
    "declared_ranges",
    "system_of",
    "torch_news",
]
