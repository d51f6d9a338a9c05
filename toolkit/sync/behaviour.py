"""Behaviour fingerprints: where each op's semantics live upstream, hashed so that `sync` sees them move.

A signature fingerprint (a package facts file's FINGERPRINTS) catches a changed parameter list; it cannot see that
ggml transposed the recurrent state or reversed the snapshot order with the same parameters (docs/upstream.md
§4.1: three such silent changes in four months). Those changes live in function *bodies*: the CUDA/Metal
kernels we compile, and ggml-cpu's reference implementation (ggml's own statement of what the op computes).

For each function named in a package facts file's BEHAVIOUR we hash, separately, its declaration (everything before
the body's `{`: template, qualifiers, parameter list) and its body, both normalised (comments out,
whitespace reduced to what separates two words), so formatting churn does not count. The files are read
from the upstream's git objects at the pin; the CPU reference is never vendored.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from toolkit.core import ggml_facts
from toolkit.core.hashing import sha256_bytes
from toolkit.core.lock import BehaviourPrint

ABSENT = BehaviourPrint.ABSENT


@dataclass(frozen=True)
class FunctionText:
    """One definition as upstream wrote it (comments kept), split at the body's opening brace."""

    signature: str
    body: str
    line: int  # 1-based line of the function name


_LEXEME = re.compile(r"//[^\n]*|/\*.*?(?:\*/|\Z)|\"(?:\\.|[^\"\\\n])*\"?|'(?:\\.|[^'\\\n])*'?", re.S)


@functools.lru_cache(maxsize=8)
def _blank_comments_and_strings(text: str, *, keep_strings: bool = False) -> str:
    """`text` with comments (and, unless keep_strings, string/char literal contents) replaced by spaces,
    newlines kept, so offsets and line numbers stay those of the original."""

    def blank(m: re.Match[str]) -> str:
        lex = m.group(0)
        if lex[0] in "\"'":
            return lex if keep_strings else lex[0] + " " * (len(lex) - 1)
        return re.sub(r"[^\n]", " ", lex)

    return _LEXEME.sub(blank, text)


def _match(text: str, start: int, open_ch: str, close_ch: str) -> int:
    """Index just past the bracket closing the one at `start` (in comment/string-blanked text); -1 if none."""
    depth = 0
    for j in range(start, len(text)):
        if text[j] == open_ch:
            depth += 1
        elif text[j] == close_ch:
            depth -= 1
            if depth == 0:
                return j + 1
    return -1


def find_definitions(text: str, name: str) -> list[FunctionText]:
    """Every definition of function `name` in C/C++/CUDA/Metal `text` (not declarations, not calls)."""
    if name not in text:
        return []
    blank = _blank_comments_and_strings(text)
    found = []
    for m in re.finditer(rf"{re.escape(name)}\s*(?:<[^;{{}}()]*>)?\s*\(", blank):
        before = blank[m.start() - 1] if m.start() else " "
        if before.isalnum() or before in "_.>:":
            continue  # part of a longer name, a member or a qualified call
        paren = m.end() - 1
        close = _match(blank, paren, "(", ")")
        if close < 0:
            continue
        # after the parameter list: qualifiers (const, noexcept, -> T, attributes) and then `{` for a definition
        k = close
        tail = re.match(r"(?:\s|const\b|noexcept\b|override\b|->\s*[\w:<>, *&]+|\[\[[^\]]*\]\])*", blank[k:])
        k += tail.end() if tail else 0
        if k >= len(blank) or blank[k] != "{":
            continue
        end = _match(blank, k, "{", "}")
        if end < 0:
            continue
        # the declaration starts after the previous top-level statement: `;`, `}`, `{` or a preprocessor line
        line_start = blank.rfind("\n", 0, m.start()) + 1
        begin = line_start
        while begin > 0:
            prev_end = begin - 1
            prev_start = blank.rfind("\n", 0, prev_end) + 1
            prev = blank[prev_start:prev_end].strip()
            if not prev or prev.startswith("#") or prev.endswith((";", "}", "{")):
                break
            begin = prev_start
        found.append(FunctionText(text[begin:k], text[k:end], text.count("\n", 0, m.start()) + 1))
    return found


def normalise(code: str) -> str:
    """Comments out, whitespace collapsed and dropped wherever it does not separate two words."""
    flat = re.sub(r"\s+", " ", _blank_comments_and_strings(code, keep_strings=True)).strip()
    return re.sub(r"(?<=\W) | (?=\W)", "", flat)


def _joined(defs: list[FunctionText]) -> tuple[str, str]:
    return "\n".join(d.signature for d in defs), "\n".join(d.body for d in defs)


def print_of(text: str | None, name: str) -> tuple[str, str] | None:
    """(signature sha256, body sha256) of all definitions of `name` in `text` (preprocessor alternatives
    together), or None when there is none."""
    if text is None:
        return None
    defs = find_definitions(text, name)
    if not defs:
        return None
    sig, body = _joined(defs)
    return sha256_bytes(normalise(sig).encode()), sha256_bytes(normalise(body).encode())


def function_source(text: str | None, name: str) -> str:
    """The definitions of `name` as upstream wrote them (for review diffs); "" when absent."""
    if text is None:
        return ""
    return "\n".join(d.signature + d.body + "\n" for d in find_definitions(text, name))


def wanted(
    ops: Iterable[str], backends: Iterable[str], specs: Iterable[ggml_facts.Behaviour]
) -> tuple[ggml_facts.Behaviour, ...]:
    """The `specs` (the packages' BEHAVIOUR, toolkit.core.package_facts.behaviour) of the configured ops: their
    kernels on enabled backends, and the CPU reference."""
    ops, backends = set(ops), set(backends)
    if "rocm" in backends:
        backends.add("cuda")  # the HIP build compiles the CUDA sources
    return tuple(b for b in specs if b.op in ops and (b.backend in backends or b.backend == "cpu"))


def behaviour_of(
    read: Callable[[str], bytes | None], specs: Iterable[ggml_facts.Behaviour]
) -> dict[str, BehaviourPrint]:
    """key -> BehaviourPrint for each spec, reading files (standalone layout) with `read`."""
    texts: dict[str, str | None] = {}
    out: dict[str, BehaviourPrint] = {}
    for spec in specs:
        result = BehaviourPrint("", ABSENT, ABSENT)
        for path in spec.paths:
            if path not in texts:
                data = read(path)
                texts[path] = data.decode("utf-8", "replace") if data is not None else None
            hashed = print_of(texts[path], spec.function)
            if hashed is not None:
                result = BehaviourPrint(path, *hashed)
                break
        out[spec.key] = result
    return out
