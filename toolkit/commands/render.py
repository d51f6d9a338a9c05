"""`ggml-vendor render`: templates/ -> build.toml, torch-ext/, csrc/ (and `--check` that they are current)."""

from __future__ import annotations

from typing import Annotated

import typer

from toolkit.app import DryRunOpt, JsonOpt, Locked, NoWaitOpt, ProjectOpt, app, run_guarded
from toolkit.core import config as config_mod
from toolkit.core import ui
from toolkit.core.errors import RenderError
from toolkit.render import stage as render_mod

CheckOpt = Annotated[
    bool,
    typer.Option(
        "--check",
        help="Change nothing; exit 6 naming every generated file that is stale, missing, hand-edited "
        "or orphaned (what CI runs).",
    ),
]


def _render(project, check: bool, dry_run: bool, as_json: bool) -> None:
    cfg = config_mod.load(project)
    with ui.task("rendering templates", quiet=as_json):
        plan = render_mod.plan(cfg)
    drift = render_mod.check(plan)
    if check or dry_run:
        if as_json:
            ui.emit_json(
                {
                    "ok": not drift,
                    "files": [f.path for f in plan.files],
                    "drift": [{"path": d.path, "kind": d.kind} for d in drift],
                }
            )
        else:
            for d in drift:
                ui.out.print(f"{d.kind:8} {d.path}")
        if check and drift:
            names = ", ".join(f"{d.path} ({d.kind})" for d in drift)
            raise RenderError(
                f"generated files are out of date: {names}",
                "run `ggml-vendor render` and commit the result (never edit generated files)",
            )
        if not as_json and not drift:
            ui.out.print(f"{len(plan.files)} generated files are up to date")
        return
    changed = render_mod.write(plan)
    if as_json:
        ui.emit_json(
            {
                "ok": True,
                "files": [f.path for f in plan.files],
                "changed": [{"path": d.path, "kind": d.kind} for d in changed],
            }
        )
        return
    for d in changed:
        verb = "removed" if d.kind == "orphan" else "wrote"
        ui.out.print(f"{verb:8} {d.path}")
    ui.out.print(f"{len(plan.files)} generated files, {len(changed)} changed")


@app.command(
    "render",
    help=(
        "Render templates/ into build.toml, torch-ext/ and csrc/ (committed, generated code). Same inputs give "
        "the same bytes; --check fails naming any generated file that is stale or was edited by hand."
    ),
)
def render(
    project: ProjectOpt = None,
    check: CheckOpt = False,
    dry_run: DryRunOpt = False,
    as_json: JsonOpt = False,
    no_wait: NoWaitOpt = False,
) -> None:
    run_guarded(
        _render, project, check, dry_run, as_json, lock=Locked(project, "render", no_wait, shared=check or dry_run)
    )
