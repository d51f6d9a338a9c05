"""`ggml-vendor demo`: the whole pipeline on the embedded default, offline, with one report."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from toolkit import help as help_text
from toolkit.app import DryRunOpt, JsonOpt, ProjectOpt, VerboseOpt, app, run_guarded
from toolkit.core import ui
from toolkit.core.errors import VendorError

_STYLE = {"ok": "green", "failed": "red", "skipped": "dim"}


class DemoFailed(VendorError):
    exit_code = 1


@app.command("demo", help=help_text.DEMO)
def demo(
    project: ProjectOpt = None,
    json_out: JsonOpt = False,
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
    dry_run: DryRunOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    def body() -> None:
        from toolkit.demo import STAGES, run_demo

        if dry_run:
            where = workspace or "a temporary directory"
            if json_out:
                ui.emit_json({"dry_run": True, "workspace": str(where), "stages": list(STAGES)})
            else:
                ui.out.print(f"would run, in {where}: {' -> '.join(STAGES)}")
            return
        with ui.task("demo", verbose=verbose or not json_out, quiet=json_out) as task:
            report = run_demo(
                project,
                workspace=workspace,
                jobs=jobs,
                say=task.log,
                upstream=upstream,
                rev=rev,
                engine=engine,
                toolchain=toolchain,
            )
        if json_out:
            ui.emit_json(report.to_json())
        else:
            table = Table(title="ggml-vendor demo")
            for col in ("stage", "status", "time", "detail"):
                table.add_column(col, overflow="fold")
            for s in report.stages:
                table.add_row(s.name, f"[{_STYLE[s.status]}]{s.status}[/]", f"{s.seconds:.1f}s", escape(s.detail))
            ui.out.print(table, markup=True)  # cells carry styles; dynamic text in them is escaped
        kept = workspace is not None or keep or not report.ok
        if not kept:
            shutil.rmtree(report.workspace, ignore_errors=True)
        elif not json_out:
            ui.out.print(f"workspace kept at {report.workspace}")
        if not report.ok:
            failed = next(s for s in report.stages if s.status == "failed")
            raise DemoFailed(
                f"demo stage '{failed.name}' failed: {failed.detail}", f"inspect the workspace {report.workspace}"
            )

    run_guarded(body, verbose=verbose)
