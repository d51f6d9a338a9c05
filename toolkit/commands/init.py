"""`ggml-vendor init NAME`: add a package to the project (config entry, templates skeleton, variants, a test)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from toolkit import help as help_text
from toolkit.app import DryRunOpt, JsonOpt, Locked, NoWaitOpt, ProjectOpt, VerboseOpt, app, run_guarded
from toolkit.core import ui
from toolkit.core.config import load

if TYPE_CHECKING:
    from toolkit.init import Request


def _init(project: Path | None, request: Request, dry_run: bool, as_json: bool, verbose: bool) -> None:
    from toolkit import init as init_stage  # deferred: keeps CLI start-up light

    cfg = load(project)
    with ui.task(f"planning package {request.name}", verbose=verbose, quiet=as_json) as task:
        plan = init_stage.plan(cfg, request, task.log)
    if dry_run:
        if as_json:
            ui.emit_json({"dry_run": True, **plan.to_json()})
        else:
            for line in plan.lines():
                ui.out.print(line)
        return
    with ui.task(f"writing package {request.name}", verbose=verbose, quiet=as_json) as task:
        report = init_stage.execute(plan, task.log)
    if as_json:
        ui.emit_json(report.to_json())
        return
    for line in report.lines():
        ui.out.print(line)


@app.command("init", help=help_text.INIT)
def init(
    name: Annotated[str, typer.Argument(help="The new package's kernel name (dash-case), e.g. gguf-kernels.")],
    op: Annotated[
        list[str],
        typer.Option(
            "--op",
            help="OP=PATH (a CUDA entry) or OP=BACKEND:PATH, upstream paths in the standalone-ggml layout "
            "(repeatable; at least one).",
        ),
    ] = [],  # noqa: B006
    hub_repo: Annotated[
        str | None, typer.Option("--hub-repo", help="Hub repo id (default: the first package's owner/NAME).")
    ] = None,
    version: Annotated[int, typer.Option("--version", min=1, help="Major version (Hub branch v<N>).")] = 1,
    project: ProjectOpt = None,
    dry_run: DryRunOpt = False,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
    no_wait: NoWaitOpt = False,
) -> None:
    from toolkit.init import Request

    request = Request(name, tuple(op), hub_repo=hub_repo, version=version)
    run_guarded(
        _init,
        project,
        request,
        dry_run,
        as_json,
        verbose,
        verbose=verbose,
        lock=Locked(project, "init", no_wait, shared=dry_run),
    )
