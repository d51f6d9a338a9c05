"""`ggml-vendor status`: the pin, vendor/ against it and each patch's state (toolkit/sync/status.py's stage)."""

from __future__ import annotations

from toolkit import help as help_text
from toolkit.app import Options, Run, command, stage_run
from toolkit.core import ui
from toolkit.sync import status as status_stage


def _show(report: status_stage.StatusReport, opts: Options) -> None:
    for line in report.lines(opts.verbose):
        ui.out.print(line)


@command("status", help=help_text.STATUS, dry_run=False)
def status(opts: Options) -> Run:
    return stage_run("reading the pin", status_stage, status_stage.StatusRequest(), show=_show, read_only=True)
