"""What changed upstream when the pin moves: files of the vendored subset added/removed/renamed/changed, the
upstream commits between the two pins that touched them, and drift in the fingerprinted regions our
bindings depend on (FINGERPRINTS: ggml_facts' shared ones and each package's). Rendered as Markdown and JSON.

The report is written to build/reports/drift-<old>-<new>.{md,json} (build/ is ignored by git; vendor/
only tracks the lock and patches, and the lock diff already shows the new pin in review).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from toolkit.core import fs, ggml_facts
from toolkit.core.ggml_facts import Fingerprint
from toolkit.core.lock import BehaviourPrint, Lock, sha256_bytes
from toolkit.core.text import printable
from toolkit.sync import behaviour

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


def compute_drift(
    old: Lock,
    new: Lock,
    *,
    log: Callable[[str, str, list[str]], list[tuple[str, str]] | None] | None = None,
    old_text: Callable[[str], bytes | None] | None = None,
    new_text: Callable[[str], bytes | None] | None = None,
    fingerprints: tuple[Fingerprint, ...] = ggml_facts.FINGERPRINTS,
    log_function: Callable[[str, str, str, str], list[tuple[str, str]] | None] | None = None,
    behaviour_specs: tuple[ggml_facts.Behaviour, ...] = (),
) -> Drift:
    """Compare two locks. `log(old, new, repo_paths)` lists commits (None when history is unavailable);
    `old_text`/`new_text` read pristine upstream files at each pin, for region diffs."""
    old_blobs = {f.path: f.blob for f in old.file_info}
    new_blobs = {f.path: f.blob for f in new.file_info}
    added, removed, renamed, changed = _file_changes(old_blobs, new_blobs)
    commits, backwards, note = _history(old, new, log, sorted(set(old_blobs) | set(new_blobs)))
    regions = _region_drift(old, new, old_text, new_text, fingerprints)
    behaviour_drift = _behaviour_drift(old, new, old_text, new_text, log_function, behaviour_specs)
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
        behaviour_drift,
    )


def _file_changes(
    old_blobs: dict[str, str], new_blobs: dict[str, str]
) -> tuple[list[str], list[str], list[tuple[str, str]], list[str]]:
    """(added, removed, renamed (old, new), changed) vendored files between two pins, by blob id."""
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
    return added, removed, renamed, changed


def _history(
    old: Lock,
    new: Lock,
    log: Callable[[str, str, list[str]], list[tuple[str, str]] | None] | None,
    files: list[str],
) -> tuple[list[tuple[str, str]] | None, bool, str]:
    """(the upstream commits between the pins touching `files`, None when unknown; whether the pin moved
    backwards; a note saying why the list is missing)."""
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
        paths = sorted({prefix + p for p in files})
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
    return commits, backwards, note


def _region_drift(
    old: Lock,
    new: Lock,
    old_text: Callable[[str], bytes | None] | None,
    new_text: Callable[[str], bytes | None] | None,
    fingerprints: tuple[Fingerprint, ...],
) -> list[RegionDrift]:
    """The fingerprinted regions whose fingerprint moved, each with its unified diff where both sides read."""
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
    return regions


def _behaviour_drift(
    old: Lock,
    new: Lock,
    old_text: Callable[[str], bytes | None] | None,
    new_text: Callable[[str], bytes | None] | None,
    log_function: Callable[[str, str, str, str], list[tuple[str, str]] | None] | None,
    behaviour_specs: tuple[ggml_facts.Behaviour, ...] = (),
) -> tuple[BehaviourDrift, ...]:
    if not old.behaviour:
        return ()  # a lock written before behaviour fingerprints: nothing to compare against
    specs = {s.key: s for s in behaviour_specs}
    prefix = ggml_facts.LAYOUT_PREFIX.get(new.layout, "")
    out = []
    for key in [k for k in specs if k in new.behaviour] + sorted(set(new.behaviour) - set(specs)):
        n = new.behaviour[key]
        o = old.behaviour.get(key)
        if o is None or o == n:
            continue
        change = _change_kind(o, n)
        if change is None:
            continue
        spec = specs.get(key)
        function = spec.function if spec else key.rsplit(" ", 1)[-1]
        path = n.path or o.path
        diff = ""
        if old_text is not None and new_text is not None:
            diff = _function_diff(old_text, new_text, o.path, n.path, path, function, old.commit, new.commit)
        commits: tuple[tuple[str, str], ...] | None = None
        if log_function is not None and n.path:
            found = log_function(old.commit, new.commit, prefix + n.path, function)
            commits = tuple(found) if found is not None else None
        out.append(
            BehaviourDrift(
                key,
                spec.op if spec else key.split(":", 1)[0],
                spec.role if spec else "function",
                function,
                path,
                change,
                o.body != n.body,
                diff,
                commits,
            )
        )
    return tuple(out)


def _change_kind(o: BehaviourPrint, n: BehaviourPrint) -> str | None:
    """How a behaviour fingerprint changed (APPEARED, GONE, SIGNATURE_CHANGED, BODY_CHANGED); None when it
    did not (absent on both sides, or only the file it was found in moved)."""
    if o.body == ABSENT and n.body == ABSENT:
        return None
    if o.body == ABSENT:
        return APPEARED
    if n.body == ABSENT:
        return GONE
    if o.signature != n.signature:
        return SIGNATURE_CHANGED
    if o.body != n.body:
        return BODY_CHANGED
    return None


def _function_diff(
    old_text: Callable[[str], bytes | None],
    new_text: Callable[[str], bytes | None],
    old_path: str,
    new_path: str,
    path: str,
    function: str,
    old_commit: str,
    new_commit: str,
) -> str:
    """The unified diff of `function`'s definition between the two pins."""
    before = behaviour.function_source(_text(old_text, old_path), function)
    after = behaviour.function_source(_text(new_text, new_path), function)
    return "".join(
        difflib.unified_diff(
            before.splitlines(True),
            after.splitlines(True),
            f"{old_commit[:12]}:{old_path or path}",
            f"{new_commit[:12]}:{new_path or path}",
        )
    )


def _text(read: Callable[[str], bytes | None], path: str) -> str | None:
    if not path:
        return None
    data = read(path)
    return data.decode("utf-8", "replace") if data is not None else None


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
