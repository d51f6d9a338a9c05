"""`ggml-vendor status`: the pin, whether vendor/ is dirty, and the state of each patch (offline)."""

from __future__ import annotations

from toolkit import help as help_text
from toolkit.app import JsonOpt, Locked, NoWaitOpt, ProjectOpt, VerboseOpt, app, run_guarded
from toolkit.core import config, ui
from toolkit.core.lock import read_lock, sha256_file
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


def status_doc(cfg: config.Config) -> dict[str, object]:
    """The status as data (what --json prints)."""
    findings = check_vendor(cfg)
    lock = read_lock(cfg.vendor_dir)
    current = {p.name: sha256_file(p) for p in patch_files(cfg.vendor_dir)}
    described = patch_descriptions(cfg.vendor_dir)
    patches = []
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


@app.command("status", help=help_text.STATUS)
def status(
    as_json: JsonOpt = False, project: ProjectOpt = None, verbose: VerboseOpt = False, no_wait: NoWaitOpt = False
) -> None:
    def body() -> None:
        cfg = config.load(project)
        doc = status_doc(cfg)
        if as_json:
            ui.emit_json(doc)
            return
        if not doc["pinned"]:
            ui.out.print("no pin: vendor/UPSTREAM is missing — run ggml-vendor sync --rev REV")
        else:
            ui.out.print(f"pinned  {doc['commit']} ({doc['rev']}, {doc['layout']} layout)")
            ui.out.print(f"        {doc['date']}  {doc['subject']}")
            ui.out.print(
                f"from    {doc['upstream']}"
                + (f"  (llama.cpp {str(doc['llama_cpp_commit'])[:12]})" if doc["llama_cpp_commit"] else "")
            )
            ops = ", ".join(f"{op}/{b} {n}" for op, per in doc["closures"].items() for b, n in per.items())  # type: ignore[union-attr]
            ui.out.print(f"files   {doc['files']} ({ops})")
            if len(doc["packages"]) > 1:  # type: ignore[arg-type]
                needs = ", ".join(f"{p} {n}" for p, n in doc["packages"].items())  # type: ignore[union-attr]
                ui.out.print(f"        files needed per package: {needs}")
            if verbose:
                ui.out.print(f"        locked by ggml-vendor {doc['tool_version']}")
            for path, lic in doc["licenses"].items():  # type: ignore[union-attr]
                notices = "; ".join(lic["copyright"]) or f"copyright at line(s) {lic['copyright_lines']}"
                ui.out.print(f"license {path}: {', '.join(lic['spdx']) or '?'} — {notices}")
        findings = doc["findings"]
        if doc["clean"]:
            ui.out.print("vendor/ [green]clean[/]", markup=True)
        else:
            kinds = {f["kind"] for f in findings}  # type: ignore[index, union-attr]
            lossy = any(k in LOSSY for k in kinds)
            ui.note(
                "vendor/ dirty:",
                f"{len(findings)} finding(s)"  # type: ignore[arg-type]
                + (" — local edits (sync refuses without --force)" if lossy else "")
                + (" — files missing (ggml-vendor sync restores them)" if MISSING in kinds else "")
                + (" — patches changed (re-run sync)" if kinds & {PATCH_ADDED, PATCH_EDITED, PATCH_REMOVED} else ""),
                style="yellow",
            )
            for f in findings:  # type: ignore[union-attr]
                ui.out.print(f"  {f['kind']:14} {f['path']}" + (f"  ({f['detail']})" if f["detail"] else ""))
        for p in doc["patches"]:  # type: ignore[union-attr]
            ui.out.print(f"patch   {p['name']}: {p['state']}" + (f" — {p['description']}" if p["description"] else ""))

    run_guarded(body, verbose=verbose, lock=Locked(project, "status", no_wait, shared=True))
