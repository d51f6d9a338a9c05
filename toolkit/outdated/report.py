"""The Markdown report of `ggml-vendor update`: the pull request's body. It says what moved upstream (commits
and the ops whose signature or body changed), what happened to each patch, which variants were added, and what
to test before merging. Same inputs, same text (no times, no paths of this machine). Upstream text (commit
subjects, the upstream's name) is shown with its control characters spelled out (core.text.printable): the report
becomes a pull request's body, and a hostile subject must not colour, retitle or hide anything where it is read."""

from __future__ import annotations

from collections.abc import Iterable

from toolkit.core.lock import Lock
from toolkit.core.text import printable
from toolkit.outdated.matrix_edit import MatrixEdit
from toolkit.outdated.rebase import CONFLICT, KEPT, REBASED, UPSTREAM
from toolkit.outdated.survey import Survey

_VERDICT_WORDS = {
    KEPT: "applies unchanged",
    REBASED: "rebased (three-way)",
    UPSTREAM: "dropped: upstream carries it",
    CONFLICT: "conflicts",
}


def _title(pin: Lock, s: Survey, matrices: tuple[MatrixEdit, ...]) -> str:
    parts = []
    if s.moved:
        parts.append(f"ggml {pin.commit[:8]} → {s.new.lock.commit[:8]}")
    if matrices:
        minors = sorted({r.torch for m in matrices for r in m.rows})
        parts.append("torch " + ", ".join(minors) + " variants")
    return "Update " + (" and ".join(parts) if parts else "nothing: everything is current")


def _upstream(pin: Lock, s: Survey) -> list[str]:
    new = s.new.lock
    if not s.moved:
        return ["## Upstream", "", f"The pin `{pin.commit[:12]}` is the head of {s.upstream}: unchanged.", ""]
    out = [
        "## Upstream",
        "",
        f"- upstream: {s.upstream}",
        f"- from `{pin.commit[:12]}` ({pin.date[:10]}, {pin.subject})",
        f"- to `{new.commit[:12]}` ({new.date[:10]}, {new.subject}), recorded as `{s.target_rev}`",
        "",
    ]
    if s.commits is None:
        out += [f"The commit list is not available: {s.drift.history_note}.", ""]
    else:
        out += [f"### {len(s.commits)} commit(s) touching the vendored files", ""]
        out += [f"- `{c.sha[:12]}` {c.date[:10]} {c.subject}" for c in s.commits] or ["None."]
        out.append("")
    return out


def _ops(s: Survey) -> list[str]:
    if not s.moved:
        return []
    out = ["### Ops that moved", ""]
    moved = [b.headline() for b in s.drift.behaviour]
    moved += [f"fingerprint `{r.name}` ({r.path}) changed" for r in s.drift.regions]
    out += [f"- {line}" for line in moved] or ["None: no fingerprinted region or behaviour function changed."]
    d = s.drift
    out += [
        "",
        f"Files: {len(d.added)} added, {len(d.removed)} removed, {len(d.renamed)} renamed, {len(d.changed)} changed"
        + (" (" + ", ".join(f"`{p}`" for p in (*d.added, *d.changed)[:12]) + ")" if d.added or d.changed else "")
        + ".",
        "",
    ]
    return out


def _patches(s: Survey) -> list[str]:
    out = ["## Patches", ""]
    if not s.patches:
        return [*out, "vendor/patches/ holds none.", ""]
    out += ["| patch | at the new pin | what it does |", "|---|---|---|"]
    for p in s.patches:
        verdict = _VERDICT_WORDS[p.verdict] + (
            f" ({p.detail})" if p.verdict in (REBASED, CONFLICT) and p.detail else ""
        )
        out.append(f"| `{p.name}` | {verdict} | {p.description.replace('|', '/')} |")
    return [*out, ""]


def _variants(matrices: Iterable[MatrixEdit]) -> list[str]:
    lines = [f"- {line}" for m in matrices for line in m.lines()]
    return ["## Variants", "", *(lines or ["No new torch builds (or `--torch` was not asked for)."]), ""]


def _to_test(s: Survey, matrices: tuple[MatrixEdit, ...], packages: list[str]) -> list[str]:
    out = [
        "## What to test",
        "",
        "- [ ] `ggml-vendor sync --check`, `ggml-vendor render --check` and `ggml-vendor ci --check` are clean",
        "- [ ] `python3 -m pytest -q` (CPU) and the build workflow this pull request triggers (every variant, verify, "
        "the conformance gate)",
    ]
    review = sorted(set(s.drift.semantics_to_review))
    breaking = sorted(set(s.drift.breaking))
    if breaking:
        out.append(f"- [ ] signatures changed (breaking) for {', '.join(breaking)}: the bindings must follow")
    if review:
        out.append(
            f"- [ ] bodies changed for {', '.join(review)}: review the semantics in the drift report's diffs, and run "
            "the GPU tests (`python3 -m pytest -q -m gpu tests/gpu`) on a machine with a CUDA device"
        )
    if any(p.verdict == REBASED for p in s.patches):
        out.append("- [ ] the rebased patches: read their new hunks, and time them again with the benchmark scripts")
    for m in matrices:
        for r in m.rows:
            out.append(f"- [ ] the new variants of {r.words()} ({m.path.name}) build and load")
    out += ["", f"Packages: {', '.join(packages)}.", ""]
    return out


def markdown(
    pin: Lock, s: Survey, matrices: tuple[MatrixEdit, ...], rendered: tuple[str, ...], packages: list[str]
) -> str:
    out = [f"# {_title(pin, s, matrices)}", "", "Made by `ggml-vendor update`.", ""]
    out += _upstream(pin, s) + _ops(s) + _patches(s) + _variants(matrices)
    if rendered:
        out += ["## Rendered", "", *(f"- {r}" for r in rendered), ""]
    out += _to_test(s, matrices, packages)
    if s.moved:
        out += ["<details><summary>The drift report</summary>", "", s.drift.to_markdown().strip(), "", "</details>", ""]
    return printable("\n".join(out).rstrip("\n") + "\n")


__all__ = ["markdown"]
