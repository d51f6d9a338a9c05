"""Edits of a copied project's pyproject.toml that tests make before running a stage on it."""

from __future__ import annotations

from pathlib import Path


def set_backends(root: Path, backends: list[str]) -> None:
    """Set the project's shared backends and narrow every declared package's own list to them (a package may only
    narrow the shared list: gguf-kernels declares cuda + metal)."""
    import tomlkit

    path = root / "pyproject.toml"
    doc = tomlkit.parse(path.read_text())
    table = doc["tool"]["ggml-vendor"]  # type: ignore[index]
    table["backends"] = backends  # type: ignore[index]
    for package in table.get("packages", {}).values():  # type: ignore[union-attr]
        if "backends" in package:
            package["backends"] = [b for b in package["backends"] if b in backends]
    path.write_text(tomlkit.dumps(doc))


def first_package_pyproject(text: str) -> str:
    """pyproject.toml text with the family's later packages ([tool.ggml-vendor.packages.*]) left out: for tests
    that build a one-package project (or add their own later packages) from this repository's configuration."""
    import tomlkit

    doc = tomlkit.parse(text)
    doc["tool"]["ggml-vendor"].pop("packages", None)  # type: ignore[union-attr]
    return tomlkit.dumps(doc)
