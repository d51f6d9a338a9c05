"""`ggml-vendor sync`: pin an upstream revision into vendor/ (or check vendor/ against its lock)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from toolkit import help as help_text
from toolkit import sync as sync_stage
from toolkit.app import DryRunOpt, JsonOpt, Locked, NoWaitOpt, ProjectOpt, VerboseOpt, app, run_guarded
from toolkit.core import config, ui
from toolkit.core.errors import VendorStateError
from toolkit.core.lock import read_lock
from toolkit.sync.stage import SyncReport, SyncRequest
from toolkit.sync.vendor_tree import check_vendor


def _print_report(rep: SyncReport, verbose: bool) -> None:
    for line in rep.lines(verbose):
        ui.out.print(line)


def _check(project: Path | None, as_json: bool) -> None:
    cfg = config.load(project)
    findings = check_vendor(cfg)
    lock = read_lock(cfg.vendor_dir)
    if as_json:
        ui.emit_json(
            {
                "clean": not findings,
                "commit": lock.commit if lock else None,
                "findings": [f.to_json() for f in findings],
            }
        )
    else:
        for f in findings:
            ui.out.print(f"  {f.line()}")
    if findings:
        raise VendorStateError(
            f"vendor/ is dirty: {len(findings)} finding(s) against vendor/UPSTREAM",
            "re-run ggml-vendor sync (add --force to discard local edits)",
        )
    if not as_json:
        ui.out.print(
            f"vendor/ matches vendor/UPSTREAM ({lock.commit[:12] if lock else '?'}, {len(lock.files) if lock else 0} files)"
        )


@app.command("sync", help=help_text.SYNC)
def sync(
    rev: Annotated[
        str | None,
        typer.Option(
            "--rev",
            "-r",
            help="Branch, tag or (short) sha to pin; recorded as the full commit id. Default: the locked commit.",
        ),
    ] = None,
    upstream: Annotated[
        str | None,
        typer.Option(
            "--upstream",
            "-u",
            help="URL, local clone path, or 'embedded' (the bundled miniature). Default: the 'upstream' key of pyproject's tool.ggml-vendor table.",
        ),
    ] = None,
    mirror: Annotated[
        Path | None,
        typer.Option(
            "--mirror",
            envvar="GGML_VENDOR_MIRROR",
            help="Local clone to read objects from instead of the network; the lock still records the upstream URL.",
        ),
    ] = None,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Offline: compare vendor/ with vendor/UPSTREAM (edited, missing, extra files); exit 4 when dirty.",
        ),
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Overwrite local edits and extra files in vendor/ (they are listed).")
    ] = False,
    drop_upstreamed: Annotated[
        bool, typer.Option("--drop-upstreamed", help="Delete patches that upstream already contains.")
    ] = False,
    verbose: VerboseOpt = False,
    dry_run: DryRunOpt = False,
    as_json: JsonOpt = False,
    no_wait: NoWaitOpt = False,
    project: ProjectOpt = None,
) -> None:
    def body() -> None:
        if check:
            _check(project, as_json)
            return
        cfg = config.load(project)
        req = SyncRequest(
            rev=rev,
            upstream=upstream,
            mirror=mirror,
            force=force,
            dry_run=dry_run,
            drop_upstreamed=drop_upstreamed,
            wait=not no_wait,
        )
        plan = None
        try:
            with ui.task("sync", verbose=verbose, quiet=as_json) as task:
                plan = sync_stage.plan(cfg, req, task.log)
                report = plan.dry_run_report() if dry_run else sync_stage.execute(plan, task.log)
            if as_json:
                ui.emit_json(report.to_json())
            else:
                _print_report(report, verbose)
        except KeyboardInterrupt:
            if plan is None or dry_run:
                raise  # nothing was written: the previous state was kept
            # Once a plan may have been carried out, say what vendor/ holds (the swap may be done).
            raise sync_stage.interrupted(plan) from None

    # Held from reading the current pin to printing the report: "already at A" is judged under the lock.
    run_guarded(body, verbose=verbose, lock=Locked(project, "sync", no_wait=no_wait, shared=check or dry_run))
