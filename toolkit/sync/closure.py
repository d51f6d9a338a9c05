"""The include closure: which upstream files an op's entry files need, found by following quoted #includes.

Pure over a `read(path) -> bytes | None` function (standalone-layout paths), so it is unit-tested with a
dict and run for real against a git snapshot. Includes are followed whatever #if they sit under (a
closure must build every configuration we ship: CUDA, HIP, ...); system includes (<...>) are left alone.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from toolkit.core import ggml_facts
from toolkit.core.errors import UpstreamError
from toolkit.core.package_table import Entry

Reader = Callable[[str], "bytes | None"]
_INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"\n]+)"')


@dataclass(frozen=True)
class OpClosure:
    """The files one op needs on one backend: its chosen entries first, then includes in discovery order."""

    op: str
    backend: str
    entries: tuple[str, ...]  # the alternative chosen for each configured entry
    files: tuple[str, ...]

    @property
    def key(self) -> str:
        return f"{self.op}/{self.backend}"


@dataclass(frozen=True)
class Closure:
    ops: tuple[OpClosure, ...]
    files: tuple[str, ...]  # union of all op closures, sorted
    reasons: Mapping[
        str, str
    ]  # path -> why it is there (first discovery: "entry of op/backend" or "included by f:line")
    needed_by: Mapping[str, tuple[str, ...]]  # path -> op/backend keys

    def for_op(self, op: str, backend: str) -> OpClosure | None:
        return next((c for c in self.ops if c.op == op and c.backend == backend), None)


def quoted_includes(text: str) -> list[tuple[int, str]]:
    """(line number, name) of every `#include "name"` outside comments."""
    found: list[tuple[int, str]] = []
    in_block = False
    for lineno, line in enumerate(text.splitlines(), 1):
        if not in_block and "/*" not in line:
            code = line
        else:
            code, i = "", 0
            while i < len(line):
                if in_block:
                    end = line.find("*/", i)
                    if end < 0:
                        break
                    in_block, i = False, end + 2
                else:
                    start, slash = line.find("/*", i), line.find("//", i)
                    if slash >= 0 and (start < 0 or slash < start):
                        code += line[i:slash]
                        break
                    if start < 0:
                        code += line[i:]
                        break
                    code += line[i:start] + " "
                    in_block, i = True, start + 2
        m = _INCLUDE_RE.match(code)
        if m:
            found.append((lineno, m.group(1).strip()))
    return found


def _escapes(path: str) -> bool:
    return path.startswith("/") or path == ".." or path.startswith("../")


def include_candidates(includer: str, name: str, roots: Iterable[str] = ggml_facts.INCLUDE_ROOTS) -> list[str]:
    """Where `#include "name"` in `includer` may resolve, in the compiler's order: next to the includer,
    then each include root. Normalised; may contain escaping paths (the caller refuses those)."""
    out: list[str] = []
    for base in (posixpath.dirname(includer), *roots):
        cand = posixpath.normpath(posixpath.join(base, name)) if base else posixpath.normpath(name)
        if cand not in out:
            out.append(cand)
    return out


def _choose_entry(entry: Entry, read: Reader, key: str, where: str) -> str:
    for alt in entry.alternatives:
        if read(alt) is not None:
            return alt
    tried = ", ".join(entry.alternatives)
    op = key.rsplit("/", 1)[0]
    package, sep, name = op.partition(":")  # a later package's op key is "<package>:<op>"
    table = f"[tool.ggml-vendor.packages.{package}.ops.{name}]" if sep else f"[tool.ggml-vendor.ops.{op}]"
    raise UpstreamError(
        f"entry file of {key} not found at {where} (tried {tried})",
        f"pick another --rev, or fix the op's entries in pyproject.toml {table}",
    )


def _include_graph(
    starts: list[str],
    read: Reader,
    fetch: Callable[[list[str]], None],
    where: str,
    roots: tuple[str, ...],
    suffixes: tuple[str, ...],
    optional: tuple[str, ...],
) -> dict[str, list[tuple[int, str]]]:
    """file -> [(line, resolved include)] for every file reachable from `starts`, walked breadth-first so
    that each level's blobs are fetched in one round trip."""
    graph: dict[str, list[tuple[int, str]]] = {}
    frontier = starts
    while frontier:
        parsed = {}
        for path in frontier:
            data = read(path) if path.endswith(suffixes) else None
            parsed[path] = quoted_includes(data.decode("utf-8", "replace")) if data is not None else []
        fetch(
            [
                c
                for path, incs in parsed.items()
                for _, name in incs
                for c in include_candidates(path, name, roots)
                if not _escapes(c)
            ]
        )
        following: list[str] = []
        for path, incs in parsed.items():
            edges = []
            for line, name in incs:
                hit = _resolve_include(path, line, name, read, where, roots, optional)
                if hit is None:
                    continue
                edges.append((line, hit))
                if hit not in graph and hit not in parsed and hit not in following:
                    following.append(hit)
            graph[path] = edges
        frontier = following
    return graph


def _resolve_include(
    path: str, line: int, name: str, read: Reader, where: str, roots: tuple[str, ...], optional: tuple[str, ...]
) -> str | None:
    """The file `#include "name"` in `path` resolves to; None for an optional include that is absent;
    UpstreamError naming file and line otherwise."""
    cands = include_candidates(path, name, roots)
    try:
        hit = next((c for c in cands if not _escapes(c) and read(c) is not None), None)
    except UpstreamError as exc:  # the reader refuses a candidate (one inside a git submodule, say)
        raise UpstreamError(f'{path}:{line}: #include "{name}": {exc.message}', exc.remedy) from None
    if hit is not None or name in optional:
        return hit
    if _escapes(cands[0]):
        raise UpstreamError(
            f'{path}:{line}: #include "{name}" points outside the ggml tree',
            "refusing to vendor it; pick another --rev or patch the include",
        )
    raise UpstreamError(
        f'{path}:{line}: #include "{name}" not found at {where} (looked in {", ".join(cands)})',
        "pick another --rev, or list it in ggml_facts.OPTIONAL_QUOTED_INCLUDES if no build takes that #if",
    )


def compute_closure(
    entries: list[tuple[str, str, Entry]],
    read: Reader,
    *,
    where: str = "the pinned revision",
    prefetch: Callable[[list[str]], None] | None = None,
    roots: tuple[str, ...] = ggml_facts.INCLUDE_ROOTS,
    suffixes: tuple[str, ...] = ggml_facts.FOLLOWED_SUFFIXES,
    optional: tuple[str, ...] = ggml_facts.OPTIONAL_QUOTED_INCLUDES,
) -> Closure:
    """Follow quoted includes from every (op, backend, entry); UpstreamError naming file and line for an
    include that resolves nowhere or outside the tree.

    The include graph is walked breadth-first over all entries at once, so a filtered URL cache fetches
    each level's blobs in one round trip (`prefetch`); each op's closure is then read off the graph."""
    fetch = prefetch or (lambda _paths: None)
    fetch([alt for _, _, entry in entries for alt in entry.alternatives])
    chosen: list[tuple[str, str, str]] = [(op, b, _choose_entry(e, read, f"{op}/{b}", where)) for op, b, e in entries]

    graph = _include_graph(
        list(dict.fromkeys(path for _, _, path in chosen)), read, fetch, where, roots, suffixes, optional
    )

    reasons: dict[str, str] = {}
    needed: dict[str, list[str]] = {}
    per_key: dict[tuple[str, str], tuple[list[str], list[str]]] = {}
    for op, backend, start in chosen:
        key = f"{op}/{backend}"
        starts, files = per_key.setdefault((op, backend), ([], []))
        starts.append(start)
        reasons.setdefault(start, f"entry of {key}")
        queue = [start]
        while queue:
            path = queue.pop(0)
            if path in files:
                continue
            files.append(path)
            needed.setdefault(path, [])
            if key not in needed[path]:
                needed[path].append(key)
            for line, hit in graph[path]:
                reasons.setdefault(hit, f"included by {path}:{line}")
                if hit not in files:
                    queue.append(hit)
    ops = tuple(OpClosure(op, b, tuple(st), tuple(files)) for (op, b), (st, files) in per_key.items())
    return Closure(
        ops=ops,
        files=tuple(sorted(reasons)),
        reasons=reasons,
        needed_by={p: tuple(sorted(v)) for p, v in needed.items()},
    )
