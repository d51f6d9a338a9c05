"""`ggml-vendor ci`: render the GitHub Actions workflow that builds every variant on a matching runner."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from toolkit import help as help_text
from toolkit.app import Options, Run, command, stage_run
from toolkit.core import ui

if TYPE_CHECKING:
    from toolkit.ci import workflow


def _show(result: workflow.Plan | workflow.Report, opts: Options) -> None:
    from toolkit.ci import workflow

    plan = result if isinstance(result, workflow.Plan) else result.plan
    for name, why in plan.workflow.skipped:
        ui.warn("no job", f"for {name}: {why}")
    for line in result.lines():
        ui.out.print(line)
    if opts.verbose:
        for r in plan.workflow.rows:
            ui.out.print(f"  {r.variant}: job {r.group} on {r.runner}" + (f" in {r.container}" if r.container else ""))


@command("ci", help=help_text.CI)
def ci(
    opts: Options,
    check: Annotated[
        bool,
        typer.Option("--check", help="Change nothing; exit 6 when the committed workflow is missing or stale."),
    ] = False,
) -> Run[workflow.Plan, workflow.Report]:
    from toolkit.ci import workflow  # deferred: keeps CLI start-up light

    request = workflow.Request(check=check)
    return stage_run(
        "rendering the CI workflow", workflow, request, show=_show, read_only=check, interrupted=workflow.interrupted
    )
