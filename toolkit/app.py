"""The typer application object, the options every command shares, and the one place that turns failures
into exit codes. Command help texts are in toolkit/help.py."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from toolkit import help as help_text
from toolkit.core import ui
from toolkit.core.errors import Interrupted, VendorError

app = typer.Typer(
    name="ggml-vendor",
    help=help_text.APP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Shared option types, so every command spells them the same way.
ProjectOpt = Annotated[
    Path | None,
    typer.Option(
        "--project", "-C", help="Kernel package repository (default: found upwards from the cwd).", show_default=False
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print a JSON document on stdout instead of tables.")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Print the plan and change nothing.")]
VerboseOpt = Annotated[
    bool,
    typer.Option("--verbose", "-v", help="Show progress and details as they happen, and the traceback of an error."),
]
# `--variant` has no short form: `-v` is --verbose in every command.
VariantOpt = Annotated[
    list[str], typer.Option("--variant", help="Only variants whose name matches this glob (repeatable).")
]


def run_guarded(fn, *args, verbose: bool = False, **kwargs):  # type: ignore[no-untyped-def]
    """Run a command body; a VendorError becomes one red line and its exit code, preceded by the traceback
    with --verbose (or GGML_VENDOR_VERBOSE=1)."""
    try:
        return fn(*args, **kwargs)
    except VendorError as exc:
        if verbose or os.environ.get("GGML_VENDOR_VERBOSE"):
            import traceback

            traceback.print_exc()
        ui.err.print(f"[red]error:[/] {exc.one_line()}", markup=True)
        raise typer.Exit(exc.exit_code) from None
    except KeyboardInterrupt:
        ui.err.print(f"[yellow]interrupted:[/] {Interrupted('').one_line() or 'previous state kept'}")
        raise typer.Exit(Interrupted.exit_code) from None


@app.callback()
def _root() -> None:
    """Keeps `ggml-vendor` a command group even when the CLI registers only the one command it runs."""
