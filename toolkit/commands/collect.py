"""`ggml-vendor collect ARTIFACT...`: merge the per-variant artifacts of a CI fan-out into build/."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from toolkit import help as help_text
from toolkit.app import DryRunOpt, JsonOpt, Locked, NoWaitOpt, PackageOpt, ProjectOpt, VerboseOpt, app, run_guarded
from toolkit.core import ui
from toolkit.core.config import load
from toolkit.core.errors import ConfigError


def _table(report) -> Table:  # type: ignore[no-untyped-def]
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


def _collect(project, package: list[str], artifacts: list[Path], dry_run: bool, as_json: bool, verbose: bool) -> None:  # type: ignore[no-untyped-def]
    from toolkit.ci.collect import CollectError, collect  # deferred: keeps CLI start-up light

    views = load(project).selected(package)
    if len(views) > 1:
        raise ConfigError(
            f"the project holds {len(views)} packages and artifacts go into one package's build/",
            f"add --package NAME (one of {', '.join(v.name for v in views)})",
        )
    cfg = views[0]
    try:
        with ui.task("collecting artifacts", verbose=verbose, quiet=as_json) as t:
            report = collect(cfg, artifacts, dry_run=dry_run, progress=lambda name: t.log(f"checking {name}"))
    except CollectError as exc:
        report = getattr(exc, "report", None)
        if report is not None:
            if as_json:
                ui.emit_json(report.to_json())
            else:
                ui.out.print(_table(report))
        raise
    if as_json:
        ui.emit_json(report.to_json())
        return
    ui.out.print(_table(report))
    n = len(report.incoming)
    if report.committed:
        ui.note("collected", f"{n} variant(s) into {report.build_dir}; records merged into .verified.json")
    else:
        ui.out.print(f"{n} variant(s) would be collected; nothing changed (--dry-run)")


@app.command("collect", help=help_text.COLLECT)
def collect_cmd(
    artifacts: Annotated[
        list[Path], typer.Argument(help="Artifact directories or .zip files, or directories holding them.")
    ],
    project: ProjectOpt = None,
    package: PackageOpt = [],  # noqa: B006
    dry_run: DryRunOpt = False,
    json_: JsonOpt = False,
    verbose: VerboseOpt = False,
    no_wait: NoWaitOpt = False,
) -> None:
    run_guarded(
        _collect,
        project,
        package,
        artifacts,
        dry_run,
        json_,
        verbose,
        verbose=verbose,
        lock=Locked(project, "collect", no_wait, shared=dry_run),
    )
