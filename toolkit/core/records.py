"""Reading the JSON records other runs wrote (metadata.json, .verified.json), whose shape is not trusted."""

from __future__ import annotations

from typing import Any


def sub_table(doc: Any, key: str) -> dict[str, Any]:
    """`doc[key]` when `doc` is a table and that entry is one too; else an empty table."""
    value = doc.get(key) if isinstance(doc, dict) else None
    return value if isinstance(value, dict) else {}
