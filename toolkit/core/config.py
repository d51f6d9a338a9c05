"""The project's own configuration: `[tool.ggml-vendor]` in pyproject.toml, loaded into frozen dataclasses.

The shared table holds the project's upstream and the defaults (license, backends, cuda-archs, rocm-archs); each
package, the first one included, is a [tool.ggml-vendor.packages.<name>] table of the same shape, read by
package_table.py (Entry, Op, Package). The names and paths a package gives are checked in package_checks.py;
the older one-package shape is read by config_legacy.py.

Edits go through tomlkit so that comments and layout in pyproject.toml survive (`set_value`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import tomlkit

from toolkit.core import config_legacy
from toolkit.core.errors import ConfigError
from toolkit.core.errors import did_you_mean as _nearest
from toolkit.core.package_table import BUILD, KEY_SEPARATOR, TABLE, Entry, Op, Package, packages, require


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
    declared = packages(root, table, where, facts)
    base = declared[0]
    return Config(
        root=root,
        name=base.name,
        version=base.version,
        license=require(table, "license", str, where),
        hub_repo=base.hub_repo,
        upstream=require(table, "upstream", str, where),
        variants_file=root / base.variants,
        backends=base.backends,
        cuda_archs=base.cuda_archs,
        ops=base.ops,
        rocm_archs=base.rocm_archs,
        packages=declared,
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
