"""`ggml-vendor ci`: render the GitHub Actions workflow that builds every variant on a matching runner."""

from __future__ import annotations

from typing import Annotated

import typer

from toolkit import help as help_text
from toolkit.app import DryRunOpt, JsonOpt, Locked, NoWaitOpt, ProjectOpt, VerboseOpt, app, run_guarded
from toolkit.core import ui
from toolkit.core.config import load
from toolkit.core.errors import RenderError


def _ci(project, check: bool, dry_run: bool, as_json: bool, verbose: bool) -> None:  # type: ignore[no-untyped-def]
    from toolkit.ci import workflow  # deferred: keeps CLI start-up light

    cfg = load(project)
    with ui.task("rendering the CI workflow", verbose=verbose, quiet=as_json) as t:
        wf = workflow.render(cfg)
        for r in wf.rows:
            t.log(f"{r.variant}: {r.group} on {r.runner}" + (f" in {r.container}" if r.container else ""))
    state = workflow.drift(cfg, wf)
    changed = False
    if not (check or dry_run):
        changed = workflow.write(cfg, wf)
    if as_json:
        ui.emit_json(
            {
                "ok": not (check and state),
                "path": wf.path,
                "drift": state,
                "written": changed,
                "jobs": [
                    {"variant": r.variant, "job": r.group, "runner": r.runner, "container": r.container}
                    for r in wf.rows
                ],
                "skipped": [{"variant": n, "reason": why} for n, why in wf.skipped],
            }
        )
    else:
        for name, why in wf.skipped:
            ui.warn("no job", f"for {name}: {why}")
        groups: dict[str, int] = {}
        for r in wf.rows:
            groups[r.group] = groups.get(r.group, 0) + 1
        jobs = ", ".join(f"{g} x{n}" for g, n in groups.items())
        if check or dry_run:
            verdict = {None: "is up to date", "missing": "is missing", "stale": "is out of date"}[state]
            ui.out.print(f"{wf.path} {verdict} ({len(wf.rows)} variant jobs: {jobs})")
        else:
            ui.out.print(f"{'wrote' if changed else 'unchanged'} {wf.path} ({len(wf.rows)} variant jobs: {jobs})")
        if verbose:
            for r in wf.rows:
                ui.out.print(
                    f"  {r.variant}: job {r.group} on {r.runner}" + (f" in {r.container}" if r.container else "")
                )
    if check and state:
        raise RenderError(
            f"{wf.path} is {state}: it no longer matches the matrix and templates/ci/",
            "run `ggml-vendor ci` and commit the result (never edit the generated workflow)",
        )


@app.command("ci", help=help_text.CI)
def ci(
    project: ProjectOpt = None,
    check: Annotated[
        bool,
        typer.Option("--check", help="Change nothing; exit 6 when the committed workflow is missing or stale."),
    ] = False,
    dry_run: DryRunOpt = False,
    json_: JsonOpt = False,
    verbose: VerboseOpt = False,
    no_wait: NoWaitOpt = False,
) -> None:
    run_guarded(
        _ci,
        project,
        check,
        dry_run,
        json_,
        verbose,
        verbose=verbose,
        lock=Locked(project, "ci", no_wait, shared=check or dry_run),
    )
