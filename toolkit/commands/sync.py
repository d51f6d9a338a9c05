"""`ggml-vendor sync`: pin an upstream revision into vendor/ (or check vendor/ against its lock)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from toolkit import help as help_text
from toolkit import sync as sync_stage
from toolkit.app import Options, Run, command
from toolkit.core import config, ui
from toolkit.core.errors import VendorStateError
from toolkit.core.lock import Lock, read_lock
from toolkit.core.stage import Log, Verdict
from toolkit.sync.project_plan import SyncRequest
from toolkit.sync.report import SyncReport
from toolkit.sync.vendor_tree import TreeFinding, check_vendor


def _print_report(rep: SyncReport, opts: Options) -> None:
    for line in rep.lines(opts.verbose):
        ui.out.print(line)


@dataclass(frozen=True)
class VendorCheck(Verdict):
    """`sync --check` as a Report: vendor/ against vendor/UPSTREAM, offline (exit 4 when dirty)."""

    findings: tuple[TreeFinding, ...]
    lock: Lock | None

    def failure(self) -> VendorStateError | None:
        if not self.findings:
            return None
        return VendorStateError(
            f"vendor/ is dirty: {len(self.findings)} finding(s) against vendor/UPSTREAM",
            "re-run ggml-vendor sync (add --force to discard local edits)",
        )

    def lines(self) -> list[str]:
        if self.findings:
            return [f"  {f.line()}" for f in self.findings]
        lock = self.lock
        return [
            f"vendor/ matches vendor/UPSTREAM ({lock.commit[:12] if lock else '?'}, {len(lock.files) if lock else 0} files)"
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "clean": not self.findings,
            "commit": self.lock.commit if self.lock else None,
            "findings": [f.to_json() for f in self.findings],
        }


def _check(cfg: config.Config, _log: Log) -> VendorCheck:
    return VendorCheck(tuple(check_vendor(cfg)), read_lock(cfg.vendor_dir))


@command("sync", help=help_text.SYNC)
def sync(
    opts: Options,
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
) -> Run[VendorCheck, VendorCheck] | Run[sync_stage.Plan, SyncReport]:
    # Held from reading the current pin to printing the report: "already at A" is judged under the lock.
    if check:
        return Run("checking vendor/", plan=_check, read_only=True)
    req = SyncRequest(
        rev=rev,
        upstream=upstream,
        mirror=mirror,
        force=force,
        dry_run=opts.dry_run,
        drop_upstreamed=drop_upstreamed,
        wait=opts.wait,
    )
    return Run(
        "sync",
        plan=lambda cfg, log: sync_stage.plan(cfg, req, log),
        execute=sync_stage.execute,
        preview=lambda plan: plan.dry_run_report(),
        show=_print_report,
        interrupted=sync_stage.interrupted,
    )
