"""The project's own configuration: `[tool.ggml-vendor]` in pyproject.toml, loaded into frozen dataclasses.

The shared table holds the project's upstream and the defaults (license, backends, cuda-archs, rocm-archs); each
package, the first one included, is a [tool.ggml-vendor.packages.<name>] table of the same shape. The names and
paths a package gives are checked in package_checks.py; the older one-package shape is read by config_legacy.py.

Edits go through tomlkit so that comments and layout in pyproject.toml survive (`set_value`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import tomlkit

from toolkit.core import config_legacy, package_checks
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


@dataclass(frozen=True)
class Config:
    """The project as one package sees it: shared fields (root, license, upstream) plus the package's own.
    `load` returns the view of the package declared first; `for_package(name)` any other's; `packages` lists
    them all (commands run over `selected`, every package alike)."""

    root: Path
    name: str
    version: int
    license: str
    hub_repo: str
    upstream: str
    variants_file: Path
    backends: tuple[str, ...]
    cuda_archs: tuple[str, ...]
    ops: tuple[Op, ...]
    rocm_archs: tuple[str, ...] = ()  # () : kernel-builder's list (ggml_facts.ROCM_ARCHS)
    packages: tuple[Package, ...] = ()
    package_name: str = ""  # the package this view is of ("" only for a hand-made Config: the first)

    @property
    def package(self) -> Package:
        """The package this view is of."""
        return next((p for p in self.packages if p.name == (self.package_name or self.name)), self._as_package())

    def _as_package(self) -> Package:
        return Package(
            self.name,
            self.version,
            self.hub_repo,
            self.name.replace("-", "_"),
            f"templates/{self.name}",
            self.variants_file.relative_to(self.root).as_posix(),
            self.backends,
            self.cuda_archs,
            self.ops,
        )

    @property
    def module(self) -> str:
        """Python module name of the kernel package (kernel-builder: name with - -> _, unless configured)."""
        return self.package.module

    @property
    def vendor_dir(self) -> Path:
        return self.root / "vendor"

    @property
    def package_root(self) -> Path:
        """The package's rendered source tree (build.toml, torch-ext/, csrc/): build/<name>/src/."""
        return self.root / self.package.source

    @property
    def build_dir(self) -> Path:
        """build/<name>/: the package's variants (and src/, its rendered source)."""
        return self.root / BUILD / self.package.build_subdir

    @property
    def reports_dir(self) -> Path:
        """build/reports/: what the project's one pin writes (drift and update reports), beside every package's
        build/<name>/."""
        return self.root / BUILD / "reports"

    @property
    def templates_dir(self) -> Path:
        return self.root / self.package.templates

    def lock_key(self, op: str) -> str:
        return self.package.key(op)

    def package_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.packages) or (self.name,)

    def for_package(self, name: str) -> Config:
        """This project seen as package `name`; ConfigError naming the nearest package otherwise."""
        pkg = next((p for p in self.packages if p.name == name), None)
        if pkg is None:
            raise ConfigError(
                f"no package {name!r} in [tool.{TABLE}]{_nearest(name, self.package_names())}",
                f"use one of {', '.join(self.package_names())}",
            )
        return replace(
            self,
            name=pkg.name,
            version=pkg.version,
            hub_repo=pkg.hub_repo,
            variants_file=self.root / pkg.variants,
            backends=pkg.backends,
            cuda_archs=pkg.cuda_archs,
            ops=pkg.ops,
            rocm_archs=pkg.rocm_archs,
            package_name=pkg.name,
        )

    def selected(self, names: tuple[str, ...] | list[str] | None = None) -> tuple[Config, ...]:
        """One view per package named (every package, in config order, when `names` is empty or None)."""
        wanted = list(dict.fromkeys(names or ()))
        if not wanted:
            return tuple(self.for_package(n) for n in self.package_names()) if self.packages else (self,)
        return tuple(self.for_package(n) for n in wanted)

    def entries_for(self, backends: tuple[str, ...] | None = None) -> list[tuple[str, str, Entry]]:
        """(op, backend, entry) of this package for every enabled backend, in config order."""
        wanted = backends or self.backends
        return [
            (op.name, backend, entry)
            for op in self.ops
            for backend, entries in op.entries.items()
            if backend in wanted and backend in self.backends
            for entry in entries
        ]

    def all_entries(self, backends: tuple[str, ...] | None = None) -> list[tuple[str, str, Entry]]:
        """(lock key, backend, entry) of every package: what one sync extracts (the union of the closures)."""
        if not self.packages:
            return self.entries_for(backends)
        return [
            (pkg.key(op.name), backend, entry)
            for pkg in self.packages
            for op in pkg.ops
            for backend, entries in op.entries.items()
            if backend in pkg.backends and (not backends or backend in backends)
            for entry in entries
        ]

    def package_of_key(self, key: str) -> str:
        """The package an op key of the lock belongs to ("" for a key of no declared package)."""
        head, sep, _ = key.partition(KEY_SEPARATOR)
        return head if sep and any(p.name == head for p in self.packages) else ""


def parse_toml(path: Path) -> tomlkit.TOMLDocument:
    """`path` parsed with tomlkit; a syntax error (or an unreadable file) is one ConfigError line naming
    the file, line and column, never a parser traceback."""
    try:
        return tomlkit.parse(path.read_text(encoding="utf-8"))
    except tomlkit.exceptions.ParseError as exc:
        line, col = getattr(exc, "line", None), getattr(exc, "col", None)
        at = f" at line {line}, column {col}" if line else ""
        what = str(exc).split(" at line ")[0]
        raise ConfigError(
            f"{path}: TOML syntax error{at}: {what}", "fix the file (tables are [name], keys key = value)"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}", "check the file exists and is UTF-8 text") from None


def find_root(start: Path | None = None) -> Path:
    """The nearest directory at or above `start` whose pyproject.toml has [tool.ggml-vendor]."""
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        pyproject = candidate / "pyproject.toml"
        if pyproject.is_file() and TABLE in parse_toml(pyproject).get("tool", {}):
            return candidate
    raise ConfigError(
        f"no pyproject.toml with [tool.{TABLE}] at or above {here}",
        "run inside the kernel package repository or pass --project PATH",
    )


def _require(table: dict[str, Any], key: str, kind: type, where: str) -> Any:
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
        version=package_checks.check_version(_require(table, "version", int, where), where),
        hub_repo=package_checks.check_repo_id(_require(table, "hub-repo", str, where), where),
        module=package_checks.check_module(table.get("module", name.replace("-", "_")), where),
        templates=_rel_path(table.get("templates", f"templates/{name}"), "templates", where),
        variants=_rel_path(table.get("variants", f"variants/{name}.toml"), "variants", where),
        backends=backends,
        cuda_archs=_archs(table["cuda-archs"], where) if "cuda-archs" in table else shared["cuda-archs"],
        ops=_parse_ops(_require(table, "ops", dict, where), backends, where),
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
        "backends": _parse_backends(_require(table, "backends", list, where), KNOWN_BACKENDS, where),
        "cuda-archs": _archs(table.get("cuda-archs", ["8.0", "9.0"]), where),
        "rocm-archs": _archs(table.get("rocm-archs", []), where, "rocm-archs"),
    }


def _packages(root: Path, table: dict[str, Any], where: str, facts: bool = True) -> tuple[Package, ...]:
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


def load(root: Path | None = None) -> Config:
    """Load and validate [tool.ggml-vendor] from `root`/pyproject.toml (root found upwards if None)."""
    root = find_root(root)
    return from_table(root, parse_toml(root / "pyproject.toml").unwrap()["tool"][TABLE])


def from_table(root: Path, table: Any, *, facts: bool = True) -> Config:
    """The project at `root` as `table` ([tool.ggml-vendor]) declares it: every package in `packages`, seen as
    the package declared first (`for_package` gives any other's view). `facts=False` leaves the packages' facts
    files unread (`init` checks a package whose templates it has not written yet)."""
    where = f"{root / 'pyproject.toml'} [tool.{TABLE}]"
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: must be a table", f"write it as [tool.{TABLE}]")
    if config_legacy.is_legacy(table):
        table = config_legacy.migrate(table, root)
    packages = _packages(root, table, where, facts)
    base = packages[0]
    return Config(
        root=root,
        name=base.name,
        version=base.version,
        license=_require(table, "license", str, where),
        hub_repo=base.hub_repo,
        upstream=_require(table, "upstream", str, where),
        variants_file=root / base.variants,
        backends=base.backends,
        cuda_archs=base.cuda_archs,
        ops=base.ops,
        rocm_archs=base.rocm_archs,
        packages=packages,
        package_name=base.name,
    )


def set_value(root: Path, key: str, value: Any, package: str | None = None) -> None:
    """Set [tool.ggml-vendor].<key> (or, with `package`, [tool.ggml-vendor.packages.<package>].<key>) in place,
    keeping every comment and the file's layout."""
    path = root / "pyproject.toml"
    doc = parse_toml(path)
    table = doc["tool"][TABLE]
    if package is not None:
        table = table["packages"][package]
    table[key] = value
    tmp = path.with_suffix(".toml.tmp")
    tmp.write_text(tomlkit.dumps(doc))
    tmp.replace(path)
