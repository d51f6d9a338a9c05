"""`ggml-vendor demo`: the whole pipeline on the embedded default, offline, with one report."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from toolkit.app import JsonOpt, ProjectOpt, app, run_guarded
from toolkit.core import ui
from toolkit.core.errors import VendorError

_STYLE = {"ok": "green", "failed": "red", "skipped": "dim"}


class DemoFailed(VendorError):
    exit_code = 1


@app.command("demo")
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
) -> None:
    """Run the whole pipeline offline on the miniature upstream bundled with the tool, in a throwaway copy of
    this project: sync -> render -> build (what this machine can) -> verify -> publish to a local test Hub
    -> kernels.get_kernel(repo, version=N) in a fresh process, which on a CUDA machine also runs both ops
    against float64 references. Prints one table (or --json) and exits non-zero if any stage failed. Your
    project, vendor/ and build/ are not touched."""

    def body() -> None:
        from toolkit.demo import run_demo

        say = (lambda m: None) if json_out else (lambda m: ui.note("…", m, style="dim", console=ui.err))
        report = run_demo(project, workspace=workspace, jobs=jobs, say=say, upstream=upstream, rev=rev)
        if json_out:
            ui.emit_json(report.to_json())
        else:
            table = Table(title="ggml-vendor demo")
            for col in ("stage", "status", "time", "detail"):
                table.add_column(col, overflow="fold")
            for s in report.stages:
                table.add_row(s.name, f"[{_STYLE[s.status]}]{s.status}[/]", f"{s.seconds:.1f}s", escape(s.detail))
            ui.out.print(table)
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

    run_guarded(body)
