"""What changed upstream when the pin moves: files of the vendored subset added/removed/renamed/changed, the
upstream commits between the two pins that touched them, and drift in the fingerprinted regions our
bindings depend on (FINGERPRINTS: ggml_facts' shared ones and each package's). Rendered as Markdown and JSON
(drift_report.py).

The report is written to build/reports/drift-<old>-<new>.{md,json} (build/ is ignored by git; vendor/
only tracks the lock and patches, and the lock diff already shows the new pin in review).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping

from toolkit.core import ggml_facts
from toolkit.core.ggml_facts import Fingerprint
from toolkit.core.hashing import sha256_bytes
from toolkit.core.lock import BehaviourPrint, Lock
from toolkit.sync import behaviour
from toolkit.sync.drift_report import (
    ABSENT,
    APPEARED,
    BODY_CHANGED,
    GONE,
    SIGNATURE_CHANGED,
    BehaviourDrift,
    Drift,
    RegionDrift,
    report_paths,
    write_report,
)

__all__ = [
    "compute_drift",
    "fingerprint_region",
    "fingerprints_of",
    "Drift",
    "RegionDrift",
    "BehaviourDrift",
    "report_paths",
    "write_report",
    "ABSENT",
    "APPEARED",
    "GONE",
    "BODY_CHANGED",
    "SIGNATURE_CHANGED",
]


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
