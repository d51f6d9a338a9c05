"""`ggml-vendor demo`: the whole pipeline on the embedded default, offline, with one report."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from toolkit import help as help_text
from toolkit.app import Options, Run, command
from toolkit.core import ui

if TYPE_CHECKING:
    from toolkit import demo as demo_stage

_STYLE = {"ok": "green", "failed": "red", "skipped": "dim"}


def _show(result: demo_stage.Plan | demo_stage.DemoReport, _opts: Options) -> None:
    from toolkit.demo import Plan

    if isinstance(result, Plan):
        for line in result.lines():
            ui.out.print(line)  # plain text: paths and package names, never markup
        return
    table = Table(title="ggml-vendor demo")
    for col in ("stage", "status", "time", "detail"):
        table.add_column(col, overflow="fold")
    for s in result.stages:
        table.add_row(s.name, f"[{_STYLE[s.status]}]{s.status}[/]", f"{s.seconds:.1f}s", escape(s.detail))
    ui.out.print(table, markup=True)  # cells carry styles; dynamic text in them is escaped
    if result.kept:
        ui.out.print(f"workspace kept at {result.workspace}")


@command("demo", help=help_text.DEMO, lock=False)
def demo(
    opts: Options,
    workspace: Annotated[
        Path | None, typer.Option("--workspace", help="Run in this directory (kept) instead of a temporary one.")
    ] = None,
    keep: Annotated[bool, typer.Option("--keep", help="Keep the temporary workspace for inspection.")] = False,
    jobs: Annotated[int | None, typer.Option("--jobs", "-j", help="Parallel compile jobs.")] = None,
    upstream: Annotated[
        str | None,
        typer.Option(
            "--upstream", help="Use this ggml / llama.cpp (local clone or URL) instead of the bundled miniature."
        ),
    ] = None,
    rev: Annotated[str | None, typer.Option("--rev", help="Revision of --upstream (default HEAD).")] = None,
    engine: Annotated[str, typer.Option("--engine", help="Build engine, as for `ggml-vendor build`.")] = "auto",
    toolchain: Annotated[
        str, typer.Option("--toolchain", help="Host C++ toolchain, as for `ggml-vendor build`.")
    ] = "auto",
) -> Run[demo_stage.Plan, demo_stage.DemoReport]:
    from toolkit import demo as demo_stage

    request = demo_stage.Request(
        workspace=workspace, keep=keep, jobs=jobs, upstream=upstream, rev=rev, engine=engine, toolchain=toolchain
    )
    # The demo works on a copy: it needs no project here (its plan finds the one to copy) and takes no lock.
    return Run.alone(
        "demo",
        lambda log: demo_stage.plan(opts.project, request, log),
        execute=demo_stage.execute,
        show=_show,
        live=True,
        interrupted=demo_stage.interrupted,
    )
