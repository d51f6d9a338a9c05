"""The one loader of a package's op facts (its templates directory's facts.py), joined with ggml's shared facts.

A package's facts file holds what belongs to its ops alone: kernel names, function constants, head dims,
kargs layouts, its CUDA units (CUDA_TU_FOR_OP, CUDA_OWN_UNITS), the ops its templates implement (OPS) and
the upstream regions (FINGERPRINTS) and functions (BEHAVIOUR) they depend on. toolkit.core.ggml_facts holds
what is true for every package. Render and verify see both as one namespace (`Facts`); sync fingerprints the
union over the family. Adding a package adds a facts file; the tool is not edited.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from toolkit.core import ggml_facts
from toolkit.core.errors import ConfigError, did_you_mean
from toolkit.core.ggml_facts import Behaviour, Fingerprint

if TYPE_CHECKING:
    from toolkit.core.config import Config
    from toolkit.core.package_table import Package

FACTS_FILE = "facts.py"
_cache: dict[tuple[str, int, int], dict[str, Any]] = {}


@dataclass(frozen=True)
class Facts:
    """A package's facts over ggml's: `facts.NAME` looks in the package's file first, then in ggml_facts.
    A package may not redefine a shared fact (the split would stop meaning anything)."""

    package: str
    path: Path | None  # the facts file, None when the package has none
    own: dict[str, Any]

    def __getattr__(self, name: str) -> Any:
        own = object.__getattribute__(self, "own")
        if name in own:
            return own[name]
        try:
            return getattr(ggml_facts, name)
        except AttributeError:
            where = object.__getattribute__(self, "path") or "its templates"
            raise AttributeError(f"no fact {name!r} in {where} nor in toolkit.core.ggml_facts") from None

    @property
    def ops(self) -> tuple[str, ...] | None:
        """The ops the package's templates implement (None: the facts file does not say)."""
        value = self.own.get("OPS")
        return tuple(value) if value is not None else None

    @property
    def fingerprints(self) -> tuple[Fingerprint, ...]:
        return tuple(self.own.get("FINGERPRINTS", ()))

    @property
    def behaviour(self) -> tuple[Behaviour, ...]:
        return tuple(self.own.get("BEHAVIOUR", ()))


def _exec(path: Path, package: str) -> dict[str, Any]:
    stat = path.stat()
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    if key in _cache:
        return _cache[key]
    spec = importlib.util.spec_from_file_location(f"ggml_vendor_facts_{package.replace('-', '_')}", path)
    module: ModuleType = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    try:
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    except (Exception, SystemExit) as exc:  # the project's own code: any failure (an exit too) is a config problem
        raise ConfigError(
            f"{path}: the facts file of package {package!r} fails to load ({type(exc).__name__}: {exc})",
            "fix the file (plain constants, Fingerprint and Behaviour from toolkit.core.ggml_facts)",
        ) from None
    # Shared facts the file imports (the very same objects) are not its own.
    own = {
        k: v
        for k, v in vars(module).items()
        if k.isupper() and not k.startswith("_") and getattr(ggml_facts, k, None) is not v
    }
    shared = sorted(k for k in own if hasattr(ggml_facts, k) and k != "FINGERPRINTS")
    if shared:
        raise ConfigError(
            f"{path}: redefines shared ggml facts {', '.join(shared)}",
            "keep facts that hold for every package in toolkit/core/ggml_facts.py, op facts in the package",
        )
    _cache[key] = own
    return own


def load(templates_dir: Path, package: str) -> Facts:
    """The facts of the package whose templates are in `templates_dir` (empty when it has no facts file)."""
    path = templates_dir / FACTS_FILE
    if not path.is_file():
        return Facts(package, None, {})
    return Facts(package, path, _exec(path, package))


def of_package(root: Path, pkg: Package) -> Facts:
    return load(root / pkg.templates, pkg.name)


def of(cfg: Config) -> Facts:
    """The facts of the package `cfg` is a view of."""
    return load(cfg.templates_dir, cfg.name)


def fingerprints(cfg: Config) -> tuple[Fingerprint, ...]:
    """The shared regions, then every package's, each name once (two packages may name the same region
    only with the same definition)."""
    seen: dict[str, Fingerprint] = {fp.name: fp for fp in ggml_facts.FINGERPRINTS}
    for pkg in cfg.packages or (cfg.package,):
        for fp in of_package(cfg.root, pkg).fingerprints:
            if fp.name in seen and seen[fp.name] != fp:
                raise ConfigError(
                    f"package {pkg.name!r} fingerprints {fp.name!r} differently from another package",
                    "give the region another name in one of the facts files, or make the two definitions equal",
                )
            seen[fp.name] = fp
    return tuple(seen.values())


def behaviour(cfg: Config) -> tuple[Behaviour, ...]:
    """Every package's behaviour functions, their op named by its lock key (`Package.key`)."""
    return tuple(
        replace(spec, op=pkg.key(spec.op))
        for pkg in cfg.packages or (cfg.package,)
        for spec in of_package(cfg.root, pkg).behaviour
    )


def check_ops(root: Path, pkg: Package, where: str) -> None:
    """Refuse an op the package's templates do not implement (when its facts file lists OPS)."""
    facts = of_package(root, pkg)
    if facts.path is None:
        raise ConfigError(
            f"{where}: package {pkg.name!r} has no {pkg.templates}/{FACTS_FILE}",
            f"restore it (git checkout {pkg.templates}), point templates at the package's, or run `ggml-vendor init`",
        )
    known = facts.ops
    if known is None:
        return
    for op in pkg.ops:
        if op.name not in known:
            raise ConfigError(
                f"{where}: package {pkg.name!r} has no op {op.name!r}{did_you_mean(op.name, known)}; its templates "
                f"implement {', '.join(known)}",
                f"fix the op's name, or add it to {pkg.templates}/{FACTS_FILE} OPS and write its templates",
            )
