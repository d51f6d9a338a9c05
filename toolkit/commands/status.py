"""`ggml-vendor status`: the pin, whether vendor/ is dirty, and the state of each patch (offline)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from toolkit import help as help_text
from toolkit.app import Options, Run, command
from toolkit.core import config, ui
from toolkit.core.lock import Lock, read_lock, sha256_file
from toolkit.core.stage import Log
from toolkit.sync.patch_workflow import patch_descriptions
from toolkit.sync.vendor_tree import (
    LOSSY,
    MISSING,
    PATCH_ADDED,
    PATCH_EDITED,
    PATCH_REMOVED,
    check_vendor,
    patch_files,
)


def _patches(cfg: config.Config, lock: Lock | None) -> list[dict[str, Any]]:
    current = {p.name: sha256_file(p) for p in patch_files(cfg.vendor_dir)}
    described = patch_descriptions(cfg.vendor_dir)
    patches: list[dict[str, Any]] = []
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
    return patches


def _pin(lock: Lock | None) -> dict[str, Any]:
    fields = ("upstream", "layout", "rev", "commit", "date", "subject", "tool_version")
    doc: dict[str, Any] = {k: getattr(lock, k) if lock else None for k in fields}
    doc["llama_cpp_commit"] = (lock.llama_cpp_commit or None) if lock else None
    doc["files"] = len(lock.files) if lock else 0
    doc["closures"] = {op: {b: len(v) for b, v in per.items()} for op, per in lock.closures.items()} if lock else {}
    # The license inventory: SPDX ids from the lock, notice texts read back from the vendored files.
    doc["licenses"] = {
        lic.path: {"spdx": list(lic.spdx), "copyright": list(lic.copyright), "copyright_lines": list(lic.copyright_at)}
        for lic in (lock.licenses if lock else ())
    }
    return doc


def status_doc(cfg: config.Config) -> dict[str, Any]:
    """The status as data (what --json prints)."""
    findings = check_vendor(cfg)
    lock = read_lock(cfg.vendor_dir)
    return {
        "pinned": lock is not None,
        **_pin(lock),
        "clean": not findings,
        "findings": [f.to_json() for f in findings],
        "patches": _patches(cfg, lock),
        # Each package of the project with the number of vendored files it needs (one pin, one vendor/).
        "packages": {p: len(lock.package_files(p)) if lock else 0 for p in cfg.package_names()},
    }


@dataclass(frozen=True)
class Status:
    """The status document, printable (status is read-only: its plan is its result)."""

    doc: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return self.doc


def _print_pin(doc: dict[str, Any], verbose: bool) -> None:
    if not doc["pinned"]:
        ui.out.print("no pin: vendor/UPSTREAM is missing — run ggml-vendor sync --rev REV")
        return
    ui.out.print(f"pinned  {doc['commit']} ({doc['rev']}, {doc['layout']} layout)")
    ui.out.print(f"        {doc['date']}  {doc['subject']}")
    twin = f"  (llama.cpp {str(doc['llama_cpp_commit'])[:12]})" if doc["llama_cpp_commit"] else ""
    ui.out.print(f"from    {doc['upstream']}{twin}")
    ops = ", ".join(f"{op}/{b} {n}" for op, per in doc["closures"].items() for b, n in per.items())
    ui.out.print(f"files   {doc['files']} ({ops})")
    if len(doc["packages"]) > 1:
        needs = ", ".join(f"{p} {n}" for p, n in doc["packages"].items())
        ui.out.print(f"        files needed per package: {needs}")
    if verbose:
        ui.out.print(f"        locked by ggml-vendor {doc['tool_version']}")
    for path, lic in doc["licenses"].items():
        notices = "; ".join(lic["copyright"]) or f"copyright at line(s) {lic['copyright_lines']}"
        ui.out.print(f"license {path}: {', '.join(lic['spdx']) or '?'} — {notices}")


def _print_tree(doc: dict[str, Any]) -> None:
    findings = doc["findings"]
    if doc["clean"]:
        ui.out.print("vendor/ [green]clean[/]", markup=True)
        return
    kinds = {f["kind"] for f in findings}
    ui.note(
        "vendor/ dirty:",
        f"{len(findings)} finding(s)"
        + (" — local edits (sync refuses without --force)" if any(k in LOSSY for k in kinds) else "")
        + (" — files missing (ggml-vendor sync restores them)" if MISSING in kinds else "")
        + (" — patches changed (re-run sync)" if kinds & {PATCH_ADDED, PATCH_EDITED, PATCH_REMOVED} else ""),
        style="yellow",
    )
    for f in findings:
        ui.out.print(f"  {f['kind']:14} {f['path']}" + (f"  ({f['detail']})" if f["detail"] else ""))


def _show(status: Status, opts: Options) -> None:
    _print_pin(status.doc, opts.verbose)
    _print_tree(status.doc)
    for p in status.doc["patches"]:
        ui.out.print(f"patch   {p['name']}: {p['state']}" + (f" — {p['description']}" if p["description"] else ""))


def _plan(cfg: config.Config, _log: Log) -> Status:
    return Status(status_doc(cfg))


@command("status", help=help_text.STATUS, dry_run=False)
def status(opts: Options) -> Run:
    return Run("reading the pin", plan=_plan, show=_show, read_only=True)
