"""`ggml-vendor collect ARTIFACT...`: merge the per-variant artifacts of a CI fan-out into build/."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from toolkit import help as help_text
from toolkit.app import Options, Run, command
from toolkit.core import ui
from toolkit.core.config import Config
from toolkit.core.errors import CollectError
from toolkit.core.stage import Log, Verdict, quiet


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


@dataclass(frozen=True)
class Collected(Verdict):
    """collect's outcome in the protocol's terms: the report, and the refusal (exit 11) when one was raised."""

    report: Any
    refusal: CollectError | None = None

    def failure(self) -> CollectError | None:
        return self.refusal

    def to_json(self) -> dict[str, Any]:
        return dict(self.report.to_json())


def _collector(artifacts: list[Path], dry_run: bool) -> Any:
    def run(cfg: Config, log: Log) -> Collected:
        from toolkit.ci.collect import collect  # deferred: keeps CLI start-up light

        try:
            return Collected(collect(cfg, artifacts, dry_run=dry_run, progress=lambda name: log(f"checking {name}")))
        except CollectError as exc:
            report = getattr(exc, "report", None)
            if report is None:
                raise
            return Collected(report, exc)

    return run


def _show(result: Collected, _opts: Options) -> None:
    report = result.report
    ui.out.print(_table(report))
    if not result.ok:
        return
    n = len(report.incoming)
    if report.committed:
        ui.note("collected", f"{n} variant(s) into {report.build_dir}; records merged into .verified.json")
    else:
        ui.out.print(f"{n} variant(s) would be collected; nothing changed (--dry-run)")


@command("collect", help=help_text.COLLECT, packages=True)
def collect_cmd(
    opts: Options,
    artifacts: Annotated[
        list[Path], typer.Argument(help="Artifact directories or .zip files, or directories holding them.")
    ],
) -> Run:
    # collect checks and swaps in one call: the command's plan is the request, its execute the call.
    return Run(
        "collecting artifacts",
        plan=lambda cfg, _log: cfg,
        execute=lambda cfg, log: _collector(artifacts, dry_run=False)(cfg, log),
        preview=lambda cfg: _collector(artifacts, dry_run=True)(cfg, quiet),
        show=_show,
        one_package=True,  # artifacts go into one package's build/
    )
