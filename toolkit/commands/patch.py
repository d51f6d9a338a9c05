"""`ggml-vendor patch save | list | drop`: our changes to the vendored ggml, kept as vendor/patches/*.patch."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from toolkit import help as help_text
from toolkit.app import Options, Run, app, command, stage_run
from toolkit.core import ui
from toolkit.core.errors import PatchError

if TYPE_CHECKING:
    from toolkit.sync import patch_stage
    from toolkit.sync.patch_workflow import ListReport

patch_app = typer.Typer(
    name="patch", help=help_text.PATCH, no_args_is_help=True, add_completion=False, rich_markup_mode=None
)
app.add_typer(patch_app, name="patch")

MirrorOpt = Annotated[
    Path | None,
    typer.Option(
        "--mirror",
        envvar="GGML_VENDOR_MIRROR",
        help="Local clone to read the pinned upstream from instead of the network.",
    ),
]


def _description(message: str | None, message_file: Path | None) -> str | None:
    if message_file is None:
        return message
    if message is not None:
        raise PatchError("both -m and -F given", "pass the description one way")
    if not message_file.is_file():
        raise PatchError(f"{message_file} is not a readable file", "pass -F PATH to a text file")
    return message_file.read_text()


@command("save", help=help_text.PATCH_SAVE, group=patch_app, lock_name="patch")
def save(
    opts: Options,
    name: Annotated[
        str,
        typer.Argument(
            help="Patch name (e.g. gdn-decode); an existing one (by name, file name or number NNNN) is refreshed."
        ),
    ],
    message: Annotated[
        str | None,
        typer.Option("--message", "-m", help="Description: first line the subject, then the body (why, before/after)."),
    ] = None,
    message_file: Annotated[
        Path | None, typer.Option("--file", "-F", help="Read the description from a file.", exists=False)
    ] = None,
    mirror: MirrorOpt = None,
) -> Run[patch_stage.Plan, patch_stage.Report]:
    from toolkit.sync import patch_stage

    request = patch_stage.Request("save", name, _description(message, message_file), mirror)
    return stage_run("saving the patch", patch_stage, request, interrupted=patch_stage.interrupted)


@command("list", help=help_text.PATCH_LIST, group=patch_app, lock_name="patch", dry_run=False)
def list_(
    opts: Options,
    rev: Annotated[
        str | None, typer.Option("--rev", "-r", help="Check against this revision instead of the pin.")
    ] = None,
    mirror: MirrorOpt = None,
) -> Run[ListReport, ListReport]:
    from toolkit.sync.patch_workflow import list_patches

    def show(report: ListReport, opts: Options) -> None:
        for line in report.lines(opts.verbose):
            ui.out.print(line)

    return Run(
        "checking the patches",
        plan=lambda cfg, _log: list_patches(cfg, rev=rev, mirror=mirror),
        show=show,
        read_only=True,
    )


@command("drop", help=help_text.PATCH_DROP, group=patch_app, lock_name="patch")
def drop(
    opts: Options,
    name: Annotated[str, typer.Argument(help="Patch file name, or its name without NNNN- and .patch.")],
    mirror: MirrorOpt = None,
) -> Run[patch_stage.Plan, patch_stage.Report]:
    from toolkit.sync import patch_stage

    request = patch_stage.Request("drop", name, mirror=mirror)
    return stage_run("dropping the patch", patch_stage, request, interrupted=patch_stage.interrupted)
