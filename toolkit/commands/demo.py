"""`ggml-vendor demo` (placeholder: being implemented; see the issue list)."""

from __future__ import annotations

import typer

from ..app import app


@app.command("demo", help="(not implemented yet)")
def demo() -> None:
    typer.echo("ggml-vendor demo: not implemented yet", err=True)
    raise typer.Exit(1)
