"""`ggml-vendor patch save | list | drop`: our changes to the vendored ggml, kept as vendor/patches/*.patch."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from toolkit import help as help_text
from toolkit.app import DryRunOpt, JsonOpt, Locked, NoWaitOpt, ProjectOpt, VerboseOpt, app, run_guarded
from toolkit.core import config, ui

patch_app = typer.Typer(name="patch", help=help_text.PATCH, no_args_is_help=True, add_completion=False)
app.add_typer(patch_app, name="patch")

MirrorOpt = Annotated[
    Path | None,
    typer.Option(
        "--mirror",
        envvar="GGML_VENDOR_MIRROR",
        help="Local clone to read the pinned upstream from instead of the network.",
    ),
]


@patch_app.command("save", help=help_text.PATCH_SAVE)
def save(
    name: Annotated[str, typer.Argument(help="Patch name (e.g. gdn-decode); an existing one is refreshed.")],
    message: Annotated[
        str | None,
        typer.Option("--message", "-m", help="Description: first line the subject, then the body (why, before/after)."),
    ] = None,
    message_file: Annotated[
        Path | None, typer.Option("--file", "-F", help="Read the description from a file.", exists=False)
    ] = None,
    mirror: MirrorOpt = None,
    dry_run: DryRunOpt = False,
    as_json: JsonOpt = False,
    no_wait: NoWaitOpt = False,
    project: ProjectOpt = None,
    verbose: VerboseOpt = False,
) -> None:
    def body() -> None:
        from toolkit.core.errors import PatchError
        from toolkit.sync.patch_workflow import execute_save, plan_save

        msg = message
        if message_file is not None:
            if message is not None:
                raise PatchError("both -m and -F given", "pass the description one way")
            if not message_file.is_file():
                raise PatchError(f"{message_file} is not a readable file", "pass -F PATH to a text file")
            msg = message_file.read_text()
        cfg = config.load(project)
        plan = plan_save(cfg, name, msg, mirror=mirror)
        report = plan if dry_run else execute_save(plan)
        if as_json:
            ui.emit_json(report.to_json())
            return
        for line in report.lines():
            ui.out.print(line)

    run_guarded(body, verbose=verbose, lock=Locked(project, "patch", no_wait, shared=dry_run))


@patch_app.command("list", help=help_text.PATCH_LIST)
def list_(
    rev: Annotated[
        str | None, typer.Option("--rev", "-r", help="Check against this revision instead of the pin.")
    ] = None,
    mirror: MirrorOpt = None,
    as_json: JsonOpt = False,
    no_wait: NoWaitOpt = False,
    project: ProjectOpt = None,
    verbose: VerboseOpt = False,
) -> None:
    def body() -> None:
        from toolkit.sync.patch_workflow import list_patches

        cfg = config.load(project)
        report = list_patches(cfg, rev=rev, mirror=mirror)
        if as_json:
            ui.emit_json(report.to_json())
            return
        for line in report.lines(verbose):
            ui.out.print(line, markup=False)

    run_guarded(body, verbose=verbose, lock=Locked(project, "patch", no_wait, shared=True))


@patch_app.command("drop", help=help_text.PATCH_DROP)
def drop(
    name: Annotated[str, typer.Argument(help="Patch file name, or its name without NNNN- and .patch.")],
    mirror: MirrorOpt = None,
    dry_run: DryRunOpt = False,
    as_json: JsonOpt = False,
    no_wait: NoWaitOpt = False,
    project: ProjectOpt = None,
    verbose: VerboseOpt = False,
) -> None:
    def body() -> None:
        from toolkit.sync.patch_workflow import execute_drop, plan_drop

        cfg = config.load(project)
        plan = plan_drop(cfg, name, mirror=mirror)
        report = plan if dry_run else execute_drop(plan)
        if as_json:
            ui.emit_json(report.to_json())
        else:
            for line in report.lines():
                ui.out.print(line)

    run_guarded(body, verbose=verbose, lock=Locked(project, "patch", no_wait, shared=dry_run))
