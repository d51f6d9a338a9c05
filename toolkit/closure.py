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

from . import ggml_facts
from .config import Entry
from .errors import UpstreamError

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
    reasons: Mapping[str, str]  # path -> why it is there (first discovery: "entry of op/backend" or "included by f:line")
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
    raise UpstreamError(f"entry file of {key} not found at {where} (tried {tried})",
                        "pick another --rev, or fix the op's entries in pyproject.toml [tool.ggml-vendor.ops]")


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
    include that resolves nowhere or outside the tree."""
    reasons: dict[str, str] = {}
    needed: dict[str, list[str]] = {}
    per_key: dict[tuple[str, str], tuple[list[str], list[str]]] = {}
    scanned: dict[str, list[tuple[int, str, str]]] = {}  # file -> [(line, name, resolved)]

    def includes_of(path: str) -> list[tuple[int, str, str]]:
        if path in scanned:
            return scanned[path]
        if not path.endswith(suffixes):
            scanned[path] = []
            return []
        data = read(path)
        assert data is not None
        incs = quoted_includes(data.decode("utf-8", "replace"))
        if prefetch is not None:
            prefetch([c for _, name in incs for c in include_candidates(path, name, roots) if not _escapes(c)])
        out = []
        for line, name in incs:
            cands = include_candidates(path, name, roots)
            hit = next((c for c in cands if not _escapes(c) and read(c) is not None), None)
            if hit is None:
                if name in optional:
                    continue
                if all(_escapes(c) for c in cands) or _escapes(cands[0]):
                    raise UpstreamError(f"{path}:{line}: #include \"{name}\" points outside the ggml tree",
                                        "refusing to vendor it; pick another --rev or patch the include")
                raise UpstreamError(
                    f"{path}:{line}: #include \"{name}\" not found at {where} (looked in {', '.join(cands)})",
                    "pick another --rev, or list it in ggml_facts.OPTIONAL_QUOTED_INCLUDES if no build takes that #if")
            out.append((line, name, hit))
        scanned[path] = out
        return out

    for op, backend, entry in entries:
        key = f"{op}/{backend}"
        chosen, files = per_key.setdefault((op, backend), ([], []))
        start = _choose_entry(entry, read, key, where)
        chosen.append(start)
        reasons.setdefault(start, f"entry of {key}")
        queue = [start]
        while queue:
            path = queue.pop(0)
            if path in files:
                continue
            files.append(path)
            if key not in needed.setdefault(path, []):
                needed[path].append(key)
            for line, _name, hit in includes_of(path):
                reasons.setdefault(hit, f"included by {path}:{line}")
                if hit not in files:
                    queue.append(hit)
    ops = tuple(OpClosure(op, b, tuple(chosen), tuple(files)) for (op, b), (chosen, files) in per_key.items())
    return Closure(ops=ops, files=tuple(sorted(reasons)), reasons=reasons,
                   needed_by={p: tuple(sorted(v)) for p, v in needed.items()})
