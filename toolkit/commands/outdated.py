"""`ggml-vendor outdated`: what moved since the pin (upstream, patches, torch, clients), read only."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from toolkit import help as help_text
from toolkit.app import Options, PackageOpt, Run, command, stage_run
from toolkit.core.errors import ConfigError

if TYPE_CHECKING:
    from toolkit import outdated as outdated_stage


@command("outdated", help=help_text.OUTDATED)
def outdated(
    opts: Options,
    package: PackageOpt = [],  # noqa: B006 - read by the app into opts.packages (one survey for them all)
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
    rev: Annotated[
        str | None,
        typer.Option("--rev", "-r", help="Compare the pin with this revision instead of the upstream's head."),
    ] = None,
    index_url: Annotated[
        str | None,
        typer.Option(
            "--index-url",
            help="Simple index (PEP 503/691) to read releases from. Default: pip's (PIP_INDEX_URL, pip's "
            "configuration, else pip's default index).",
        ),
    ] = None,
    skip: Annotated[
        list[str],
        typer.Option("--skip", help="Do not check this section: upstream, patches, torch or clients (repeatable)."),
    ] = [],  # noqa: B006 - typer's idiom for a repeatable option
) -> Run[outdated_stage.Plan, outdated_stage.Report]:
    from toolkit import outdated as stage

    bad = [s for s in skip if s not in stage.stage.SECTIONS]
    if bad:
        raise ConfigError(f"--skip {bad[0]!r} is not a section", f"use one of {', '.join(stage.stage.SECTIONS)}")
    request = stage.Request(
        upstream=upstream, mirror=mirror, rev=rev, index_url=index_url, skip=tuple(skip), packages=opts.packages
    )
    return stage_run("checking what moved", stage, request, read_only=True)
