"""Entry point of the `ggml-vendor` command: imports each command module so it registers on the app."""

from __future__ import annotations

import importlib

from .app import app

# One module per command under toolkit/commands/; each registers itself with @app.command().
COMMAND_MODULES = ("sync", "status", "render", "variants", "build", "verify", "publish", "demo")

for _name in COMMAND_MODULES:
    importlib.import_module(f"{__package__}.commands.{_name}")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
