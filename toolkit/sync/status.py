"""The status query (`ggml-vendor status`): the pin, vendor/ against it and the state of each patch, read
offline; nothing is written. A query, not a stage: there is nothing to plan or carry out, so `query(config)`
reads and returns the StatusReport the CLI prints."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from toolkit.core import config
from toolkit.core.hashing import sha256_file
from toolkit.sync.outcome import Succeeded
from toolkit.sync.patch_workflow import patch_descriptions
from toolkit.sync.vendor_tree import (
    LOSSY,
    MISSING,
    PATCH_ADDED,
    PATCH_EDITED,
    PATCH_REMOVED,
    patch_files,
    read_vendor,
    tree_on_record,
)


@dataclass(frozen=True)
class StatusReport(Succeeded):
    """The status as data (`doc`, what --json prints). A dirty vendor/ is reported, not a failure."""

    doc: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return self.doc

    def lines(self, verbose: bool = False) -> list[str]:
        return _pin_lines(self.doc, verbose) + _tree_lines(self.doc) + _patch_lines(self.doc)


def query(cfg: config.Config) -> StatusReport:
    """The project's status, read now (offline, read-only)."""
    return StatusReport(status_doc(cfg))


def status_doc(cfg: config.Config) -> dict[str, object]:
    """The status as data (what --json prints)."""
    # one read of vendor/ (the tree recovery would put back, while a killed sync's swap awaits it)
    vendor = read_vendor(tree_on_record(cfg.vendor_dir))
    findings, lock = vendor.findings(), vendor.lock
    current = {p.name: sha256_file(p) for p in patch_files(vendor.path)}
    described = patch_descriptions(vendor.path)
    patches: list[dict[str, str | None]] = []
    for p in lock.patches if lock else ():
        state = (
            p.verdict
            if p.name in current and current[p.name] == p.sha256
            else ("edited since sync" if p.name in current else "removed since sync")
        )
        patches.append({"name": p.name, "verdict": p.verdict, "state": state, "description": described.get(p.name, "")})
    locked = {p.name for p in (lock.patches if lock else ())}
    patches += [
        {"name": n, "verdict": None, "state": "not applied yet", "description": described.get(n, "")}
        for n in sorted(current)
        if n not in locked
    ]
    return {
        "pinned": lock is not None,
        "upstream": lock.upstream if lock else None,
        "layout": lock.layout if lock else None,
        "rev": lock.rev if lock else None,
        "commit": lock.commit if lock else None,
        "date": lock.date if lock else None,
        "subject": lock.subject if lock else None,
        "llama_cpp_commit": (lock.llama_cpp_commit or None) if lock else None,
        "tool_version": lock.tool_version if lock else None,
        "files": len(lock.files) if lock else 0,
        "clean": not findings,
        "findings": [f.to_json() for f in findings],
        "patches": patches,
        "closures": {op: {b: len(v) for b, v in per.items()} for op, per in lock.closures.items()} if lock else {},
        # Each package of the project with the number of vendored files it needs (one pin, one vendor/).
        "packages": {p: len(lock.package_files(p)) if lock else 0 for p in cfg.package_names()},
        # The license inventory: SPDX ids from the lock, notice texts read back from the vendored files.
        "licenses": {
            lic.path: {
                "spdx": list(lic.spdx),
                "copyright": list(lic.copyright),
                "copyright_lines": list(lic.copyright_at),
            }
            for lic in (lock.licenses if lock else ())
        },
    }


def _pin_lines(doc: dict[str, Any], verbose: bool) -> list[str]:
    if not doc["pinned"]:
        return ["no pin: vendor/UPSTREAM is missing — run ggml-vendor sync --rev REV"]
    llama = f"  (llama.cpp {str(doc['llama_cpp_commit'])[:12]})" if doc["llama_cpp_commit"] else ""
    ops = ", ".join(f"{op}/{b} {n}" for op, per in doc["closures"].items() for b, n in per.items())
    out = [
        f"pinned  {doc['commit']} ({doc['rev']}, {doc['layout']} layout)",
        f"        {doc['date']}  {doc['subject']}",
        f"from    {doc['upstream']}{llama}",
        f"files   {doc['files']} ({ops})",
    ]
    if len(doc["packages"]) > 1:
        needs = ", ".join(f"{p} {n}" for p, n in doc["packages"].items())
        out.append(f"        files needed per package: {needs}")
    if verbose:
        out.append(f"        locked by ggml-vendor {doc['tool_version']}")
    for path, lic in doc["licenses"].items():
        notices = "; ".join(lic["copyright"]) or f"copyright at line(s) {lic['copyright_lines']}"
        out.append(f"license {path}: {', '.join(lic['spdx']) or '?'} — {notices}")
    return out


def _tree_lines(doc: dict[str, Any]) -> list[str]:
    findings = doc["findings"]
    if doc["clean"]:
        return ["vendor/ clean"]
    kinds = {f["kind"] for f in findings}
    head = (
        f"vendor/ dirty: {len(findings)} finding(s)"
        + (" — local edits (sync refuses without --force)" if any(k in LOSSY for k in kinds) else "")
        + (" — files missing (ggml-vendor sync restores them)" if MISSING in kinds else "")
        + (" — patches changed (re-run sync)" if kinds & {PATCH_ADDED, PATCH_EDITED, PATCH_REMOVED} else "")
    )
    return [head] + [f"  {f['kind']:14} {f['path']}" + (f"  ({f['detail']})" if f["detail"] else "") for f in findings]


def _patch_lines(doc: dict[str, Any]) -> list[str]:
    return [
        f"patch   {p['name']}: {p['state']}" + (f" — {p['description']}" if p["description"] else "")
        for p in doc["patches"]
    ]
