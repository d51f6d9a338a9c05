"""`ggml-vendor verify` (placeholder: being implemented; see the issue list)."""

from __future__ import annotations

import typer

from ..app import app


@app.command("verify", help="(not implemented yet)")
def verify() -> None:
    typer.echo("ggml-vendor verify: not implemented yet", err=True)
    raise typer.Exit(1)
