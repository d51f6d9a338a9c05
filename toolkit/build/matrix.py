"""The build matrix (variants/*.toml): its rows, its sources and variant names per the Hub grammar.

Pure: parsing and naming touch only the matrix file (a variant's status on this host is
toolkit.build.host_status's).
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tomlkit

from toolkit.core.errors import ConfigError

if TYPE_CHECKING:
    pass

BACKENDS_WITH_TOOLKIT = ("cuda", "rocm")
ALL_BACKENDS = ("cuda", "rocm", "metal", "cpu")
SYSTEMS = ("x86_64-linux", "aarch64-linux", "aarch64-darwin", "x86_64-windows")
_VERSION_RE = re.compile(r"^\d+\.\d+$")
# docs/hub-contract.md §2.1: torch<MAJ><MIN>[-cxx11]-<compute>-<cpu>-<os>
NAME_RE = re.compile(
    r"^torch(?P<stable>-stable-abi)?(?P<tmaj>\d)(?P<tmin>\d+)(?P<cxx11>-cxx11)?-(?P<compute>cu\d+|rocm\d+|metal|cpu)"
    r"-(?P<cpu>x86_64|aarch64)-(?P<os>linux|darwin|windows)$"
)
# Stable-ABI rows (docs/stable-abi.md): one binary per toolkit and system for every torch from the row's version
# on, named torch-stable-abi<MAJ><MIN>-<compute>-<cpu>-<os> (no -cxx11: kernels 0.17-0.19 refuse it there).
# Only CUDA: ROCm and Metal keep per-torch rows (the stable API covers neither at the floor).
STABLE_BACKENDS = ("cuda",)


def _compact(version: str) -> str:
    """ "13.0" -> "130", "2.14" -> "214", "7.2" -> "72" (kernel-builder's tag spelling)."""
    major, minor = version.split(".")
    return f"{major}{minor}"


@dataclass(frozen=True, order=True)
class Variant:
    """One cell of the matrix: a torch minor, a backend (+ toolkit version), a cpu and an os."""

    torch: str  # "2.14"
    backend: str  # cuda | rocm | metal | cpu
    toolkit: str | None  # "13.0" for cuda, "7.2" for rocm, None otherwise
    cpu: str  # x86_64 | aarch64
    os: str  # linux | darwin | windows
    # True: a stable-ABI build; `torch` is then the oldest torch it loads into (its TORCH_TARGET_VERSION).
    stable: bool = False

    @property
    def compute(self) -> str:
        if self.backend == "cuda":
            return f"cu{_compact(self.toolkit or '')}"
        if self.backend == "rocm":
            return f"rocm{_compact(self.toolkit or '')}"
        return self.backend

    @property
    def system(self) -> str:
        return f"{self.cpu}-{self.os}"

    @property
    def name(self) -> str:
        # The -cxx11 tag is kept on Linux only (docs/hub-contract.md §2.1, #599).
        if self.stable:
            return f"torch-stable-abi{_compact(self.torch)}-{self.compute}-{self.cpu}-{self.os}"
        cxx = "-cxx11" if self.os == "linux" else ""
        return f"torch{_compact(self.torch)}{cxx}-{self.compute}-{self.cpu}-{self.os}"

    def __str__(self) -> str:
        return self.name


def parse_name(name: str) -> Variant:
    """The inverse of Variant.name; raises ConfigError for a name outside the grammar."""
    m = NAME_RE.match(name)
    stable = bool(m and m["stable"])
    if not m or (m["os"] == "linux" and not stable) != bool(m["cxx11"]):
        raise ConfigError(f"{name!r} is not a variant name", "use e.g. torch214-cxx11-cu130-x86_64-linux")
    compute = m["compute"]
    backend, toolkit = compute, None
    for prefix, be in (("cu", "cuda"), ("rocm", "rocm")):
        if compute.startswith(prefix) and compute[len(prefix) :].isdigit():
            digits = compute[len(prefix) :]
            backend, toolkit = be, f"{digits[:-1]}.{digits[-1]}"
    return Variant(f"{m['tmaj']}.{m['tmin']}", backend, toolkit, m["cpu"], m["os"], stable)


PYPI = "pypi"  # pip's default index: no URL is written for it
DEFAULT_INDEX = "pip's default index"
TOOLKIT_PACKAGES = {"cuda": "cuda-toolkit[nvcc,cccl,cudart]"}  # PyPI: a whole toolkit root, nvidia/cu13/


@dataclass(frozen=True)
class Source:
    """Where one torch build or toolkit comes from: an exact version from an index ("pypi" = pip's default)."""

    package: str  # distribution (with extras), e.g. "torch", "cuda-toolkit[nvcc,cccl,cudart]"
    version: str  # exact, e.g. "2.13.0", "13.0.3"
    index: str = PYPI

    @property
    def name(self) -> str:
        return self.package.split("[")[0]

    @property
    def where(self) -> str:
        return "PyPI" if self.index == PYPI else self.index


@dataclass(frozen=True)
class Matrix:
    """The parsed matrix file: variants in file order, and where their torch builds and toolkits come from
    ([sources]; rows without an entry need an index this tool does not know, e.g. the PyTorch wheel index,
    given per backend in the optional [torch-index])."""

    path: Path
    variants: tuple[Variant, ...]
    torch_index: dict[str, str] = field(default_factory=dict)
    torch_sources: dict[str, Source] = field(default_factory=dict)  # "2.13-cu130" -> torch 2.13.0 from pypi
    toolkit_sources: dict[str, Source] = field(default_factory=dict)  # "cuda-13.0" -> cuda-toolkit 13.0.3

    def index_for(self, variant: Variant) -> str:
        """Where torch comes from for this variant, in words: [sources.torch]'s index, else [torch-index]'s
        URL, else pip's default index (metal) or a note that the PyTorch wheel index is needed."""
        src = self.torch_source(variant)
        if src is not None:
            return src.where
        template = self.torch_index.get(variant.backend)
        if template is None:
            if variant.backend in ("cuda", "rocm"):
                return "the PyTorch wheel index (add its URL to [torch-index] to build it here)"
            return DEFAULT_INDEX
        return template.replace("{compute}", variant.compute).replace("{toolkit}", variant.toolkit or "")

    def has_index(self, variant: Variant) -> bool:
        """An explicit [torch-index] URL template exists for this variant's backend (`--create-envs`)."""
        return variant.backend in self.torch_index

    def torch_source(self, variant: Variant) -> Source | None:
        if variant.stable:  # any torch from the floor on compiles it: the newest listed for its compute
            fits = [
                (minor_key(key.split("-")[0]), src)
                for key, src in self.torch_sources.items()
                if key.endswith(f"-{variant.compute}") and minor_key(key.split("-")[0]) >= minor_key(variant.torch)
            ]
            return max(fits, key=lambda f: f[0])[1] if fits else None
        return self.torch_sources.get(f"{variant.torch}-{variant.compute}")

    def toolkit_source(self, variant: Variant) -> Source | None:
        return self.toolkit_sources.get(f"{variant.backend}-{variant.toolkit}") if variant.toolkit else None

    def select(self, patterns: tuple[str, ...] | list[str] | None) -> tuple[Variant, ...]:
        """Variants whose name matches any glob; no patterns = all. A pattern matching nothing is an error
        (a typo must not silently build nothing)."""
        if not patterns:
            return self.variants
        for pat in patterns:
            if not any(fnmatch.fnmatchcase(v.name, pat) for v in self.variants):
                raise ConfigError(
                    f"--variant {pat!r} matches no variant of {self.path.name}",
                    "run `ggml-vendor variants` to see the names",
                )
        return tuple(v for v in self.variants if any(fnmatch.fnmatchcase(v.name, p) for p in patterns))


def _strings(value: Any, what: str, where: str) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(x, str) for x in value):
        raise ConfigError(f"{where}: {what} must be a non-empty list of strings", "fix the matrix file")
    return list(value)


TOP_KEYS = ("schema", "torch", "build", "sources", "torch-index")
ROW_KEYS = ("backend", "torch", "toolkits", "systems", "abi")


def minor_key(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split("."))


def refuse_unknown(keys: object, known: tuple[str, ...], where: str) -> None:
    """One line naming the first key outside `known` and the nearest valid one: a misspelt table
    (`[sourcs.torch]`, `[torch-indx]`) must not be ignored (it would turn provisionable rows into "built
    elsewhere")."""
    import difflib

    for key in keys:  # type: ignore[attr-defined]
        if key not in known:
            near = difflib.get_close_matches(str(key), known, n=1, cutoff=0.5)
            hint = f"did you mean {near[0]!r}?" if near else f"valid: {', '.join(known)}"
            raise ConfigError(f"{where}: unknown key {key!r}", f"{hint} (fix the matrix file)")


def parse_matrix(text: str, path: Path) -> Matrix:
    where = str(path)
    try:
        doc = tomlkit.parse(text).unwrap()
    except Exception as exc:  # tomlkit raises several parse error types
        raise ConfigError(f"{where}: not valid TOML ({exc})", "fix the matrix file") from None
    refuse_unknown(doc, TOP_KEYS, where)
    if doc.get("schema", 1) != 1:
        raise ConfigError(f"{where}: unsupported schema {doc.get('schema')!r}", "use schema = 1")
    rows = doc.get("build")
    if not isinstance(rows, list) or not rows:
        raise ConfigError(f"{where}: no [[build]] rows", "add at least one [[build]] table")
    seen: dict[str, Variant] = {}
    for i, row in enumerate(rows):
        for v in _row_variants(row, doc.get("torch"), f"{where} [[build]] #{i + 1}"):
            seen.setdefault(v.name, v)  # duplicates across rows collapse to one variant
    index = doc.get("torch-index", {})
    if not isinstance(index, dict) or not all(isinstance(v, str) for v in index.values()):
        raise ConfigError(f"{where}: [torch-index] must map backend -> index URL", "fix the matrix file")
    refuse_unknown(index, ALL_BACKENDS, f"{where} [torch-index]")
    torch_sources, toolkit_sources = _parse_sources(doc.get("sources", {}), where)
    return Matrix(path, tuple(seen.values()), dict(index), torch_sources, toolkit_sources)


def _row_variants(row: dict[str, Any], default_torch: Any, here: str) -> list[Variant]:
    """The variants one [[build]] row expands to (torch x toolkits x systems)."""
    refuse_unknown(row, ROW_KEYS, here)
    backend = row.get("backend")
    if backend not in ALL_BACKENDS:
        raise ConfigError(f"{here}: backend {backend!r} is not one of {ALL_BACKENDS}", "fix the matrix file")
    torches = _strings(row.get("torch", default_torch), "torch", here)
    systems = _strings(row.get("systems"), "systems", here)
    if backend in BACKENDS_WITH_TOOLKIT:
        toolkits: list[str | None] = list(_strings(row.get("toolkits"), "toolkits", here))
    elif "toolkits" in row:
        raise ConfigError(f"{here}: backend {backend} takes no toolkits", "remove toolkits from this row")
    else:
        toolkits = [None]
    for version in [*torches, *(t for t in toolkits if t)]:
        if not _VERSION_RE.match(version):
            raise ConfigError(f"{here}: version {version!r} is not MAJOR.MINOR", 'write e.g. "2.14" or "13.0"')
    for system in systems:
        if system not in SYSTEMS:
            raise ConfigError(f"{here}: system {system!r} is not one of {SYSTEMS}", "fix the matrix file")
    if backend == "metal" and any(s != "aarch64-darwin" for s in systems):
        raise ConfigError(f"{here}: metal variants exist only for aarch64-darwin", "fix systems")
    abi = _row_abi(row, backend, here)
    return [
        Variant(torch, backend, toolkit, system.split("-")[0], system.split("-")[1], stable=abi == "stable")
        for torch in torches
        for toolkit in toolkits
        for system in systems
    ]


def _row_abi(row: dict[str, Any], backend: str, here: str) -> str:
    """The row's `abi`: "torch" (per-torch, the default) or "stable" (CUDA only, docs/stable-abi.md)."""
    abi = row.get("abi", "torch")
    if abi not in ("torch", "stable"):
        raise ConfigError(f'{here}: abi {abi!r} is not "torch" or "stable"', "fix the matrix file")
    if abi == "stable" and backend not in STABLE_BACKENDS:
        raise ConfigError(
            f'{here}: abi = "stable" is built for {", ".join(STABLE_BACKENDS)} only, not {backend}',
            "keep per-torch rows for this backend (docs/stable-abi.md says why)",
        )
    return str(abi)


def _parse_sources(sources: Any, where: str) -> tuple[dict[str, Source], dict[str, Source]]:
    """[sources.torch] and [sources.toolkit]: where a missing torch build / toolkit is provisioned from."""
    if not isinstance(sources, dict):
        raise ConfigError(f"{where}: [sources] has only [sources.torch] and [sources.toolkit]", "fix the matrix file")
    refuse_unknown(sources, ("torch", "toolkit"), f"{where} [sources]")
    torch_sources = {
        k: _source(f"{where} [sources.torch] {k!r}", v, "torch", _TORCH_KEY)
        for k, v in sources.get("torch", {}).items()
    }
    toolkit_sources = {}
    for k, v in sources.get("toolkit", {}).items():
        here = f"{where} [sources.toolkit] {k!r}"
        m = _TOOLKIT_KEY.match(k)
        if not m or m[1] not in TOOLKIT_PACKAGES:
            raise ConfigError(
                f"{here}: key must be <backend>-<MAJOR.MINOR> with backend in {list(TOOLKIT_PACKAGES)}",
                'e.g. "cuda-13.0"',
            )
        toolkit_sources[k] = _source(here, v, TOOLKIT_PACKAGES[m[1]], _TOOLKIT_KEY)
    return torch_sources, toolkit_sources


_TORCH_KEY = re.compile(r"^\d+\.\d+-(cu\d+|rocm\d+|cpu|metal)$")
_TOOLKIT_KEY = re.compile(r"^([a-z]+)-(\d+\.\d+)$")


def _source(here: str, value: Any, package: str, key_re: re.Pattern[str]) -> Source:
    key = here.rsplit(" ", 1)[-1].strip("'")
    if not key_re.match(key):
        raise ConfigError(f"{here}: key is not <torch MAJOR.MINOR>-<compute>", 'e.g. "2.13-cu130"')
    if not isinstance(value, dict) or set(value) - {"version", "index"} or not isinstance(value.get("version"), str):
        raise ConfigError(f'{here}: must be {{ version = "X.Y.Z", index = "pypi" }}', "fix the matrix file")
    version, index = value["version"], value.get("index", PYPI)
    if not re.match(r"^\d+(\.\d+)+$", version):
        raise ConfigError(f"{here}: version {version!r} is not an exact release (X.Y.Z)", "pin an exact version")
    prefix = key.split("-")[-1] if package != "torch" else key.split("-")[0]
    if not (version == prefix or version.startswith(prefix + ".")):
        raise ConfigError(f"{here}: version {version} does not belong to {prefix}", "fix the version or the key")
    return Source(package, version, str(index))


def load_matrix(path: Path) -> Matrix:
    if not path.is_file():
        raise ConfigError(
            f"variant matrix {path} does not exist",
            "create it (see variants/ggml-attn-kernels.toml) or fix the package's `variants` key in pyproject.toml",
        )
    return parse_matrix(path.read_text(), path)
