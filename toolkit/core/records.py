"""The JSON records the tool writes from its frozen dataclasses, and reads back from other runs (metadata.json,
.verified.json), whose shape is not trusted."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any


def fields_json(obj: object, names: str, **convert: Callable[[Any], Any]) -> dict[str, Any]:
    """{name: obj.name} for each of the space-separated `names`, in that order (the JSON's key order), a value
    passed through its converter in `convert` where one is given (`list` for a tuple, a nested record's to_json).

    A record's to_json names each key once this way, instead of writing `"key": self.key` for every field."""
    keys = names.split()
    unknown = sorted(set(convert) - set(keys))
    if unknown:  # a converter for a key that is not written is a misspelt name, not a no-op
        raise TypeError(f"fields_json: converters for keys it does not write: {', '.join(unknown)}")
    return {k: convert[k](getattr(obj, k)) if k in convert else getattr(obj, k) for k in keys}


def json_list(records: Iterable[Any]) -> list[Any]:
    """Each record's to_json, in order (fields_json's converter for a tuple of nested records)."""
    return [r.to_json() for r in records]


def sub_table(doc: Any, key: str) -> dict[str, Any]:
    """`doc[key]` when `doc` is a table and that entry is one too; else an empty table."""
    value = doc.get(key) if isinstance(doc, dict) else None
    return value if isinstance(value, dict) else {}
