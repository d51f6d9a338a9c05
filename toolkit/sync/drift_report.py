"""What drift found, as data and as the report shows it: RegionDrift, BehaviourDrift and Drift, rendered as
Markdown and JSON into build/reports/drift-<old>-<new>.{md,json} (drift.py computes them)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from toolkit.core import fs
from toolkit.core.text import printable

ABSENT = "absent"


@dataclass(frozen=True)
class RegionDrift:
    name: str
    path: str
    old: str  # sha256 or ABSENT
    new: str
    diff: str  # unified diff of the region text, "" when the old text is not available


SIGNATURE_CHANGED = "signature changed"  # breaking: the binding's call no longer matches
BODY_CHANGED = "body changed"  # same declaration, different code: review the semantics
APPEARED, GONE = "appeared", "gone"


@dataclass(frozen=True)
class BehaviourDrift:
    """One function an op's semantics live in (a package's BEHAVIOUR) that moved between the pins."""

    key: str
    op: str
    role: str
    function: str
    path: str
    change: str  # SIGNATURE_CHANGED, BODY_CHANGED, APPEARED or GONE
    body_changed: bool
    diff: str  # unified diff of the function as upstream wrote it; "" when a side is not readable
    commits: tuple[tuple[str, str], ...] | None  # upstream commits that touched it; None = not available

    @property
    def breaking(self) -> bool:
        return self.change in (SIGNATURE_CHANGED, GONE)

    def headline(self) -> str:
        what = {
            SIGNATURE_CHANGED: "signature changed (breaking)"
            + ("; body changed too: review semantics" if self.body_changed else ""),
            BODY_CHANGED: "body changed: review semantics",
            APPEARED: "appeared",
            GONE: "gone (breaking)",
        }[self.change]
        return f"{self.op}: {self.role} {self.function}: {what}"

    def to_json(self) -> dict[str, object]:
        return {
            "key": self.key,
            "op": self.op,
            "role": self.role,
            "function": self.function,
            "path": self.path,
            "change": self.change,
            "breaking": self.breaking,
            "body_changed": self.body_changed,
            "diff": self.diff,
            "commits": None if self.commits is None else [{"commit": c, "subject": t} for c, t in self.commits],
        }


@dataclass(frozen=True)
class Drift:
    upstream: str
    old_commit: str
    new_commit: str
    added: tuple[str, ...]
    removed: tuple[str, ...]
    renamed: tuple[tuple[str, str], ...]
    changed: tuple[str, ...]
    commits: tuple[tuple[str, str], ...] | None  # (sha, subject), newest first; None = history not available
    history_note: str
    regions: tuple[RegionDrift, ...]
    backwards: bool = False  # the new pin is older: `commits` are the ones the move drops
    behaviour: tuple[BehaviourDrift, ...] = ()
    patches: tuple[tuple[str, str, str], ...] = ()  # (name, verdict at the new pin, one-line description)

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.renamed or self.changed or self.regions or self.behaviour)

    @property
    def semantics_to_review(self) -> tuple[str, ...]:
        """Ops whose kernel or reference body changed (with or without a signature change)."""
        return tuple(dict.fromkeys(b.op for b in self.behaviour if b.body_changed or b.change == APPEARED))

    @property
    def breaking(self) -> tuple[str, ...]:
        """Ops with a changed or vanished declaration."""
        return tuple(dict.fromkeys(b.op for b in self.behaviour if b.breaking))

    def to_json(self) -> dict[str, object]:
        return {
            "upstream": self.upstream,
            "old_commit": self.old_commit,
            "new_commit": self.new_commit,
            "files": {
                "added": list(self.added),
                "removed": list(self.removed),
                "renamed": [{"from": a, "to": b} for a, b in self.renamed],
                "changed": list(self.changed),
            },
            "commits": None if self.commits is None else [{"commit": c, "subject": s} for c, s in self.commits],
            "history_note": self.history_note,
            "backwards": self.backwards,
            "fingerprints": [
                {"name": r.name, "path": r.path, "old": r.old, "new": r.new, "diff": r.diff} for r in self.regions
            ],
            "behaviour": [b.to_json() for b in self.behaviour],
            "breaking": list(self.breaking),
            "review_semantics": list(self.semantics_to_review),
            "patches": [{"name": n, "verdict": v, "description": d} for n, v, d in self.patches],
        }

    def to_markdown(self) -> str:
        out = [
            f"# Upstream drift: {self.old_commit[:12]} → {self.new_commit[:12]}",
            "",
            f"Upstream: {self.upstream}",
            "",
        ]
        out += _md_files(self) + _md_commits(self) + _md_behaviour(self) + _md_regions(self)
        out += ["", "## Our patches at the new pin", ""]
        out += [f"- `{n}`: {v}" + (f" — {d}" if d else "") for n, v, d in self.patches] or ["None."]
        # Commit subjects, paths and function names come from the upstream: no escape sequence of theirs
        # reaches a reader's terminal or viewer (core.text.printable).
        return printable("\n".join(out).rstrip("\n") + "\n")

    def summary_lines(self) -> list[str]:
        lines = [
            f"drift {self.old_commit[:12]} -> {self.new_commit[:12]}: "
            f"{len(self.added)} added, {len(self.removed)} removed, {len(self.renamed)} renamed, "
            f"{len(self.changed)} changed; "
            + (
                f"{len(self.commits)} upstream commits" + (" dropped (moved backwards)" if self.backwards else "")
                if self.commits is not None
                else "commit list unavailable"
            )
            + f"; {len(self.regions)} fingerprinted regions moved"
        ]
        for b in self.behaviour:
            via = ""
            if b.commits:
                via = " — " + ", ".join(f"{c[:12]} {t}" for c, t in b.commits[:3])
                via += f" and {len(b.commits) - 3} more" if len(b.commits) > 3 else ""
            lines.append(f"  {b.headline()}{via}")
        lines += [f"  patch {n}: {v}" + (f" — {d}" if d else "") for n, v, d in self.patches]
        lines += [
            f"  region {r.name}: {'appeared' if r.old == ABSENT else 'gone' if r.new == ABSENT else 'changed'}"
            for r in self.regions
        ]
        return lines


# --- the drift report's sections (Drift.to_markdown) ---------------------------------------------------


def _md_files(drift: Drift) -> list[str]:
    out = ["## Files in the vendored subset", ""]
    if not (drift.added or drift.removed or drift.renamed or drift.changed):
        out.append("No file of the subset changed.")
    for label, items in (("added", drift.added), ("removed", drift.removed), ("changed", drift.changed)):
        out += [f"- {label}: `{p}`" for p in items]
    out += [f"- renamed: `{a}` → `{b}`" for a, b in drift.renamed]
    return out


def _md_commits(drift: Drift) -> list[str]:
    out = [
        "",
        "## Upstream commits touching the subset" + (" (dropped: the pin moved backwards)" if drift.backwards else ""),
        "",
    ]
    if drift.commits is None:
        out.append(f"Not available: {drift.history_note}")
    elif not drift.commits:
        out.append("None.")
    else:
        out += [f"- `{c[:12]}` {s}" for c, s in drift.commits]
    return out


def _md_behaviour(drift: Drift) -> list[str]:
    out = ["", "## Behaviour: kernels and ggml-cpu reference per op", ""]
    if not drift.behaviour:
        out.append("No kernel or reference function changed (comments and whitespace ignored).")
    for bd in drift.behaviour:
        out.append(f"- **{bd.headline()}** (`{bd.path}`)")
        if bd.commits:
            out += [f"  - `{c[:12]}` {t}" for c, t in bd.commits]
        elif bd.commits is None:
            out.append("  - commits: not available from this object source")
        out += _md_diff(bd.diff)
    return out


def _md_regions(drift: Drift) -> list[str]:
    out = ["", "## Fingerprinted regions (what our bindings depend on)", ""]
    if not drift.regions:
        out.append("No fingerprinted region changed.")
    for r in drift.regions:
        status = "appeared" if r.old == ABSENT else "disappeared" if r.new == ABSENT else "changed"
        out.append(f"- **{r.name}** (`{r.path}`): {status}")
        out += _md_diff(r.diff)
    return out


def _md_diff(diff: str) -> list[str]:
    """A unified diff as a fenced block; nothing when there is none (the old text was not readable)."""
    return ["", "```diff", diff.rstrip("\n"), "```", ""] if diff else []


def report_paths(build_dir: Path, drift: Drift) -> tuple[Path, Path]:
    """Where the drift report of `drift` goes: build/reports/drift-<old12>-<new12>.md and .json."""
    stem = Path(build_dir) / "reports" / f"drift-{drift.old_commit[:12]}-{drift.new_commit[:12]}"
    return stem.with_suffix(".md"), stem.with_suffix(".json")


def write_report(build_dir: Path, drift: Drift) -> tuple[Path, Path]:
    """Write the drift report (report_paths), each file atomically; returns both paths."""
    md, js = report_paths(build_dir, drift)
    fs.atomic_write(md, drift.to_markdown().encode("utf-8"))
    fs.atomic_write(js, (json.dumps(drift.to_json(), indent=2, sort_keys=True) + "\n").encode("utf-8"))
    return md, js
