"""The project's own configuration: `[tool.ggml-vendor]` in pyproject.toml, loaded into frozen dataclasses.

Edits go through tomlkit so that comments and layout in pyproject.toml survive (`set_value`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomlkit

from toolkit.core.errors import ConfigError

TABLE = "ggml-vendor"
KNOWN_BACKENDS = ("cuda", "metal", "rocm")
# kernel-builder's KernelName rule (docs/hub-contract.md §1.2); checked here so a bad name fails at load,
# long before kernels' own parser sees the rendered build.toml.
_NAME_RE = re.compile(r"^[a-z][-a-z0-9]*[a-z0-9]$")


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


@dataclass(frozen=True)
class Config:
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
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def module(self) -> str:
        """Python module name of the kernel package (kernel-builder: name with - -> _)."""
        return self.name.replace("-", "_")

    @property
    def vendor_dir(self) -> Path:
        return self.root / "vendor"

    @property
    def build_dir(self) -> Path:
        return self.root / "build"

    @property
    def templates_dir(self) -> Path:
        return self.root / "templates"

    def entries_for(self, backends: tuple[str, ...] | None = None) -> list[tuple[str, str, Entry]]:
        """(op, backend, entry) for every enabled backend, in config order."""
        wanted = backends or self.backends
        return [
            (op.name, backend, entry)
            for op in self.ops
            for backend, entries in op.entries.items()
            if backend in wanted
            for entry in entries
        ]


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
        raise ConfigError(f"{where}: missing key '{key}'", f"add {key} = ... under [tool.{TABLE}]")
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


def load(root: Path | None = None) -> Config:
    """Load and validate [tool.ggml-vendor] from `root`/pyproject.toml (root found upwards if None)."""
    root = find_root(root)
    where = f"{root / 'pyproject.toml'} [tool.{TABLE}]"
    doc = parse_toml(root / "pyproject.toml").unwrap()
    table = doc["tool"][TABLE]
    name = _require(table, "name", str, where)
    if not _NAME_RE.match(name):
        raise ConfigError(f"{where}: name {name!r} is not a valid kernel name", "use lowercase letters, digits, dashes")
    backends = tuple(_require(table, "backends", list, where))
    for b in backends:
        if b not in KNOWN_BACKENDS:
            raise ConfigError(f"{where}: unknown backend {b!r}", f"use one of {', '.join(KNOWN_BACKENDS)}")
    ops_raw = _require(table, "ops", dict, where)
    ops = []
    for op_name, per_backend in ops_raw.items():
        if not isinstance(per_backend, dict):
            raise ConfigError(f"{where}: ops.{op_name} must be a table", "fix pyproject.toml")
        ops.append(Op(op_name, {b: _parse_entries(op_name, b, v, where) for b, v in per_backend.items()}))
    known = {"name", "version", "license", "hub-repo", "upstream", "variants", "backends", "cuda-archs", "ops"}
    return Config(
        root=root,
        name=name,
        version=_require(table, "version", int, where),
        license=_require(table, "license", str, where),
        hub_repo=_require(table, "hub-repo", str, where),
        upstream=_require(table, "upstream", str, where),
        variants_file=root / table.get("variants", "variants/default.toml"),
        backends=backends,
        cuda_archs=tuple(table.get("cuda-archs", ["8.0", "9.0"])),
        ops=tuple(ops),
        extra={k: v for k, v in table.items() if k not in known},
    )


def set_value(root: Path, key: str, value: Any) -> None:
    """Set [tool.ggml-vendor].<key> in place, keeping every comment and the file's layout."""
    path = root / "pyproject.toml"
    doc = parse_toml(path)
    doc["tool"][TABLE][key] = value
    tmp = path.with_suffix(".toml.tmp")
    tmp.write_text(tomlkit.dumps(doc))
    tmp.replace(path)
