"""core.records.fields_json: a record's JSON keys, in the order named, through their converters."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from toolkit.core.records import fields_json, json_list


@dataclass(frozen=True)
class _Inner:
    n: int

    def to_json(self) -> dict[str, int]:
        return {"n": self.n}


@dataclass(frozen=True)
class _Record:
    a: str
    b: tuple[int, ...]
    inner: tuple[_Inner, ...]

    @property
    def twice(self) -> str:
        return self.a * 2


def test_keys_in_the_order_named_with_converters_and_properties() -> None:
    r = _Record("x", (1, 2), (_Inner(3),))
    doc = fields_json(r, "twice b a inner", b=list, inner=json_list)
    assert list(doc) == ["twice", "b", "a", "inner"]
    assert doc == {"twice": "xx", "b": [1, 2], "a": "x", "inner": [{"n": 3}]}
    assert fields_json(r, "b")["b"] == (1, 2)  # no converter: the value as it is


def test_a_converter_for_a_key_not_written_is_an_error() -> None:
    with pytest.raises(TypeError, match="inners"):
        fields_json(_Record("x", (), ()), "a inner", inners=json_list)


def test_a_misspelt_key_is_an_error() -> None:
    with pytest.raises(AttributeError):
        fields_json(_Record("x", (), ()), "a c")
