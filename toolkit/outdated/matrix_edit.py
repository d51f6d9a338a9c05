"""New torch rows for a matrix file (variants/*.toml), written into the file as a person would: each [[build]]
row after the last row of its backend with a comment saying where it came from, each [sources] entry after the
last entry of its table. Every other byte (comments, blank lines, order) stays as it was.

tomlkit writes the values and checks the result: the edited document must parse, and must equal the old one
plus exactly the new rows and entries (compared as data), or nothing is written. Rows are inserted as text
because tomlkit attaches the comments that introduce a table to the end of the table before it, so appending
through its document would push a new row below the next section's introduction.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomlkit

from toolkit.build.matrix import PYPI, TOOLKIT_PACKAGES, parse_matrix
from toolkit.core.errors import ConfigError
from toolkit.outdated.releases import TorchBuild, TorchRelease

_HEADER_RE = re.compile(r"^\s*\[")
_KEY_RE = re.compile(r"^\s*[\"A-Za-z0-9_-]")


@dataclass(frozen=True)
class NewRow:
    """One [[build]] row to add: a torch minor, a backend, its toolkit, its systems."""

    torch: str
    backend: str
    toolkit: str  # "" for metal
    systems: tuple[str, ...]
    version: str  # the torch release that brought it (2.16.0)

    def table(self) -> dict[str, Any]:
        row: dict[str, Any] = {"backend": self.backend, "torch": [self.torch]}
        if self.toolkit:
            row["toolkits"] = [self.toolkit]
        row["systems"] = list(self.systems)
        return row

    def words(self) -> str:
        what = f"CUDA {self.toolkit}" if self.backend == "cuda" else self.backend
        return f"torch {self.torch} {what} on {', '.join(self.systems)}"


@dataclass(frozen=True)
class MatrixEdit:
    path: Path
    old: str
    new: str
    rows: tuple[NewRow, ...]
    sources: tuple[tuple[str, str, str], ...]  # (table, key, version) added under [sources.*]

    @property
    def changed(self) -> bool:
        return self.old != self.new

    def lines(self) -> list[str]:
        out = [f"{self.path.name}: + [[build]] {r.words()} (from torch {r.version})" for r in self.rows]
        out += [f"{self.path.name}: + [sources.{t}] {k} = {v}" for t, k, v in self.sources]
        return out


def new_rows(releases: Iterable[TorchRelease]) -> tuple[NewRow, ...]:
    """One row per (torch minor, backend, toolkit) the matrix lacks, with the systems the release offers."""
    grouped: dict[tuple[str, str, str], tuple[str, set[str]]] = {}
    for rel in releases:
        for b in rel.missing:
            key = (rel.minor, b.backend, b.toolkit_minor)
            grouped.setdefault(key, (rel.version, set()))[1].add(b.system)
    order = {"x86_64-linux": 0, "aarch64-linux": 1, "aarch64-darwin": 2}
    return tuple(
        NewRow(minor, backend, tk, tuple(sorted(systems, key=lambda s: order.get(s, 9))), version)
        for (minor, backend, tk), (version, systems) in sorted(grouped.items())
    )


def _value(v: Any) -> str:
    text: str = tomlkit.item(v).as_string()  # tomlkit.item of an Any value is typed Any
    return text


def _row_text(row: NewRow, index_words: str) -> list[str]:
    what = f"built for CUDA {row.toolkit}" if row.backend == "cuda" else f"the {row.backend} builds"
    lines = [
        f"# torch {row.torch}: added by `ggml-vendor update --torch` ({index_words} lists torch {row.version}, {what}).",
        "[[build]]",
    ]
    return lines + [f"{k} = {_value(v)}" for k, v in row.table().items()]


def _block_end(lines: list[str], start: int) -> int:
    """The index after the last key line of the table whose header is at `start`."""
    end = start + 1
    i = start + 1
    while i < len(lines) and not _HEADER_RE.match(lines[i]):
        if _KEY_RE.match(lines[i]):
            end = i + 1
        elif not lines[i].strip() or lines[i].lstrip().startswith("#"):
            # a blank line or a comment after the keys: the next section's introduction starts here
            if end > start + 1:
                break
        i += 1
    return end


def _insert_row(lines: list[str], row: NewRow, index_words: str) -> list[str]:
    heads = [i for i, ln in enumerate(lines) if ln.strip() == "[[build]]"]
    same = [i for i in heads if _backend_at(lines, i) == row.backend]
    at = _block_end(lines, (same or heads)[-1]) if heads else len(lines)
    return lines[:at] + ["", *_row_text(row, index_words)] + lines[at:]


def _backend_at(lines: list[str], head: int) -> str | None:
    for ln in lines[head + 1 : _block_end(lines, head)]:
        m = re.match(r'^\s*backend\s*=\s*"([^"]+)"', ln)
        if m:
            return m.group(1)
    return None


def _insert_source(lines: list[str], table: str, key: str, value: dict[str, str]) -> list[str]:
    entry = f"{_value(key)} = {{ " + ", ".join(f"{k} = {_value(v)}" for k, v in value.items()) + " }"
    header = f"[sources.{table}]"
    heads = [i for i, ln in enumerate(lines) if ln.strip() == header]
    if not heads:
        return [*lines, "", header, entry]
    at = _block_end(lines, heads[0])
    return lines[:at] + [entry] + lines[at:]


def _expected(doc: dict[str, Any], rows: tuple[NewRow, ...], sources: list[tuple[str, str, dict[str, str]]]) -> Any:
    want = dict(doc)
    want["build"] = [*doc.get("build", []), *(r.table() for r in rows)]
    src = {t: dict(v) for t, v in doc.get("sources", {}).items()}
    for table, key, value in sources:
        src.setdefault(table, {})[key] = value
    if src:
        want["sources"] = src
    return want


def _canonical(doc: dict[str, Any]) -> Any:
    """The document as data, rows in a stable order (a new row sits beside its backend's rows in the file)."""
    rows = sorted(doc.get("build", []), key=lambda r: repr(sorted(r.items())))
    return {**doc, "build": rows}


def add_torch_rows(path: Path, releases: Iterable[TorchRelease], index: str, index_words: str) -> MatrixEdit:
    """The matrix file at `path` with rows and [sources] entries for the releases' missing builds. `index` is what
    [sources.torch] records (PYPI for pip's default index, else its URL)."""
    old = path.read_text(encoding="utf-8")
    doc = tomlkit.parse(old).unwrap()
    rows = new_rows(releases)
    lines = old.splitlines()
    for row in rows:
        lines = _insert_row(lines, row, index_words)
    sources = _sources_for(doc, releases, index)
    for table, key, value in sources:
        lines = _insert_source(lines, table, key, value)
    new = "\n".join(lines) + ("\n" if old.endswith("\n") else "")
    got = tomlkit.parse(new).unwrap()
    if _canonical(got) != _canonical(_expected(doc, rows, sources)):
        raise ConfigError(
            f"{path}: adding the torch rows would change more than the rows (the file's layout is unusual)",
            "add them by hand: " + "; ".join(r.words() for r in rows),
        )
    parse_matrix(new, path)  # the matrix's own rules (names, versions, sources) hold for the result
    return MatrixEdit(path, old, new, rows, tuple((t, k, v["version"]) for t, k, v in sources))


def _sources_for(
    doc: dict[str, Any], releases: Iterable[TorchRelease], index: str
) -> list[tuple[str, str, dict[str, str]]]:
    have_torch = doc.get("sources", {}).get("torch", {})
    have_tk = doc.get("sources", {}).get("toolkit", {})
    out: list[tuple[str, str, dict[str, str]]] = []
    for rel in releases:
        for b in _distinct(rel.missing):
            key = f"{rel.minor}-{b.compute}"
            if key not in have_torch and all(k != key for _, k, _ in out):
                out.append(("torch", key, {"version": rel.version} | ({} if index == PYPI else {"index": index})))
            tk_key = f"{b.backend}-{b.toolkit_minor}"
            if (
                b.toolkit
                and b.backend in TOOLKIT_PACKAGES
                and tk_key not in have_tk
                and all(k != tk_key for _, k, _ in out)
            ):
                out.append(("toolkit", tk_key, {"version": b.toolkit} | ({} if index == PYPI else {"index": index})))
    return out


def _distinct(builds: Iterable[TorchBuild]) -> list[TorchBuild]:
    seen: dict[str, TorchBuild] = {}
    for b in builds:
        seen.setdefault(b.compute, b)
    return list(seen.values())


__all__ = ["MatrixEdit", "NewRow", "add_torch_rows", "new_rows"]
