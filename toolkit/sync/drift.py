"""What changed upstream when the pin moves: files of the vendored subset added/removed/renamed/changed, the
upstream commits between the two pins that touched them, and drift in the fingerprinted regions our
bindings depend on (ggml_facts.FINGERPRINTS). Rendered as Markdown and JSON.

The report is written to build/reports/drift-<old>-<new>.{md,json} (build/ is ignored by git; vendor/
only tracks the lock and patches, and the lock diff already shows the new pin in review).
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from toolkit.core import ggml_facts
from toolkit.core.ggml_facts import Fingerprint
from toolkit.core.lock import Lock, sha256_bytes

ABSENT = "absent"


def fingerprint_region(text: str, fp: Fingerprint) -> str | None:
    """The region of `text` that `fp` names: it ends at the first line matching `fp.end` that has a
    `fp.start` line at or before it, and starts at the last such start line. None if not found."""
    lines = text.splitlines()
    start_re, end_re = re.compile(fp.start), re.compile(fp.end)
    last_start = None
    for i, line in enumerate(lines):
        if start_re.search(line):
            last_start = i
        if last_start is not None and end_re.search(line):
            return "\n".join(lines[last_start : i + 1]) + "\n"
    return None


def fingerprints_of(
    files: Mapping[str, bytes], fingerprints: tuple[Fingerprint, ...] = ggml_facts.FINGERPRINTS
) -> dict[str, str]:
    """name -> sha256 of the region (ABSENT when its file is not vendored or the region is not found)."""
    out = {}
    for fp in fingerprints:
        data = files.get(fp.path)
        region = fingerprint_region(data.decode("utf-8", "replace"), fp) if data is not None else None
        out[fp.name] = sha256_bytes(region.encode()) if region is not None else ABSENT
    return out


@dataclass(frozen=True)
class RegionDrift:
    name: str
    path: str
    old: str  # sha256 or ABSENT
    new: str
    diff: str  # unified diff of the region text, "" when the old text is not available


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

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.renamed or self.changed or self.regions)

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
        }

    def to_markdown(self) -> str:
        out = [
            f"# Upstream drift: {self.old_commit[:12]} → {self.new_commit[:12]}",
            "",
            f"Upstream: {self.upstream}",
            "",
        ]
        out += ["## Files in the vendored subset", ""]
        if not (self.added or self.removed or self.renamed or self.changed):
            out.append("No file of the subset changed.")
        for label, items in (("added", self.added), ("removed", self.removed), ("changed", self.changed)):
            for p in items:
                out.append(f"- {label}: `{p}`")
        for a, b in self.renamed:
            out.append(f"- renamed: `{a}` → `{b}`")
        out += [
            "",
            "## Upstream commits touching the subset"
            + (" (dropped: the pin moved backwards)" if self.backwards else ""),
            "",
        ]
        if self.commits is None:
            out.append(f"Not available: {self.history_note}")
        elif not self.commits:
            out.append("None.")
        else:
            out += [f"- `{c[:12]}` {s}" for c, s in self.commits]
        out += ["", "## Fingerprinted regions (what our bindings depend on)", ""]
        if not self.regions:
            out.append("No fingerprinted region changed.")
        for r in self.regions:
            status = "appeared" if r.old == ABSENT else "disappeared" if r.new == ABSENT else "changed"
            out.append(f"- **{r.name}** (`{r.path}`): {status}")
            if r.diff:
                out += ["", "```diff", r.diff.rstrip("\n"), "```", ""]
        return "\n".join(out).rstrip("\n") + "\n"

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
        lines += [
            f"  region {r.name}: {'appeared' if r.old == ABSENT else 'gone' if r.new == ABSENT else 'changed'}"
            for r in self.regions
        ]
        return lines


def compute_drift(
    old: Lock,
    new: Lock,
    *,
    log: Callable[[str, str, list[str]], list[tuple[str, str]] | None] | None = None,
    old_text: Callable[[str], bytes | None] | None = None,
    new_text: Callable[[str], bytes | None] | None = None,
    fingerprints: tuple[Fingerprint, ...] = ggml_facts.FINGERPRINTS,
) -> Drift:
    """Compare two locks. `log(old, new, repo_paths)` lists commits (None when history is unavailable);
    `old_text`/`new_text` read pristine upstream files at each pin, for region diffs."""
    old_blobs = {f.path: f.blob for f in old.file_info}
    new_blobs = {f.path: f.blob for f in new.file_info}
    added = sorted(set(new_blobs) - set(old_blobs))
    removed = sorted(set(old_blobs) - set(new_blobs))
    renamed = []
    for r in list(removed):
        twin = next((a for a in added if new_blobs[a] and new_blobs[a] == old_blobs[r]), None)
        if twin:
            renamed.append((r, twin))
            removed.remove(r)
            added.remove(twin)
    changed = sorted(p for p in set(old_blobs) & set(new_blobs) if old_blobs[p] != new_blobs[p])
    commits: list[tuple[str, str]] | None = None
    backwards = False
    note = ""
    if old.layout != new.layout:
        note = f"the upstream changed ({old.upstream} [{old.layout}] -> {new.upstream} [{new.layout}])"
    elif log is None:
        note = "no history source"
    else:
        # The object source decides, not the label: a local clone of the same repository as the old URL
        # (or a mirror) holds both commits and their history; a different repository simply lacks the old one.
        prefix = ggml_facts.LAYOUT_PREFIX.get(new.layout, "")
        paths = sorted({prefix + p for p in set(old_blobs) | set(new_blobs)})
        commits = log(old.commit, new.commit, paths)
        if commits == []:
            dropped = log(new.commit, old.commit, paths)
            if dropped:
                commits, backwards = dropped, True
        if commits is None:
            note = (
                f"the upstream changed ({old.upstream} -> {new.upstream}) and the old pin is not in it"
                if old.upstream != new.upstream
                else "the old pin's history is not in the object source (a shallow URL cache); "
                "pass --mirror PATH to a full clone for the commit list"
            )
    regions = []
    for fp in fingerprints:
        o, n = old.fingerprints.get(fp.name, ABSENT), new.fingerprints.get(fp.name, ABSENT)
        if o == n or not old.fingerprints:
            continue
        diff = ""
        if old_text is not None and new_text is not None:
            ot, nt = old_text(fp.path), new_text(fp.path)
            orr = fingerprint_region(ot.decode("utf-8", "replace"), fp) if ot is not None else None
            nr = fingerprint_region(nt.decode("utf-8", "replace"), fp) if nt is not None else None
            diff = "".join(
                difflib.unified_diff(
                    (orr or "").splitlines(True),
                    (nr or "").splitlines(True),
                    f"{old.commit[:12]}:{fp.path}",
                    f"{new.commit[:12]}:{fp.path}",
                )
            )
        regions.append(RegionDrift(fp.name, fp.path, o, n, diff))
    return Drift(
        new.upstream,
        old.commit,
        new.commit,
        tuple(added),
        tuple(removed),
        tuple(renamed),
        tuple(changed),
        None if commits is None else tuple(commits),
        note,
        tuple(regions),
        backwards,
    )


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_report(build_dir: Path, drift: Drift) -> tuple[Path, Path]:
    """build/reports/drift-<old12>-<new12>.md and .json; returns both paths."""
    stem = Path(build_dir) / "reports" / f"drift-{drift.old_commit[:12]}-{drift.new_commit[:12]}"
    md, js = stem.with_suffix(".md"), stem.with_suffix(".json")
    _atomic_write(md, drift.to_markdown())
    _atomic_write(js, json.dumps(drift.to_json(), indent=2, sort_keys=True) + "\n")
    return md, js
