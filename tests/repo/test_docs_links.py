"""Links between the repository's documents resolve: every relative link in README.md and docs/*.md names a file
that exists and, where it has one, an anchor that file defines (a heading's GitHub slug or an explicit id)."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from markdown_it.token import Token

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
EXPLICIT_ID = re.compile(r"""<a\s+(?:id|name)=["']([^"']+)["']""")


def _plain(inline: Token) -> str:
    """A heading's text as GitHub slugs it: text and code spans, markup dropped."""
    return "".join(c.content for c in inline.children or [] if c.type in ("text", "code_inline"))


def github_slug(text: str) -> str:
    """GitHub's heading anchor: lower case, only letters, marks, digits, '_', '-' and spaces kept, spaces -> '-'."""
    kept = (ch for ch in text.lower() if ch in " -_" or unicodedata.category(ch)[0] in "LMN")
    return "".join(kept).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor a document defines; repeated headings get GitHub's -1, -2 suffixes."""
    tokens = MarkdownIt("commonmark").enable("table").parse(path.read_text())
    found: set[str] = set(EXPLICIT_ID.findall(path.read_text()))
    seen: dict[str, int] = {}
    for i, tok in enumerate(tokens):
        if tok.type != "heading_open":
            continue
        slug = github_slug(_plain(tokens[i + 1]))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def relative_links(path: Path) -> list[str]:
    """The hrefs of a document's links that point into the repository (no scheme, not mail)."""
    tokens = MarkdownIt("commonmark").enable("table").parse(path.read_text())
    hrefs = []
    for tok in tokens:
        for child in tok.children or []:
            href = child.attrGet("href") if child.type == "link_open" else None
            if isinstance(href, str) and not re.match(r"^[a-z][a-z0-9+.-]*:", href):
                hrefs.append(href)
    return hrefs


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc: Path) -> None:
    broken = []
    for href in relative_links(doc):
        target, _, anchor = href.partition("#")
        dest = (doc.parent / target).resolve() if target else doc
        if not dest.exists():
            broken.append(f"{href}: no file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{href}: {dest.name} has no anchor #{anchor}")
    assert not broken, f"{doc.name}: " + "; ".join(broken)


def test_slug_matches_github_for_the_headings_linked_here() -> None:
    # Punctuation, backticks, dashes and symbols go; '_' and letters such as µ stay (GitHub's rule).
    assert github_slug("Build: provisioning, shared objects, no-op (benchmarks/bench_build.py)") == (
        "build-provisioning-shared-objects-no-op-benchmarksbench_buildpy"
    )
    assert github_slug("Run 4 — 2026-12-01 20:10–20:30 UTC") == "run-4--2026-12-01-20102030-utc"


def test_a_broken_anchor_is_caught(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text('# Title\n\n<a id="kept"></a>\n\n## Part two\n\n## Part two\n')
    assert anchors(tmp_path / "a.md") == {"title", "kept", "part-two", "part-two-1"}
    assert "missing" not in anchors(tmp_path / "a.md")
