"""`ggml-vendor publish` (placeholder: being implemented; see the issue list)."""

from __future__ import annotations

import typer

from ..app import app


@app.command("publish", help="(not implemented yet)")
def publish() -> None:
    typer.echo("ggml-vendor publish: not implemented yet", err=True)
    raise typer.Exit(1)
