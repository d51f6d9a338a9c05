"""`ggml-vendor status` (placeholder: being implemented; see the issue list)."""

from __future__ import annotations

import typer

from ..app import app


@app.command("status", help="(not implemented yet)")
def status() -> None:
    typer.echo("ggml-vendor status: not implemented yet", err=True)
    raise typer.Exit(1)
