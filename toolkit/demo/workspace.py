"""The demo's workspace: a copy of the project's configuration pointed at the embedded miniature upstream
(or a real one) and at a local Hub, and which packages the miniature can serve (those whose entry files it
lacks are left out; those it holds as closure-only stand-ins are only rendered and planned). Apart from the
stage (toolkit/demo/__init__.py) because tests and the replay helpers make such workspaces on their own."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit.core.config import Config
from toolkit.core.config import load as load_config
from toolkit.core.errors import VendorError

DEMO_OWNER = "ggml-demo"
DEMO_REPO = f"{DEMO_OWNER}/ggml-attn-kernels"
DEMO_TOKEN = "hf_demo_local_only"
# What the workspace copies from the project: its configuration and templates, never vendor/ or build/.
COPIED = ("pyproject.toml", "variants", "templates")
# What the miniature's closure-only stand-ins say in their first line: they carry a package's closure (names,
# includes, declarations) for sync, render and the build plan, but no kernels to compile.
STAND_IN_MARK = b"closure-only stand-in"


@dataclass(frozen=True)
class LeftOut:
    """A package the workspace leaves out: the embedded miniature lacks its entry files."""

    package: str
    missing: tuple[str, ...]

    def detail(self) -> str:
        return (
            f"skipped: its entry files {', '.join(self.missing)} are not in the embedded miniature upstream "
            "(run the demo with --upstream PATH to a ggml clone to include it)"
        )


def source_project(start: Path | None) -> Path:
    """The project whose configuration the demo copies: --project, else the nearest one, else the tool's own
    repository (a source checkout installed with pip -e)."""
    from toolkit.core.config import find_root

    try:
        return find_root(start)
    except VendorError:
        here = Path(__file__).resolve().parents[2]
        if (here / "pyproject.toml").is_file() and (here / "templates").is_dir():
            return here
        raise


def make_workspace(
    source: Path, dest: Path, upstream: str | None = None, left_out: tuple[str, ...] | None = None
) -> Path:
    """A copy of the project's configuration pointing at the embedded miniature upstream (or `upstream`),
    without the packages `left_out` (None: those the miniature cannot serve, see `left_out`)."""
    from toolkit.core.config import set_value
    from toolkit.sync.embedded import EMBEDDED

    dest.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        src = source / name
        if src.is_dir():
            shutil.copytree(src, dest / name, dirs_exist_ok=True)
        elif src.is_file():
            shutil.copy2(src, dest / name)
    # Patches target the real upstream; the miniature is our own code and needs none.
    (dest / "vendor" / "patches").mkdir(parents=True, exist_ok=True)
    set_value(dest, "upstream", upstream or EMBEDDED)
    if left_out is None:
        left_out = tuple(x.package for x in packages_left_out(load_config(source), embedded=upstream is None))
    _packages_for_demo(dest, left_out)
    return dest


def demo_repo(package: str) -> str:
    """The local test Hub's repo of a package (DEMO_REPO for ggml-attn-kernels)."""
    return f"{DEMO_OWNER}/{package}"


def miniature() -> Mapping[str, bytes]:
    from toolkit.sync.embedded import mini_files

    return mini_files()


def _entries_in(pkg: Any, have: Mapping[str, bytes]) -> list[tuple[Any, str | None]]:
    """Each entry file of the package with the alternative of it the miniature holds (None: none)."""
    return [
        (entry, next((alt for alt in entry.alternatives if alt in have), None))
        for op in pkg.ops
        for entries in op.entries.values()
        for entry in entries
    ]


def missing_in_miniature(pkg: Any, have: Mapping[str, bytes] | None = None) -> list[str]:
    """The package's entry files (no alternative present) that the embedded miniature does not hold."""
    return [str(entry) for entry, found in _entries_in(pkg, miniature() if have is None else have) if found is None]


def packages_left_out(cfg: Config, *, embedded: bool, have: Mapping[str, bytes] | None = None) -> tuple[LeftOut, ...]:
    """The packages a workspace on the embedded miniature cannot serve (none on a real upstream)."""
    if not embedded:
        return ()
    have = miniature() if have is None else have
    found = ((pkg.name, tuple(missing_in_miniature(pkg, have))) for pkg in cfg.packages)
    return tuple(LeftOut(name, missing) for name, missing in found if missing)


def stand_in_entries(pkg: Any, have: Mapping[str, bytes] | None = None) -> list[str]:
    """The package's entry files that the embedded miniature holds as closure-only stand-ins."""
    have = miniature() if have is None else have
    found = (f for _, f in _entries_in(pkg, have) if f is not None)
    return list(dict.fromkeys(f for f in found if STAND_IN_MARK in have[f].split(b"\n", 1)[0]))


def _packages_for_demo(dest: Path, left_out: tuple[str, ...]) -> None:
    """Point each package at its demo Hub repo, and drop those left out."""
    import tomlkit

    from toolkit.core import fs
    from toolkit.core.config import parse_toml
    from toolkit.core.package_table import TABLE

    cfg = load_config(dest)
    doc = parse_toml(dest / "pyproject.toml")
    tables = doc["tool"][TABLE].get("packages", {})
    for pkg in cfg.packages:
        if pkg.name in left_out:
            del tables[pkg.name]
        else:
            tables[pkg.name]["hub-repo"] = demo_repo(pkg.name)
    fs.atomic_write(dest / "pyproject.toml", tomlkit.dumps(doc).encode("utf-8"))


def stand_in_reason(stand_ins: list[str]) -> str:
    return (
        f"the embedded miniature's {', '.join(stand_ins)} are closure-only stand-ins (run the demo "
        "with --upstream PATH to a ggml clone to build it)"
    )
