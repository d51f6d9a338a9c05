"""`ggml-vendor collect ARTIFACT...`: merge the per-variant artifacts of a CI fan-out into build/."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from toolkit import help as help_text
from toolkit.app import Options, Run, command, stage_run
from toolkit.core import ui

if TYPE_CHECKING:
    from toolkit.ci import collect


def _table(report: Any) -> Table:
    table = Table(title="ggml-vendor collect" + (" (dry run)" if report.dry_run else ""))
    for col in ("variant", "artifact", "result", "detail"):
        table.add_column(col, overflow="fold")
    for i in report.incoming:
        verb = {"add": "added", "replace": "replaced"}[i.action] if report.committed else f"would {i.action}"
        detail = Text("re-checked here: " + ", ".join(i.rechecked))
        if i.record.get("hub_compliant") is False:
            detail.append(" (host toolchain: not for huggingface.co)", style="yellow")
        table.add_row(Text(i.variant), Text(i.artifact), Text(verb, style="green"), detail)
    for r in report.refusals:
        table.add_row(
            Text(r.variant or "-"), Text(r.artifact), Text(f"refused ({r.kind})", style="red"), Text(r.reason)
        )
    for name in report.kept:
        table.add_row(
            Text(name), Text("-"), Text("kept", style="dim"), Text("already in build/, no artifact replaces it")
        )
    return table


def _show(result: collect.Plan | collect.Report, _opts: Options) -> None:
    """The plan (--dry-run) or the report as a table, then what happened to build/."""
    ui.out.print(_table(result))
    if not result.ok:
        return
    n = len(result.incoming)
    if result.committed:
        ui.note("collected", f"{n} variant(s) into {result.build_dir}; records merged into .verified.json")
    else:
        ui.out.print(f"{n} variant(s) would be collected; nothing changed (--dry-run)")


@command("collect", help=help_text.COLLECT, packages=True)
def collect_cmd(
    opts: Options,
    artifacts: Annotated[
        list[Path], typer.Argument(help="Artifact directories or .zip files, or directories holding them.")
    ],
) -> Run[collect.Plan, collect.Report]:
    from toolkit.ci import collect  # deferred: keeps CLI start-up light

    request = collect.Request(tuple(artifacts))
    # The plan checks every artifact (a dry run prints it); execute copies and swaps what it admitted.
    return stage_run(
        "collecting artifacts", collect, request, show=_show, one_package=True, interrupted=collect.interrupted
    )
