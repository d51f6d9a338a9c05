"""What a package's names and paths must be, checked once when the configuration loads: kernel and module
names, Hub repo ids (huggingface_hub's own validator), and paths that stay inside the project and apart from
vendor/, .git, build/ and every other package's, compared after resolving (so `./x` and `x/.` are one path, and
a symbolic link is followed to where it really points)."""

from __future__ import annotations

import keyword
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from toolkit.core.errors import ConfigError

if TYPE_CHECKING:
    from toolkit.core.package_table import Package

TABLE = "ggml-vendor"
# kernel-builder's KernelName rule (docs/hub-contract.md §1.2); checked here so a bad name fails at load,
# long before kernels' own parser sees the rendered build.toml. 64 characters: a Hub repo name's room.
NAME_RE = re.compile(r"^[a-z][-a-z0-9]{0,62}[a-z0-9]$")
# Project directories no package path may enter: upstream code, git's own, the build output.
OFF_LIMITS = ("vendor", ".git", "build")


def check_name(name: str, where: str) -> None:
    if not NAME_RE.match(name):
        raise ConfigError(
            f"{where}: name {name[:80]!r} is not a valid kernel name",
            "use 2 to 64 lowercase letters, digits and dashes, starting with a letter",
        )


def check_module(module: object, where: str) -> str:
    """A Python module name that imports as itself: an ASCII identifier, no keyword, no standard-library name
    (a kernel module called `os` would shadow the real one in every process that loads it)."""
    if not isinstance(module, str) or not module.isidentifier() or not module.isascii():
        raise ConfigError(f"{where}: module {module!r} is not an ASCII Python identifier", "use e.g. gguf_kernels")
    if keyword.iskeyword(module) or keyword.issoftkeyword(module):
        raise ConfigError(f"{where}: module {module!r} is a Python keyword", "use e.g. gguf_kernels")
    if module in sys.stdlib_module_names:
        raise ConfigError(f"{where}: module {module!r} is a standard-library module name", f"use e.g. {module}_kernels")
    return module


def check_version(value: object, where: str) -> int:
    """The major version: the Hub branch v<N>, so a whole number from 1."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{where}: 'version' must be a whole number from 1, got {value!r}", "e.g. version = 1")
    return value


def check_repo_id(repo_id: object, where: str) -> str:
    """`repo_id` as huggingface_hub validates it (owner/name), one line when it is not."""
    # From the modules that define them: huggingface_hub.utils re-exports both through a lazy-import table
    # that type checkers cannot read.
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils._validators import validate_repo_id

    try:
        if not isinstance(repo_id, str) or repo_id.count("/") != 1:
            raise HFValidationError("a Hub repo id is owner/name")
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        why = str(exc).splitlines()[0].rstrip(".")
        raise ConfigError(
            f"{where}: {repo_id!r} is not a Hub repo id ({why})", "use owner/name, e.g. you/my-kernels"
        ) from None
    return repo_id


def resolved(root: Path, rel: str, key: str, where: str) -> Path:
    """`rel` resolved against the project (links followed): inside it, outside vendor/, .git and build/."""
    path = (root / rel).resolve()
    base = root.resolve()
    if not path.is_relative_to(base) or path == base:
        raise ConfigError(
            f"{where}: '{key}' = {rel!r} resolves to {path}, outside the project's own directories",
            f"point {key} at a directory of its own inside {base} (a symbolic link may not leave the project)",
        )
    inside = path.relative_to(base).parts[0]
    if inside in OFF_LIMITS:
        raise ConfigError(
            f"{where}: '{key}' = {rel!r} resolves into {inside}/, which the tool owns",
            f"keep {key} out of {', '.join(d + '/' for d in OFF_LIMITS)}",
        )
    return path


def _overlap(a: Path, b: Path) -> bool:
    return a == b or a.is_relative_to(b) or b.is_relative_to(a)


def check_paths(root: Path, packages: Sequence[Package], where: str) -> None:
    """Every package's templates and variants inside the project (resolved), and no two packages sharing or
    nesting either: `templates/./x` and `templates/x/.` are the same directory."""
    seen: list[tuple[Path, str, str]] = []
    for pkg in packages:
        here = f"{where} [tool.{TABLE}.packages.{pkg.name}]"
        templates = resolved(root, pkg.templates, "templates", here)
        variants = resolved(root, pkg.variants, "variants", here)
        if templates.is_dir() and not any(templates.iterdir()):
            raise ConfigError(
                f"{here}: the templates directory {pkg.templates} is empty",
                f"restore it (git checkout {pkg.templates}) or run `ggml-vendor init {pkg.name}`",
            )
        for path, key in ((templates, "templates"), (variants, "variants")):
            for other, other_key, owner in seen:
                if _overlap(path, other):
                    raise ConfigError(
                        f"{here}: '{key}' resolves to {path.relative_to(root.resolve())}, which overlaps "
                        f"package {owner!r}'s {other_key}",
                        f"give [tool.{TABLE}.packages.{pkg.name}] its own {key}",
                    )
        seen += [(templates, "templates", pkg.name), (variants, "variants", pkg.name)]


def check_family(packages: Sequence[Package], where: str) -> None:
    """Two packages may share nothing that names them: module, Hub repo (the Hub ignores case)."""
    for attr, what, fold in (("module", "Python module", False), ("hub_repo", "Hub repo", True)):
        seen: dict[str, str] = {}
        for pkg in packages:
            value = getattr(pkg, attr)
            key = value.lower() if fold else value
            if key in seen:
                raise ConfigError(
                    f"{where}: packages {seen[key]!r} and {pkg.name!r} share the {what} {value!r}",
                    f"give [tool.{TABLE}.packages.{pkg.name}] its own {attr.replace('_', '-')}",
                )
            seen[key] = pkg.name
    # CI downloads a package's artifacts as "<package>-torch*" (toolkit.ci.workflow.VARIANT_PATTERN): a package
    # named "<other>-torch..." would have its artifacts collected with <other>'s.
    for pkg in packages:
        for other in packages:
            if pkg.name.startswith(f"{other.name}-torch"):
                raise ConfigError(
                    f"{where}: package {pkg.name!r} starts with {other.name!r} + '-torch', which CI's artifact "
                    f"pattern for {other.name!r} would also collect",
                    f"rename [tool.{TABLE}.packages.{pkg.name}]",
                )
