"""`ggml-vendor status`: the pin, vendor/ against it and each patch's state (a query: toolkit/sync/status.py)."""

from __future__ import annotations

from toolkit import help as help_text
from toolkit.app import Options, Run, command
from toolkit.core import ui
from toolkit.core.config import Config
from toolkit.core.stage import Log
from toolkit.sync import status as status_query
from toolkit.sync.status import StatusReport


def _show(report: StatusReport, opts: Options) -> None:
    for line in report.lines(opts.verbose):
        ui.out.print(line)


def _read(cfg: Config, _log: Log) -> StatusReport:
    return status_query.query(cfg)


@command("status", help=help_text.STATUS, dry_run=False)
def status(opts: Options) -> Run[StatusReport, StatusReport]:
    # A query: the runner's plan step reads the status, and there is nothing to execute.
    return Run("reading the pin", plan=_read, show=_show, read_only=True)
