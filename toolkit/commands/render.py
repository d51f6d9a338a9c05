"""`ggml-vendor render` (placeholder: being implemented; see the issue list)."""

from __future__ import annotations

import typer

from ..app import app


@app.command("render", help="(not implemented yet)")
def render() -> None:
    typer.echo("ggml-vendor render: not implemented yet", err=True)
    raise typer.Exit(1)
