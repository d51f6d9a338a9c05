"""One package's declaration: its ops' entry files (Entry, Op), the Package they make, and how a
[tool.ggml-vendor.packages.<name>] table and the shared table's defaults are read into them, each key's type
and shape checked (one ConfigError line per mistake). Apart from config.py, which loads the whole project
into a Config view, because reading and checking the tables is a job of its own."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit.core import package_checks
from toolkit.core.errors import ConfigError
from toolkit.core.errors import did_you_mean as _nearest

TABLE = "ggml-vendor"
KNOWN_BACKENDS = ("cuda", "metal", "rocm")


@dataclass(frozen=True)
class Entry:
    """One upstream entry file of an op, as alternatives tried in order (standalone-ggml layout paths)."""

    alternatives: tuple[str, ...]

    def __str__(self) -> str:
        return " | ".join(self.alternatives)


@dataclass(frozen=True)
class Op:
    name: str
    entries: dict[str, tuple[Entry, ...]]  # backend -> entry files


# Keys of the shared table ([tool.ggml-vendor]): the project's one upstream, and defaults every package may narrow.
SHARED_KEYS = ("license", "upstream", "backends", "cuda-archs", "rocm-archs", "packages")
# Keys of [tool.ggml-vendor.packages.<name>]: everything that makes a package other than the shared pin.
PACKAGE_KEYS = (
    "version",
    "hub-repo",
    "module",
    "templates",
    "variants",
    "backends",
    "cuda-archs",
    "rocm-archs",
    "ops",
)
# Lock keys of a package's ops are qualified with the package name: "<package>:<op>".
KEY_SEPARATOR = ":"
BUILD = "build"  # build/<package>/: the package's rendered source (src/) and its variants
SOURCE = "src"


@dataclass(frozen=True)
class Package:
    """One kernel package of the project: its Hub identity, templates, matrix and ops. Every package has the same
    shape: templates/<name>/ (or `templates`), variants/<name>.toml (or `variants`), build/<name>/src/ (the
    rendered source) and build/<name>/<variant>/ (what build makes)."""

    name: str
    version: int
    hub_repo: str
    module: str
    templates: str  # relative to the project root (POSIX)
    variants: str
    backends: tuple[str, ...]
    cuda_archs: tuple[str, ...]
    ops: tuple[Op, ...]
    rocm_archs: tuple[str, ...] = ()  # () : kernel-builder's list (ggml_facts.ROCM_ARCHS)

    def key(self, op: str) -> str:
        """The op's key in vendor/UPSTREAM (entries, closures, needed-by, behaviour)."""
        return f"{self.name}{KEY_SEPARATOR}{op}"

    @property
    def build_subdir(self) -> str:
        """build/<package>/: its variants, and src/ (its rendered source)."""
        return self.name

    @property
    def source(self) -> str:
        """Where render writes the package's build.toml, torch-ext/ and csrc/, relative to the project root."""
        return f"{BUILD}/{self.name}/{SOURCE}"


def require(table: dict[str, Any], key: str, kind: type, where: str) -> Any:
    if key not in table:
        table_name = where.rsplit(" ", 1)[-1] if where.endswith("]") else f"[tool.{TABLE}]"
        raise ConfigError(f"{where}: missing key '{key}'", f"add {key} = ... under {table_name}")
    value = table[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ConfigError(f"{where}: '{key}' must be a {kind.__name__}, got {value!r}", "fix pyproject.toml")
    return value


def _parse_entries(op: str, backend: str, raw: Any, where: str) -> tuple[Entry, ...]:
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{where}: ops.{op}.{backend} must be a non-empty list of paths", "fix pyproject.toml")
    entries = []
    for item in raw:
        alts = (item,) if isinstance(item, str) else tuple(item) if isinstance(item, list) else ()
        if not alts or not all(
            isinstance(a, str) and a and not a.startswith("/") and ".." not in a.split("/") for a in alts
        ):
            raise ConfigError(
                f"{where}: ops.{op}.{backend} entry {item!r} is not a relative path or list of paths",
                "use paths like src/ggml-cuda/gated_delta_net.cu",
            )
        entries.append(Entry(alts))
    return tuple(entries)


def _check_keys(table: dict[str, Any], known: tuple[str, ...], where: str) -> None:
    """Refuse a key the tool does not read (a typo would otherwise be ignored silently)."""
    for key in table:
        if key not in known:
            raise ConfigError(
                f"{where}: unknown key {key!r}{_nearest(key, known)}",
                f"valid keys: {', '.join(known)}",
            )


def _parse_backends(raw: Any, allowed: tuple[str, ...], where: str, key: str = "backends") -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(b, str) for b in raw):
        raise ConfigError(f"{where}: '{key}' must be a list of backend names, got {raw!r}", "fix pyproject.toml")
    for b in raw:
        if b not in allowed:
            raise ConfigError(
                f"{where}: unknown backend {b!r}{_nearest(b, allowed)}", f"use one of {', '.join(allowed)}"
            )
    return tuple(raw)


def _parse_ops(raw: Any, backends: tuple[str, ...], where: str) -> tuple[Op, ...]:
    """The ops table: op -> backend -> entry files; every op needs an entry for one of `backends`."""
    if not isinstance(raw, dict) or not raw:
        raise ConfigError(f"{where}: 'ops' must hold at least one [ops.<name>] table", "fix pyproject.toml")
    ops = []
    for op_name, per_backend in raw.items():
        if not isinstance(per_backend, dict):
            raise ConfigError(f"{where}: ops.{op_name} must be a table", "fix pyproject.toml")
        for b in per_backend:
            if b not in KNOWN_BACKENDS:
                raise ConfigError(
                    f"{where}: ops.{op_name}: unknown backend {b!r}{_nearest(b, KNOWN_BACKENDS)}",
                    f"use one of {', '.join(KNOWN_BACKENDS)}",
                )
        entries = {b: _parse_entries(op_name, b, v, where) for b, v in per_backend.items()}
        # rocm builds the CUDA sources as HIP, so a cuda entry serves it.
        served = {b for b in entries} | ({"rocm"} if "cuda" in entries else set())
        if not served & set(backends):
            raise ConfigError(
                f"{where}: op {op_name!r} has no entry file for any of the package's backends ({', '.join(backends)})",
                f'add e.g. cuda = ["src/ggml-cuda/<file>.cu"] to the ops.{op_name} table, or drop the op',
            )
        ops.append(Op(op_name, entries))
    return tuple(ops)


def _package(name: str, table: Any, shared: dict[str, Any], where: str) -> Package:
    """[tool.ggml-vendor.packages.<name>], over the shared table's defaults."""
    where = f"{where} [tool.{TABLE}.packages.{name}]"
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: must be a table", f"write it as [tool.{TABLE}.packages.{name}]")
    _check_keys(table, PACKAGE_KEYS, where)
    package_checks.check_name(name, where)
    backends = (
        _parse_backends(table["backends"], shared["backends"], where) if "backends" in table else shared["backends"]
    )
    return Package(
        name=name,
        version=package_checks.check_version(require(table, "version", int, where), where),
        hub_repo=package_checks.check_repo_id(require(table, "hub-repo", str, where), where),
        module=package_checks.check_module(table.get("module", name.replace("-", "_")), where),
        templates=_rel_path(table.get("templates", f"templates/{name}"), "templates", where),
        variants=_rel_path(table.get("variants", f"variants/{name}.toml"), "variants", where),
        backends=backends,
        cuda_archs=_archs(table["cuda-archs"], where) if "cuda-archs" in table else shared["cuda-archs"],
        ops=_parse_ops(require(table, "ops", dict, where), backends, where),
        rocm_archs=_archs(table["rocm-archs"], where, "rocm-archs") if "rocm-archs" in table else shared["rocm-archs"],
    )


def _rel_path(value: Any, key: str, where: str) -> str:
    if not isinstance(value, str) or not value or value.startswith("/") or ".." in value.split("/"):
        raise ConfigError(f"{where}: '{key}' must be a path inside the project, got {value!r}", "fix pyproject.toml")
    return value.rstrip("/") or "."


def _archs(value: Any, where: str, key: str = "cuda-archs") -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise ConfigError(f"{where}: '{key}' must be a list of strings, got {value!r}", 'use e.g. ["8.0", "9.0"]')
    return tuple(value)


def _shared(table: dict[str, Any], where: str) -> dict[str, Any]:
    """The shared table's defaults, checked."""
    _check_keys(table, SHARED_KEYS, where)
    return {
        "backends": _parse_backends(require(table, "backends", list, where), KNOWN_BACKENDS, where),
        "cuda-archs": _archs(table.get("cuda-archs", ["8.0", "9.0"]), where),
        "rocm-archs": _archs(table.get("rocm-archs", []), where, "rocm-archs"),
    }


def packages(root: Path, table: dict[str, Any], where: str, facts: bool = True) -> tuple[Package, ...]:
    """Every [packages.<name>] table, config order, checked alone and against each other (and, with `facts`,
    against its templates' facts.py)."""
    shared = _shared(table, where)
    raw = table.get("packages")
    if not isinstance(raw, dict) or not raw:
        raise ConfigError(
            f"{where}: no [tool.{TABLE}.packages.<name>] table", "declare a package, e.g. `ggml-vendor init NAME`"
        )
    packages = tuple(_package(str(n), t, shared, where) for n, t in raw.items())
    package_checks.check_family(packages, where)
    package_checks.check_paths(root, packages, where)
    from toolkit.core import package_facts  # lazily: it loads the packages' own facts files

    for pkg in packages if facts else ():
        package_facts.check_ops(root, pkg, f"{where} [tool.{TABLE}.packages.{pkg.name}]")
    return packages
