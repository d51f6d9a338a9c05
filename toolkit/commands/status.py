"""`ggml-vendor status`: the pin, whether vendor/ is dirty, and the state of each patch (offline)."""

from __future__ import annotations

from toolkit import help as help_text
from toolkit.app import JsonOpt, Locked, NoWaitOpt, ProjectOpt, VerboseOpt, app, run_guarded
from toolkit.core import config, ui
from toolkit.sync import status as status_stage


@app.command("status", help=help_text.STATUS)
def status(
    as_json: JsonOpt = False, project: ProjectOpt = None, verbose: VerboseOpt = False, no_wait: NoWaitOpt = False
) -> None:
    def body() -> None:
        cfg = config.load(project)
        report = status_stage.execute(status_stage.plan(cfg))
        if as_json:
            ui.emit_json(report.to_json())
            return
        for line in report.lines(verbose):
            ui.out.print(line)

    run_guarded(body, verbose=verbose, lock=Locked(project, "status", no_wait, shared=True))
