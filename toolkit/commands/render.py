"""`ggml-vendor render`: templates/<name>/ -> build/<name>/src/ (and `--check` that two renders are the same bytes)."""

from __future__ import annotations

from typing import Annotated

import typer

from toolkit import help as help_text
from toolkit import render as render_stage
from toolkit.app import Options, Run, command, stage_run
from toolkit.core import ui

CheckOpt = Annotated[
    bool,
    typer.Option(
        "--check",
        help="Change nothing; render every package twice and exit 6 naming every generated file whose "
        "bytes differ between the two renders (the reproducibility check CI runs).",
    ),
]


def _show(result: render_stage.Plan | render_stage.Report, opts: Options) -> None:
    for line in result.lines():
        ui.out.print(line)
    plan = result if isinstance(result, render_stage.Plan) else result.plan
    if opts.verbose and (opts.dry_run or plan.request.check):
        for f in plan.files:
            ui.out.print(f"  {plan.shown(f.path)}  <- {plan.templates}/{f.template}")


@command("render", help=help_text.RENDER, packages=True)
def render(opts: Options, check: CheckOpt = False) -> Run[render_stage.Plan, render_stage.Report]:
    request = render_stage.Request(check=check)
    label = "rendering templates"
    return stage_run(
        lambda cfg: f"{label} of {cfg.name}",
        render_stage,
        request,
        show=_show,
        read_only=check,
        interrupted=render_stage.interrupted,
    )
