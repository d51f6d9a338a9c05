"""`ggml-vendor variants` (placeholder: being implemented; see the issue list)."""

from __future__ import annotations

import typer

from ..app import app


@app.command("variants", help="(not implemented yet)")
def variants() -> None:
    typer.echo("ggml-vendor variants: not implemented yet", err=True)
    raise typer.Exit(1)
