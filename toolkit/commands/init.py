"""`ggml-vendor init NAME`: add a package to the project (config entry, templates skeleton, variants, a test)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from toolkit import help as help_text
from toolkit.app import Options, Run, command, stage_run

if TYPE_CHECKING:
    from toolkit import init as init_stage


@command("init", help=help_text.INIT)
def init(
    opts: Options,
    name: Annotated[str, typer.Argument(help="The new package's kernel name (dash-case), e.g. gguf-kernels.")],
    op: Annotated[
        list[str],
        typer.Option(
            "--op",
            help="OP=PATH (a CUDA entry) or OP=BACKEND:PATH, upstream paths in the standalone-ggml layout "
            "(repeatable; at least one).",
        ),
    ] = [],  # noqa: B006
    hub_repo: Annotated[
        str | None, typer.Option("--hub-repo", help="Hub repo id (default: the selected package's owner/NAME).")
    ] = None,
    version: Annotated[int, typer.Option("--version", min=1, help="Major version (Hub branch v<N>).")] = 1,
) -> Run[init_stage.InitPlan, init_stage.InitReport]:
    from toolkit import init as init_stage  # deferred: keeps CLI start-up light

    request = init_stage.Request(name, tuple(op), hub_repo=hub_repo, version=version)
    return stage_run(f"adding package {name}", init_stage, request, interrupted=init_stage.interrupted)
