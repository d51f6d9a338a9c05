"""`ggml-vendor build` (placeholder: being implemented; see the issue list)."""

from __future__ import annotations

import typer

from ..app import app


@app.command("build", help="(not implemented yet)")
def build() -> None:
    typer.echo("ggml-vendor build: not implemented yet", err=True)
    raise typer.Exit(1)
