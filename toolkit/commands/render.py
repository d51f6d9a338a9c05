"""`ggml-vendor render`: templates/ -> build.toml, torch-ext/, csrc/ (and `--check` that they are current)."""

from __future__ import annotations

from typing import Annotated

import typer

from toolkit import help as help_text
from toolkit import render as render_stage
from toolkit.app import (
    DryRunOpt,
    JsonOpt,
    Locked,
    NoWaitOpt,
    PackageOpt,
    ProjectOpt,
    VerboseOpt,
    app,
    for_each_package,
    run_guarded,
)
from toolkit.core import ui
from toolkit.core.config import Config
from toolkit.core.errors import RenderError

CheckOpt = Annotated[
    bool,
    typer.Option(
        "--check",
        help="Change nothing; exit 6 naming every generated file that is stale, missing, hand-edited "
        "or orphaned (what CI runs).",
    ),
]


def _shown(cfg: Config, path: str) -> str:
    """A rendered path as the user sees it: relative to the project root (packages/<name>/... for a later package)."""
    return (cfg.package_root / path).relative_to(cfg.root).as_posix()


def _render(cfg: Config, check: bool, dry_run: bool, as_json: bool, verbose: bool) -> None:
    with ui.task(f"rendering templates of {cfg.name}", verbose=verbose, quiet=as_json):
        plan = render_stage.plan(cfg)
    if check or dry_run:
        drift = render_stage.check(plan)
        if as_json:
            ui.emit_json(
                {
                    "ok": not drift,
                    "files": [_shown(cfg, f.path) for f in plan.files],
                    "drift": [{"path": _shown(cfg, d.path), "kind": d.kind} for d in drift],
                }
            )
        else:
            for d in drift:
                ui.out.print(f"{d.kind:8} {_shown(cfg, d.path)}")
            if verbose:
                for f in plan.files:
                    ui.out.print(
                        f"  {_shown(cfg, f.path)}  [dim]<- {cfg.package.templates}/{f.template}[/]", markup=True
                    )
        if check and drift:
            names = ", ".join(f"{_shown(cfg, d.path)} ({d.kind})" for d in drift)
            raise RenderError(
                f"generated files are out of date: {names}",
                "run `ggml-vendor render` and commit the result (never edit generated files)",
            )
        if not as_json and not drift:
            ui.out.print(f"{len(plan.files)} generated files of {cfg.name} are up to date")
        return
    report = render_stage.execute(plan)
    if as_json:
        ui.emit_json(
            {
                "ok": True,
                "files": [_shown(cfg, f.path) for f in plan.files],
                "changed": [{"path": _shown(cfg, d.path), "kind": d.kind} for d in report.changed],
            }
        )
        return
    for d in report.changed:
        verb = "removed" if d.kind == "orphan" else "wrote"
        ui.out.print(f"{verb:8} {_shown(cfg, d.path)}")
    ui.out.print(f"{len(plan.files)} generated files of {cfg.name}, {len(report.changed)} changed")


@app.command("render", help=help_text.RENDER)
def render(
    project: ProjectOpt = None,
    package: PackageOpt = [],  # noqa: B006
    check: CheckOpt = False,
    dry_run: DryRunOpt = False,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
    no_wait: NoWaitOpt = False,
) -> None:
    run_guarded(
        for_each_package,
        project,
        package,
        lambda cfg: _render(cfg, check, dry_run, as_json, verbose),
        as_json=as_json,
        verbose=verbose,
        lock=Locked(project, "render", no_wait, shared=check or dry_run),
    )
