"""`ggml-vendor sync` (placeholder: being implemented; see the issue list)."""

from __future__ import annotations

import typer

from ..app import app


@app.command("sync", help="(not implemented yet)")
def sync() -> None:
    typer.echo("ggml-vendor sync: not implemented yet", err=True)
    raise typer.Exit(1)
