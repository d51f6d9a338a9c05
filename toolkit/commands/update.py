"""`ggml-vendor update`: move the pin with the patches rebased, add torch rows, render, report (the PR body)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from toolkit import help as help_text
from toolkit.app import Options, Run, command, stage_run

if TYPE_CHECKING:
    from toolkit.outdated import update as update_stage


@command("update", help=help_text.UPDATE)
def update(
    opts: Options,
    rev: Annotated[
        str | None, typer.Option("--rev", "-r", help="Move the pin to this branch, tag or sha (not with --latest).")
    ] = None,
    latest: Annotated[
        bool, typer.Option("--latest", help="Move the pin to the upstream's head (the default without --rev).")
    ] = False,
    torch: Annotated[
        bool,
        typer.Option("--torch", help="Add the index's torch builds the matrix lacks (as `outdated` lists them)."),
    ] = False,
    upstream: Annotated[
        str | None,
        typer.Option("--upstream", "-u", help="URL, local clone path or 'embedded'. Default: the pin's upstream."),
    ] = None,
    mirror: Annotated[
        Path | None,
        typer.Option(
            "--mirror",
            envvar="GGML_VENDOR_MIRROR",
            help="Local clone to read objects and history from instead of the network.",
        ),
    ] = None,
    index_url: Annotated[
        str | None,
        typer.Option("--index-url", help="Simple index (PEP 503/691) for --torch. Default: pip's."),
    ] = None,
    report_file: Annotated[
        Path | None,
        typer.Option("--report-file", help="Also write the Markdown report (the pull request's body) to this file."),
    ] = None,
) -> Run[update_stage.Plan, update_stage.Report]:
    from toolkit.outdated import update as stage

    request = stage.Request(
        rev=rev,
        latest=latest,
        torch=torch,
        upstream=upstream,
        mirror=mirror,
        index_url=index_url,
        report_file=report_file,
    )
    return stage_run("updating", stage, request, announce=True, interrupted=stage.interrupted)
