"""The one-package shape of [tool.ggml-vendor] (the package's keys in the shared table itself), read as the
shape every package has now: migrated in memory, with one line of notice, and never rewritten behind the user's
back (a plan stays pure). docs/packages.md shows the table to write instead."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolkit.core import ui

TABLE = "ggml-vendor"
# What only the one-package shape has in the shared table.
LEGACY_KEYS = ("name", "version", "hub-repo", "variants", "ops")
LEGACY_VARIANTS = "variants/default.toml"
_noticed: set[Path] = set()


def is_legacy(table: dict[str, Any]) -> bool:
    return "name" in table


def migrate(table: dict[str, Any], root: Path) -> dict[str, Any]:
    """`table` in the shape of today: the shared table's package keys become [packages.<name>] (declared first),
    a later package's `root` is dropped (every package renders into build/<name>/src/ now). The templates stay
    where they are until moved (`templates`, or templates/<name>/ once it exists)."""
    shared = {k: v for k, v in table.items() if k not in LEGACY_KEYS and k != "packages"}
    name = table["name"]
    own = {k: v for k, v in table.items() if k in LEGACY_KEYS and k != "name"}
    own.setdefault("variants", LEGACY_VARIANTS)
    own.setdefault("templates", f"templates/{name}" if (root / "templates" / name).is_dir() else "templates")
    later = table.get("packages", {})
    packages = {name: own}
    if isinstance(later, dict):
        packages |= {
            n: ({k: v for k, v in t.items() if k != "root"} if isinstance(t, dict) else t) for n, t in later.items()
        }
    if root not in _noticed:
        _noticed.add(root)
        ui.warn(
            "notice:",
            f"{root / 'pyproject.toml'}: read the one-package [tool.{TABLE}] as [tool.{TABLE}.packages.{name}] "
            "(move name, version, hub-repo, variants and ops there to silence this; docs/packages.md)",
        )
    return {**shared, "packages": packages}
