"""`ggml-vendor verify [VARIANT...]`: check each build/<variant>/ before it can be published."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from toolkit import help as help_text
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
from toolkit.core.errors import VerifyError

_STYLE = {"pass": "green", "fail": "red", "warn": "yellow", "skip": "dim"}


def render_table(report) -> Table:  # type: ignore[no-untyped-def]
    from toolkit.verify.runner import summary_rows

    table = Table(title="verify", show_lines=False)
    for col in ("variant", "check", "status", "finding"):
        table.add_column(col, overflow="fold")
    for variant, check, status, message in summary_rows(report):
        table.add_row(variant, check, Text(status, style=_STYLE.get(status, "")), Text(message))
    return table


@app.command("verify", help=help_text.VERIFY)
def verify(
    variants: Annotated[list[str] | None, typer.Argument(help="Variant names under build/ (default: all).")] = None,
    project: ProjectOpt = None,
    package: PackageOpt = [],  # noqa: B006
    json_out: JsonOpt = False,
    no_smoke: Annotated[bool, typer.Option("--no-smoke", help="Skip the get_local_kernel import test.")] = False,
    host_toolchain: Annotated[
        bool,
        typer.Option(
            "--host-toolchain",
            help="Accept binaries above the manylinux_2_28 symbol ceilings (built with this "
            "machine's compiler) as a warning; such variants can be published to a "
            "private hub or git remote, never to huggingface.co.",
        ),
    ] = False,
    no_conformance: Annotated[
        bool,
        typer.Option(
            "--no-conformance",
            help="Skip running the ops against the float64 contract on this host's GPU (publish then refuses "
            "variants this host could have checked).",
        ),
    ] = False,
    dry_run: DryRunOpt = False,
    verbose: VerboseOpt = False,
    no_wait: NoWaitOpt = False,
) -> None:
    def body(cfg) -> None:  # type: ignore[no-untyped-def]
        from toolkit import verify as verify_stage

        options = verify_stage.VerifyOptions(
            smoke=not no_smoke, host_toolchain_ok=host_toolchain, conformance=not no_conformance
        )
        plan = verify_stage.plan(cfg, verify_stage.Request(tuple(variants or ()), options))
        if dry_run:
            if json_out:
                ui.emit_json({"dry_run": True, "variants": [str(p) for p in plan.paths]})
            else:
                for line in plan.lines():
                    ui.out.print(line, markup=False)
            return
        where = cfg.build_dir.relative_to(cfg.root).as_posix()
        with ui.task(f"verifying {where}/ variants of {cfg.name}", verbose=verbose, quiet=json_out) as task:
            report = verify_stage.execute(plan, task.log)
        if json_out:
            ui.emit_json(report.to_json())
        else:
            ui.out.print(render_table(report))
        if not report.ok:
            failures = report.failures()
            first = failures[0] if failures else None
            raise VerifyError(
                f"{len(failures)} check(s) failed"
                + (f"; first: {first.variant}: {first.check}: {first.message}" if first else ""),
                first.remedy if first and first.remedy else "fix the findings above and re-run ggml-vendor verify",
            )
        if not json_out:
            ui.note("verified", f"{len(report.variants)} variant(s); publish may ship them")

    run_guarded(
        for_each_package,
        project,
        package,
        body,
        as_json=json_out,
        verbose=verbose,
        lock=Locked(project, "verify", no_wait, shared=dry_run),
    )
